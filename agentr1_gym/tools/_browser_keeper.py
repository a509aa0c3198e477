"""The keeper of one headless browser: run as a script (``python _browser_keeper.py CHROMEDRIVER USER_DATA_DIR``)
by :class:`agentr1_gym.tools.browser.Browser`, never imported by the package.

It starts ChromeDriver on a free loopback port in a process group of its own, becomes the child subreaper of
everything ChromeDriver and Chromium start (so their orphans come back to it, whatever process group they make),
prints ``ready PORT``, and then waits on its standard input. When the input ends (the env closed the browser, or
the process that started it died in any way, ``SIGKILL`` included: the kernel closes the pipe), it kills the
group and every descendant left, removes the browser's profile directory and exits. A browser therefore never
outlives the process that uses it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
READY_DEADLINE_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            # the command name is in parentheses and may hold spaces: the fields after it are fixed
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _kill_all(group: int) -> None:
    """Kill the driver's process group, then every descendant that came back to this subreaper, until none."""
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)
    me = os.getpid()
    for _ in range(200):
        left = _children(me)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        if not left:
            return
        time.sleep(0.01)


def _drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            pass


def main(argv: list[str]) -> int:
    driver_path, profile = argv[1], argv[2]
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    port = _free_port()
    driver = subprocess.Popen(
        [driver_path, f"--port={port}", "--allowed-ips=127.0.0.1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert driver.stdout is not None
    ready = False
    deadline = time.monotonic() + READY_DEADLINE_S
    buffer = b""
    while time.monotonic() < deadline and driver.poll() is None:
        if select.select([driver.stdout], [], [], 0.1)[0]:
            chunk = os.read(driver.stdout.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
            if b"started successfully" in buffer:
                ready = True
                break
    if ready:
        print(f"ready {port}", flush=True)
        # the driver's later output is read and dropped (a full pipe would block it)
        threading.Thread(target=_drain, args=(driver.stdout.fileno(),), daemon=True).start()
    else:
        tail = buffer.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        print(f"failed {tail[0][:300]}", flush=True)
    try:
        while ready and sys.stdin.buffer.read(4096):
            pass
    finally:
        _kill_all(driver.pid)
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the cleanup in main's finally still runs
    sys.exit(main(sys.argv))
