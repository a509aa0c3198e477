"""The retrieval server behind ``agentr1 serve-retriever`` (FastAPI + uvicorn; ``pip install "agentr1-gym[serve]"``).

Routes (all batched: the queries of one request are searched in one call):

* ``GET /health`` -> ``{"status": "ok", "backend", "passages"}``
* ``POST /v1/search`` ``{"queries": [...], "k": 5}`` -> ``{"results": [[{"id", "title", "text", "score"}]]}``
* Search-R1: ``POST /retrieve`` ``{"queries", "topk", "return_scores"}`` -> ``{"result": [[{"document": {"id",
  "contents"}, "score"}]]}`` (plain documents when ``return_scores`` is false; ``contents`` = ``"Title"\\ntext``)
* Agent-R1: ``POST /search`` ``{"queries", "top_k"}`` and ``GET /search?query=&top_k=`` -> ``{"query_results":
  [{"query", "results": [{"score", "document"}]}], "total_time", "search_time"}``

Limits: a body larger than ``max_body_bytes`` (default 4 MB) gets a 413 before it is parsed; malformed requests
(NaN or infinite numbers included) get a 422 that names the field and never echoes the request; at most
``MAX_QUERIES`` queries of ``MAX_QUERY_CHARS`` characters and ``MAX_RESULTS`` results (queries x k) per request;
large batches run off the event loop, so ``/health`` answers while they do; ``/docs`` and ``/openapi.json`` are
served only with ``docs=True``. Several env processes can share one server.
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
#: results (queries x k) one request may ask for: 1,024 queries x k=1,000 took 1.6 GB and 4.8 s
MAX_RESULTS = 20_000
MAX_BODY_BYTES = 4 * 1024 * 1024
#: batches at least this large (queries x k) run in the thread pool even on the inline bm25 backend
INLINE_RESULTS = 2_000


class _BodyLimit:
    """ASGI middleware: a 413 for a body over the limit, by its Content-Length or as it streams in."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            declared = 0
        if declared > self.limit:
            await self._reject(send)
            return
        # read the body here, up to the limit, and hand it on in one piece (chunked bodies have no length)
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)  # a disconnect: let the app see it
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._reject(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, send: Any) -> None:
        body = json.dumps({"detail": f"the request body is larger than {self.limit} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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


def create_app(
    retriever: Retriever,
    *,
    backend: str = "",
    passages: int | None = None,
    docs: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Any:
    """A FastAPI app serving ``retriever`` (see the module docstring for its routes and limits)."""
    try:
        from fastapi import FastAPI, HTTPException, Query, Request, Response
        from fastapi.concurrency import run_in_threadpool
        from fastapi.exceptions import RequestValidationError
    except ImportError:
        raise MissingDependencyError("fastapi", "serve", "agentr1 serve-retriever") from None

    app = FastAPI(
        title="agentr1-gym retrieval server",
        version="1",
        docs_url="/docs" if docs else None,
        redoc_url=None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.add_middleware(_BodyLimit, limit=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        # name the field and the problem; never echo the input (it can be megabytes, or NaN, which JSON lacks)
        detail = [
            {"loc": [str(x) for x in e.get("loc", ())][:6], "msg": str(e.get("msg", ""))[:300]}
            for e in exc.errors()[:10]
        ]
        return Response(
            json.dumps({"detail": detail}).encode(), status_code=422, media_type="application/json"
        )

    def _check(queries: list[str], k: int) -> list[str]:
        if len(queries) * k > MAX_RESULTS:
            raise HTTPException(
                422,
                f"{len(queries)} queries x k={k} asks for {len(queries) * k} results; the limit is {MAX_RESULTS}",
            )
        for q in queries:
            if len(q) > MAX_QUERY_CHARS:
                raise HTTPException(
                    422, f"a query is {len(q)} characters long; the limit is {MAX_QUERY_CHARS}"
                )
        return queries

    # The embedded bm25 backend is pure CPU work under the GIL: a thread hop only adds latency. Backends that wait
    # on native code or I/O (lucene, dense, http) run in the thread pool so the event loop stays free.
    inline = getattr(retriever, "backend", "") == "bm25"

    async def _answer(queries: list[str], k: int, build: Any) -> Response:
        """Search and render ``build(hits, search_seconds)`` as JSON. Small batches on the bm25 backend run on
        the event loop (a thread hop only adds latency to pure CPU work); everything else, searching, building
        and encoding the response, runs in the thread pool so the loop keeps answering (``/health`` too)."""
        queries = _check(queries, k)

        def work() -> bytes:
            start = time.perf_counter()
            hits = retriever.search(queries, k)
            return json.dumps(build(hits, time.perf_counter() - start), ensure_ascii=False).encode()

        if inline and len(queries) * k < INLINE_RESULTS:
            body = work()
        else:
            body = await run_in_threadpool(work)
        return Response(body, media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "backend": backend, "passages": passages}

    @app.post("/v1/search")
    async def search_v1(req: _Search) -> Response:
        def build(hits: list[list[Passage]], _took: float) -> dict[str, Any]:
            return {
                "results": [
                    [{"id": p.id, "title": p.title, "text": p.text, "score": p.score} for p in h]
                    for h in hits
                ]
            }

        return await _answer(req.queries, req.k, build)

    @app.post("/retrieve")
    async def retrieve(req: _Retrieve) -> Response:
        def build(hits: list[list[Passage]], _took: float) -> dict[str, Any]:
            if req.return_scores:
                return {"result": [[{"document": _doc(p), "score": p.score} for p in h] for h in hits]}
            return {"result": [[_doc(p) for p in h] for h in hits]}

        return await _answer(req.queries, req.topk, build)

    def _agentr1(queries: list[str], start: float) -> Any:
        def build(hits: list[list[Passage]], search_time: float) -> dict[str, Any]:
            return {
                "query_results": [
                    {"query": q, "results": [{"score": p.score, "document": _doc(p)} for p in h]}
                    for q, h in zip(queries, hits)
                ],
                "total_time": time.perf_counter() - start,
                "search_time": search_time,
            }

        return build

    @app.post("/search")
    async def search_post(req: _AgentR1Search) -> Response:
        return await _answer(req.queries, req.top_k, _agentr1(req.queries, time.perf_counter()))

    @app.get("/search")
    async def search_get(
        query: str = Query(..., max_length=MAX_QUERY_CHARS), top_k: int = Query(5, ge=0, le=MAX_K)
    ) -> Response:
        return await _answer([query], top_k, _agentr1([query], time.perf_counter()))

    return app


def serve(
    retriever: Retriever,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    backend: str = "",
    passages: int | None = None,
    log_level: str = "warning",
    docs: bool = False,
) -> None:
    """Run the server in the foreground."""
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError("uvicorn", "serve", "agentr1 serve-retriever") from None
    uvicorn.run(
        create_app(retriever, backend=backend, passages=passages, docs=docs),
        host=host,
        port=port,
        log_level=log_level,
    )
