"""GRPO for agents (and RLOO, REINFORCE++, and per turn GiGPO and per-turn RLOO: :mod:`agentr1_trl.estimators`):
:class:`AgentGRPOConfig` and :class:`AgentGRPOTrainer`."""

from agentr1_trl.grpo.config import AgentGRPOConfig
from agentr1_trl.grpo.trainer import AgentGRPOTrainer

__all__ = ["AgentGRPOConfig", "AgentGRPOTrainer"]
