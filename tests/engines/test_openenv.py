"""OpenEnv both ways, on loopback: ``agentr1 serve-env`` (OpenEnv's own server) played by OpenEnv's own client, and
``AgentR1/OpenEnv-v0`` (our client) against it and against an env from OpenEnv's ecosystem.

openenv 0.10 pins fastmcp<4 (mcp 1.x) where the main environment's [mcp] extra needs mcp 2: these tests run in
their own virtualenv, ``bash .ci/engine-tests openenv`` (.ci/run does), and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

pytest.importorskip("openenv")
websockets = pytest.importorskip("websockets")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

import agentr1_gym  # noqa: E402
from agentr1_gym.env_server import build_app, write_space  # noqa: E402
from agentr1_gym.envs.openenv import EnvServerError  # noqa: E402

pytestmark = pytest.mark.timeout(300)

#: one env of every family, with settings that keep an oracle episode short
FAMILIES = {
    "AgentR1/SyntheticMultihop-v0": {},
    "AgentR1/HotpotQA-v0": {},
    "AgentR1/Calculator-v0": {},
    "AgentR1/HumanEval-v0": {},
    "AgentR1/RG-BasicArithmetic-v0": {},
    "AgentR1/TextWorld-CoinCollector-v0": {"level": 2, "num_games": 2},
    "AgentR1/WebShop-v0": {},
    "AgentR1/Mixture-v0": {},
}


@contextlib.contextmanager
def served(app, *, sock: socket.socket | None = None):
    """``app`` under uvicorn on a free loopback port, in a thread; yields the base URL."""
    import uvicorn

    sock = sock or socket.socket()
    if sock.getsockname()[1] == 0:
        sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="error", ws_max_size=16 * 1024 * 1024, lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _new_session(url: str) -> dict:
    """Open a WebSocket session and reset it: the answer (a full server sends its error as soon as it accepts)."""
    with connect(url.replace("http", "ws") + "/ws") as ws:
        try:
            return json.loads(ws.recv(timeout=0.5))
        except TimeoutError:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            return json.loads(ws.recv(timeout=10))


def _oracle_trace(env, seed, turns=12):
    """A direct episode under the oracle: (first observation, [(action, observation, reward, done)])."""
    obs, _ = env.reset(seed=seed)
    steps = []
    for _ in range(turns):
        action = env.unwrapped.oracle_action()
        obs2, reward, terminated, truncated, _info = env.step(action)
        steps.append((action, obs2, reward, terminated or truncated))
        if terminated or truncated:
            break
    return obs, steps


# ---- serve: OpenEnv's own client on every env family ---------------------------------------------------------
@pytest.mark.parametrize("env_id", sorted(FAMILIES))
def test_openenv_client_plays_an_oracle_episode_equal_to_direct(env_id):
    kwargs = FAMILIES[env_id]
    direct = agentr1_gym.make(env_id, **kwargs)
    first, steps = _oracle_trace(direct, seed=3)
    assert steps[-1][3] and steps[-1][2] > 0  # the oracle ends the episode with a reward
    with served(build_app(env_id, kwargs, max_sessions=2)) as url:
        assert _get(f"{url}/health")["status"] == "healthy"
        schema = _get(f"{url}/schema")
        assert {"text", "tool_name", "arguments"} <= set(schema["action"]["properties"])
        assert _get(f"{url}/metadata")["name"] == env_id
        with GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(seed=3)
            assert result.observation["text"] == first and not result.done
            meta = result.metadata or result.observation["metadata"]
            assert meta["task_id"] and meta["tools"] and "gold" not in json.dumps(meta).lower()
            for action, obs, reward, done in steps:
                result = client.step({"text": action})
                assert result.observation["text"] == obs
                assert result.reward == pytest.approx(reward) and result.done == done
                meta = result.metadata or result.observation["metadata"]
                assert sum(meta["reward_components"].values()) == pytest.approx(reward)
            assert "metrics" in meta and meta["metrics"]["success"] == 1.0


def test_a_tool_call_action_is_written_by_the_env_s_format():
    env_id = "AgentR1/SyntheticMultihop-v0"
    direct = agentr1_gym.make(env_id).unwrapped
    direct.reset(seed=0)
    title = direct.task.supporting_titles[0]
    want, *_ = direct.step(direct.call_text("search", query=title))
    with served(build_app(env_id)) as url, GenericEnvClient(base_url=url).sync() as client:
        client.reset(seed=0)
        result = client.step({"tool_name": "search", "arguments": {"query": title}})
        assert result.observation["text"] == want and result.reward > 0


def test_sessions_are_isolated_and_the_limit_holds():
    """16 concurrent sessions each play their own episode; the 17th gets OpenEnv's capacity error; a closed
    session frees its slot."""
    env_id = "AgentR1/SyntheticMultihop-v0"
    direct = agentr1_gym.make(env_id)
    traces = {seed: _oracle_trace(direct, seed) for seed in range(16)}
    with served(build_app(env_id, max_sessions=16)) as url:
        clients = [GenericEnvClient(base_url=url).sync() for _ in range(16)]
        errors: list[BaseException] = []

        def play(seed: int) -> None:
            try:
                client = clients[seed]
                first, steps = traces[seed]
                assert client.reset(seed=seed).observation["text"] == first
                for action, obs, reward, _ in steps:
                    result = client.step({"text": action})
                    assert result.observation["text"] == obs and result.reward == pytest.approx(reward)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=play, args=(s,)) for s in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:3]
        answer = _new_session(url)
        assert answer["type"] == "error" and answer["data"]["code"] == "CAPACITY_REACHED"
        assert answer["data"]["max_sessions"] == 16
        clients[0].close()
        deadline = time.monotonic() + 10
        while _new_session(url)["type"] != "observation":
            assert time.monotonic() < deadline, "a closed session's slot did not come back"
            time.sleep(0.1)
        for client in clients[1:]:
            client.close()


def test_bad_clients_do_not_hurt_the_server():
    """A client that vanishes mid-episode, malformed messages, an action the schema refuses, a step after the end and
    a 10 MB action: each gets an answer (or nothing), and the server keeps serving."""
    env_id = "AgentR1/SyntheticMultihop-v0"
    with served(build_app(env_id, max_sessions=4)) as url:
        ws_url = url.replace("http", "ws") + "/ws"
        for _ in range(6):  # more than max_sessions: each vanished client's slot comes back
            ws = connect(ws_url).__enter__()
            ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
            assert json.loads(ws.recv(timeout=10))["type"] == "observation"
            ws.socket.close()  # gone without a close frame
            time.sleep(0.05)
        with connect(ws_url, max_size=None) as ws:

            def ask(raw: str) -> dict:
                ws.send(raw)
                return json.loads(ws.recv(timeout=60))

            assert ask("{not json")["data"]["code"] == "INVALID_JSON"
            assert ask(json.dumps({"type": "dance"}))["data"]["code"] == "UNKNOWN_TYPE"
            assert ask(json.dumps({"type": "reset", "data": {"seed": 2}}))["type"] == "observation"
            refused = ask(json.dumps({"type": "step", "data": {"text": 5, "extra": 1}}))
            assert refused["type"] == "error"
            big = ask(json.dumps({"type": "step", "data": {"text": "x" * (10 * 1024 * 1024)}}))
            assert big["type"] == "observation"
            assert "limit" in big["data"]["metadata"]["action_error"] and big["data"]["reward"] < 0
            out = ask(json.dumps({"type": "step", "data": {"text": "<answer>nothing</answer>"}}))
            assert out["data"]["done"]
            after = ask(json.dumps({"type": "step", "data": {"text": "again"}}))
            assert after["type"] == "error" and "reset" in after["data"]["message"]
            assert ask(json.dumps({"type": "reset", "data": {"seed": 3}}))["type"] == "observation"
        assert _get(f"{url}/health")["status"] == "healthy"


def test_a_user_task_is_served_by_module_id(tmp_path, monkeypatch):
    (tmp_path / "served_task.py").write_text(
        "import agentr1_gym\n"
        "agentr1_gym.register_task('Served/Echo-v0', [{'q': 'say hi', 'a': 'hi'}], prompt='{q}', answer_field='a')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        served(build_app("served_task:Served/Echo-v0")) as url,
        GenericEnvClient(base_url=url).sync() as client,
    ):
        assert "say hi" in client.reset(seed=0).observation["text"]
        result = client.step({"text": "<answer>hi</answer>"})
        assert result.done and result.reward > 0


def test_serve_env_command_serves_and_writes_a_space(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentr1_gym.cli", "serve-env", "AgentR1/Calculator-v0", "--port", str(port),
         "--max-sessions", "2", "--env-arg", "max_turns=6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180  # openenv's server imports gradio: seconds on a busy machine
        while True:
            try:
                _get(f"{url}/health")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(
                        proc.stderr.read() if proc.poll() is not None else "no server"
                    ) from None
                time.sleep(0.2)
        env = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, max_turns=6)
        direct = agentr1_gym.make("AgentR1/Calculator-v0", max_turns=6)
        assert env.reset(seed=5)[0] == direct.reset(seed=5)[0]
        env.close()
    finally:
        proc.terminate()
        proc.wait(10)
    out = tmp_path / "space"
    done = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "serve-env", "AgentR1/Calculator-v0", "--env-arg",
         "max_turns=6", "--write-space", str(out)], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["Dockerfile", "README.md", "openenv.yaml", "server/__init__.py", "server/app.py"]
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser  # OpenEnv's own manifest parser

    manifest = OpenEnvYamlParser().parse(out)
    assert (
        manifest.name == "agentr1_calculator_v0" and manifest.reward.range[0] < 0 < manifest.reward.range[1]
    )
    direct = agentr1_gym.make("AgentR1/Calculator-v0", max_turns=6)
    direct.reset(seed=0)
    assert manifest.reward.range[1] >= direct.unwrapped.max_episode_reward() - 1e-9  # 4 decimals, rounded up
    manifest_text = (out / "openenv.yaml").read_text()
    assert "app: server.app:app" in manifest_text and "runtime: fastapi" in manifest_text
    app_py = (out / "server" / "app.py").read_text()
    namespace: dict = {}
    exec(compile(app_py, "app.py", "exec"), namespace)  # the Space's app builds
    assert namespace["ENV_KWARGS"] == {"max_turns": 6} and namespace["app"] is not None
    docker = (out / "Dockerfile").read_text()
    assert 'CMD ["uvicorn", "server.app:app"' in docker and "agentr1-gym[openenv]" in docker
    assert "sdk: docker" in (out / "README.md").read_text()
    with pytest.raises(Exception, match="not empty"):
        write_space(out, "AgentR1/Calculator-v0")


# ---- consume: AgentR1/OpenEnv-v0 -------------------------------------------------------------------------------------
def _episode(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [(obs, info["messages"], info["tools"])]
    for action in actions:
        out = env.step(action)
        trace.append((*out[:4], {k: out[4][k] for k in ("reward_components", "action_error", "messages")}))
        if out[2] or out[3]:
            trace.append(out[4]["metrics"])
            break
    return trace


@pytest.mark.parametrize("env_id", ["AgentR1/SyntheticMultihop-v0", "AgentR1/TextWorld-CoinCollector-v0"])
def test_round_trip_gives_the_direct_episode(env_id):
    kwargs = FAMILIES[env_id]
    direct = agentr1_gym.make(env_id, **kwargs)
    _, steps = _oracle_trace(direct, seed=4)
    actions = ["no tool call here", *[a for a, *_ in steps]]
    with served(build_app(env_id, {**kwargs, "max_turns": 20})) as url:
        remote = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, max_turns=20)
        again = agentr1_gym.make(env_id, max_turns=20, **kwargs)
        assert _episode(remote, 4, actions) == _episode(again, 4, actions)
        assert remote.unwrapped.max_episode_reward() == pytest.approx(direct.unwrapped.max_episode_reward())
        remote.close()


def test_the_remote_env_passes_check_env_pickles_and_rolls_out_token_exact(tok):
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.testing import alternating_script
    from gymnasium.utils.env_checker import check_env

    from agentr1_gym.rollout import collect_rollouts

    env_id = "AgentR1/SyntheticMultihop-v0"
    with served(build_app(env_id, max_sessions=8)) as url:
        remote = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url)
        check_env(remote.unwrapped, skip_render_check=True)
        copy = pickle.loads(pickle.dumps(remote))
        assert copy.reset(seed=1)[0] == remote.reset(seed=1)[0]
        copy.close()
        gen = ScriptedGenerator(tok, alternating_script)
        directs = [agentr1_gym.make(env_id) for _ in range(2)]
        remotes = [agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url) for _ in range(2)]
        a = collect_rollouts(directs, gen, tok, seeds=[0, 1], max_episode_tokens=1536)
        b = collect_rollouts(remotes, ScriptedGenerator(tok, alternating_script), tok, seeds=[0, 1],
                             max_episode_tokens=1536)  # fmt: skip
        for x, y in zip(a, b):
            assert (x.prompt_ids, x.completion_ids, x.action_mask, x.rewards) == (
                y.prompt_ids, y.completion_ids, y.action_mask, y.rewards)  # fmt: skip
        for env in [*remotes, remote]:
            env.close()


def test_a_dropped_connection_reattaches_to_the_same_episode():
    env_id = "AgentR1/SyntheticMultihop-v0"
    direct = agentr1_gym.make(env_id)
    _, steps = _oracle_trace(direct, seed=6)
    with served(build_app(env_id)) as url:
        remote = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, max_turns=20).unwrapped
        remote.reset(seed=6)
        for i, (action, obs, reward, _) in enumerate(steps):
            if i % 2 == 0:
                remote._session.ws.socket.close()  # the network drops the connection between turns
            got = remote.step(action)
            assert got[0] == obs and got[1] == pytest.approx(reward)
        remote.close()


def test_infrastructure_failures_raise_and_never_hang():
    env_id = "AgentR1/SyntheticMultihop-v0"
    with served(build_app(env_id, max_sessions=1)) as url:
        first = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, timeout_s=5)
        first.reset(seed=0)
        second = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, timeout_s=5)
        with pytest.raises(EnvServerError, match="full"):
            second.reset(seed=0)
        first.close()
        second.reset(seed=0)
        second.close()
    # the server is gone: a clear error within the timeout
    env = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, timeout_s=2, episode_timeout_s=3)
    start = time.monotonic()
    with pytest.raises(EnvServerError, match="cannot reach"):
        env.reset(seed=0)
    assert time.monotonic() - start < 10


def test_a_server_that_never_answers_times_out():
    """A TCP listener that accepts and says nothing: the reset fails within timeout_s, it does not hang."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, timeout_s=1.5, episode_timeout_s=3)
    start = time.monotonic()
    with pytest.raises(EnvServerError):
        env.reset(seed=0)
    assert time.monotonic() - start < 8
    sock.close()


def test_eval_and_play_on_a_remote_env(capsys):
    from agentr1_gym.cli import main

    with served(build_app("AgentR1/SyntheticMultihop-v0", max_sessions=4)) as url:
        assert main(["eval", "AgentR1/OpenEnv-v0", "--env-arg", f"base_url={url}", "--policy", "no-tool",
                     "--episodes", "4", "--no-progress"]) == 0  # fmt: skip
        out = capsys.readouterr().out
        assert '"episodes": 4' in out


def test_stock_trl_grpo_trains_two_steps_through_openenv(tmp_path):
    """TRL's own GRPOTrainer, its rollout_func from our bridge, every episode played on the OpenEnv server."""
    import torch
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.stock_trl import env_return, make_rollout_func, prompt_dataset
    from agentr1_trl.testing import alternating_script, tiny_model, tiny_tokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = tiny_tokenizer()
    model = tiny_model(tok)
    with served(build_app("AgentR1/SyntheticMultihop-v0", max_sessions=12)) as url:
        env_kwargs = {"base_url": url, "max_turns": 3}
        seeds = range(4)
        rollout = make_rollout_func(
            "AgentR1/OpenEnv-v0", seeds, env_kwargs=env_kwargs, max_new_tokens_per_turn=16,
            max_episode_tokens=1536, generator_factory=lambda trainer: ScriptedGenerator(tok, alternating_script),
        )  # fmt: skip
        args = GRPOConfig(
            output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=2,
            learning_rate=1e-3, report_to="none", save_strategy="no", use_cpu=True, bf16=False,
            logging_steps=1, max_completion_length=16,
        )  # fmt: skip
        trainer = GRPOTrainer(model=model, reward_funcs=[env_return], args=args, processing_class=tok,
                              train_dataset=prompt_dataset("AgentR1/OpenEnv-v0", seeds, env_kwargs),
                              rollout_func=rollout)  # fmt: skip
        before = {k: v.clone() for k, v in model.named_parameters()}
        trainer.train()
        assert trainer.state.global_step == 2
        assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())


# ---- an env from OpenEnv's ecosystem --------------------------------------------------------------------------------
#: DIPG Safety (``openenv-dipg-safety`` on PyPI): a medical-safety env whose server is OpenEnv's, published as a
#: package, not only as a Docker image or a Space. The reward settings are its server's defaults (its app reads them
#: from environment variables); the dataset is a local one of its format (its default is a Hub dataset).
DIPG_SETTINGS = dict(
    dataset_path="", conflict_reward=10.0, abstain_reward=10.0, hallucination_penalty=-20.0,
    missing_answer_penalty=-15.0, hallucinated_trace_penalty=-25.0, proof_inconsistency_penalty=-20.0,
    incorrect_answer_penalty=-10.0, conflict_penalty=-15.0, abstain_penalty=-15.0, missing_trace_penalty=-20.0,
    correct_abstention_reward=10.0, verifiable_trace_reward=5.0, correct_synthesis_reward=20.0,
    exact_format_reward=10.0, format_mismatch_penalty=-50.0, no_hallucination_reward=15.0,
    analysis_channel_start="<|channel|>analysis<|message|>", proof_channel_start="<|channel|>proof<|message|>",
    final_channel_start="<|channel|>final<|message|>", channel_end="<|end|>",
)  # fmt: skip


def test_an_env_from_openenv_s_ecosystem_is_consumed_and_played():
    import functools

    pytest.importorskip("med_safety_gym")
    from datasets import Dataset
    from med_safety_gym.dipg_environment import DIPGEnvironment
    from med_safety_gym.models import DIPGAction, DIPGObservation
    from openenv.core.env_server.http_server import create_fastapi_app

    rows = [{"messages": [
        {"role": "user", "content": "<context>The trial enrolled 40 patients. The median survival was 11 months."
                                    "</context>\n<question>What was the median survival?</question>"},
        {"role": "assistant", "content": "11 months"},
    ]}]  # fmt: skip
    factory = functools.partial(DIPGEnvironment, **DIPG_SETTINGS, dataset=Dataset.from_list(rows))
    formatted = (
        "<|channel|>analysis<|message|>The context gives it.<|end|>"
        "<|channel|>proof<|message|>The median survival was 11 months.<|end|>"
        "<|channel|>final<|message|>11 months<|end|>"
    )
    want = {}
    for turn in (formatted, "no idea"):  # DIPG's own scores, env called directly
        direct = factory()
        direct.reset()
        want[turn] = direct.step(DIPGAction(llm_response=turn)).reward
    assert want[formatted] != want["no idea"]
    app = create_fastapi_app(factory, DIPGAction, DIPGObservation, max_concurrent_envs=1)
    with served(app) as url:
        env = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, max_turns=2)
        for turn in (formatted, "no idea"):
            obs, info = env.reset(seed=0)
            assert "median survival" in obs and info["messages"] == [{"role": "user", "content": obs}]
            _, reward, terminated, truncated, info = env.step(turn)
            assert reward == want[turn] and terminated and not truncated
            assert info["metrics"]["success"] == float(reward > 0) and info["outcome_reward"] == reward
        assert env.unwrapped._text_field(env.unwrapped._session) == "llm_response"
        env.close()


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_our_trainers_train_through_openenv_and_the_viewer_shows_it(tmp_path, tiny_dir, algo, capsys):
    from test_trl_durable import TINY_FLAGS  # the tiny runs' flags: no warm start, no evaluations, LoRA r=2

    from agentr1_gym.cli import main

    with served(build_app("AgentR1/SyntheticMultihop-v0", {"max_turns": 3}, max_sessions=8)) as url:
        out = tmp_path / "run"
        argv = ["train", "--env", "AgentR1/OpenEnv-v0", "--env-kwargs", json.dumps({"base_url": url, "max_turns": 3}),
                "--algo", algo, "--model", tiny_dir, "--max-steps", "1", *TINY_FLAGS, "--set",
                "generation_backend=hf", "--output-dir", str(out)]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in rows)
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert episodes and all(e["turns"] for e in episodes)
    assert main(["view", str(out)]) == 0
    assert "<html" in (out / "view.html").read_text()[:500].lower()


def test_play_on_a_remote_env(monkeypatch, capsys):
    import io

    from agentr1_gym.cli import main

    with served(build_app("AgentR1/SyntheticMultihop-v0")) as url:
        monkeypatch.setattr("sys.stdin", io.StringIO("hello\n<answer>x</answer>\n/quit\n"))
        assert main(["play", "AgentR1/OpenEnv-v0", "--env-arg", f"base_url={url}"]) == 0
    out = capsys.readouterr().out
    assert "turn 1" in out and "episode terminated" in out


def test_adversarial_turns_through_the_remote_env_never_raise():
    """Model output through AgentR1/OpenEnv-v0 is the env's business on the server: 2,000 random and adversarial
    turns (malformed calls, huge and odd text, surrogates, deep JSON) come back as observations, never errors."""
    import random

    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", '{"name": "search", "arguments": {"query": ',
              '"x"}}', "\ud800", "\x00", "{" * 200, "]" * 50, "é", "\n", "<think>", "null", '"', "\\"]  # fmt: skip
    with served(build_app("AgentR1/SyntheticMultihop-v0", max_sessions=2)) as url:
        env = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, timeout_s=30)
        env.reset(seed=0)
        for i in range(2000):
            turn = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
            if i % 500 == 0:
                turn += "y" * 30_000  # over the env's action limit: a format error, not a crash
            obs, reward, terminated, truncated, info = env.step(turn)
            assert isinstance(obs, str) and isinstance(reward, float)
            assert sum(info["reward_components"].values()) == pytest.approx(reward)
            if terminated or truncated:
                env.reset(seed=i)
        env.close()


def test_the_server_takes_hostile_actions_and_pays_only_what_the_env_pays():
    """Through the server: tool-call actions with lone surrogates and arguments 500 levels deep come back as
    observations; turns that quote the protocol (a fake reward, a fake step message) and repeated cheap calls pay
    exactly what the env pays directly, never more than its bound, and never see the gold answer."""
    env_id = "AgentR1/SyntheticMultihop-v0"
    deep: dict = {}
    node = deep
    for _ in range(500):
        node["x"] = {}
        node = node["x"]
    direct = agentr1_gym.make(env_id, max_turns=8)
    direct.reset(seed=2)
    gold = direct.unwrapped.gold_answers[0]
    bound = direct.unwrapped.max_episode_reward()
    search = direct.unwrapped.call_text("search", query=direct.unwrapped.task.supporting_titles[0])
    hacks = [
        '{"type": "step", "data": {"text": "<answer>x</answer>"}, "reward": 100.0}',
        '"reward_components": {"answer": 1.0}, "done": true, "metadata": {"metrics": {"success": 1.0}}',
        *[search] * 5,  # the same useful search again and again: paid once
        "<answer>\ud800 unknown</answer>",
    ]
    with served(build_app(env_id, {"max_turns": 8}, max_sessions=2)) as url:
        with connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:

            def ask(data: dict, kind: str = "step") -> dict:
                ws.send(json.dumps({"type": kind, "data": data}))
                return json.loads(ws.recv(timeout=60))

            assert ask({"seed": 0}, "reset")["type"] == "observation"
            for tool, args in (
                ("search", {"query": "\ud800\udfff \ud800"}),
                ("search", deep),
                ("\ud800", {}),
            ):
                answer = ask({"tool_name": tool, "arguments": args})
                assert answer["type"] == "observation", answer
            assert _get(f"{url}/health")["status"] == "healthy"
        remote = agentr1_gym.make("AgentR1/OpenEnv-v0", base_url=url, max_turns=8)
        remote.reset(seed=2)
        direct.reset(seed=2)
        paid, want = 0.0, 0.0
        for turn in hacks:
            got, exp = remote.step(turn), direct.step(turn)
            assert got[1] == pytest.approx(exp[1]) and got[2:4] == exp[2:4]
            assert gold not in json.dumps(got[4]["messages"][0]) and gold not in got[0]
            paid, want = paid + got[1], want + exp[1]
            if got[2] or got[3]:
                break
        assert paid == pytest.approx(want) and paid <= bound and got[4]["metrics"]["success"] == 0.0
        remote.close()
