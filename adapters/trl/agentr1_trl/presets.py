"""The defaults of a new ``agentr1 train`` run in one place (:data:`MAIN_JOB`, a :class:`RunPreset`), and the checks
every run's settings pass before a model is loaded (:func:`check_field_types`, :func:`build_config`).

Re-exported by :mod:`agentr1_trl.config`; kept apart from it because that module subclasses TRL's config and the
command line must start without importing TRL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agentr1_gym.errors import ConfigError

__all__ = ["MAIN_JOB", "MAIN_JOB_ENV", "RunPreset", "build_config", "check_field_types"]


@dataclass(frozen=True)
class RunPreset:
    """The defaults of a new ``agentr1 train`` run, in one place: the trainer config's fields (``trainer``), the
    run's own choices (``run``: algo, model, lora_r, lora_layers, warm_start, max_steps, env_id) and the env
    settings of its default env (``env_kwargs``; another env starts from its own defaults). Flags, a YAML config
    and ``--set`` go on top (:func:`agentr1_trl.cli.cmd_train`)."""

    trainer: Mapping[str, Any]
    run: Mapping[str, Any]
    env_kwargs: Mapping[str, Any]

    def settings(self) -> dict[str, Any]:
        """The flat settings of a new run before any flag (``env_kwargs`` follows from the env chosen)."""
        return {**self.trainer, **self.run}

    def env_kwargs_for(self, env_id: str) -> dict[str, Any]:
        """The env settings a run on ``env_id`` starts from: the preset's for its own env, none for another."""
        return dict(self.env_kwargs) if env_id == self.run["env_id"] else {}


#: the main job's env: 1-hop questions over a synthetic corpus
MAIN_JOB_ENV = "AgentR1/SyntheticMultihop-v0"

#: what ``agentr1 train`` runs with no flags: the README's main job
MAIN_JOB = RunPreset(
    trainer=MappingProxyType(
        {
            # two task seeds x four episodes per optimizer step, through the update four at a time: two passes of four
            # give the same update as one of eight (the dapo loss divides by the whole batch's action tokens) with half
            # its activations (the main job's peak memory: benchmarks/results/main_job.json)
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2,
            "num_generations": 4,
            # without gradient checkpointing the forward pass runs each group's shared prompt once (share_prompt_prefix;
            # benchmarks/results/update_step.json); a 135M model's activations fit without it
            "gradient_checkpointing": False,
            # chosen on validation seeds (300000+, benchmarks/learning.py --eval-seed), never on the held-out ones
            # (benchmarks/results/lr_selection.json)
            "learning_rate": 5e-4,
            "lr_scheduler_type": "constant",
            "beta": 0.0,
            # off: at a fixed wall-clock budget, plain GRPO learned more than with regenerated flat groups
            # (benchmarks/results/learning_fast.json); --set dynamic_sampling=true turns it on
            "dynamic_sampling": False,
            "max_new_tokens_per_turn": 48,
            "max_episode_tokens": 1536,
            "logging_steps": 1,
            # a checkpoint after every step, the last two kept: a killed run loses at most the step in progress
            "save_strategy": "steps",
            "save_steps": 1,
            "save_total_limit": 2,
            "report_to": "none",
            # at 1.0 the warm-started 135M model breaks the tool-call format in most sampled turns
            # (benchmarks/results/learning.json)
            "temperature": 0.7,
        }
    ),
    run=MappingProxyType(
        {
            "algo": "grpo",
            "model": "smollm2",
            "lora_r": 16,
            # LoRA on every decoder layer (K > 0: the top K only; benchmarks/results/step_cost.json)
            "lora_layers": 0,
            "warm_start": 32,
            "max_steps": 30,
            "env_id": MAIN_JOB_ENV,
        }
    ),
    # 1-hop questions in 3 turns (a search, a second look, the answer)
    env_kwargs=MappingProxyType({"max_hops": 1, "max_turns": 3}),
)


def check_field_types(config_cls: Any, settings: dict[str, Any]) -> None:
    """Refuse unknown fields (with a hint) and values of the wrong type before any model is loaded: a dataclass
    config would take ``learning_rate="abc"`` and fail deep inside the optimizer."""
    import dataclasses
    import difflib
    import types
    import typing

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for key, value in settings.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config field {key!r}{hint}")
        hint_type = hints.get(key)
        args = typing.get_args(hint_type)
        allowed = (
            set(args) if typing.get_origin(hint_type) in (typing.Union, types.UnionType) else {hint_type}
        )
        if value is None and type(None) in allowed:
            continue
        scalar = {t for t in allowed if t in (int, float, bool, str)}
        if not scalar or len(scalar) < len(allowed - {type(None)}):
            continue  # lists, dicts, enums, literals: left to the config's own checks
        ok = (
            (bool in scalar and isinstance(value, bool))
            or (int in scalar and isinstance(value, int) and not isinstance(value, bool))
            or (float in scalar and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (str in scalar and isinstance(value, str))
        )
        if not ok:
            names = " or ".join(sorted(t.__name__ for t in scalar))
            raise ConfigError(f"config field {key}={value!r}: expected {names}")


def build_config(config_cls: Any, settings: dict[str, Any]) -> Any:
    """The trainer config from CLI/YAML settings, with every problem as one ConfigError."""
    check_field_types(config_cls, settings)
    max_steps = settings.get("max_steps")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(
            f"max_steps must be a whole number >= 1 (got {max_steps!r}); the env stream is endless"
        )
    try:
        return config_cls(**settings)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad config: {str(exc).strip().splitlines()[0]}") from None
