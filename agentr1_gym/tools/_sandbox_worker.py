"""Sandbox worker: a small, long-lived stdlib-only process that runs each request in a fresh forked child.

Started by :class:`agentr1_gym.tools.python.PythonSandbox` as ``python -I <this file>``. At start it leaves the
host's network namespace when the kernel allows it (every child inherits a namespace with no usable interface).
It reads one JSON request per line on stdin and writes one JSON result per line on stdout. The worker itself never
executes user code: every request runs in a child forked from it (milliseconds, no interpreter start), which

* starts a new session (so its whole process group can be killed);
* optionally enters a new PID namespace (it cannot see or signal any process outside);
* drops root privileges to ``nobody`` when the Python installation is readable by it (then ``RLIMIT_NPROC``
  really stops forks and root-only files stay closed);
* chdirs into a private temporary directory (removed afterwards) that is also HOME and TMPDIR;
* sets resource limits: CPU seconds, address space, file size, open files, processes;
* installs Python-level guards (fork/exec/subprocess/kill, sockets when there is no network namespace, file
  access outside the temporary directory). These guards are not a security boundary (ctypes can bypass them);
  the namespaces, privileges and resource limits are.

The worker enforces the wall-clock timeout by killing the child's process group.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import json
import os
import resource
import select
import shutil
import signal
import socket  # noqa: F401
import subprocess
import sys
import tempfile
import time
import traceback

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
# Modules user code commonly imports, loaded once here: forked children get them for free, and they stay
# importable after the child drops privileges (when the Python installation is not readable by nobody).
PRELOAD = (
    "bisect",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "doctest",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "typing",
    "unittest",
)
for _name in PRELOAD:
    __import__(_name)

#: set by main(): whether the worker left the host's network namespace (then children have no network)
NET_ISOLATED = False


def _try_unshare(flags: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(flags) == 0
    except (OSError, AttributeError):
        return False


def _guard(workdir: str, block_network: bool) -> None:
    """Python-level guards; see the module docstring for what they are and are not."""

    def _denied(what: str):
        def deny(*args, **kwargs):
            raise PermissionError(f"{what} is not allowed in the sandbox")

        return deny

    for name in (
        "fork",
        "forkpty",
        "system",
        "popen",
        "execv",
        "execve",
        "execl",
        "execle",
        "execlp",
        "execlpe",
        "execvp",
        "execvpe",
        "spawnl",
        "spawnle",
        "spawnlp",
        "spawnlpe",
        "spawnv",
        "spawnve",
        "spawnvp",
        "spawnvpe",
        "posix_spawn",
        "posix_spawnp",
        "setsid",
        "chroot",
        "setuid",
        "setgid",
    ):
        if hasattr(os, name):
            setattr(os, name, _denied(f"os.{name}"))
    subprocess.Popen = _denied("subprocess")  # type: ignore[misc,assignment]
    own = os.getpid()
    real_kill, real_killpg = os.kill, os.killpg

    def kill(pid: int, sig: int) -> None:
        if pid not in (own, 0):
            raise PermissionError("signalling other processes is not allowed in the sandbox")
        real_kill(pid, sig)

    os.kill = kill
    os.killpg = lambda pgid, sig: (_ for _ in ()).throw(
        PermissionError("killpg is not allowed in the sandbox")
    )
    del real_killpg

    root = os.path.realpath(workdir)

    def inside(path) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor
        full = os.path.realpath(os.path.join(root, os.fsdecode(path)))
        return full == root or full.startswith(root + os.sep) or full in ("/dev/null", "/dev/urandom")

    real_open, real_os_open = builtins.open, os.open

    def open_(file, *args, **kwargs):
        if not inside(file):
            raise PermissionError(f"access outside the sandbox directory is not allowed: {file!r}")
        return real_open(file, *args, **kwargs)

    def os_open(path, *args, **kwargs):
        if not inside(path):
            raise PermissionError(f"access outside the sandbox directory is not allowed: {path!r}")
        return real_os_open(path, *args, **kwargs)

    builtins.open = io.open = open_  # type: ignore[assignment]
    os.open = os_open
    for name in (
        "remove",
        "unlink",
        "rmdir",
        "mkdir",
        "makedirs",
        "rename",
        "replace",
        "chmod",
        "chown",
        "symlink",
        "link",
        "truncate",
        "listdir",
        "scandir",
    ):
        fn = getattr(os, name, None)
        if fn is None:
            continue

        def wrapped(path=".", *args, _fn=fn, _name=name, **kwargs):
            if not inside(path) or (args and isinstance(args[0], (str, bytes)) and not inside(args[0])):
                raise PermissionError(f"os.{_name} outside the sandbox directory is not allowed")
            return _fn(path, *args, **kwargs)

        setattr(os, name, wrapped)
    if block_network:
        import socket

        class _NoSocket:
            def __init__(self, *a, **k):
                raise PermissionError("network access is disabled in the sandbox")

        socket.socket = _NoSocket  # type: ignore[misc,assignment]
        socket.create_connection = _denied("network access")  # type: ignore[assignment]
        socket.socketpair = _denied("network access")  # type: ignore[assignment]


def _limits(req: dict) -> None:
    cpu = int(req["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(req["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(req["file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:  # no new processes (enforced for non-root users and inside a user namespace)
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ValueError, OSError):
        pass


def _run_code(req: dict, workdir: str, status_fd: int, namespaced: bool) -> None:
    """In the executing process: descriptors, limits, guards, then the code. Never returns."""
    code = 1
    exc_name = ""
    try:
        os.chdir(workdir)
        for var in list(os.environ):
            if var not in ("PATH", "LANG", "LC_ALL"):
                del os.environ[var]
        os.environ.update(HOME=workdir, TMPDIR=workdir, PYTHONHASHSEED="0")
        if req.get("stdin"):
            with open(os.path.join(workdir, ".stdin"), "w", encoding="utf-8") as f:
                f.write(req["stdin"])
            fd_in = os.open(os.path.join(workdir, ".stdin"), os.O_RDONLY)
        else:
            fd_in = os.open(os.devnull, os.O_RDONLY)
        fd_out = os.open(os.path.join(workdir, ".stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        fd_err = os.open(os.path.join(workdir, ".stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for src, dst in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
            os.dup2(src, dst)
            os.close(src)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
        _limits(req)

        def _cpu_exceeded(signum, frame):
            raise TimeoutError("CPU time limit exceeded")

        signal.signal(signal.SIGXCPU, _cpu_exceeded)
        _guard(workdir, block_network=not namespaced)
        compiled = compile(req["code"], "<sandbox>", "exec")
        exec(compiled, {"__name__": "__main__", "__builtins__": __builtins__})
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException as e:
        exc_name = type(e).__name__
        try:  # the user's frames only, not this file's
            frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != __file__]
            lines = (["Traceback (most recent call last):\n"] if frames else []) + traceback.format_list(
                frames
            )
            sys.stderr.write("".join(lines + traceback.format_exception_only(type(e), e)))
        except BaseException:
            pass
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    try:
        os.write(status_fd, json.dumps({"exception": exc_name}).encode()[:4000])
    except OSError:
        pass
    os._exit(code & 0xFF)


def _world_traversable(path: str) -> bool:
    """Whether an unprivileged user can reach ``path`` (every directory on the way is o+x)."""
    path = os.path.realpath(path)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


DROP_PRIVILEGES = os.geteuid() == 0 and _world_traversable(sys.prefix) and _world_traversable(sys.base_prefix)


def _wait_and_run(req_r: int, workdir: str, status_w: int) -> None:
    """Block until the request arrives (or the worker goes away), then run it. Never returns."""
    chunks = []
    while chunk := os.read(req_r, 1 << 16):
        chunks.append(chunk)
    os.close(req_r)
    if not chunks:  # the worker is shutting down or replacing this child
        os._exit(0)
    _run_code(json.loads(b"".join(chunks)), workdir, status_w, namespaced=NET_ISOLATED)


def _child(req_r: int, workdir: str, status_w: int, pid_namespace: bool) -> None:
    """The pre-forked child: session, PID namespace, privileges; then wait for the request and run it (as the
    PID namespace's first process's child when there is one)."""
    os.setsid()
    isolated_pids = pid_namespace and _try_unshare(CLONE_NEWPID)
    if (
        DROP_PRIVILEGES
    ):  # run as nobody: RLIMIT_NPROC is not enforced for root, and root-only files stay closed
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        except OSError:
            pass
    if not isolated_pids:
        _wait_and_run(req_r, workdir, status_w)
    pid = os.fork()  # the first process in a new PID namespace is its init
    if pid == 0:
        _wait_and_run(req_r, workdir, status_w)
    os.close(req_r)
    os.close(status_w)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status))


class Prepared:
    """A child forked ahead of the next request (so the fork is off the caller's critical path)."""

    def __init__(self, pid_namespace: bool) -> None:
        self.workdir = tempfile.mkdtemp(prefix="agentr1-sbx-")
        os.chmod(self.workdir, 0o777)  # the child may run as nobody
        req_r, self.req_w = os.pipe()
        self.status_r, status_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.req_w)
            os.close(self.status_r)
            try:
                _child(req_r, self.workdir, status_w, pid_namespace)
            finally:
                os._exit(70)
        os.close(req_r)
        os.close(status_w)

    def cancel(self) -> None:
        os.close(self.req_w)  # the child reads EOF and exits
        os.close(self.status_r)
        os.waitpid(self.pid, 0)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _read_capped(path: str, limit: int) -> tuple[str, int]:
    """The first ``limit`` characters of a file and how many bytes were left out."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            data = f.read(limit * 4)
    except OSError:
        return "", 0
    text = data.decode("utf-8", errors="replace")[:limit]
    return text, max(0, size - len(text.encode("utf-8", errors="replace")))


_PENDING_CLEANUP: list[str] = []


def handle(req: dict, prep: Prepared) -> dict:
    """Send ``req`` to the prepared child, wait for it (killing its group at the deadline), collect the result."""
    start = time.monotonic()
    pid, workdir, status_r = prep.pid, prep.workdir, prep.status_r
    payload = json.dumps(req).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(prep.req_w, view) :]
    except BrokenPipeError:
        pass  # the child died before reading; its status tells
    os.close(prep.req_w)
    timed_out = False
    deadline = start + float(req["timeout_s"])
    info = b""
    while True:  # the status pipe reaches EOF when the code's process is gone (or its status arrives)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        if select.select([status_r], [], [], remaining)[0]:
            chunk = os.read(status_r, 4096)
            info += chunk
            if not chunk or info.endswith(b"}"):
                break
    if timed_out:
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
    _, status = os.waitpid(pid, 0)
    try:  # a namespaced run's processes die with its init; a guarded run's group is killed here
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    duration = time.monotonic() - start
    os.close(status_r)
    try:
        exc = json.loads(info.decode() or "{}").get("exception", "")
    except ValueError:
        exc = ""
    if os.WIFSIGNALED(status):
        exit_code, sig = -os.WTERMSIG(status), signal.Signals(os.WTERMSIG(status)).name
    else:
        exit_code = os.WEXITSTATUS(status)
        sig = signal.Signals(exit_code - 128).name if exit_code > 128 and exit_code - 128 < 65 else ""
        if sig:
            exit_code = -(exit_code - 128)
    limit = int(req["max_output_chars"])
    stdout, out_cut = _read_capped(os.path.join(workdir, ".stdout"), limit)
    stderr, err_cut = _read_capped(os.path.join(workdir, ".stderr"), limit)
    _PENDING_CLEANUP.append(workdir)  # removed after the reply is sent, off the caller's critical path
    return {
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": out_cut,
        "stderr_truncated": err_cut,
        "exit_code": exit_code,
        "signal": sig,
        "exception": exc,
        "timed_out": timed_out,
        "duration_s": duration,
    }


def main() -> None:
    global NET_ISOLATED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "--no-namespaces" not in sys.argv:  # the worker needs no network: leave it once, children inherit that
        NET_ISOLATED = _try_unshare(CLONE_NEWNET) or _try_unshare(CLONE_NEWUSER | CLONE_NEWNET)
    pid_namespace = "--pid-namespace" in sys.argv
    import gc

    gc.freeze()  # forked children then do not touch (copy) the worker's objects when they collect garbage
    out = sys.stdout
    prep = Prepared(pid_namespace)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = handle(json.loads(line), prep)
        except Exception as e:
            result = {"worker_error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(result) + "\n")
        out.flush()
        prep = Prepared(pid_namespace)  # fork the next child while the caller reads this result
        while _PENDING_CLEANUP:
            shutil.rmtree(_PENDING_CLEANUP.pop(), ignore_errors=True)
    prep.cancel()


if __name__ == "__main__":
    main()
