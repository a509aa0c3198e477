"""Answer metrics and reward composition.

Metrics follow the official HotpotQA evaluation script: answers are normalised by lower-casing, removing
punctuation, removing the articles *a/an/the* and collapsing whitespace; F1 is token-level; when either the
prediction or the gold answer normalises to ``yes``, ``no`` or ``noanswer`` and the two differ, F1 is 0.
With several gold answers (aliases) every metric takes the maximum over them.

Rewards are named components combined with weights (:class:`RewardConfig`); ``info["reward_components"]``
holds each weighted component and sums to the step reward. The generic components (format and call penalties,
the outcome) are defined here; each env declares its own process components (:class:`ProcessReward`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentr1_gym.errors import RewardRangeError

__all__ = [
    "COMPONENT_NOTES",
    "GENERIC_PROCESS_KEYS",
    "OUTCOME_KEYS",
    "REWARD_LIMIT",
    "UNEARNED_REWARD_BOUND",
    "NeededValues",
    "ProcessReward",
    "RewardConfig",
    "reward_problem",
    "unknown_process_reward_hint",
]

#: names that moved to :mod:`agentr1_gym.matching` (0.2): importing them from here still works, with a warning,
#: until 0.3
_MOVED = (
    "SUB_EM_EXTRA_WORDS",
    "exact_match",
    "f1_score",
    "normalize_answer",
    "qa_metrics",
    "sub_exact_match",
)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import warnings

        from agentr1_gym import matching

        warnings.warn(
            f"agentr1_gym.rewards.{name} is now agentr1_gym.matching.{name}; import it from there (until 0.3)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(matching, name)
    raise AttributeError(f"module 'agentr1_gym.rewards' has no attribute {name!r}")


#: The one finiteness rule for rewards, at every door (an env's components, a user's reward function and weights,
#: an OpenEnv server's answers, an agent's result, a trainer's batch): a reward is a finite number with
#: ``|reward| <= REWARD_LIMIT``. Far above any env's scale (ours pay within [-2, 2] per episode), far below float32's
#: 3.4e38: a batch's sums, group means and variances stay finite, so a trainer never steps on inf or NaN.
REWARD_LIMIT = 1e6


def reward_problem(value: Any) -> str | None:
    """Why ``value`` breaks the reward rule (not a number, NaN, infinite, beyond :data:`REWARD_LIMIT`), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {str(value)[:40]!r} is not a number"
    try:
        number = float(value)
    except OverflowError:
        return f"{str(value)[:40]} overflows a float"
    if not math.isfinite(number):
        return f"{number} is not finite"
    if abs(number) > REWARD_LIMIT:
        return f"{number:g} is beyond +-{REWARD_LIMIT:g} (it overflows float32 once summed or normalised)"
    return None


#: what the test suite holds every shipped reward preset to: a policy that never solves a task earns at most this
#: fraction of the maximum episode reward, on every env (``tests/core/test_reward_hacking.py``; the README lists the
#: exploit policies it plays)
UNEARNED_REWARD_BOUND = 0.2

#: process components every env has (penalties for malformed turns and calls, an optional per-call bonus)
GENERIC_PROCESS_KEYS = ("invalid_format", "invalid_call", "tool_success")
#: outcome components, non-zero only on the step that ends the episode
OUTCOME_KEYS = ("answer", "format", "offset")

#: what each generic component pays for, as a person reading a reward line needs it (the viewer's hover text);
#: env-declared components carry their own (:attr:`ProcessReward.description`)
COMPONENT_NOTES: dict[str, str] = {
    "invalid_format": "penalty for a turn that could not be parsed (or a final answer where the task has none)",
    "invalid_call": "penalty per tool call that could not run: an unknown tool or bad arguments",
    "tool_success": "paid per tool call that ran, for at most tool_success_cap calls an episode (off by default)",
    "answer": "the task's score at the episode's end (the answer metric, e.g. F1, or the world's own score) times "
    "answer_weight",
    "format": "bonus at the end when every turn was well formed and the answer solved the task",
    "offset": "a constant added at the end of every episode (RewardConfig.outcome_offset; Agent-R1 uses -1), so a "
    "failure can be worth less than 0",
}


@dataclass(frozen=True)
class ProcessReward:
    """A process-reward component an env declares: its name (the key in ``info["reward_components"]``), its
    default weight (paid per unit the env awards) and what earns it. Weights are overridden per run with
    ``RewardConfig(process={name: weight})``."""

    name: str
    weight: float
    description: str


class NeededValues:
    """The "pay each needed value once" process reward: the values a task's solution computes (the calculator
    envs' intermediate results). A successful call whose result is one of them earns one unit, once per value, so
    the cap is the number of values and recomputing a value earns nothing. ``name`` is the component's."""

    def __init__(self, values: Iterable[Any] = (), name: str = "progress") -> None:
        self.name = name
        self.remaining = set(values)
        self.cap = float(len(self.remaining))

    def __contains__(self, value: Any) -> bool:
        return value in self.remaining

    def pay(self, value: Any) -> dict[str, float]:
        """The units a call that produced ``value`` earns (``None``: a call with no value)."""
        if value is not None and value in self.remaining:
            self.remaining.discard(value)
            return {self.name: 1.0}
        return {}

    def caps(self) -> dict[str, float]:
        return {self.name: self.cap}


class RewardConfig(BaseModel):
    """Reward weights. The generic fields apply to every env; each env declares its own process components
    (:class:`ProcessReward`, listed in ``env.process_rewards``) whose weights ``process`` overrides and
    ``process_scale`` scales. The defaults give an answer-score reward in [0, 1], a small format bonus paid with
    answers that score (never for a well-formed wrong answer, which a policy could otherwise collect by answering
    at once without using a tool) and dense, bounded process rewards; :meth:`agent_r1` reproduces Agent-R1's
    outcome formula.

    Process rewards are bounded per episode (e.g. the retrieval bonus pays only for gold evidence not seen
    before), so an agent cannot farm them by calling tools more often. ``<name>_reward=w`` is accepted as
    shorthand for ``process={name: w}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    answer_metric: str | None = Field(
        None,
        description="Which of the env's answer metrics becomes the answer reward (None: the env's default, "
        "e.g. 'f1' for QA; see env.answer_metrics). The others are still logged.",
    )
    answer_weight: float = Field(1.0, description="Weight of the answer score (in [0, 1]) at episode end.")
    format_weight: float = Field(
        0.1, description="Paid at episode end if every turn was well formed and a final answer was given."
    )
    format_needs_success: bool = Field(
        True,
        description="If true, the format bonus is paid only with an answer that solves the task (the env's "
        "success rule), so it cannot be collected without solving: a well-formed guess, or an echo of the "
        "question that shares words with the answer, earns nothing.",
    )
    format_gate: bool = Field(
        False, description="If true, the answer reward is 0 unless the format was valid."
    )
    outcome_offset: float = Field(0.0, description="Constant added at episode end (Agent-R1 uses -1).")
    invalid_format_penalty: float = Field(
        -0.1, description="Per turn that cannot be parsed (Agent-R1: -0.1)."
    )
    invalid_call_penalty: float = Field(
        -0.05, description="Per tool call that cannot run: unknown tool or bad arguments (Agent-R1: -0.05)."
    )
    tool_success_reward: float = Field(0.0, description="Per tool call that ran successfully.")
    tool_success_cap: int = Field(
        2,
        ge=0,
        description="How many successful calls per episode are paid tool_success_reward (later ones earn "
        "nothing, so calling a cheap tool every turn cannot be farmed).",
    )
    process: dict[str, float] = Field(
        default_factory=dict,
        description="Weights of the env's own process components by name (default: the env's declared weights).",
    )
    process_scale: float = Field(
        1.0, ge=0.0, description="Multiplies every env-declared process weight (0 turns shaping off)."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """``retrieval_reward=0.2`` -> ``process={"retrieval": 0.2}`` for names that are not generic fields;
        ``format_needs_score`` (before 0.2, paid with any answer scoring above 0) -> ``format_needs_success``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "format_needs_score" in data:
            data.setdefault("format_needs_success", data.pop("format_needs_score"))
        extra = {k: data.pop(k) for k in list(data) if k.endswith("_reward") and k not in cls.model_fields}
        if extra:
            data["process"] = {
                **{k.removesuffix("_reward"): v for k, v in extra.items()},
                **data.get("process", {}),
            }
        return data

    def __hash__(self) -> int:  # frozen, but ``process`` is a dict
        return hash(self.model_dump_json())

    @classmethod
    def agent_r1(cls, answer_metric: str | None = "sub_em") -> RewardConfig:
        """Agent-R1's formula: ``answer + format - 1`` in [-1, 1], sub-EM answers, gated by format, no shaping.
        Envs without sub-EM (code, math) take ``answer_metric=None``: their own metric, same formula."""
        return cls(
            answer_metric=answer_metric,
            answer_weight=1.0,
            format_weight=1.0,
            format_gate=True,
            format_needs_success=False,
            outcome_offset=-1.0,
            process_scale=0.0,
        )

    def process_weight(self, component: ProcessReward) -> float:
        """The weight one unit of ``component`` pays under this config."""
        return self.process.get(component.name, component.weight) * self.process_scale

    def max_outcome(self) -> float:
        """The largest outcome reward: a fully correct, well-formed answer."""
        return max(self.answer_weight, 0.0) + max(self.format_weight, 0.0) + self.outcome_offset

    def outcome(self, score: float, format_ok: bool, success: bool | None = None) -> dict[str, float]:
        """Outcome components for an answer score in [0, 1], the episode's format validity and whether the answer
        solved the task (None: ``score >= 1``). A score that is not finite is an env's bug, raised (it was read
        as 0.0, which hid it)."""
        if not math.isfinite(score):
            raise RewardRangeError(
                f"the answer score is {score}, not a finite number: check the env's score_answer"
            )
        if success is None:
            success = score >= 1.0
        answer = 0.0 if (self.format_gate and not format_ok) else self.answer_weight * score
        paid = format_ok and (success or not self.format_needs_success)
        return {
            "answer": answer,
            "format": self.format_weight if paid else 0.0,
            "offset": self.outcome_offset,
        }


def unknown_process_reward_hint(name: str, declared: Sequence[str]) -> str:
    """The "did you mean" for a process reward ``name`` that is not among ``declared``: the closest declared one,
    else the RewardConfig field it may be a typo of (``tool_sucess_reward=`` reads as the weight of a process
    reward ``tool_sucess``), else nothing."""
    close = difflib.get_close_matches(name, list(declared), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    field_ = difflib.get_close_matches(f"{name}_reward", list(RewardConfig.model_fields), n=1)
    return f" (did you mean the RewardConfig field {field_[0]!r}?)" if field_ else ""
