"""The retrieval server behind ``agentr1 serve-retriever`` (FastAPI + uvicorn; ``pip install "agentr1-gym[serve]"``).

Routes (all batched: the queries of one request are searched in one call):

* ``GET /health`` -> ``{"status": "ok", "backend", "passages"}``
* ``POST /v1/search`` ``{"queries": [...], "k": 5}`` -> ``{"results": [[{"id", "title", "text", "score"}]]}``
* Search-R1: ``POST /retrieve`` ``{"queries", "topk", "return_scores"}`` -> ``{"result": [[{"document": {"id",
  "contents"}, "score"}]]}`` (plain documents when ``return_scores`` is false; ``contents`` = ``"Title"\\ntext``)
* Agent-R1: ``POST /search`` ``{"queries", "top_k"}`` and ``GET /search?query=&top_k=`` -> ``{"query_results":
  [{"query", "results": [{"score", "document"}]}], "total_time", "search_time"}``

Malformed requests get a 422 that says which field is wrong. Several env processes can share one server.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.errors import MissingDependencyError
from agentr1_gym.tools.search import Passage, Retriever

__all__ = ["create_app", "serve"]

MAX_QUERIES = 1024
MAX_K = 1000
MAX_QUERY_CHARS = 10_000


class _Search(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[str] = Field(..., max_length=MAX_QUERIES)
    k: int = Field(5, ge=0, le=MAX_K)


class _Retrieve(BaseModel):  # Search-R1
    queries: list[str] = Field(..., max_length=MAX_QUERIES)
    topk: int = Field(3, ge=0, le=MAX_K)
    return_scores: bool = False


class _AgentR1Search(BaseModel):  # Agent-R1
    queries: list[str] = Field(..., max_length=MAX_QUERIES)
    top_k: int = Field(5, ge=0, le=MAX_K)


def _doc(p: Passage) -> dict[str, str]:
    return {"id": p.id, "contents": p.contents()}


def create_app(retriever: Retriever, *, backend: str = "", passages: int | None = None) -> Any:
    """A FastAPI app serving ``retriever``."""
    try:
        from fastapi import FastAPI, HTTPException, Query, Response
        from fastapi.concurrency import run_in_threadpool
    except ImportError:
        raise MissingDependencyError("fastapi", "serve", "agentr1 serve-retriever") from None

    app = FastAPI(title="agentr1-gym retrieval server", version="1")

    def _json(obj: Any) -> Response:  # plain json.dumps: FastAPI's jsonable_encoder walk costs ms per batch
        return Response(json.dumps(obj, ensure_ascii=False).encode(), media_type="application/json")

    def _check(queries: list[str]) -> list[str]:
        for q in queries:
            if len(q) > MAX_QUERY_CHARS:
                raise HTTPException(
                    422, f"a query is {len(q)} characters long; the limit is {MAX_QUERY_CHARS}"
                )
        return queries

    # The embedded bm25 backend is pure CPU work under the GIL: a thread hop only adds latency. Backends that wait
    # on native code or I/O (lucene, dense, http) run in the thread pool so the event loop stays free.
    inline = getattr(retriever, "backend", "") == "bm25"

    async def _search(queries: list[str], k: int) -> tuple[list[list[Passage]], float]:
        start = time.perf_counter()
        if inline:
            hits = retriever.search(_check(queries), k)
        else:
            hits = await run_in_threadpool(retriever.search, _check(queries), k)
        return hits, time.perf_counter() - start

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "backend": backend, "passages": passages}

    @app.post("/v1/search")
    async def search_v1(req: _Search) -> dict[str, Any]:
        hits, _ = await _search(req.queries, req.k)
        return {
            "results": [
                [{"id": p.id, "title": p.title, "text": p.text, "score": p.score} for p in h] for h in hits
            ]
        }

    @app.post("/retrieve")
    async def retrieve(req: _Retrieve) -> dict[str, Any]:
        hits, _ = await _search(req.queries, req.topk)
        if req.return_scores:
            return {"result": [[{"document": _doc(p), "score": p.score} for p in h] for h in hits]}
        return {"result": [[_doc(p) for p in h] for h in hits]}

    def _agentr1(
        queries: list[str], hits: list[list[Passage]], search_time: float, start: float
    ) -> dict[str, Any]:
        return {
            "query_results": [
                {"query": q, "results": [{"score": p.score, "document": _doc(p)} for p in h]}
                for q, h in zip(queries, hits)
            ],
            "total_time": time.perf_counter() - start,
            "search_time": search_time,
        }

    @app.post("/search")
    async def search_post(req: _AgentR1Search) -> dict[str, Any]:
        start = time.perf_counter()
        hits, took = await _search(req.queries, req.top_k)
        return _agentr1(req.queries, hits, took, start)

    @app.get("/search")
    async def search_get(
        query: str = Query(..., max_length=MAX_QUERY_CHARS), top_k: int = Query(5, ge=0, le=MAX_K)
    ) -> dict[str, Any]:
        start = time.perf_counter()
        hits, took = await _search([query], top_k)
        return _agentr1([query], hits, took, start)

    return app


def serve(
    retriever: Retriever,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    backend: str = "",
    passages: int | None = None,
    log_level: str = "warning",
) -> None:
    """Run the server in the foreground."""
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError("uvicorn", "serve", "agentr1 serve-retriever") from None
    uvicorn.run(
        create_app(retriever, backend=backend, passages=passages), host=host, port=port, log_level=log_level
    )
