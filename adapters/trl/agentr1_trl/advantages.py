"""Advantage estimators as pure tensor functions (each has a hand-computed test); the loss is in
:mod:`agentr1_trl.losses`.

Shapes: ``B`` sequences, ``T`` completion tokens. ``mask`` is the action mask (1 on generated tokens). Token
rewards carry each step's reward on the last generated token of its turn (:meth:`Trajectory.token_rewards`).
The *advantage mask* means that estimators that run along time (REINFORCE++ returns, GAE) walk the action-token
timeline only: observation tokens (tool responses, template wrappers) are skipped, not treated as zero-reward
steps to bootstrap through.
"""

from __future__ import annotations

import torch

__all__ = [
    "compact_action_timeline",
    "gae_advantages",
    "grpo_advantages",
    "masked_mean",
    "masked_whiten",
    "reinforce_pp_advantages",
    "rloo_advantages",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / std`` over the masked entries (population std); masked-out entries become 0."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask.to(x.dtype)


def grpo_advantages(
    returns: torch.Tensor, group_size: int, *, scale: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """GRPO: each episode's return minus its group's mean, divided by the group's std if ``scale``.
    ``returns`` is ``(B,)`` with groups of ``group_size`` consecutive episodes (same task)."""
    grouped = returns.view(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        adv = adv / (grouped.std(dim=1, keepdim=True, unbiased=True).nan_to_num(0.0) + eps)
    return adv.reshape(-1)


def rloo_advantages(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO: each return minus the mean of the *other* returns of its group."""
    if group_size < 2:
        raise ValueError("RLOO needs group_size >= 2")
    grouped = returns.view(-1, group_size)
    baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - baseline).reshape(-1)


def compact_action_timeline(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Index map of the action-token timeline: ``order[b, k]`` is the position of row ``b``'s ``k``-th action
    token (padded with 0) and ``valid[b, k]`` says whether it exists."""
    counts = mask.sum(dim=1)
    width = int(counts.max().item()) if mask.numel() else 0
    # stable sort puts action tokens first, in their original order
    order = torch.sort((1 - mask.long()), dim=1, stable=True).indices[:, :width]
    valid = torch.arange(width, device=mask.device).unsqueeze(0) < counts.unsqueeze(1)
    return order, valid


def _discounted_cumsum_reverse(x: torch.Tensor, valid: torch.Tensor, gamma: float) -> torch.Tensor:
    out = torch.zeros_like(x)
    running = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for k in range(x.shape[1] - 1, -1, -1):
        running = torch.where(valid[:, k], x[:, k] + gamma * running, running)
        out[:, k] = running
    return out


def reinforce_pp_advantages(
    token_rewards: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0, whiten: bool = True
) -> torch.Tensor:
    """REINFORCE++: per-token discounted return-to-go along the action timeline, whitened over the whole batch.

    Process rewards therefore credit only the turns before them, and tool tokens contribute no steps.
    """
    order, valid = compact_action_timeline(mask)
    compact = torch.gather(token_rewards, 1, order) * valid
    returns = _discounted_cumsum_reverse(compact, valid, gamma)
    out = torch.zeros_like(token_rewards)
    out.scatter_(1, order, returns * valid)
    out = out * mask.to(out.dtype)
    return masked_whiten(out, mask) if whiten else out


def gae_advantages(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the action-token timeline only (the advantage mask).

    For the action tokens ``t_0 < t_1 < ...`` of a row: ``delta_k = r_{t_k} + gamma * V(t_{k+1}) - V(t_k)`` (0
    after the last), ``A_k = delta_k + gamma * lam * A_{k+1}``. Returns ``(advantages, returns = A + V)``, zero
    off the mask.
    """
    order, valid = compact_action_timeline(mask)
    r = torch.gather(token_rewards, 1, order) * valid
    v = torch.gather(values, 1, order) * valid
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1) * torch.cat(
        [valid[:, 1:], torch.zeros_like(valid[:, :1])], dim=1
    )
    delta = r + gamma * next_v - v
    adv = _discounted_cumsum_reverse(delta, valid, gamma * lam)
    out_adv = torch.zeros_like(token_rewards)
    out_adv.scatter_(1, order, adv * valid)
    out_adv = out_adv * mask.to(out_adv.dtype)
    returns = (out_adv + values) * mask.to(values.dtype)
    return out_adv, returns
