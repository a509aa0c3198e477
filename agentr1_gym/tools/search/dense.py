"""The ``dense`` backend: faiss over sentence-transformers embeddings (encoder given by a local path).

Index types: ``flat`` (exact inner product), ``ivf`` (``IndexIVFFlat``, ``nlist`` cells, ``nprobe`` searched) and
``hnsw`` (``IndexHNSWFlat``, ``M`` links, ``ef_search``). Embeddings are L2-normalised, so scores are cosine
similarities. Instruction prefixes are configurable (``prefixes="e5"``: ``query: `` / ``passage: ``;
``"bge"``: the BGE retrieval instruction on queries), or give ``query_prefix`` / ``passage_prefix`` yourself.

An index directory holds ``index.faiss``, ``passages.jsonl`` and ``meta.json`` (encoder path, prefixes, corpus hash).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentr1_gym.cache import cache_dir, shared
from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.errors import ConfigError, MissingDependencyError

__all__ = ["PREFIXES", "DenseRetriever", "build_dense_index", "dense_for_corpus"]

PREFIXES = {
    "none": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
}


def _faiss():
    try:
        import faiss
    except ImportError:
        raise MissingDependencyError("faiss-cpu", "dense", "the dense backend") from None
    return faiss


def _encoder(path: str, device: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependencyError("sentence-transformers", "dense", "the dense backend") from None
    if not Path(path).exists():
        raise ConfigError(
            f"encoder_path {path!r} does not exist; give a local sentence-transformers model "
            "directory (nothing is downloaded)"
        )
    return shared(
        "dense-encoder",
        (path, device),
        lambda: SentenceTransformer(str(path), device=device, local_files_only=True),
    )


def _resolve_prefixes(
    prefixes: str | None, query_prefix: str | None, passage_prefix: str | None
) -> tuple[str, str]:
    if prefixes is not None and prefixes not in PREFIXES:
        raise ConfigError(f"prefixes must be one of {sorted(PREFIXES)}, got {prefixes!r}")
    q, p = PREFIXES[prefixes or "none"]
    return (q if query_prefix is None else query_prefix), (p if passage_prefix is None else passage_prefix)


def build_dense_index(
    corpus: Corpus,
    out_dir: str | Path,
    *,
    encoder_path: str,
    index_type: str = "flat",
    prefixes: str | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    nlist: int | None = None,
    hnsw_m: int = 32,
    batch_size: int = 64,
    device: str = "cpu",
    show_progress: bool = False,
) -> Path:
    """Encode every passage (``title: text``) and write a faiss index directory."""
    faiss = _faiss()
    if index_type not in ("flat", "ivf", "hnsw"):
        raise ConfigError(f"index_type must be 'flat', 'ivf' or 'hnsw', got {index_type!r}")
    qp, pp = _resolve_prefixes(prefixes, query_prefix, passage_prefix)
    model = _encoder(encoder_path, device)
    texts = [f"{pp}{p.title}: {p.text}" if p.title else f"{pp}{p.text}" for p in corpus]
    emb = np.asarray(
        model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=show_progress,
            convert_to_numpy=True,
        ),
        dtype=np.float32,
    )
    dim = emb.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    else:
        cells = nlist or max(1, min(4096, int(4 * np.sqrt(len(corpus)))))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, cells, faiss.METRIC_INNER_PRODUCT)
        index.train(emb)
    index.add(emb)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(out / "index.faiss"))
    with (out / "passages.jsonl").open("w", encoding="utf-8") as f:
        for p in corpus:
            f.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}, ensure_ascii=False) + "\n")
    meta = {
        "encoder_path": str(encoder_path),
        "index_type": index_type,
        "query_prefix": qp,
        "passage_prefix": pp,
        "dim": dim,
        "corpus_key": corpus.key,
        "passages": len(corpus),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return out


class DenseRetriever:
    """Searches a directory written by :func:`build_dense_index`."""

    backend = "dense"

    def __init__(
        self,
        index_path: str | Path,
        *,
        encoder_path: str | None = None,
        query_prefix: str | None = None,
        nprobe: int = 16,
        ef_search: int = 64,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        faiss = _faiss()
        self.index_path = Path(index_path)
        meta_file = self.index_path / "meta.json"
        if not meta_file.exists():
            raise ConfigError(
                f"no dense index at {self.index_path}; build one with `agentr1 index build --backend "
                "dense --corpus CORPUS.jsonl --encoder MODEL_DIR --output DIR`"
            )
        self.meta = json.loads(meta_file.read_text(encoding="utf-8"))
        self.encoder_path = encoder_path or self.meta["encoder_path"]
        self.query_prefix = self.meta["query_prefix"] if query_prefix is None else query_prefix
        self.index = faiss.read_index(str(self.index_path / "index.faiss"))
        if hasattr(self.index, "nprobe"):
            self.index.nprobe = nprobe
        if hasattr(self.index, "hnsw"):
            self.index.hnsw.efSearch = ef_search
        self.corpus = Corpus.from_jsonl(self.index_path / "passages.jsonl")
        self.device, self.batch_size, self.nprobe, self.ef_search = device, batch_size, nprobe, ef_search
        self._model = _encoder(self.encoder_path, device)

    def __reduce__(self):
        return (
            _shared_dense,
            (
                str(self.index_path),
                self.encoder_path,
                self.query_prefix,
                self.nprobe,
                self.ef_search,
                self.device,
            ),
        )

    def __len__(self) -> int:
        return len(self.corpus)

    def search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        if isinstance(queries, str):
            raise TypeError("search takes a list of queries; wrap a single query in a list")
        k = min(int(k), len(self.corpus))
        if k <= 0 or not queries:
            return [[] for _ in queries]
        emb = np.asarray(
            self._model.encode(
                [self.query_prefix + q for q in queries],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )
        scores, ids = self.index.search(emb, k)
        out = []
        for row_s, row_i in zip(scores.tolist(), ids.tolist()):
            hits = []
            for s, i in zip(row_s, row_i):
                if i >= 0:
                    p = self.corpus[i]
                    hits.append(Passage(p.id, p.title, p.text, float(s)))
            out.append(hits)
        return out


def _shared_dense(
    index_path: str,
    encoder_path: str | None = None,
    query_prefix: str | None = None,
    nprobe: int = 16,
    ef_search: int = 64,
    device: str = "cpu",
) -> DenseRetriever:
    key = (str(Path(index_path).resolve()), encoder_path, query_prefix, nprobe, ef_search, device)
    return shared(
        "dense",
        key,
        lambda: DenseRetriever(
            index_path,
            encoder_path=encoder_path,
            query_prefix=query_prefix,
            nprobe=nprobe,
            ef_search=ef_search,
            device=device,
        ),
    )


def dense_for_corpus(
    corpus: Corpus | None,
    *,
    index_path: str | Path | None = None,
    encoder_path: str | None = None,
    index_type: str = "flat",
    prefixes: str | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    nprobe: int = 16,
    ef_search: int = 64,
    device: str = "cpu",
) -> DenseRetriever:
    """Open ``index_path``, or build (cached by corpus hash, encoder and settings) and open an index of ``corpus``."""
    if index_path is None:
        if corpus is None or encoder_path is None:
            raise ConfigError(
                "the dense backend needs index_path=, or a corpus and encoder_path= to build one"
            )
        qp, pp = _resolve_prefixes(prefixes, query_prefix, passage_prefix)
        import hashlib

        tag = hashlib.sha256(f"{Path(encoder_path).resolve()}|{index_type}|{qp}|{pp}".encode()).hexdigest()[
            :12
        ]
        index_path = cache_dir() / "dense" / f"{corpus.key[:24]}-{tag}"
        if not (index_path / "meta.json").exists():
            build_dense_index(
                corpus,
                index_path,
                encoder_path=encoder_path,
                index_type=index_type,
                query_prefix=qp,
                passage_prefix=pp,
                device=device,
            )
    return _shared_dense(str(index_path), encoder_path, query_prefix, nprobe, ef_search, device)
