"""The ToolEnv contract (README, "Environments") on the concrete envs: info fields, termination, truncation,
malformed actions, typed errors."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import agentr1_gym
from agentr1_gym.errors import BadArgumentError, ConfigError, ResetNeededError, UnknownEnvError


@pytest.fixture
def env():
    return gym.make("AgentR1/SyntheticMultihop-v0").unwrapped


def test_reset_info_and_no_gold_leak():
    env = gym.make("AgentR1/HotpotQA-v0")
    obs, info = env.reset(seed=0)
    assert set(info) == {"messages", "context", "tools", "task_id", "turn"}
    assert info["context"] == info["messages"]  # the default context policy shows the whole chat
    assert info["messages"] == [{"role": "user", "content": obs}]
    assert info["tools"][0]["function"]["name"] == "search"
    gold = env.unwrapped.gold_answers
    assert env.unwrapped.task.question in obs
    dumped = obs + json.dumps(info)
    assert all(g not in dumped for g in gold)


def test_step_info_and_message_roles(env):
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(env.oracle_action())
    assert obs.startswith("<tool_response>\n") and obs.endswith("\n</tool_response>")
    assert [m["role"] for m in info["messages"]] == ["user", "assistant", "tool"]
    assert info["messages"][-1]["content"] in obs
    assert info["action_error"] is None and info["turn"] == 1 and not (term or trunc)
    assert reward == pytest.approx(sum(info["reward_components"].values()))
    assert reward == pytest.approx(info["process_reward"] + info["outcome_reward"])
    assert info["reward_components"]["retrieval"] == pytest.approx(0.1)


def test_gold_paragraph_rewarded_once(env):
    env.reset(seed=0, options={"hops": 1})
    call = env.oracle_action()
    assert env.step(call)[4]["reward_components"]["retrieval"] == pytest.approx(0.1)
    assert env.step(call)[4]["reward_components"]["retrieval"] == 0.0  # seen before: no new reward


def test_termination_and_step_after_end(env):
    env.reset(seed=0)
    obs, _reward, term, trunc, info = env.step("<answer>wrong</answer>")
    assert term and not trunc and obs == ""
    # well formed but wrong: no format bonus, or answering at once without searching would pay
    assert info["metrics"]["em"] == 0.0 and info["outcome_reward"] == 0.0
    with pytest.raises(ResetNeededError, match="reset"):
        env.step("<answer>x</answer>")


def test_step_before_reset():
    env = gym.make("AgentR1/SyntheticMultihop-v0").unwrapped
    with pytest.raises(ResetNeededError, match="reset"):
        env.step("hi")
    with pytest.raises(gym.error.ResetNeeded):  # gym.make's order enforcing agrees
        gym.make("AgentR1/SyntheticMultihop-v0").step("hi")


def test_truncation_at_max_turns_scores_no_answer():
    env = gym.make("AgentR1/SyntheticMultihop-v0", max_turns=3, max_episode_steps=3)
    env.reset(seed=0)
    results = [env.step("thinking...") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    info = results[-1][4]
    assert info["truncated_reason"] == "max_turns" and info["metrics"]["format_ok"] == 0.0
    assert info["reward_components"]["answer"] == 0.0 and info["reward_components"]["format"] == 0.0


def test_context_budget_truncates():
    env = gym.make("AgentR1/SyntheticMultihop-v0", max_context_chars=1200).unwrapped
    env.reset(seed=0)
    *_, trunc, info = env.step(env.call_text("search", query="x " * 400))
    assert trunc and info["truncated_reason"] == "context_budget"


def test_tool_output_is_truncated_with_marker():
    env = gym.make("AgentR1/HotpotQA-v0", tool_output_chars=100, top_k=5).unwrapped
    env.reset(seed=0)
    obs, *_ = env.step(env.call_text("search", query="university campus city"))
    assert "...[truncated " in obs and len(env.messages[-1]["content"]) < 160


@pytest.mark.parametrize(
    ("action", "key", "fragment"),
    [
        ("x" * 1_000_000, "invalid_format", "limit is 20000"),
        (
            '<tool_call>{"name": "lookup", "arguments": {"query": "a"}}</tool_call>',
            "invalid_call",
            "Unknown tool 'lookup'",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
            "invalid_call",
            "query: Field required",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": 42}}</tool_call>',
            "invalid_call",
            "valid string",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "a", "k": 3}}</tool_call>',
            "invalid_call",
            "Extra inputs",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "' + "q" * 5000 + '"}}</tool_call>',
            "invalid_call",
            "at most 2000",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>' * 2,
            "invalid_format",
            "at most 1 per turn",
        ),
        ("\x00\x1b[31m\u202e", "invalid_format", "No tool call"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call><answer>b</answer>',
            "invalid_format",
            "not both",
        ),
    ],
)
def test_malformed_actions_are_penalised_not_raised(env, action, key, fragment):
    env.reset(seed=0)
    before = list(env.messages)
    obs, reward, term, _trunc, info = env.step(action)
    assert fragment in info["action_error"] and fragment in obs
    assert reward == pytest.approx(info["reward_components"][key]) and reward < 0
    assert not term and env.messages[: len(before)] == before  # history kept, episode goes on
    obs, *_, info = env.step(env.oracle_action())  # and the env still works
    assert info["action_error"] is None


def test_unicode_query_works(env):
    env.reset(seed=0)
    *_, info = env.step(env.call_text("search", query="Ünïcödé 中文 😀"))
    assert info["action_error"] is None


def test_several_calls_when_allowed():
    env = gym.make("AgentR1/SyntheticMultihop-v0", max_calls_per_turn=2).unwrapped
    env.reset(seed=0)
    obs, _reward, *_, info = env.step(env.call_text("search", query="a") + env.call_text("search", query="b"))
    assert info["num_tool_calls"] == 2 and obs.count("<tool_response>") == 2
    assert [m["role"] for m in env.messages[-2:]] == ["tool", "tool"]


def test_search_r1_protocol_env():
    env = gym.make("AgentR1/SyntheticMultihop-v0", tool_format="search_r1").unwrapped
    obs, _ = env.reset(seed=0)
    assert "<search>" in obs
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(env.oracle_action())
        total += r
        done = term or trunc
        if not term:
            assert obs.startswith("<information>") and info["messages"][-1]["role"] == "user"
    assert total == pytest.approx(env.max_episode_reward())


def test_agent_r1_reward_preset_via_make():
    env = gym.make("AgentR1/SyntheticMultihop-v0", reward=agentr1_gym.RewardConfig.agent_r1()).unwrapped
    env.reset(seed=0)
    *_, info = env.step("<answer>nope</answer>")
    assert info["outcome_reward"] == 0.0  # format ok (1) + answer 0 - 1
    env.reset(seed=0)
    env.step("garbage")
    *_, info = env.step(env.answer_text(env.gold_answers[0]))
    assert info["outcome_reward"] == -1.0  # right answer, but the format gate is closed


def test_typed_errors_for_programmer_mistakes():
    with pytest.raises(UnknownEnvError, match="HotpotQA-v0"):
        agentr1_gym.make("AgentR1/HotpotQA-v9")
    with pytest.raises(BadArgumentError, match="did you mean 'max_turns'"):
        gym.make("AgentR1/HotpotQA-v0", max_turn=3)
    with pytest.raises(ConfigError, match="max_hops"):
        gym.make("AgentR1/SyntheticMultihop-v0", max_hops=9)
    with pytest.raises(ConfigError, match="bundled"):
        gym.make("AgentR1/HotpotQA-v0", split="test")
    with pytest.raises(ConfigError, match="unknown retriever backend"):
        gym.make("AgentR1/HotpotQA-v0", retriever="elastic")
    with pytest.raises(ConfigError, match="reward"):
        gym.make("AgentR1/HotpotQA-v0", reward={"answer_wieght": 2})
    with pytest.raises(ConfigError, match="task_index"):
        gym.make("AgentR1/HotpotQA-v0").reset(options={"task_index": 10_000})
    with pytest.raises(TypeError, match="assistant turn as str"):
        env = gym.make("AgentR1/SyntheticMultihop-v0").unwrapped
        env.reset(seed=0)
        env.step(b"bytes")


@pytest.mark.parametrize("env_id", agentr1_gym.env_ids())
@pytest.mark.parametrize("maker", ["gym.make", "agentr1_gym.make"])
def test_max_turns_is_honoured_by_both_makes(env_id, maker):
    """gym.make(id, max_turns=N) runs N turns and scores the truncation, exactly like agentr1_gym.make."""
    make = gym.make if maker == "gym.make" else agentr1_gym.make
    env = make(env_id, max_turns=10)
    assert env.unwrapped.max_turns == 10
    env.reset(seed=0)
    # an unclosed tag is a format error in every env (plain text would be a reply where users speak again)
    assert not any(env.step("<tool_call>")[3] for _ in range(9))
    _, _, terminated, truncated, info = env.step("<tool_call>")
    assert truncated and not terminated and "metrics" in info and "answer" in info["reward_components"]


def test_synthetic_hops_and_world_determinism():
    env = gym.make("AgentR1/SyntheticMultihop-v0", min_hops=4, max_hops=4).unwrapped
    _, _info = env.reset(seed=5)
    assert env.task.hops == 4 and len(env.task.supporting_titles) == 4
    other = gym.make("AgentR1/SyntheticMultihop-v0", min_hops=4, max_hops=4, world_seed=1).unwrapped
    other.reset(seed=5)
    assert other.task.question != env.task.question
    assert env.task.answers[0] not in env.task.supporting_titles


def test_render_ansi(env):
    env.reset(seed=0)
    env.step("hello")
    text = env.render()
    assert text.count("[assistant] hello") == 1


def test_qa_oracle_searches_by_title_then_falls_back():
    """The oracle asks for a gold paragraph by its title (a query a model can learn); when that misses, it retries
    once with the paragraph's opening words; it answers only after both gold titles were tried."""

    class Miss:  # a retriever that never finds anything
        def search(self, queries, k):
            return [[] for _ in queries]

    env = gym.make("AgentR1/HotpotQA-v0", retriever=Miss()).unwrapped
    env.reset(seed=0)
    titles = env.task.supporting_titles
    queries = []
    for _ in range(2 * len(titles)):
        call = json.loads(env.oracle_action().split("<tool_call>")[1].split("</tool_call>")[0])
        queries.append(call["arguments"]["query"])
        env.step(env.call_text("search", query=queries[-1]))
    assert (
        queries[0] == titles[0]
        and queries[1].startswith(titles[0] + " ")
        and len(queries[1]) > len(titles[0])
    )
    assert queries[2] == titles[1]
    assert "<answer>" in env.oracle_action()


@pytest.mark.parametrize("env_id", agentr1_gym.env_ids())
def test_gymnasium_edges_wrapper_libraries_rely_on(env_id):
    """render_fps in metadata, JSON-serialisable specs (config objects included) that rebuild the same env, and
    attributes that are safe before the first reset."""
    from gymnasium.envs.registration import EnvSpec

    from agentr1_gym.rewards import RewardConfig

    env = gym.make(env_id, reward=RewardConfig(format_weight=0.3))
    assert env.metadata["render_fps"] >= 1 and "ansi" in env.metadata["render_modes"]
    text = env.spec.to_json()
    rebuilt = gym.make(EnvSpec.from_json(text))
    assert rebuilt.unwrapped.reward_config.format_weight == 0.3
    fresh = gym.make(env_id).unwrapped
    if hasattr(type(fresh), "gold_answers"):
        assert fresh.gold_answers == ()  # before any reset: empty, not an error
