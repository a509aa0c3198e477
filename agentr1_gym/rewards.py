"""Answer metrics and reward composition.

Metrics follow the official HotpotQA evaluation script: answers are normalised by lower-casing, removing
punctuation, removing the articles *a/an/the* and collapsing whitespace; F1 is token-level; when either the
prediction or the gold answer normalises to ``yes``, ``no`` or ``noanswer`` and the two differ, F1 is 0.
With several gold answers (aliases) every metric takes the maximum over them.

Rewards are named components combined with weights (:class:`RewardConfig`); ``info["reward_components"]``
holds each weighted component and sums to the step reward.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "OUTCOME_KEYS",
    "PROCESS_KEYS",
    "RewardConfig",
    "exact_match",
    "f1_score",
    "normalize_answer",
    "qa_metrics",
    "sub_exact_match",
]

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Official HotpotQA/SQuAD normalisation: lower, strip punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _as_list(gold: str | Iterable[str]) -> list[str]:
    return [gold] if isinstance(gold, str) else list(gold)


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(gold)))


def sub_exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 if a normalised gold answer occurs in the normalised prediction (Agent-R1's and FlashRAG's sub-EM)."""
    pred = normalize_answer(prediction)
    return float(any((g := normalize_answer(x)) and g in pred for x in _as_list(gold)))


def _f1_single(prediction: str, gold: str) -> tuple[float, float, float]:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str, gold: str | Iterable[str]) -> float:
    """Token-level F1 of the official HotpotQA script (max over gold aliases)."""
    return max((_f1_single(prediction, g)[0] for g in _as_list(gold)), default=0.0)


def qa_metrics(prediction: str | None, gold: str | Iterable[str]) -> dict[str, float]:
    """``{"em", "sub_em", "f1"}`` for a prediction (``None``: no answer given, all zero)."""
    if prediction is None:
        return {"em": 0.0, "sub_em": 0.0, "f1": 0.0}
    return {
        "em": exact_match(prediction, gold),
        "sub_em": sub_exact_match(prediction, gold),
        "f1": f1_score(prediction, gold),
    }


#: process (per-step) reward components, present in every step's ``reward_components``
PROCESS_KEYS = (
    "invalid_format",
    "invalid_call",
    "tool_success",
    "retrieval",
    "execution",
    "doctest",
    "progress",
)
#: outcome components, non-zero only on the step that ends the episode
OUTCOME_KEYS = ("answer", "format", "offset")


class RewardConfig(BaseModel):
    """Reward weights. The defaults give an answer-score reward in [0, 1], a small format bonus and dense,
    bounded process rewards; :meth:`agent_r1` reproduces Agent-R1's outcome formula.

    Process rewards are bounded per episode (the retrieval bonus pays only for gold evidence not seen before),
    so an agent cannot farm them by calling tools more often.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    answer_metric: Literal["em", "sub_em", "f1"] = Field(
        "f1", description="QA metric that becomes the answer reward (the others are still logged)."
    )
    answer_weight: float = Field(1.0, description="Weight of the answer score (in [0, 1]) at episode end.")
    format_weight: float = Field(
        0.1, description="Paid at episode end if every turn was well formed and a final answer was given."
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
    retrieval_reward: float = Field(
        0.1, description="Per gold supporting paragraph retrieved for the first time in the episode."
    )
    execution_reward: float = Field(
        0.05, description="Code envs: the first code run of the episode that exits without error."
    )
    doctest_reward: float = Field(
        0.1, description="Code envs: the first code run that passes the task prompt's own examples."
    )
    progress_reward: float = Field(
        0.05,
        description="Math envs: per needed intermediate result computed for the first time in the episode.",
    )

    @classmethod
    def agent_r1(cls) -> RewardConfig:
        """Agent-R1's formula: ``answer + format - 1`` in [-1, 1], sub-EM answers, gated by format."""
        return cls(
            answer_metric="sub_em",
            answer_weight=1.0,
            format_weight=1.0,
            format_gate=True,
            outcome_offset=-1.0,
            retrieval_reward=0.0,
            execution_reward=0.0,
            doctest_reward=0.0,
            progress_reward=0.0,
        )

    def outcome(self, score: float, format_ok: bool) -> dict[str, float]:
        """Outcome components for an answer score in [0, 1] and the episode's format validity."""
        if not math.isfinite(score):
            score = 0.0
        answer = 0.0 if (self.format_gate and not format_ok) else self.answer_weight * score
        return {
            "answer": answer,
            "format": self.format_weight if format_ok else 0.0,
            "offset": self.outcome_offset,
        }
