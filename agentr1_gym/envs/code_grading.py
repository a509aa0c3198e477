"""Grading of code answers that the graded code cannot game.

Running a candidate and its tests in one program and reading the exit code lets the candidate decide the verdict:
``raise SystemExit(0)``, ``os._exit(0)``, patched builtins or ``assert`` helpers, or a return value whose ``__eq__``
always says ``True``. Here the verdict is computed in the env's own process, where the candidate never runs:

1. **record** (once per task, host side, trusted data): the task's ``check`` runs against the reference solution
   with a seeded RNG, and every call's arguments are recorded;
2. **execute** (sandbox): the candidate's program, then a harness that discards whatever was printed so far,
   calls the entry point on exactly the recorded arguments, and writes the results as plain data (exact
   ``None/bool/int/float/complex/str/bytes/list/tuple/dict/set/frozenset``; anything else, subclasses included,
   becomes an opaque value);
3. **replay** (host side): the same ``check`` runs with the same seed against a stand-in that returns the decoded
   results in order (and raises where the candidate raised). An opaque value fails every comparison; a call the
   recording did not see (the test took another path) fails the task.

The sandbox's output is untrusted: a candidate may print a forged result line, but that only restates its own
answers, so it passes only if those answers are right. The doctest process reward works the same way: examples
are parsed on the host, their outputs produced in the sandbox and compared on the host with doctest's checker.
Whether the reference solution itself passes a prompt's examples is checked on the host
(:func:`host_example_outputs`): reference solutions and hidden tests never enter the sandbox.
Since the examples (and their expected outputs) are in the prompt, a function hard-coding them earns that small,
once-per-episode reward; the hidden tests are what the outcome pays for.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import doctest
import functools
import inspect
import io
import json
import random
import textwrap
import traceback
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Recording",
    "decode_value",
    "doctest_program",
    "encode_value",
    "grade_program",
    "grade_replay",
    "host_example_outputs",
    "parse_doctest_reply",
    "record_calls",
]

RESULT_MARK = "\x00AGENTR1-RESULTS\x00"
_MAX_DEPTH = 200


def encode_value(x: Any, _depth: int = 0) -> Any:
    """Plain data as tagged JSON: exact builtin types only (a subclass, or anything else, is opaque)."""
    if _depth > 200:
        return {"x": "too deep"}
    t = type(x)
    if x is None or t is bool:
        return x
    if t is int:
        return {"i": format(x, "x")}  # hex: no digit limit either way
    if t is float:
        return {"f": x.hex()}
    if t is complex:
        return {"c": [x.real.hex(), x.imag.hex()]}
    if t is str:
        return {"s": x}
    if t is bytes:
        return {"y": base64.b64encode(x).decode()}
    if t in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "e", frozenset: "z"}[t]
        return {tag: [encode_value(v, _depth + 1) for v in x]}
    if t is dict:
        return {"d": [[encode_value(k, _depth + 1), encode_value(v, _depth + 1)] for k, v in x.items()]}
    return {"x": t.__name__[:64]}


class Opaque:
    """A value the candidate returned that is not plain data: every use of it fails."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        object.__setattr__(self, "type_name", type_name)

    def _fail(self, *args, **kwargs):
        raise TypeError(f"the candidate returned a {self.type_name!r}, which is not plain data")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __len__ = __iter__ = _fail  # type: ignore
    __contains__ = __getitem__ = __add__ = __sub__ = __mul__ = __float__ = __int__ = __abs__ = _fail  # type: ignore
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<opaque {self.type_name}>"


def decode_value(v: Any, _depth: int = 0) -> Any:
    """The inverse of :func:`encode_value` (malformed input raises ValueError)."""
    if _depth > _MAX_DEPTH:
        raise ValueError("too deep")
    if v is None or type(v) is bool:
        return v
    if not isinstance(v, dict) or len(v) != 1:
        raise ValueError(f"not an encoded value: {str(v)[:80]}")
    ((tag, body),) = v.items()
    if tag == "i":
        return int(body, 16)
    if tag == "f":
        return float.fromhex(body)
    if tag == "c":
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if tag == "s" and isinstance(body, str):
        return body
    if tag == "y":
        return base64.b64decode(body)
    if tag in ("l", "t", "e", "z") and isinstance(body, list):
        items = [decode_value(b, _depth + 1) for b in body]
        return {"l": list, "t": tuple, "e": set, "z": frozenset}[tag](items)
    if tag == "d" and isinstance(body, list):
        return {decode_value(k, _depth + 1): decode_value(val, _depth + 1) for k, val in body}
    if tag == "x":
        return Opaque(str(body)[:64])
    raise ValueError(f"unknown tag {tag!r}")


@dataclass(frozen=True)
class Recording:
    """The calls a task's tests make to the entry point (encoded ``[args, kwargs]``), in order."""

    calls: tuple[str, ...]
    seed: int = 0


class _Diverged(Exception):
    pass


def _namespace(prompt: str, solution: str, test: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "__agentr1_check__"}
    exec(compile(prompt + solution + "\n\n" + test, "<task>", "exec"), ns)
    return ns


def _seeded(seed: int):
    state = random.getstate()
    random.seed(seed)
    return state


def record_calls(prompt: str, solution: str, test: str, entry_point: str, seed: int = 0) -> Recording:
    """Run ``check`` against the reference solution and record each call's arguments (host side: trusted)."""
    ns = _namespace(prompt, "", test)
    reference = _namespace(prompt, solution, "")[
        entry_point
    ]  # its own globals: its recursion is not recorded
    calls: list[str] = []

    def recorder(*args, **kwargs):
        calls.append(json.dumps([encode_value(list(args)), encode_value(kwargs)]))
        return reference(*args, **kwargs)

    ns[entry_point] = recorder  # tests may also call the function by name (in HumanEval: the candidate's own)
    state = _seeded(seed)
    try:
        ns["check"](recorder)
    finally:
        random.setstate(state)
    return Recording(tuple(calls), seed)


def grade_replay(
    prompt: str, test: str, entry_point: str, recording: Recording, results: list[Any]
) -> tuple[bool, str]:
    """Replay ``check`` with the candidate's decoded results; (passed, why not)."""
    if len(results) != len(recording.calls):
        return False, f"{len(results)} results for {len(recording.calls)} calls"
    ns = _namespace(prompt, "", test)
    position = [0]

    def stand_in(*args, **kwargs):
        i = position[0]
        if i >= len(recording.calls):
            raise _Diverged("the tests made more calls than recorded")
        if json.dumps([encode_value(list(args)), encode_value(kwargs)]) != recording.calls[i]:
            raise _Diverged("the tests called the function with other arguments than recorded")
        position[0] += 1
        kind, value = results[i]
        if kind == "raise":
            exc = getattr(builtins, str(value), None)
            if isinstance(exc, type) and issubclass(exc, Exception):
                raise exc(f"raised by the candidate ({value})")
            raise RuntimeError(f"the candidate raised {value}")
        return value

    ns[entry_point] = stand_in
    state = _seeded(recording.seed)
    try:
        ns["check"](stand_in)
    except _Diverged as e:
        return False, str(e)
    except AssertionError:
        return False, "a test assertion failed"
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"
    finally:
        random.setstate(state)
    if position[0] != len(recording.calls):
        return False, "the tests stopped early"
    return True, ""


_CALL_HARNESS = """

def _agentr1_harness(_calls, _entry, _mark):
    import io as _io, json as _json, os as _os, sys as _sys
{helpers}
    try:
        _sys.stdout.flush()
    except Exception:
        pass
    _os.ftruncate(1, 0)  # whatever the program printed so far is not part of the result
    _os.lseek(1, 0, 0)
    _fn = globals().get(_entry)
    _out = []
    _real = _sys.stdout
    for _call in _calls:
        _args, _kwargs = _json.loads(_call)
        _sys.stdout = _io.StringIO()  # the function's own prints are not results either
        try:
            _value = _fn(*decode_value(_args), **decode_value(_kwargs))
            _out.append(["return", encode_value(_value)])
        except Exception as _e:
            _out.append(["raise", type(_e).__name__])
        finally:
            _sys.stdout = _real
    _os.write(1, (_mark + _json.dumps(_out)).encode())

"""


@functools.cache
def _call_harness() -> str:
    """The harness, with this module's own encoder and decoder nested in it (built once: reading their source
    on every graded step was repeated file I/O). Nested, they cannot clobber the program's own names."""
    helpers = "\n".join(inspect.getsource(f) for f in (encode_value, Opaque, decode_value))
    helpers = f"import base64\n_MAX_DEPTH = {_MAX_DEPTH}\n{helpers}"
    return _CALL_HARNESS.format(helpers=textwrap.indent(helpers, "    "))


def grade_program(program: str, entry_point: str, recording: Recording) -> str:
    """The candidate's program followed by the harness that calls it on the recorded arguments."""
    call = f"_agentr1_harness({list(recording.calls)!r}, {entry_point!r}, {RESULT_MARK!r})\n"
    return f"{program}\n{_call_harness()}\n{call}"


def parse_results(stdout: str) -> list[Any] | None:
    """The decoded results the harness wrote (None when there are none or they are malformed)."""
    at = stdout.rfind(RESULT_MARK)
    if at < 0:
        return None
    try:
        raw = json.loads(stdout[at + len(RESULT_MARK) :])
        out = []
        for kind, value in raw:
            if kind == "return":
                out.append(("return", decode_value(value)))
            elif kind == "raise" and isinstance(value, str):
                out.append(("raise", value[:64]))
            else:
                return None
        return out
    except (ValueError, TypeError, RecursionError, OverflowError):
        return None


# ---- doctest examples ----------------------------------------------------------------------------------------
_DOCTEST_HARNESS = """

def _agentr1_examples(_sources, _mark):
    import io as _io, json as _json, os as _os, sys as _sys, traceback as _tb
    try:
        _sys.stdout.flush()
    except Exception:
        pass
    _os.ftruncate(1, 0)
    _os.lseek(1, 0, 0)
    _real = _sys.stdout
    _outs = []
    for _src in _sources:
        _buf = _io.StringIO()
        _sys.stdout = _buf
        try:
            exec(compile(_src, "<example>", "single"), globals())
        except Exception as _e:
            _buf.write("Traceback (most recent call last):\\n" + "".join(_tb.format_exception_only(type(_e), _e)))
        finally:
            _sys.stdout = _real
        _outs.append(_buf.getvalue())
    _os.write(1, (_mark + _json.dumps(_outs)).encode())

"""


def doctest_examples(docstring: str) -> list[doctest.Example]:
    try:
        return doctest.DocTestParser().get_examples(docstring)
    except ValueError:  # inconsistent indentation: not usable as doctests
        return []


def doctest_program(program: str, examples: list[doctest.Example]) -> str:
    """The program followed by a harness that prints each example's output (compared on the host)."""
    call = f"_agentr1_examples({[e.source for e in examples]!r}, {RESULT_MARK!r})\n"
    return f"{program}\n{_DOCTEST_HARNESS}\n{call}"


def parse_doctest_reply(stdout: str, examples: list[doctest.Example]) -> bool:
    """Whether every example's output (as the sandbox reported it) matches what the docstring wants."""
    at = stdout.rfind(RESULT_MARK)
    if at < 0:
        return False
    try:
        outs = json.loads(stdout[at + len(RESULT_MARK) :])
    except ValueError:
        return False
    return examples_match(outs, examples)


def examples_match(outs: Any, examples: list[doctest.Example]) -> bool:
    """Whether ``outs`` (one output string per example) is what the examples want (doctest's checker)."""
    if not isinstance(outs, list) or len(outs) != len(examples) or not all(isinstance(o, str) for o in outs):
        return False
    checker = doctest.OutputChecker()
    flags = doctest.NORMALIZE_WHITESPACE
    for example, got in zip(examples, outs):
        if example.exc_msg is not None:
            want_exc = example.exc_msg.strip().split(":")[0]
            if not got.startswith("Traceback") or not got.strip().splitlines()[-1].startswith(want_exc):
                return False
        elif not checker.check_output(example.want, got, flags):
            return False
    return True


def host_example_outputs(program: str, examples: list[doctest.Example]) -> list[str]:
    """The examples' outputs for a *trusted* program (a task's reference solution), produced in this process the
    way the sandbox harness produces them for answers. Never call it on model output."""
    ns: dict[str, Any] = {"__name__": "__agentr1_examples__"}
    exec(compile(program, "<reference>", "exec"), ns)
    outs = []
    for example in examples:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(example.source, "<example>", "single"), ns)
        except Exception as e:
            buf.write(
                "Traceback (most recent call last):\n" + "".join(traceback.format_exception_only(type(e), e))
            )
        outs.append(buf.getvalue())
    return outs
