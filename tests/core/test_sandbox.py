"""The Python sandbox: hostile code is contained by the kernel, the host stays untouched, the pool recovers.

CI runs these as root, where every layer must hold (user, mount, PID and network namespaces, seccomp). Each
attack runs on both kernel paths: the one root takes (the worker gives each run its PID namespace) and the one
unprivileged hosts take (each run forks once more inside its namespace).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from _procs import descendants, worker_pids

from agentr1_gym.errors import ToolInfrastructureError
from agentr1_gym.tools.python import PythonSandbox, PythonTool, SandboxConfig, format_exec_result

pytestmark = pytest.mark.interpreter  # CI runs these again from a virtualenv

ROOT = os.geteuid() == 0
CONFIG = SandboxConfig(timeout_s=3, cpu_s=2, memory_mb=512, file_mb=4, pool_size=2)


#: the kernel paths a run can take: as root (the zygote gives each run its PID namespace), as an unprivileged
#: host does (one more fork per run), and as root where user namespaces are refused (plain namespaces and a
#: real drop to nobody)
KERNEL_PATHS = {
    "pid-from-worker": {},
    "pid-per-fork": {"pid_per_fork": True},
    "no-user-namespace": {"user_namespace": False},
}


@pytest.fixture(scope="module", params=list(KERNEL_PATHS))
def sandbox(request):
    sb = PythonSandbox(CONFIG, **KERNEL_PATHS[request.param])
    yield sb
    sb.close()


@pytest.fixture(scope="module")
def guarded():
    """No kernel namespaces at all (isolation='off'): rlimits, seccomp, a drop to nobody and Python guards."""
    sb = PythonSandbox(CONFIG.model_copy(update={"isolation": "off"}))
    yield sb
    sb.close()


@pytest.fixture
def host_process():
    """A host process with a secret in its environment, to be attacked."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, "AGENTR1_SECRET": "s3cr3t-value"},
    )
    yield proc
    proc.kill()
    proc.wait()


def _healthy(sb):
    r = sb.run("print(sum(range(10)))")
    assert r.ok and r.stdout.strip() == "45"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.skipif(
    not ROOT or sys.platform != "linux", reason="every layer is asserted where CI runs (root)"
)
def test_every_kernel_layer_holds_as_root(sandbox):
    assert sandbox.isolation == {
        "user_namespace": "--no-user-namespace" not in sandbox._flags,
        "unprivileged": True,
        "mount_namespace": True,
        "pid_namespace": True,
        "network_namespace": True,
        "seccomp": True,
    }


def test_plain_run_stdin_threads_and_imports(sandbox):
    r = sandbox.run(
        "import math, fractions, sqlite3, json, threading\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(math.factorial(5)))\n"
        "t.start(); t.join()\n"
        "print(out[0])\nprint(input()[::-1])",
        stdin="abc\n",
    )
    assert r.ok and r.stdout.split() == ["120", "cba"] and r.exit_code == 0 and not r.exception, r


def test_the_run_sees_a_private_read_only_root(sandbox):
    r = sandbox.run(
        "import os\nprint(sorted(os.listdir('/')))\nprint(os.getcwd(), os.getpid())\n"
        "open('/tmp/mine.txt', 'w').write('ok')\nprint(open('/tmp/mine.txt').read())\n"
        "try:\n    open('/usr/evil', 'w')\nexcept OSError as e:\n    print('usr', e.errno)\n"
    )
    top = set(eval(r.stdout.splitlines()[0]))
    assert not top & {"etc", "proc", "home", "sys", "var", "opt", "mnt", "srv", "work"}
    assert top >= {"tmp", "usr", "dev"}
    cwd, pid = r.stdout.splitlines()[1].split()
    assert cwd == "/tmp" and pid == "1"
    assert "ok" in r.stdout and "usr 30" in r.stdout  # EROFS


def test_ctypes_cannot_run_commands_or_make_processes(sandbox, tmp_path):
    marker = tmp_path / "pwned"
    r = sandbox.run(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"print('system', libc.system(b'id > {marker}; touch {marker}'))\n"
        "print('clone', libc.syscall(56, 17, 0, 0, 0, 0))\n"  # raw clone(SIGCHLD): a new process
        "print('fork', libc.fork())\n"
    )
    assert not marker.exists()
    assert "system 32512" in r.stdout  # glibc's "could not start the shell": no child was made
    assert "clone -1" in r.stdout and "fork -1" in r.stdout, r
    _healthy(sandbox)


def test_fork_bomb_subprocess_and_reimported_subprocess(sandbox):
    r = sandbox.run("import os\nwhile True:\n    os.fork()")
    assert not r.ok and r.exception == "PermissionError"
    r = sandbox.run(
        "import sys\nsys.modules.pop('subprocess', None)\nimport importlib, subprocess\n"
        "importlib.reload(subprocess)\nprint(subprocess.run(['id'], capture_output=True).stdout)"
    )
    assert r.exception == "PermissionError" and "uid=" not in r.stdout
    r = sandbox.run("import os\nos.execv('/usr/bin/id', ['id'])")
    assert r.exception == "PermissionError"
    _healthy(sandbox)


def test_host_secrets_cannot_be_read(sandbox, host_process):
    attacks = [
        "print(open('/etc/shadow').read())",
        "import io\nprint(io.FileIO('/etc/shadow').read())",
        "import posix\nfd = posix.open('/etc/shadow', posix.O_RDONLY)\nprint(posix.read(fd, 4096))",
        "import _io\nprint(_io.open('/etc/passwd').read())",
        f"print(open('/proc/{host_process.pid}/environ', 'rb').read())",
        "import os\nfor p in os.listdir('/proc'):\n"
        "    try:\n        print(open(f'/proc/{p}/environ', 'rb').read())\n    except OSError:\n        pass",
        f"f = open('/proc/{host_process.pid}/mem', 'rb')\nprint(f.read(100))",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())",  # PTRACE_ATTACH
    ]
    for code in attacks:
        r = sandbox.run(code)
        assert "s3cr3t-value" not in r.stdout and "root:" not in r.stdout, (code, r)
    assert host_process.poll() is None


def test_host_processes_and_the_worker_cannot_be_killed(sandbox, host_process):
    me = os.getpid()
    workers = worker_pids(sandbox)
    r = sandbox.run(
        "import ctypes, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"for pid in ({me}, {host_process.pid}, *{workers!r}, os.getppid(), -1, 1):\n"
        "    print(pid, libc.kill(pid, 9), ctypes.get_errno())\n"
        f"os.kill({host_process.pid}, signal.SIGKILL)\n"
    )
    assert not r.ok
    time.sleep(0.2)
    assert host_process.poll() is None and os.getpid() == me
    for pid in workers:
        os.kill(pid, 0)  # still alive
    _healthy(sandbox)


def test_no_background_process_survives_a_run(sandbox, tmp_path):
    r = sandbox.run(
        "import ctypes, threading, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "pid = libc.syscall(56, 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n    while True:\n        open('/tmp/bg', 'a').write('x')\n        time.sleep(0.05)\n"
        "threading.Thread(target=lambda: time.sleep(60), daemon=False).start()\n"
        "print('parent', pid, flush=True)\n"
        "import os\nos._exit(0)\n"
    )
    assert "parent -1" in r.stdout
    time.sleep(0.3)
    # every process of this sandbox descends from one of its workers (each worker is its runs' subreaper, so
    # an orphan would be re-parented there): only the zygote and the prepared next run may be alive, waiting
    per_run = 1 + (2 if "--pid-per-fork" in sandbox._flags else 1)
    for worker in worker_pids(sandbox):
        live = [p for p in descendants(worker) if _state(p) not in ("Z", "X", "")]
        assert len(live) <= per_run, (worker, live)
    _healthy(sandbox)


def test_writes_outside_the_run_directory_fail(sandbox, tmp_path):
    target = tmp_path / "evil.txt"
    for path in (str(target), "/dev/shm/agentr1-evil", "/etc/agentr1-evil", "/usr/agentr1-evil"):
        r = sandbox.run(f"open({path!r}, 'w').write('x')")
        assert not r.ok and r.exception in {"FileNotFoundError", "OSError", "PermissionError"}, (path, r)
    assert not target.exists() and not os.path.exists("/dev/shm/agentr1-evil")
    assert not os.path.exists("/etc/agentr1-evil") and not os.path.exists("/usr/agentr1-evil")


def test_symlinked_output_does_not_leak_host_files(sandbox):
    """The worker reads output from descriptors it holds, never from paths the code controls."""
    r = sandbox.run(
        "import os\nfor name in ('.stdout', '.stderr', 'stdout'):\n"
        "    try:\n        os.symlink('/etc/shadow', '/tmp/' + name)\n    except OSError:\n        pass\n"
        "print('done')"
    )
    assert r.stdout == "done\n" and "root:" not in r.stderr


@pytest.mark.slow
def test_status_pipe_abuse_does_not_hang_or_break_the_pool(sandbox):
    fake = '{"exit": 0, "exception": ""}'
    start = time.monotonic()
    r = sandbox.run(
        "import os, time\n"
        f"for fd in range(3, 64):\n    try:\n        os.write(fd, b'{fake}')\n    except OSError:\n        pass\n"
        "time.sleep(30)",
        timeout_s=2,
    )
    # a forged report only ends the code's own run early, with its own (empty) output
    assert time.monotonic() - start < 1.5 and not r.timed_out and r.exit_code == 0 and r.stdout == ""
    _healthy(sandbox)
    r = sandbox.run(
        "import os, time\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{' * 10000)\n"
        "    except OSError:\n        pass\ntime.sleep(30)",
        timeout_s=1,
    )
    assert r.timed_out
    _healthy(sandbox)


@pytest.mark.slow
def test_infinite_loop_sleep_and_memory(sandbox):
    start = time.monotonic()
    r = sandbox.run("while True:\n    pass")
    assert not r.ok and time.monotonic() - start < 5
    assert r.timed_out or r.exception == "TimeoutError"
    r = sandbox.run("import time\ntime.sleep(30)", timeout_s=0.5)
    assert r.timed_out and "timed out" in format_exec_result(r)
    r = sandbox.run("x = bytearray(10 * 1024 ** 3)")
    assert r.exception == "MemoryError"
    _healthy(sandbox)


def test_no_network(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = sandbox.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
        assert not r.ok and r.exception in {"PermissionError", "OSError", "ConnectionRefusedError"}
        server.settimeout(0.2)
        with pytest.raises(OSError):
            server.accept()  # nothing ever connected
    finally:
        server.close()


def test_printing_100_mb_is_cut(sandbox):
    r = sandbox.run("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1024 * 1024)")
    assert len(r.stdout) <= 8000 and r.stdout_truncated > 0
    assert "truncated" in format_exec_result(r)
    _healthy(sandbox)


def test_syntax_error_and_exit_codes(sandbox):
    r = sandbox.run("def f(:\n    pass")
    assert r.exception == "SyntaxError" and "<sandbox>" in r.stderr and "_sandbox_worker" not in r.stderr
    assert sandbox.run("raise SystemExit(3)").exit_code == 3
    assert sandbox.run("1/0").exception == "ZeroDivisionError"
    assert sandbox.run("x = input()").exception == "EOFError"


def test_killing_itself_is_an_observation(sandbox):
    r = sandbox.run("import ctypes\nctypes.string_at(0)")  # a real segfault
    assert not r.ok and r.exit_code < 0
    _healthy(sandbox)


def test_parallel_runs(sandbox):
    results = sandbox.run_many([f"print({i} * 2)" for i in range(8)])
    assert [r.stdout.strip() for r in results] == [str(i * 2) for i in range(8)]
    out = []
    threads = [threading.Thread(target=lambda: out.append(sandbox.run("print(7)").stdout)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == ["7\n"] * 4


def test_a_worker_killed_from_outside_is_replaced_and_the_run_retried():
    sb = PythonSandbox(SandboxConfig(pool_size=1))
    _healthy(sb)
    (worker,) = sb._idle
    worker.proc.kill()
    worker.proc.wait()
    r = sb.run("print(1)")  # retried on a fresh worker: no exception reaches env.step
    assert r.ok and r.stdout == "1\n"
    _healthy(sb)
    assert sb._started == 1 and sb._idle[0] is not worker
    sb.close()


def test_a_worker_that_cannot_start_is_an_infrastructure_error(monkeypatch):
    import agentr1_gym.tools.python as py

    monkeypatch.setattr(py, "_WORKER", "/nonexistent/worker.py")
    sb = PythonSandbox(SandboxConfig(pool_size=1))
    with pytest.raises(ToolInfrastructureError):
        sb.run("print(1)")


def test_guards_without_kernel_layers(guarded, tmp_path):
    """Without namespaces (isolation='off') the code still runs as nobody under seccomp and rlimits, and the
    Python-level guards refuse the common accidents."""
    layers = guarded.isolation
    assert not layers["mount_namespace"] and not layers["pid_namespace"] and layers["unprivileged"]
    r = guarded.run("import os\nprint(os.getuid())\nwhile True:\n    os.fork()")
    assert not r.ok and r.exception == "PermissionError"
    if ROOT:
        assert r.stdout.strip() == "65534"
    target = tmp_path / "evil.txt"
    r = guarded.run(f"open({str(target)!r}, 'w').write('x')")
    assert r.exception == "PermissionError" and not target.exists()
    _healthy(guarded)


def test_a_missing_layer_refuses_or_warns(monkeypatch):
    """isolation='kernel' (the default) refuses to run code without every required layer; 'best_effort' warns
    once and runs."""
    import agentr1_gym.tools.python as py

    real_init = py._Worker.__init__

    def without_seccomp(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.layers["seccomp"] = False  # as a kernel without seccomp would report

    monkeypatch.setattr(py._Worker, "__init__", without_seccomp)
    strict = PythonSandbox(SandboxConfig(pool_size=1))
    with pytest.raises(ToolInfrastructureError, match=r"seccomp.*isolation=.best_effort."):
        strict.run("print(1)")
    assert strict._started == 0  # the refused worker was stopped, not counted
    lax = PythonSandbox(SandboxConfig(pool_size=1, isolation="best_effort"))
    with pytest.warns(RuntimeWarning, match="seccomp"):
        assert lax.isolation["seccomp"] is False
    assert lax.run("print(2)").stdout == "2\n"
    lax.close()


def test_old_isolation_settings_still_work():
    with pytest.warns(DeprecationWarning, match="isolation="):
        assert SandboxConfig(namespaces=False).isolation == "off"
    with pytest.warns(DeprecationWarning):
        assert SandboxConfig(require_isolation=True).isolation == "kernel"
    with pytest.warns(DeprecationWarning):
        assert SandboxConfig(require_isolation=False).isolation == "best_effort"


def test_python_tool_result():
    tool = PythonTool(PythonSandbox(SandboxConfig(pool_size=1)))
    ok, bad = tool.execute_batch([tool.validate({"code": "print('hi')"}), tool.validate({"code": "1/0"})])
    assert ok.success and ok.content == "exit code 0\nstdout:\nhi\n" and ok.metadata["exit_code"] == 0
    assert not bad.success and "exit code 1 (ZeroDivisionError)" in bad.content
    tool.sandbox.close()
