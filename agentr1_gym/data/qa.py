"""Multi-hop QA data: one task model (:class:`QATask`) and loaders for the official file layouts.

Loaders read plain or gzip-compressed files:

* :func:`load_hotpotqa` - HotpotQA official JSON (list, or one object per line), distractor or fullwiki,
  and the Hugging Face ``hotpot_qa`` layout;
* :func:`load_2wiki` - 2WikiMultihopQA official JSON (with ``context``) or its JSONL without context;
* :func:`load_musique` - MuSiQue official JSONL (or a JSON list);
* :func:`load_flashrag` - FlashRAG JSONL (``id, question, golden_answers``);
* :func:`load_qa` - any of the above, detected from the first record.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.data.records import (
    gold_field,
    need_fields,
    read_records_with_location,
    record_errors,
    text_field,
    unique,
)
from agentr1_gym.errors import ConfigError, DataError

__all__ = [
    "QATask",
    "corpus_from_tasks",
    "load_2wiki",
    "load_flashrag",
    "load_hotpotqa",
    "load_musique",
    "load_qa",
]


class QATask(BaseModel):
    """One question with its gold answers and evidence, whatever dataset it came from."""

    model_config = ConfigDict(frozen=True)

    id: str
    question: str
    answers: tuple[str, ...]
    supporting_titles: tuple[str, ...] = ()
    type: str = ""
    hops: int = 0
    dataset: str = ""
    #: (title, text) paragraphs shipped with the question (distractor context); empty for open-domain data
    context: tuple[tuple[str, str], ...] = ()


def _hotpot_like(
    r: dict[str, Any], dataset: str, joiner: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    facts = r.get("supporting_facts", [])
    ctx = r.get("context", [])
    if isinstance(facts, dict):  # Hugging Face layout
        titles = unique(facts.get("title", []))
    else:
        titles = unique(str(f[0]) for f in facts)
    if isinstance(ctx, dict):
        pairs = zip(ctx.get("title", []), ctx.get("sentences", []))
    else:
        pairs = ((c[0], c[1]) for c in ctx)
    context = tuple((str(t), joiner.join(s).strip() if isinstance(s, list) else str(s)) for t, s in pairs)
    return titles, context


def load_hotpotqa(path: str | Path) -> list[QATask]:
    """HotpotQA (official or Hugging Face layout; distractor or fullwiki). Hop count is 2 by construction."""
    tasks = []
    for where, r in read_records_with_location(path):
        with record_errors(path, where, "HotpotQA"):
            tasks.append(_hotpot_task(r, len(tasks)))
    return tasks


def _hotpot_task(r: dict[str, Any], index: int) -> QATask:
    need_fields(r, ("question", "answer"), "HotpotQA")
    titles, context = _hotpot_like(r, "hotpotqa", "")
    return QATask(
        id=str(r.get("_id", r.get("id", index))),
        question=text_field(r, "question"),
        answers=gold_field(r, "answer"),
        supporting_titles=titles,
        type=str(r.get("type", "")),
        hops=2,
        dataset="hotpotqa",
        context=context,
    )


_2WIKI_HOPS = {"comparison": 2, "inference": 2, "compositional": 2, "bridge_comparison": 4}


def load_2wiki(path: str | Path) -> list[QATask]:
    """2WikiMultihopQA official JSON (``context``, ``supporting_facts``, ``evidences``); ``gold_titles`` and
    ``answer_aliases`` are used when present."""
    tasks = []
    for where, r in read_records_with_location(path):
        with record_errors(path, where, "2WikiMultihopQA"):
            tasks.append(_2wiki_task(r, len(tasks)))
    return tasks


def _2wiki_task(r: dict[str, Any], index: int) -> QATask:
    need_fields(r, ("question", "answer"), "2WikiMultihopQA")
    titles, context = _hotpot_like(r, "2wikimultihopqa", " ")
    titles = unique([*titles, *map(str, r.get("gold_titles", []))])
    qtype = str(r.get("type", ""))
    return QATask(
        id=str(r.get("_id", r.get("id", index))),
        question=text_field(r, "question"),
        answers=gold_field(r, "answer", "answer_aliases"),
        supporting_titles=titles,
        type=qtype,
        hops=_2WIKI_HOPS.get(qtype, len(titles)),
        dataset="2wikimultihopqa",
        context=context,
    )


def load_musique(path: str | Path, *, answerable_only: bool = True) -> list[QATask]:
    """MuSiQue (Ans or Full). Hop count from ``question_decomposition``; aliases from ``answer_aliases``."""
    tasks = []
    for where, r in read_records_with_location(path):
        if answerable_only and not r.get("answerable", True):
            continue
        with record_errors(path, where, "MuSiQue"):
            tasks.append(_musique_task(r, len(tasks)))
    return tasks


def _musique_task(r: dict[str, Any], index: int) -> QATask:
    need_fields(r, ("question", "answer", "paragraphs"), "MuSiQue")
    paragraphs = r["paragraphs"]
    titles = unique(str(p["title"]) for p in paragraphs if p.get("is_supporting"))
    context = tuple((str(p["title"]), str(p["paragraph_text"])) for p in paragraphs)
    hops = len(r.get("question_decomposition", [])) or len(titles)
    return QATask(
        id=str(r.get("id", index)),
        question=text_field(r, "question"),
        answers=gold_field(r, "answer", "answer_aliases"),
        supporting_titles=titles,
        type=str(r.get("id", "")).split("__")[0],
        hops=hops,
        dataset="musique",
        context=context,
    )


def load_flashrag(path: str | Path) -> list[QATask]:
    """FlashRAG JSONL: ``{"id", "question", "golden_answers"}`` (no evidence annotations)."""
    tasks = []
    for where, r in read_records_with_location(path):
        with record_errors(path, where, "FlashRAG"):
            need_fields(r, ("question", "golden_answers"), "FlashRAG")
            meta = r.get("metadata") or {}
            tasks.append(
                QATask(
                    id=str(r.get("id", len(tasks))),
                    question=text_field(r, "question"),
                    answers=gold_field(r, "golden_answers"),
                    type=str(meta.get("type", "")) if isinstance(meta, dict) else "",
                    dataset="flashrag",
                )
            )
    return tasks


LOADERS = {
    "hotpotqa": load_hotpotqa,
    "2wikimultihopqa": load_2wiki,
    "musique": load_musique,
    "flashrag": load_flashrag,
}
DatasetName = Literal["hotpotqa", "2wikimultihopqa", "musique", "flashrag"]


def detect_layout(record: dict[str, Any]) -> str:
    """Which loader fits a record."""
    if "golden_answers" in record:
        return "flashrag"
    if "paragraphs" in record and "question_decomposition" in record:
        return "musique"
    if "evidences" in record or "gold_titles" in record:
        return "2wikimultihopqa"
    if "supporting_facts" in record or "context" in record:
        return "hotpotqa"
    raise DataError(
        f"cannot tell the dataset of a record with keys {sorted(record)}; pass dataset= explicitly"
    )


def load_qa(path: str | Path, dataset: str | None = None) -> list[QATask]:
    """Load any supported layout; ``dataset`` names it, or it is detected from the first record."""
    if dataset is None:
        first = next(read_records_with_location(path), None)
        if first is None:
            raise DataError(f"{path} holds no records")
        with record_errors(path, first[0], "QA"):
            dataset = detect_layout(first[1])
    loader = LOADERS.get(dataset)
    if loader is None:
        raise ConfigError(f"unknown dataset layout {dataset!r}; choose one of {sorted(LOADERS)}")
    tasks = loader(path)
    if not tasks:
        raise DataError(f"{path} holds no usable {dataset} records")
    return tasks


def corpus_from_tasks(tasks: Iterable[QATask], *, source: str | None = None) -> Corpus:
    """A retrieval corpus from the tasks' context paragraphs (exact duplicates removed, order kept)."""
    seen: dict[tuple[str, str], None] = {}
    for t in tasks:
        for pair in t.context:
            seen.setdefault(pair, None)
    return Corpus((Passage(id=str(i), title=t, text=x) for i, (t, x) in enumerate(seen)), source=source)
