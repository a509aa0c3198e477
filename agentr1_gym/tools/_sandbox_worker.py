"""Sandbox worker: a small, long-lived stdlib-only process that runs each request in a fresh, kernel-isolated child.

Started by :class:`agentr1_gym.tools.python.PythonSandbox` as ``python -I <this file>``; it writes one JSON line
saying which isolation layers the kernel granted, then reads one JSON request per line on stdin and writes one
JSON result per line on stdout.

Three kinds of process, so that nothing of one request can be read from another:

``W`` (this worker)
    reads requests, hands each to a prepared run, waits for it (killing it at the deadline) and collects its
    output. It never executes user code, and no run is ever forked from it: its memory holds past requests and
    results (in buffers, freed strings, frames), and a forked child would inherit all of it.
``Z`` (the zygote)
    forked from ``W`` once, at start, before any request exists in ``W``'s memory. It never receives request or
    result data: on ``W``'s command it prepares the next run (pipes, memory files, the fork of ``C``) and passes
    the run's descriptors back over a Unix socket (``SCM_RIGHTS``). Every run therefore starts from a memory image
    that never held a request, a result or a peer's code.
``C`` (trusted code, forked from ``Z`` ahead of the request)
    drops supplementary groups, then ``unshare(CLONE_NEWUSER | NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS)``; ``W``
    writes its uid/gid maps (``0 -> 65534``, the unprivileged ``nobody``, when the worker is root; ``0 ->`` the
    caller's own uid otherwise). In the new mount namespace it bind-mounts a private root read-only (only ``/usr``
    and the Python installation, with every site-packages directory and this project's packages covered by an
    empty read-only tmpfs, ``/dev/null|zero|urandom|random`` and a ``/tmp`` that is a fresh tmpfs of
    ``disk_mb``; no ``/proc``, ``/etc``, ``/home``, ``/dev/shm`` or host ``/tmp``), ``pivot_root``\\ s into it,
    detaches the old root, and becomes the mapped user. Without user namespaces but as root, it builds the same
    view with plain namespaces and then really drops to uid/gid 65534. ``C`` forks ``I`` (or, as root, is ``I``
    itself: ``Z`` gave it a fresh PID namespace before the fork).
``I`` (pid 1 of the new PID namespace)
    drops every capability, sets resource limits (CPU seconds, address space, file size, open files, threads),
    loads a seccomp filter (libseccomp) that refuses new processes (``fork``/``vfork``/``clone`` without
    ``CLONE_THREAD``), ``execve``, ``ptrace`` and cross-process memory access, mounts and namespaces, ``setsid`` /
    ``setpgid``, memory files and System V shared memory, kernel keyrings, BPF, ``perf_event_open``,
    ``userfaultfd``, ``io_uring``, module and clock changes; then waits for the request and runs it. When ``I``
    exits, the kernel kills whatever else lives in its PID namespace and frees its tmpfs, so nothing survives a
    run, on disk or in memory.

Completion is the run's own report or the exit of ``I`` as reported by its trusted parent (``C`` or ``Z``), never
something the code can forge beyond ending its own run early. stdout and stderr are memory files held by ``W``,
so the code cannot redirect what ``W`` reads. On the deadline ``W`` kills the run's whole process group (the code
cannot leave it: ``setsid``/``setpgid`` are filtered); ``Z`` reaps it only after ``W`` released it, so the group
id cannot be reused in between. Where the kernel refuses a layer the worker says so in its first line, and the
caller decides whether to run at all (see :class:`agentr1_gym.tools.python.SandboxConfig.isolation`). Without a
mount namespace a run's ``/tmp`` is a directory on the host's disk, removed after the run. Directories of workers
that were killed are swept by the next worker that starts.
"""

from __future__ import annotations

import builtins
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import io
import json
import os
import resource
import select
import signal
import socket
import stat
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
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER = 1, 24, 36
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


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            src and src.encode(), target.encode(), fstype and fstype.encode(), flags, data and data.encode()
        ),
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
    # memory outside the run's limits: memory files and System V shared memory are not counted by RLIMIT_AS
    # until mapped, and a run could park hundreds of MB of host memory in them (the run's /tmp is a sized tmpfs)
    "memfd_create",
    "memfd_secret",
    "shmget",
    "msgget",
    "mq_open",
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
#: the limits of every run (set from the command line at start)
LIMITS: dict[str, int] = {"cpu_s": 5, "memory_mb": 1024, "file_mb": 16, "disk_mb": 64, "disk_inodes": 16384}
#: directories bind-mounted read-only into every run's root (everything a forked Python needs to import)
_CANDIDATES = {
    os.path.realpath(p)
    for p in ("/usr", sys.base_prefix, sys.prefix, os.path.dirname(os.__file__))
    if os.path.isdir(p)
}
BIND_DIRS = sorted(p for p in _CANDIDATES if not any(p.startswith(q + "/") for q in _CANDIDATES))
#: paths inside BIND_DIRS that runs must not see (site-packages, this project's packages, the data cache),
#: covered by an empty read-only tmpfs; set from ``--hide`` arguments
HIDDEN: list[str] = []
#: names inside a hidden site-packages directory that runs may import all the same (``--expose``)
EXPOSED: list[str] = []
DEVICES = ("null", "zero", "urandom", "random")
#: whether the worker itself left the host's network namespace at start (then every run inherits an empty one)
WORKER_NET_ISOLATED = False
#: whether the zygote can give each forked run a fresh PID namespace itself (setns back to its own, then
#: unshare(CLONE_NEWPID)): the run is then pid 1 and needs no second fork. Needs CAP_SYS_ADMIN (root).
PID_FROM_WORKER = False
OWN_PID_NS = -1
BASE = ""  # the worker's private directory: root/ (mount-point skeleton) and runs/ (runs without a mount namespace)
SKELETON = ""
PREFIX = "agentr1-sbx-"
MAXFD = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1 << 20)


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


def _hide(target: str, source: str) -> None:
    """Cover ``target`` (inside the new root; ``source`` is the same path on the host) with an empty read-only
    tmpfs, then bind the exposed names of ``source`` back in (read-only). A target already covered by a hidden
    parent is left alone."""
    if not os.path.lexists(target):
        return
    if os.path.isdir(source):
        shown = [n for n in EXPOSED if os.path.lexists(os.path.join(source, n))]
        flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
        _mount(
            "tmpfs", target, "tmpfs", flags | (0 if shown else MS_RDONLY), "size=1m,nr_inodes=1024,mode=0755"
        )
        for name in shown:
            src, dst = os.path.join(source, name), os.path.join(target, name)
            if os.path.isdir(src):
                os.mkdir(dst)
            else:
                open(dst, "w").close()
            _mount(src, dst, None, MS_BIND | MS_REC)
            extra = MS_NOEXEC if os.statvfs(src).f_flag & os.ST_NOEXEC else 0
            _mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | extra)
        if shown:
            _mount(None, target, None, MS_REMOUNT | MS_RDONLY | flags)
    elif os.path.exists(source):  # a file: cover it with an empty one
        _mount("/dev/null", target, None, MS_BIND)


def _enter_private_root() -> None:
    """In a fresh mount namespace: a read-only root with only the bind mounts above, the hidden paths covered,
    and a fresh tmpfs of ``disk_mb`` as ``/tmp``."""
    root = SKELETON
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(root, root, None, MS_BIND)
    # the run's /tmp first: a Python installation that lives under /tmp (a venv, a clone) is bound on top of it,
    # not shadowed by it (its site-packages, and so the packages named for exposure, stay importable)
    size = f"size={LIMITS['disk_mb']}m,nr_inodes={LIMITS['disk_inodes']},mode=1777"
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, size)
    for path in BIND_DIRS:
        target = root + path
        _mount_point(target)  # inside the fresh /tmp for an installation there
        _mount(path, target, None, MS_BIND | MS_REC)
        extra = MS_NOEXEC if os.statvfs(path).f_flag & os.ST_NOEXEC else 0  # a locked flag must be kept
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | extra)
    for path in HIDDEN:
        _hide(root + path, path)
    for dev in DEVICES:
        _mount("/dev/" + dev, f"{root}/dev/{dev}", None, MS_BIND)
    _check(_libc.syscall(_pivot_nr(), root.encode(), (root + "/.oldroot").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount old root")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mount_point(path: str) -> None:
    """Make the directory ``path`` to mount on. In a user namespace this process still has the host's ids (which
    the namespace does not map: the run's tmpfs refuses them a new inode with EOVERFLOW), so a short-lived child
    makes it as the namespace's own root."""
    if os.path.isdir(path):
        return
    if MODE != "userns":
        os.makedirs(path, exist_ok=True)
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            os.makedirs(path, exist_ok=True)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(errno.EPERM, f"cannot make the mount point {path}")


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
    if not PID_FROM_WORKER:
        os.close(OWN_PID_NS)
        OWN_PID_NS = -1


def _no_layers() -> dict[str, bool]:
    """What a run gets where the kernel grants no namespace (a root worker still drops runs to ``nobody``)."""
    return dict.fromkeys(
        ("user_namespace", "mount_namespace", "pid_namespace", "network_namespace", "seccomp"), False
    ) | {"unprivileged": True}


def _probe() -> None:
    """Find which layers the kernel grants by building one isolated child and checking what it sees."""
    global MODE, SECCOMP, PID_FROM_WORKER
    try:
        SECCOMP = _Seccomp()
    except OSError:
        SECCOMP = None
    for mode in ("userns", "root"):
        if (mode == "root" and EUID != 0) or (mode == "userns" and "--no-user-namespace" in sys.argv):
            continue
        MODE = mode
        report = Spawned(probe=True).probe_result()
        if report.get("ok"):
            LAYERS.update(report["layers"])
            LAYERS["seccomp"] = LAYERS.get("seccomp", False) and SECCOMP is not None
            return
    MODE = "none"
    PID_FROM_WORKER = False
    LAYERS.update(_no_layers())
    _probe_seccomp_alone()


def _probe_seccomp_alone() -> None:
    """Without namespaces: whether a child can load the seccomp filter."""
    if SECCOMP is None:
        return
    try:
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


class Spawned:
    """One prepared run, as the process that forked ``C`` holds it (the zygote; the worker itself for the probe).

    Pipes: ``req`` (worker -> run: the request), ``status`` (run -> worker: its own report, untrusted), ``done``
    (trusted parent -> worker: the wait status of a run that ended without a report), ``sync`` / ``go`` (C <->
    worker: user-namespace maps). stdout/stderr are memory files kept by the worker. ``workdir`` is the run's
    directory on the host, only where there is no mount namespace (else its /tmp is a tmpfs in the namespace).
    """

    def __init__(self, probe: bool = False) -> None:
        self.workdir = ""
        if MODE == "none":
            self.workdir = tempfile.mkdtemp(prefix="run-", dir=os.path.join(BASE, "runs"))
            os.chmod(self.workdir, 0o777)  # the run's user is unprivileged
        self.out = os.memfd_create("stdout", os.MFD_CLOEXEC)
        self.err = os.memfd_create("stderr", os.MFD_CLOEXEC)
        req_r, self.req_w = os.pipe()
        self.status_r, status_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        self.sync_r, sync_w = os.pipe()
        go_r, self.go_w = os.pipe()
        if PID_FROM_WORKER:  # the forked child is pid 1 of a fresh PID namespace: no second fork per run
            _check(_libc.setns(OWN_PID_NS, CLONE_NEWPID), "setns")
            _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        self.pid = os.fork()
        if self.pid == 0:
            try:  # nothing the zygote (or worker) holds reaches the run: other runs' pipes, sockets, locks
                _close_all_but((req_r, status_w, self.done_w, sync_w, go_r, self.out, self.err))
                _child(req_r, status_w, self.done_w, sync_w, go_r, self.workdir, self.out, self.err, probe)
            finally:
                os._exit(70)
        for fd in (req_r, status_w, sync_w, go_r):
            os.close(fd)
        # the zygote keeps done_w of a run that is its own pid 1 (it reports that run's exit); C reports otherwise
        self.pidfd = os.pidfd_open(self.pid) if PID_FROM_WORKER and not probe else -1
        if self.pidfd < 0:
            os.close(self.done_w)
            self.done_w = -1

    def parent_side(self) -> list[int]:
        """The descriptors the worker takes over."""
        return [self.req_w, self.status_r, self.done_r, self.out, self.err, self.sync_r, self.go_w]

    def probe_result(self) -> dict:
        """For the probe child (forked by the worker itself at start; it runs no code): what it reported."""
        failed = _handshake(self.pid, self.sync_r, self.go_w)
        os.close(self.req_w)
        os.waitpid(self.pid, 0)
        data = os.pread(self.out, 65536, 0)
        for fd in (self.status_r, self.done_r, self.out, self.err, self.pidfd, self.done_w):
            if fd >= 0:
                os.close(fd)
        _remove_tree(self.workdir)
        try:
            return json.loads(data or b"{}") if not failed else {}
        except ValueError:
            return {}


def _close_all_but(keep: tuple[int, ...]) -> None:
    """Close every descriptor above 2 except ``keep``."""
    low = 3
    for fd in sorted({k for k in keep if k >= 3}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, MAXFD)


def _handshake(pid: int, sync_r: int, go_w: int) -> str:
    """The worker's half of a run's set-up: in ``userns`` mode, write the maps of the child's new user namespace
    once it has entered it. Returns what failed ("" when nothing did). Closes both descriptors."""
    failed = ""
    if MODE == "userns":
        msg = os.read(sync_r, 1)
        if msg == b"u":
            try:
                _write_maps(pid)
            except OSError as e:
                failed = f"uid map: {e}"
        try:
            os.write(go_w, b"g")
        except OSError:
            pass
    os.close(sync_r)
    os.close(go_w)
    return failed


def _isolate(workdir: str, sync_w: int, go_r: int) -> None:
    """In C: the namespaces, maps, private root and identity of this run (per MODE)."""
    os.setsid()
    if EUID == 0:
        os.setgroups([])  # supplementary groups would keep root's group rights inside a user namespace
    if MODE == "none":
        os.chdir(workdir)
        if EUID == 0:  # no namespace to map root away: really drop to nobody (code never runs as root)
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        return
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
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
    _enter_private_root()
    if (
        not PID_FROM_WORKER
    ):  # after the root is built: a helper it forks must not become the PID namespace's init
        _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    os.chdir("/tmp")
    if MODE == "userns":
        os.setresgid(0, 0, 0)  # the mapped ids: host nobody (root worker) or the caller's own ids
        os.setresuid(0, 0, 0)
    else:
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)  # a real privilege drop: all capabilities go


def _child(req_r, status_w, done_w, sync_w, go_r, workdir, out_fd, err_fd, probe) -> None:
    """C: isolate, fork I (pid 1 of the new PID namespace) or be I, report I's exit. Never returns."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    null = os.open(os.devnull, os.O_RDWR)  # not the worker's own stdio pipes
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    try:
        _isolate(workdir, sync_w, go_r)
    except OSError as e:  # fail closed: this run never runs code; the worker reports an infrastructure error
        os.write(done_w, json.dumps({"error": f"isolation failed: {e}"}).encode())
        os._exit(71)
    os.close(sync_w)
    os.close(go_r)
    if PID_FROM_WORKER:  # this process is pid 1 of its PID namespace: it runs the code itself
        os.close(done_w)  # the zygote watches this process and reports its exit
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
            os.closerange(lo, hi)  # every descriptor the zygote had open, except the two pipes
        os.closerange(max(req_r, status_w) + 1, MAXFD)
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


def signal_name(number: int) -> str:
    """``SIGKILL``, ``SIGRTMIN+6``, or ``signal 70`` (a real-time or unknown signal has no enum member)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - signal.SIGRTMIN}"
        return f"signal {number}"


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


class Run:
    """A prepared run as the worker holds it: the descriptors the zygote passed over, and its pid."""

    def __init__(self, pid: int, workdir: str, fds: list[int]) -> None:
        self.pid, self.workdir = pid, workdir
        self.req_w, self.status_r, self.done_r, self.out, self.err, sync_r, go_w = fds
        self.failed = _handshake(pid, sync_r, go_w)
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for fd in (self.req_w, self.status_r, self.done_r, self.out, self.err):
                if fd >= 0:
                    os.close(fd)


def handle(req: dict, run: Run, meanwhile=None) -> dict:
    """Send ``req`` to the prepared run, call ``meanwhile()`` (the next run is prepared while this one runs), wait
    for its report or exit (killing its group at the deadline), collect the result. Whatever the code did, this
    returns a result; only a broken set-up raises."""
    if run.failed:
        raise OSError(run.failed)
    start = time.monotonic()
    payload = json.dumps(req).encode()
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(run.req_w, view) :]
    except BrokenPipeError:
        pass  # the run died before reading; its parent's report tells
    os.close(run.req_w)
    run.req_w = -1
    if meanwhile is not None:
        meanwhile()
    deadline = start + float(req["timeout_s"])
    timed_out = False
    done = raw = b""
    report = None
    watch = [run.status_r, run.done_r]
    while report is None and watch:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready = select.select(watch, [], [], remaining)[0]
        if run.status_r in ready:
            chunk = os.read(run.status_r, 4096)
            raw += chunk
            if not chunk or len(raw) > 8192:  # the run is gone without a report, or wrote garbage
                watch.remove(run.status_r)
            else:
                report = _parse_report(raw)
        if run.done_r in ready:  # the trusted parent reports the wait status of a run that ended
            chunk = os.read(run.done_r, 4096)
            done += chunk
            if not chunk or done.endswith(b"}"):
                break
    duration = time.monotonic() - start
    # the zygote reaps the run only after the worker released it, so its process group id still names this
    # run: kill what is left (on the deadline, the run itself; without a PID namespace, anything it started)
    _kill_group(run.pid)
    try:
        parent = json.loads(done) if done else {}
    except ValueError:
        parent = {}
    if "error" in parent:  # the run's isolation failed: it never ran code
        raise OSError(str(parent["error"])[:300])
    if report is not None:
        exit_code, sig, exc = report["exit"], "", report["exception"]
    else:
        status = parent.get("status")
        if not isinstance(status, int) or timed_out:
            status = signal.SIGKILL  # killed at the deadline (or its parent was)
        exc = ""
        if os.WIFSIGNALED(status):
            exit_code, sig = -os.WTERMSIG(status), signal_name(os.WTERMSIG(status))
        else:
            exit_code, sig = os.WEXITSTATUS(status), ""
    limit = int(req["max_output_chars"])
    stdout, out_cut = _read_capped(run.out, limit)
    stderr, err_cut = _read_capped(run.err, limit)
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


# ---- the zygote ----------------------------------------------------------------------------------------------
class Zygote:
    """The worker's handle on its zygote: ``prepare()`` a run, ``release()`` it when done."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if OWN_PID_NS >= 0:  # the probe left this process's children in its (now dead) PID namespace
            _check(_libc.setns(OWN_PID_NS, CLONE_NEWPID), "setns")
        self.pid = os.fork()
        if self.pid == 0:
            ours.close()
            try:
                _zygote_main(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.sock = ours

    def prepare(self) -> Run:
        self.sock.sendall(b"P")
        msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 8)
        if not msg:
            raise OSError("the zygote died")
        info = json.loads(msg)
        if "error" in info:
            for fd in fds:
                os.close(fd)
            raise OSError(f"preparing a run failed: {info['error']}")
        return Run(int(info["pid"]), str(info["workdir"]), fds)

    def release(self, run: Run) -> None:
        """Kill what is left of the run, let the zygote reap it, remove its host directory (if any)."""
        run.close()
        _kill_group(run.pid)
        try:
            self.sock.sendall(b"R%d" % run.pid)
        except OSError:
            pass
        if run.workdir:
            _PENDING_CLEANUP.append(run.workdir)


def _zygote_main(sock: socket.socket) -> None:
    """Z: prepare runs on the worker's command; report the exit of runs that are their own pid 1; reap released
    runs. Receives no request or result data, ever."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if LOCK_FD >= 0:  # only the worker holds its directory's lock: a dead worker's directory is sweepable
        os.close(LOCK_FD)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)
    watched: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, done_w): runs whose exit this process reports
    released: set[int] = set()  # pids to reap
    while True:
        for pid in list(released):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    released.discard(pid)
            except ChildProcessError:
                released.discard(pid)
        timeout = 0.05 if released else None
        ready = select.select([sock, *watched], [], [], timeout)[0]
        for pidfd in ready:
            if pidfd in watched:
                pid, done_w = watched.pop(pidfd)
                try:  # peek without reaping: the pid stays reserved until the worker releases the run
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                    exited = info.si_code == os.CLD_EXITED
                    status = (info.si_status & 0xFF) << 8 if exited else info.si_status & 0x7F
                    os.write(done_w, json.dumps({"status": status}).encode())
                except OSError:
                    pass
                os.close(done_w)
                os.close(pidfd)
        if sock not in ready:
            continue
        msg = sock.recv(64)
        if not msg:
            return
        if msg.startswith(b"R"):
            pid = int(msg[1:])
            for pidfd, (p, done_w) in list(watched.items()):
                if p == pid:
                    del watched[pidfd]
                    os.close(pidfd)
                    os.close(done_w)
            _kill_group(pid)
            released.add(pid)
            continue
        try:
            sp = Spawned()
        except OSError as e:
            sock.sendall(json.dumps({"error": str(e)[:300]}).encode())
            continue
        if sp.pidfd >= 0:
            watched[sp.pidfd] = (sp.pid, sp.done_w)
        fds = sp.parent_side()
        socket.send_fds(sock, [json.dumps({"pid": sp.pid, "workdir": sp.workdir}).encode()], fds)
        for fd in fds:
            os.close(fd)


# ---- directories on the host ---------------------------------------------------------------------------------
_PENDING_CLEANUP: list[str] = []
LOCK_FD = -1


_REFILLED_RETRIES = 6  # a directory found refilled after it was emptied is emptied again this many times


def _remove_tree(path: str) -> None:
    """Remove a directory tree whatever the code left in it: any depth (no recursion, no path longer than one
    name), unreadable or unwritable modes (fixed as it goes), symlinks (removed, never followed), and a process
    still writing in it while a kill reaches it (a directory refilled after it was emptied is emptied again, up
    to ``_REFILLED_RETRIES`` times with a growing pause). Never raises."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    names: list[str] = []  # the path from ``path`` down to ``fd``
    stuck: set[tuple[int, int]] = set()  # directories that could not be emptied: never entered again
    refilled: dict[tuple[int, int], int] = {}

    def give_up(key: tuple[int, int], error: OSError, blocked: bool) -> bool:
        """After a failed rmdir: True to leave the directory, False to empty it again (it was refilled: its last
        scan emptied it, yet it is not empty)."""
        refilled[key] = refilled.get(key, 0) + 1
        if blocked or error.errno != errno.ENOTEMPTY or refilled[key] > _REFILLED_RETRIES:
            return True
        time.sleep(0.002 * 2 ** refilled[key])  # 4 ms .. 128 ms: the writer's kill takes effect
        return False

    while True:
        entered = False
        blocked = False  # this scan of ``fd`` left something in it
        try:
            os.fchmod(fd, 0o700)
        except OSError:
            pass
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            if (st.st_dev, st.st_ino) in stuck:
                                blocked = True
                                continue
                            if st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
                                os.chmod(entry.name, 0o700, dir_fd=fd)
                            child = os.open(
                                entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd
                            )
                            os.close(fd)
                            fd, entered = child, True
                            names.append(entry.name)
                            break
                        os.unlink(entry.name, dir_fd=fd)
                    except OSError as e:
                        blocked = blocked or e.errno != errno.ENOENT  # (gone already: nothing left)
                        continue
        except OSError:
            blocked = True
        if entered:
            continue
        if not names:
            st = os.fstat(fd)
            os.close(fd)
            try:
                os.rmdir(path)
            except OSError as e:
                if give_up((st.st_dev, st.st_ino), e, blocked):
                    return
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                except OSError:
                    return
                continue
            return
        try:
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        except OSError:
            os.close(fd)
            return
        st = os.fstat(fd)
        os.close(fd)
        fd = parent
        try:
            os.rmdir(names.pop(), dir_fd=fd)
        except OSError as e:
            if give_up((st.st_dev, st.st_ino), e, blocked):
                stuck.add((st.st_dev, st.st_ino))


def _make_base() -> str:
    """The worker's own directory, locked for as long as the worker lives (``flock`` on the directory): it is
    created under a name the sweeper ignores and renamed once locked, so a live worker's directory is never
    swept."""
    global LOCK_FD
    tmp = tempfile.gettempdir()
    staging = tempfile.mkdtemp(prefix="." + PREFIX + "new-", dir=tmp)
    LOCK_FD = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(LOCK_FD, fcntl.LOCK_EX)
    base = os.path.join(tmp, PREFIX + os.path.basename(staging).rsplit("-", 1)[1])
    os.rename(staging, base)
    os.chmod(base, 0o755)
    return base


def sweep(tmp: str | None = None) -> int:
    """Remove the directories of workers that died without cleaning up (SIGKILL, power loss): those whose lock
    nobody holds. Returns how many were removed."""
    tmp = tmp or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(tmp)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(tmp, name)
        if name.startswith(PREFIX):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # a live worker's
            _remove_tree(path)
            os.close(fd)
            removed += not os.path.lexists(path)
        elif name.startswith("." + PREFIX + "new-"):  # a worker killed between mkdtemp and rename
            try:
                if time.time() - os.lstat(path).st_mtime > 60:
                    _remove_tree(path)
                    removed += not os.path.lexists(path)
            except OSError:
                pass
    return removed


def _reap() -> None:
    """Reap orphans that were re-parented to this worker (it is their child subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _parse_args() -> None:
    argv = sys.argv
    for i, arg in enumerate(argv):
        if arg == "--limits":
            LIMITS.update(json.loads(argv[i + 1]))
        elif arg == "--hide":
            path = os.path.realpath(argv[i + 1])
            if any(path == d or path.startswith(d + "/") for d in BIND_DIRS) and path not in HIDDEN:
                HIDDEN.append(path)
        elif arg == "--expose":
            EXPOSED.append(argv[i + 1])
    HIDDEN.sort()  # parents before children


def main() -> None:
    global BASE, SKELETON, MODE, WORKER_NET_ISOLATED, PID_FROM_WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)  # clean up on a polite kill too
    signal.signal(signal.SIGHUP, _terminate)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphaned run processes come back here to be reaped
    _parse_args()
    sweep()
    BASE = _make_base()
    zygote = None
    try:
        os.mkdir(os.path.join(BASE, "runs"))
        os.chmod(os.path.join(BASE, "runs"), 0o711)
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
            PID_FROM_WORKER = False
            LAYERS.clear()
            LAYERS.update(_no_layers())
            if SECCOMP is None:
                _load_seccomp()
            _probe_seccomp_alone()
        import gc

        gc.freeze()  # forked children then do not touch (copy) the worker's objects when they collect garbage
        zygote = Zygote()  # forked now, while this process has seen no request
        out = sys.stdout
        out.write(json.dumps({"ready": True, "mode": MODE, "layers": LAYERS}) + "\n")
        out.flush()
        run = zygote.prepare()
        for line in sys.stdin:
            if not line.strip():
                continue
            upcoming: list[Run] = []
            try:  # the zygote forks the next run while this one runs (two cores: off the critical path)
                result = handle(json.loads(line), run, functools.partial(_prepare_into, zygote, upcoming))
            except Exception as e:
                result = {"worker_error": f"{type(e).__name__}: {e}"}
            finally:
                zygote.release(run)
            out.write(json.dumps(result) + "\n")
            out.flush()
            _reap()
            run = upcoming[0] if upcoming else zygote.prepare()
            while _PENDING_CLEANUP:
                _remove_tree(_PENDING_CLEANUP.pop())
        zygote.release(run)
    finally:
        if zygote is not None:
            zygote.sock.close()
            try:
                os.kill(zygote.pid, signal.SIGKILL)
                os.waitpid(zygote.pid, 0)
            except OSError:
                pass
        while _PENDING_CLEANUP:
            _remove_tree(_PENDING_CLEANUP.pop())
        _remove_tree(BASE)
        # the directories of workers that died since this one started (a killed worker cleans up nothing, and
        # the sweep at start ran before they died): the last worker of a pool to stop leaves none behind
        sweep()


def _prepare_into(zygote: Zygote, box: list[Run]) -> None:
    box.append(zygote.prepare())


def _load_seccomp() -> None:
    global SECCOMP
    try:
        SECCOMP = _Seccomp()
    except OSError:
        SECCOMP = None


if __name__ == "__main__":
    main()
