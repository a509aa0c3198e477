"""Registry-wide checks: every AgentR1/* env is checked the same way (one register() call and it is covered)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentr1_gym

ENV_IDS = agentr1_gym.env_ids()


def test_registry_lists_the_issue_envs():
    assert {
        "AgentR1/HotpotQA-v0",
        "AgentR1/2WikiMultihopQA-v0",
        "AgentR1/Musique-v0",
        "AgentR1/SyntheticMultihop-v0",
    } <= set(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def _episode(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [(obs, info["task_id"])]
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        trace.append((obs, reward, term, trunc, info["reward_components"]))
        if term or trunc:
            break
    return trace


#: a valid call of each env's first tool that never ends an episode
BENIGN = {
    "search": {"query": "who founded the company"},
    "python": {"code": "print(6 * 7)"},
    "calculator": {"expression": "6 * 7"},
    "act": {"command": "look"},
    "click": {"ref": 1},  # a web page's body
}


def _benign_call(env) -> str:
    if env.user_turns:  # a conversation's tools depend on its task: the ground truth's first call
        return env.oracle_action()
    tool = next(iter(env.tools))
    return env.call_text(tool, **BENIGN[tool])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_determinism(env_id):
    a, b = gym.make(env_id), gym.make(env_id)
    a.reset(seed=7)  # the same task as the episode below
    actions = [_benign_call(a.unwrapped), "garbage", "<answer>x</answer>"]
    assert _episode(a, 7, actions) == _episode(b, 7, actions)
    # the task order after one seeded reset is deterministic too
    ids_a = [a.reset(seed=3)[1]["task_id"]] + [a.reset()[1]["task_id"] for _ in range(5)]
    ids_b = [b.reset(seed=3)[1]["task_id"]] + [b.reset()[1]["task_id"] for _ in range(5)]
    assert ids_a == ids_b
    assert len(set(ids_a)) > 1, "different resets should draw different tasks"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_roundtrip_mid_episode(env_id):
    env = gym.make(env_id).unwrapped
    env.reset(seed=1)
    env.step(_benign_call(env))  # a call that changes state (a search result, a game move), mid-episode
    clone = pickle.loads(pickle.dumps(env))
    assert clone.messages == env.messages
    a = env.oracle_action()
    assert clone.oracle_action() == a
    assert clone.step(a)[:4] == env.step(a)[:4]
    # heavy resources (a search index, a sandbox worker pool) are shared with the original, not copied
    for attr in ("retriever", "sandbox"):
        if hasattr(env, attr):
            assert getattr(clone, attr) is getattr(env, attr)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_scores_the_maximum_reward(env_id):
    env = gym.make(env_id)
    for seed in range(25):
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, term, trunc, info = env.step(env.unwrapped.oracle_action())
            total += reward
            done = term or trunc
        assert term, f"seed {seed}: the oracle must finish before the turn limit"
        assert info["metrics"]["success"] == 1.0
        assert total == pytest.approx(env.unwrapped.max_episode_reward()), f"seed {seed}"


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("vector_cls", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs_batch_infos(env_id, vector_cls):
    # text observations cannot live in shared memory: AsyncVectorEnv needs shared_memory=False
    kwargs = {"shared_memory": False} if vector_cls is gym.vector.AsyncVectorEnv else {}
    envs = vector_cls([lambda: gym.make(env_id) for _ in range(2)], **kwargs)
    try:
        obs, info = envs.reset(seed=0)
        assert len(obs) == 2 and all(isinstance(o, str) and o for o in obs)
        # a valid call, and a malformed turn (plain text is a reply where the user speaks again)
        replies = envs.get_attr("user_turns")[0]
        bad, why = ("<tool_call>no tags here", "not closed") if replies else ("no tags here", "No tool call")
        obs, rewards, _term, _trunc, info = envs.step((envs.call("oracle_action")[0], bad))
        assert rewards.shape == (2,)
        assert np.isclose(info["reward_components"]["invalid_format"][1], -0.1)
        assert info["action_error"][0] is None and why in info["action_error"][1]
        assert np.allclose(info["process_reward"] + info["outcome_reward"], rewards)
    finally:
        envs.close()


_ADVERSARIAL = st.sampled_from(
    [
        "",
        "<tool_call>",
        "</tool_call>",
        "<tool_call>{}</tool_call>",
        "<tool_call>[1,2]</tool_call>",
        '<tool_call>{"name": "search", "arguments": {"query": null}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": 5}"}</tool_call>',
        "<answer></answer>",
        "<answer>a</answer><answer>b</answer>",
        "<think><answer>x</answer>",
        "<search>q</search>",
        "\x00\x01\x02",
        "😀" * 50,
        "<tool_call>" + "{" * 5000 + "</tool_call>",
    ]
)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    actions=st.lists(
        st.one_of(
            st.text(max_size=300),
            _ADVERSARIAL,
            st.builds(lambda a, b: a + b, _ADVERSARIAL, st.text(max_size=50)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_fuzz_step_never_raises(env_id, actions):
    env = _FUZZ_ENVS.setdefault(env_id, gym.make(env_id))
    env.reset(seed=0)
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert isinstance(obs, str) and np.isfinite(reward)
        assert sum(info["reward_components"].values()) == pytest.approx(reward)
        if term or trunc:
            env.reset()


_FUZZ_ENVS: dict[str, gym.Env] = {}
