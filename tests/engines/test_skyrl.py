"""SkyRL-Gym adapter: our envs made through skyrl_gym's registry and played the way SkyRL's generator plays a
BaseTextEnv (init, then step per assistant turn, observations appended to the chat, per-step rewards, metrics)."""

from __future__ import annotations

import pytest

pytest.importorskip("skyrl_gym")

import agentr1_skyrl
import skyrl_gym
from _engines import ENGINE_ENVS, process_rewards_travel_per_step
from agentr1_skyrl import GENERIC_ID, skyrl_dataset

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import evaluate


def _episode(row, policy):
    """SkyRL's agent loop over one dataset row: returns the chat, per-step rewards, metadata and metrics."""
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    chat, _ = env.init(row["prompt"])
    rewards, metadata = [], []
    while True:
        action = policy(env)
        out = env.step(action)
        rewards.append(out["reward"])
        metadata.append(out["metadata"])
        chat = [*chat, {"role": "assistant", "content": action}, *out["observations"]]
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    return chat, rewards, metadata, metrics


@pytest.mark.parametrize("env_id", ENGINE_ENVS)
def test_oracle_through_skyrl_matches_our_evaluator(env_id):
    seeds = range(5, 13)
    rows = skyrl_dataset(env_id, seeds)
    ours = evaluate(env_id, "oracle", episodes=len(rows), seed=5, progress=False)
    returns, successes = [], []
    for row in rows:
        chat, rewards, metadata, metrics = _episode(row, lambda e: e.env.unwrapped.oracle_action())
        returns.append(sum(rewards))
        successes.append(metrics["success"])
        assert metadata[-1]["metrics"] == metrics and {"score", "format_ok", "turns"} <= set(metrics)
        assert chat[: len(row["prompt"])] == row["prompt"]  # the row's prompt is what init returns
        # process rewards travel per step (retrieval before the answer, a game's points on its moves)
        assert process_rewards_travel_per_step(env_id, [m["reward_components"] for m in metadata])
    assert returns == pytest.approx(ours["returns"])
    assert sum(successes) / len(successes) == pytest.approx(ours["success"]) == 1.0


def test_observations_errors_and_scored_truncation():
    row = skyrl_dataset("AgentR1/SyntheticMultihop-v0", [3], env_kwargs={"max_hops": 1}, max_turns=2)[0]
    turns = iter(["no tags at all", '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'])
    chat, rewards, metadata, metrics = _episode(row, lambda e: next(turns))
    assert metadata[0]["action_error"] and rewards[0] < 0  # malformed turn: an explanation and a penalty
    explanation = chat[len(row["prompt"]) + 1]
    assert explanation["role"] != "assistant" and explanation["content"]
    assert (
        len(rewards) == 2 and metrics["turns"] == 2.0 and metrics["success"] == 0.0
    )  # cut at max_turns, scored


def test_generic_id_reads_the_env_from_the_row_and_refuses_rows_without_one():
    row = {
        "prompt": [],
        "env_class": GENERIC_ID,
        "extra_info": {"env_id": "AgentR1/Calculator-v0", "seed": 2},
    }
    chat, _, _, metrics = _episode(row, lambda e: e.env.unwrapped.oracle_action())
    assert metrics["success"] == 1.0 and chat[0]["content"]
    with pytest.raises(ConfigError, match=r"extra_info\.env_id"):
        skyrl_gym.make(GENERIC_ID, env_config={}, extras={"extra_info": {}})


def test_every_agentr1_env_is_registered_in_skyrl_gym():
    assert set(agentr1_gym.env_ids()) | {GENERIC_ID} <= set(skyrl_gym.registry)
    agentr1_skyrl.register_skyrl_envs()  # idempotent


def test_a_rewritten_context_is_refused_not_silently_replaced_by_the_whole_chat():
    """SkyRL appends observations to its own history: a window or state context cannot be shown, so it is refused."""
    extras = {"extra_info": {"env_id": "AgentR1/WebShop-v0", "env_kwargs": {"context": "window:2"}}}
    with pytest.raises(ConfigError, match=r"SkyRL keeps its own .*context='window:2'"):
        skyrl_gym.make(GENERIC_ID, env_config={}, extras=extras)
    with pytest.raises(ConfigError, match="context='state'"):
        skyrl_dataset("AgentR1/WebShop-v0", [0], env_kwargs={"context": "state"})
