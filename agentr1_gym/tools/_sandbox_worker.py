"""Sandbox worker: a small, long-lived stdlib-only process that runs each request in a fresh, kernel-isolated child.

Started by :class:`agentr1_gym.tools.python.PythonSandbox` as ``python -I <this file>``; it writes one JSON line
saying which isolation layers the kernel granted, then reads one JSON request per line on stdin and writes one
JSON result per line on stdout. The worker never executes user code. Ahead of each request it forks a child
``C`` (off the caller's critical path) that builds the isolation, and ``C`` forks the process ``I`` that will run
the code:

``C`` (trusted code, forked from the worker)
    drops supplementary groups, then ``unshare(CLONE_NEWUSER | NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS)``; the
    worker writes its uid/gid maps (``0 -> 65534``, the unprivileged ``nobody``, when the worker is root; ``0 ->``
    the caller's own uid otherwise). In the new mount namespace it bind-mounts a private root read-only (only
    ``/usr``, the Python installation, ``/dev/null|zero|urandom|random`` and a writable ``/tmp`` that is the run's
    own directory; no ``/proc``, ``/etc``, ``/home``, ``/dev/shm`` or host ``/tmp``), ``pivot_root``\\ s into it,
    detaches the old root, and becomes the mapped user. Without user namespaces but as root, it builds the same
    view with plain namespaces and then really drops to uid/gid 65534.
``I`` (pid 1 of the new PID namespace)
    drops every capability, sets resource limits (CPU seconds, address space, file size, open files, threads),
    loads a seccomp filter (libseccomp) that refuses new processes (``fork``/``vfork``/``clone`` without
    ``CLONE_THREAD``), ``execve``, ``ptrace`` and cross-process memory access, mounts and namespaces, ``setsid`` /
    ``setpgid``, kernel keyrings, BPF, ``perf_event_open``, ``userfaultfd``, ``io_uring``, module and clock
    changes; then waits for the request and runs it. When ``I`` exits, the kernel kills whatever else lives in
    its PID namespace, so nothing survives a run.

Completion is the exit of ``I`` as reported by ``C`` (trusted), never something the code can write. stdout and
stderr are memory files held by the worker, so the code cannot redirect what the worker reads. On the wall-clock
deadline the worker kills the run's whole process group (the code cannot leave it: ``setsid``/``setpgid`` are
filtered). Where the kernel refuses a layer, the worker says so in its first line and falls back to Python-level
guards for what is missing (see :class:`agentr1_gym.tools.python.PythonSandbox.isolation`).
"""

from __future__ import annotations

import builtins
import ctypes
import ctypes.util
import errno
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_THREAD = 0x10000000, 0x20000000, 0x40000000, 0x00010000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 4096, 16384, 1 << 18, 2
NOBODY = 65534
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
# Modules user code commonly imports, loaded once here: forked children get them for free.
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

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(
        _libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(), flags, None),
        f"mount {target}",
    )


# ---- seccomp (libseccomp through ctypes) ---------------------------------------------------------------------
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7


def SCMP_ACT_ERRNO(e: int) -> int:
    return 0x00050000 | (e & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


#: syscalls refused with EPERM (no process may need them to run a Python program)
DENIED_SYSCALLS = (
    "fork",
    "vfork",
    "execve",
    "execveat",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    "setsid",
    "setpgid",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "quotactl",
    "syslog",
    "personality",
    "lookup_dcookie",
    "fanotify_init",
    "vhangup",
    "uselib",
    "move_pages",
    "migrate_pages",
)


class _Seccomp:
    """A seccomp filter built once in the worker (libseccomp context) and loaded by each run's process."""

    def __init__(self) -> None:
        path = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
        lib = ctypes.CDLL(path, use_errno=True)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.POINTER(_ArgCmp),
        ]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        self.lib = lib
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        if not ctx:
            raise OSError("seccomp_init failed")
        self.ctx = ctx
        for name in DENIED_SYSCALLS:
            self._rule(SCMP_ACT_ERRNO(errno.EPERM), name)
        # threads are fine, new processes are not: clone without CLONE_THREAD in its flags (argument 0)
        self._rule(SCMP_ACT_ERRNO(errno.EPERM), "clone", _ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0))
        # clone3 passes its flags in memory a filter cannot read: refuse it so libc falls back to clone
        self._rule(SCMP_ACT_ERRNO(errno.ENOSYS), "clone3")

    def _rule(self, action: int, name: str, *cmps: _ArgCmp) -> None:
        nr = self.lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # not a syscall on this architecture
        arr = (_ArgCmp * max(1, len(cmps)))(*cmps)
        ret = self.lib.seccomp_rule_add_array(self.ctx, action, nr, len(cmps), arr)
        if ret != 0:
            raise OSError(-ret, f"seccomp rule for {name}: {os.strerror(-ret)}")

    def load(self) -> None:
        ret = self.lib.seccomp_load(self.ctx)  # also sets PR_SET_NO_NEW_PRIVS
        if ret != 0:
            raise OSError(-ret, f"seccomp_load: {os.strerror(-ret)}")


# ---- capabilities ---------------------------------------------------------------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> None:
    """Empty the bounding, effective, permitted and inheritable capability sets of this process."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# ---- isolation layers ---------------------------------------------------------------------------------------
EUID = os.geteuid()
#: which layers this worker can apply, found by :func:`_probe` at start
LAYERS: dict[str, bool] = {}
SECCOMP: _Seccomp | None = None
MODE = "none"  # "userns" | "root" | "none"
#: the resource limits of every run (set from the command line at start)
LIMITS: dict[str, int] = {"cpu_s": 5, "memory_mb": 1024, "file_mb": 16}
#: directories bind-mounted read-only into every run's root (everything a forked Python needs to import)
_CANDIDATES = {
    os.path.realpath(p)
    for p in ("/usr", sys.base_prefix, sys.prefix, os.path.dirname(os.__file__))
    if os.path.isdir(p)
}
BIND_DIRS = sorted(p for p in _CANDIDATES if not any(p.startswith(q + "/") for q in _CANDIDATES))
DEVICES = ("null", "zero", "urandom", "random")
#: whether the worker itself left the host's network namespace at start (then every run inherits an empty one)
WORKER_NET_ISOLATED = False
#: whether the worker can give each forked run a fresh PID namespace itself (setns back to its own, then
#: unshare(CLONE_NEWPID)): the run is then pid 1 and needs no second fork. Needs CAP_SYS_ADMIN (root).
PID_FROM_WORKER = False
OWN_PID_NS = -1
BASE = ""  # the worker's private directory: root/ (mount-point skeleton) and runs/
SKELETON = ""


def _make_skeleton(base: str) -> str:
    """Mount points for the private root, made once per worker (the new root is this directory, bind-mounted)."""
    root = os.path.join(base, "root")
    for path in BIND_DIRS:
        os.makedirs(root + path, exist_ok=True)
    for link in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        if os.path.islink("/" + link):
            os.symlink(os.readlink("/" + link), os.path.join(root, link))
    for sub in ("tmp", "dev", ".oldroot"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for dev in DEVICES:
        open(os.path.join(root, "dev", dev), "w").close()
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
    return root


def _enter_private_root(workdir: str) -> None:
    """In a fresh mount namespace: a read-only root with only the bind mounts above and ``workdir`` as ``/tmp``."""
    root = SKELETON
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(root, root, None, MS_BIND)
    for path in BIND_DIRS:
        target = root + path
        _mount(path, target, None, MS_BIND | MS_REC)
        extra = MS_NOEXEC if os.statvfs(path).f_flag & os.ST_NOEXEC else 0  # a locked flag must be kept
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | extra)
    _mount(workdir, root + "/tmp", None, MS_BIND)
    _mount(None, root + "/tmp", None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)
    for dev in DEVICES:
        _mount("/dev/" + dev, f"{root}/dev/{dev}", None, MS_BIND)
    _check(_libc.syscall(_pivot_nr(), root.encode(), (root + "/.oldroot").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _pivot_nr() -> int:
    return {"aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(os.uname().machine, 155)


def _write_maps(pid: int) -> None:
    """Called by the worker for a child that has just entered a new user namespace."""
    host = NOBODY if EUID == 0 else EUID
    host_gid = NOBODY if EUID == 0 else os.getegid()
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    with open(f"/proc/{pid}/uid_map", "w") as f:
        f.write(f"0 {host} 1")
    with open(f"/proc/{pid}/gid_map", "w") as f:
        f.write(f"0 {host_gid} 1")


def _detect_pid_from_worker() -> None:
    global PID_FROM_WORKER, OWN_PID_NS
    if EUID != 0 or not hasattr(os, "pidfd_open") or "--pid-per-fork" in sys.argv:
        return
    try:
        OWN_PID_NS = os.open("/proc/self/ns/pid", os.O_RDONLY)
    except OSError:
        return
    PID_FROM_WORKER = (
        _libc.setns(OWN_PID_NS, CLONE_NEWPID) == 0
        and _libc.unshare(CLONE_NEWPID) == 0
        and _libc.setns(OWN_PID_NS, CLONE_NEWPID) == 0
    )


def _no_layers() -> dict[str, bool]:
    """What a run gets where the kernel grants no namespace: only root's privilege drop is missing too."""
    return dict.fromkeys(
        ("user_namespace", "mount_namespace", "pid_namespace", "network_namespace", "seccomp"), False
    ) | {"unprivileged": EUID != 0}


def _probe() -> None:
    """Find which layers the kernel grants by building one isolated child and checking what it sees."""
    global MODE, SECCOMP
    try:
        SECCOMP = _Seccomp()
    except OSError:
        SECCOMP = None
    for mode in ("userns", "root"):
        if mode == "root" and EUID != 0:
            continue
        MODE = mode
        prep = Prepared(probe=True)
        report = prep.probe_result()
        if report.get("ok"):
            LAYERS.update(report["layers"])
            LAYERS["seccomp"] = LAYERS.get("seccomp", False) and SECCOMP is not None
            return
    MODE = "none"
    LAYERS.update(_no_layers())
    if SECCOMP is not None:
        try:  # seccomp without namespaces: check that a child can load it
            pid = os.fork()
            if pid == 0:
                try:
                    SECCOMP.load()
                    os._exit(0)
                except BaseException:
                    os._exit(1)
            LAYERS["seccomp"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        except OSError:
            pass


# ---- Python-level guards (only where the kernel layers are missing) -------------------------------------------
def _guard(workdir: str, block_network: bool, block_files: bool) -> None:
    """Friendly refusals for what the kernel could not isolate on this host. Not a security boundary."""

    def _denied(what: str):
        def deny(*args, **kwargs):
            raise PermissionError(f"{what} is not allowed in the sandbox")

        return deny

    if not LAYERS.get("seccomp"):
        for name in ("fork", "forkpty", "system", "popen", "execv", "execve", "execl", "execle", "execlp",
                     "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
                     "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "setsid"):  # fmt: skip
            if hasattr(os, name):
                setattr(os, name, _denied(f"os.{name}"))
        subprocess.Popen = _denied("subprocess")  # type: ignore[misc,assignment]
    if not LAYERS.get("pid_namespace"):
        own = os.getpid()
        real_kill = os.kill

        def kill(pid: int, sig: int) -> None:
            if pid not in (own, 0):
                raise PermissionError("signalling other processes is not allowed in the sandbox")
            real_kill(pid, sig)

        os.kill = kill
        os.killpg = _denied("os.killpg")
    if block_files:
        root = os.path.realpath(workdir)

        def inside(path) -> bool:
            if isinstance(path, int):
                return True
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
    if block_network:
        import socket

        class _NoSocket:
            def __init__(self, *a, **k):
                raise PermissionError("network access is disabled in the sandbox")

        socket.socket = _NoSocket  # type: ignore[misc,assignment]
        socket.create_connection = _denied("network access")  # type: ignore[assignment]


def _limits(req: dict[str, int]) -> None:
    cpu = int(req["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(req["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(req["file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # threads (and, without seccomp, processes): counted per user namespace on current kernels
    nproc = 64 if LAYERS.get("seccomp") else 0
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    except (ValueError, OSError):
        pass


def _prepare_process(status_fd: int) -> None:
    """In the executing process, before the request: stdio, environment, limits, seccomp, guards."""
    stdin = os.memfd_create("stdin", 0)
    for src, dst in ((stdin, 0),):
        os.dup2(src, dst)
        os.close(src)
    for var in list(os.environ):
        if var not in ("PATH", "LANG", "LC_ALL"):
            del os.environ[var]
    home = "/tmp" if LAYERS.get("mount_namespace") else os.getcwd()
    os.environ.update(HOME=home, TMPDIR=home, PYTHONHASHSEED="0")
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    _limits(LIMITS)

    def _cpu_exceeded(signum, frame):
        raise TimeoutError("CPU time limit exceeded")

    signal.signal(signal.SIGXCPU, _cpu_exceeded)
    if SECCOMP is not None and LAYERS.get("seccomp"):
        SECCOMP.load()
    _guard(
        os.getcwd(),
        block_network=not LAYERS.get("network_namespace"),
        block_files=not LAYERS.get("mount_namespace"),
    )


def _run_code(req: dict, status_fd: int) -> None:
    """In the executing process, once the request is here: the code. Never returns."""
    code = 1
    exc_name = ""
    try:
        if req.get("stdin"):
            os.write(0, req["stdin"].encode("utf-8", errors="replace"))
            os.lseek(0, 0, os.SEEK_SET)
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
    try:  # the worker stops waiting here (the process's exit costs another ~1.5 ms of page-table teardown)
        os.write(status_fd, json.dumps({"exit": code & 0xFF, "exception": exc_name}).encode())
    except OSError:
        pass
    os._exit(code & 0xFF)


class Prepared:
    """One run's processes, forked ahead of the request (so isolation is built off the caller's critical path).

    Pipes: ``req`` (worker -> run: the request), ``status`` (run -> worker: its own report, untrusted), ``done``
    (C -> worker: the wait status of a run that ended without a report, when C is not the run itself),
    ``sync`` / ``go`` (C <-> worker: user-namespace maps). stdout/stderr are memory files kept by the worker.
    """

    def __init__(self, probe: bool = False) -> None:
        self.workdir = tempfile.mkdtemp(prefix="run-", dir=os.path.join(BASE, "runs"))
        os.chmod(self.workdir, 0o777)  # the run's user is unprivileged
        self.out = os.memfd_create("stdout", 0)
        self.err = os.memfd_create("stderr", 0)
        req_r, self.req_w = os.pipe()
        self.status_r, status_w = os.pipe()
        self.done_r, done_w = os.pipe()
        sync_r, sync_w = os.pipe()
        go_r, go_w = os.pipe()
        if PID_FROM_WORKER:  # the forked child is pid 1 of a fresh PID namespace: no second fork per run
            _check(_libc.setns(OWN_PID_NS, CLONE_NEWPID), "setns")
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        self.pid = os.fork()
        if self.pid == 0:
            for fd in (self.req_w, self.status_r, self.done_r, sync_r, go_w):
                os.close(fd)
            try:
                _child(req_r, status_w, done_w, sync_w, go_r, self.workdir, self.out, self.err, probe)
            finally:
                os._exit(70)
        self.pidfd = os.pidfd_open(self.pid) if PID_FROM_WORKER else -1
        for fd in (req_r, status_w, done_w, sync_w, go_r):
            os.close(fd)
        self.failed = ""
        if MODE == "userns":  # the child has entered its user namespace (or failed): give it its maps
            msg = os.read(sync_r, 1)
            if msg == b"u":
                try:
                    _write_maps(self.pid)
                except OSError as e:
                    self.failed = f"uid map: {e}"
            try:
                os.write(go_w, b"g")
            except OSError:
                pass
        os.close(sync_r)
        os.close(go_w)

    def close_fds(self) -> None:
        for fd in (self.status_r, self.done_r, self.out, self.err, self.pidfd):
            if fd >= 0:
                os.close(fd)

    def probe_result(self) -> dict:
        """For the probe child: what it reported (it runs no code)."""
        os.close(self.req_w)
        os.waitpid(self.pid, 0)
        data = os.pread(self.out, 65536, 0)
        self.close_fds()
        shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            return json.loads(data or b"{}") if not self.failed else {}
        except ValueError:
            return {}

    def cancel(self) -> None:
        os.close(self.req_w)  # the run reads EOF and exits
        os.waitpid(self.pid, 0)
        self.close_fds()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _isolate(workdir: str, sync_w: int, go_r: int) -> None:
    """In C: the namespaces, maps, private root and identity of this run (per MODE)."""
    os.setsid()
    if EUID == 0:
        os.setgroups([])  # supplementary groups would keep root's group rights inside a user namespace
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (0 if PID_FROM_WORKER else CLONE_NEWPID)
    if not WORKER_NET_ISOLATED:
        flags |= CLONE_NEWNET
    if MODE == "userns":
        ok = _libc.unshare(flags | CLONE_NEWUSER) == 0
        os.write(sync_w, b"u" if ok else b"x")
        os.read(go_r, 1)  # the worker has written the maps
        if not ok:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    else:
        _check(_libc.unshare(flags), "unshare")
    _enter_private_root(workdir)
    os.chdir("/tmp")
    if MODE == "userns":
        os.setresgid(0, 0, 0)  # the mapped ids: host nobody (root worker) or the caller's own ids
        os.setresuid(0, 0, 0)
    else:
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)  # a real privilege drop: all capabilities go


def _child(req_r, status_w, done_w, sync_w, go_r, workdir, out_fd, err_fd, probe) -> None:
    """C: isolate, fork I (pid 1 of the new PID namespace), report I's exit. Never returns."""
    null = os.open(os.devnull, os.O_RDWR)  # not the worker's own stdio pipes
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        if MODE == "none":
            os.setsid()
            os.chdir(workdir)
        else:
            _isolate(workdir, sync_w, go_r)
    except OSError as e:
        os.write(done_w, json.dumps({"ok": False, "error": str(e)}).encode())
        os._exit(71)
    os.close(sync_w)
    os.close(go_r)
    if PID_FROM_WORKER:  # this process is pid 1 of its PID namespace: it runs the code itself
        os.close(done_w)  # the worker watches this process through a pidfd
        _init(req_r, status_w, out_fd, err_fd, probe)
    pid = os.fork()  # the first process in the new PID namespace is its init
    if pid == 0:
        os.close(done_w)
        _init(req_r, status_w, out_fd, err_fd, probe)
    os.close(req_r)
    os.close(status_w)
    _, status = os.waitpid(pid, 0)
    os.write(done_w, json.dumps({"status": status}).encode())
    os._exit(0)


def _init(req_r, status_w, out_fd, err_fd, probe) -> None:
    """I: wait for the request, then run it with the per-process layers. Never returns."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if MODE == "userns":
            _drop_capabilities()
        if probe:
            _probe_report(out_fd)
            os._exit(0)
        for src, dst in ((out_fd, 1), (err_fd, 2)):
            os.dup2(src, dst)
        for lo, hi in ((3, min(req_r, status_w)), (min(req_r, status_w) + 1, max(req_r, status_w))):
            os.closerange(lo, hi)  # every descriptor the worker had open, except the two pipes
        os.closerange(max(req_r, status_w) + 1, 1 << 16)
        _prepare_process(status_w)
        chunks = []
        while chunk := os.read(req_r, 1 << 16):
            chunks.append(chunk)
        os.close(req_r)
        if not chunks:  # the worker is shutting down or replacing this child
            os._exit(0)
        req = json.loads(b"".join(chunks))
    except BaseException:
        os._exit(72)
    _run_code(req, status_w)


def _probe_report(out_fd: int) -> None:
    """What a run's process can see: written instead of running code when the worker starts."""
    layers = {
        "user_namespace": MODE == "userns",
        "unprivileged": os.geteuid() != 0 or MODE == "userns",
        "mount_namespace": not os.path.exists("/etc/passwd") and not os.path.exists("/proc/1"),
        "pid_namespace": os.getpid() == 1,
        "network_namespace": _no_network(),
        "seccomp": False,
    }
    if SECCOMP is not None:
        try:
            SECCOMP.load()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        except PermissionError:
            layers["seccomp"] = True
        except OSError:
            pass
    os.write(out_fd, json.dumps({"ok": True, "layers": layers}).encode())


def _no_network() -> bool:

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("127.0.0.1", 9))
            s.send(b"x")
    except OSError:
        return True
    return False


def _read_capped(fd: int, limit: int) -> tuple[str, int]:
    """The first ``limit`` characters of a memory file and how many bytes were left out."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, limit * 4, 0)
    except OSError:
        return "", 0
    text = data.decode("utf-8", errors="replace")[:limit]
    return text, max(0, size - len(text.encode("utf-8", errors="replace")))


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _parse_report(raw: bytes) -> dict | None:
    """The run's own report (untrusted: the code can write anything there). A fake report only ends the code's
    own run early: the worker kills the run's process group either way."""
    try:
        report = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("exit"), int):
        return None
    name = report.get("exception", "")
    ok_name = isinstance(name, str) and name.isidentifier() and len(name) <= 64
    return {"exit": report["exit"] & 0xFF, "exception": name if ok_name else ""}


def handle(req: dict, prep: Prepared) -> dict:
    """Send ``req`` to the prepared run, wait for its report or exit (killing its group at the deadline),
    collect the result."""
    start = time.monotonic()
    payload = json.dumps(req).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(prep.req_w, view) :]
    except BrokenPipeError:
        pass  # the run died before reading; C's report tells
    os.close(prep.req_w)
    deadline = start + float(req["timeout_s"])
    timed_out = False
    done = raw = b""
    report = None
    watch = [prep.status_r, prep.pidfd if prep.pidfd >= 0 else prep.done_r]
    reaped_status = None
    while report is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready = select.select(watch, [], [], remaining)[0]
        if prep.status_r in ready:
            chunk = os.read(prep.status_r, 4096)
            raw += chunk
            if not chunk or len(raw) > 8192:  # the run is gone without a report, or wrote garbage
                watch.remove(prep.status_r)
            else:
                report = _parse_report(raw)
        if prep.pidfd >= 0 and prep.pidfd in ready:  # the run (pid 1 of its namespace) ended without a report
            reaped_status = os.waitpid(prep.pid, 0)[1]
            break
        if prep.done_r in ready:  # C reports the wait status of a run that ended without its own report
            chunk = os.read(prep.done_r, 4096)
            done += chunk
            if not chunk:
                break
    duration = time.monotonic() - start
    # C is alive or a zombie until reaped, so its process group id still names this run: kill what is left
    # (on the deadline, the run itself; without a PID namespace, anything it started)
    if reaped_status is None:
        _kill_group(prep.pid)
    if report is not None:
        exit_code, sig, exc = report["exit"], "", report["exception"]
    else:
        try:
            status = reaped_status if reaped_status is not None else int(json.loads(done or b"{}")["status"])
        except (ValueError, TypeError, KeyError):
            status = signal.SIGKILL  # C itself was killed
        exc = ""
        if os.WIFSIGNALED(status):
            exit_code, sig = -os.WTERMSIG(status), signal.Signals(os.WTERMSIG(status)).name
        else:
            exit_code, sig = os.WEXITSTATUS(status), ""
    limit = int(req["max_output_chars"])
    stdout, out_cut = _read_capped(prep.out, limit)
    stderr, err_cut = _read_capped(prep.err, limit)
    prep.close_fds()
    _PENDING_CLEANUP.append(prep.workdir)
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


_PENDING_CLEANUP: list[str] = []


def _reap() -> None:
    """Reap finished runs without waiting (their namespace teardown can take milliseconds), and orphans that
    were re-parented to this worker (it is their child subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    global BASE, SKELETON, MODE, WORKER_NET_ISOLATED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned run processes come back here to be reaped
    BASE = tempfile.mkdtemp(prefix="agentr1-sbx-")
    os.chmod(BASE, 0o755)
    os.mkdir(os.path.join(BASE, "runs"))
    os.chmod(os.path.join(BASE, "runs"), 0o711)
    if "--limits" in sys.argv:
        LIMITS.update(json.loads(sys.argv[sys.argv.index("--limits") + 1]))
    try:
        SKELETON = _make_skeleton(BASE)
        if "--no-namespaces" in sys.argv:
            raise OSError("namespaces disabled by the caller")
        # as root, one network namespace for the worker (0.7 ms a run saved); otherwise one per run
        WORKER_NET_ISOLATED = EUID == 0 and _libc.unshare(CLONE_NEWNET) == 0
        _detect_pid_from_worker()
        _probe()
    except OSError:
        MODE = "none"
        if not LAYERS:
            LAYERS.update(_no_layers())
    import gc

    gc.freeze()  # forked children then do not touch (copy) the worker's objects when they collect garbage
    out = sys.stdout
    out.write(json.dumps({"ready": True, "mode": MODE, "layers": LAYERS}) + "\n")
    out.flush()
    try:
        prep = Prepared()
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                result = handle(json.loads(line), prep)
            except Exception as e:
                result = {"worker_error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(result) + "\n")
            out.flush()
            _reap()
            prep = Prepared()  # fork the next run while the caller reads this result
            while _PENDING_CLEANUP:
                shutil.rmtree(_PENDING_CLEANUP.pop(), ignore_errors=True)
        prep.cancel()
    finally:
        shutil.rmtree(BASE, ignore_errors=True)


if __name__ == "__main__":
    main()
