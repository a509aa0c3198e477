"""The Python sandbox survives hostile or broken code, reports clearly, and leaves the host untouched."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from agentr1_gym.errors import ToolInfrastructureError
from agentr1_gym.tools.python import PythonSandbox, PythonTool, SandboxConfig, format_exec_result


@pytest.fixture(scope="module", params=[False, True], ids=["default", "pid-namespace"])
def sandbox(request):
    sb = PythonSandbox(
        SandboxConfig(
            timeout_s=3, cpu_s=2, memory_mb=512, file_mb=4, pool_size=2, pid_namespace=request.param
        )
    )
    yield sb
    sb.close()


def _healthy(sb):
    r = sb.run("print(sum(range(10)))")
    assert r.ok and r.stdout.strip() == "45"


def test_plain_run_and_stdin(sandbox):
    r = sandbox.run("import math, fractions\nprint(math.factorial(5))\nprint(input()[::-1])", stdin="abc\n")
    assert r.ok and r.stdout.split() == ["120", "cba"] and r.exit_code == 0 and not r.exception


def test_infinite_loop_is_stopped(sandbox):
    start = time.monotonic()
    r = sandbox.run("while True:\n    pass")
    assert not r.ok and time.monotonic() - start < 5
    assert r.timed_out or r.exception == "TimeoutError"
    _healthy(sandbox)


def test_sleep_past_the_wall_clock_is_killed(sandbox):
    r = sandbox.run("import time\ntime.sleep(30)", timeout_s=0.5)
    assert r.timed_out and "timed out" in format_exec_result(r)
    _healthy(sandbox)


def test_fork_bomb(sandbox):
    r = sandbox.run("import os\nwhile True:\n    os.fork()")
    assert not r.ok and r.exception == "PermissionError"
    r = sandbox.run("import subprocess\nsubprocess.run(['ls'])")
    assert r.exception == "PermissionError"
    _healthy(sandbox)


def test_ten_gigabytes(sandbox):
    r = sandbox.run("x = bytearray(10 * 1024 ** 3)")
    assert r.exception == "MemoryError"
    _healthy(sandbox)


def test_files_outside_the_sandbox(sandbox, tmp_path):
    target = tmp_path / "evil.txt"
    r = sandbox.run(f"open({str(target)!r}, 'w').write('x')")
    assert r.exception == "PermissionError" and not target.exists()
    r = sandbox.run("print(open('/etc/passwd').read())")
    assert r.exception == "PermissionError" and "root:" not in r.stdout
    r = sandbox.run("import os\nos.remove('/etc/hostname')")
    assert r.exception == "PermissionError"
    # inside its own directory, files work and are gone afterwards
    r = sandbox.run("import os\nopen('a.txt', 'w').write('hi')\nprint(open('a.txt').read(), os.getcwd())")
    assert r.ok and r.stdout.startswith("hi ")
    workdir = r.stdout.split()[1]
    for _ in range(200):  # the worker removes it right after sending the reply
        if not os.path.exists(workdir):
            break
        time.sleep(0.01)
    assert not os.path.exists(workdir)


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


def test_killing_the_parent_fails(sandbox):
    me = os.getpid()
    r = sandbox.run(
        f"import os, signal\nos.kill({me}, signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)"
    )
    assert not r.ok
    assert os.getpid() == me  # still here
    _healthy(sandbox)


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


def test_input_without_stdin_returns(sandbox):
    r = sandbox.run("x = input()")
    assert r.exception == "EOFError"


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


def test_dead_worker_is_an_infrastructure_error_then_recovers():
    sb = PythonSandbox(SandboxConfig(pool_size=1))
    _healthy(sb)
    worker = sb._idle.get()
    worker.proc.kill()
    worker.proc.wait()
    sb._idle.put(worker)
    with pytest.raises(ToolInfrastructureError):
        sb.run("print(1)")
    _healthy(sb)  # a fresh worker replaces the dead one
    sb.close()


def test_python_tool_result():
    tool = PythonTool(PythonSandbox(SandboxConfig(pool_size=1)))
    ok, bad = tool.execute_batch([tool.validate({"code": "print('hi')"}), tool.validate({"code": "1/0"})])
    assert ok.success and ok.content == "exit code 0\nstdout:\nhi\n" and ok.metadata["exit_code"] == 0
    assert not bad.success and "exit code 1 (ZeroDivisionError)" in bad.content
    tool.sandbox.close()
