"""Configuration of :class:`~agentr1_trl.grpo_trainer.AgentGRPOTrainer` (TRL's ``GRPOConfig`` plus env fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from agentr1_gym.errors import ConfigError

__all__ = ["AgentGRPOConfig"]


@dataclass
class AgentGRPOConfig(GRPOConfig):
    """Everything in TRL's ``GRPOConfig`` (``num_generations``, ``beta``, ``epsilon``, ``learning_rate``,
    ``report_to``, ``save_steps``, ...) plus the agent/env settings below.

    ``bf16`` defaults to True only on a GPU that supports it (TRL's default of True fails on a CPU).
    ``num_generations`` episodes of the same task form one group; a "prompt" of the training dataset is one task
    seed. ``max_completion_length`` is not used: turns are bounded by ``max_new_tokens_per_turn`` and episodes by
    ``max_episode_tokens``.
    """

    env_id: str = field(
        default="AgentR1/SyntheticMultihop-v0", metadata={"help": "AgentR1 env id to train on."}
    )
    env_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword arguments for gym.make."}
    )
    num_tasks: int = field(
        default=10_000, metadata={"help": "Task seeds in the training set: seed_offset + [0, num_tasks)."}
    )
    seed_offset: int = field(
        default=0, metadata={"help": "First task seed (keep evaluation seeds outside the range)."}
    )
    max_new_tokens_per_turn: int = field(
        default=128, metadata={"help": "Generation limit of one assistant turn."}
    )
    max_episode_tokens: int = field(
        default=2048, metadata={"help": "Prompt + completion token budget of an episode."}
    )
    advantage_estimator: str = field(
        default="grpo",
        metadata={
            "help": "'grpo' (group-normalised episode return), 'rloo' (leave-one-out baseline) or "
            "'reinforce_pp' (per-token return-to-go over action tokens, batch-whitened; uses "
            "process rewards at the turns that earned them)."
        },
    )
    kl_estimator: str = field(
        default="k3", metadata={"help": "KL to the reference: 'k1', 'k3' or 'low_var_kl'."}
    )
    gamma: float = field(
        default=1.0, metadata={"help": "Discount along the action-token timeline (reinforce_pp)."}
    )
    action_mask: bool = field(
        default=True,
        metadata={
            "help": "Loss only on tokens the policy generated (Agent-R1's action mask). False trains on tool "
            "responses and template tokens too: the paper's ablation."
        },
    )

    def __post_init__(self) -> None:
        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which fails on machines without a bf16 GPU; use it only where it exists
            import torch

            self.bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
            if not torch.cuda.is_available():
                self.use_cpu = True
        super().__post_init__()
        if self.advantage_estimator not in {"grpo", "rloo", "reinforce_pp"}:
            raise ConfigError(
                f"advantage_estimator must be 'grpo', 'rloo' or 'reinforce_pp', got {self.advantage_estimator!r}"
            )
        if self.kl_estimator not in {"k1", "k3", "low_var_kl"}:
            raise ConfigError(f"kl_estimator must be 'k1', 'k3' or 'low_var_kl', got {self.kl_estimator!r}")
        if self.advantage_estimator == "rloo" and self.num_generations < 2:
            raise ConfigError("rloo needs num_generations >= 2 (it is a leave-one-out baseline)")
        if self.max_new_tokens_per_turn < 1 or self.max_episode_tokens <= self.max_new_tokens_per_turn:
            raise ConfigError("need 1 <= max_new_tokens_per_turn < max_episode_tokens")
        if self.num_tasks < 1:
            raise ConfigError("num_tasks must be >= 1")
        if self.loss_type not in {"grpo", "bnpo", "dapo", "dr_grpo"}:
            raise ConfigError(
                f"AgentGRPOTrainer supports loss_type 'grpo', 'bnpo', 'dapo' or 'dr_grpo', got {self.loss_type!r}"
            )
