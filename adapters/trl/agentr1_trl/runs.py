"""A training run's own record, ``run_config.json``, and the rules for resuming a run.

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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentr1_gym.episodes import RunFiles
from agentr1_gym.errors import ConfigError

__all__ = [
    "IDENTITY",
    "RUN_FILE",
    "RUN_FORMAT",
    "check_checkpoint_matches",
    "merge_resume_overrides",
    "read_run_file",
    "write_run_file",
]

#: the settings of a run, written at its start, read by ``--resume``
RUN_FILE = RunFiles.config
#: the record's format tag (records from before it existed have none and are read the same way)
RUN_FORMAT = "agentr1-train/1"
#: what defines a run, and why it cannot change when the run resumes
IDENTITY: dict[str, str] = {
    "algo": "its checkpoints hold that algorithm's optimizer state (and PPO's value head)",
    "model": "its adapter was trained on that base model",
    "lora_r": "its adapter and optimizer state have that rank",
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


def check_checkpoint_matches(checkpoint: str | Path, algo: str, lora_r: int) -> None:
    """Refuse, in one line, a checkpoint that the run's algorithm or LoRA rank cannot load (a record edited by
    hand, or a checkpoint copied in from another run)."""
    ckpt = Path(checkpoint)
    adapter_config = ckpt / "adapter_config.json"
    if adapter_config.is_file():
        try:
            rank = json.loads(adapter_config.read_text(encoding="utf-8")).get("r")
        except (ValueError, OSError, AttributeError):
            raise ConfigError(f"{adapter_config}: not a readable adapter config") from None
        if rank != lora_r:
            raise ConfigError(
                f"{ckpt} holds a LoRA adapter of rank {rank}, but the run's lora_r is {lora_r}; "
                f"fix lora_r in {ckpt.parent / RUN_FILE} or start a new run"
            )
    has_value_head = (ckpt / "value_head.pt").is_file()
    if has_value_head != (algo == "ppo"):
        made_by = "PPO (it has a value head)" if has_value_head else "GRPO (it has no value head)"
        raise ConfigError(
            f"{ckpt} was written by {made_by}, but the run's algo is {algo}; "
            f"fix algo in {ckpt.parent / RUN_FILE} or start a new run"
        )
