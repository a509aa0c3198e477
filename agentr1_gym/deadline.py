"""One HTTP exchange under a deadline for the whole answer, not for each read.

A socket timeout bounds each read, so a server that sends one byte every so often keeps a call waiting for ever
(and headers can be dripped as well as bodies). :func:`http_exchange` runs a watchdog that shuts the connection's
socket down at the deadline: a read blocked anywhere (connecting, in the headers, in the body) returns, and the
exchange raises :class:`DeadlinePassed`. The socket is taken when the connection opens it, since ``http.client``
drops its own handle once an answer says ``Connection: close``. No redirect is followed (``http.client`` follows
none) and a body over ``limit`` bytes is refused, unread where its ``Content-Length`` announces it.

The OpenEnv client (:mod:`agentr1_gym.envs.openenv`) and the vLLM server client
(:mod:`agentr1_trl.backends.vllm_client`) both speak HTTP through it, each naming its own errors.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Mapping

__all__ = ["AnswerTooLarge", "DeadlinePassed", "http_exchange"]


class DeadlinePassed(TimeoutError):
    """The whole answer did not arrive within the deadline (the connection was shut down)."""


class AnswerTooLarge(ValueError):
    """The answer's body is larger than the limit (announced or read)."""


def http_exchange(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    limit: int,
) -> tuple[int, bytes]:
    """Send one request on ``conn`` (not yet connected; closed on return) and read its whole answer, all
    within ``timeout_s``: ``(status, body)``. Raises :class:`DeadlinePassed`, :class:`AnswerTooLarge`,
    ``http.client.IncompleteRead`` when the connection ended before the promised length, and what the
    connection raises otherwise (``OSError``, ``http.client.HTTPException``)."""
    expired = threading.Event()
    held: list[socket.socket] = []
    connect = conn.connect

    def shut() -> None:
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def connect_and_hold() -> None:
        connect()
        held.append(conn.sock)
        if expired.is_set():
            shut()

    def expire() -> None:
        expired.set()
        shut()

    conn.connect = connect_and_hold  # type: ignore[method-assign]
    watchdog = threading.Timer(timeout_s, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request(method, path, body=body, headers=dict(headers))
        response = conn.getresponse()
        announced = response.getheader("Content-Length", "")
        if announced.strip().isdigit() and int(announced) > limit:
            raise AnswerTooLarge(f"an answer of {int(announced)} bytes announced; at most {limit} are read")
        chunks, size = [], 0
        while chunk := response.read1(1 << 16):
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(f"an answer of more than {limit} bytes")
            chunks.append(chunk)
        if expired.is_set():
            raise DeadlinePassed(f"no whole answer within {timeout_s:g} s")
        if response.length:  # the connection ended before the Content-Length promised
            raise http.client.IncompleteRead(b"".join(chunks), response.length)
        return response.status, b"".join(chunks)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if expired.is_set() and not isinstance(exc, AnswerTooLarge):
            raise DeadlinePassed(f"no whole answer within {timeout_s:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()
