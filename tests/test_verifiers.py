"""verifiers adapter: our taskset and env run by verifiers' own ``vf-eval`` (its null harness, a subprocess
runtime) against a local OpenAI-compatible server that plays a policy (the oracle, or junk). verifiers 0.4 needs
openai<3, so these tests run in their own virtualenv (.ci/run makes it: ``.venv-verifiers``); in the main
environment they skip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1")

import uvicorn
from agentr1_verifiers import AgentR1Taskset, AgentR1TasksetConfig
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import evaluate

VF_EVAL = str(Path(sys.executable).with_name("vf-eval"))


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


class _PolicyServer:
    """An OpenAI-compatible ``/v1/chat/completions`` whose reply is ``policy(messages)``; records the requests."""

    def __init__(self, policy):
        self.policy = policy
        self.requests: list[dict] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(req: Request):
            body = await req.json()
            self.requests.append(body)
            content = self.policy(body["messages"])
            head = {"id": uuid.uuid4().hex, "created": int(time.time()), "model": body.get("model", "policy")}
            if body.get("stream"):

                def chunks():
                    delta = {"role": "assistant", "content": content}
                    for choice in (
                        {"index": 0, "delta": delta},
                        {"index": 0, "delta": {}, "finish_reason": "stop"},
                    ):
                        yield f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [choice]})}\n\n"
                    yield "data: [DONE]\n\n"

                return StreamingResponse(chunks(), media_type="text/event-stream")
            message = {"role": "assistant", "content": content}
            return JSONResponse(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


class _Oracle:
    """Replays the conversation in a shadow env (the row found by its first user message; tasks with the same
    prompt have the same oracle) and answers with the env's oracle action."""

    def __init__(self, env_id, seeds, **env_kwargs):
        self.env_id, self.kwargs = env_id, env_kwargs
        env = agentr1_gym.make(env_id, **env_kwargs)
        self.seeds = {}
        for seed in seeds:
            _, info = env.reset(seed=seed)
            self.seeds[next(m["content"] for m in info["messages"] if m["role"] == "user")] = seed
        env.close()

    def __call__(self, messages):
        first = _text(next(m for m in messages if m["role"] == "user")["content"])
        env = agentr1_gym.make(self.env_id, **self.kwargs)
        env.reset(seed=self.seeds[first])
        for m in messages:
            if m["role"] == "assistant":
                env.unwrapped.oracle_action()  # advances the oracle's own plan (the calculator's keeps one)
                env.step(_text(m["content"]))
        return env.unwrapped.oracle_action()


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


@pytest.mark.parametrize(
    "env_id", ["AgentR1/SyntheticMultihop-v0", "AgentR1/HotpotQA-v0", "AgentR1/Calculator-v0"]
)
def test_oracle_through_vf_eval_matches_our_evaluator(tmp_path, env_id):
    n = 4
    with _PolicyServer(_Oracle(env_id, range(n))) as server:
        episodes = _vf_eval(
            tmp_path, server.port, "--env.taskset.env-id", env_id, "--env.taskset.num-tasks", str(n)
        )
    ours = evaluate(env_id, "oracle", episodes=n, seed=0, progress=False)
    assert sorted(episodes) == list(range(n))
    returns = [_player(episodes[s])["rewards"]["return"]["score"] for s in range(n)]
    assert returns == pytest.approx(ours["returns"])
    for seed in range(n):
        trace = _player(episodes[seed])
        assert trace["metrics"]["success"] == 1.0 and {"score", "format_ok", "turns"} <= set(trace["metrics"])
        info = trace["info"]["agentr1"]
        assert info["ended"] == "terminated" and sum(info["step_rewards"]) == pytest.approx(returns[seed])
        if env_id != "AgentR1/Calculator-v0":  # process rewards per step, kept on the trace
            assert all(c["retrieval"] > 0 for c in info["reward_components"][:-1])
        # the conversation verifiers recorded: the env's prompt, then the policy's turns and our observations
        roles = [node["message"]["role"] for node in trace["nodes"]]
        assert roles[0] == "user" and roles[1:] == ["assistant", "user"] * (len(roles) // 2 - 1) + [
            "assistant"
        ]
        assert trace["nodes"][2]["message"]["content"].startswith("<tool_response>") or env_id.endswith(
            "Calculator-v0"
        )


def test_malformed_turns_are_explained_and_the_turn_limit_is_scored(tmp_path):
    seen = []

    def junk(messages):
        seen.append([_text(m["content"]) for m in messages if m["role"] == "user"])
        return "I refuse to use the format"

    with _PolicyServer(junk) as server:
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
    with _PolicyServer(_Oracle(env_id, range(1), min_hops=2, max_hops=2)) as server:
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
    with pytest.raises(ConfigError, match="unknown env id"):
        AgentR1Taskset(AgentR1TasksetConfig(id="agentr1-verifiers", env_id="AgentR1/Nope-v0"))
