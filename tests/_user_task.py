"""A user's own module, as the tests import it by the ``module:id`` form: it registers a dataset task and a
subclassed env outside the AgentR1/ namespace when imported."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.registration import register, registry

from agentr1_gym import ToolEnv, register_task, tool


@tool
def lookup(city: str) -> str:
    """The country a city is in.

    Args:
        city: a city name, e.g. "Paris"
    """
    countries = {"Paris": "France", "Lima": "Peru", "Oslo": "Norway", "Quito": "Ecuador", "Hanoi": "Vietnam"}
    return countries.get(city, f"no city named {city!r}")


ROWS = [
    {"id": f"q{i}", "question": f"Which country is {city} in?", "city": city, "answer": country}
    for i, (city, country) in enumerate(
        [
            ("Paris", "France"),
            ("Lima", "Peru"),
            ("Oslo", "Norway"),
            ("Quito", "Ecuador"),
            ("Hanoi", "Vietnam"),
        ]
        * 2
    )
]


def _oracle(env: ToolEnv) -> str:
    if env.turn == 0:
        return env.call_text("lookup", city=env.task["city"])
    return env.answer_text(env.task["answer"])


register_task("UserOrg/Capitals-v0", ROWS, prompt="{question}", tools=[lookup], oracle=_oracle, max_turns=3)


class Doubling(ToolEnv):
    """A subclassed env with the public hooks: double a number (procedural)."""

    answer_metrics = ("correct",)
    success_metric = "correct"

    def __init__(self, **settings: Any) -> None:
        super().__init__([], **settings)

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> dict[str, Any]:
        n = int(rng.integers(1, 100))
        return {"id": f"double-{n}", "n": n}

    def task_prompt(self, task: dict[str, Any]) -> str:
        return f"What is twice {task['n']}?"

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return {"correct": float(answer is not None and answer.strip() == str(2 * self.task["n"]))}

    def task_answers(self, task: dict[str, Any]) -> tuple[str, ...]:
        return (str(2 * task["n"]),)

    def oracle_action(self) -> str:
        return self.answer_text(self.gold_answers[0])


if "UserOrg/Doubling-v0" not in registry:
    register(id="UserOrg/Doubling-v0", entry_point=f"{__name__}:Doubling")
