"""GRPO (and RLOO / REINFORCE++) for agents: :class:`AgentGRPOConfig` and :class:`AgentGRPOTrainer`."""

from agentr1_trl.grpo.config import AgentGRPOConfig
from agentr1_trl.grpo.trainer import AgentGRPOTrainer

__all__ = ["AgentGRPOConfig", "AgentGRPOTrainer"]
