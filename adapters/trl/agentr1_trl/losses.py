"""The loss as pure tensor functions: the clipped policy surrogate, KL estimators, the value loss and the
aggregation over action tokens that GRPO and PPO share (each piece has a hand-computed test).

Shapes: ``B`` sequences, ``T`` completion tokens; ``mask`` is the action mask (1 on generated tokens: the loss
mask of Agent-R1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "LossTerms",
    "aggregate",
    "clipped_policy_loss",
    "clipped_value_loss",
    "kl_penalty",
    "policy_loss",
    "truncated_is_weights",
]


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token KL(pi || ref) estimators from samples of pi: ``k1 = log pi - log ref``; ``k3 = exp(ref - pi) -
    (ref - pi) - 1`` (unbiased, non-negative); ``low_var_kl`` = k3 clamped to [-10, 10] (as in verl)."""
    log_ratio = ref_logps - logps
    if kind == "k1":
        return -log_ratio
    k3 = torch.exp(log_ratio) - log_ratio - 1
    if kind == "k3":
        return k3
    if kind == "low_var_kl":
        return torch.clamp(k3, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; use 'k1', 'k3' or 'low_var_kl'")


def clipped_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> torch.Tensor:
    """Per-token PPO clipped surrogate ``-min(ratio * A, clip(ratio, 1-eps_low, 1+eps_high) * A)``, zero off mask.
    ``advantages`` may be ``(B,)`` (one per sequence) or ``(B, T)``."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return -torch.min(ratio * advantages, clipped * advantages) * mask.to(logps.dtype)


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float
) -> torch.Tensor:
    """Per-token PPO value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- clip) - R)^2)``."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2)


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    denominators: tuple[int, float, int] | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss over the action tokens of a micro-batch.

    ``grpo``: mean over sequences of each sequence's mean over its action tokens; ``dr_grpo``: sum over
    ``rows x width``; ``bnpo``/``dapo``: sum divided by ``action tokens``. ``denominators`` = ``(rows, action tokens,
    width)``, by default this micro-batch's own (its rows, its action tokens, its padded width). Trainers pass the
    whole micro-batch's when only some of its rows are passed (rows with zero advantage skipped), and the
    constants that make micro-batches add up to the whole batch's loss (``dapo``'s tokens are the generation
    batch's, ``dr_grpo``'s width a constant): see ``TRLAgentTrainer.loss_denominators``.
    """
    mask_f = mask.to(per_token.dtype)
    n_rows, n_tokens, width = denominators or (
        per_token.size(0),
        float(mask_f.sum().clamp(min=1.0)),
        per_token.size(1),
    )
    if loss_type == "grpo":
        return (per_token.sum(-1) / mask_f.sum(-1).clamp(min=1.0)).sum() / n_rows
    if loss_type == "dr_grpo":
        return per_token.sum() / (n_rows * max(width, 1))
    if loss_type in ("bnpo", "dapo"):
        return per_token.sum() / n_tokens
    raise ValueError(f"unknown loss_type {loss_type!r}")


@dataclass
class LossTerms:
    """The policy part of a loss: the per-token loss (surrogate + beta * KL, zero off the mask) and its stats."""

    per_token: torch.Tensor
    kl: float | None
    clip_ratio: float


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float = 0.0,
    ref_logps: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    is_weights: torch.Tensor | None = None,
) -> LossTerms:
    """Clipped surrogate over action tokens plus ``beta`` x KL to the reference (``old_logps`` None: on-policy,
    the ratio is 1 with the right gradient). ``is_weights`` (no gradient) scale each token's surrogate: the
    truncated importance-sampling correction for a sampler whose log-probs differ from the trainer's."""
    old = logps.detach() if old_logps is None else old_logps
    per_token = clipped_policy_loss(logps, old, advantages, mask, eps_low=eps_low, eps_high=eps_high)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    mask_f = mask.to(per_token.dtype)
    kl_value = None
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta != 0 needs the reference log-probs")
        kl = kl_penalty(logps, ref_logps, kl_estimator) * mask_f
        per_token = per_token + beta * kl
        kl_value = (kl.sum() / mask_f.sum().clamp(min=1)).item()
    with torch.no_grad():
        ratio = torch.exp(logps - old)
        clipped = ((ratio < 1 - eps_low) | (ratio > 1 + eps_high)).to(mask_f.dtype) * mask_f
        clip_ratio = (clipped.sum() / mask_f.sum().clamp(min=1)).item()
    return LossTerms(per_token, kl_value, clip_ratio)


def truncated_is_weights(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, float, float]:
    """Truncated importance-sampling weights ``min(exp(trainer - sampler), cap)`` per action token (1 off the mask),
    and the mean and max ``|trainer - sampler|`` over action tokens (the train/inference mismatch)."""
    mask_b = mask.bool()
    diff = (trainer_logps - sampler_logps).detach()
    weights = torch.where(mask_b, torch.exp(diff).clamp(max=cap), torch.ones_like(diff))
    gap = diff.abs()[mask_b]
    mean = float(gap.mean()) if gap.numel() else 0.0
    worst = float(gap.max()) if gap.numel() else 0.0
    return weights, mean, worst
