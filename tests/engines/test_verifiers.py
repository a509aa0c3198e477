"""verifiers adapter: our taskset and env run by verifiers' own ``vf-eval`` (its null harness, a subprocess
runtime) against a local OpenAI-compatible server that plays a policy (the oracle, or junk). verifiers 0.4 needs
openai<3, so these tests run in their own virtualenv (.ci/run makes it: ``.venv-verifiers``); in the main
environment they skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

from _engines import ENGINE_ENVS, process_rewards_travel_per_step
from _openai_server import PolicyServer, ReplayOracle, text_of
from agentr1_verifiers import AgentR1Taskset, AgentR1TasksetConfig

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import evaluate

VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))


def _vf_eval(tmp_path, port, *args):
    """``vf-eval agentr1-verifiers`` with the null harness on a subprocess runtime; returns the episodes by seed."""
    out = tmp_path / "vf"
    cmd = [
        VF_EVAL, "agentr1-verifiers", "-m", "policy", "--client.base-url", f"http://127.0.0.1:{port}/v1",
        "--env.player.harness.id", "null", "--env.player.runtime.type", "subprocess", "--no-push",
        "-o", str(out), *args,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={"PRIME_API_KEY": "unused", **os.environ}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (traces,) = out.rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    return {e["task"]["data"]["info"]["seed"]: e for e in episodes}


def _player(episode):
    (trace,) = episode["traces"]
    return trace


@pytest.mark.parametrize("env_id", ENGINE_ENVS)
def test_oracle_through_vf_eval_matches_our_evaluator(tmp_path, env_id):
    n = 4
    # vf-eval runs in a subprocess, where conftest's small game pools do not apply: name the pool in both
    kwargs = {"num_games": 2} if env_id.startswith("AgentR1/TextWorld-") else {}
    extra = ["--env.taskset.env-kwargs", json.dumps(kwargs)] if kwargs else []
    with PolicyServer(ReplayOracle(env_id, range(n), **kwargs)) as server:
        episodes = _vf_eval(
            tmp_path, server.port, "--env.taskset.env-id", env_id, "--env.taskset.num-tasks", str(n), *extra
        )
    ours = evaluate(env_id, "oracle", episodes=n, seed=0, progress=False, env_kwargs=kwargs)
    assert sorted(episodes) == list(range(n))
    returns = [_player(episodes[s])["rewards"]["return"]["score"] for s in range(n)]
    assert returns == pytest.approx(ours["returns"])
    for seed in range(n):
        trace = _player(episodes[seed])
        assert trace["metrics"]["success"] == 1.0 and {"score", "format_ok", "turns"} <= set(trace["metrics"])
        info = trace["info"]["agentr1"]
        assert info["ended"] == "terminated" and sum(info["step_rewards"]) == pytest.approx(returns[seed])
        # process rewards per step, kept on the trace
        assert process_rewards_travel_per_step(env_id, info["reward_components"])
        # the conversation verifiers recorded: the env's prompt, then the policy's turns and our observations
        roles = [node["message"]["role"] for node in trace["nodes"]]
        assert roles[0] == "user" and roles[1:] == ["assistant", "user"] * (len(roles) // 2 - 1) + [
            "assistant"
        ]
        # (a level-1 coin or treasure game can be won by the first command: then there is no observation turn)
        if len(roles) > 2 and not env_id.endswith("Calculator-v0"):
            assert trace["nodes"][2]["message"]["content"].startswith("<tool_response>")


def test_malformed_turns_are_explained_and_the_turn_limit_is_scored(tmp_path):
    seen = []

    def junk(messages):
        seen.append([text_of(m["content"]) for m in messages if m["role"] == "user"])
        return "I refuse to use the format"

    with PolicyServer(junk) as server:
        (episode,) = _vf_eval(
            tmp_path, server.port, "--env.taskset.num-tasks", "1", "--env.taskset.max-turns", "2",
            "--env.taskset.env-kwargs", json.dumps({"max_hops": 1}),
        ).values()  # fmt: skip
    trace = _player(episode)
    info = trace["info"]["agentr1"]
    assert info["ended"] == "max_turns" and all(info["action_errors"])
    assert (
        "<tool_call>" in seen[-1][-1]
    )  # the explanation of the malformed turn came back as the next user turn
    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", max_hops=1, max_turns=2)
    env.reset(seed=0)
    replay = [env.step("I refuse to use the format")[1] for _ in range(2)]
    assert info["step_rewards"] == pytest.approx(replay)
    assert (
        trace["rewards"]["return"]["score"] == pytest.approx(sum(replay))
        and trace["metrics"]["success"] == 0.0
    )


def test_an_exchange_verifiers_cuts_short_is_still_scored(tmp_path):
    env_id = "AgentR1/SyntheticMultihop-v0"
    with PolicyServer(ReplayOracle(env_id, range(1), min_hops=2, max_hops=2)) as server:
        (episode,) = _vf_eval(
            tmp_path, server.port, "--env.taskset.num-tasks", "1", "--env.player.max-turns", "1",
            "--env.taskset.env-kwargs", json.dumps({"min_hops": 2, "max_hops": 2}),
        ).values()  # fmt: skip
    info = _player(episode)["info"]["agentr1"]
    assert info["ended"] == "verifiers"  # one turn allowed, a 2-hop question needs three
    env = agentr1_gym.make(env_id, min_hops=2, max_hops=2)
    env.reset(seed=0)
    first = env.step(env.unwrapped.oracle_action())[1]
    outcome, metrics = env.unwrapped.close_episode(None)
    assert info["step_rewards"] == pytest.approx([first, sum(outcome.values())])
    assert _player(episode)["metrics"] == pytest.approx(metrics)


def test_taskset_yields_the_env_prompts_and_rejects_unknown_envs():
    cfg = AgentR1TasksetConfig(id="agentr1-verifiers", env_id="AgentR1/HotpotQA-v0", seed=3, num_tasks=2)
    tasks = list(AgentR1Taskset(cfg))
    env = agentr1_gym.make("AgentR1/HotpotQA-v0")
    for i, task in enumerate(tasks):
        _, info = env.reset(seed=3 + i)
        assert [m.content for m in task.data.prompt] == [m["content"] for m in info["messages"]]
        assert task.data.info == {"env_id": "AgentR1/HotpotQA-v0", "env_kwargs": {}, "seed": 3 + i}
    with pytest.raises(ConfigError, match="env-id: no env"):
        AgentR1Taskset(AgentR1TasksetConfig(id="agentr1-verifiers", env_id="AgentR1/Nope-v0"))
    windowed = AgentR1TasksetConfig(
        id="agentr1-verifiers", env_id="AgentR1/WebShop-v0", env_kwargs={"context": "window:1"}, num_tasks=1
    )  # verifiers appends observations to its own history: a rewritten context is refused, not replaced
    with pytest.raises(ConfigError, match=r"verifiers keeps its own .*context='window:1'"):
        list(AgentR1Taskset(windowed))
