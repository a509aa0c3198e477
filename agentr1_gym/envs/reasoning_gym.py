"""``AgentR1/ReasoningGym-v0``: every `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ dataset
(100+ procedurally generated, verifiable task families; ``pip install reasoning-gym``) as an env, optionally with
the calculator or the sandboxed Python tool.

``gym.make("AgentR1/ReasoningGym-v0", task="chain_sum", config={"min_terms": 2}, tool="calculator")``. Task ``i``
(``task_index`` or the reset seed) is the dataset's item generated from seed ``i``: procedural, so held-out seeds
are held-out problems. The dataset's own ``score_answer`` scores the final answer; it gives partial credit for
some near misses (a wrong number in GSM-style problems earns 0.01, a right one wrapped in words 0.125), so the
metric ``score`` is that credit and ``correct`` (the success metric) is whether it was full credit; with
``partial_credit=False`` the outcome pays only full credit.

The oracle (warm starts, tests) knows the solution: with a tool it first evaluates each step it can read off the
item (the ``expression`` of arithmetic items, the ``a op b = c`` steps of a GSM solution) with the tool, then
answers.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import numpy as np

from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError, MissingDependencyError
from agentr1_gym.formats import ToolCall
from agentr1_gym.rewards import NeededValues, ProcessReward
from agentr1_gym.tools.base import ToolResult

__all__ = ["CURATED", "RGTask", "ReasoningGymEnv"]

#: curated ids: (env id suffix, dataset, config, tool, description)
CURATED = (
    ("ChainSum", "chain_sum", {}, "calculator", "sums and differences of 2-6 integers"),
    ("BasicArithmetic", "basic_arithmetic", {}, "calculator", "+ - * / expressions of 2-6 integers"),
    ("GSMSymbolic", "gsm_symbolic", {}, "calculator", "GSM8K-style word problems (GSM-Symbolic templates)"),
)
_STEP = re.compile(r"([0-9(][0-9.\s+\-*/()]*[0-9)])\s*=\s*(-?[0-9]+(?:\.[0-9]+)?)")
_SAFE = re.compile(r"^[0-9.\s+\-*/()]+$")


def _cot_steps(text: str) -> list[str]:
    """The ``a op b = c`` computations of a worked solution, units and words removed, each checked: it is kept
    only if it evaluates to the number it states."""
    from agentr1_gym.tools.calculator import CalculatorError, evaluate

    steps = []
    for line in text.splitlines():
        clean = re.sub(r"(?<=\d),(?=\d{3}\b)", "", line)
        clean = re.sub(r"[A-Za-z%$£€']+", " ", clean)  # units between the numbers ("3 apples + 4 apples")
        clean = re.sub(r"[^0-9.\s+\-*/()=]+", " ; ", clean)  # other punctuation ends a computation
        for lhs, rhs in _STEP.findall(clean):
            expr = " ".join(lhs.split())
            if not any(op in expr for op in "+-*/"):
                continue
            try:
                if abs(float(evaluate(expr)) - float(rhs)) <= 1e-6 * max(1.0, abs(float(rhs))):
                    steps.append(expr)
            except (CalculatorError, ValueError, ZeroDivisionError):
                continue
    return steps


def _require() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise MissingDependencyError(
            "AgentR1/ReasoningGym-v0 needs reasoning-gym: pip install 'agentr1-gym[reasoning]'"
        ) from None
    return reasoning_gym


class RGTask(dict):
    """A reasoning-gym item (``question``, ``answer``, ``metadata``) with its ``id`` (dataset:seed)."""

    @property
    def id(self) -> str:
        return str(self["id"])


#: config numbers above this are tried in a subprocess with :data:`PROBE_TIMEOUT_S` before the env is built
LARGE_CONFIG_NUMBER = 1000
PROBE_TIMEOUT_S = 10.0
#: a generated question longer than this is refused (a prompt no model context holds)
MAX_QUESTION_CHARS = 100_000


def _has_large_numbers(config: dict[str, Any]) -> bool:
    values = [v for x in config.values() for v in (x if isinstance(x, (list, tuple)) else [x])]
    return any(
        isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > LARGE_CONFIG_NUMBER
        for v in values
    )


def _probe_in_subprocess(task: str, config: dict[str, Any]) -> None:
    """Generate one task of ``config`` in a child process, killed after :data:`PROBE_TIMEOUT_S` (reasoning-gym
    generates in Python: a huge size cannot be interrupted in this process)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys, reasoning_gym\n"
        "item = reasoning_gym.create_dataset(sys.argv[1], seed=0, size=1, **json.loads(sys.argv[2]))[0]\n"
        "print(len(item['question']))\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, task, json.dumps(config)],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"reasoning-gym {task!r} config {config}: generating one task took longer than {PROBE_TIMEOUT_S:g} s; "
            "lower its sizes"
        ) from None
    except (TypeError, ValueError) as exc:  # a config JSON cannot hold
        raise ConfigError(f"reasoning-gym {task!r} config {config!r:.120}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise ConfigError(f"reasoning-gym {task!r} config {config}: {last[:200]}")
    chars = int(proc.stdout.split()[-1])
    if chars > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"reasoning-gym {task!r} config {config}: a task's question is {chars:,} characters (the limit is "
            f"{MAX_QUESTION_CHARS:,}); lower its sizes"
        )


class ReasoningGymEnv(ToolEnv):
    """One reasoning-gym dataset as an answer-shaped env.

    Args:
        task: the reasoning-gym dataset name (``reasoning_gym.factory.DATASETS`` lists them).
        config: the dataset's config fields (its ``*Config`` dataclass), e.g. ``{"min_terms": 3}``.
        tool: ``"calculator"`` (exact arithmetic), ``"python"`` (the sandboxed interpreter) or ``"none"``.
        partial_credit: pay the dataset's partial credit as the outcome (else only full credit counts).
    """

    answer_metrics = ("score", "correct")
    success_metric = "correct"
    process_rewards = (
        ProcessReward(
            "progress",
            0.05,
            "a calculator result that is one of the item's solution steps (the expression of arithmetic items, "
            "the a op b = c steps of a GSM solution), once each",
        ),
    )

    def __init__(
        self,
        *,
        task: str = "chain_sum",
        config: dict[str, Any] | None = None,
        tool: Literal["calculator", "python", "none"] = "calculator",
        partial_credit: bool = True,
        **settings: Any,
    ) -> None:
        rg = _require()
        from reasoning_gym.factory import DATASETS

        if task not in DATASETS:
            import difflib

            close = difflib.get_close_matches(str(task), list(DATASETS), n=3)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            raise ConfigError(
                f"reasoning-gym has no dataset {task!r}{hint}; see reasoning_gym.factory.DATASETS"
            )
        self.rg_task = task
        self.rg_config = dict(config or {})
        if _has_large_numbers(
            self.rg_config
        ):  # a size like min_terms=10**7 would hang reset: try it first, bounded
            _probe_in_subprocess(task, self.rg_config)
        try:  # validate the config once, at construction (one-line error naming the field)
            self._dataset(0)[0]
        except (TypeError, ValueError, AssertionError, KeyError, IndexError) as exc:
            raise ConfigError(f"reasoning-gym {task!r} config {self.rg_config}: {exc}") from None
        del rg
        if tool == "calculator":
            from agentr1_gym.tools.calculator import CalculatorTool

            tools: list[Any] = [CalculatorTool()]
        elif tool == "python":
            from agentr1_gym.tools.python import PythonTool

            tools = [PythonTool()]
        elif tool == "none":
            tools = []
        else:
            raise ConfigError(f"tool must be 'calculator', 'python' or 'none', got {tool!r}")
        self.tool = tool
        self.partial_credit = bool(partial_credit)
        if not self.partial_credit:
            self.answer_metrics = ("correct", "score")
        super().__init__(tools, **settings)

    def _dataset(self, seed: int) -> Any:
        import reasoning_gym

        return reasoning_gym.create_dataset(self.rg_task, seed=int(seed), size=1, **self.rg_config)

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> RGTask:
        seed = int(rng.integers(2**31 - 1))
        item = self._dataset(seed)[0]
        return RGTask(
            id=f"{self.rg_task}:{seed}",
            seed=seed,
            question=item["question"],
            answer=str(item["answer"]),
            metadata=item.get("metadata", {}),
        )

    def on_reset(self) -> None:
        self._scorer = self._dataset(self.task["seed"])
        self._progress = NeededValues(self._step_values())

    def _step_values(self) -> set[Any]:
        if self.tool != "calculator":
            return set()
        from agentr1_gym.tools.calculator import CalculatorError, evaluate

        values = set()
        for step in self._solution_steps():
            try:
                values.add(evaluate(step))
            except CalculatorError:
                continue
        return values

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        return self._progress.pay(result.metadata.get("value"))

    def process_reward_caps(self) -> dict[str, float]:
        return self._progress.caps()

    def task_prompt(self, task: RGTask) -> str:
        how = {
            "calculator": " Use the calculator for the arithmetic.",
            "python": " You may run Python to compute.",
            "none": "",
        }[self.tool]
        return (
            f"Solve the problem below.{how} Give only the final result as your answer.\n\n{task['question']}"
        )

    def score_answer(self, answer: str | None) -> dict[str, float]:
        if answer is None:
            return {"score": 0.0, "correct": 0.0}
        item = {
            "question": self.task["question"],
            "answer": self.task["answer"],
            "metadata": self.task["metadata"],
        }
        try:
            score = float(self._scorer.score_answer(answer.strip(), item))
        except Exception:
            score = 0.0
        score = min(1.0, max(0.0, score)) if np.isfinite(score) else 0.0
        return {"score": score, "correct": float(score >= 1.0)}

    def task_answers(self, task: RGTask) -> tuple[str, ...]:
        return (task["answer"],)

    def _solution_steps(self) -> list[str]:
        meta = self.task["metadata"]
        if self.tool == "none":
            return []
        expr = meta.get("expression")
        if isinstance(expr, str) and _SAFE.match(expr):
            return [expr]
        return _cot_steps(str(meta.get("answer_cot", "")))[:4]

    def oracle_action(self) -> str:
        """Evaluate the steps the item shows with the tool (one per turn), then answer; reads only the turn
        count, so calling it changes nothing."""
        self._require_task("oracle_action()")
        steps = self._solution_steps()
        if self.turn < len(steps) and self.turn < self.max_turns - 1:
            if self.tool == "calculator":
                return self.call_text("calculator", expression=steps[self.turn])
            return self.call_text("python", code=f"print({steps[self.turn]})")
        return self.answer_text(self.task["answer"])
