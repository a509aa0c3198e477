"""``AgentR1/Calculator-v0``: arithmetic and multi-step word problems with exact answers and a calculator tool.

Problems are generated procedurally from the reset seed: plain arithmetic ("Compute (37 * 12 - 45) / 9.") and
word problems of two to four steps (shopping change, unit rates, discounts with tax, sharing, averages). Each
problem carries its solution as calculator expressions; the answer is checked numerically: every number in it
must equal the solution, so hedges never pay (tolerance ``max(1e-6, 1e-4 * |gold|)``; fractions like ``3/4``,
``$``, ``%`` and thousands separators are understood).
Process reward: ``progress`` for each needed intermediate result the calculator produces for the first time.
The oracle evaluates the solution steps with the calculator, then answers.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError
from agentr1_gym.formats import ToolCall
from agentr1_gym.matching import parse_number, parse_numbers
from agentr1_gym.rewards import NeededValues, ProcessReward
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.calculator import CalculatorTool, evaluate, format_number

__all__ = ["CalculatorEnv", "MathTask", "answer_matches", "parse_number", "parse_numbers"]

_NAMES = [
    "Ana",
    "Ben",
    "Chloe",
    "Dev",
    "Elif",
    "Femi",
    "Grace",
    "Hugo",
    "Ines",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
]
_ITEMS = [
    ("notebook", "notebooks"),
    ("pen", "pens"),
    ("apple", "apples"),
    ("ticket", "tickets"),
    ("book", "books"),
]


class MathTask(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    question: str
    answer: Fraction
    steps: tuple[str, ...]  # calculator expressions of the solution, in order
    kind: str


def answer_matches(text: str, gold: Fraction) -> bool:
    """Whether an answer states ``gold``: it holds at least one number and every number in it equals ``gold``
    (tolerance ``max(1e-6, 1e-4 * |gold|)``), so hedging ("15, or maybe 12") never pays."""
    numbers = parse_numbers(text)
    tol = max(1e-6, 1e-4 * abs(float(gold)))
    return bool(numbers) and all(v is not None and abs(float(v - gold)) <= tol for v in numbers)


def _arith(rng: np.random.Generator) -> tuple[str, list[str], str]:
    a, b, c, d = (int(x) for x in rng.integers(2, 99, size=4))
    shapes = [
        f"({a} * {b} - {c}) / {d}",
        f"{a} * {b} + {c} * {d}",
        f"({a} + {b}) * ({c} - {d})",
        f"{a} ** 2 - {b} * {c}",
        f"({a} * {b} * {c}) / ({d} + {a})",
    ]
    expr = shapes[int(rng.integers(len(shapes)))]
    return f"Compute {expr}.", [expr], "arithmetic"


def _shopping(rng: np.random.Generator) -> tuple[str, list[str], str]:
    name = _NAMES[int(rng.integers(len(_NAMES)))]
    (_, p1), (_, p2) = (_ITEMS[int(k)] for k in rng.choice(len(_ITEMS), 2, replace=False))
    n1, n2 = (int(x) for x in rng.integers(2, 12, size=2))
    c1, c2 = (int(x) for x in rng.integers(2, 30, size=2))
    cost = n1 * c1 + n2 * c2
    paid = (cost // 50 + 1) * 50
    q = (
        f"{name} buys {n1} {p1} at ${c1} each and {n2} {p2} at ${c2} each, and pays with ${paid}. "
        "How many dollars of change does "
        f"{name} get?"
    )
    return q, [f"{n1} * {c1}", f"{n2} * {c2}", f"{paid} - ({n1 * c1} + {n2 * c2})"], "shopping"


def _rate(rng: np.random.Generator) -> tuple[str, list[str], str]:
    t1, t2 = (int(x) for x in rng.integers(2, 9, size=2))
    speed = int(rng.integers(30, 120))
    d = speed * t1
    q = f"A train travels {d} km in {t1} hours. At the same speed, how many km does it travel in {t2} hours?"
    return q, [f"{d} / {t1}", f"{speed} * {t2}"], "rate"


def _discount(rng: np.random.Generator) -> tuple[str, list[str], str]:
    price = int(rng.integers(20, 400))
    off = int(rng.choice([10, 15, 20, 25, 30, 40]))
    tax = int(rng.choice([5, 8, 10, 20]))
    after = Fraction(price) * (100 - off) / 100
    q = (
        f"A jacket costs ${price}. It is discounted by {off}%, and then a {tax}% sales tax is added to the "
        "discounted price. What is the final price in dollars?"
    )
    return (
        q,
        [f"{price} * (100 - {off}) / 100", f"{format_number(after).split(' ')[0]} * (100 + {tax}) / 100"],
        "discount",
    )


def _average(rng: np.random.Generator) -> tuple[str, list[str], str]:
    k = int(rng.integers(3, 6))
    scores = [int(x) for x in rng.integers(50, 100, size=k)]
    name = _NAMES[int(rng.integers(len(_NAMES)))]
    q = f"{name}'s test scores are {', '.join(map(str, scores))}. What is the average score?"
    return q, [" + ".join(map(str, scores)), f"{sum(scores)} / {k}"], "average"


def _sharing(rng: np.random.Generator) -> tuple[str, list[str], str]:
    n = int(rng.integers(3, 9))
    each_a, each_b = (int(x) for x in rng.integers(1, 9, size=2))
    a, b = n * each_a, n * each_b
    q = f"{n} friends share {a} apples and {b} oranges equally. How many pieces of fruit does each friend get?"
    return q, [f"{a} + {b}", f"{a + b} / {n}"], "sharing"


_GENERATORS = {
    "arithmetic": _arith,
    "shopping": _shopping,
    "rate": _rate,
    "discount": _discount,
    "average": _average,
    "sharing": _sharing,
}


class CalculatorEnv(ToolEnv):
    """Math problems with a safe calculator tool.

    Args:
        kinds: which problem generators to draw from (default all: arithmetic, shopping, rate, discount, average,
            sharing).
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings`.

    Metrics: ``correct`` (the answer states the solution; the answer score and the success rule). Tasks are
    generated: ``reset(options={"task_index": i})`` is the task generated from seed ``i``, ``options={"kind": k}``
    picks the generator.
    """

    process_rewards = (
        ProcessReward(
            "progress", 0.05, "per needed intermediate result computed for the first time in the episode"
        ),
    )
    answer_metrics = ("correct",)
    success_metric = "correct"
    reset_options = ("kind",)

    def __init__(
        self,
        *,
        kinds: tuple[str, ...] | list[str] | None = None,
        **settings: Any,
    ) -> None:
        kinds = tuple(kinds or _GENERATORS)
        unknown = [k for k in kinds if k not in _GENERATORS]
        if unknown or not kinds:
            raise ConfigError(f"unknown problem kinds {unknown}; choose from {sorted(_GENERATORS)}")
        if isinstance(settings.get("max_turns"), int) and settings["max_turns"] < 5:
            raise ConfigError(
                "max_turns must be >= 5 (up to 3 calculator steps and an answer, with a spare turn)"
            )
        self.kinds = kinds
        super().__init__([CalculatorTool()], **settings)
        self._progress = NeededValues()

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> MathTask:
        kind = options.get("kind") or self.kinds[int(rng.integers(len(self.kinds)))]
        if kind not in _GENERATORS:
            raise ConfigError(f"options['kind'] must be one of {sorted(_GENERATORS)}")
        question, steps, kind = _GENERATORS[kind](rng)
        answer = evaluate(steps[-1])
        digest = hashlib.sha1("\n".join([question, *steps]).encode()).hexdigest()[:10]
        return MathTask(
            id=f"{kind}-{digest}", question=question, answer=answer, steps=tuple(steps), kind=kind
        )

    def on_reset(self) -> None:
        self._progress = NeededValues(evaluate(s) for s in self.task.steps)

    def task_prompt(self, task: MathTask) -> str:
        return (
            "Solve the problem below. Use the calculator for every computation, one step per turn, and give "
            f"the final number as your final answer.\n\nProblem: {task.question}"
        )

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return {"correct": float(answer is not None and answer_matches(answer, self.task.answer))}

    def task_answers(self, task: MathTask) -> tuple[str, ...]:
        return (format_number(task.answer).split(" ")[0],)

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        return self._progress.pay(result.metadata.get("value"))

    def process_reward_caps(self) -> dict[str, float]:
        return self._progress.caps()

    def oracle_action(self) -> str:
        """Evaluate the first solution step whose value the episode has not computed yet with the calculator;
        once all are, answer. It plans from what the episode computed, so asking twice gives the same turn, and a
        step the player computed is not suggested again."""
        self._require_task("oracle_action()")
        for step in self.task.steps:
            if evaluate(step) in self._progress:
                return self.call_text("calculator", expression=step)
        return self.answer_text(self.task_answers(self.task)[0])
