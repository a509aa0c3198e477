"""``AgentGRPOTrainer``: GRPO (or RLOO / REINFORCE++ / GiGPO / per-turn RLOO) on an ``AgentR1/*`` env with
action masks.

Advantages: ``grpo`` takes TRL's group-normalised episode returns; ``rloo`` a leave-one-out baseline;
``reinforce_pp`` per-token returns-to-go over the action-token timeline (process rewards at the turns that earned
them); step level, one advantage per turn: ``gigpo`` (episode plus same-state step groups) and ``turn_rloo``
(returns-to-go against the other episodes' at the same turn), see :mod:`agentr1_trl.advantages`. The loss: clipped surrogate over action tokens only plus a selectable KL estimator, aggregated by
``loss_type``; with ``beta=0`` rows whose advantage is zero everywhere skip the forward/backward pass.

Its configuration is :class:`AgentGRPOConfig`, in this file too (one file per algorithm)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import Trajectory
from agentr1_trl.agent_trainer import AgentTrainer
from agentr1_trl.config import AgentTrainerConfig
from agentr1_trl.estimators import ESTIMATORS as _REGISTRY
from agentr1_trl.estimators import ScoreInputs, estimator, names
from agentr1_trl.losses import aggregate
from agentr1_trl.signals import advantage_mask

__all__ = ["ESTIMATORS", "STEP_ESTIMATORS", "AgentGRPOConfig", "AgentGRPOTrainer"]


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


class AgentGRPOTrainer(AgentTrainer):
    """GRPO on an ``AgentR1/*`` env; arguments as :class:`~agentr1_trl.agent_trainer.AgentTrainer`, with an
    :class:`AgentGRPOConfig`."""

    _tag_names = ["trl", "grpo", "agentr1"]  # noqa: RUF012  (TRL declares it this way)
    config_class = AgentGRPOConfig

    def records_state_keys(self) -> bool:
        return estimator("grpo", self.args.advantage_estimator).state_keys

    # ---- advantages ---------------------------------------------------------------------------------------
    def score_batch(self, batch: dict[str, Any], trajectories: list[Trajectory]) -> dict[str, Any]:
        args: AgentGRPOConfig = self.args
        chosen = estimator("grpo", args.advantage_estimator)
        if chosen.score is None:
            return batch  # TRL's group normalisation of episode_return (over every process's episodes)
        device = batch["completion_ids"].device
        width = batch["completion_ids"].size(1)
        # the estimators see the whole generation batch (every process's rows, a group's episodes together)
        local_mask = advantage_mask(batch, True if chosen.level == "step" else args.advantage_mask)
        gathered, trajectories, local = self.global_batch({"mask": local_mask}, trajectories, width)
        mask = gathered["mask"].cpu()
        inputs = ScoreInputs(
            trajectories, mask, [self.episode_return(t) for t in trajectories], self.num_generations, args
        )
        advantages, metrics = chosen.score(inputs)
        for key, value in metrics.items():
            self.log_metric(f"signal/{key}", value)
        batch["advantages"] = local(advantages).to(device)
        return batch

    # ---- loss ---------------------------------------------------------------------------------------------
    def loss(self, model: Any, batch: dict[str, Any], whole: dict[str, Any] | None = None) -> torch.Tensor:
        rows = batch["completion_ids"].size(0)
        # over the whole micro-batch, so that skipping rows below leaves the gradient unchanged
        denominators = self.loss_denominators(batch, advantage_mask(batch, True), whole=whole)
        if self.args.skip_zero_advantage and self.beta == 0.0:
            keep = (batch["advantages"].reshape(rows, -1) != 0).any(dim=1)
            self.log_metric("signal/skipped_rows", 1.0 - keep.float().mean().item())
            tokens = batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)
            # the forward/backward compute saved: the skipped rows' share of the micro-batch's tokens
            self.log_metric(
                "signal/skipped_tokens", 1.0 - (tokens[keep].sum() / tokens.sum().clamp(min=1)).item()
            )
            if not bool(keep.all()):
                if not bool(keep.any()):
                    # nothing to learn here: a zero loss that still touches the graph (DDP needs every parameter)
                    return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
                batch = {k: (v[keep] if torch.is_tensor(v) and v.dim() > 0 and v.size(0) == rows else v)
                         for k, v in batch.items()}  # fmt: skip
        completion_ids = batch["completion_ids"]
        input_ids = torch.cat([batch["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        mask = advantage_mask(batch, True)  # the loss mask: action tokens
        logps = self.token_logps(model, input_ids, attention_mask, completion_ids.size(1), needed=mask)
        terms = self.policy_terms(logps, mask, batch)
        return self.scale_for_accumulation(aggregate(terms.per_token, mask, self.loss_type, denominators))
