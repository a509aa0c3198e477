"""Configuration of :class:`~agentr1_trl.grpo.AgentGRPOTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentr1_gym.errors import ConfigError
from agentr1_trl.config import AgentTrainerConfig
from agentr1_trl.estimators import ESTIMATORS as _REGISTRY
from agentr1_trl.estimators import estimator, names

__all__ = ["ESTIMATORS", "STEP_ESTIMATORS", "AgentGRPOConfig"]

#: GRPO's estimators, and the step-level ones among them (one advantage per turn): read from
#: :mod:`agentr1_trl.estimators`
ESTIMATORS = names("grpo")
STEP_ESTIMATORS = tuple(name for name in ESTIMATORS if _REGISTRY["grpo", name].level == "step")


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
    # ---- an agent of your own (agentr1_trl.agent_loop): its calls go through the recording endpoint ----------
    agent: str = field(
        default="",
        metadata={
            "help": "'MODULE:FUNCTION', an `async def rollout(client, task)` that runs your agent with the given "
            "openai.AsyncOpenAI client and returns its reward; empty: our own rollout of env_id."
        },
    )
    agent_tasks: str = field(
        default="",
        metadata={
            "help": "The agent's tasks: a JSONL file (one JSON object per line) or an env id; empty: env_id."
        },
    )
    agent_eval_tasks: str = field(
        default="",
        metadata={
            "help": "Held-out tasks (JSONL) for a JSONL agent_tasks; env tasks hold out seeds instead."
        },
    )
    agent_concurrency: int = field(default=16, metadata={"help": "Agent episodes running at once."})
    agent_timeout_s: float = field(
        default=300.0, metadata={"help": "An agent episode still running after this long is dropped."}
    )
    agent_retries: int = field(
        default=2,
        metadata={
            "help": "A dropped agent episode (it raised, timed out or made no call) is run again at most this many "
            "times; a task whose every attempt fails stops training with the last error."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if estimator("grpo", self.advantage_estimator).group and self.num_generations < 2:
            raise ConfigError(
                f"{self.advantage_estimator} needs num_generations >= 2 (it compares the episodes of a group)"
            )
        if self.step_advantage_weight < 0:
            raise ConfigError(f"step_advantage_weight must be >= 0, got {self.step_advantage_weight}")
        if self.agent and ":" not in self.agent:
            raise ConfigError(f"agent must be 'MODULE:FUNCTION', got {self.agent!r}")
        if (self.agent_tasks or self.agent_eval_tasks) and not self.agent:
            raise ConfigError("agent_tasks and agent_eval_tasks need agent='MODULE:FUNCTION'")
        if self.agent_concurrency < 1 or not self.agent_timeout_s > 0 or self.agent_retries < 0:
            raise ConfigError(
                "need agent_concurrency >= 1, agent_timeout_s > 0 and agent_retries >= 0 (got "
                f"{self.agent_concurrency}, {self.agent_timeout_s}, {self.agent_retries})"
            )
