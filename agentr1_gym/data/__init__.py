"""Task models and loaders: multi-hop QA (:mod:`.qa`), HumanEval (:mod:`.humaneval`), retrieval corpora
(:mod:`.corpus`), the bundled samples (:mod:`.bundled`) and the record reader they share (:mod:`.records`); the
worlds' own data, imported by their envs only and named after them: the shop's catalog and goals
(:mod:`.webshop`; :mod:`.shop` is its deprecated old name) and the text games' generated game files
(:mod:`.textgames`)."""

from agentr1_gym.data.bundled import BUNDLED, bundled_corpus, bundled_path, bundled_tasks
from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.data.humaneval import CodeTask, load_humaneval
from agentr1_gym.data.qa import (
    QATask,
    corpus_from_tasks,
    detect_layout,
    load_2wiki,
    load_flashrag,
    load_hotpotqa,
    load_musique,
    load_qa,
)
from agentr1_gym.data.records import read_records, read_records_with_location, record_errors

__all__ = [
    "BUNDLED",
    "CodeTask",
    "Corpus",
    "Passage",
    "QATask",
    "bundled_corpus",
    "bundled_path",
    "bundled_tasks",
    "corpus_from_tasks",
    "detect_layout",
    "load_2wiki",
    "load_flashrag",
    "load_hotpotqa",
    "load_humaneval",
    "load_musique",
    "load_qa",
    "read_records",
    "read_records_with_location",
    "record_errors",
]
