"""agentr1-gym: Gymnasium text environments for RL training of tool-using LLM agents (Agent-R1).

>>> import gymnasium as gym
>>> import agentr1_gym  # registers the AgentR1/* envs
>>> env = gym.make("AgentR1/HotpotQA-v0")
>>> obs, info = env.reset(seed=0)

This module imports only gymnasium and pydantic; torch, transformers and trl are never imported here.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym

from agentr1_gym.core import Tool, ToolEnv, ToolResult
from agentr1_gym.envs import DESCRIPTIONS, register_envs
from agentr1_gym.errors import (
    AgentR1Error,
    BadArgumentError,
    ConfigError,
    MissingDependencyError,
    ResetNeededError,
    ToolInfrastructureError,
    UnknownEnvError,
)
from agentr1_gym.protocol import HermesFormat, ParsedAction, SearchR1Format, ToolCall, ToolCallFormat
from agentr1_gym.rewards import RewardConfig
from agentr1_gym.spaces import FreeText

__version__ = "0.1.0"

__all__ = [
    "AgentR1Error",
    "BadArgumentError",
    "ConfigError",
    "FreeText",
    "HermesFormat",
    "MissingDependencyError",
    "ParsedAction",
    "ResetNeededError",
    "RewardConfig",
    "SearchR1Format",
    "Tool",
    "ToolCall",
    "ToolCallFormat",
    "ToolEnv",
    "ToolInfrastructureError",
    "ToolResult",
    "UnknownEnvError",
    "env_ids",
    "make",
]

register_envs()


def env_ids() -> list[str]:
    """The ids of every registered ``AgentR1/*`` env."""
    return sorted(DESCRIPTIONS)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a typed error for unknown ids (``UnknownEnvError`` suggests the closest ids); otherwise
    exactly ``gym.make`` (the envs register no ``TimeLimit``: each truncates itself at ``max_turns``)."""
    if env_id.removeprefix("agentr1_gym:") not in DESCRIPTIONS:
        close = difflib.get_close_matches(env_id, env_ids(), n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownEnvError(f"no AgentR1 env {env_id!r}.{hint} Registered: {', '.join(env_ids())}")
    return gym.make(env_id.removeprefix("agentr1_gym:"), **kwargs)
