"""Typed errors.

Three families, kept apart on purpose:

* programmer / configuration mistakes (:class:`ConfigError`, :class:`UnknownEnvError`,
  :class:`MissingDependencyError`, :class:`ResetNeededError`) raise and say how to fix them;
* malformed model output never raises: the parser and the env describe it in an observation,
  ``info["action_error"]`` and a penalty (see :mod:`agentr1_gym.formats` and :class:`agentr1_gym.env.ToolEnv`);
* infrastructure failures (:class:`ToolInfrastructureError`, e.g. a retrieval server that is down, and
  :class:`InferenceServerError`, an inference server that is down, too slow or answers wrongly) raise, so that
  they can never turn into silent zero rewards or corrupt a training update.
"""

from __future__ import annotations

import gymnasium.error

__all__ = [
    "AgentR1Error",
    "BadArgumentError",
    "ConfigError",
    "DataError",
    "InferenceServerError",
    "MissingDependencyError",
    "MissingProgramError",
    "NoOracleError",
    "ResetNeededError",
    "RewardRangeError",
    "TaskCodeError",
    "ToolContractError",
    "ToolInfrastructureError",
    "UnknownEnvError",
]


class AgentR1Error(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AgentR1Error, ValueError):
    """A bad constructor argument or configuration value; the message names the fix."""


class BadArgumentError(ConfigError, TypeError):
    """An unknown keyword argument (e.g. a typo in ``gym.make(id, **kwargs)``); the message suggests the fix."""


class DataError(AgentR1Error, ValueError):
    """A dataset file that cannot be read in the layout it was declared to have."""


class UnknownEnvError(AgentR1Error, gymnasium.error.Error):
    """An env id that is not registered; the message suggests the closest registered ids."""


class MissingDependencyError(AgentR1Error, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the optional package {package!r}, which is not installed. "
            f'Install it with: pip install "agentr1-gym[{extra}]"'
        )
        self.package = package
        self.extra = extra


class MissingProgramError(AgentR1Error, FileNotFoundError):
    """A program an env drives (a browser and its driver) is not installed; the message says how to install it."""


class NoOracleError(ConfigError):
    """The env has no scripted oracle (``oracle_action``); choose another policy."""


class ResetNeededError(AgentR1Error, gymnasium.error.ResetNeeded):
    """``step`` was called before ``reset`` or after the episode ended."""


class TaskCodeError(ConfigError):
    """A task's own code (its prompt function, its world's constructor, its context function) raised or answered
    out of contract: a bug in the task, never the model's fault. The message names the function and the task."""


class RewardRangeError(ConfigError):
    """A reward that is not a finite number within ``agentr1_gym.rewards.REWARD_LIMIT`` in absolute value (NaN,
    +-inf, or a value that overflows float32 once summed or normalised): raised where it enters (an env's reward
    components, a user's reward function or weight, an agent's result, a trainer's batch), so that no step trains
    on it silently. The message names where it came from."""


class ToolContractError(ConfigError):
    """A tool returned something other than what the tool contract says (a ToolResult with a str content, a dict
    of metadata and bool flags): a bug in the tool's code, never the model's fault. The message names the tool."""


class ToolInfrastructureError(AgentR1Error, RuntimeError):
    """A tool's backing service failed (server down, index missing). Never a model mistake."""


class InferenceServerError(ToolInfrastructureError):
    """An inference server (e.g. ``vllm serve``) could not be reached in time or answered something a policy
    cannot have generated (no token ids, ids outside the vocabulary, missing log-probs, ...). The message names
    the server and what was wrong; ``url`` and ``problem`` hold them."""

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(f"inference server {url}: {problem}")
        self.url = url
        self.problem = problem
