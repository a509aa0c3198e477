"""The one reward rule (finite, within ``REWARD_LIMIT``) at the doors of the env suite, and the smaller findings of
reliability round 5: context functions, process-reward weights, the viewer's links, plan oracles that resume."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

import agentr1_gym
from agentr1_gym import ToolEnv, register_task, tool
from agentr1_gym.errors import ConfigError, RewardRangeError, TaskCodeError
from agentr1_gym.rewards import REWARD_LIMIT, reward_problem


@pytest.mark.parametrize(
    "value, bad",
    [(0.0, False), (-2, False), (REWARD_LIMIT, False), (REWARD_LIMIT * 1.0001, True), (1e39, True),
     (math.inf, True), (-math.inf, True), (math.nan, True), (10**400, True), ("1", True), (True, True),
     (None, True)],
)  # fmt: skip
def test_reward_problem_names_every_break_of_the_rule(value, bad):
    assert (reward_problem(value) is not None) == bad


@tool
def ping(n: int) -> str:
    """Answers pong.

    Args:
        n: a number
    """
    return "pong"


def test_process_reward_weights_that_could_overflow_are_refused_at_registration():
    """Finding 11: (fn, 1e300, 1e300) made env.step return inf."""
    with pytest.raises(RewardRangeError, match="weight x cap"):
        register_task("Tests/Overflow-v0", [{"q": "x", "answer": "y"}], prompt="{q}", tools=[ping],
                      process_rewards={"pinged": (lambda tool: 1.0, 1e300, 1e300)})  # fmt: skip
    with pytest.raises(RewardRangeError, match="weight"):
        register_task("Tests/Overflow-v0", [{"q": "x", "answer": "y"}], prompt="{q}", tools=[ping],
                      reward={"answer": (lambda answer: 1.0, 1e300)})  # fmt: skip


class InfiniteScore(ToolEnv):
    """A subclass whose outcome is infinite: a bug the env must not hand on."""

    def __init__(self, **settings):
        super().__init__([ping.for_env()], **settings)

    def generate_task(self, rng, options):
        return {"id": "t", "prompt": "say done", "answers": ("done",)}

    def task_prompt(self, task):
        return task["prompt"]

    def score_answer(self, answer):
        return {"score": math.inf, "em": math.inf, "sub_em": math.inf, "f1": math.inf}


def test_an_env_whose_reward_breaks_the_rule_raises_instead_of_returning_it():
    env = InfiniteScore()
    env.reset(seed=0)
    with pytest.raises(RewardRangeError, match="not a finite number"):  # was read as 0.0
        env.step("<answer>done</answer>")


def test_a_context_function_that_raises_is_the_task_s_bug():
    """Finding 10: a raising context= callable escaped as ZeroDivisionError."""

    def broken(task_messages, history):
        return 1 / 0

    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", context=broken, max_turns=5)
    with pytest.raises(TaskCodeError, match=r"broken.*ZeroDivisionError"):
        env.reset(seed=0)


def test_a_context_function_with_the_wrong_signature_is_refused_at_make():
    """Finding 10: a function with the wrong signature was accepted at gym.make and failed at reset."""
    with pytest.raises(ConfigError, match=r"task_messages=\.\.\., history="):
        agentr1_gym.make("AgentR1/SyntheticMultihop-v0", context=lambda messages: messages)
    agentr1_gym.make("AgentR1/SyntheticMultihop-v0", context=lambda **kw: kw["task_messages"])  # **kw is fine


def test_a_plan_oracle_resumes_after_any_deviation():
    """Finding 16: after one malformed turn /play-oracle stopped with "the oracle's plan has 3 steps, and turn 3
    has none". A plan is now played from the calls that succeeded: done steps are skipped, a failed one again."""
    state = {"fail": 1}

    @tool
    def lookup(key: str) -> str:
        """Look a key up (fails the first time it is asked for b).

        Args:
            key: the key
        """
        if key == "b" and state["fail"]:
            state["fail"] -= 1
            raise ValueError("try again")
        return {"a": "1", "b": "2"}.get(key, "?")

    register_task("Tests/PlanResume-v0", [{"q": "a then b", "answer": "12"}], prompt="{q}", tools=[lookup],
                  oracle=lambda env: [("lookup", {"key": "a"}), ("lookup", {"key": "b"}), "12"])  # fmt: skip
    env = gym.make("Tests/PlanResume-v0")
    env.reset(options={"task_index": 0})
    u = env.unwrapped
    env.step("no tags at all")  # a malformed turn
    env.step(u.call_text("lookup", key="zzz"))  # a stray call
    assert u.oracle_action() == u.call_text("lookup", key="a")
    env.step(u.oracle_action())
    assert u.oracle_action() == u.call_text("lookup", key="b")
    *_, info = env.step(u.oracle_action())  # fails: played again
    assert "try again" in info["messages"][-1]["content"]
    assert u.oracle_action() == u.call_text("lookup", key="b")
    env.step(u.oracle_action())
    assert u.oracle_action() == u.answer_text("12")
    *_, info = env.step(u.oracle_action())
    assert info["metrics"]["success"] == 1.0


def test_the_viewer_embeds_no_file_a_run_links_to(tmp_path):
    """Finding 12: a symlinked eval_before_rl.json's target was embedded in the page."""
    from agentr1_gym.viewer import load_run, render_html

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"success": 0.123456, "private_key": "SECRET-VIEWER-FILE"}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval_after_rl.json").write_text(json.dumps({"success": 0.5, "return": 0.2, "episodes": 4}))
    (run / "eval_before_rl.json").symlink_to(secret)
    (run / "run_config.json").symlink_to(secret)
    loaded = load_run(run)
    assert "after RL" in json.dumps(loaded["evals"]) or loaded["evals"]
    assert "SECRET-VIEWER-FILE" not in json.dumps(loaded, default=str)
    assert "SECRET-VIEWER-FILE" not in render_html(loaded)
