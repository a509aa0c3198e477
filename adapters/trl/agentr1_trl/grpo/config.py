"""Configuration of :class:`~agentr1_trl.grpo.AgentGRPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentr1_gym.errors import ConfigError
from agentr1_trl.config import AgentTrainerConfig

__all__ = ["ESTIMATORS", "STEP_ESTIMATORS", "AgentGRPOConfig"]

#: the step-level estimators (one advantage per turn)
STEP_ESTIMATORS = ("gigpo", "turn_rloo")
ESTIMATORS = ("grpo", "rloo", "reinforce_pp", *STEP_ESTIMATORS)


@dataclass
class AgentGRPOConfig(AgentTrainerConfig):
    """:class:`~agentr1_trl.config.AgentTrainerConfig` plus the advantage estimator. ``num_generations``
    episodes of the same task form one group; a "prompt" of the training dataset is one task seed."""

    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "Trajectory level: 'grpo' (group-normalised episode return), 'rloo' (leave-one-out baseline), "
            "'reinforce_pp' (per-token return-to-go over action tokens, batch-whitened; uses process rewards at "
            "the turns that earned them). Step level (each turn its own advantage): 'gigpo' (GRPO's episode "
            "advantage plus a step-level one among the group's turns taken from the same world state) or "
            "'turn_rloo' (each turn's return-to-go minus the other episodes' at the same turn)."
        },
    )
    step_advantage_weight: float = field(
        default=1.0,
        metadata={"help": "gigpo: the weight of the step-level advantage (GiGPO's omega)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.advantage_estimator not in ESTIMATORS:
            raise ConfigError(
                f"advantage_estimator must be one of {', '.join(map(repr, ESTIMATORS))}, "
                f"got {self.advantage_estimator!r}"
            )
        if self.advantage_estimator in ("rloo", "gigpo", "turn_rloo") and self.num_generations < 2:
            raise ConfigError(
                f"{self.advantage_estimator} needs num_generations >= 2 (it compares the episodes of a group)"
            )
        if self.step_advantage_weight < 0:
            raise ConfigError(f"step_advantage_weight must be >= 0, got {self.step_advantage_weight}")
