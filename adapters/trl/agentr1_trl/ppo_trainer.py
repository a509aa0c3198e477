"""``AgentPPOTrainer``: multi-turn PPO with a value head and GAE over the action-token timeline.

TRL 1.x has no PPO trainer for this setting; this one reuses :class:`AgentGRPOTrainer` (and through it TRL's
loop, buffering, reference log-probs with the LoRA adapter disabled, logging and checkpoints) and adds:

* a **value head** (one linear layer) on the policy's last hidden states. It shares the LoRA-adapted body with the
  policy, as TRL's original value-head model did: no second forward pass and no second adapter, so a PPO step costs
  what a GRPO step costs plus one linear layer (``benchmarks/trainer_step.py`` measures it). The head is saved in
  every checkpoint (``value_head.pt``) and its optimizer state rides with the model's;
* **GAE** on the action-token timeline with process rewards at the turn-end tokens (tool-response tokens are
  skipped, not bootstrapped through), advantages whitened over action tokens;
* the loss: clipped policy surrogate + ``vf_coef`` x clipped value loss, both over action tokens only, + KL to the
  reference; ``critic_warmup_steps`` train the value head alone first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agentr1_gym.errors import ConfigError
from agentr1_trl.advantages import clipped_policy_loss, gae_advantages, kl_penalty, masked_mean, masked_whiten
from agentr1_trl.generation.base import Generation, GenerationBackend, SamplingConfig
from agentr1_trl.grpo_trainer import AgentGRPOTrainer, advantage_mask_of, signal_token_rewards
from agentr1_trl.ppo_config import AgentPPOConfig

__all__ = ["AgentPPOTrainer", "ValueGuidedGenerator"]

VALUE_HEAD_FILE = "value_head.pt"


class AgentPPOTrainer(AgentGRPOTrainer):
    """PPO on an ``AgentR1/*`` env. Arguments as :class:`AgentGRPOTrainer`, with an :class:`AgentPPOConfig`."""

    _tag_names = ["trl", "ppo", "agentr1"]  # noqa: RUF012  (TRL declares it this way)

    def __init__(self, model: Any, args: AgentPPOConfig, processing_class: Any, **kwargs: Any) -> None:
        if not isinstance(args, AgentPPOConfig):
            raise ConfigError("AgentPPOTrainer needs an AgentPPOConfig")
        super().__init__(model, args, processing_class, **kwargs)
        hidden = self.accelerator.unwrap_model(self.model).config.get_text_config().hidden_size
        head = nn.Linear(hidden, 1)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        # a submodule of the (peft) model: the optimizer and device placement pick it up
        self.model.add_module("value_head", head.to(next(self.model.parameters()).device))

    @property
    def value_head(self) -> nn.Linear:
        return self.model.value_head

    # ---- forward with values ------------------------------------------------------------------------------
    def _logps_and_values(
        self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of the last ``n`` tokens and the value of the state before each of them."""
        with self.accelerator.autocast():
            # logits only where they are used (the vocabulary projection of prompt positions is wasted work)
            out = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=True,
                logits_to_keep=n + 1,
            )
        logits = out.logits[:, -n - 1 : -1].float() / self.temperature
        logps = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, -n:].unsqueeze(-1)).squeeze(-1)
        hidden = out.hidden_states[-1][:, -n - 1 : -1]
        values = self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).float()
        return logps, values

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        args: AgentPPOConfig = self.args
        completion_ids = output["completion_ids"]
        mask = advantage_mask_of(
            output, args.advantage_mask
        )  # GAE's timeline: action tokens, or all (ablation)
        input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            _, values = self._logps_and_values(self.model, input_ids, attention, completion_ids.size(1))
        rewards = torch.zeros_like(values)
        for i, traj in enumerate(self.last_trajectories):
            tr = signal_token_rewards(traj, args.reward_signal)[: rewards.size(1)]
            rewards[i, : len(tr)] = torch.tensor(tr, dtype=rewards.dtype)
        values = values * mask
        adv, returns = gae_advantages(rewards, values, mask, gamma=args.gamma, lam=args.lam)
        if args.whiten_advantages:
            adv = masked_whiten(adv, mask)
        output["advantages"], output["returns"], output["old_values"] = adv, returns, values
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["value/mean"].append(masked_mean(values, mask).item())
        self._metrics[mode]["value/return_mean"].append(masked_mean(returns, mask).item())
        return output

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        args: AgentPPOConfig = self.args
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = advantage_mask_of(inputs, True)  # the loss mask: action tokens
        mask_f = mask.float()
        logps, values = self._logps_and_values(model, input_ids, attention, completion_ids.size(1))
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        policy = clipped_policy_loss(
            logps, old, inputs["advantages"], mask, eps_low=self.epsilon_low, eps_high=self.epsilon_high
        )
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0:
            kl = kl_penalty(logps, inputs["ref_per_token_logps"], args.kl_estimator) * mask_f
            policy = policy + self.beta * kl
            self._metrics[mode]["kl"].append((kl.sum() / mask_f.sum().clamp(min=1.0)).item())
        old_v, returns = inputs["old_values"], inputs["returns"]
        clipped_v = old_v + torch.clamp(values - old_v, -args.cliprange_value, args.cliprange_value)
        value_loss = 0.5 * torch.max((values - returns) ** 2, (clipped_v - returns) ** 2)
        n_tokens = mask_f.sum().clamp(min=1.0)
        policy_loss = (policy * mask_f).sum() / n_tokens
        vf_loss = (value_loss * mask_f).sum() / n_tokens
        warming = self.state.global_step < args.critic_warmup_steps
        loss = (0.0 if warming else 1.0) * policy_loss + args.vf_coef * vf_loss
        self._metrics[mode]["loss/policy"].append(policy_loss.item())
        self._metrics[mode]["loss/value"].append(vf_loss.item())
        with torch.no_grad():
            var = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
            resid = masked_mean((returns - values) ** 2, mask)
            self._metrics[mode]["value/explained_variance"].append((1 - resid / var.clamp(min=1e-8)).item())
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        return loss

    # ---- checkpoints --------------------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        output_dir = output_dir or self.args.output_dir
        torch.save(self.value_head.state_dict(), os.path.join(output_dir, VALUE_HEAD_FILE))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, VALUE_HEAD_FILE)
        if os.path.exists(path):
            self.value_head.load_state_dict(torch.load(path, map_location=self.value_head.weight.device))

    @torch.no_grad()
    def state_value(self, sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """The value head's estimate for each token sequence (the state after its last token)."""
        return _state_values(self.model, self.value_head, self.processing_class, sequences)


@torch.no_grad()
def _state_values(
    model: Any, head: nn.Linear, tokenizer: Any, sequences: Sequence[Sequence[int]]
) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id
    device = head.weight.device
    ids = torch.tensor([[pad] * (width - len(s)) + list(s) for s in sequences], device=device)
    att = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)
    out = model(input_ids=ids, attention_mask=att, output_hidden_states=True)
    return head(out.hidden_states[-1][:, -1].to(head.weight.dtype)).squeeze(-1).float()


class ValueGuidedGenerator:
    """Value-guided decoding: sample ``n`` candidate turns per prompt with ``base`` and keep the one whose
    resulting state the value head scores highest (ties: the first)."""

    def __init__(
        self, base: GenerationBackend, model: Any, value_head: nn.Linear, tokenizer: Any, *, n: int = 4
    ) -> None:
        if n < 1:
            raise ConfigError("n must be >= 1")
        self.base, self.model, self.value_head, self.tokenizer, self.n = base, model, value_head, tokenizer, n
        self.last_scores: list[list[float]] = []

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        repeated = [p for p in prompts for _ in range(self.n)]
        candidates = self.base.generate(repeated, sampling)
        scores = _state_values(
            self.model,
            self.value_head,
            self.tokenizer,
            [list(p) + c.ids for p, c in zip(repeated, candidates)],
        ).view(len(prompts), self.n)
        self.last_scores = scores.tolist()
        best = scores.argmax(dim=1).tolist()
        return [candidates[i * self.n + b] for i, b in enumerate(best)]
