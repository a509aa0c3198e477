"""The ``http`` backend: a client for retrieval servers (ours, Search-R1's ``/retrieve``, Agent-R1's ``/search``).

Standard library only: one persistent HTTP/1.1 connection per thread (connection pooling), one total deadline
per request (retries included; a server that trickles bytes cannot hold a step past it), retries with exponential
backoff on connection errors and 5xx answers, and a typed :class:`ToolInfrastructureError` when the server cannot
be reached or answers in a shape that does not fit the request, so that a broken server never turns into empty
results or zero rewards.

APIs (``api=``):

* ``"agentr1"`` (our server, ``agentr1 serve-retriever``): ``POST /v1/search`` ``{"queries", "k"}`` ->
  ``{"results": [[{"id", "title", "text", "score"}]]}``;
* ``"search_r1"``: ``POST /retrieve`` ``{"queries", "topk", "return_scores": true}`` ->
  ``{"result": [[{"document": {"id", "contents"}, "score"}]]}``;
* ``"agentr1_search"`` (Agent-R1's server): ``POST /search`` ``{"queries", "top_k"}`` ->
  ``{"query_results": [{"query", "results": [{"score", "document"}]}]}``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from agentr1_gym.data.corpus import Passage, split_contents
from agentr1_gym.errors import ConfigError, ToolInfrastructureError

__all__ = ["APIS", "HTTPRetriever"]

APIS = ("agentr1", "search_r1", "agentr1_search")


def _passage_from_document(doc: Any, score: float) -> Passage:
    if isinstance(doc, str):
        title, text = split_contents(doc)
        return Passage(id="", title=title, text=text, score=score)
    if not isinstance(doc, dict):
        raise ValueError(f"unexpected document {doc!r:.80}")
    if "contents" in doc:
        title, text = split_contents(str(doc["contents"]))
        title = str(doc.get("title", title))
    else:
        title, text = str(doc.get("title", "")), str(doc.get("text", ""))
    return Passage(id=str(doc.get("id", doc.get("docid", ""))), title=title, text=text, score=score)


class HTTPRetriever:
    """Search a retrieval server.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        api: ``"agentr1"`` (default), ``"search_r1"`` or ``"agentr1_search"`` (see the module docstring).
        timeout: seconds for a whole request, retries included (the connection is shut at the deadline).
        retries: further attempts after a failed one (connection errors, timeouts, 5xx); backoff doubles from
            ``backoff`` seconds.
    """

    backend = "http"

    def __init__(
        self, url: str, *, api: str = "agentr1", timeout: float = 10.0, retries: int = 2, backoff: float = 0.1
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"server_url must look like http://host:port, got {url!r}")
        if api not in APIS:
            raise ConfigError(f"api must be one of {APIS}, got {api!r}")
        self.url, self.api, self.timeout, self.retries, self.backoff = (
            url.rstrip("/"),
            api,
            timeout,
            retries,
            backoff,
        )
        self._scheme, self._host = parts.scheme, parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._local = threading.local()

    def __reduce__(self):
        return (
            HTTPRetriever,
            (self.url,),
            {"api": self.api, "timeout": self.timeout, "retries": self.retries, "backoff": self.backoff},
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(self.url, **state)  # type: ignore[misc]

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self.timeout)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """One JSON request with retries, all within ``timeout`` seconds; raises ToolInfrastructureError when the
        server stays unreachable, answers too slowly, or sends something that is not JSON."""
        body = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
        deadline = time.monotonic() + self.timeout
        last: str = ""
        made = 0
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic())))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                last = last or "deadline reached"
                break
            made += 1
            conn = self._connection()
            conn.timeout = remaining
            expired = threading.Event()

            def cut(conn: http.client.HTTPConnection = conn, expired: threading.Event = expired) -> None:
                expired.set()
                sock = conn.sock
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)  # unblocks a read that a slow server keeps alive

            watchdog = threading.Timer(remaining, cut)
            watchdog.daemon = True
            watchdog.start()
            try:
                conn.request(method, self._prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                last = (
                    "no complete answer within the deadline"
                    if expired.is_set()
                    else f"{type(exc).__name__}: {exc}"
                )
                continue
            finally:
                watchdog.cancel()
            if expired.is_set():
                self._drop_connection()
                last = "no complete answer within the deadline"
                continue
            if resp.status >= 500:
                last = f"HTTP {resp.status}: {data[:200]!r}"
                continue
            if resp.status >= 400:
                raise ToolInfrastructureError(
                    f"the retrieval server at {self.url} rejected {path}: HTTP "
                    f"{resp.status} {data[:300].decode(errors='replace')}"
                )
            try:
                return json.loads(data)
            except ValueError:
                raise ToolInfrastructureError(
                    f"the retrieval server at {self.url} sent invalid JSON"
                ) from None
        raise ToolInfrastructureError(
            f"the retrieval server at {self.url} is unreachable after {made} attempts "
            f"within its {self.timeout} s deadline ({last})"
        )

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/health")

    def search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        if isinstance(queries, str):
            raise TypeError("search takes a list of queries; wrap a single query in a list")
        queries = list(queries)
        if not queries or k <= 0:
            return [[] for _ in queries]
        try:
            if self.api == "agentr1":
                out = self.request("POST", "/v1/search", {"queries": queries, "k": k})
                lists = out["results"]
                self._check_count(lists, queries)
                return [
                    [Passage(str(h["id"]), str(h["title"]), str(h["text"]), float(h["score"])) for h in hits]
                    for hits in lists
                ]
            if self.api == "search_r1":
                out = self.request(
                    "POST", "/retrieve", {"queries": queries, "topk": k, "return_scores": True}
                )
                lists = out["result"]
                self._check_count(lists, queries)
                return [
                    [_passage_from_document(h["document"], float(h.get("score", 0.0))) for h in hits]
                    for hits in lists
                ]
            out = self.request("POST", "/search", {"queries": queries, "top_k": k})
            lists = out["query_results"]
            self._check_count(lists, queries)
            return [
                [_passage_from_document(h["document"], float(h.get("score", 0.0))) for h in qr["results"]]
                for qr in lists
            ]
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise ToolInfrastructureError(
                f"unexpected answer from {self.url} for api={self.api!r}: {type(exc).__name__}: {exc}"
            ) from None

    @staticmethod
    def _check_count(lists: Any, queries: list[str]) -> None:
        if not isinstance(lists, list) or len(lists) != len(queries):
            got = len(lists) if isinstance(lists, list) else type(lists).__name__
            raise ValueError(f"{got} result lists for {len(queries)} queries")
