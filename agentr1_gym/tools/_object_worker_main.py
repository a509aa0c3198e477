"""The worker process of :class:`agentr1_gym.tools.object_worker.ObjectWorker` (``python -c ... main() MEMORY_MB``).

It reads length-prefixed pickles on stdin: ``("load", {name: object})`` replaces its objects, ``("call", name,
method, kwargs, as_text)`` runs one method; it answers each on stdout: ``(True, detail)`` / ``(False, error)`` for a load,
``(True, value, attributes)`` or ``(False, error text, attributes)`` for a call. It exits at the end of its input.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from agentr1_gym.tools.object_worker import HEADER, _parent_death_signal, numeric_state_kept, send, value_text


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _limit_memory(memory_mb: float) -> None:
    try:
        import resource

        with open("/proc/self/status", encoding="ascii") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        limit = size + int(memory_mb * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError, StopIteration):
        pass  # no RLIMIT_AS here (not Linux): the deadline still holds


def main() -> None:
    _parent_death_signal()
    memory_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 512.0
    read_fd, write_fd = sys.stdin.buffer.fileno(), sys.stdout.buffer.fileno()
    sys.stdout = sys.stderr  # a method's prints never reach the answer pipe
    objects: dict[str, Any] = {}
    limited = False
    while True:
        head = _read_exact(read_fd, HEADER.size)
        if head is None:
            return
        body = _read_exact(read_fd, HEADER.unpack(head)[0])
        if body is None:
            return
        try:
            message = pickle.loads(body)
        except Exception as exc:  # a class the worker cannot import: said, and the worker waits for the next
            send(write_fd, (False, f"cannot read the request: {type(exc).__name__}: {exc}", None))
            continue
        if message[0] == "load":
            try:
                objects = dict(message[1])
                answer: Any = (True, sorted(objects))
            except Exception as exc:
                answer = (False, f"{type(exc).__name__}: {exc}")
            if not limited:  # the bound counts from the worker's size with its classes imported
                _limit_memory(memory_mb)
                limited = True
            send(write_fd, answer)
            continue
        _, name, method, kwargs, text = message
        obj = objects[name]
        try:
            with (
                numeric_state_kept()
            ):  # every call starts from the defaults, as a trusted in-process call does
                value = getattr(obj, method)(**kwargs)
                answer = (True, value_text(value) if text else value, dict(vars(obj)))
        except MemoryError:
            answer = (False, f"{method} needed more than {memory_mb:g} MB of memory", dict(vars(obj)))
        except Exception as exc:
            answer = (False, str(exc), dict(vars(obj)))
        try:
            send(write_fd, answer)
        except Exception as exc:  # the attributes themselves do not pickle: no state comes back
            send(write_fd, (False, f"the answer cannot be sent: {type(exc).__name__}", None))


if __name__ == "__main__":
    main()
