"""Every malformed data file gives one DataError line naming the file (and the line or record and field where
there is one); null or empty gold answers are refused instead of becoming the answer "None"."""

from __future__ import annotations

import gzip
import json

import pytest

from agentr1_gym.data import load_2wiki, load_flashrag, load_hotpotqa, load_musique, load_qa
from agentr1_gym.envs.code import load_humaneval
from agentr1_gym.errors import DataError
from agentr1_gym.tools.search import Corpus

HOTPOT = {
    "_id": "a",
    "question": "Q?",
    "answer": "A",
    "supporting_facts": [["T", 0]],
    "context": [["T", ["s."]]],
}
MUSIQUE = {
    "id": "2hop__1", "question": "Q?", "answer": "A", "answerable": True, "question_decomposition": [{}, {}],
    "paragraphs": [{"title": "T", "paragraph_text": "p", "is_supporting": True}],
}  # fmt: skip
FLASH = {"id": "1", "question": "Q?", "golden_answers": ["A"]}
HUMANEVAL = {
    "task_id": "X/0", "prompt": "def f(x):\n    '''doc'''\n", "canonical_solution": "    return x\n",
    "test": "def check(c):\n    assert c(1) == 1\n", "entry_point": "f",
}  # fmt: skip


def _jsonl(*records) -> bytes:
    return "\n".join(json.dumps(r) for r in records).encode()


CASES = {
    # name: (loader, bytes, file suffix, text the message must contain)
    "empty file": (load_qa, b"", ".jsonl", "no records"),
    "binary garbage": (load_hotpotqa, bytes(range(256)) * 4, ".jsonl", "UTF-8"),
    "utf-16 text": (load_hotpotqa, json.dumps(HOTPOT).encode("utf-16"), ".jsonl", "UTF-8"),
    "not gzip": (load_hotpotqa, b"plain text", ".jsonl.gz", "cannot read"),
    "truncated gzip": (load_hotpotqa, gzip.compress(_jsonl(HOTPOT) * 50)[:-30], ".jsonl.gz", "cannot read"),
    "bad json line": (load_hotpotqa, _jsonl(HOTPOT) + b"\n{not json", ".jsonl", "line 2"),
    "unclosed array": (load_hotpotqa, b"[" + json.dumps(HOTPOT).encode(), ".json", "line 1"),
    "record is a list": (load_hotpotqa, b"[[1, 2]]", ".json", "record 0"),
    "record is a string": (load_flashrag, b'"just a string"', ".jsonl", "line 1"),
    "huge number": (load_hotpotqa, b'{"question": "Q", "answer": ' + b"9" * 5000 + b"}", ".jsonl", "line 1"),
    "deep nesting": (load_hotpotqa, b"[" * 100_000, ".json", "JSON"),
    "hotpot missing answer": (load_hotpotqa, _jsonl({**HOTPOT, "answer": None} | {}), ".jsonl", "'answer'"),
    "hotpot lacks fields": (load_hotpotqa, _jsonl({"question": "Q"}), ".jsonl", "lacks ['answer']"),
    "hotpot null answer": (load_hotpotqa, _jsonl({**HOTPOT, "answer": None}), ".jsonl", "gold answers"),
    "hotpot empty answer": (load_hotpotqa, _jsonl({**HOTPOT, "answer": "  "}), ".jsonl", "gold answers"),
    "hotpot dict answer": (load_hotpotqa, _jsonl({**HOTPOT, "answer": {"a": 1}}), ".jsonl", "gold answers"),
    "hotpot null question": (load_hotpotqa, _jsonl({**HOTPOT, "question": None}), ".jsonl", "'question'"),
    "hotpot facts not pairs": (
        load_hotpotqa,
        _jsonl({**HOTPOT, "supporting_facts": [5]}),
        ".jsonl",
        "line 1",
    ),
    "hotpot context wrong": (load_hotpotqa, _jsonl({**HOTPOT, "context": [["T"]]}), ".jsonl", "line 1"),
    "hotpot context int": (load_hotpotqa, _jsonl({**HOTPOT, "context": 3}), ".jsonl", "line 1"),
    "hotpot sentences ints": (
        load_hotpotqa,
        _jsonl({**HOTPOT, "context": [["T", [1, 2]]]}),
        ".jsonl",
        "line 1",
    ),
    "hotpot second record bad": (
        load_hotpotqa,
        _jsonl(HOTPOT, {**HOTPOT, "answer": None}),
        ".jsonl",
        "line 2",
    ),
    "2wiki null answer": (load_2wiki, _jsonl({**HOTPOT, "answer": None, "evidences": []}), ".jsonl", "gold"),
    "2wiki null alias": (load_2wiki, _jsonl({**HOTPOT, "answer_aliases": [None]}), ".jsonl", "gold"),
    "musique no paragraphs": (load_musique, _jsonl({**MUSIQUE, "paragraphs": None}), ".jsonl", "line 1"),
    "musique paragraph lacks text": (
        load_musique,
        _jsonl({**MUSIQUE, "paragraphs": [{"title": "T"}]}),
        ".jsonl",
        "paragraph_text",
    ),
    "musique null answer": (load_musique, _jsonl({**MUSIQUE, "answer": None}), ".jsonl", "gold"),
    "flashrag empty answers": (
        load_flashrag,
        _jsonl({**FLASH, "golden_answers": []}),
        ".jsonl",
        "empty list",
    ),
    "flashrag null answers": (load_flashrag, _jsonl({**FLASH, "golden_answers": None}), ".jsonl", "gold"),
    "flashrag null in answers": (
        load_flashrag,
        _jsonl({**FLASH, "golden_answers": ["a", None]}),
        ".jsonl",
        "gold",
    ),
    "flashrag lacks answers": (load_flashrag, _jsonl({"question": "Q"}), ".jsonl", "golden_answers"),
    "unknown layout": (load_qa, _jsonl({"q": 1}), ".jsonl", "cannot tell"),
    "humaneval lacks test": (load_humaneval, _jsonl({**HUMANEVAL, "test": None}), ".jsonl", "'test'"),
    "humaneval bad python": (
        load_humaneval,
        _jsonl({**HUMANEVAL, "test": "def check(:"}),
        ".jsonl",
        "Python",
    ),
    "humaneval empty": (load_humaneval, b"\n\n", ".jsonl", "no HumanEval"),
    "corpus bad line": (Corpus.from_jsonl, b'{"id": 1, "contents": "a"}\n{oops', ".jsonl", "line 2"),
    "corpus no text": (Corpus.from_jsonl, b'{"id": 1, "body": "a"}', ".jsonl", "line 1"),
    "corpus text not str": (Corpus.from_jsonl, b'{"id": 1, "text": [1]}', ".jsonl", "'text'"),
    "corpus not a list": (Corpus.from_jsonl, b'{"a": 1}', ".json", "list"),
    "corpus bad gzip": (Corpus.from_jsonl, b"nope", ".jsonl.gz", "cannot read"),
    "corpus not utf-8": (Corpus.from_jsonl, b'{"id": 1, "text": "\xff\xfe"}', ".jsonl", "UTF-8"),
    "missing file": (load_qa, None, ".jsonl", "not found"),
}


def _is_one_clear_line(message: str, path, fragment: str) -> None:
    """The error names the file and what is wrong with it, on one line."""
    assert str(path) in message and fragment in message, message
    assert "\n" not in message and len(message) < 600


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file_is_one_clear_error(case, tmp_path):
    loader, data, suffix, fragment = CASES[case]
    path = tmp_path / f"data{suffix}"
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(DataError) as info:
        loader(path)
    _is_one_clear_line(str(info.value), path, fragment)


def test_good_files_still_load(tmp_path):
    for loader, record in ((load_hotpotqa, HOTPOT), (load_musique, MUSIQUE), (load_flashrag, FLASH)):
        path = tmp_path / "ok.jsonl"
        path.write_bytes(_jsonl(record, record))
        tasks = loader(path)
        assert len(tasks) == 2 and tasks[0].answers == ("A",)
    path = tmp_path / "he.jsonl"
    path.write_bytes(_jsonl(HUMANEVAL))
    assert load_humaneval(path)[0].entry_point == "f"


#: the task files of your own task (register_task / make_task rows) and of a user's agent (`--tasks FILE`): read
#: by the same reader as the datasets above, each bad file a one-line ConfigError naming the file and the place
TASK_FILE_CASES = {
    "bad line": (b'{"question": "q", "answer": "1"}\n{oops\n', ".jsonl", "line 2: not valid JSON"),
    "not an object": (b'{"question": "q", "answer": "1"}\n[1, 2]\n', ".jsonl", "line 2: not a JSON object"),
    "list of numbers": (b"[1, 2]", ".json", "record 0: not a JSON object"),
    "not utf-8": (b'{"question": "\xff\xfe"}', ".jsonl", "UTF-8"),
}


@pytest.mark.parametrize("case", sorted(TASK_FILE_CASES))
@pytest.mark.parametrize("reader", ["load_rows", "AgentTasks.from_jsonl"])
def test_a_bad_task_file_is_one_clear_error(case, reader, tmp_path):
    from agentr1_gym.errors import ConfigError
    from agentr1_gym.task import load_rows

    if reader == "load_rows":
        read = load_rows
    else:
        read = pytest.importorskip("agentr1_trl.agent_loop").AgentTasks.from_jsonl
    data, suffix, fragment = TASK_FILE_CASES[case]
    path = tmp_path / f"tasks{suffix}"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        read(path)
    _is_one_clear_line(str(info.value), path, fragment)
    path.write_text('{"question": "q", "answer": "1"}\n\n{"question": "r", "answer": "2"}\n')
    rows = read(path) if reader == "load_rows" else read(path).tasks
    assert [r["question"] for r in rows] == ["q", "r"]
