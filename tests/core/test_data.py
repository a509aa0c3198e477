"""Loaders map each official layout onto QATask; bundled samples are complete."""

from __future__ import annotations

import json

import pytest
from _paths import DATA

from agentr1_gym.data import (
    BUNDLED,
    bundled_corpus,
    bundled_path,
    bundled_tasks,
    load_2wiki,
    load_flashrag,
    load_hotpotqa,
    load_musique,
    load_qa,
)
from agentr1_gym.errors import ConfigError, DataError

FIXTURES = DATA  # small official-layout excerpts (tests/data/README.md)


@pytest.mark.parametrize(("dataset", "split"), sorted(BUNDLED))
def test_bundled_samples_have_their_gold_evidence_in_the_corpus(dataset, split):
    tasks = bundled_tasks(dataset, split)
    titles = {p.title for p in bundled_corpus(dataset)}
    assert tasks and all(t.answers and t.question and t.supporting_titles for t in tasks)
    assert all(set(t.supporting_titles) <= titles for t in tasks)
    assert all(t.hops >= 2 for t in tasks)


def test_hotpotqa_official_layout(tmp_path):
    record = {
        "_id": "q1",
        "question": "Q?",
        "answer": "A",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["T1", 0], ["T2", 1], ["T1", 2]],
        "context": [["T1", ["S one.", " S two."]], ["T2", ["X."]]],
    }
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps([record]))
    (task,) = load_hotpotqa(path)
    assert task.id == "q1" and task.answers == ("A",) and task.supporting_titles == ("T1", "T2")
    assert task.context == (("T1", "S one. S two."), ("T2", "X.")) and task.hops == 2
    assert load_qa(path)[0] == task  # layout detection


def test_2wiki_official_layout_and_hops(tmp_path):
    record = {
        "_id": "w",
        "type": "bridge_comparison",
        "question": "Q?",
        "answer": "yes",
        "supporting_facts": [["A", 0], ["B", 0], ["C", 0], ["D", 0]],
        "evidences": [],
        "context": [["A", ["a1", "a2"]]],
    }
    path = tmp_path / "w.json"
    path.write_text(json.dumps([record]))
    (task,) = load_2wiki(path)
    assert task.hops == 4 and task.context == (("A", "a1 a2"),) and task.dataset == "2wikimultihopqa"


def test_musique_and_flashrag(tmp_path):
    m = {
        "id": "3hop1__1_2_3",
        "question": "Q?",
        "answer": "A",
        "answer_aliases": ["Alias"],
        "answerable": True,
        "question_decomposition": [{}, {}, {}],
        "paragraphs": [
            {"idx": 0, "title": "P", "paragraph_text": "p", "is_supporting": True},
            {"idx": 1, "title": "N", "paragraph_text": "n", "is_supporting": False},
        ],
    }
    (tmp_path / "m.jsonl").write_text(
        json.dumps(m) + "\n" + json.dumps({**m, "id": "x", "answerable": False})
    )
    (task,) = load_musique(tmp_path / "m.jsonl")
    assert task.answers == ("A", "Alias") and task.hops == 3 and task.supporting_titles == ("P",)
    (tmp_path / "f.jsonl").write_text(json.dumps({"id": "f", "question": "q", "golden_answers": ["a", "b"]}))
    assert load_flashrag(tmp_path / "f.jsonl")[0].answers == ("a", "b")


def test_bad_files_raise_data_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_qa(tmp_path / "missing.json")
    (tmp_path / "bad.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(DataError, match="cannot tell the dataset"):
        load_qa(tmp_path / "bad.jsonl")
    with pytest.raises(DataError, match="lacks"):
        load_hotpotqa(tmp_path / "bad.jsonl")
    with pytest.raises(ConfigError, match="bundled"):
        bundled_tasks("hotpotqa", "test")


@pytest.mark.parametrize(
    ("path", "loader", "n"),
    [
        (bundled_path("hotpotqa_dev_distractor_300.jsonl.gz"), load_hotpotqa, 300),  # Hugging Face layout
        (bundled_path("hotpotqa_train_100.json.gz"), load_hotpotqa, 100),  # official JSON list
        (FIXTURES / "hotpot_dev_distractor_sample5.jsonl", load_hotpotqa, 5),  # official, one per line
        (bundled_path("musique_ans_dev_50.jsonl.gz"), load_musique, 50),
        (bundled_path("musique_ans_train_100.json.gz"), load_musique, 100),
        (FIXTURES / "2wiki_dev_format_example2.json", load_2wiki, 2),
        (bundled_path("2wikimultihopqa_dev_177.jsonl.gz"), load_2wiki, 177),
        (FIXTURES / "nq_test_format_example.jsonl", load_flashrag, 17),
    ],
)
def test_official_layouts_load(path, loader, n):
    tasks = loader(path)
    assert len(tasks) == n
    assert load_qa(path) == tasks


def test_env_on_user_files_with_flashrag_corpus(tmp_path):
    import gymnasium as gym

    import agentr1_gym  # noqa: F401

    env = gym.make(
        "AgentR1/HotpotQA-v0",
        dataset="flashrag",
        data_path=FIXTURES / "nq_test_format_example.jsonl",
        corpus_path=FIXTURES / "wiki_passages_sample200.jsonl",
    )
    obs, _info = env.reset(seed=0)
    obs, *_ = env.step(env.unwrapped.call_text("search", query="lobbyist Genentech Washington"))
    assert "Doc 1 (Title: Evan Morris)" in obs


def test_jsonl_lines_split_on_newlines_only(tmp_path):
    """U+2028, U+2029 and U+0085 are text inside a JSON string (str.splitlines() splits there): every JSONL
    reader keeps them, and the record reads back whole."""
    from agentr1_gym.data.records import read_records

    text = "a\u2028b\u2029c\x85d"
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"question": text}, ensure_ascii=False) + "\n" + json.dumps({"question": "x"}) + "\n",
        encoding="utf-8",
    )
    assert [r["question"] for r in read_records(path)] == [text, "x"]
    pytest.importorskip("trl")
    from agentr1_trl.agent_loop import AgentTasks

    assert [t["question"] for t in AgentTasks.from_jsonl(path).tasks] == [text, "x"]
