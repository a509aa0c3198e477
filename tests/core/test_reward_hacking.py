"""Shaping that cannot outweigh the task: scripted policies that never solve a task, played on every env under
every shipped reward preset, earn at most ``UNEARNED_REWARD_BOUND`` of the maximum episode reward.

Each policy is what an RL policy finds when it looks for reward without solving: echoing the question, answering
with a retrieved passage, collecting evidence and then guessing, hard-coding the prompt's public examples,
computing every step and then answering something else. Returns are averaged over the episodes the policy did
not solve (a hedge that happens to be right is not the exploit) and divided by ``env.max_episode_reward()``.

Worlds: buying the first search result earns about 0.6 of WebShop's graded reward and never succeeds, so that
reward is paid as bounded shaping (``purchase``, 0.2) and the outcome is the full match; a text game's points are
shaping (0.2 for all of them) and winning is the outcome.

Found by this test before reliability round 3: under ``RewardConfig.agent_r1()`` (sub-EM) answering with the
first retrieved passage earned 0.47 of the maximum on HotpotQA and 2WikiMultihopQA, echoing a 2Wiki question
0.27; under the default reward the format bonus was paid for echoes that shared a word with the answer.
"""

from __future__ import annotations

import ast
import re
import sys

import gymnasium as gym
import numpy as np
import pytest
from _paths import REPO

import agentr1_gym
from agentr1_gym.envs.code_grading import doctest_examples
from agentr1_gym.rewards import UNEARNED_REWARD_BOUND, RewardConfig

PRESETS = {"default": RewardConfig(), "agent_r1": RewardConfig.agent_r1()}
QA_ENVS = (
    "AgentR1/HotpotQA-v0",
    "AgentR1/2WikiMultihopQA-v0",
    "AgentR1/Musique-v0",
    "AgentR1/SyntheticMultihop-v0",
)


def _last_tool_text(env) -> str:
    return env.messages[-1]["content"] if env.messages[-1]["role"] != "assistant" else ""


# ---- the policies: each a function (env, turn index) -> action ------------------------------------------------
def _evidence_then(answer):
    """Search as the oracle does (every gold paragraph), then answer ``answer(env)`` instead of the gold."""

    def policy(env, turn):
        action = env.oracle_action()
        if env.tool_format.parse(action, env.tools).answer is None and turn < env.max_turns - 1:
            return action
        return env.answer_text(answer(env))

    return policy


QA_POLICIES = {
    "echo the question": lambda env, turn: env.answer_text(env.task.question),
    "answer with the first passage": lambda env, turn: (
        env.call_text("search", query=env.task.question)
        if turn == 0
        else env.answer_text(_last_tool_text(env))
    ),
    "collect the evidence, then say unknown": _evidence_then(lambda env: "unknown"),
    "collect the evidence, then answer with all of it": _evidence_then(
        lambda env: " ".join(m["content"] for m in env.messages if m["role"] != "assistant")[-3000:]
    ),
    "yes": lambda env, turn: env.answer_text("yes"),
}


def _hardcoded_examples(env) -> str | None:
    """A function that returns the prompt's example outputs for the example inputs, and None otherwise."""
    task = env.task
    cases = {}
    for ex in doctest_examples(task.docstring):
        try:
            call = ast.parse(ex.source.strip(), mode="eval").body
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                return None
            args = tuple(ast.literal_eval(a) for a in call.args)
            cases[repr(args)] = ast.literal_eval(ex.want.strip())
        except (SyntaxError, ValueError):
            return None
    if not cases:
        return None
    return f"def {task.entry_point}(*args):\n    return {cases!r}.get(repr(args))\n"


def _humaneval_hardcode(env, turn):
    code = _hardcoded_examples(env) or f"def {env.task.entry_point}(*args):\n    return None\n"
    if turn == 0:
        return env.call_text("python", code=code)
    return env.answer_text(f"```python\n{code}```")


HUMANEVAL_POLICIES = {
    "hard-code the public examples": _humaneval_hardcode,
    "run code every turn, then give up": lambda env, turn: (
        env.call_text("python", code="print(1)") if turn < env.max_turns - 1 else env.answer_text("pass")
    ),
    "echo the prompt": lambda env, turn: env.answer_text(env.task.prompt),
}

CALCULATOR_POLICIES = {
    "compute every step, then answer something else": _evidence_then(lambda env: str(env.task.answer + 1)),
    "answer with every number in the problem": lambda env, turn: env.answer_text(
        " ".join(re.findall(r"\d+(?:\.\d+)?", env.task.question))
    ),
    "repeat one calculation": lambda env, turn: (
        env.call_text("calculator", expression="2 + 2") if turn < env.max_turns - 1 else env.answer_text("4")
    ),
}


# the shop's shortcut policies are the ones benchmarks/shop_shortcuts.py measures
sys.path.insert(0, str(REPO / "benchmarks"))
from shop_shortcuts import first_hit, first_hit_with_options  # noqa: E402


def _shop_first_result(env, turn):
    """Search the whole instruction, buy the first result without looking at its options."""
    return first_hit(env)


def _shop_first_with_options(env, turn):
    """As above, but pick every option the instruction names that the product offers (the usual near miss)."""
    return first_hit_with_options(env)


WEBSHOP_POLICIES = {
    "buy the first result of the instruction": _shop_first_result,
    "buy the first result with the instruction's options": _shop_first_with_options,
    "click at random": lambda env, turn: env.random_action(),
    "search again and again": lambda env, turn: (
        env.call_text("search", query=env.task.instruction)
        if env.world.page == "search"
        else env.call_text("click", button="Back to Search")
    ),
}


def _walkthrough_but_the_last_move(env, turn):
    plan = list(env.game.state.policy_commands or ["look"])
    return env.call_text("act", command="look" if len(plan) == 1 else plan[0])


def _chained_walkthrough(env, turn):
    """The rest of the walkthrough in one act, its moves joined as Inform's parser would run them (before round 4:
    12 of 12 games won in 1-2 turns)."""
    plan = list(env.game.state.policy_commands or ["look"])
    joiner = (". ", " then ", ", ")[turn % 3]
    return env.call_text("act", command=joiner.join(plan)[:200])


TEXTGAME_POLICIES = {
    "chain the walkthrough into one command": _chained_walkthrough,
    "random admissible commands": lambda env, turn: env.random_action(),
    "repeat the first scoring move": lambda env, turn: env.call_text(
        "act", command=env.game.state.policy_commands[0] if turn == 0 else env.game.commands[0]
    ),
    "engine commands (restart, undo, quit)": lambda env, turn: env.call_text(
        "act", command=("restart", "yes", "undo", "quit", "restore")[turn % 5]
    ),
    "the walkthrough but the last move": _walkthrough_but_the_last_move,
}


def _rg_steps_then_wrong(env, turn):
    steps = env._solution_steps()
    if turn < len(steps) and turn < env.max_turns - 1:
        return env.call_text("calculator", expression=steps[turn])
    return env.answer_text(str(float(env.task["answer"]) + 1))


#: reasoning-gym (curated ids, the dataset's partial credit) and the mixture
RG_POLICIES = {
    "compute every solution step, then answer something else": _rg_steps_then_wrong,
    "answer any number (partial credit)": lambda env, turn: env.answer_text("0"),
    "hedge with every number in the problem": lambda env, turn: env.answer_text(
        " ".join(re.findall(r"\d+", env.task["question"]))
    ),
    "repeat one calculation": lambda env, turn: (
        env.call_text("calculator", expression="2 + 2") if turn < env.max_turns - 1 else env.answer_text("4")
    ),
}
MIXTURE_POLICIES = {
    "answer a wrong number": lambda env, turn: env.answer_text("-1"),
    "repeat one calculation until the end": lambda env, turn: env.call_text("calculator", expression="1 + 1"),
}

#: text games long enough that a move or two does not win them
TEXTGAME_ENVS = {
    "AgentR1/TextWorld-Simple-v0": {},
    "AgentR1/TextWorld-Cooking-v0": {"level": 2},
    "AgentR1/TextWorld-CoinCollector-v0": {"level": 4},
}


def _unearned(env_id: str, preset: str, policy, episodes: int, **kwargs) -> tuple[float, int]:
    """Mean return over the episodes ``policy`` did not solve, as a fraction of each episode's maximum."""
    reward = PRESETS[preset]
    if preset == "agent_r1" and env_id not in QA_ENVS:  # code, math, worlds
        reward = RewardConfig.agent_r1(answer_metric=None)  # the same formula on the env's own metric
    env = gym.make(env_id, reward=reward, **kwargs).unwrapped
    fractions = []
    for i in range(episodes):
        env.reset(seed=i, options={"task_index": i})
        top = env.max_episode_reward()
        total, metrics = 0.0, {}
        for turn in range(env.max_turns):
            _, reward, terminated, truncated, info = env.step(policy(env, turn))
            total += reward
            if terminated or truncated:
                metrics = info["metrics"]
                break
        if not metrics.get("success"):
            fractions.append(total / top)
    env.close()
    return (float(np.mean(fractions)) if fractions else 0.0), len(fractions)


CASES = (
    [(e, p, name, QA_POLICIES[name], 30, {}) for e in QA_ENVS for p in PRESETS for name in QA_POLICIES]
    + [
        ("AgentR1/HumanEval-v0", p, name, HUMANEVAL_POLICIES[name], 24, {"max_turns": 3})
        for p in PRESETS
        for name in HUMANEVAL_POLICIES
    ]
    + [
        ("AgentR1/Calculator-v0", p, name, CALCULATOR_POLICIES[name], 30, {})
        for p in PRESETS
        for name in CALCULATOR_POLICIES
    ]
    + [
        ("AgentR1/WebShop-v0", p, name, WEBSHOP_POLICIES[name], 30, {"split": "test"})
        for p in PRESETS
        for name in WEBSHOP_POLICIES
    ]
    + [
        (e, p, name, RG_POLICIES[name], 20, {})
        for e in ("AgentR1/RG-ChainSum-v0", "AgentR1/RG-GSMSymbolic-v0")
        for p in PRESETS
        for name in RG_POLICIES
    ]
    + [
        ("AgentR1/Mixture-v0", p, name, MIXTURE_POLICIES[name], 20, {})
        for p in PRESETS
        for name in MIXTURE_POLICIES
    ]
    + [
        (e, p, name, TEXTGAME_POLICIES[name], 3, {"max_turns": 12, "num_games": 3, **level})
        for e, level in TEXTGAME_ENVS.items()
        for p in PRESETS
        for name in TEXTGAME_POLICIES
    ]
)


@pytest.mark.parametrize(
    ("env_id", "preset", "name", "policy", "episodes", "kwargs"),
    CASES,
    ids=[f"{c[0].split('/')[1]}-{c[1]}-{c[2].replace(' ', '_')}" for c in CASES],
)
def test_a_policy_that_never_solves_earns_little(env_id, preset, name, policy, episodes, kwargs):
    fraction, failed = _unearned(env_id, preset, policy, episodes, **kwargs)
    assert failed > 0, "the exploit solved every task: not an exploit"
    assert fraction <= UNEARNED_REWARD_BOUND, f"{name}: {fraction:.3f} of the maximum without solving"


def test_the_format_bonus_needs_a_solved_task():
    """Before: echoing the question collected the format bonus in about a third of HotpotQA episodes (any answer
    with F1 above 0 was paid)."""
    env = gym.make("AgentR1/HotpotQA-v0").unwrapped
    paid = 0
    for i in range(100):
        env.reset(options={"task_index": i})
        _, _, _, _, info = env.step(env.answer_text(env.task.question))
        paid += info["reward_components"]["format"] > 0
        assert not info["metrics"]["success"]
    assert paid == 0


def test_the_shops_first_hit_with_the_named_options_rarely_meets_the_goal():
    """Buying the first hit of the bare instruction with the options it names: before the knock-off listings it met
    about half the held-out goals (0.525 of 200, benchmarks/results/shop_shortcuts.json); bound: 0.2 of the
    oracle's success."""
    env = gym.make("AgentR1/WebShop-v0", split="test").unwrapped

    def success(policy) -> float:
        wins = 0.0
        for i in range(100):
            env.reset(seed=i, options={"task_index": i})
            for turn in range(env.max_turns):
                *_, terminated, truncated, info = env.step(policy(env, turn))
                if terminated or truncated:
                    break
            wins += info["metrics"]["success"]
        return wins / 100

    shortcut, oracle = success(_shop_first_with_options), success(lambda env, turn: env.oracle_action())
    assert oracle > 0.9 and shortcut <= UNEARNED_REWARD_BOUND * oracle, (shortcut, oracle)


# ---- a user's own task: the cheapest successful call every turn ----------------------------------------------
@agentr1_gym.tool
def run_sql(query: str) -> str:
    """Run a read-only SQL query on an empty database.

    Args:
        query: one SELECT statement
    """
    import json
    import sqlite3

    db = sqlite3.connect("file::memory:?mode=ro", uri=True)
    try:
        return json.dumps(db.execute(query).fetchall())
    finally:
        db.close()


agentr1_gym.register_task(
    "Tests/SqlFarm-v0",
    [{"question": f"How many orders were placed on day {i}?", "answer": str(40 + i)} for i in range(20)],
    prompt="{question}",
    tools=[run_sql],
)


@pytest.mark.parametrize("max_turns", [4, 6, 10])
def test_the_cheapest_successful_call_every_turn_earns_little(max_turns):
    """Before: ``SELECT 1`` every turn paid 16% (4 turns), 22% (6) and 32% (10) of the maximum return."""
    env = gym.make(
        "Tests/SqlFarm-v0", max_turns=max_turns, reward=RewardConfig(tool_success_reward=0.05)
    ).unwrapped
    fractions = []
    for i in range(5):
        env.reset(seed=i)
        total = 0.0
        for _ in range(max_turns):
            _, reward, terminated, truncated, info = env.step(env.call_text("run_sql", query="SELECT 1"))
            total += reward
            if terminated or truncated:
                break
        assert not info["metrics"]["success"]
        fractions.append(total / env.max_episode_reward())
    assert max(fractions) <= UNEARNED_REWARD_BOUND
