"""Python objects that live in a worker process, where a deadline and a memory bound hold for every call.

Some tools are plain Python methods on a world's objects (BFCL's simulated APIs) that the model's arguments can
make run for minutes or allocate without end (``power(base=10, exponent=30000000)``, a decimal precision of
millions of digits). A thread cannot be stopped inside one C-level operation, which also holds the GIL, and a
signal handler only runs between bytecodes. So an :class:`ObjectWorker` keeps copies of the objects in a child
Python process (started lazily, one per env) and runs each call there:

* **deadline**: the parent waits at most ``timeout_s`` for the answer, then kills the worker; the next call
  starts a new one and loads the parent's copies again (the call that timed out changed nothing);
* **memory**: the worker runs under ``RLIMIT_AS`` (its size once started plus ``memory_mb``): a call past it
  fails with ``MemoryError``, answered like any failure of the call;
* **state**: each answer carries the object's attributes after the call (pickled), which the caller applies to
  its own copy: the parent's objects stay the truth (for checkers, ``state_key``, pickling the env), and whatever
  else the call changes, process-wide settings included (the thread's ``decimal`` context, ``mpmath``'s
  precision), stays in the worker;
* **lifetime**: the worker dies with its parent (``PR_SET_PDEATHSIG`` on Linux, and end of input everywhere) and
  with :meth:`ObjectWorker.close`; it never outlives the env.

The worker runs the objects' own code on data (the call's arguments), never code from the model; the pickles
that cross the pipe are the objects' own state. Cost: one pipe round trip and a pickle of the object's
attributes per call (a fraction of a millisecond for BFCL's APIs), and about half a second to start a worker.
"""

from __future__ import annotations

import contextlib
import decimal
import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from typing import Any

from agentr1_gym.errors import ToolInfrastructureError

__all__ = ["CallFailed", "CallTimedOut", "ObjectWorker", "numeric_state_kept", "value_text"]

HEADER = struct.Struct("!Q")
#: the most bytes one answer may have (an object's state after a call)
MAX_ANSWER_BYTES = 256 * 1024 * 1024


class CallTimedOut(Exception):
    """The call did not finish within its deadline (the worker was killed; the objects are as before it)."""


class CallFailed(Exception):
    """The call raised (its text is the message), or the worker died during it (out of memory, a crash).
    ``state``: the object's attributes after a call that raised in a worker that survived it (else None)."""

    def __init__(self, message: str, state: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.state = state


@contextlib.contextmanager
def numeric_state_kept() -> Iterator[None]:
    """Restore the thread's ``decimal`` context and ``mpmath``'s precision after the block, for trusted calls
    that run in-process: a call that sets them leaves no trace."""
    mp = sys.modules.get("mpmath")
    saved = mp.mp.prec if mp is not None else None
    with decimal.localcontext():
        try:
            yield
        finally:
            mp = sys.modules.get("mpmath")
            if mp is not None:
                mp.mp.prec = saved if saved is not None else 53


def value_text(value: Any) -> str:
    """A method's return value as text, the way BFCL's harness prints it (a dict as JSON where it can be): the
    worker makes the text itself (``call(..., text=True)``), so numbers print under the settings the call left,
    as they would in-process."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def send(fd: int, value: Any) -> None:
    """Write one length-prefixed pickle to ``fd``."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


class ObjectWorker:
    """Named objects in a worker process; :meth:`call` runs one method under the deadline and memory bound.

    Args:
        timeout_s: the deadline of one call (the answer must be back whole by then).
        memory_mb: how much memory the worker may add to its size at start.
    """

    def __init__(self, timeout_s: float, memory_mb: float) -> None:
        self.timeout_s = float(timeout_s)
        self.memory_mb = float(memory_mb)
        self._proc: subprocess.Popen | None = None
        self._loaded: Any = None  # the token of the objects the worker holds
        self._finalizer: Any = None
        self.restarts = 0  # workers killed at a deadline or found dead

    # -- lifecycle ----------------------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from agentr1_gym.tools._object_worker_main import main; main()",
             str(self.memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
            env={**{k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"},
                 "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )  # fmt: skip
        self._finalizer = weakref.finalize(self, _kill, proc)
        return proc

    def close(self) -> None:
        """End the worker (idempotent); a later call starts a new one."""
        proc, self._proc, self._loaded = self._proc, None, None
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            _kill(proc)
            with contextlib.suppress(OSError):
                proc.stdout.close()  # type: ignore[union-attr]
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process starts its own worker
        return {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["timeout_s"], state["memory_mb"])  # type: ignore[misc]

    # -- calls --------------------------------------------------------------------------------------------
    def _request(self, message: Any, timeout_s: float) -> Any:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            send(proc.stdin.fileno(), message)
        except OSError:
            raise CallFailed("the worker process is gone") from None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buf, need = bytearray(), None
        while need is None or len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CallTimedOut(f"no answer within {timeout_s:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise CallFailed("the worker process died during the call (out of memory, or a crash)")
            buf += chunk
            if need is None and len(buf) >= HEADER.size:
                need = HEADER.unpack(bytes(buf[: HEADER.size]))[0] + HEADER.size
                if need > MAX_ANSWER_BYTES:
                    raise CallFailed(f"the call's answer is larger than {MAX_ANSWER_BYTES} bytes")
        return pickle.loads(bytes(buf[HEADER.size : need]))

    def _fail(self) -> None:
        self.restarts += 1
        self.close()

    def load(self, objects: dict[str, Any], token: Any) -> None:
        """Make sure the worker holds ``objects`` (its copies, pickled over), known by ``token``: nothing is sent
        when it already holds that token."""
        if self._proc is not None and self._proc.poll() is not None:
            self._fail()
        if self._proc is not None and self._loaded == token:
            return
        if self._proc is None:
            self._proc = self._start()
        try:
            ok, detail, *_ = self._request(("load", objects), max(30.0, self.timeout_s))
        except (CallTimedOut, CallFailed) as exc:
            self._fail()
            raise ToolInfrastructureError(f"the object worker could not load its objects: {exc}") from None
        if not ok:
            self._fail()
            raise ToolInfrastructureError(
                f"the object worker could not load its objects: {detail} (their classes must be importable by "
                "module name in a fresh interpreter)"
            )
        self._loaded = token

    def call(
        self, name: str, method: str, kwargs: dict[str, Any], *, text: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        """``objects[name].method(**kwargs)`` in the worker: ``(its return value, or with text=True its
        :func:`value_text` made in the worker, the object's attributes after the call)``. Raises
        :class:`CallTimedOut` (the worker is killed; :meth:`load` again before the next call) or :class:`CallFailed` (the method raised, ran out of memory or killed its worker; the message says
        which, and the attributes after a raising call are on ``exc.state`` when the worker survived)."""
        if self._proc is None:
            raise ToolInfrastructureError("ObjectWorker.call() before load()")
        try:
            ok, value, state = self._request(("call", name, method, kwargs, text), self.timeout_s)
        except (CallTimedOut, CallFailed):  # the worker is killed, or already gone
            self._fail()
            raise
        if not ok:
            raise CallFailed(value, state)
        return value, state


def _parent_death_signal() -> None:
    """In the worker: die with the parent (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere end of input)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
