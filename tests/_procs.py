"""Looking at processes from the host (through /proc): the sandbox's, and the managed browsers'."""

from __future__ import annotations

import glob
import os


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


def processes_with(text: str) -> list[int]:
    """The pids of live processes whose command line contains ``text`` (a browser's profile directory: Chromium, its
    driver and helpers all carry it)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        out.append(int(entry))
            except OSError:  # gone while we looked
                continue
    return out
