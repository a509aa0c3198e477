"""Answer matchers: the QA metrics of the official HotpotQA/SQuAD script (:func:`exact_match`, :func:`f1_score`,
and Agent-R1's :func:`sub_exact_match`, together :func:`qa_metrics`), and the matchers for your own reward
functions: numeric, text, and the one that picks between them.

:func:`exact_match` is HotpotQA's official metric: it strips punctuation, so it scores "1.5" against "15" and "-3"
against "3" as equal. That is right for QA parity and wrong for numbers; use :func:`answer_match`,
:func:`numeric_match` or :func:`text_match` for your own tasks. Every matcher returns 1.0 or 0.0 (F1 a fraction)
and takes one gold answer or several.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

__all__ = [
    "SUB_EM_EXTRA_WORDS",
    "answer_match",
    "exact_match",
    "f1_score",
    "normalize_answer",
    "numeric_match",
    "parse_number",
    "parse_numbers",
    "qa_metrics",
    "sub_exact_match",
    "text_match",
]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:\s*/\s*-?\d+(?:\.\d+)?)?|-?\.\d+")
#: longest digit string read as a number (longer ones are not an answer anyone means; they also keep
#: Fraction's parsing bounded)
MAX_NUMBER_CHARS = 60
_ONLY_NUMBER = re.compile(r"\s*[$€£]?\s*" + _NUMBER.pattern.join("()") + r"\s*%?\s*\.?\s*")


def parse_numbers(text: str) -> list[Fraction | None]:
    """Every number in a text, in order (``None`` for one that cannot be read: too long, or ``a/0``): integers,
    decimals, ``a/b`` fractions; ``$``, ``%`` and ``,`` thousands separators ignored."""
    cleaned = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    out: list[Fraction | None] = []
    for match in _NUMBER.finditer(cleaned):
        token = match.group(0).replace(" ", "")
        if len(token) > MAX_NUMBER_CHARS:
            out.append(None)
            continue
        try:
            if "/" in token:
                num, den = token.split("/")
                out.append(Fraction(num) / Fraction(den) if Fraction(den) != 0 else None)
            else:
                out.append(Fraction(token))
        except (ValueError, ZeroDivisionError):
            out.append(None)
    return out


def parse_number(text: str) -> Fraction | None:
    """The last number in a text (see :func:`parse_numbers`)."""
    numbers = parse_numbers(text)
    return numbers[-1] if numbers else None


def _golds(gold: object) -> list[object]:
    return [gold] if isinstance(gold, (str, int, float, Fraction)) else list(gold)  # type: ignore[call-overload]


def _as_fraction(value: object) -> Fraction | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value).limit_denominator(10**9)
    text = str(value)
    if not _ONLY_NUMBER.fullmatch(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)):
        return None
    return parse_number(text)


def numeric_match(
    prediction: str,
    gold: str | float | Fraction | Iterable[str | float | Fraction],
    *,
    rel_tol: float = 1e-4,
    abs_tol: float = 1e-6,
    integers_exact: bool = True,
) -> float:
    """1.0 when the prediction holds at least one number and *every* number in it equals a gold number, so
    hedging ("15, or maybe 12") never pays. An integer gold (``123552``, ``"42"``, ``12.0``) must be matched
    exactly (``integers_exact``: "123540", "123552.9" and "about 123550" are wrong); other golds within
    ``max(abs_tol, rel_tol * |gold|)`` (``1/3`` as ``0.33333``). Understands ``3/4``, ``$``, ``%`` and thousands
    separators; signs and decimal points count ("-3" is not "3", "1.5" is not "15")."""
    numbers = parse_numbers(prediction)
    if not numbers or any(v is None for v in numbers):
        return 0.0
    for g in _golds(gold):
        target = _as_fraction(g) if not isinstance(g, str) else parse_number(g)
        if target is None:
            continue
        if integers_exact and target.denominator == 1:
            if all(v == target for v in numbers):
                return 1.0
            continue
        tol = max(abs_tol, rel_tol * abs(float(target)))
        if all(abs(float(v - target)) <= tol for v in numbers if v is not None):
            return 1.0
    return 0.0


_EDGE = re.compile(r"^[\s\"'`.,;:!?()\[\]{}]+|[\s\"'`.,;:!?()\[\]{}]+$")


def _norm(text: str, case_sensitive: bool) -> str:
    text = " ".join(str(text).split())
    text = _EDGE.sub("", text)
    return text if case_sensitive else text.casefold()


def text_match(prediction: str, gold: str | Iterable[str], *, case_sensitive: bool = False) -> float:
    """1.0 when the prediction equals a gold answer after collapsing whitespace and stripping quotes, brackets
    and punctuation at the ends (and case, unless ``case_sensitive``). Inner punctuation counts: "1.5" != "15"."""
    pred = _norm(prediction, case_sensitive)
    return float(any(pred == _norm(str(g), case_sensitive) for g in _golds(gold)))


def answer_match(prediction: str, gold: str | float | Iterable[str | float]) -> float:
    """:func:`numeric_match` for gold answers that are a number (``42``, ``"3/4"``, ``"$1,200"``), else
    :func:`text_match`: the default matcher of dataset envs."""
    for g in _golds(gold):
        if _as_fraction(g) is not None:
            if numeric_match(prediction, g):
                return 1.0
        elif text_match(prediction, str(g)):
            return 1.0
    return 0.0


# ---- the QA metrics (HotpotQA's official script, Agent-R1's sub-EM) ----------------------------------------
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
    """1.0 if the normalised prediction equals a normalised gold answer (HotpotQA's official EM: punctuation is
    stripped, so "1.5" matches "15" and "-3" matches "3"; for numbers and your own tasks use
    :mod:`agentr1_gym.matching`)."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _as_list(gold)))


#: sub-EM counts a prediction at most this many words longer than the gold answer (see :func:`sub_exact_match`)
SUB_EM_EXTRA_WORDS = 5


def sub_exact_match(
    prediction: str, gold: str | Iterable[str], max_extra_words: int | None = SUB_EM_EXTRA_WORDS
) -> float:
    """1.0 if a normalised gold answer occurs in the normalised prediction (Agent-R1's and FlashRAG's sub-EM), as
    whole words, in a prediction at most ``max_extra_words`` words longer than that gold answer.

    The length bound is ours: without it (``max_extra_words=None``, FlashRAG's metric) answering with a whole
    retrieved passage, or echoing a comparison question that names both candidates, scores 1 without answering
    (under ``RewardConfig.agent_r1()`` that earned 0.58 of the maximum reward on HotpotQA with EM 0)."""
    pred = normalize_answer(prediction)
    padded, words = f" {pred} ", len(pred.split())
    for x in _as_list(gold):
        g = normalize_answer(x)
        if not g or f" {g} " not in padded:
            continue
        if max_extra_words is None or words <= len(g.split()) + max_extra_words:
            return 1.0
    return 0.0


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
