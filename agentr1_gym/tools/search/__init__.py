"""The search tool and its retrieval backends.

Every backend implements one batched protocol, :class:`Retriever`:
``search(queries: list[str], k: int) -> list[list[Passage]]`` (best first). :func:`make_retriever` builds one
from a backend name and its settings; :class:`SearchTool` exposes any retriever to the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.data.corpus import Corpus, Passage
from agentr1_gym.errors import ConfigError
from agentr1_gym.tools.base import Tool, ToolResult
from agentr1_gym.tools.search.bm25 import BM25Retriever, shared_bm25

__all__ = [
    "BACKENDS",
    "BM25Retriever",
    "Corpus",
    "Passage",
    "Retriever",
    "SearchArgs",
    "SearchTool",
    "format_passages",
    "make_retriever",
]


@runtime_checkable
class Retriever(Protocol):
    """What every retrieval backend implements."""

    def search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        """Top-``k`` passages for each query, best first."""
        ...


def _bm25(corpus: Corpus | None, *, k1: float = 0.9, b: float = 0.4, stemmer: str = "light") -> Retriever:
    if corpus is None:
        raise ConfigError("the bm25 backend needs a corpus (corpus_path=... or a dataset's bundled corpus)")
    return shared_bm25(corpus, k1=k1, b=b, stemmer=stemmer)


def _lucene(corpus: Corpus | None, **settings: Any) -> Retriever:
    from agentr1_gym.tools.search.lucene import lucene_for_corpus

    return lucene_for_corpus(corpus, **settings)


def _dense(corpus: Corpus | None, **settings: Any) -> Retriever:
    from agentr1_gym.tools.search.dense import dense_for_corpus

    return dense_for_corpus(corpus, **settings)


def _http(corpus: Corpus | None, *, server_url: str | None = None, **settings: Any) -> Retriever:
    from agentr1_gym.tools.search.http import HTTPRetriever

    if not server_url:
        raise ConfigError("the http backend needs server_url= (e.g. http://127.0.0.1:8000)")
    return HTTPRetriever(server_url, **settings)


#: backend name -> factory(corpus, **settings). ``lucene`` needs ``pip install "agentr1-gym[pyserini]"``,
#: ``dense`` needs ``[dense]``; both build their index from the corpus (cached) unless ``index_path`` is given.
BACKENDS: dict[str, Callable[..., Retriever]] = {
    "bm25": _bm25,
    "lucene": _lucene,
    "dense": _dense,
    "http": _http,
}


def make_retriever(backend: str | Retriever, corpus: Corpus | None = None, **settings: Any) -> Retriever:
    """Build a retriever: ``backend`` is a name from :data:`BACKENDS` or an object with a ``search`` method."""
    if not isinstance(backend, str):
        if settings:
            raise ConfigError(
                f"retriever settings {sorted(settings)} apply only when retriever is a backend name"
            )
        if not isinstance(backend, Retriever):
            raise ConfigError(
                f"retriever must be a backend name {sorted(BACKENDS)} or have a search(queries, k) method"
            )
        return backend
    factory = BACKENDS.get(backend)
    if factory is None:
        raise ConfigError(f"unknown retriever backend {backend!r}; choose one of {sorted(BACKENDS)}")
    try:
        return factory(corpus, **settings)
    except TypeError as exc:
        raise ConfigError(f"bad settings for the {backend!r} retriever: {exc}") from None


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(..., min_length=1, max_length=2000, description="What to search for.")


def format_passages(passages: Sequence[Passage]) -> str:
    """Search-R1's rendering: ``Doc i (Title: t) text`` per line."""
    return "\n".join(f"Doc {i} (Title: {p.title}) {p.text}" for i, p in enumerate(passages, 1))


class SearchTool(Tool):
    """Searches a corpus and returns the top ``top_k`` passages as ``Doc i (Title: ...) text`` lines.

    ``metadata`` of each result carries the passages' ``ids`` and ``titles`` (for retrieval process rewards).
    """

    name: ClassVar[str] = "search"
    description: ClassVar[str] = "Search Wikipedia-style documents; returns the most relevant passages."
    Args = SearchArgs

    def __init__(self, retriever: Retriever, *, top_k: int = 3) -> None:
        if top_k < 1:
            raise ConfigError(f"top_k must be >= 1, got {top_k}")
        self.retriever = retriever
        self.top_k = int(top_k)

    def execute(self, args: BaseModel) -> ToolResult:
        return self.execute_batch([args])[0]

    def execute_batch(self, batch: Sequence[BaseModel]) -> list[ToolResult]:
        queries = [a.query for a in batch]  # type: ignore[attr-defined]
        hits = self.retriever.search(queries, self.top_k)
        results = []
        for passages in hits:
            if not passages:
                results.append(
                    ToolResult(
                        "No passage matches this query. Try other words.",
                        success=False,
                        metadata={"ids": [], "titles": []},
                    )
                )
            else:
                results.append(
                    ToolResult(
                        format_passages(passages),
                        success=True,
                        metadata={"ids": [p.id for p in passages], "titles": [p.title for p in passages]},
                    )
                )
        return results
