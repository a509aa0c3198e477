"""Tools from plain typed functions: :func:`tool` (a decorator) and :meth:`Tool.from_function`.

The JSON schema comes from the type hints (anything pydantic validates: ``int``, ``str``, ``Literal[...]``,
``list[float]``, a pydantic model, ``X | None``), parameter descriptions from the docstring (Google
``Args:`` sections, NumPy ``Parameters`` sections and Sphinx ``:param x:`` lines), and the tool's description
from the docstring's first paragraph.

>>> @tool
... def add(a: int, b: int = 0) -> int:
...     '''Add two integers.
...
...     Args:
...         a: the first addend
...         b: the second addend
...     '''
...     return a + b
>>> add.schema()["function"]["parameters"]["properties"]["a"]
{'description': 'the first addend', 'type': 'integer'}

Calling it: the env validates the model's arguments against the schema (a bad call is an ``invalid_call`` with a
one-line observation), then calls the function. Sync and ``async def`` functions both work. ``timeout_s`` bounds a call
either way: a coroutine is cancelled (coroutines share one background event loop; one that blocks its thread gets
the loop replaced, so later calls do not wait behind it), and a sync function runs in a thread that is stopped when
late (an exception raised in it at its next Python bytecode, so a loop ends and what it allocated is freed; code
inside one long C call stops when that call returns, so bound such work in the library, e.g. SQLite's
``setlimit``, or run it in the sandbox, :mod:`agentr1_gym.tools.python`). A late call is a failed call; ``sys.exit()`` in a tool is one too. What the function returns becomes the observation: a ``str`` as is,
``None`` as ``"(no output)"``, a :class:`ToolResult` as is (set ``terminal=True`` for a move that ends the world),
anything else as JSON. A function that raises becomes a failed call whose observation names the exception, so the
model can react; it earns no process reward. :class:`~agentr1_gym.errors.ToolInfrastructureError` (your backing
service is down) propagates: that is never the model's fault. ``errors="raise"`` lets every exception propagate:
for functions that handle all model input themselves, where an exception is a bug to surface (the worlds' own
moves, :mod:`agentr1_gym.envs.webshop` and :mod:`agentr1_gym.envs.textgames`).

Constraints beyond the type go in ``Annotated``: ``query: Annotated[str, Field(min_length=1, max_length=300)]``
puts ``minLength``/``maxLength`` in the schema, and a call outside them is an invalid call.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentr1_gym.errors import ConfigError, ToolInfrastructureError
from agentr1_gym.tools.base import Tool, ToolResult

__all__ = [
    "ERRORS",
    "CallStopped",
    "FunctionTool",
    "background_loop",
    "call_with_deadline",
    "run_coroutine",
    "to_result",
    "tool",
    "tool_class",
    "tools_from_object",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
#: what a tool does when its function raises: ``observe`` (a failed call the model sees) or ``raise``
ERRORS = ("observe", "raise")


# ---- background event loops: one for async tools, one for MCP sessions --------------------------------------
#: a tool's coroutine that blocks (``time.sleep`` in an ``async def``) stops every other coroutine on its loop; MCP
#: sessions therefore run on a loop of their own, and a loop found blocked after a time-out is replaced
_LOOPS: dict[str, asyncio.AbstractEventLoop] = {}
_LOOP_LOCK = threading.Lock()
#: how long a time-out waits for the loop to answer a no-op before it counts the loop as blocked
_PROBE_S = 1.0


def background_loop(name: str = "tools") -> asyncio.AbstractEventLoop:
    """The process's background loop ``name`` (``"tools"`` for async tools, ``"mcp"`` for MCP sessions)."""
    with _LOOP_LOCK:
        loop = _LOOPS.get(name)
        if loop is None or loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=f"agentr1-async-{name}", daemon=True).start()
            _LOOPS[name] = loop
        return loop


def _retire_if_blocked(name: str, loop: asyncio.AbstractEventLoop) -> bool:
    """After a time-out on ``loop``: if it does not run a no-op within ``_PROBE_S`` (a coroutine on it blocks
    its thread), stop handing it out, so that later calls get a fresh loop instead of timing out behind the
    blocked one (its thread stays stuck: Python cannot stop a thread). Returns whether it was retired."""
    try:
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(_PROBE_S)
        return False
    except (TimeoutError, RuntimeError):
        with _LOOP_LOCK:
            if _LOOPS.get(name) is loop:
                del _LOOPS[name]
        return True


def run_coroutine(
    coro: Coroutine[Any, Any, Any], timeout_s: float | None = None, *, loop: str = "tools"
) -> Any:
    """Run a coroutine on the background loop ``loop`` and wait for it (``TimeoutError`` after ``timeout_s``;
    the coroutine is cancelled then, and a loop it left blocked is replaced). Works whether or not the caller
    is itself inside an event loop."""
    target = background_loop(loop)
    future = asyncio.run_coroutine_threadsafe(coro, target)
    try:
        return future.result(timeout_s)
    except TimeoutError:
        future.cancel()
        _retire_if_blocked(loop, target)
        raise


class CallStopped(BaseException):
    """Raised inside a sync tool's thread at its deadline (a ``BaseException``, so that the tool's own ``except
    Exception`` does not swallow it; its ``finally`` blocks run)."""


def _stop(thread: threading.Thread) -> bool:
    """Raise :class:`CallStopped` in ``thread`` at its next Python bytecode; False where it cannot be asked."""
    if thread.ident is None or not thread.is_alive():
        return False
    import ctypes

    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(CallStopped)
    )
    return done == 1


def call_with_deadline(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float) -> Any:
    """``fn(**kwargs)`` in a daemon thread, waited for at most ``timeout_s``; then ``TimeoutError``, and the thread
    is stopped: :class:`CallStopped` is raised in it, which ends a loop at its next Python bytecode and frees what
    the call holds. Code inside one long C call (a regex, a huge allocation, ``time.sleep``) stops when that call
    returns: bound such work where it happens (a limit on the library), or run it in the sandbox. What ``fn``
    raises is re-raised here."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            try:
                box["value"] = fn(**kwargs)
            except CallStopped:
                pass
            except BaseException as exc:  # handed to the caller, whatever it is
                box["error"] = exc
            finally:
                done.set()
        except CallStopped:  # the stop arrived as the call ended
            pass

    thread = threading.Thread(target=run, name="agentr1-tool-call", daemon=True)
    thread.start()
    if not done.wait(timeout_s):
        _stop(thread)
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


# ---- docstrings --------------------------------------------------------------------------------------------
def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(the first paragraph, {parameter: description}) from a Google, NumPy or Sphinx docstring."""
    doc = inspect.cleandoc(doc or "")
    if not doc:
        return "", {}
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    params: dict[str, str] = {}
    for name, text in re.findall(r":param\s+(?:[^:]*\s)?(\w+):\s*(.+(?:\n(?![ \t]*:)[ \t]+.+)*)", doc):
        params[name] = " ".join(text.split())
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        head = lines[i].strip()
        numpy = (
            head in ("Parameters", "Args", "Arguments")
            and i + 1 < len(lines)
            and set(lines[i + 1].strip()) == {"-"}
        )
        if head in ("Args:", "Arguments:", "Parameters:") or numpy:
            i += 2 if numpy else 1
            current = None
            base: int | None = None
            while i < len(lines):
                line = lines[i]
                if not line.strip():
                    i += 1
                    continue
                indent = len(line) - len(line.lstrip())
                if base is None:
                    base = indent
                if indent < base or (
                    numpy and indent == 0 and set(lines[min(i + 1, len(lines) - 1)].strip()) == {"-"}
                ):
                    break
                if indent == base:
                    m = re.match(r"\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
                    if numpy:
                        m2 = re.match(r"\s*(\w+)\s*(?::.*)?$", line)
                        current = m2.group(1) if m2 else None
                        if current:
                            params.setdefault(current, "")
                    elif m:
                        current = m.group(1)
                        params[current] = m.group(2).strip()
                    else:
                        break
                elif current:
                    params[current] = (params.get(current, "") + " " + line.strip()).strip()
                i += 1
            continue
        i += 1
    return summary, params


# ---- the tool ------------------------------------------------------------------------------------------------
def to_result(value: Any) -> ToolResult:
    """What a tool function returned, as a :class:`ToolResult`: a ToolResult as it is, a string as its text,
    ``None`` as "(no output)", anything else as JSON (or its ``str`` when it is not JSON-able)."""
    if isinstance(value, ToolResult):
        return value
    if value is None:
        return ToolResult("(no output)")
    if isinstance(value, str):
        return ToolResult(value)
    try:
        return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):  # not JSON, circular, or nested past the recursion limit
        return ToolResult(str(value)[:100_000])


class FunctionTool(Tool):
    """A tool that calls a Python function (see the module docstring). Build one with :func:`tool` or
    :meth:`Tool.from_function`; ``fn`` may be replaced per instance (:func:`tools_from_object` binds methods)."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    is_async: ClassVar[bool] = False
    #: what the class was built from: (function, name, description, skip_first); pickling rebuilds it
    origin: ClassVar[tuple[Any, ...]]

    def __init__(
        self, fn: Callable[..., Any], timeout_s: float | None = None, errors: str = "observe"
    ) -> None:
        if errors not in ERRORS:
            raise ConfigError(f"tool {self.name!r}: errors={errors!r}; use one of {', '.join(ERRORS)}")
        self.fn = fn
        self.timeout_s = timeout_s
        self.errors = errors

    def __reduce__(self) -> str | tuple[Any, ...]:
        # a decorated module-level function: its name now holds this tool, so pickle it by reference
        fn = self.origin[0]
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        if module is not None and getattr(module, getattr(fn, "__qualname__", ""), None) is self:
            return fn.__qualname__
        # otherwise the class is made at run time: pickle what it was made from
        return (_rebuild, (self.origin, self.fn, self.timeout_s, self.errors))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (a decorated function stays callable)."""
        return self.fn(*args, **kwargs)

    def execute(self, args: BaseModel) -> ToolResult:
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        try:
            if self.is_async:
                value = run_coroutine(self.fn(**kwargs), self.timeout_s)
            elif self.timeout_s is not None:
                value = call_with_deadline(self.fn, kwargs, self.timeout_s)
            else:
                value = self.fn(**kwargs)
        except ToolInfrastructureError:
            raise
        except (SystemExit, Exception) as exc:  # KeyboardInterrupt and the like always propagate
            if self.errors == "raise":
                raise
            return self._failed(exc)
        return to_result(value)

    def _failed(self, exc: BaseException) -> ToolResult:
        """A call that raised, as the failed call the model sees: the function failed on the model's input."""
        if isinstance(exc, SystemExit):  # sys.exit() in a tool ends the call, never the training process
            text = f"Error: the tool exited (SystemExit: {exc.code!r:.100})."
        elif isinstance(exc, TimeoutError) and self.timeout_s is not None:
            text = f"Error: {self.name} did not finish within {self.timeout_s:g} s."
        else:
            detail = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
            text = f"Error: {type(exc).__name__}" + (f": {detail}" if detail else "")
        return ToolResult(text, success=False, metadata={"exception": type(exc).__name__})


_CLASSES: dict[tuple[Any, ...], type[FunctionTool]] = {}


def _rebuild(
    origin: tuple[Any, ...], fn: Callable[..., Any], timeout_s: float | None, errors: str = "observe"
) -> FunctionTool:
    return tool_class(*origin)(fn, timeout_s, errors)


def tool_class(
    fn: Callable[..., Any], name: str | None, description: str | None, skip_first: bool = False
) -> type[FunctionTool]:
    """The :class:`FunctionTool` class of ``fn`` (its schema from the type hints and docstring; cached per
    function). ``skip_first``: ``fn`` is an unbound method whose first parameter is the object (a world's
    methods)."""
    key = (fn, name, description, skip_first)
    try:
        cached = _CLASSES.get(key)
    except TypeError:  # an unhashable callable
        cached, key = None, None  # type: ignore[assignment]
    if cached is not None:
        return cached
    made = _make_tool_class(fn, name, description, skip_first)
    made.origin = (fn, name, description, skip_first)
    if key is not None:
        _CLASSES[key] = made
    return made


def _hints_from_callers(target: Any, tool_name: str, qual: str) -> dict[str, Any]:
    localns: dict[str, Any] = {}
    frame = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            break
        localns = {**frame.f_locals, **localns}
        frame = frame.f_back
    try:
        return get_type_hints(target, localns=localns, include_extras=True)
    except Exception as exc:
        raise ConfigError(f"tool {tool_name!r} ({qual}): cannot read its type hints: {exc}") from None


def _make_tool_class(
    fn: Callable[..., Any], name: str | None, description: str | None, skip_first: bool
) -> type[FunctionTool]:
    target = inspect.unwrap(fn)
    qual = getattr(target, "__qualname__", repr(target))
    if not callable(target):
        raise ConfigError(f"a tool is built from a function, got {type(fn).__name__}")
    tool_name = name or getattr(target, "__name__", "")
    if not _NAME.match(tool_name or ""):
        raise ConfigError(
            f"tool name {tool_name!r} (from {qual}) is not a valid function name: letters, digits, '_' and '-', "
            "up to 64 characters, not starting with a digit; pass name="
        )
    summary, param_docs = _parse_docstring(getattr(target, "__doc__", None))
    desc = description if description is not None else summary
    if not desc:
        raise ConfigError(
            f"tool {tool_name!r} ({qual}) needs a description: give it a docstring or description="
        )
    try:
        hints = get_type_hints(target, include_extras=True)  # Annotated constraints reach the schema
    except NameError:
        # string annotations naming something imported inside a function (``from __future__ import
        # annotations``): resolve them in the callers' scopes, as pydantic does for models
        hints = _hints_from_callers(target, tool_name, qual)
    except Exception as exc:
        raise ConfigError(f"tool {tool_name!r} ({qual}): cannot read its type hints: {exc}") from None
    params = list(inspect.signature(target).parameters.values())
    if skip_first and params:
        params = params[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigError(
                f"tool {tool_name!r} ({qual}): *{p.name} / **{p.name} cannot be described to a model; name each parameter"
            )
        if p.kind is p.POSITIONAL_ONLY:
            raise ConfigError(
                f"tool {tool_name!r} ({qual}): parameter {p.name!r} is positional-only; tools are called by keyword"
            )
        if p.name not in hints:
            raise ConfigError(
                f"tool {tool_name!r} ({qual}): parameter {p.name!r} has no type hint; the schema is built from hints "
                f"(e.g. {p.name}: str)"
            )
        default = ... if p.default is p.empty else p.default
        doc = param_docs.get(p.name)
        # a docstring's description only where there is one (an Annotated Field's own description stays)
        fields[p.name] = (hints[p.name], Field(default, description=doc) if doc else Field(default))
    args = create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)  # type: ignore[call-overload]
    return type(
        f"{tool_name}_tool",
        (FunctionTool,),
        {
            "name": tool_name,
            "description": desc,
            "Args": args,
            "is_async": inspect.iscoroutinefunction(target),
            "__doc__": desc,
            "__module__": getattr(target, "__module__", __name__),
        },
    )


def from_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    errors: str = "observe",
) -> FunctionTool:
    """A :class:`Tool` that calls ``fn`` (see :mod:`agentr1_gym.tools.function`)."""
    if isinstance(fn, FunctionTool):
        return fn
    if inspect.ismethod(fn):  # a bound method: one class per function, and the copy of an env rebinds it
        return tool_class(fn.__func__, name, description, skip_first=True)(fn, timeout_s, errors)
    return tool_class(fn, name, description)(fn, timeout_s, errors)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    errors: str = "observe",
) -> Any:
    """Decorator: ``@tool`` or ``@tool(name=..., description=..., timeout_s=..., errors=...)`` turns a typed
    function into a :class:`Tool` (still callable as the function). ``errors``: ``"observe"`` (default) makes an
    exception a failed call the model sees; ``"raise"`` lets it propagate (a function that handles all input
    itself, where an exception is a bug)."""
    if fn is None:
        return lambda f: from_function(
            f, name=name, description=description, timeout_s=timeout_s, errors=errors
        )
    return from_function(fn, name=name, description=description, timeout_s=timeout_s, errors=errors)


def tools_from_object(obj: Any, *, exclude: tuple[str, ...] = ()) -> list[FunctionTool]:
    """One tool per public method of ``obj`` (TRL's ``environment_factory`` convention): the methods of its class
    not starting with ``_``, in definition order, bound to ``obj``."""
    return [
        tool_class(getattr(type(obj), n), None, None, skip_first=True)(getattr(obj, n))
        for n in public_methods(type(obj), exclude)
    ]


def public_methods(cls: type, exclude: tuple[str, ...] = ()) -> list[str]:
    """The names of ``cls``'s public methods (its own and inherited ones, not ``object``'s), in definition order."""
    names: list[str] = []
    for klass in reversed(cls.__mro__[:-1]):
        for n, value in vars(klass).items():
            if n.startswith("_") or n in exclude or n in names:
                continue
            if inspect.isfunction(value):
                names.append(n)
    return names


# ``Tool.from_function``: attached here, not defined in the base module, so that the layers point down (the base
# class knows nothing of this module); ``agentr1_gym.tools`` imports this module, so it is always attached
Tool.from_function = staticmethod(from_function)  # type: ignore[attr-defined]
