"""ART: the rollout in examples/engines/art_rollout.py, with ART's own ``Model`` client and
``gather_trajectories``, against a local OpenAI-compatible server that plays the oracle (or junk). openpipe-art
pulls litellm and weave, so these tests run in their own virtualenv (.ci/run makes it: ``.venv-art``); in the main
environment they skip."""

from __future__ import annotations

import asyncio
import runpy

import pytest
from _paths import REPO

art = pytest.importorskip("art")

from _engines import ENGINE_ENVS  # noqa: E402
from _openai_server import PolicyServer, ReplayOracle  # noqa: E402
from openai.types.chat.chat_completion import Choice  # noqa: E402

import agentr1_gym  # noqa: E402
from agentr1_gym.evaluation import evaluate  # noqa: E402

ROLLOUT = runpy.run_path(str(REPO / "examples" / "engines" / "art_rollout.py"))["rollout"]


def _model(port):
    return art.Model(
        name="agentr1-test",
        project="agentr1",
        inference_base_url=f"http://127.0.0.1:{port}/v1",
        inference_api_key="unused",
        inference_model_name="policy",
    )


@pytest.mark.parametrize("env_id", ENGINE_ENVS)
def test_oracle_trajectories_match_our_evaluator(env_id):
    n = 4
    with PolicyServer(ReplayOracle(env_id, range(n))) as server:
        model = _model(server.port)
        trajs = asyncio.run(
            art.gather_trajectories((ROLLOUT(model, env_id, s) for s in range(n)), pbar_desc=None)
        )
        stops = server.requests[0]["stop"]
    ours = evaluate(env_id, "oracle", episodes=n, seed=0, progress=False)
    assert [t.reward for t in trajs] == pytest.approx(ours["returns"])
    assert all(t.metrics["success"] == 1.0 for t in trajs)
    assert stops == list(agentr1_gym.make(env_id).unwrapped.tool_format.stop_strings)
    for t in trajs:
        # ART trains on the Choice objects: exactly the policy's turns; everything else is context
        kinds = [isinstance(m, Choice) for m in t.messages_and_choices]
        assert kinds[0] is False and sum(kinds) == t.metrics["turns"]
        roles = [m["role"] for m in t.messages()]
        assert roles[0] == "user" and roles.count("assistant") == t.metrics["turns"]


def test_junk_turns_are_explained_and_scored():
    with PolicyServer(lambda messages: "no tags at all") as server:
        traj = asyncio.run(
            ROLLOUT(_model(server.port), "AgentR1/SyntheticMultihop-v0", 0, env_kwargs={"max_turns": 3})
        )
    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", max_turns=3)
    env.reset(seed=0)
    replay = [env.step("no tags at all")[1] for _ in range(3)]
    assert traj.reward == pytest.approx(sum(replay)) and traj.metrics["success"] == 0.0
    feedback = [m["content"] for m in traj.messages()[1:] if m["role"] != "assistant"]
    assert len(feedback) == 2 and all("<tool_call>" in f or "<answer>" in f for f in feedback)
