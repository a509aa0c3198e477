"""``AgentPPOTrainer``: multi-turn PPO with a value head and GAE over the action-token timeline.

A sibling of :class:`~agentr1_trl.grpo.AgentGRPOTrainer` over the same shared pieces (rollouts, TRL's loop,
reference log-probs with the LoRA adapter disabled, logging and checkpoints), adding:

* a **value head** (one linear layer) on the policy's last hidden states. It shares the LoRA-adapted body with the
  policy, as TRL's original value-head model did: no second forward pass and no second adapter, so a PPO step costs
  what a GRPO step costs plus one linear layer (``benchmarks/trainer_step.py`` measures it). The head is saved in
  every checkpoint (``value_head.pt``) and its optimizer state rides with the model's;
* **GAE** on the action-token timeline with process rewards at the turn-end tokens (tool-response tokens are
  skipped, not bootstrapped through), advantages whitened over action tokens; a batch whose episodes all have the
  same return trains the value head only (``policy_needs_signal``): its advantages would be the critic's errors,
  which whitening scales up to a full-size policy update;
* the loss: clipped policy surrogate + ``vf_coef`` x clipped value loss, both over action tokens only, + KL to the
  reference; ``critic_warmup_steps`` train the value head alone first.

Its configuration is :class:`AgentPPOConfig`, in this file too (one file per algorithm)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import Trajectory
from agentr1_trl.advantages import (
    gae_advantages,
    masked_mean,
    masked_whiten,
    step_advantages_to_tokens,
    step_gae_advantages,
)
from agentr1_trl.agent_trainer import AgentTrainer
from agentr1_trl.config import AgentTrainerConfig
from agentr1_trl.estimators import estimator
from agentr1_trl.losses import aggregate, clipped_value_loss
from agentr1_trl.signals import advantage_mask, token_reward_matrix, turn_rewards, turn_starts
from agentr1_trl.turn_rows import turn_spans
from agentr1_trl.value_head import VALUE_HEAD_FILE, new_value_head, state_values

__all__ = ["VALUE_HEAD_FILE", "AgentPPOConfig", "AgentPPOTrainer"]


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


class AgentPPOTrainer(AgentTrainer):
    """PPO on an ``AgentR1/*`` env; arguments as :class:`~agentr1_trl.agent_trainer.AgentTrainer`, with an
    :class:`AgentPPOConfig`."""

    _tag_names = ["trl", "ppo", "agentr1"]  # noqa: RUF012  (TRL declares it this way)
    config_class = AgentPPOConfig

    def __init__(self, model: Any, args: AgentPPOConfig, processing_class: Any, **kwargs: Any) -> None:
        super().__init__(model, args, processing_class, **kwargs)
        head = new_value_head(self.accelerator.unwrap_model(self.model))
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        # a submodule of the (peft) model: the optimizer and device placement pick it up
        self.model.add_module("value_head", head.to(next(self.model.parameters()).device))

    @property
    def value_head(self) -> nn.Linear:
        return self.model.value_head

    # ---- forward with values ------------------------------------------------------------------------------
    def _logps_and_values(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        n: int,
        needed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of the last ``n`` tokens (only where ``needed``, default the completion; 0 elsewhere) and the
        value of the state before each of them."""
        logps, states = self.forward_logps(model, input_ids, attention_mask, n, hidden=True, needed=needed)
        values = self.value_head(states.to(self.value_head.weight.dtype)).squeeze(-1).float()
        return logps, values

    @staticmethod
    def _inputs(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
        completion_ids = batch["completion_ids"]
        input_ids = torch.cat([batch["prompt_ids"], completion_ids], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        return input_ids, attention, completion_ids.size(1)

    # ---- advantages ---------------------------------------------------------------------------------------
    def score_batch(self, batch: dict[str, Any], trajectories: list[Trajectory]) -> dict[str, Any]:
        args: AgentPPOConfig = self.args
        mask = advantage_mask(batch, args.advantage_mask)  # GAE's timeline: action tokens, or all (ablation)
        input_ids, attention, n = self._inputs(batch)
        with torch.no_grad():  # values only: no token needs a log-prob
            _, values = self._logps_and_values(self.model, input_ids, attention, n, torch.zeros_like(mask))
        rewards = token_reward_matrix(trajectories, n, args.reward_signal).to(values)
        if not all(t.one_sequence for t in trajectories):
            values = self._turn_values(values, trajectories)
        values = values * mask
        batch["old_values"] = values
        # GAE per episode, whitening and the no-signal check over the whole generation batch (every process's)
        gathered, trajectories, local = self.global_batch(
            {"values": values, "mask": mask, "rewards": rewards}, trajectories, n
        )
        values, mask, rewards = gathered["values"], gathered["mask"], gathered["rewards"]
        step_level = estimator("ppo", args.gae_level).level == "step"
        if step_level:
            adv, returns = self._step_gae(values, mask, trajectories)
        else:
            adv, returns = gae_advantages(rewards, values, mask, gamma=args.gamma, lam=args.lam)
        no_signal = False
        if args.policy_needs_signal:
            episode_returns = rewards.sum(dim=1)
            no_signal = bool(episode_returns.max() - episode_returns.min() <= 1e-6)
            self.log_metric("signal/policy_skipped", float(no_signal))
        if no_signal:  # nothing to learn for the policy: only critic noise, whitened to full size
            adv = torch.zeros_like(adv)
        elif args.whiten_advantages and not step_level:  # step level: whitened over turns already
            adv = masked_whiten(adv, mask)
        batch["advantages"], batch["returns"] = local(adv), local(returns)
        self.log_metric("value/mean", masked_mean(values, mask).item())
        self.log_metric("value/return_mean", masked_mean(returns, mask).item())
        return batch

    def _step_gae(
        self, values: torch.Tensor, mask: torch.Tensor, trajectories: list[Trajectory]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """StepPO's step-level GAE: each turn valued at its first generated token (the state before it), its
        advantage and return shared by all its tokens (the value head learns each turn's return at every one of
        its tokens; only the first is read)."""
        args: AgentPPOConfig = self.args
        width = values.size(1)
        step_values = []
        for b, traj in enumerate(trajectories):
            starts = [min(s, width - 1) for s in turn_starts(traj)]
            step_values.append([float(values[b, s]) for s in starts])
        rewards = [turn_rewards(t, args.reward_signal) for t in trajectories]
        advs, rets = step_gae_advantages(
            rewards, step_values, gamma=args.gamma, lam=args.lam, whiten=args.whiten_advantages
        )
        ends = [t.turn_ends for t in trajectories]
        cpu_mask = mask.cpu()
        adv = step_advantages_to_tokens(advs, ends, cpu_mask).to(values)
        returns = step_advantages_to_tokens(rets, ends, cpu_mask).to(values)
        return adv, returns

    @torch.no_grad()
    def _turn_values(self, values: torch.Tensor, trajectories: list[Trajectory]) -> torch.Tensor:
        """Values of a non-prefix-stable episode's action timeline, each turn's computed in its own context (the
        rows it trains as, see :mod:`agentr1_trl.turn_rows`), so that GAE bootstraps across turns exactly."""
        values = values.clone()
        where, seqs, gens = [], [], []
        for i, traj in enumerate(trajectories):
            if traj.one_sequence:
                continue
            for (context, gen, _), (start, end) in zip(traj.turns, turn_spans(traj)):
                where.append((i, start, end))
                seqs.append(list(context) + list(gen))
                gens.append(len(gen))
        width, n = max(len(q) for q in seqs), max(gens)
        pad = self.processing_class.pad_token_id or 0
        device = values.device
        ids = torch.full((len(seqs), width), pad, dtype=torch.long, device=device)
        attention = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
        for r, q in enumerate(seqs):  # left-padded: every turn's generation ends in the last column
            ids[r, width - len(q) :] = torch.tensor(q, device=device)
            attention[r, width - len(q) :] = 1
        _, turn_values = self._logps_and_values(self.model, ids, attention, n, torch.zeros_like(ids[:, -n:]))
        for r, (i, start, end) in enumerate(where):
            values[i, start:end] = turn_values[r, n - (end - start) :]
        return values

    # ---- loss ---------------------------------------------------------------------------------------------
    def loss(self, model: Any, batch: dict[str, Any], whole: dict[str, Any] | None = None) -> torch.Tensor:
        args: AgentPPOConfig = self.args
        mask = advantage_mask(batch, True)  # the loss mask: action tokens
        input_ids, attention, n = self._inputs(batch)
        logps, values = self._logps_and_values(model, input_ids, attention, n, needed=mask)
        terms = self.policy_terms(logps, mask, batch)
        returns = batch["returns"]
        value = clipped_value_loss(values, batch["old_values"], returns, args.cliprange_value) * mask
        policy = aggregate(
            terms.per_token, mask, self.loss_type, self.loss_denominators(batch, mask, whole=whole)
        )
        # a token mean over the generation batch (as dapo's): the same loss however the batch is split into
        # micro-batches or processes
        vf_loss = aggregate(value, mask, "dapo", self.loss_denominators(batch, mask, "dapo", whole=whole))
        warming = self.state.global_step < args.critic_warmup_steps
        loss = (0.0 if warming else 1.0) * policy + args.vf_coef * vf_loss
        self.log_metric("loss/policy", policy.item())
        self.log_metric("loss/value", vf_loss.item())
        with torch.no_grad():
            var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
            resid = masked_mean((returns - values) ** 2, mask)
            self.log_metric("value/explained_variance", (1 - resid / var.clamp(min=1e-8)).item())
        return self.scale_for_accumulation(loss)

    # ---- checkpoints --------------------------------------------------------------------------------------
    def save_extra(self, output_dir: str) -> None:
        super().save_extra(output_dir)
        torch.save(self.value_head.state_dict(), os.path.join(output_dir, VALUE_HEAD_FILE))

    def load_extra(self, checkpoint: str) -> None:
        super().load_extra(checkpoint)
        path = os.path.join(checkpoint, VALUE_HEAD_FILE)
        if os.path.exists(path):
            self.value_head.load_state_dict(
                torch.load(path, map_location=self.value_head.weight.device, weights_only=True)
            )

    @torch.no_grad()
    def state_value(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """The value head's estimate for each token sequence (the state after its last token)."""
        return state_values(self.model, self.value_head, self.processing_class, sequences)
