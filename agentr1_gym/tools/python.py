"""A sandboxed Python execution tool with a pool of warm workers.

:class:`PythonSandbox` runs model-written code in a separate process with a wall-clock timeout, CPU-time, memory,
file-size, open-file and process limits, no network, and a private temporary working directory that is removed
afterwards; stdout/stderr are captured and cut to a budget; the exit status, the signal and the exception type are
reported. Each call is a ``fork`` of a warm, stdlib-only worker process (see ``_sandbox_worker.py``), so a call
costs milliseconds instead of an interpreter start, and no state survives from one call to the next.

What is isolated, and how:

* **network**: the workers run in their own network namespace (no interface but a down loopback) where the kernel
  allows it (``SandboxConfig.namespaces``); otherwise a Python-level guard makes socket creation raise
  ``PermissionError``;
* **other processes**: with ``pid_namespace=True`` each run gets a new PID namespace (the code cannot see or
  signal any other process); otherwise ``os.kill``/``killpg`` of other processes are blocked by a guard.
  ``fork``/``exec``/``subprocess`` are blocked by a guard; runs drop root to ``nobody`` when the Python
  installation is readable by it, and then ``RLIMIT_NPROC=0`` stops forks (ctypes ones too) for real;
* **resources**: ``RLIMIT_CPU``, ``RLIMIT_AS`` (memory), ``RLIMIT_FSIZE`` (also bounds printed output),
  ``RLIMIT_NOFILE``; the wall-clock timeout kills the whole process group;
* **files**: ``open``/``os.open`` and the path functions of ``os`` refuse paths outside the temporary
  directory (so reading ``/etc/passwd`` or writing elsewhere fails). This guard is Python-level: code that uses
  ``ctypes`` can get around it; the filesystem itself is not a separate mount.

Use a container or VM in front of it for hostile code at scale; for RL on code tasks it stops the accidents
(infinite loops, fork bombs, huge allocations, stray writes) that a model produces.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.core import Tool, ToolResult
from agentr1_gym.errors import ToolInfrastructureError

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
        True, description="Run workers in their own network namespace where the kernel allows it."
    )
    pid_namespace: bool = Field(
        False,
        description="Also run each program in a new PID namespace (it cannot see or signal any other "
        "process; costs one more fork per run, about 2 ms here).",
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


class _Worker:
    def __init__(self, namespaces: bool, pid_namespace: bool) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")}
        args = [sys.executable, "-I", _WORKER] + ([] if namespaces else ["--no-namespaces"])
        args += ["--pid-namespace"] if pid_namespace else []
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self.kill()
            raise ToolInfrastructureError("the sandbox worker died; it will be restarted") from None
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
                raise ToolInfrastructureError("the sandbox worker died; it will be restarted")
            buf += chunk
        return json.loads(buf)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


class PythonSandbox:
    """Runs Python code in forked children of warm worker processes. Thread-safe; ``run_many`` runs in parallel
    across the pool. Workers start on first use and stop with :meth:`close` (or at interpreter exit)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._started = 0
        self._lock = threading.Lock()

    def __reduce__(self):
        return (shared_sandbox, (self.config,))

    def _acquire(self) -> _Worker:
        with self._lock:  # start the whole pool at once: idle workers fork their next child ahead of time
            while self._started < self.config.pool_size:
                self._started += 1
                self._idle.put(_Worker(self.config.namespaces, self.config.pid_namespace))
        return self._idle.get()

    def _release(self, worker: _Worker) -> None:
        if worker.alive():
            self._idle.put(worker)
        else:
            with self._lock:
                self._started -= 1

    def run(self, code: str, *, stdin: str = "", timeout_s: float | None = None) -> ExecResult:
        """Run ``code`` (as ``__main__``) with ``stdin``; never raises for anything the code does."""
        cfg = self.config
        request = {
            "code": code,
            "stdin": stdin,
            "timeout_s": timeout_s or cfg.timeout_s,
            "cpu_s": cfg.cpu_s,
            "memory_mb": cfg.memory_mb,
            "file_mb": cfg.file_mb,
            "max_output_chars": cfg.max_output_chars,
            "pid_namespace": cfg.pid_namespace,
        }
        worker = self._acquire()
        try:
            reply = worker.call(request, timeout=float(request["timeout_s"]) + 10.0)
        finally:
            self._release(worker)
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


_SHARED: dict[SandboxConfig, PythonSandbox] = {}
_SHARED_LOCK = threading.Lock()


def shared_sandbox(config: SandboxConfig | None = None) -> PythonSandbox:
    """The process-wide sandbox for a config (its worker pool is shared by every env in the process)."""
    config = config or SandboxConfig()
    with _SHARED_LOCK:
        if config not in _SHARED:
            _SHARED[config] = PythonSandbox(config)
        return _SHARED[config]


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
