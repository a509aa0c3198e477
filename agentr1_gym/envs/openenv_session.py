"""OpenEnv's session protocol, spoken to an untrusted server (the client side of ``AgentR1/OpenEnv-v0``): the
session is created over HTTP and a WebSocket attached to it (re-attached within the episode's deadline when it
drops); every answer must arrive whole within its deadline and under a size bound; JSON only, redirects refused,
NaN/Infinity or nesting too deep make an answer unreadable. Whatever goes wrong is an :class:`EnvServerError`
saying what happened; :mod:`agentr1_gym.envs.openenv` turns the answers into our env contract."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import time
import urllib.parse
from typing import Any

from agentr1_gym.deadline import AnswerTooLarge, DeadlinePassed, http_exchange
from agentr1_gym.errors import ConfigError, MissingDependencyError, ToolInfrastructureError
from agentr1_gym.text import clean_text

__all__ = ["MAX_HTTP_BYTES", "MAX_MESSAGE_BYTES", "EnvServerError", "ServerSaid", "Session"]

#: the most bytes one server message may have (an observation of a long page fits; a runaway server does not)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: the most bytes an HTTP answer (``/schema``, session calls) may have
MAX_HTTP_BYTES = 1024 * 1024


class EnvServerError(ToolInfrastructureError):
    """The OpenEnv server failed, refused or could not be reached: an infrastructure failure, never the model's."""


def _deadline_request(url: str, body: bytes | None, timeout_s: float, limit: int) -> tuple[int, bytes]:
    """One HTTP request whose whole answer (connection, headers and body) must arrive within ``timeout_s``
    (:func:`agentr1_gym.deadline.http_exchange`: a server that drips its answer cannot hold the call): ``(status,
    body)``. No redirect is followed, no proxy is used, and a body larger than ``limit`` bytes is refused."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"base_url must be http(s)://host[:port][/path], got {url!r}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    try:
        return http_exchange(
            kind(parts.hostname, parts.port, timeout=timeout_s),
            "POST" if body is not None else "GET",
            path,
            body,
            headers,
            timeout_s=timeout_s,
            limit=limit,
        )
    except AnswerTooLarge as exc:
        raise EnvServerError(f"{url}: {exc}") from None
    except DeadlinePassed:
        raise _Unreachable(f"no whole answer from {url} within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _Unreachable(f"cannot reach the OpenEnv server at {url}: {exc}") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _loads(raw: Any, where: str) -> Any:
    """A server's JSON answer, or :class:`EnvServerError` (not JSON, NaN or Infinity anywhere in it, a number that
    overflows a float, nesting deeper than the parser's stack)."""
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise _BadAnswer(f"{where} did not answer valid JSON ({str(exc)[:120]})") from None
    except RecursionError:
        raise _BadAnswer(f"{where} answered JSON nested too deep to read") from None


class Session:
    """One OpenEnv session: created over HTTP (``openenv/session/create``) where the server offers it, so that the
    WebSocket can be re-attached to the same env after a drop; else the WebSocket's own session."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as exc:
            raise MissingDependencyError("websockets", "openenv", "AgentR1/OpenEnv-v0") from exc
        self._connect = connect
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.ws: Any = None
        self.session_id: str | None = None
        self.steps = 0  # steps the server ran in this episode, as far as this side knows

    # -- HTTP ---------------------------------------------------------------------------------------------
    def http(self, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode()
        status, raw = _deadline_request(url, data, self.timeout_s, MAX_HTTP_BYTES)
        if 300 <= status < 400:
            raise EnvServerError(
                f"the server answered {url} with a redirect (HTTP {status}); none is followed"
            )
        if status >= 400:
            raise EnvServerError(f"{url} answered HTTP {status}")
        return _loads(raw, url)

    def _rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = self.http("/mcp", {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        if not isinstance(answer, dict):
            raise EnvServerError(f"/mcp answered {type(answer).__name__}, not a JSON-RPC object")
        return answer

    # -- the WebSocket ------------------------------------------------------------------------------------
    def _ws_url(self) -> str:
        parts = urllib.parse.urlsplit(self.base_url)
        scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
        if scheme is None or not parts.netloc:
            raise ConfigError(f"base_url must be http(s)://host[:port][/path], got {self.base_url!r}")
        query = f"?session_id={urllib.parse.quote(self.session_id)}" if self.session_id else ""
        return urllib.parse.urlunsplit((scheme, parts.netloc, f"{parts.path.rstrip('/')}/ws", "", "")) + query

    def open(self) -> None:
        """A new session (a new env on the server) with a WebSocket attached."""
        self.close()
        try:
            answer = self._rpc("openenv/session/create", {})
        except _Unreachable:
            raise
        except EnvServerError:
            answer = {}  # a server without HTTP sessions: the WebSocket's own (no re-attach after a drop)
        error = answer.get("error")
        if isinstance(error, dict):
            data = error.get("data") if isinstance(error.get("data"), dict) else {}
            if "max_sessions" in data:
                raise EnvServerError(
                    f"the OpenEnv server at {self.base_url} is full ({data.get('active_sessions')} of "
                    f"{data.get('max_sessions')} sessions): close other clients or start it with more sessions"
                )
            raise EnvServerError(
                f"the server refused a session: {clean_text(str(error.get('message')))[:300]}"
            )
        result = answer.get("result")
        sid = result.get("session_id") if isinstance(result, dict) else None
        self.session_id = sid if isinstance(sid, str) and sid else None
        self._attach()

    def _attach(self) -> None:
        url = self._ws_url()
        parts = urllib.parse.urlsplit(url)
        sock = None
        try:
            # our own socket: websockets follows no redirect on a socket it was given, so the handshake reaches
            # this server or fails
            port = parts.port or (443 if parts.scheme == "wss" else 80)
            sock = socket.create_connection((parts.hostname, port), timeout=self.timeout_s)
            self.ws = self._connect(
                url, sock=sock, open_timeout=self.timeout_s, close_timeout=2, max_size=MAX_MESSAGE_BYTES
            ).__enter__()  # held across calls (websockets 17 warns about a connection used outside a with)
        except Exception as exc:
            self.ws = None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
            raise EnvServerError(f"cannot open a session on {self.base_url}/ws: {exc}") from None

    def request(self, message: dict[str, Any], *, replayable: bool, deadline: float) -> dict[str, Any]:
        """Send ``message``, return the answer's ``data``. A dropped connection is re-attached until ``deadline``
        (when the server offers HTTP sessions); a step is sent again only if the server had not run it."""
        from websockets.exceptions import ConnectionClosed

        delay = 0.05
        while True:
            sent = False
            try:
                if self.ws is None:
                    self._attach()
                self.ws.send(json.dumps(message))
                sent = True
                raw = self.ws.recv(timeout=max(0.0, min(self.timeout_s, deadline - time.monotonic())))
                return self._parse(raw)
            except TimeoutError:
                self._drop()
                what = "answer" if sent else "connection"
                raise EnvServerError(
                    f"no {what} from {self.base_url} within {self.timeout_s:g} s ({message.get('type')})"
                ) from None
            except _BadAnswer:
                self._drop()
                raise
            except (ConnectionClosed, OSError, EnvServerError) as exc:
                self._drop()
                if isinstance(exc, ConnectionClosed) and getattr(exc.sent, "code", None) == 1009:
                    raise EnvServerError(
                        f"{self.base_url} sent a message larger than {MAX_MESSAGE_BYTES} bytes ({message.get('type')})"
                    ) from None
                if isinstance(exc, EnvServerError) and not self.session_id:
                    raise
                if not self.session_id:
                    raise EnvServerError(
                        f"the connection to {self.base_url} dropped mid-episode ({exc}) and the server offers no "
                        "HTTP sessions to re-attach to: the episode is lost"
                    ) from None
                if time.monotonic() + delay >= deadline:
                    raise EnvServerError(
                        f"the connection to {self.base_url} dropped ({exc}) and did not come back before the "
                        "episode's deadline"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                if sent and not replayable:
                    self._attach_or_none()
                    if self.ws is None:
                        continue
                    ran = self._server_steps(deadline)
                    if ran is None or ran > self.steps:
                        raise EnvServerError(
                            f"the connection to {self.base_url} dropped after the server ran a step; its answer "
                            "is lost and a step cannot be replayed: the episode is lost"
                        ) from None

    def _attach_or_none(self) -> None:
        try:
            self._attach()
        except EnvServerError:
            self.ws = None

    def _server_steps(self, deadline: float) -> int | None:
        try:
            self.ws.send(json.dumps({"type": "state"}))
            data = self._parse(
                self.ws.recv(timeout=max(0.0, min(self.timeout_s, deadline - time.monotonic())))
            )
        except Exception:
            self._drop()
            return None
        count = data.get("step_count")
        return count if isinstance(count, int) else None

    def _parse(self, raw: Any) -> dict[str, Any]:
        message = _loads(raw, f"{self.base_url}/ws")
        if not isinstance(message, dict) or not isinstance(message.get("data"), dict):
            raise _BadAnswer("the server sent a message without a data object")
        if message.get("type") == "error":
            raise ServerSaid(message["data"])
        return message["data"]

    def _drop(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    def close(self) -> None:
        """End the session: the WebSocket says goodbye, and an HTTP session is closed on the server."""
        if self.ws is not None:
            with contextlib.suppress(Exception):
                self.ws.send(json.dumps({"type": "close"}))
        self._drop()
        if self.session_id:
            with contextlib.suppress(EnvServerError):  # else the server's idle timeout frees it
                self._rpc("openenv/session/close", {"session_id": self.session_id})
        self.session_id = None


class _BadAnswer(EnvServerError):
    """The server sent something that is not an OpenEnv message."""


class _Unreachable(EnvServerError):
    """The server did not answer at all (refused, timed out, unknown host)."""


class ServerSaid(Exception):
    """An OpenEnv ``error`` message: ``data`` has ``message`` and ``code``."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(clean_text(str(data.get("message", "")))[:2000])
        self.code = str(data.get("code", ""))
        self.data = data
