"""A sandboxed Python execution tool with a pool of warm workers.

:class:`PythonSandbox` runs model-written code in a separate, kernel-isolated process with a wall-clock timeout,
CPU-time, memory, file-size, disk and open-file limits, and reports stdout/stderr (cut to a budget), the exit
status, the signal and the exception type. Each call runs in a child forked, ahead of time, from a zygote process
that never held a request (see ``_sandbox_worker.py``), so a call costs milliseconds instead of an interpreter
start, and nothing of one run (its code, its result, a peer episode's code) can be read by the next.

What is enforced, and by what (the README's security section has the table per kind of host):

* **identity**: a user namespace maps the run to ``nobody`` (when the caller is root) or to the caller's own
  unprivileged uid, with every capability dropped; as root without user namespaces, a real ``setresuid`` to
  ``nobody``. Code never runs as root, in any mode;
* **files**: a private mount namespace whose root is read-only and holds only ``/usr`` and the Python
  installation, with every site-packages directory, this project's packages and its cache covered by an empty
  read-only tmpfs (so a task's hidden tests and reference solutions, shipped as package data, are not there),
  ``/dev/null|zero|urandom|random`` and a ``/tmp`` that is a fresh tmpfs of ``disk_mb`` (gone with the run):
  no ``/etc``, ``/proc``, ``/home``, ``/root``, ``/dev/shm`` or host ``/tmp``;
* **processes**: a PID namespace per run (nothing outside is visible or signallable; when the run ends the kernel
  kills everything in it); a seccomp filter refuses new processes (threads are fine), ``execve``, ``ptrace`` and
  cross-process memory access, ``setsid``/``setpgid``, mounts, namespaces, memory files and System V shared
  memory, keyrings, BPF and other kernel attack surface;
* **network**: a network namespace with no usable interface;
* **resources**: ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE`` (also bounds printed output), ``RLIMIT_NOFILE``,
  ``RLIMIT_NPROC`` (threads), the ``/tmp`` tmpfs size and inode count; the wall-clock timeout kills the run's
  whole process group.

**Fail closed.** Where the kernel refuses a layer (a default Docker container refuses namespaces, for example), the
default ``SandboxConfig(isolation="kernel")`` refuses to run code and raises
:class:`~agentr1_gym.errors.ToolInfrastructureError` naming the missing layers. ``isolation="best_effort"`` runs
with the layers the host grants (warning once) and ``isolation="off"`` with none; both still drop root to
``nobody`` and keep the resource limits, but the files the run's user can read on the host (installed packages
included) are readable by the code, so use them only for code you trust or for debugging.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import select
import site
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentr1_gym.cache import cache_dir, shared
from agentr1_gym.errors import ToolInfrastructureError
from agentr1_gym.tools.base import Tool, ToolResult

__all__ = [
    "REQUIRED_LAYERS",
    "ExecResult",
    "PythonSandbox",
    "PythonTool",
    "SandboxConfig",
    "format_exec_result",
    "shared_sandbox",
]

_WORKER = str(Path(__file__).with_name("_sandbox_worker.py"))


class SandboxConfig(BaseModel):
    """Limits of one code run, and how much isolation the sandbox insists on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit per run.")
    cpu_s: int = Field(5, ge=1, description="CPU-seconds limit per run (RLIMIT_CPU).")
    memory_mb: int = Field(1024, ge=64, description="Address-space limit (RLIMIT_AS).")
    file_mb: int = Field(
        16, ge=1, description="Largest file the code may write, output included (RLIMIT_FSIZE)."
    )
    disk_mb: int = Field(
        64, ge=1, le=65536, description="Size of the run's /tmp (a tmpfs: RAM, freed when the run ends)."
    )
    max_output_chars: int = Field(8000, ge=100, description="stdout and stderr are each cut to this length.")
    pool_size: int = Field(2, ge=1, le=64, description="Warm worker processes (runs in parallel).")
    isolation: Literal["kernel", "best_effort", "off"] = Field(
        "kernel",
        description="'kernel': refuse to run code unless every layer in REQUIRED_LAYERS holds (the error says "
        "which is missing); 'best_effort': run with the layers the host grants, warning once; 'off': no "
        "namespaces (rlimits, seccomp where available and Python-level guards; for debugging). Code never runs "
        "as root in any mode.",
    )
    packages: tuple[str, ...] = Field(
        (),
        description="Names in site-packages that runs may import (e.g. ('numpy', 'numpy.libs')); everything "
        "else installed is hidden from runs. This project's own packages cannot be exposed.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """``namespaces=False`` and ``require_isolation=`` (before 0.2) map onto ``isolation``."""
        if not isinstance(data, dict) or not {"namespaces", "require_isolation"} & set(data):
            return data
        data = dict(data)
        namespaces = data.pop("namespaces", True)
        strict = data.pop("require_isolation", None)
        warnings.warn(
            "SandboxConfig(namespaces=..., require_isolation=...) is now SandboxConfig(isolation='kernel' | "
            "'best_effort' | 'off')",
            DeprecationWarning,
            stacklevel=4,
        )
        if "isolation" not in data:
            data["isolation"] = "off" if not namespaces else ("best_effort" if strict is False else "kernel")
        return data

    @field_validator("packages")
    @classmethod
    def _plain_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name or "/" in name or name in (".", "..") or name.startswith("agentr1"):
                raise ValueError(
                    f"packages holds names inside site-packages such as 'numpy'; {name!r} is not one (or is "
                    "this project's own, which holds hidden test data)"
                )
        return names


#: the layers ``isolation="kernel"`` requires (``user_namespace`` is a means, not a protection: as root without
#: it, plain namespaces and a real drop to ``nobody`` give the same)
REQUIRED_LAYERS = ("unprivileged", "mount_namespace", "pid_namespace", "network_namespace", "seccomp")


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


def hidden_paths() -> list[str]:
    """What runs must not see although it lies inside the Python installation the sandbox mounts: every
    site-packages directory and other non-stdlib ``sys.path`` entry, this project's packages and its cache. The
    worker covers those inside its mounts with an empty tmpfs (paths elsewhere are not mounted at all)."""
    paths = {p for p in sys.path if p}
    paths.update(site.getsitepackages())
    with contextlib.suppress(Exception):
        paths.add(site.getusersitepackages())
    config = sysconfig.get_paths()
    paths.update(config[k] for k in ("purelib", "platlib"))
    for name in ("agentr1_gym", "agentr1_trl", "agentr1_skyrl", "agentr1_verl", "agentr1_verifiers"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                paths.add(os.path.dirname(spec.origin))
    paths.add(str(cache_dir()))
    keep = {config["stdlib"], config["platstdlib"], os.path.dirname(os.__file__)}
    keep.update(p for p in sys.path if os.path.basename(p) == "lib-dynload")
    stdlib = {os.path.realpath(p) for p in keep}
    out = set()
    for p in paths:
        real = os.path.realpath(p)
        if not os.path.exists(real) or real == "/":
            continue
        if any(s == real or s.startswith(real + "/") for s in stdlib):
            continue  # the standard library itself (or a directory holding it) stays visible
        out.add(real)
    return sorted(out)


class _Worker:
    def __init__(self, config: SandboxConfig, flags: Sequence[str] = ()) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")}
        limits = {
            "cpu_s": config.cpu_s,
            "memory_mb": config.memory_mb,
            "file_mb": config.file_mb,
            "disk_mb": config.disk_mb,
        }
        args = [sys.executable, "-I", _WORKER, "--limits", json.dumps(limits), *flags]
        args += [] if config.isolation != "off" else ["--no-namespaces"]
        for path in hidden_paths():
            args += ["--hide", path]
        for name in config.packages:
            args += ["--expose", name]
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
        self.generation = 0

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

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker so that it cleans up after itself (SIGTERM); SIGKILL if it does not."""
        with contextlib.suppress(OSError):
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        self.kill()

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


_OPEN: weakref.WeakSet[PythonSandbox] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At interpreter exit every worker stops and removes its directory."""
    for sandbox in list(_OPEN):
        sandbox.close()


class PythonSandbox:
    """Runs Python code in forked children of warm worker processes. Thread-safe; ``run_many`` runs in parallel
    across the pool. Workers start on demand (at most ``pool_size``) and stop with :meth:`close` or at
    interpreter exit; a worker that dies is replaced by the next caller that needs one, so the pool neither
    shrinks nor leaves callers waiting on a worker that will never come back."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        pid_per_fork: bool = False,
        user_namespace: bool = True,
    ) -> None:
        """``pid_per_fork=True`` forces the path unprivileged hosts take (each run forks once more to be pid 1 of
        its PID namespace) where root would give runs their namespace from the zygote; ``user_namespace=False``
        forces the path root takes where user namespaces are refused (plain namespaces and a real drop to
        ``nobody``). Both are for tests."""
        self.config = config or SandboxConfig()
        self._flags = (("--pid-per-fork",) if pid_per_fork else ()) + (
            () if user_namespace else ("--no-user-namespace",)
        )
        self._idle: list[_Worker] = []
        self._started = 0  # workers alive: idle, busy or starting
        self._generation = 0  # bumped by close(): busy workers of an older generation stop when released
        self._cond = threading.Condition()
        self._layers: dict[str, bool] | None = None
        self._warned = False
        _OPEN.add(self)

    @property
    def isolation(self) -> dict[str, bool]:
        """Which isolation layers the kernel granted on this host (starts a worker if needed): ``user_namespace``,
        ``unprivileged`` (the code runs without root's rights), ``mount_namespace`` (private read-only root),
        ``pid_namespace``, ``network_namespace``, ``seccomp``."""
        if self._layers is None:
            self._release(self._acquire())
        assert self._layers is not None
        return dict(self._layers)

    def _new_worker(self) -> _Worker:
        worker = _Worker(self.config, self._flags)
        missing = [k for k in REQUIRED_LAYERS if not worker.layers[k]]
        if missing and self.config.isolation == "kernel":
            worker.kill()
            raise ToolInfrastructureError(
                f"the kernel refused these sandbox isolation layers: {', '.join(missing)}; refusing to run "
                "untrusted code without them. Allow namespaces on this host (the README's security section says "
                "how, for Docker too), or accept a weaker sandbox explicitly: SandboxConfig(isolation="
                "'best_effort') (e.g. gym.make(..., sandbox={'isolation': 'best_effort'})), in which code can read "
                "whatever the host lets 'nobody' read"
            )
        self._layers = worker.layers
        if missing and self.config.isolation == "best_effort" and not self._warned:
            self._warned = True
            warnings.warn(
                f"the kernel refused these sandbox isolation layers: {', '.join(missing)}; running code with "
                "rlimits, a drop to an unprivileged user and Python-level guards for them (isolation="
                "'best_effort'; see the README's security section)",
                RuntimeWarning,
                stacklevel=4,
            )
        worker.generation = self._generation
        return worker

    def __reduce__(self):
        return (shared_sandbox, (self.config,))

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._idle:
                    return self._idle.pop()
                if self._started < self.config.pool_size:
                    self._started += 1
                    break
                self._cond.wait()
        try:  # start a worker outside the lock (it takes tens of ms); whoever waits starts the replacement
            return self._new_worker()
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker) -> None:
        stop = False
        with self._cond:
            if worker.alive() and worker.generation == self._generation:
                self._idle.append(worker)
            else:
                self._started -= 1
                stop = worker.alive()
            self._cond.notify()
        if stop:
            worker.close()

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
        (the code is what kills it), the result says so. A worker that cannot start, or a host that refuses a
        required isolation layer, raises :class:`~agentr1_gym.errors.ToolInfrastructureError`."""
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
        """Stop every worker (idle ones now, busy ones when their run ends); each removes its own directory.
        The sandbox stays usable: the next run starts fresh workers."""
        with self._cond:
            self._generation += 1
            idle, self._idle = self._idle, []
            self._started -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.close()


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
