"""The small real samples bundled with the package (see ``bundled/LICENSES.md`` for licences and attribution)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.data.qa import QATask, corpus_from_tasks, load_qa
from agentr1_gym.errors import ConfigError

__all__ = ["BUNDLED", "bundled_corpus", "bundled_path", "bundled_tasks"]

#: (dataset, split) -> (file, corpus file or None: the corpus is built from the questions' context)
BUNDLED: dict[tuple[str, str], tuple[str, str | None]] = {
    ("hotpotqa", "dev"): ("hotpotqa_dev_distractor_300.jsonl.gz", None),
    ("hotpotqa", "train"): ("hotpotqa_train_100.json.gz", None),
    ("musique", "dev"): ("musique_ans_dev_50.jsonl.gz", None),
    ("musique", "train"): ("musique_ans_train_100.json.gz", None),
    ("2wikimultihopqa", "dev"): ("2wikimultihopqa_dev_177.jsonl.gz", "2wikimultihopqa_dev_corpus.json.gz"),
}


def bundled_path(name: str) -> Path:
    """The path of a file bundled under ``agentr1_gym/data/bundled/``."""
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
    return tuple(load_qa(bundled_path(file), dataset))


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
        base = Corpus.from_jsonl(bundled_path(corpus_file))
        passages = (Passage(str(i), p.title, p.text) for i, p in enumerate(base))
    else:
        passages = corpus_from_tasks([t for d, s in splits for t in bundled_tasks(d, s)]).passages
    return Corpus(passages, source=f"bundled:{name}", rebuild=(bundled_corpus, (name,)))
