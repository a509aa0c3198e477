"""``AgentGRPOTrainer``: GRPO (or RLOO / REINFORCE++ / GiGPO / per-turn RLOO) on an ``AgentR1/*`` env with
action masks.

Advantages: ``grpo`` takes TRL's group-normalised episode returns; ``rloo`` a leave-one-out baseline;
``reinforce_pp`` per-token returns-to-go over the action-token timeline (process rewards at the turns that earned
them); step level, one advantage per turn: ``gigpo`` (episode plus same-state step groups) and ``turn_rloo``
(returns-to-go against the other episodes' at the same turn), see :mod:`agentr1_trl.advantages`. The loss: clipped surrogate over action tokens only plus a selectable KL estimator, aggregated by
``loss_type``; with ``beta=0`` rows whose advantage is zero everywhere skip the forward/backward pass.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1_gym.rollout import Trajectory
from agentr1_trl.agent_trainer import AgentTrainer
from agentr1_trl.estimators import ScoreInputs, estimator
from agentr1_trl.grpo.config import AgentGRPOConfig
from agentr1_trl.losses import aggregate
from agentr1_trl.signals import advantage_mask

__all__ = ["AgentGRPOTrainer"]


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
    def loss(self, model: Any, batch: dict[str, Any]) -> torch.Tensor:
        rows = batch["completion_ids"].size(0)
        # over the whole micro-batch, so that skipping rows below leaves the gradient unchanged
        denominators = self.loss_denominators(batch, advantage_mask(batch, True))
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
