"""Multi-hop QA data: one task model (:class:`QATask`), loaders for the official file layouts, and the
small real samples bundled with the package (see ``bundled/LICENSES.md`` for licences and attribution).

Loaders read plain or gzip-compressed files:

* :func:`load_hotpotqa` - HotpotQA official JSON (list, or one object per line), distractor or fullwiki,
  and the Hugging Face ``hotpot_qa`` layout;
* :func:`load_2wiki` - 2WikiMultihopQA official JSON (with ``context``) or its JSONL without context;
* :func:`load_musique` - MuSiQue official JSONL (or a JSON list);
* :func:`load_flashrag` - FlashRAG JSONL (``id, question, golden_answers``);
* :func:`load_qa` - any of the above, detected from the first record.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentr1_gym.errors import ConfigError, DataError
from agentr1_gym.tools.search.corpus import Corpus, Passage

__all__ = [
    "BUNDLED",
    "QATask",
    "bundled_corpus",
    "bundled_tasks",
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


def _read_text(path: Path, what: str = "data file") -> str:
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{where}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # ValueError: numbers of more than 4,300 digits
        raise DataError(f"{where}: not valid JSON ({exc})") from None


def read_records_with_location(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each JSON object of a JSON-array or JSONL file (``where`` is ``"line N"`` or
    ``"record N"``); a file that is not valid JSON raises :class:`DataError` naming the file and line."""
    path = Path(path)
    text = _read_text(path)
    if text.lstrip().startswith("["):
        records = _parse_json(text, f"{path}")
        located = [(f"record {i}", r) for i, r in enumerate(records)]
    else:
        located = [
            (f"line {n}", _parse_json(line, f"{path}, line {n}"))
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip()
        ]
    for where, r in located:
        if not isinstance(r, dict):
            raise DataError(f"{path}, {where}: not a JSON object but {type(r).__name__}")
        yield where, r


def _read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    for _, record in read_records_with_location(path):
        yield record


@contextmanager
def record_errors(path: Any, where: str, dataset: str) -> Iterator[None]:
    """Turn any error while interpreting one record into a DataError naming the file, the record and the cause."""
    try:
        yield
    except DataError as exc:
        raise DataError(f"{path}, {where}: {exc}") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise DataError(f"{path}, {where}: a malformed {dataset} record ({what})") from None


def _need(record: dict[str, Any], keys: Iterable[str], dataset: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise DataError(f"a {dataset} record lacks {missing}; its keys are {sorted(record)[:20]}")


def _text_field(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def _gold(record: dict[str, Any], key: str, aliases: str | None = None) -> tuple[str, ...]:
    """The gold answers of a record: refused when null, empty, or not strings/numbers (a null answer once became
    the gold answer "None")."""
    value = record.get(key)
    values = value if isinstance(value, list) else [value]
    if aliases and isinstance(record.get(aliases), list):
        values = [*values, *record[aliases]]
    out = []
    for v in values:
        if v is None or isinstance(v, (dict, list, bool)) or not str(v).strip():
            raise DataError(f"field {key!r} holds {v!r:.60}; every task needs non-empty gold answers")
        out.append(str(v))
    if not out:
        raise DataError(f"field {key!r} is an empty list; every task needs a gold answer")
    return _unique(out)


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _hotpot_like(
    r: dict[str, Any], dataset: str, joiner: str
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    facts = r.get("supporting_facts", [])
    ctx = r.get("context", [])
    if isinstance(facts, dict):  # Hugging Face layout
        titles = _unique(facts.get("title", []))
    else:
        titles = _unique(str(f[0]) for f in facts)
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
    _need(r, ("question", "answer"), "HotpotQA")
    titles, context = _hotpot_like(r, "hotpotqa", "")
    return QATask(
        id=str(r.get("_id", r.get("id", index))),
        question=_text_field(r, "question"),
        answers=_gold(r, "answer"),
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
    _need(r, ("question", "answer"), "2WikiMultihopQA")
    titles, context = _hotpot_like(r, "2wikimultihopqa", " ")
    titles = _unique([*titles, *map(str, r.get("gold_titles", []))])
    qtype = str(r.get("type", ""))
    return QATask(
        id=str(r.get("_id", r.get("id", index))),
        question=_text_field(r, "question"),
        answers=_gold(r, "answer", "answer_aliases"),
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
    _need(r, ("question", "answer", "paragraphs"), "MuSiQue")
    paragraphs = r["paragraphs"]
    titles = _unique(str(p["title"]) for p in paragraphs if p.get("is_supporting"))
    context = tuple((str(p["title"]), str(p["paragraph_text"])) for p in paragraphs)
    hops = len(r.get("question_decomposition", [])) or len(titles)
    return QATask(
        id=str(r.get("id", index)),
        question=_text_field(r, "question"),
        answers=_gold(r, "answer", "answer_aliases"),
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
            _need(r, ("question", "golden_answers"), "FlashRAG")
            meta = r.get("metadata") or {}
            tasks.append(
                QATask(
                    id=str(r.get("id", len(tasks))),
                    question=_text_field(r, "question"),
                    answers=_gold(r, "golden_answers"),
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


# ---- bundled samples ----------------------------------------------------------------------------------------
#: (dataset, split) -> (file, corpus file or None: the corpus is built from the questions' context)
BUNDLED: dict[tuple[str, str], tuple[str, str | None]] = {
    ("hotpotqa", "dev"): ("hotpotqa_dev_distractor_300.jsonl.gz", None),
    ("hotpotqa", "train"): ("hotpotqa_train_100.json.gz", None),
    ("musique", "dev"): ("musique_ans_dev_50.jsonl.gz", None),
    ("musique", "train"): ("musique_ans_train_100.json.gz", None),
    ("2wikimultihopqa", "dev"): ("2wikimultihopqa_dev_177.jsonl.gz", "2wikimultihopqa_dev_corpus.json.gz"),
}


def _bundled_path(name: str) -> Path:
    return Path(str(resources.files("agentr1_gym.data") / "bundled" / name))


def _check_bundled(dataset: str, split: str) -> tuple[str, str | None]:
    entry = BUNDLED.get((dataset, split))
    if entry is None:
        have = sorted(f"{d}/{s}" for d, s in BUNDLED)
        raise ConfigError(
            f"no bundled sample for {dataset}/{split}; bundled: {have}. Pass data_path= for other data."
        )
    return entry


@cache
def bundled_tasks(dataset: str, split: str = "dev") -> tuple[QATask, ...]:
    """The bundled sample of ``dataset`` (``hotpotqa``, ``2wikimultihopqa``, ``musique``) and ``split``."""
    file, _ = _check_bundled(dataset, split)
    return tuple(load_qa(_bundled_path(file), dataset))


@cache
def bundled_corpus(name: str) -> Corpus:
    """The retrieval corpus of a bundled dataset (``name`` = ``"dataset"``: all its splits together).

    HotpotQA and MuSiQue: the context paragraphs of every bundled question of that dataset (so distractors of
    other questions are retrievable too); 2WikiMultihopQA: its bundled dev corpus file.
    """
    splits = [(d, s) for d, s in BUNDLED if d == name]
    if not splits:
        raise ConfigError(f"no bundled corpus {name!r}; bundled: {sorted({d for d, _ in BUNDLED})}")
    corpus_file = next((BUNDLED[k][1] for k in splits if BUNDLED[k][1]), None)
    if corpus_file is not None:
        base = Corpus.from_jsonl(_bundled_path(corpus_file))
        return Corpus(
            (Passage(str(i), p.title, p.text) for i, p in enumerate(base)), source=f"bundled:{name}"
        )
    tasks = [t for d, s in splits for t in bundled_tasks(d, s)]
    return corpus_from_tasks(tasks, source=f"bundled:{name}")
