"""Loopback listeners for the tests' misbehaving servers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def listener(backlog: int = 16) -> tuple[socket.socket, str]:
    """A socket listening on a free loopback port, and its base URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def accept_each(
    sock: socket.socket,
    stop: threading.Event,
    handle: Callable[[socket.socket], None],
    *,
    threads: bool = False,
) -> None:
    """Hand each connection to ``handle`` (in a thread of its own with ``threads``) until ``stop`` is set."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        if threads:
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
        else:
            with conn:
                handle(conn)
