"""BM25 backend: ranking equals a brute-force reference, on-disk cache, sharing, batching, bad queries."""

from __future__ import annotations

import math
import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from agentr1_gym.data import bundled_corpus, bundled_tasks
from agentr1_gym.tools.search import Corpus, Passage, SearchTool, make_retriever
from agentr1_gym.tools.search.bm25 import BM25Retriever, shared_bm25
from agentr1_gym.tools.search.text import make_analyzer

DOCS = [
    ("Paris", "Paris is the capital of France."),
    ("France", "France is a country in Europe. Its capital is Paris."),
    ("Berlin", "Berlin is the capital and largest city of Germany."),
    ("Cats", "Cats are small domesticated carnivorous mammals."),
    ("Kansas Song", "Kansas Song is the fight song of the University of Kansas."),
]


@pytest.fixture(scope="module")
def corpus():
    return Corpus(Passage(str(i), t, x) for i, (t, x) in enumerate(DOCS))


def _reference_scores(corpus, query, k1=0.9, b=0.4):
    analyze = make_analyzer("light")
    docs = [Counter(analyze(f"{p.title} {p.text}")) for p in corpus]
    avg = sum(sum(d.values()) for d in docs) / len(docs)
    n = len(docs)
    out = []
    for d in docs:
        s, dl = 0.0, sum(d.values())
        for term, qtf in Counter(analyze(query)).items():
            df = sum(term in x for x in docs)
            if not df or term not in d:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d[term]
            s += qtf * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avg))
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize(
    "query", ["capital of France", "Kansas university fight song", "cats cats mammals", "Berlin"]
)
def test_scores_match_reference(corpus, query):
    r = BM25Retriever(corpus, cache=False)
    assert np.allclose(r.score(query), _reference_scores(corpus, query), rtol=1e-5)
    hits = r.search([query], k=3)[0]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score == pytest.approx(_reference_scores(corpus, query).max(), rel=1e-5)


def test_batched_equals_single(corpus):
    r = BM25Retriever(corpus, cache=False)
    queries = ["capital of France", "", "zzz unknown", "Kansas song", "a the of"]
    batched = r.search(queries, k=2)
    assert batched == [r.search([q], k=2)[0] for q in queries]
    assert batched[1] == [] and batched[2] == [] and batched[4] == []  # no matching term: no results


def test_edge_cases(corpus):
    r = BM25Retriever(corpus, cache=False)
    assert r.search(["capital"], k=0) == [[]]
    assert len(r.search(["capital"], k=10_000)[0]) == 3  # only passages that share a term
    assert r.search([], k=3) == []
    assert r.search(["x" * 10_000 + ' Paris AND * " :'], k=1)[0][0].title in {"Paris", "France"}
    with pytest.raises(TypeError, match="list of queries"):
        r.search("Paris", k=1)


def test_disk_cache_and_process_sharing(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTR1_CACHE", str(tmp_path))
    built = BM25Retriever(corpus)
    (entry,) = (tmp_path / "bm25").iterdir()
    assert (entry / "matrix.npz").exists()
    loaded = BM25Retriever(corpus)
    assert (loaded._matrix != built._matrix).nnz == 0 and loaded._vocab == built._vocab
    assert shared_bm25(corpus) is shared_bm25(corpus)
    assert pickle.loads(pickle.dumps(shared_bm25(corpus))) is shared_bm25(corpus)


def test_corpus_jsonl_layouts(tmp_path: Path):
    a = tmp_path / "a.jsonl"
    a.write_text(
        '{"id": "1", "contents": "\\"Paris\\"\\nParis is a city."}\n{"id": "2", "title": "Rome", "text": "Rome."}\n'
    )
    c = Corpus.from_jsonl(a)
    assert [(p.id, p.title, p.text) for p in c] == [
        ("1", "Paris", "Paris is a city."),
        ("2", "Rome", "Rome."),
    ]
    assert pickle.loads(pickle.dumps(c)).key == c.key


def test_search_tool_metadata(corpus):
    tool = SearchTool(make_retriever("bm25", corpus), top_k=2)
    (res,) = tool.execute_batch([tool.validate({"query": "capital of Germany"})])
    assert (
        res.success
        and res.content.startswith("Doc 1 (Title: Berlin)")
        and res.metadata["titles"][0] == "Berlin"
    )
    (miss,) = tool.execute_batch([tool.validate({"query": "qqqq"})])
    assert not miss.success and "No passage" in miss.content


def test_perfect_searcher_finds_gold_paragraphs_on_hotpotqa():
    """Searching each gold paragraph's title retrieves it in the top 5 for almost every bundled question."""
    retriever = make_retriever("bm25", bundled_corpus("hotpotqa"))
    tasks = bundled_tasks("hotpotqa")
    queries = [title for t in tasks for title in t.supporting_titles]
    golds = [title for t in tasks for title in t.supporting_titles]
    hits = retriever.search(queries, k=5)
    recall = np.mean([gold in {p.title for p in h} for gold, h in zip(golds, hits)])
    assert recall >= 0.95, recall


@pytest.mark.slow
def test_large_corpus_batched_equals_single():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    corpus = Corpus(Passage(str(i), f"t{i}", " ".join(rng.choice(words, 12))) for i in range(25_000))
    r = BM25Retriever(corpus, cache=False)
    queries = [" ".join(rng.choice(words, 3)) for _ in range(30)]
    assert r.search(queries, k=5) == [r.search([q], k=5)[0] for q in queries]


def test_kilt_knowledge_source_layout(tmp_path):
    path = tmp_path / "kilt.jsonl"
    path.write_text('{"_id": "290", "wikipedia_title": "A", "text": ["A\\n", "A is a letter.\\n"]}\n')
    (p,) = Corpus.from_jsonl(path)
    assert (p.id, p.title, p.text) == ("290", "A", "A A is a letter.")
