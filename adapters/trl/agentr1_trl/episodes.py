"""Episodes as the run viewer's records (:mod:`agentr1_gym.episodes`): trajectories plus what training did with
their tokens (the advantage each token got, the train/inference importance ratio, the policy's entropy)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from agentr1_gym.rollout import Trajectory
from agentr1_trl.forward import completion_states

__all__ = ["advantage_rows", "token_stats", "trajectory_records"]


@torch.no_grad()
def token_stats(
    model: Any,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    *,
    temperature: float = 1.0,
    mask: Sequence[int] | None = None,
    chunk: int = 256,
) -> tuple[list[float | None], list[float | None]]:
    """The policy's log-prob (at ``temperature``) of each completion token and its entropy there, from one forward
    pass over the episode. Only the positions in ``mask`` (default: all) go through the vocabulary projection,
    ``chunk`` at a time (the full logits of a long episode are never built); the others are None."""
    device = next(model.parameters()).device
    prompt = torch.tensor([list(prompt_ids)], device=device)
    completion = torch.tensor([list(completion_ids)], device=device)
    # the final-norm state before each completion token (the package's one forward, see agentr1_trl.forward)
    states = completion_states(
        model, prompt, torch.ones_like(prompt), completion, torch.ones_like(completion), share_prompts=False
    )[0]
    targets = completion[0]
    where = (
        torch.ones(len(completion_ids), dtype=torch.bool) if mask is None else torch.tensor(list(mask)) > 0
    )
    positions = where.nonzero()[:, 0].to(device)
    head = model.get_output_embeddings()
    logps: list[float | None] = [None] * len(completion_ids)
    entropy: list[float | None] = [None] * len(completion_ids)
    for s in range(0, positions.numel(), chunk):
        pos = positions[s : s + chunk]
        logp = F.log_softmax(head(states[pos].to(head.weight.dtype)).float() / temperature, dim=-1)
        picked = logp.gather(1, targets[pos, None])[:, 0].tolist()
        ent = (-(logp.exp() * logp).sum(-1)).tolist()
        for j, p in enumerate(pos.tolist()):
            logps[p], entropy[p] = picked[j], ent[j]
    return logps, entropy


def advantage_rows(advantages: torch.Tensor, mask: torch.Tensor, lengths: Sequence[int]) -> list[list[float]]:
    """Each row's per-token advantage over its completion: a per-episode advantage ``(B,)`` spread over the tokens
    the loss trains (``mask``), a per-token one ``(B, width)`` as it is; 0 off the mask."""
    adv = advantages.detach().float().cpu()
    m = mask.detach().float().cpu()
    full = adv[:, None].expand_as(m) * m if adv.dim() == 1 else adv[:, : m.size(1)] * m
    return [full[i, :n].tolist() for i, n in enumerate(lengths)]


def _special_ids(tokenizer: Any) -> set[int]:
    """The tokenizer's special tokens: the named ones (eos, pad, ...) and every added token marked special
    (``<|im_start|>``, ``<|im_end|>``: what a chat template writes around each message)."""
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i, tok in added.items() if getattr(tok, "special", False))
    return ids


def trajectory_records(
    trajs: Sequence[Trajectory],
    tokenizer: Any,
    *,
    source: str,
    step: int | None,
    env_id: str,
    seeds: Sequence[int | None],
    group_size: int | None = None,
    advantages: Sequence[Sequence[float] | None] | None = None,
    stats: Sequence[tuple[list[float | None], list[float | None]] | None] | None = None,
    indices: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """One record per trajectory (see :mod:`agentr1_gym.episodes`). ``advantages``: per episode, the advantage of
    each completion token; ``stats``: per episode, the trainer's log-probs and entropies of its completion tokens
    (:func:`token_stats`); None where there is none."""
    records = []
    special = _special_ids(tokenizer)  # chat-template scaffolding, drawn dimmed
    for j, t in enumerate(trajs):
        index = indices[j] if indices is not None else j
        n = len(t.completion_ids)
        adv = advantages[j] if advantages is not None else None
        st = stats[j] if stats is not None else None
        ratio = entropy = None
        if st is not None:
            logps, ent = st
            ratio = [
                (math.exp(min(lp - sp, 50.0)) if m and lp is not None else None)
                for lp, sp, m in zip(logps, t.logprobs, t.action_mask)
            ]
            entropy = [(e if m else None) for e, m in zip(ent, t.action_mask)]
        turns = []
        for k in range(len(t.actions)):
            turns.append(
                {
                    "action": t.actions[k],
                    "tool_calls": t.tool_calls[k] if k < len(t.tool_calls) else [],
                    "observation": t.observations[k] if k < len(t.observations) else "",
                    "reward": t.rewards[k] if k < len(t.rewards) else 0.0,
                    "reward_components": t.reward_components[k] if k < len(t.reward_components) else {},
                    "action_error": t.action_errors[k] if k < len(t.action_errors) else None,
                    **({"user": True} if k < len(t.user_spoke) and t.user_spoke[k] else {}),
                    **({"screenshot": t.screenshots[k]} if k < len(t.screenshots) and t.screenshots[k] else {}),
                    # one row per step (a context policy, a template that rewrites history): what this turn saw
                    **({"context": tokenizer.decode(t.turns[k][0], skip_special_tokens=False)}
                       if not t.one_sequence and k < len(t.turns) else {}),
                }
            )  # fmt: skip
        records.append(
            {
                "source": source,
                "step": step,
                "index": index,
                "group": (index // group_size) if group_size else None,
                "env_id": env_id,
                "task_id": t.task_id,
                "seed": seeds[j],
                "prompt": tokenizer.decode(t.prompt_ids, skip_special_tokens=False),
                "question": t.question,
                "gold": list(t.gold),
                "answer": t.answer,
                **({"screenshot": t.screenshot} if t.screenshot else {}),
                "turns": turns,
                "success": float(t.metrics.get("success", 0.0)),
                "return": t.episode_return,
                "ended": "terminated" if t.terminated else (t.truncated_reason or "truncated"),
                "metrics": dict(t.metrics),
                "tokens": {
                    "ids": list(t.completion_ids),
                    "text": tokenizer.batch_decode([[i] for i in t.completion_ids]),
                    "action_mask": list(t.action_mask),
                    "special": [int(i in special) for i in t.completion_ids],
                    "turn_ends": list(t.turn_ends),
                    "timeline": not t.one_sequence,  # the turns' generated ids only (no single sequence)
                    "logprob": list(t.logprobs),
                    "advantage": list(adv)[:n] if adv is not None else None,
                    "ratio": ratio,
                    "entropy": entropy,
                },
            }
        )
    return records
