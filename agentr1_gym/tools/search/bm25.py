"""The embedded ``bm25`` backend: Lucene-style BM25 over a sparse matrix, built in-process.

The index is a CSC matrix ``W`` (passages x terms) holding each posting's full BM25 weight
``idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` (Lucene's ``idf = ln(1 + (N - df + 0.5) /
(df + 0.5))``). A query scores all passages with one sparse column sum (``W[:, terms] @ counts``), a batch with
one sparse-sparse product, and the top k come from ``argpartition``. The matrix is cached on disk keyed by the
corpus hash and the parameters, and one index object is shared by every env in the process.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from agentr1_gym.cache import cache_dir, shared
from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.tools.search.text import make_analyzer

__all__ = ["BM25Retriever", "shared_bm25"]

_FORMAT_VERSION = 1


class BM25Retriever:
    """BM25 over a :class:`Corpus`. ``search(queries, k)`` is batched and thread-safe.

    Args:
        corpus: the passages; each is indexed as ``title + " " + text``.
        k1, b: BM25 parameters (Lucene defaults 0.9 / 0.4 as in Pyserini; classic 1.2 / 0.75).
        stemmer: ``"light"`` (built-in plural folding), ``"none"`` or ``"snowball"`` (PyStemmer).
        cache: read/write the index under :func:`cache_dir` (``False`` keeps it in memory only).
    """

    backend = "bm25"

    def __init__(
        self, corpus: Corpus, *, k1: float = 0.9, b: float = 0.4, stemmer: str = "light", cache: bool = True
    ) -> None:
        self.corpus = corpus
        self.k1, self.b, self.stemmer = float(k1), float(b), stemmer
        self._analyze = make_analyzer(stemmer)
        path = cache_dir() / "bm25" / self._cache_name() if cache else None
        if path is not None and (path / "meta.json").exists():
            try:
                self._load(path)
                return
            except (OSError, ValueError, KeyError):
                pass  # a broken cache entry is rebuilt below
        self._build()
        if path is not None:
            with contextlib.suppress(OSError):  # a read-only cache dir must not stop the env
                self._save(path)

    def _cache_name(self) -> str:
        return f"v{_FORMAT_VERSION}-{self.corpus.key[:24]}-k{self.k1}-b{self.b}-{self.stemmer}"

    def _build(self) -> None:
        vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        tfs: list[int] = []
        lengths = np.zeros(len(self.corpus), dtype=np.float32)
        for i, p in enumerate(self.corpus):
            counts = Counter(self._analyze(f"{p.title} {p.text}"))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                rows.append(i)
                cols.append(vocab.setdefault(term, len(vocab)))
                tfs.append(tf)
        n = len(self.corpus)
        row = np.asarray(rows, dtype=np.int32)
        col = np.asarray(cols, dtype=np.int32)
        tf = np.asarray(tfs, dtype=np.float32)
        df = np.bincount(col, minlength=len(vocab)).astype(np.float32)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        avg = float(lengths.mean()) or 1.0
        norm = self.k1 * (1.0 - self.b + self.b * lengths[row] / avg)
        weights = idf[col] * tf * (self.k1 + 1.0) / (tf + norm)
        self._matrix = sp.csc_matrix((weights, (row, col)), shape=(n, max(len(vocab), 1)), dtype=np.float32)
        self._vocab = vocab

    def _save(self, path: Path) -> None:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        sp.save_npz(tmp / "matrix.npz", self._matrix, compressed=False)
        (tmp / "vocab.json").write_text(json.dumps(self._vocab), encoding="utf-8")
        (tmp / "meta.json").write_text(
            json.dumps({"n": len(self.corpus), "key": self.corpus.key}), encoding="utf-8"
        )
        try:
            tmp.rename(path)
        except OSError:  # another process won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)

    def _load(self, path: Path) -> None:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        if meta["key"] != self.corpus.key or meta["n"] != len(self.corpus):
            raise ValueError("stale cache entry")
        self._matrix = sp.load_npz(path / "matrix.npz").tocsc()
        self._vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))

    def __len__(self) -> int:
        return len(self.corpus)

    def __reduce__(self):  # pickles as a handle to the process-wide shared index
        return (_restore, (self.corpus, self.k1, self.b, self.stemmer))

    def _query_terms(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        counts = Counter(self._vocab[t] for t in self._analyze(query) if t in self._vocab)
        ids = np.fromiter(sorted(counts), dtype=np.int64, count=len(counts))  # sorted: the same summation
        return ids, np.fromiter(
            (counts[i] for i in ids.tolist()), dtype=np.float32, count=len(counts)
        )  # order as batches

    def _top_k(self, scores: np.ndarray, k: int) -> list[Passage]:
        k = min(k, scores.shape[0])
        if k <= 0:
            return []
        idx = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(scores.shape[0])
        idx = idx[np.lexsort((idx, -scores[idx]))]  # score desc, then index asc: deterministic ties
        out = []
        for i in idx.tolist():
            if scores[i] <= 0.0:
                break
            p = self.corpus[i]
            out.append(Passage(p.id, p.title, p.text, float(scores[i])))
        return out

    def score(self, query: str) -> np.ndarray:
        """BM25 score of every passage for one query."""
        return self._scores(*self._query_terms(query))

    def _scores(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        if ids.size == 0:
            return np.zeros(len(self.corpus), dtype=np.float32)
        return np.asarray(self._matrix[:, ids] @ counts).ravel()

    def search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        """Top-``k`` passages per query, best first; passages with score 0 (no shared term) are left out."""
        if isinstance(queries, str):
            raise TypeError("search takes a list of queries; wrap a single query in a list")
        if k <= 0 or not queries:
            return [[] for _ in queries]
        if len(queries) == 1:
            return [self._top_k(self.score(queries[0]), k)]
        # chunks keep the dense score block near 4M entries
        chunk = max(1, min(len(queries), 4_000_000 // max(1, len(self.corpus))))
        out: list[list[Passage]] = []
        for start in range(0, len(queries), chunk):
            out.extend(self._search_chunk(queries[start : start + chunk], k))
        return out

    def _search_chunk(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        terms = [self._query_terms(q) for q in queries]
        if not any(ids.size for ids, _ in terms):
            return [[] for _ in queries]
        # Small corpora: the columns of every term in the batch times a small dense (terms x queries) count matrix,
        # one product (measured 1.8x faster than per-query sums on 4k passages). Large corpora: one column sum per
        # query (the dense product's work grows with corpus size times batch size and lost at 100k passages).
        if len(self.corpus) > 20_000:
            return [self._top_k(self._scores(ids, c), k) for ids, c in terms]
        union, inverse = np.unique(np.concatenate([ids for ids, _ in terms]), return_inverse=True)
        counts = np.zeros((union.size, len(queries)), dtype=np.float32)
        rows = np.repeat(np.arange(len(queries)), [ids.size for ids, _ in terms])
        np.add.at(counts, (inverse, rows), np.concatenate([c for _, c in terms]))
        scores = np.ascontiguousarray(np.asarray(self._matrix[:, union] @ counts).T)
        return [self._top_k(row, k) for row in scores]


def shared_bm25(corpus: Corpus, *, k1: float = 0.9, b: float = 0.4, stemmer: str = "light") -> BM25Retriever:
    """The process-wide :class:`BM25Retriever` for this corpus and parameters (built or loaded once)."""
    key = (corpus.key, float(k1), float(b), stemmer)
    return shared("bm25", key, lambda: BM25Retriever(corpus, k1=k1, b=b, stemmer=stemmer))


def _restore(corpus: Corpus, k1: float, b: float, stemmer: str) -> BM25Retriever:
    return shared_bm25(corpus, k1=k1, b=b, stemmer=stemmer)
