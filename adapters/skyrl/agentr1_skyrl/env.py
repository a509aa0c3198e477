"""The ``skyrl_gym.BaseTextEnv`` over an ``AgentR1/*`` Gymnasium env."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skyrl_gym import register, registry
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

import agentr1_gym
from agentr1_gym.context import require_full_context
from agentr1_gym.errors import ConfigError

__all__ = ["GENERIC_ID", "AgentR1SkyRLEnv", "register_skyrl_envs", "skyrl_dataset"]

#: the skyrl_gym id whose AgentR1 env id comes from each dataset row (``extra_info.env_id``)
GENERIC_ID = "agentr1"
_ROW_KEYS = ("env_id", "seed", "env_kwargs", "max_turns", "task_index")


def _settings(extras: dict[str, Any] | None) -> dict[str, Any]:
    """The row's settings: top-level extras win over ``extra_info`` (SkyRL passes both)."""
    extras = dict(extras or {})
    info = extras.get("extra_info") or {}
    if not isinstance(info, dict):
        raise ConfigError(f"extra_info must be a mapping, got {type(info).__name__}")
    merged = {k: info[k] for k in _ROW_KEYS if k in info}
    merged.update({k: extras[k] for k in _ROW_KEYS if k in extras})
    return merged


class AgentR1SkyRLEnv(BaseTextEnv):
    """An ``AgentR1/*`` env for SkyRL: ``init`` resets it (the row's seed) and returns its first messages (the
    tools are described in them, so templates without a tools argument work); each ``step`` passes the assistant
    turn to ``env.step`` and returns the new messages (tool responses, or the explanation of a malformed turn) as
    observations, the step's reward (process rewards on every step, the outcome on the last: SkyRL's per-step
    rewards), ``done`` when the env terminates or truncates itself at ``max_turns`` (scored either way), and in
    ``metadata`` the step's ``reward_components``, ``action_error`` and, at the end, the episode ``metrics``
    (``success``, ``score``, ``format_ok``, ``turns`` and the answer metrics), which :meth:`get_metrics` also
    returns."""

    def __init__(
        self, env_config: Any = None, extras: dict[str, Any] | None = None, env_id: str | None = None
    ):
        super().__init__()
        settings = _settings(extras)
        env_id = settings.get("env_id") or env_id
        if not env_id:
            raise ConfigError(
                f"skyrl_gym env {GENERIC_ID!r} needs the AgentR1 env id in the row's extra_info.env_id "
                "(or use env_class='AgentR1/...' directly)"
            )
        kwargs = dict(settings.get("env_kwargs") or {})
        if settings.get("max_turns") is not None:
            kwargs["max_turns"] = int(settings["max_turns"])
        self.env = agentr1_gym.make(env_id, **kwargs)
        require_full_context(self.env, "SkyRL")
        self.env_id = env_id
        self.seed = settings.get("seed")
        self.task_index = settings.get("task_index")
        self.max_turns = self.env.unwrapped.max_turns
        self._messages: list[dict[str, Any]] = []
        self._metrics: dict[str, float] = {}

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset with the row's seed; the env writes the prompt (the row's ``prompt`` is only a placeholder)."""
        options = {"task_index": int(self.task_index)} if self.task_index is not None else None
        _, info = self.env.reset(seed=None if self.seed is None else int(self.seed), options=options)
        self.turns = 0
        self._metrics = {}
        self._messages = [dict(m) for m in info["messages"]]
        return [dict(m) for m in self._messages], {"task_id": info.get("task_id"), "tools": info.get("tools")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        _, reward, terminated, truncated, info = self.env.step(action)
        messages = info.get("messages", [])
        new = [dict(m) for m in messages[len(self._messages) + 1 :]]  # after the assistant's own turn
        self._messages = [dict(m) for m in messages]
        done = bool(terminated or truncated)
        metadata: dict[str, Any] = {
            "reward_components": dict(info.get("reward_components", {})),
            "action_error": info.get("action_error"),
        }
        if done:
            self._metrics = {k: float(v) for k, v in info.get("metrics", {}).items()}
            metadata["metrics"] = dict(self._metrics)
        return BaseTextEnvStepOutput(
            observations=[] if done else new,
            reward=float(reward),
            done=done,
            metadata=metadata,
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        return dict(self._metrics)

    def close(self) -> None:
        self.env.close()


def register_skyrl_envs() -> None:
    """Register :data:`GENERIC_ID` and every registered ``AgentR1/*`` id in ``skyrl_gym`` (idempotent)."""
    entry = f"{__name__}:AgentR1SkyRLEnv"
    if GENERIC_ID not in registry:
        register(id=GENERIC_ID, entry_point=entry)
    for env_id in agentr1_gym.env_ids():
        if env_id not in registry:
            register(id=env_id, entry_point=entry, kwargs={"env_id": env_id})


def skyrl_dataset(
    env_id: str,
    seeds: Iterable[int],
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_turns: int | None = None,
) -> list[dict[str, Any]]:
    """SkyRL dataset rows (``prompt``, ``env_class``, ``extra_info``) for these task seeds; the prompt is the env's
    own first messages, so SkyRL's prompt-length filtering sees the real length. Save with
    ``datasets.Dataset.from_list(rows).to_parquet(...)``."""
    rows = []
    env = agentr1_gym.make(env_id, **(env_kwargs or {}))
    require_full_context(env, "SkyRL")
    for seed in seeds:
        _, info = env.reset(seed=int(seed))
        extra: dict[str, Any] = {"seed": int(seed), "env_kwargs": dict(env_kwargs or {})}
        if max_turns is not None:
            extra["max_turns"] = int(max_turns)
        if env_id in agentr1_gym.env_ids():
            rows.append({"prompt": info["messages"], "env_class": env_id, "extra_info": extra})
        else:  # a user's env (any registered id, or module:id): the generic entry reads the id from the row
            rows.append(
                {
                    "prompt": info["messages"],
                    "env_class": GENERIC_ID,
                    "extra_info": {**extra, "env_id": env_id},
                }
            )
    env.close()
    return rows
