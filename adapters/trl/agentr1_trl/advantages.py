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
    "gigpo_advantages",
    "grpo_advantages",
    "masked_mean",
    "masked_whiten",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "step_advantages_to_tokens",
    "step_gae_advantages",
    "step_returns",
    "turn_rloo_advantages",
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


# ---- step-level credit ------------------------------------------------------------------------------------------
# Per-step estimators work on ragged per-episode lists (one entry per turn: the step reward the env paid for it),
# return one advantage per turn, and leave the broadcast to tokens to :func:`step_advantages_to_tokens`. Episodes
# come in groups of ``group_size`` consecutive ones on the same task, as for GRPO.


def step_returns(step_rewards: list[list[float]], gamma: float = 1.0) -> list[list[float]]:
    """Each turn's discounted return-to-go, ``G_t = r_t + gamma * G_{t+1}``."""
    out = []
    for rewards in step_rewards:
        running, back = 0.0, []
        for r in reversed(rewards):
            running = float(r) + gamma * running
            back.append(running)
        out.append(back[::-1])
    return out


def _explained(values: list[float], baselines: list[float]) -> float | None:
    """``1 - sum (G - b)^2 / sum (G - mean G)^2``: the share of the returns' variance a baseline removes (None when
    the returns do not vary)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    total = sum((g - mean) ** 2 for g in values)
    if total <= 1e-12:
        return None
    return 1.0 - sum((g - b) ** 2 for g, b in zip(values, baselines)) / total


def _groups(n: int, group_size: int) -> list[range]:
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} episodes do not split into groups of {group_size}")
    return [range(i, i + group_size) for i in range(0, n, group_size)]


def gigpo_advantages(
    episode_returns: list[float],
    step_rewards: list[list[float]],
    state_keys: list[list[object]],
    group_size: int,
    *,
    gamma: float = 1.0,
    step_weight: float = 1.0,
    scale: bool = True,
    eps: float = 1e-6,
) -> tuple[list[list[float]], dict[str, float]]:
    """GiGPO (Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978): each
    turn's advantage is its episode's group advantage plus ``step_weight`` times a step-level one.

    * Episode level: :func:`grpo_advantages` over the group's returns, ``(R_i - mean) / (std + eps)``
      (``scale``), or ``R_i - mean``.
    * Step level: within a group, the turns taken from the same world state (equal ``state_keys``; the anchor
      states of the paper) form a step group; each member's advantage is its return-to-go ``G_t`` (discounted by
      ``gamma``) against the step group's, normalised the same way. A turn whose state no other turn of the group
      visited gets 0 (no comparison, no signal).

    Returns the per-turn advantages and signal metrics: ``step_groups_nontrivial`` (the fraction of turns in a
    step group of two or more) and, where the returns vary, ``step_baseline_explained`` (the share of the
    variance of those turns' ``G_t`` that the step groups' means explain).
    """
    n = len(step_rewards)
    if len(episode_returns) != n or len(state_keys) != n:
        raise ValueError("need one return, one reward list and one key list per episode")
    returns_to_go = step_returns(step_rewards, gamma)
    out = [[0.0] * len(r) for r in step_rewards]
    in_groups = total_steps = 0
    grouped_g: list[float] = []
    grouped_b: list[float] = []
    groups = _groups(n, group_size)
    episode_adv = grpo_advantages(
        torch.tensor(episode_returns, dtype=torch.float64), group_size, scale=scale, eps=eps
    ).tolist()
    for group in groups:
        clusters: dict[object, list[tuple[int, int]]] = {}
        for i in group:
            if len(state_keys[i]) != len(step_rewards[i]):
                raise ValueError(
                    f"episode {i}: {len(state_keys[i])} state keys for {len(step_rewards[i])} turns"
                )
            for t, key in enumerate(state_keys[i]):
                clusters.setdefault(key, []).append((i, t))
        step_adv: dict[tuple[int, int], float] = {}
        for members in clusters.values():
            total_steps += len(members)
            if len(members) < 2:
                continue
            in_groups += len(members)
            gs = [returns_to_go[i][t] for i, t in members]
            m = sum(gs) / len(gs)
            s = (sum((g - m) ** 2 for g in gs) / (len(gs) - 1)) ** 0.5
            grouped_g += gs
            grouped_b += [m] * len(gs)
            for (i, t), g in zip(members, gs):
                step_adv[(i, t)] = (g - m) / (s + eps) if scale else g - m
        for i in group:
            for t in range(len(step_rewards[i])):
                out[i][t] = episode_adv[i] + step_weight * step_adv.get((i, t), 0.0)
    metrics = {"step_groups_nontrivial": in_groups / total_steps if total_steps else 0.0}
    explained = _explained(grouped_g, grouped_b)
    if explained is not None:
        metrics["step_baseline_explained"] = explained
    return out, metrics


def turn_rloo_advantages(
    step_rewards: list[list[float]], group_size: int, *, gamma: float = 1.0
) -> tuple[list[list[float]], dict[str, float]]:
    """Per-turn returns-to-go with a leave-one-out baseline at the same turn index: turn ``t`` of episode ``i``
    gets ``A_{i,t} = G_{i,t} - b_{i,t}`` with ``b_{i,t}`` the mean of ``G_{j,t}`` over the *other* episodes ``j``
    of the group that reached turn ``t`` (0 when none did).

    Why this is unbiased when episodes differ in length. The policy gradient is
    ``E[sum_t grad log pi(a_t | h_t) G_t]``, and subtracting ``b_t`` leaves it unchanged exactly when
    ``E[grad log pi(a_t | h_t) b_t] = 0``, which holds whenever ``b_t`` does not depend on ``a_t`` (or anything
    after it) given ``h_t``: then ``E[grad log pi(a_t|h_t) b_t | h_t, b_t] = b_t * sum_a grad pi(a|h_t) = 0``.
    The other episodes of the group are independent draws on the same task, so their ``G_{j,t}``, and *which* of
    them reached turn ``t``, are independent of episode ``i``'s action at ``t``; episode ``i`` reaching turn ``t``
    at all is part of ``h_t``. So ``b_{i,t}`` qualifies, however many episodes each turn's mean averages over.
    What the naive per-turn normalisation (verl RFC #7244) gets wrong is the self-inclusion: a mean or std over
    the episodes that reached turn ``t`` *including* ``i`` contains ``G_{i,t}``, which depends on ``a_t``. Its mean
    shrinks turn ``t``'s gradient by ``1 - 1/n_t``, where ``n_t`` (the episodes still running at ``t``) is
    something the policy controls by ending episodes early or late; and dividing by a std that contains
    ``G_{i,t}`` biases it further. Normalising each turn's own reward ``r_t`` instead of ``G_t`` would also drop
    what a turn causes later. An episode that ended before turn ``t`` is left out of ``b_{i,t}`` rather than
    counted as ``G = 0``: both are unbiased, leaving it out is the closer baseline.

    Returns the advantages and ``step_baseline_explained`` (where the returns vary).
    """
    returns_to_go = step_returns(step_rewards, gamma)
    out = [[0.0] * len(r) for r in step_rewards]
    all_g: list[float] = []
    all_b: list[float] = []
    for group in _groups(len(step_rewards), group_size):
        for i in group:
            for t, g in enumerate(returns_to_go[i]):
                others = [returns_to_go[j][t] for j in group if j != i and len(returns_to_go[j]) > t]
                b = sum(others) / len(others) if others else 0.0
                out[i][t] = g - b
                all_g.append(g)
                all_b.append(b)
    explained = _explained(all_g, all_b)
    return out, ({"step_baseline_explained": explained} if explained is not None else {})


def step_gae_advantages(
    step_rewards: list[list[float]],
    step_values: list[list[float]],
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    whiten: bool = True,
    eps: float = 1e-8,
) -> tuple[list[list[float]], list[list[float]]]:
    """Step-level GAE, as StepPO does it (Wang et al., "StepPO: Step-Aligned Policy Optimization for Agentic
    Reinforcement Learning", arXiv 2604.18401, the Agent-R1 authors' step-level successor): the MDP's steps are
    turns, ``V_t`` is the value of the state a turn starts from (before its first generated token), ``r_t`` the
    turn's reward; ``delta_t = r_t + gamma V_{t+1} - V_t`` (``V`` after the last turn is 0) and
    ``A_t = delta_t + gamma lam A_{t+1}``. The advantages are whitened over the batch's turns, each counted once
    (not once per token, which would weight long turns more). Returns ``(advantages, returns = A + V)`` per turn,
    the returns before whitening."""
    advs, rets = [], []
    for rewards, values in zip(step_rewards, step_values):
        if len(rewards) != len(values):
            raise ValueError(f"{len(values)} values for {len(rewards)} turns")
        running, back = 0.0, []
        for t in range(len(rewards) - 1, -1, -1):
            nxt = values[t + 1] if t + 1 < len(values) else 0.0
            running = rewards[t] + gamma * nxt - values[t] + gamma * lam * running
            back.append(running)
        adv = back[::-1]
        advs.append(adv)
        rets.append([a + v for a, v in zip(adv, values)])
    if whiten:
        flat = [a for adv in advs for a in adv]
        if flat:
            mean = sum(flat) / len(flat)
            std = (sum((a - mean) ** 2 for a in flat) / len(flat)) ** 0.5
            advs = [[(a - mean) / (std + eps) for a in adv] for adv in advs]
    return advs, rets


def step_advantages_to_tokens(
    per_step: list[list[float]], turn_ends: list[list[int]], mask: torch.Tensor
) -> torch.Tensor:
    """``(B, T)`` token advantages: every action token of turn ``t`` (``mask`` 1, after turn ``t-1``'s last token,
    up to turn ``t``'s ``turn_ends[t]``) carries the turn's advantage. Works on both timelines: a single sequence
    with observation tokens between turns (mask 0) and the action timeline of per-turn rows."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    for b, (advs, ends) in enumerate(zip(per_step, turn_ends)):
        start = 0
        for adv, end in zip(advs, ends):
            out[b, start : end + 1] = adv
            start = end + 1
    return out * mask.to(out.dtype)
