"""Wrappers that keep the env contract when something outside the env ends an episode.

Gymnasium's ``TimeLimit`` (what ``gym.make(id, max_episode_steps=N)`` adds) cuts an episode without telling the
env, so the last step carries no outcome reward and no ``info["metrics"]``. Prefer the env's own limit
(``max_turns=N``), which is scored; where a step limit must live in a wrapper, use :class:`ScoredTimeLimit`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentr1_gym.errors import ConfigError
from agentr1_gym.rewards import OUTCOME_KEYS

__all__ = ["ScoredTimeLimit"]


class ScoredTimeLimit(gym.Wrapper):
    """Truncate after ``max_episode_steps`` steps and score the cut episode like one the env truncated itself:
    the outcome components of an unanswered episode are added to the last reward, and ``info`` gets
    ``metrics``, ``outcome_reward`` and ``truncated_reason="time_limit"``."""

    def __init__(self, env: gym.Env, max_episode_steps: int) -> None:
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ConfigError(f"max_episode_steps must be an int >= 1, got {max_episode_steps!r}")
        super().__init__(env)
        self.max_episode_steps = max_episode_steps
        self._elapsed = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._elapsed = 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        if self._elapsed >= self.max_episode_steps and not (terminated or truncated):
            outcome, metrics = self.env.unwrapped.close_episode(None)
            info = dict(info)
            components = {**info.get("reward_components", {}), **outcome}
            info.update(
                reward_components=components,
                outcome_reward=sum(components[k] for k in OUTCOME_KEYS),
                metrics=metrics,
                truncated_reason="time_limit",
            )
            reward = float(reward) + sum(outcome.values())
            truncated = True
        return obs, reward, terminated, truncated, info
