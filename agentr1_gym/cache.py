"""The one on-disk cache directory and the one process-wide shared-instance helper.

Indexes (BM25, Lucene, dense), the default policy's weights and other derived artefacts live under
:func:`cache_dir`. Expensive objects that every env in a process can share (a retriever over a corpus, a sandbox
worker pool) are built once per key with :func:`shared`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["cache_dir", "clear_shared", "shared"]

T = TypeVar("T")

_LOCK = threading.Lock()
_SHARED: dict[tuple[str, Hashable], Any] = {}


def cache_dir() -> Path:
    """``$AGENTR1_CACHE``, else ``$XDG_CACHE_HOME/agentr1_gym``, else ``~/.cache/agentr1_gym``."""
    if env := os.environ.get("AGENTR1_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "agentr1_gym"


def shared(kind: str, key: Hashable, build: Callable[[], T]) -> T:
    """The process-wide instance of ``kind`` for ``key``, built by ``build()`` on first use.

    ``build`` runs outside the lock (building may take seconds, or start a JVM) and, if two threads race, the
    first stored instance wins and is returned to both.
    """
    slot = (kind, key)
    with _LOCK:
        found = _SHARED.get(slot)
    if found is None:
        made = build()
        with _LOCK:
            found = _SHARED.setdefault(slot, made)
    return found


def clear_shared(kind: str | None = None) -> None:
    """Forget shared instances (of one ``kind``, or all); objects still referenced elsewhere live on."""
    with _LOCK:
        for slot in [s for s in _SHARED if kind is None or s[0] == kind]:
            del _SHARED[slot]
