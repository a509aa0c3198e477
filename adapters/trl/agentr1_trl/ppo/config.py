"""Configuration of :class:`~agentr1_trl.ppo.AgentPPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentr1_gym.errors import ConfigError
from agentr1_trl.config import AgentTrainerConfig
from agentr1_trl.estimators import estimator

__all__ = ["AgentPPOConfig"]


@dataclass
class AgentPPOConfig(AgentTrainerConfig):
    """:class:`~agentr1_trl.config.AgentTrainerConfig` plus the critic and GAE settings (PPO's advantages are GAE
    over the action-token timeline); ``num_generations`` only sets how many episodes share a task seed."""

    vf_coef: float = field(default=0.5, metadata={"help": "Weight of the value loss."})
    cliprange_value: float = field(
        default=0.2, metadata={"help": "Clip range of the value update around old values."}
    )
    lam: float = field(default=0.95, metadata={"help": "GAE lambda (gamma is `gamma`)."})
    gae_level: str = field(
        default="token",
        metadata={
            "help": "'token': GAE over the action-token timeline (each token a step, values per token). 'step': "
            "StepPO's step-level GAE (arXiv 2604.18401): each turn is a step, valued at the state it starts "
            "from, its advantage shared by all its tokens and whitened over turns."
        },
    )
    whiten_advantages: bool = field(
        default=True, metadata={"help": "Whiten GAE advantages over action tokens."}
    )
    policy_needs_signal: bool = field(
        default=True,
        metadata={
            "help": "When every episode of a batch has the same return (under `reward_signal`), e.g. no episode "
            "succeeded with reward_signal='outcome', its GAE advantages are only the critic's errors, and whitening "
            "would scale them up to a full-size update: train the value head on that batch, not the policy "
            "(advantages 0; logged as `signal/policy_skipped`)."
        },
    )
    critic_warmup_steps: int = field(
        default=0, metadata={"help": "Optimizer steps that train only the value head (policy loss weight 0)."}
    )

    def __post_init__(self) -> None:
        if self.ddp_find_unused_parameters is None:
            # every trainable parameter (the adapter or the model, and the value head) gets a gradient each step;
            # DDP's search for unused ones would mark the value head, used after the model's forward, unused
            self.ddp_find_unused_parameters = False
        super().__post_init__()
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"need 0 <= lam <= 1, got {self.lam}")
        estimator("ppo", self.gae_level)  # a one-line ConfigError naming the choices
        if self.vf_coef < 0 or self.cliprange_value <= 0 or self.critic_warmup_steps < 0:
            raise ConfigError("need vf_coef >= 0, cliprange_value > 0, critic_warmup_steps >= 0")
