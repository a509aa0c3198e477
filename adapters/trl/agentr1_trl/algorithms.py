"""What ``algo`` names, in one table: each algorithm's config and trainer classes, and the trainer of a user's own
agent loop (``--agent``). ``agentr1 train``'s run plan and every benchmark choose through
:func:`trainer_classes`, so a new algorithm is one row here and one file beside ``grpo.py`` and ``ppo.py``."""

from __future__ import annotations

import importlib
from typing import Any

from agentr1_gym.errors import ConfigError

__all__ = ["ALGORITHMS", "trainer_classes"]

#: algo -> (module, config class, trainer class, trainer class for a user's agent loop or None)
ALGORITHMS: dict[str, tuple[str, str, str, str | None]] = {
    "grpo": ("agentr1_trl.grpo", "AgentGRPOConfig", "AgentGRPOTrainer", "AgentGRPOLoopTrainer"),
    "ppo": ("agentr1_trl.ppo", "AgentPPOConfig", "AgentPPOTrainer", None),
}


def trainer_classes(algo: str, *, agent: bool = False) -> tuple[Any, Any]:
    """The (config class, trainer class) of ``algo``; with ``agent=True`` the trainer that trains a user's own
    agent loop through the endpoint (:mod:`agentr1_trl.agent_loop`) instead of our rollout."""
    if algo not in ALGORITHMS:
        raise ConfigError(f"algo must be {' or '.join(ALGORITHMS)}, got {algo!r}")
    module, config, trainer, loop_trainer = ALGORITHMS[algo]
    if agent and loop_trainer is None:
        trains = " or ".join(name.upper() for name, row in ALGORITHMS.items() if row[3])
        raise ConfigError(f"--agent trains with {trains} (its estimators); --algo {algo} is not supported")
    classes = importlib.import_module(module)
    if agent:
        from agentr1_trl import agent_loop

        return getattr(classes, config), getattr(agent_loop, loop_trainer)
    return getattr(classes, config), getattr(classes, trainer)
