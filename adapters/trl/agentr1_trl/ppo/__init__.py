"""PPO for agents: :class:`AgentPPOConfig` and :class:`AgentPPOTrainer` (value head, GAE over action tokens)."""

from agentr1_trl.ppo.config import AgentPPOConfig
from agentr1_trl.ppo.trainer import VALUE_HEAD_FILE, AgentPPOTrainer

__all__ = ["VALUE_HEAD_FILE", "AgentPPOConfig", "AgentPPOTrainer"]
