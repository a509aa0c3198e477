"""The tools of any MCP server as agent tools, through the official ``mcp`` SDK (``pip install "mcp>=2"``).

>>> tools = mcp_tools(["python", "my_server.py"])              # stdio: the command that starts the server
>>> tools = mcp_tools("http://127.0.0.1:8000/mcp")             # streamable HTTP: the endpoint's URL

Each tool keeps the server's name, description and input schema (what the model sees); the env validates the
model's arguments against that schema (a bad call is an ``invalid_call`` with a one-line observation, no request).
Following the library's rules:

* a tool error the server reports (``is_error``), and a call slower than ``timeout_s``, become the observation of
  a failed call: the model sees what went wrong and earns no process reward;
* a dead server (the process exited, the connection dropped, it cannot be started or reached) raises
  :class:`~agentr1_gym.errors.ToolInfrastructureError` naming the server (and, for stdio, the tail of its
  stderr log): never a silent zero.

A server is untrusted input too:

* its schemas are validated once when the tools are built (an invalid schema, a regular expression that does not
  compile, or a ``$ref`` outside the schema raises :class:`MCPSchemaError` naming the tool); the env never fetches
  a URL or reads a file a schema names, and the schema's regular expressions run with a time bound;
* a call that times out is the model's slow call only while the server still answers ``tools/list`` and sent nothing
  unreadable; otherwise (a stopped or stuck server, invalid JSON or UTF-8, answers to the wrong request) it is a
  :class:`~agentr1_gym.errors.ToolInfrastructureError`;
* a stdio server's stderr is kept in memory, its last 64 KB only (error messages quote its tail); no file is left.

One connection per server and process is shared by every tool and every env copy that uses it (a vector env's
copies, a trainer's batch of envs); it opens on first use, and closes when the last env holding it closes
(``env.close()``) or the process exits. A pickled tool reconnects in the process that unpickles it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import json
import os
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agentr1_gym.errors import ConfigError, MissingDependencyError, ToolInfrastructureError
from agentr1_gym.text import MAX_JSON_DEPTH, clean_json
from agentr1_gym.tools.base import Tool, ToolResult, clean_schema
from agentr1_gym.tools.function import background_loop, run_coroutine
from agentr1_gym.tools.server_schema import MCPSchemaError, safe_validator

__all__ = ["MCPConnection", "MCPSchemaError", "MCPTool", "mcp_tools"]

#: the loop MCP sessions run on (async tools have their own: one that blocks cannot stall the sessions)
_LOOP = "mcp"
#: how much of a stdio server's stderr is kept (the tail)
STDERR_TAIL_BYTES = 64 * 1024
#: how long a server has to answer a probe (``tools/list``) after a call timed out before it counts as stuck
PING_TIMEOUT_S = 5.0


class _StderrTail:
    """A pipe a stdio server writes its stderr to, read by a daemon thread that keeps the last
    :data:`STDERR_TAIL_BYTES` bytes (a noisy server cannot fill a disk, and nothing is left behind)."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._buf = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._drain, args=(read_fd,), name="agentr1-mcp-stderr", daemon=True).start()

    def _drain(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(fd, 65536):
                with self._lock:
                    self._buf += chunk
                    if len(self._buf) > STDERR_TAIL_BYTES:
                        del self._buf[: len(self._buf) - STDERR_TAIL_BYTES]
        os.close(fd)

    def close_writer(self) -> None:
        """Drop this process's copy of the write end (the server keeps its own; the reader ends when it exits)."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self) -> str:
        with self._lock:
            return self._buf.decode("utf-8", "replace")


def _require_mcp() -> Any:
    try:
        import mcp
    except ImportError:
        raise MissingDependencyError('MCP tools need the mcp SDK: pip install "mcp>=2"') from None
    if not hasattr(mcp, "Client"):
        raise MissingDependencyError(
            f"MCP tools need mcp>=2 (its Client); installed: {getattr(mcp, '__version__', 'an older version')}"
        )
    return mcp


def _key(server: str | Sequence[str], env: dict[str, str] | None, cwd: str | None) -> tuple[Any, ...]:
    if isinstance(server, str):
        if not server.startswith(("http://", "https://")):
            raise ConfigError(
                f"MCP server {server!r}: a streamable-HTTP URL (http://host:port/mcp) or the stdio command as a "
                "list of strings (['python', 'server.py'])"
            )
        return ("http", server)
    argv = list(server)
    if not argv or not all(isinstance(a, str) and a for a in argv):
        raise ConfigError(f"MCP server command must be a non-empty list of strings, got {server!r}")
    return ("stdio", tuple(argv), tuple(sorted((env or {}).items())), cwd)


class MCPConnection:
    """One live session with an MCP server (shared: use :meth:`get`). The session runs in its own task on the
    library's background event loop; calls from any thread go through it."""

    _pool: ClassVar[dict[tuple[Any, ...], MCPConnection]] = {}
    _pool_lock = threading.Lock()

    def __init__(self, key: tuple[Any, ...], connect_timeout_s: float) -> None:
        self.key = key
        self.connect_timeout_s = connect_timeout_s
        self.users = 0
        self.client: Any = None
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Future[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self.stderr: _StderrTail | None = None
        #: transport faults (unreadable messages) the session reported, counted, and the last one
        self.faults = 0
        self.last_fault: BaseException | None = None
        #: why the session was found broken (a protocol fault, a server that stopped answering), or None
        self.broken: str | None = None
        self.label = key[1] if key[0] == "http" else " ".join(key[1])

    @classmethod
    def get(
        cls,
        server: str | Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        connect_timeout_s: float = 30.0,
    ) -> MCPConnection:
        """The process's connection to ``server`` (opened on first use), with one more user."""
        key = _key(server, env, cwd)
        with cls._pool_lock:
            conn = cls._pool.get(key)
            if conn is None or conn.closed:
                conn = cls(key, connect_timeout_s)
                cls._pool[key] = conn
            conn.users += 1
        try:
            conn.open()
        except BaseException:
            conn.release()
            raise
        return conn

    @property
    def closed(self) -> bool:
        """Whether the session ended, or was found broken (then the pool opens a fresh one for the next user)."""
        return self.broken is not None or (self._task is not None and self._task.done())

    def _break(self, error: ToolInfrastructureError) -> ToolInfrastructureError:
        """Mark the session broken (every later call fails at once with this error; the pool replaces it) and
        close it, stopping a stdio server."""
        if self.broken is None:
            self.broken = str(error)
            threading.Thread(target=self.shutdown, name="agentr1-mcp-close", daemon=True).start()
        return error

    def describe(self) -> str:
        where = f"MCP server {self.label!r}"
        if self.stderr is not None:
            tail = self.stderr.text().strip().splitlines()[-3:]
            if tail:
                where += f" (the tail of its stderr: {' | '.join(t.strip() for t in tail)[:300]})"
        return where

    async def _on_message(self, message: Any) -> None:
        """The session's message handler: transport faults (a line that is not JSON, bytes that are not UTF-8)
        are counted, so that a call they leave unanswered is not blamed on the model."""
        if isinstance(message, Exception):
            self.faults += 1
            self.last_fault = message

    def open(self) -> None:
        if self.client is not None and not self.closed:
            return
        mcp = _require_mcp()
        ready = threading.Event()

        async def session() -> None:
            self._closing = asyncio.Event()
            try:
                if self.key[0] == "http":
                    transport: Any = self.key[1]
                else:
                    from mcp.client.stdio import stdio_client

                    argv, env, cwd = self.key[1], dict(self.key[2]), self.key[3]
                    self.stderr = _StderrTail()
                    params = mcp.StdioServerParameters(
                        command=argv[0], args=list(argv[1:]), env=env or None, cwd=cwd
                    )
                    transport = stdio_client(params, errlog=self.stderr.writer)
                async with mcp.Client(transport, message_handler=self._on_message) as client:
                    if self.stderr is not None:
                        self.stderr.close_writer()  # the server has its own copy now
                    self.client = client
                    ready.set()
                    await self._closing.wait()
            except BaseException as exc:
                self._failure = exc
            finally:
                self.client = None
                if self.stderr is not None:
                    self.stderr.close_writer()
                ready.set()

        self._failure = None
        self._loop = background_loop(_LOOP)
        self._task = asyncio.run_coroutine_threadsafe(session(), self._loop)
        if not ready.wait(self.connect_timeout_s):
            self._task.cancel()
            raise ToolInfrastructureError(
                f"{self.describe()} did not answer within {self.connect_timeout_s:g} s of connecting"
            )
        if self.client is None:
            raise ToolInfrastructureError(f"cannot connect to {self.describe()}: {_why(self._failure)}")

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        """``tools/call``; returns the SDK's result, raises ``TimeoutError`` when the call was slow while the server
        stayed healthy, and :class:`ToolInfrastructureError` when the server is gone, stuck or sent something
        unreadable."""
        if self.broken is not None:
            raise ToolInfrastructureError(self.broken)
        if self.client is None or self.closed:
            raise ToolInfrastructureError(f"{self.describe()} is not connected: {_why(self._failure)}")
        from mcp.shared.exceptions import MCPError

        faults = self.faults
        try:
            return run_coroutine(
                self.client.call_tool(name, arguments, read_timeout_seconds=timeout_s),
                timeout_s + 5,
                loop=_LOOP,
            )
        except MCPError as exc:
            if "timed out" in str(exc).lower():
                self._check_health(name, faults)
                raise TimeoutError(str(exc)) from None
            raise ToolInfrastructureError(f"{self.describe()} failed on {name!r}: {exc}") from None
        except TimeoutError:
            self._check_health(name, faults)
            raise
        except Exception as exc:
            raise ToolInfrastructureError(f"{self.describe()} failed on {name!r}: {_why(exc)}") from None

    def _check_health(self, name: str, faults_before: int) -> None:
        """After a call to ``name`` timed out: raise :class:`ToolInfrastructureError` unless the server is healthy
        (connected, no unreadable message since the call began, and it answers ``tools/list`` in time)."""
        if self.faults != faults_before:
            raise self._break(ToolInfrastructureError(
                f"{self.describe()} sent a message that could not be read while {name!r} ran "
                f"({_why(self.last_fault)}); the call got no answer"
            ))  # fmt: skip
        if self.client is None or self.closed:
            raise ToolInfrastructureError(
                f"{self.describe()} closed while {name!r} ran: {_why(self._failure)}"
            )
        try:
            # tools/list, uncached, is the probe every server answers (ping is gone from the 2026 protocol)
            run_coroutine(self.client.list_tools(cache_mode="bypass"), PING_TIMEOUT_S, loop=_LOOP)
        except Exception as exc:
            raise self._break(ToolInfrastructureError(
                f"{self.describe()} did not answer {name!r} in time, nor a tools/list after it "
                f"({_why(exc) if not isinstance(exc, TimeoutError) else f'no answer in {PING_TIMEOUT_S:g} s'}): "
                "the server is stuck, stopped or answering other requests' ids"
            )) from None  # fmt: skip

    def list_tools(self) -> list[Any]:
        if self.client is None:
            raise ToolInfrastructureError(f"{self.describe()} is not connected: {_why(self._failure)}")
        tools: list[Any] = []
        cursor = None
        while True:
            try:
                page = run_coroutine(
                    self.client.list_tools(cursor=cursor), self.connect_timeout_s, loop=_LOOP
                )
            except TimeoutError:
                raise self._break(ToolInfrastructureError(
                    f"{self.describe()} did not list its tools within {self.connect_timeout_s:g} s"
                )) from None  # fmt: skip
            except Exception as exc:
                raise ToolInfrastructureError(
                    f"{self.describe()} failed to list its tools: {_why(exc)}"
                ) from None
            tools.extend(page.tools)
            cursor = getattr(page, "next_cursor", None)
            if not cursor:
                return tools

    def release(self) -> None:
        """One user fewer; the last one closes the session (and stops a stdio server)."""
        with self._pool_lock:
            self.users -= 1
            last = self.users <= 0
            if last and self._pool.get(self.key) is self:
                del self._pool[self.key]
        if last:
            self.shutdown()

    def shutdown(self) -> None:
        if self._closing is not None and self._task is not None and not self._task.done():
            self._loop.call_soon_threadsafe(self._closing.set)
            with contextlib.suppress(Exception):
                self._task.result(10)


def _why(exc: BaseException | None) -> str:
    if exc is None:
        return "the session ended"
    inner = getattr(exc, "exceptions", None)
    while inner:  # an exception group from the SDK's task group: the first leaf says what happened
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return f"{type(exc).__name__}: {exc}"[:300]


@atexit.register
def _close_all() -> None:
    for conn in list(MCPConnection._pool.values()):
        conn.shutdown()


class _RawArgs(BaseModel):
    """The arguments of an MCP call, as given (validated against the server's JSON schema)."""

    model_config = ConfigDict(extra="allow")


class MCPTool(Tool):
    """One tool of an MCP server (build them with :func:`mcp_tools`)."""

    Args = _RawArgs

    def __init__(
        self,
        server: str | Sequence[str],
        spec: Any,
        *,
        timeout_s: float = 30.0,
        connection: MCPConnection,
        options: dict[str, Any],
    ) -> None:
        self.server = server
        self.name = spec.name  # type: ignore[misc]
        self.description = (spec.description or spec.title or spec.name).strip()  # type: ignore[misc]
        self.input_schema = dict(spec.input_schema or {"type": "object", "properties": {}})
        self.timeout_s = timeout_s
        self._options = options
        self._conn: MCPConnection | None = connection
        self._transferable = True  # the first env built with this tool takes over its claim on the connection
        self._validator: Any = safe_validator(
            self.input_schema, f"MCP tool {self.name!r} of {connection.label!r}"
        )

    def schema_view(self) -> dict[str, Any]:
        params = clean_schema(self.input_schema)
        params.setdefault("properties", {})
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        if self._validator is None:
            self._validator = safe_validator(self.input_schema, f"MCP tool {self.name!r}")
        arguments, cut = clean_json(arguments)
        if cut:
            raise ValidationError.from_exception_data(
                self.name,
                [{"type": "value_error", "loc": ("arguments",), "input": "...",
                  "ctx": {"error": f"nested more than {MAX_JSON_DEPTH} levels deep"}}],
            )  # fmt: skip
        try:
            errors = sorted(self._validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
        except Exception as exc:  # a schema fault the construction-time checks could not see
            raise MCPSchemaError(
                f"MCP tool {self.name!r}: its input schema cannot be applied ({type(exc).__name__}: {exc})"[
                    :400
                ]
            ) from None
        if errors:
            raise ValidationError.from_exception_data(
                self.name,
                [
                    {
                        "type": "value_error",
                        "loc": tuple(str(p) for p in e.path) or ("arguments",),
                        "input": e.instance,
                        "ctx": {"error": e.message[:200]},
                    }
                    for e in errors[:5]
                ],
            )
        return _RawArgs(**arguments)

    def _connection(self) -> MCPConnection:
        if self._conn is None:
            self._conn = MCPConnection.get(self.server, **self._options)
        return self._conn

    def execute(self, args: BaseModel) -> ToolResult:
        arguments, _ = clean_json(dict(args.model_extra or {}))
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:  # NaN/inf or a non-JSON value: the session must never see it
            return ToolResult(
                f"Error: the arguments cannot be sent as JSON ({exc}).",
                success=False,
                metadata={"call_error": True},
            )
        try:
            result = self._connection().call(self.name, arguments, self.timeout_s)
        except TimeoutError:
            return ToolResult(
                f"Error: the tool {self.name!r} did not answer within {self.timeout_s:g} s.",
                success=False,
                metadata={"exception": "TimeoutError"},
            )
        text = _content_text(result)
        if getattr(result, "is_error", False):
            return ToolResult(
                f"Error: {text}" if text else "Error: the tool failed.",
                success=False,
                metadata={"mcp_error": True},
            )
        return ToolResult(text or "(no output)")

    def for_env(self) -> MCPTool:
        """A holder of this tool for one env: the first env takes over the claim :func:`mcp_tools` made, every
        other env adds one; each env's ``close()`` releases its own."""
        holder = copy.copy(self)
        if self._conn is not None and self._transferable:
            holder._conn, self._conn = self._conn, None
        else:
            holder._conn = MCPConnection.get(self.server, **self._options)
        self._transferable = holder._transferable = False
        return holder

    def close(self) -> None:
        if self._conn is not None:
            self._conn.release()
            self._conn = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_conn"] = None  # reconnects (one shared connection per process) on first use
        state["_transferable"] = False
        state["_validator"] = None
        return state

    def __deepcopy__(self, memo: dict[int, Any]) -> MCPTool:
        # an env copy shares the process's connection, and holds it until it closes
        clone = MCPTool.__new__(MCPTool)
        clone.__dict__.update(self.__dict__)
        clone._conn = MCPConnection.get(self.server, **self._options) if self._conn is not None else None
        clone._transferable = False
        return clone


def _content_text(result: Any) -> str:
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(getattr(block, "resource", None), "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'non-text'} content omitted]")
    if not parts and getattr(result, "structured_content", None) is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def mcp_tools(
    server: str | Sequence[str],
    *,
    names: Sequence[str] | None = None,
    timeout_s: float = 30.0,
    connect_timeout_s: float = 30.0,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> list[MCPTool]:
    """The tools of an MCP server (all, or those in ``names``, in that order).

    Args:
        server: a streamable-HTTP URL, or the command that starts a stdio server as a list of strings.
        names: which tools to take (a name the server lacks is a :class:`ConfigError`).
        timeout_s: a call slower than this is a failed call (the model sees that it timed out).
        connect_timeout_s: how long connecting and listing may take before the server counts as dead.
        env: environment variables for a stdio server (added to a minimal default environment).
        cwd: working directory of a stdio server.
    """
    options = {"env": env, "cwd": cwd, "connect_timeout_s": connect_timeout_s}
    conn = MCPConnection.get(server, **options)
    try:
        specs = {s.name: s for s in conn.list_tools()}
        if names is not None:
            missing = [n for n in names if n not in specs]
            if missing:
                raise ConfigError(
                    f"MCP server {conn.label!r} has no tool {missing[0]!r}; it has {sorted(specs)}"
                )
            chosen = [specs[n] for n in names]
        else:
            chosen = list(specs.values())
        if not chosen:
            raise ConfigError(f"MCP server {conn.label!r} offers no tools")
        tools = [
            MCPTool(server, spec, timeout_s=timeout_s, connection=conn, options=options) for spec in chosen
        ]
        with MCPConnection._pool_lock:  # each tool holds the connection until it is closed
            conn.users += len(tools)
        return tools
    finally:
        conn.release()
