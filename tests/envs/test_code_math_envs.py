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


@pytest.mark.slow
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


# ---- answers and runs that try to get reward without solving the task ---------------------------------------
HACKS = {
    "exit early": "raise SystemExit(0)",
    "os._exit": "import os\nos._exit(0)",
    "always-equal object": (
        "class _Any:\n    def __eq__(self, other):\n        return True\n    def __ne__(self, other):\n"
        "        return False\n    __hash__ = object.__hash__\n\ndef {ep}(*args, **kwargs):\n    return _Any()"
    ),
    "int subclass": "class _I(int):\n    def __eq__(self, o):\n        return True\n\ndef {ep}(*a, **k):\n    return _I(0)",
    "patched builtins and assert helpers": (
        "import builtins, unittest\nbuiltins.AssertionError = type('Quiet', (BaseException,), {{}})\n"
        "builtins.abs = lambda x: 0\nbuiltins.isinstance = lambda *a: True\nbuiltins.all = lambda *a: True\n"
        "unittest.TestCase.assertEqual = lambda *a, **k: None\n\ndef {ep}(*a, **k):\n    return None"
    ),
    "forged result line": (
        "import os, sys\nsys.stdout.write('\\x00AGENTR1-RESULTS\\x00[]')\nsys.stdout.flush()\nos._exit(0)"
    ),
    "exit inside the function": "def {ep}(*a, **k):\n    raise SystemExit(0)",
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_code_hacks_do_not_pass(humaneval, hack):
    for index in (0, 2, 32, 53, 160):  # a sample of tasks: lists, floats, a tolerance check, ints, strings
        humaneval.reset(options={"task_index": index})
        code = HACKS[hack].format(ep=humaneval.task.entry_point)
        *_, info = humaneval.step(f"<answer>```python\n{code}\n```</answer>")
        assert info["metrics"]["pass"] == 0.0 and info["reward_components"]["answer"] == 0.0, (hack, index)


def test_doctest_reward_needs_the_examples_reproduced(humaneval):
    humaneval.reset(options={"task_index": 2})  # truncate_number(3.5) -> 0.5
    ep = humaneval.task.entry_point
    for code in (
        f"def {ep}(number):\n    return 0.0\nraise SystemExit(0)",
        f"def {ep}(number):\n    return 0.0\nimport os\nos._exit(0)",
        f"def {ep}(number):\n    return 0.0\nprint('\\x00AGENTR1-RESULTS\\x00[\"0.5\"]')",
    ):
        *_, info = humaneval.step(humaneval.call_text("python", code=code))
        assert info["reward_components"]["doctest"] == 0.0, code
    *_, info = humaneval.step(
        humaneval.call_text("python", code=f"def {ep}(number):\n    return number % 1.0")
    )
    assert info["reward_components"]["doctest"] == pytest.approx(0.1)


@pytest.mark.slow
def test_grading_replays_the_reference_calls_for_every_task(humaneval):
    """Every reference solution passes through record -> sandbox -> replay; a wrong answer to one call fails."""
    from agentr1_gym.envs.code import _recording, grade_answer

    for task in humaneval.tasks:
        assert grade_answer(humaneval.sandbox, task, task.prompt + task.canonical_solution) == (True, ""), (
            task.id
        )
        assert len(_recording(task).calls) >= 1
    task = humaneval.tasks[53]  # add(x, y)
    off_by_one = task.prompt + "    return x + y + (1 if (x, y) == (5, 7) else 0)\n"
    assert grade_answer(humaneval.sandbox, task, off_by_one)[0] is False


def test_plain_data_encoding_round_trips_and_rejects_objects():
    from agentr1_gym.envs.code_grading import Opaque, decode_value, encode_value

    values = [
        None,
        True,
        0,
        -(10**5000),
        1.5,
        float("inf"),
        2 + 3j,
        "é",
        b"\x00",
        [1, (2, {3}), {"k": frozenset()}],
    ]
    for v in values:
        assert decode_value(json.loads(json.dumps(encode_value(v)))) == v
    nan = decode_value(encode_value(float("nan")))
    assert nan != nan

    class Sub(int):
        pass

    opaque = decode_value(encode_value(Sub(3)))
    assert isinstance(opaque, Opaque)
    for use in (
        lambda: opaque == 3,
        lambda: opaque != 3,
        lambda: bool(opaque),
        lambda: {opaque},
        lambda: opaque < 1,
    ):
        with pytest.raises(TypeError):
            use()


def test_calculator_answers_that_hedge_or_overflow_do_not_pay():
    from agentr1_gym.envs.calculator import answer_matches

    gold = Fraction(12)
    assert (
        answer_matches("12", gold)
        and answer_matches("$12.00", gold)
        and answer_matches("12 (that is 12.0)", gold)
    )
    for hedge in (
        "15, or maybe 12",
        "12 or 15",
        "between 11 and 12",
        "1 2 3 4 5 6 7 8 9 10 11 12",
        "12/1 or 13",
    ):
        assert not answer_matches(hedge, gold), hedge
    for junk in ("nan", "inf", "1e309", "9" * 5000, "12" + "0" * 100, "1/0", "", "twelve"):
        assert not answer_matches(junk, gold), junk[:20]
    env = gym.make("AgentR1/Calculator-v0").unwrapped
    env.reset(seed=3)
    gold_text = format_number(env.task.answer).split(" ")[0]
    *_, info = env.step(env.answer_text(f"{gold_text} or {env.task.answer + 1}"))
    assert info["metrics"]["correct"] == 0.0 and info["reward_components"]["answer"] == 0.0
