"""agentr1-gym: Gymnasium text environments for RL training of tool-using LLM agents (Agent-R1).

>>> import gymnasium as gym
>>> import agentr1_gym  # registers the AgentR1/* envs
>>> env = gym.make("AgentR1/HotpotQA-v0")
>>> obs, info = env.reset(seed=0)

This module imports only gymnasium, pydantic and numpy; torch, transformers and trl are never imported here.
"""

from __future__ import annotations

from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import (
    AgentR1Error,
    BadArgumentError,
    ConfigError,
    MissingDependencyError,
    NoOracleError,
    ResetNeededError,
    ToolInfrastructureError,
    UnknownEnvError,
)
from agentr1_gym.formats import HermesFormat, ParsedAction, SearchR1Format, ToolCall, ToolCallFormat
from agentr1_gym.registration import env_ids, make, register_envs, resolve_env_id
from agentr1_gym.rewards import ProcessReward, RewardConfig
from agentr1_gym.settings import EnvSettings
from agentr1_gym.spaces import FreeText
from agentr1_gym.task import TaskEnv, make_task, register_task
from agentr1_gym.tools.base import Tool, ToolResult
from agentr1_gym.tools.function import tool

__version__ = "0.2.0.dev0"

__all__ = [
    "AgentR1Error",
    "BadArgumentError",
    "ConfigError",
    "EnvSettings",
    "FreeText",
    "HermesFormat",
    "MissingDependencyError",
    "NoOracleError",
    "ParsedAction",
    "ProcessReward",
    "ResetNeededError",
    "RewardConfig",
    "SearchR1Format",
    "TaskEnv",
    "Tool",
    "ToolCall",
    "ToolCallFormat",
    "ToolEnv",
    "ToolInfrastructureError",
    "ToolResult",
    "UnknownEnvError",
    "env_ids",
    "make",
    "make_task",
    "register_task",
    "resolve_env_id",
    "tool",
]

register_envs()
