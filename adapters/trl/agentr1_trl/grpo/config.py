"""Configuration of :class:`~agentr1_trl.grpo.AgentGRPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentr1_gym.errors import ConfigError
from agentr1_trl.config import AgentTrainerConfig

__all__ = ["AgentGRPOConfig"]


@dataclass
class AgentGRPOConfig(AgentTrainerConfig):
    """:class:`~agentr1_trl.config.AgentTrainerConfig` plus the advantage estimator. ``num_generations``
    episodes of the same task form one group; a "prompt" of the training dataset is one task seed."""

    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "'grpo' (group-normalised episode return), 'rloo' (leave-one-out baseline) or "
            "'reinforce_pp' (per-token return-to-go over action tokens, batch-whitened; uses "
            "process rewards at the turns that earned them)."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.advantage_estimator not in {"grpo", "rloo", "reinforce_pp"}:
            raise ConfigError(
                f"advantage_estimator must be 'grpo', 'rloo' or 'reinforce_pp', got {self.advantage_estimator!r}"
            )
        if self.advantage_estimator == "rloo" and self.num_generations < 2:
            raise ConfigError("rloo needs num_generations >= 2 (it is a leave-one-out baseline)")
