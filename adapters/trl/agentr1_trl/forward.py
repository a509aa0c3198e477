"""The policy's forward pass over a training micro-batch, computing each shared prompt once.

A GRPO group is ``num_generations`` episodes of one task: their rows start with the same prompt (system message,
tool schemas, question), often the larger part of each row. :func:`completion_logps` runs each distinct prompt once
(with the KV cache), gives every row its prompt's cache, and runs only the completions on top: the same
log-probs and gradients as the full forward (tested), on ``groups x prompt + rows x completion`` tokens instead of
``rows x (prompt + completion)``. It needs the KV cache in training, so it is used only without gradient
checkpointing and in one process (DDP wants one forward per backward); elsewhere the full forward runs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["completion_logps", "prompt_groups"]


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct prompts of a left-padded batch: ``(first row of each distinct prompt, each row's prompt
    index)``."""
    keyed = torch.where(prompt_mask.bool(), prompt_ids, torch.full_like(prompt_ids, -1))
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    rows = torch.arange(inverse.numel(), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), inverse.numel(), dtype=torch.long, device=inverse.device)
    return first.scatter_reduce(0, inverse, rows, reduce="amin"), inverse  # the first row of each prompt


def completion_logps(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    hidden: bool = False,
    needed: torch.Tensor | None = None,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Log-probs (at ``temperature``) of the completion tokens, each distinct prompt run once; with ``hidden``
    also the last hidden state before each completion token (what a value head reads).

    Only the tokens in ``needed`` (default: ``completion_mask``; the loss passes its action mask) go through the
    vocabulary projection, ``chunk`` positions at a time; log-probs elsewhere are 0. The full ``(rows, width,
    vocabulary)`` logits are never built: on a CPU, allocating and normalising them costs as much as the
    transformer itself. Returns None when no prompt is shared (every row's prompt is distinct): the caller's full
    forward costs the same then."""
    first, inverse = prompt_groups(prompt_ids, prompt_mask)
    if first.numel() == prompt_ids.size(0):
        return None
    out = model(
        input_ids=prompt_ids[first],
        attention_mask=prompt_mask[first],
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=True,
    )
    cache = out.past_key_values
    cache.batch_select_indices(inverse)  # every row gets its prompt's keys and values (autograd follows)
    rest = model(
        input_ids=completion_ids,
        attention_mask=torch.cat([prompt_mask, completion_mask], dim=1),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=True,
    )
    # the (final-norm) state before each completion token: the prompt's last one, then the completion's own
    states = torch.cat([out.hidden_states[-1][:, -1:][inverse], rest.hidden_states[-1][:, :-1]], dim=1)
    where = (completion_mask if needed is None else needed).bool()
    logps = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
    if bool(where.any()):
        head = model.get_output_embeddings()
        picked, targets = states[where], completion_ids[where]
        parts = []
        for start in range(0, picked.size(0), chunk):
            logits = head(picked[start : start + chunk]).float() / temperature
            parts.append(-F.cross_entropy(logits, targets[start : start + chunk], reduction="none"))
        logps = logps.masked_scatter(where, torch.cat(parts))
    return logps, (states if hidden else None)
