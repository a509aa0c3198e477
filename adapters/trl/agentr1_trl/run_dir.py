"""One room for a training run's directory: what it is called and holds (:data:`OUTPUTS`, ``RunFiles``), its
record (``run_config.json``) and the rules for resuming it, checkpoints that a kill cannot break, and the checks
a new run makes before it writes there (an earlier run is refused unless ``--overwrite``; the directory must take
files).

**The record and resuming.** A training run's own record, ``run_config.json``, and the rules for resuming a run.

``agentr1 train`` writes the record once the run's settings are checked and its model loaded; ``--resume DIR``
reads it back. The rules:

* a run is the directory the user names: a moved or copied run resumes where it now is (the ``output_dir``
  stored in the record is only history);
* what defines a run cannot change on resume (:data:`IDENTITY`: the algorithm, the base model, the LoRA rank, the
  warm start, the env and its settings): a different value is refused in one line, before anything is written,
  and the checkpoint itself is checked (its adapter's rank, its value head) so that an edited record cannot get
  through either;
* everything else (learning rate, max steps, server URLs, deadlines, ...) is applied, written to the record and
  printed;
* a damaged or foreign record is one line naming the file and the field.

**Durable checkpoints.** Checkpoints that a kill cannot break.

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
import shutil
import time
from pathlib import Path
from typing import Any

from agentr1_gym.episodes import RunFiles
from agentr1_gym.errors import ConfigError

__all__ = [
    "COMPLETE_MARKER",
    "IDENTITY",
    "OUTPUTS",
    "RUN_FILE",
    "RUN_FORMAT",
    "check_checkpoint_matches",
    "check_writable",
    "clear_or_refuse",
    "earlier_run",
    "is_complete",
    "latest_complete_checkpoint",
    "mark_complete",
    "merge_resume_overrides",
    "read_run_file",
    "resolve_resume",
    "write_run_file",
]


#: every file and directory a finished run leaves in its output dir, with what it is
OUTPUTS = {
    RunFiles.adapter: "the trained LoRA adapter and its tokenizer",
    RunFiles.card: "this run's model card",
    RunFiles.config: "the run's settings (what --resume reads)",
    RunFiles.metrics: "the trainer's metrics, one line per logged step",
    RunFiles.curve: "return, success and format rates per step, held-out success before and after",
    RunFiles.episodes: "saved training and held-out episodes, token by token (agentr1 view reads them)",
    RunFiles.eval_before: "the held-out evaluation before RL",
    RunFiles.eval_after: "the held-out evaluation after RL",
}

#: the settings of a run, written at its start, read by ``--resume``
RUN_FILE = RunFiles.config
#: the record's format tag (records from before it existed have none and are read the same way)
RUN_FORMAT = "agentr1-train/1"
#: what defines a run, and why it cannot change when the run resumes
IDENTITY: dict[str, str] = {
    "algo": "its checkpoints hold that algorithm's optimizer state (and PPO's value head)",
    "model": "its adapter was trained on that base model",
    "lora_r": "its adapter and optimizer state have that rank",
    "lora_layers": "its adapter and optimizer state cover those layers",
    "warm_start": "the warm start ran before step 1 and is in the adapter",
    "env_id": "its metrics and its held-out evaluation before RL are on that env",
    "env_kwargs": "its metrics and its held-out evaluation before RL are on those env settings",
    "agent": "its adapter was trained through that agent's own loop",
    "agent_tasks": "its metrics and its held-out evaluation before RL are on those tasks",
}
_TOP_LEVEL = {"algo": str, "model": str, "lora_r": int, "warm_start": int}
_KIND = {str: "a string", int: "a whole number", dict: "an object"}


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def read_run_file(path: Path) -> dict[str, Any]:
    """The record at ``path``, checked field by field; any problem is a :class:`ConfigError` of one line that
    names the file and the field."""
    if not path.exists():
        raise ConfigError(
            f"nothing to resume in {path.parent}: no {RUN_FILE} (was it started by agentr1 train?)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a run record") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text (damaged?)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        run = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); damaged or cut short?") from None
    if not isinstance(run, dict):
        raise ConfigError(f"{path}: a JSON {_type_name(run)}, not the object agentr1 train writes")
    if "format" in run and run["format"] != RUN_FORMAT:
        raise ConfigError(f"{path}: field 'format' is {run['format']!r}; this version reads {RUN_FORMAT!r}")
    if "settings" not in run:
        raise ConfigError(f"{path}: no field 'settings'; not a record written by agentr1 train")
    if not isinstance(run["settings"], dict):
        raise ConfigError(f"{path}: field 'settings' must be an object, got {_type_name(run['settings'])}")
    for key, kind in _TOP_LEVEL.items():
        if key not in run:
            raise ConfigError(f"{path}: no field {key!r}")
        value = run[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"{path}: field {key!r} must be {_KIND[kind]}, got {value!r}")
    if run["algo"] not in ("grpo", "ppo"):
        raise ConfigError(f"{path}: field 'algo' must be 'grpo' or 'ppo', got {run['algo']!r}")
    if run["lora_r"] < 1 or run["warm_start"] < 0:
        raise ConfigError(f"{path}: fields 'lora_r' >= 1 and 'warm_start' >= 0 expected")
    layers = run.get("lora_layers", 0)  # absent from records written before the field: every layer
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 0:
        raise ConfigError(f"{path}: field 'lora_layers' must be a whole number >= 0, got {layers!r}")
    settings = run["settings"]
    for key, kind in (("env_id", str), ("env_kwargs", dict), ("max_steps", int)):
        if key not in settings:
            raise ConfigError(f"{path}: no field 'settings.{key}'")
        if not isinstance(settings[key], kind) or isinstance(settings[key], bool):
            raise ConfigError(f"{path}: field 'settings.{key}' must be {_KIND[kind]}, got {settings[key]!r}")
    return run


def write_run_file(path: Path, run: dict[str, Any]) -> None:
    """Write the record whole or not at all (a temp file renamed over the old one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"format": RUN_FORMAT, **run}, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def merge_resume_overrides(
    run_dir: Path, saved: dict[str, Any], overrides: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The resumed run's settings (the record's, with ``overrides`` applied) and a line per applied change.
    ``saved``: the flat settings of the record (its ``settings`` plus ``algo``, ``model``, ``lora_r``,
    ``warm_start``). An override of an :data:`IDENTITY` field, or an ``output_dir`` other than ``run_dir``,
    raises :class:`ConfigError` before anything is written."""
    merged = dict(saved)
    changes = []
    for key, value in overrides.items():
        if key == "output_dir":
            if Path(str(value)).resolve() != run_dir.resolve():
                raise ConfigError(
                    f"--resume {run_dir} resumes the run in that directory; output_dir={value} names another "
                    "(start a new run there without --resume)"
                )
            continue
        old = saved.get(key)
        if value == old:
            continue
        if key in IDENTITY:
            raise ConfigError(
                f"cannot resume {run_dir} with {key}={json.dumps(value)}: it was started with "
                f"{key}={json.dumps(old)} and {IDENTITY[key]}; start a new run (another --output-dir) for that"
            )
        merged[key] = value
        changes.append(f"{key} {json.dumps(old) if key in saved else '(unset)'} -> {json.dumps(value)}")
    merged["output_dir"] = str(run_dir)
    return merged, changes


def check_checkpoint_matches(checkpoint: str | Path, algo: str, lora_r: int, lora_layers: int = 0) -> None:
    """Refuse, in one line, a checkpoint that the run's algorithm, LoRA rank or adapted layers cannot load (a
    record edited by hand, or a checkpoint copied in from another run)."""
    ckpt = Path(checkpoint)
    adapter_config = ckpt / "adapter_config.json"
    if adapter_config.is_file():
        try:
            saved = json.loads(adapter_config.read_text(encoding="utf-8"))
            rank, layers = saved.get("r"), saved.get("layers_to_transform")
        except (ValueError, OSError, AttributeError):
            raise ConfigError(f"{adapter_config}: not a readable adapter config") from None
        if rank != lora_r:
            raise ConfigError(
                f"{ckpt} holds a LoRA adapter of rank {rank}, but the run's lora_r is {lora_r}; "
                f"fix lora_r in {ckpt.parent / RUN_FILE} or start a new run"
            )
        held = len(layers) if isinstance(layers, list) else (1 if isinstance(layers, int) else 0)
        if held != lora_layers:
            where = f"the top {held} layer{'s' if held > 1 else ''}" if held else "every layer"
            raise ConfigError(
                f"{ckpt} holds a LoRA adapter on {where}, but the run's lora_layers is {lora_layers}; "
                f"fix lora_layers in {ckpt.parent / RUN_FILE} or start a new run"
            )
    has_value_head = (ckpt / "value_head.pt").is_file()
    if has_value_head != (algo == "ppo"):
        made_by = "PPO (it has a value head)" if has_value_head else "GRPO (it has no value head)"
        raise ConfigError(
            f"{ckpt} was written by {made_by}, but the run's algo is {algo}; "
            f"fix algo in {ckpt.parent / RUN_FILE} or start a new run"
        )


# ---- durable checkpoints ------------------------------------------------------------------------------------
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


# ---- a new run's directory ----------------------------------------------------------------------------------
def check_writable(output_dir: Path) -> None:
    """The output dir exists (made if needed) and takes files: one line if not, before any model loads."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / f".agentr1-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write to the output dir {output_dir}: {exc.strerror or exc}") from None


def earlier_run(output_dir: Path) -> list[Path]:
    """What an earlier run left in ``output_dir``: its checkpoints and outputs."""
    if not output_dir.is_dir():
        return []
    found = sorted(output_dir.glob("checkpoint-*"))
    return found + [output_dir / name for name in OUTPUTS if (output_dir / name).exists()]


def clear_or_refuse(output_dir: Path, *, overwrite: bool, remove: bool) -> None:
    """A new run into a directory holding another: refused (one line saying what to do); with ``overwrite`` the
    earlier run's checkpoints and outputs are removed when ``remove`` (once the policy has loaded: a command that
    fails never costs the earlier run anything), and said so."""
    earlier = earlier_run(output_dir)
    if not earlier:
        return
    names = ", ".join(p.name for p in earlier[:4]) + (", ..." if len(earlier) > 4 else "")
    if not overwrite:
        raise ConfigError(
            f"{output_dir} holds an earlier run ({names}): --resume continues it, --overwrite starts it over, "
            "--output-dir DIR trains elsewhere"
        )
    if remove:
        for path in earlier:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        print(f"--overwrite: removed the earlier run in {output_dir} ({names})", flush=True)
