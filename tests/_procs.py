"""Looking at the sandbox's processes from the host (through /proc), for the sandbox tests."""

from __future__ import annotations

import glob


def descendants(pid: int) -> list[int]:
    """Every live or zombie descendant of ``pid``."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in glob.glob(f"/proc/{p}/task/*/children"):
            try:
                with open(task) as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def worker_pids(sb) -> list[int]:
    """The pids of a sandbox's idle workers."""
    return [w.proc.pid for w in list(sb._idle)]
