"""A sandboxed Python execution tool with a pool of warm workers.

:class:`PythonSandbox` runs model-written code in a separate, kernel-isolated process with a wall-clock timeout,
CPU-time, memory, file-size and open-file limits, and reports stdout/stderr (cut to a budget), the exit status,
the signal and the exception type. Each call runs in a child forked from a warm, stdlib-only worker process (see
``_sandbox_worker.py``) with its isolation built before the request arrives, so a call costs milliseconds instead
of an interpreter start, and no state survives from one call to the next.

What is enforced, and by what (the README's security section has the table per kind of host):

* **identity**: a user namespace maps the run to ``nobody`` (when the caller is root) or to the caller's own
  unprivileged uid, with every capability dropped; as root without user namespaces, a real ``setresuid`` to
  ``nobody``;
* **files**: a private mount namespace whose root is read-only and holds only ``/usr``, the Python
  installation, ``/dev/null|zero|urandom|random`` and a writable ``/tmp`` that is the run's own directory
  (removed afterwards): no ``/etc``, ``/proc``, ``/home``, ``/root``, ``/dev/shm`` or host ``/tmp``;
* **processes**: a PID namespace per run (nothing outside is visible or signallable; when the run ends the kernel
  kills everything in it); a seccomp filter refuses new processes (threads are fine), ``execve``, ``ptrace`` and
  cross-process memory access, ``setsid``/``setpgid``, mounts, namespaces, keyrings, BPF and other kernel
  attack surface;
* **network**: a network namespace with no usable interface;
* **resources**: ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE`` (also bounds printed output), ``RLIMIT_NOFILE``,
  ``RLIMIT_NPROC`` (threads); the wall-clock timeout kills the run's whole process group.

Where the kernel refuses a layer (no user namespaces for an unprivileged caller, say), the sandbox warns once,
says which layers hold in :attr:`PythonSandbox.isolation`, and falls back to Python-level guards for the missing
ones; ``SandboxConfig(require_isolation=True)`` makes that an error instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.cache import shared
from agentr1_gym.errors import ToolInfrastructureError
from agentr1_gym.tools.base import Tool, ToolResult

__all__ = [
    "ExecResult",
    "PythonSandbox",
    "PythonTool",
    "SandboxConfig",
    "format_exec_result",
    "shared_sandbox",
]

_WORKER = str(Path(__file__).with_name("_sandbox_worker.py"))


class SandboxConfig(BaseModel):
    """Limits of one code run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit per run.")
    cpu_s: int = Field(5, ge=1, description="CPU-seconds limit per run (RLIMIT_CPU).")
    memory_mb: int = Field(1024, ge=64, description="Address-space limit (RLIMIT_AS).")
    file_mb: int = Field(
        16, ge=1, description="Largest file the code may write, output included (RLIMIT_FSIZE)."
    )
    max_output_chars: int = Field(8000, ge=100, description="stdout and stderr are each cut to this length.")
    pool_size: int = Field(2, ge=1, le=64, description="Warm worker processes (runs in parallel).")
    namespaces: bool = Field(
        True,
        description="Isolate runs with kernel namespaces and seccomp where the kernel allows it (False: "
        "resource limits and Python-level guards only; for debugging).",
    )
    require_isolation: bool = Field(
        False,
        description="Raise ToolInfrastructureError instead of warning when the kernel refuses an isolation "
        "layer.",
    )


@dataclass
class ExecResult:
    """What one run did."""

    stdout: str
    stderr: str
    exit_code: int  # negative: killed by that signal
    exception: str = ""  # type name of an uncaught exception
    timed_out: bool = False
    signal: str = ""
    duration_s: float = 0.0
    stdout_truncated: int = 0  # bytes left out
    stderr_truncated: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def format_exec_result(r: ExecResult) -> str:
    """The text an agent sees for a run."""
    if r.timed_out:
        status = "timed out (killed)"
    elif r.signal:
        status = f"killed by {r.signal}"
    else:
        status = f"exit code {r.exit_code}" + (f" ({r.exception})" if r.exception else "")
    parts = [status]
    for name, text, cut in (
        ("stdout", r.stdout, r.stdout_truncated),
        ("stderr", r.stderr, r.stderr_truncated),
    ):
        if text or cut:
            parts.append(f"{name}:\n{text}" + (f"\n...[truncated {cut} bytes]" if cut else ""))
    return "\n".join(parts)


#: the isolation layers a worker reports (see ``_sandbox_worker.py``)
LAYERS = (
    "user_namespace",
    "unprivileged",
    "mount_namespace",
    "pid_namespace",
    "network_namespace",
    "seccomp",
)


class _Worker:
    def __init__(self, config: SandboxConfig, flags: Sequence[str] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")}
        limits = {"cpu_s": config.cpu_s, "memory_mb": config.memory_mb, "file_mb": config.file_mb}
        args = [sys.executable, "-I", _WORKER, "--limits", json.dumps(limits), *flags]
        args += [] if config.namespaces else ["--no-namespaces"]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )
        try:
            hello = self._read_line(30.0)
        except ToolInfrastructureError:
            raise ToolInfrastructureError(
                f"the sandbox worker did not start ({sys.executable} -I {_WORKER})"
            ) from None
        self.mode: str = hello.get("mode", "none")
        self.layers: dict[str, bool] = {k: bool(hello.get("layers", {}).get(k)) for k in LAYERS}

    def _read_line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.kill()
                raise ToolInfrastructureError("the sandbox worker did not answer in time; it was restarted")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.kill()
                raise ToolInfrastructureError("the sandbox worker died")
            buf += chunk
        try:
            return json.loads(buf)
        except ValueError:
            self.kill()
            raise ToolInfrastructureError("the sandbox worker sent a malformed reply") from None

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            raise ToolInfrastructureError("the sandbox worker died") from None
        return self._read_line(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class PythonSandbox:
    """Runs Python code in forked children of warm worker processes. Thread-safe; ``run_many`` runs in parallel
    across the pool. Workers start on first use and stop with :meth:`close` (or at interpreter exit)."""

    def __init__(self, config: SandboxConfig | None = None, *, pid_per_fork: bool = False) -> None:
        """``pid_per_fork=True`` forces the path unprivileged hosts take (each run forks once more to be pid 1 of
        its PID namespace) where root would give runs their namespace from the worker; for tests."""
        self.config = config or SandboxConfig()
        self._flags = ("--pid-per-fork",) if pid_per_fork else ()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._started = 0
        self._lock = threading.Lock()
        self._layers: dict[str, bool] | None = None

    @property
    def isolation(self) -> dict[str, bool]:
        """Which isolation layers the kernel granted on this host (starts the pool if needed): ``user_namespace``,
        ``unprivileged`` (the code runs without root's rights), ``mount_namespace`` (private read-only root),
        ``pid_namespace``, ``network_namespace``, ``seccomp``."""
        if self._layers is None:
            self._release(self._acquire())
        assert self._layers is not None
        return dict(self._layers)

    def _new_worker(self) -> _Worker:
        worker = _Worker(self.config, self._flags)
        if self._layers is None:
            self._layers = worker.layers
            missing = [k for k, v in worker.layers.items() if not v]
            if missing and self.config.namespaces:
                msg = (
                    f"the kernel refused these sandbox isolation layers: {', '.join(missing)}; the sandbox "
                    "falls back to Python-level guards for them (see the README's security section)"
                )
                if self.config.require_isolation:
                    worker.kill()
                    self._layers = None
                    raise ToolInfrastructureError(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=4)
        return worker

    def __reduce__(self):
        return (shared_sandbox, (self.config,))

    def _acquire(self) -> _Worker:
        with self._lock:  # start the whole pool at once: idle workers fork their next child ahead of time
            while self._started < self.config.pool_size:
                self._idle.put(self._new_worker())
                self._started += 1
        return self._idle.get()

    def _release(self, worker: _Worker) -> None:
        if worker.alive():
            self._idle.put(worker)
        else:
            with self._lock:
                self._started -= 1

    def run(
        self,
        code: str,
        *,
        stdin: str = "",
        timeout_s: float | None = None,
        max_output_chars: int | None = None,
    ) -> ExecResult:
        """Run ``code`` (as ``__main__``) with ``stdin``; never raises for anything the code does.

        If the worker dies during the run, the run is retried once on a fresh worker; if that worker dies too
        (the code is what kills it), the result says so. A worker that cannot start raises
        :class:`~agentr1_gym.errors.ToolInfrastructureError`."""
        cfg = self.config
        request = {
            "code": code,
            "stdin": stdin,
            "timeout_s": timeout_s or cfg.timeout_s,
            "max_output_chars": max_output_chars or cfg.max_output_chars,
        }
        reply: dict[str, Any] | None = None
        for _attempt in range(2):
            worker = self._acquire()
            try:
                reply = worker.call(request, timeout=float(request["timeout_s"]) + 10.0)
                break
            except ToolInfrastructureError:
                reply = None
            finally:
                self._release(worker)
        if reply is None:
            return ExecResult(
                stdout="",
                stderr="the sandbox process running this code died (it was replaced)",
                exit_code=-9,
                signal="SIGKILL",
                exception="",
            )
        if "worker_error" in reply:
            raise ToolInfrastructureError(f"the sandbox failed: {reply['worker_error']}")
        return ExecResult(**reply)

    def run_many(self, codes: Sequence[str]) -> list[ExecResult]:
        """Run several programs, up to ``pool_size`` at a time."""
        if len(codes) <= 1:
            return [self.run(c) for c in codes]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(codes), self.config.pool_size)) as pool:
            return list(pool.map(self.run, codes))

    def close(self) -> None:
        with self._lock:
            while not self._idle.empty():
                self._idle.get_nowait().kill()
            self._started = 0


def shared_sandbox(config: SandboxConfig | None = None) -> PythonSandbox:
    """The process-wide sandbox for a config (its worker pool is shared by every env in the process)."""
    config = config or SandboxConfig()
    return shared("sandbox", config, lambda: PythonSandbox(config))


class PythonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(
        ..., min_length=1, max_length=20_000, description="Python code to run; print what you need."
    )


class PythonTool(Tool):
    """Runs Python code in the sandbox and reports exit status, stdout and stderr. ``metadata`` carries
    ``exit_code``, ``exception``, ``timed_out`` and the ``code``."""

    name: ClassVar[str] = "python"
    description: ClassVar[str] = (
        "Run a Python program in a sandbox (no network, no input, 5 s) and see its output."
    )
    Args = PythonArgs

    def __init__(self, sandbox: PythonSandbox | None = None) -> None:
        self.sandbox = sandbox or shared_sandbox()

    def execute(self, args: BaseModel) -> ToolResult:
        return self.execute_batch([args])[0]

    def execute_batch(self, batch: Sequence[BaseModel]) -> list[ToolResult]:
        results = self.sandbox.run_many([a.code for a in batch])  # type: ignore[attr-defined]
        return [
            ToolResult(
                format_exec_result(r),
                success=r.ok,
                metadata={
                    "exit_code": r.exit_code,
                    "exception": r.exception,
                    "timed_out": r.timed_out,
                    "code": a.code,
                },
            )  # type: ignore[attr-defined]
            for a, r in zip(batch, results)
        ]
