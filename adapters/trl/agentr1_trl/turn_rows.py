"""Per-turn training rows for chat templates that are not prefix-stable.

A template that rewrites earlier turns (e.g. one that drops earlier ``<think>`` blocks) gives no single token
sequence the policy saw, so such an episode trains as one row per turn: the turn's own context as the prompt and
the turn's generated ids as the completion (:meth:`~agentr1_gym.rollout.Trajectory.samples`).

Advantages are computed first, on the episode's *action timeline* (the turns' generated ids back to back, which is
what such a trajectory's ``completion_ids`` hold): an episode-level advantage (GRPO, RLOO) and per-token ones
(REINFORCE++, GAE) are then exactly those of the episode, and :func:`expand_turn_rows` cuts every per-token
tensor of the batch into the turns' spans. Log-probs that depend on the context (the old policy's and the
reference's) must be recomputed for the per-turn rows; the function says which rows those are. The sampler's
log-probs were taken in each turn's own context, so their slices are exact.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1_gym.rollout import Trajectory
from agentr1_trl.forward import row_lengths

__all__ = ["CONTEXT_DEPENDENT", "expand_turn_rows", "turn_spans"]

#: per-token batch entries computed on a row's context: wrong on a timeline row, recomputed for per-turn rows
CONTEXT_DEPENDENT = ("old_per_token_logps", "ref_per_token_logps")


def turn_spans(traj: Trajectory) -> list[tuple[int, int]]:
    """``[start, end)`` of each turn's generated ids in a non-prefix-stable trajectory's action timeline."""
    spans, start = [], 0
    for _context, gen, _logps in traj.turns:
        spans.append((start, start + len(gen)))
        start += len(gen)
    if start != len(traj.completion_ids):
        raise ValueError(
            f"trajectory's action timeline has {len(traj.completion_ids)} tokens, its turns {start}: "
            "it is not a non-prefix-stable trajectory from collect_rollouts"
        )
    return spans


def expand_turn_rows(
    batch: dict[str, Any], trajectories: list[Trajectory], *, pad_id: int, multiple: int = 1
) -> tuple[dict[str, Any], list[int]]:
    """Replace every non-prefix-stable episode's row by one row per turn.

    ``batch`` holds one row per trajectory (``prompt_ids``/``prompt_mask`` left-padded, ``completion_ids``,
    ``completion_mask``, ``action_mask`` and per-token entries right-padded; per-row entries such as an
    episode-level ``advantages`` have one value per row). Prefix-stable rows are kept as they are; per-token
    entries of a per-turn row are the turn's span of its timeline row, per-row entries are repeated. With
    ``multiple`` > 1 the row count is padded to a multiple of it with copies of the first row whose masks and
    advantages are zero (they add nothing to the loss). Returns the new batch and the indices of the per-turn rows
    (whose :data:`CONTEXT_DEPENDENT` entries the caller must recompute)."""
    rows = len(trajectories)
    old_width = batch["completion_ids"].size(1)
    prompts: list[list[int]] = []
    completions: list[list[int]] = []
    sources: list[tuple[int, int, int]] = []  # (source row, start, end) of each new row in the old row
    turn_rows: list[int] = []
    prompt_lens, completion_lens = row_lengths(batch)
    for i, traj in enumerate(trajectories):
        prompt_len, completion_len = int(prompt_lens[i]), int(completion_lens[i])
        if traj.one_sequence:
            prompt = batch["prompt_ids"][i, batch["prompt_ids"].size(1) - prompt_len :].tolist()
            prompts.append(prompt)
            completions.append(batch["completion_ids"][i, :completion_len].tolist())
            sources.append((i, 0, completion_len))
            continue
        for (context, gen, _), (start, end) in zip(traj.turns, turn_spans(traj)):
            turn_rows.append(len(prompts))
            prompts.append(list(context))
            completions.append(list(gen))
            sources.append((i, start, end))
    dummies = (-len(prompts)) % max(multiple, 1)
    for _ in range(dummies):
        prompts.append(prompts[0])
        completions.append(completions[0])
        sources.append(sources[0])
    n = len(prompts)
    width_p = max(len(p) for p in prompts)
    width_c = max(max(len(c) for c in completions), 1)
    device = batch["completion_ids"].device
    out: dict[str, Any] = {}
    prompt_ids = torch.full((n, width_p), pad_id, dtype=batch["prompt_ids"].dtype)
    prompt_mask = torch.zeros((n, width_p), dtype=batch["prompt_mask"].dtype)
    completion_ids = torch.full((n, width_c), pad_id, dtype=batch["completion_ids"].dtype)
    completion_mask = torch.zeros((n, width_c), dtype=batch["completion_mask"].dtype)
    for r, (p, c) in enumerate(zip(prompts, completions)):
        if p:
            prompt_ids[r, width_p - len(p) :] = torch.tensor(p)
            prompt_mask[r, width_p - len(p) :] = 1
        if c:
            completion_ids[r, : len(c)] = torch.tensor(c)
            completion_mask[r, : len(c)] = 1
    out["prompt_ids"], out["prompt_mask"] = prompt_ids.to(device), prompt_mask.to(device)
    out["completion_ids"], out["completion_mask"] = completion_ids.to(device), completion_mask.to(device)
    src = torch.tensor([s for s, _, _ in sources], device=device)
    for key, value in batch.items():
        if key in out:
            continue
        if not (torch.is_tensor(value) and value.dim() > 0 and value.size(0) == rows):
            out[key] = value  # scalars (num_items_in_batch: the action tokens are the same ones)
        elif value.dim() == 2 and value.size(1) == old_width:  # per token: the row's span
            new = torch.zeros((n, width_c), dtype=value.dtype, device=value.device)
            for r, (s, start, end) in enumerate(sources):
                new[r, : end - start] = value[s, start:end]
            out[key] = new
        else:  # per row: repeated for each of the episode's rows
            out[key] = value[src.to(value.device)]
    if dummies:
        for key in ("completion_mask", "action_mask", "advantages"):
            if key in out:
                out[key][n - dummies :] = 0
    return out, turn_rows
