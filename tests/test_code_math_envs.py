"""HumanEval-v0 and Calculator-v0: canonical/oracle solutions score the maximum, wrong ones do not, the
calculator refuses anything that is not arithmetic."""

from __future__ import annotations

import json
from fractions import Fraction

import gymnasium as gym
import pytest

import agentr1_gym  # noqa: F401
from agentr1_gym.cli import main
from agentr1_gym.envs.calculator import parse_number
from agentr1_gym.envs.code import extract_code
from agentr1_gym.tools.calculator import CalculatorError, evaluate, format_number


@pytest.fixture(scope="module")
def humaneval():
    return gym.make("AgentR1/HumanEval-v0").unwrapped


def _play_oracle(env, **reset):
    env.reset(**reset)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, info = env.step(env.oracle_action())
        total += r
        done = term or trunc
    return total, info


def test_every_canonical_solution_scores_the_maximum(humaneval):
    validated = 0
    for i in range(len(humaneval.tasks)):
        total, info = _play_oracle(humaneval, seed=0, options={"task_index": i})
        assert info["metrics"]["pass"] == 1.0, humaneval.task.id
        assert total == pytest.approx(humaneval.max_episode_reward()), humaneval.task.id
        validated += humaneval.examples_validated()
    assert len(humaneval.tasks) == 164 and validated == 66  # 75 prompts have examples; 9 of them are wrong


def test_wrong_and_partial_submissions(humaneval):
    humaneval.reset(options={"task_index": 0})  # has_close_elements
    task = humaneval.task
    _, _, term, _, info = humaneval.step(
        "<answer>```python\ndef has_close_elements(numbers, threshold):\n    return False\n```</answer>"
    )
    assert term and info["metrics"]["pass"] == 0.0 and info["reward_components"]["answer"] == 0.0
    humaneval.reset(options={"task_index": 0})  # the body alone completes the prompt, as in HumanEval
    *_, info = humaneval.step(f"<answer>{task.canonical_solution}</answer>")
    assert info["metrics"]["pass"] == 1.0


def test_process_rewards_for_running_code(humaneval):
    humaneval.reset(options={"task_index": 2})  # truncate_number, has valid doctest examples
    *_, info = humaneval.step(humaneval.call_text("python", code="print(1/0)"))
    assert (
        info["reward_components"]["execution"] == 0.0
        and "ZeroDivisionError" in info["messages"][-1]["content"]
    )
    *_, info = humaneval.step(
        humaneval.call_text("python", code="def truncate_number(x):\n    return 0.0\nprint('ran')")
    )
    assert info["reward_components"]["execution"] == 0.05 and info["reward_components"]["doctest"] == 0.0
    *_, info = humaneval.step(humaneval.call_text("python", code=humaneval.reference_solution()))
    assert info["reward_components"]["execution"] == 0.0 and info["reward_components"]["doctest"] == 0.1


def test_extract_code():
    assert extract_code("here:\n```python\ndef f():\n    return 1\n```\nbye") == "def f():\n    return 1"
    assert extract_code("def f(): pass") == "def f(): pass"


def test_eval_cli_canonical_pass_at_1(capsys):
    assert (
        main(["eval", "AgentR1/HumanEval-v0", "--policy", "canonical", "--episodes", "12", "--no-progress"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["pass@1"] == 1.0 and summary["success"] == 1.0


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("__import__('os')", "calling __import__ is not allowed"),
        ("__import__('os').system('ls')", "attribute access is not allowed"),
        ("(1).real", "attribute access is not allowed"),
        ("x + 1", "unknown name 'x'"),
        ("2 ** 100000", "too large"),
        ("9 ** 9 ** 9", "too large"),
        ("'a' * 3", "only numbers"),
        ("[1, 2]", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("1 / 0", "division by zero"),
        ("1+" * 300 + "1", "longer than 500 characters"),
        ("1 +", "cannot parse"),
        ("sqrt(-1)", "negative"),
    ],
)
def test_calculator_refuses(expression, fragment):
    with pytest.raises(CalculatorError, match=fragment.replace("(", r"\(")):
        evaluate(expression)


def test_calculator_exact_arithmetic():
    assert evaluate("(37 * 12 - 45) / 9") == Fraction(399, 9)
    assert evaluate("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate("2^10") == 1024 and evaluate("sqrt(16) + abs(-2) + max(1, 5)") == 11
    assert format_number(Fraction(1, 3)) == "0.333333333333 (= 1/3)"
    assert format_number(evaluate("10 ** 50")).startswith("1.00000000000e+50")


def test_parse_number():
    assert parse_number("The answer is $1,250.50.") == Fraction("1250.50")
    assert parse_number("3/4") == Fraction(3, 4)
    assert parse_number("about -2.5 km") == Fraction(-5, 2)
    assert parse_number("no digits") is None


def test_calculator_env_oracle_wrong_answers_and_bad_calls():
    env = gym.make("AgentR1/Calculator-v0").unwrapped
    for seed in range(30):
        total, info = _play_oracle(env, seed=seed)
        assert info["metrics"]["correct"] == 1.0 and total == pytest.approx(env.max_episode_reward())
    env.reset(seed=1, options={"kind": "shopping"})
    *_, info = env.step(env.call_text("calculator", expression="import os"))
    assert (
        info["reward_components"]["invalid_call"] == 0.0
        and "Error: cannot parse" in info["messages"][-1]["content"]
    )
    *_, info = env.step(env.answer_text(str(env.task.answer + 1)))
    assert info["metrics"]["correct"] == 0.0
