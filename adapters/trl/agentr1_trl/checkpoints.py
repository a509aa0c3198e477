"""Checkpoints that a kill cannot break.

Transformers writes ``checkpoint-N`` in place (weights, optimizer, scheduler, RNG, trainer state, then, for PPO,
our value head) and then deletes the oldest ones beyond ``save_total_limit``. A process killed in between leaves a
partial ``checkpoint-N`` that automatic resume picks and crashes on, while the previous, complete one may already
be rotated away. Here:

* a checkpoint is *complete* once :data:`COMPLETE_MARKER` exists in it, written (temp file + rename) after every
  other file of the checkpoint, the value head included;
* old checkpoints are rotated only after the new one is marked complete;
* resuming (``resume_from_checkpoint=True`` or a run directory) takes the newest complete checkpoint and moves
  partial ones aside (``.partial-checkpoint-N``), so a kill during a save never breaks resume; an explicit path
  to a partial checkpoint is refused with the name of the latest complete one.

The trainer side (overriding ``Trainer._save_checkpoint``) is
:class:`agentr1_trl.trl_trainer.DurableCheckpointsMixin`; this module holds the file-level rules.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from agentr1_gym.errors import ConfigError

__all__ = [
    "COMPLETE_MARKER",
    "is_complete",
    "latest_complete_checkpoint",
    "mark_complete",
    "resolve_resume",
]

COMPLETE_MARKER = "agentr1_complete.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_complete(checkpoint: str | Path) -> bool:
    return (Path(checkpoint) / COMPLETE_MARKER).is_file()


def mark_complete(checkpoint: str | Path, step: int) -> None:
    """Write the completion marker (temp file + rename) after every other file of the checkpoint."""
    path = Path(checkpoint)
    tmp = path / (COMPLETE_MARKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"step": step, "files": sorted(p.name for p in path.iterdir() if p != tmp)}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / COMPLETE_MARKER)


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    if not run_dir.is_dir():
        return []
    found = []
    for p in run_dir.iterdir():
        m = _CHECKPOINT.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_complete_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` in ``run_dir`` (None when there is none)."""
    complete = [p for _, p in _checkpoints(Path(run_dir)) if is_complete(p)]
    return complete[-1] if complete else None


def _set_partial_aside(run_dir: Path) -> list[Path]:
    moved = []
    for step, p in _checkpoints(run_dir):
        if not is_complete(p):
            target = run_dir / f".partial-checkpoint-{step}-{int(time.time())}"
            p.rename(target)
            moved.append(target)
    return moved


def resolve_resume(resume: Any, run_dir: str | Path) -> str | None:
    """What to resume from: ``None``/``False`` -> nothing; ``True`` -> the newest complete checkpoint of
    ``run_dir`` (None when the run has none yet); a run directory -> its newest complete checkpoint; a checkpoint
    directory -> itself if complete. Partial checkpoints in the run directory are moved aside."""
    if resume in (None, False, ""):
        return None
    target = Path(run_dir if resume is True else str(resume))
    if _CHECKPOINT.match(target.name):
        if not target.is_dir():
            raise ConfigError(f"checkpoint not found: {target}")
        if not is_complete(target):
            latest = latest_complete_checkpoint(target.parent)
            hint = f"; the latest complete one is {latest}" if latest else ""
            raise ConfigError(f"{target} is incomplete (the run was killed while saving it){hint}")
        return str(target)
    if resume is not True and not target.is_dir():
        raise ConfigError(f"nothing to resume: {target} is not a run directory")
    _set_partial_aside(target)
    latest = latest_complete_checkpoint(target)
    return str(latest) if latest else None
