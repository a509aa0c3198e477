"""The policy's forward pass over a training micro-batch, computing each shared prompt once.

A GRPO group is ``num_generations`` episodes of one task: their rows start with the same prompt (system message,
tool schemas, question), often the larger part of each row. :func:`completion_logps` runs each distinct prompt once
(with the KV cache), gives every row its prompt's cache, and runs only the completions on top: the same
log-probs and gradients as the full forward (tested), on ``groups x prompt + rows x completion`` tokens instead of
``rows x (prompt + completion)``.

Step rows (a context policy: one row per turn, its own context as prompt) have no two prompts alike, but they
share a beginning: the tool instructions and the task message, which every step's context repeats. There
:func:`completion_logps` runs the rows' longest common prefix once and each row's own part (the rest of its
context, then its completion) on top, with position ids that continue the prefix's, so each row sees the token
positions it would see alone (tested against the full forward).

Either way it needs the KV cache in training, so it is used only without gradient checkpointing and in one
process (DDP wants one forward per backward); elsewhere (``share_prompts=False``, or no prompt worth sharing) the
full forward runs. All three are one function, :func:`completion_logps`: every log-prob the package computes goes
through it (the GRPO and PPO losses, the old policy's and the reference's log-probs of per-turn rows, PPO's values,
the viewer's per-token statistics through :func:`completion_states`), and the model's output projection runs only
where a log-prob is needed (:func:`projected_logps`, which the warm start's NLL in :mod:`agentr1_trl.sft` uses too). :func:`sequence_states` is the full forward itself (the
value head's estimates read it).

A micro-batch is a number of *episodes*; with step rows each of them is as many rows as it has turns, so one
forward pass over a micro-batch would hold every step of every episode in it. :func:`update_passes` cuts a
micro-batch's rows into passes of at most a token budget (what each pass's forward holds, the shared prefix
counted once) and :func:`select_rows` gives each pass its rows with the padding they do not need trimmed; the
trainer runs forward and backward per pass with the whole micro-batch's loss denominators, so the gradient is the
same as one pass's (tested). Memory then follows the budget (and the longest row), not the episodes' length.

Which rows share a micro-batch is :func:`regroup_micro_batches`'s choice, not a shuffle's: TRL pads a whole
generation batch to its longest row and cuts it, shuffled, into micro-batches, so a micro-batch pays for the
batch's longest row and holds a group's episodes only by chance. Regrouped, each optimizer step's rows keep a
GRPO group together (its prompt then runs once per micro-batch) and rows of similar length together, and each
micro-batch is trimmed to its own rows' width. The loss of every row, and so the step's gradient, is unchanged
(tested): the loss denominators are the whole step's or per row, never "whoever shares my micro-batch".
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from agentr1_gym.errors import ConfigError
from agentr1_trl.causal_rows import causal_rows, rows_are_causal

__all__ = [
    "CPU_VOCAB_BLOCK",
    "MIN_SHARED_PREFIX",
    "common_prefix",
    "completion_logps",
    "completion_states",
    "micro_batch_order",
    "pad_width",
    "pass_tokens",
    "projected_logps",
    "prompt_groups",
    "regroup_micro_batches",
    "row_lengths",
    "select_rows",
    "sequence_states",
    "share_plan",
    "update_passes",
]

#: the shortest common prefix worth running once for rows whose prompts all differ (below it the second forward
#: call costs more than the tokens it saves)
MIN_SHARED_PREFIX = 16


#: the vocabulary block :func:`projected_logps` works in on a CPU: a (256, 4,096) float32 block of logits stays in
#: the caches between its product, its log-sum-exp and (backward) its softmax, where a (256, 49,152) chunk streams
#: through memory three times. Measured in ``benchmarks/output_head.py`` (``output_head_avx512.json``).
CPU_VOCAB_BLOCK = 4096


class _ProjectedLogps(torch.autograd.Function):
    """``log softmax(states @ weight.T / temperature)[targets]``, ``chunk`` rows and ``block`` vocabulary entries at
    a time (the log-normaliser is combined over blocks), keeping for the backward pass only the inputs and one
    log-normaliser per row: each block's logits are recomputed there."""

    @staticmethod
    def forward(ctx, states, weight, targets, temperature, chunk, block):  # type: ignore[override]
        rows, vocabulary = states.size(0), weight.size(0)
        out = torch.empty(rows, dtype=torch.float32, device=states.device)
        lse = torch.empty_like(out)
        # the products' dtype: autocast's where it is on (bf16: the backward pass, which autocast does not reach,
        # recomputes the logits in it too, not in the states' float32), else the states'; the weight cast once
        device = states.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else states.dtype
        w = weight.to(dtype)
        starts = range(0, vocabulary, block)
        for s in range(0, rows, chunk):
            x, wanted = states[s : s + chunk].to(dtype), targets[s : s + chunk]
            parts = torch.empty(x.size(0), len(starts), dtype=torch.float32, device=states.device)
            picked = torch.empty(x.size(0), dtype=torch.float32, device=states.device)
            for j, lo in enumerate(starts):
                logits = _block_logits(x, w, lo, block, temperature)
                parts[:, j] = torch.logsumexp(logits, dim=-1)
                # the target's logit where it falls in this block (an index clamped into it, kept where it does)
                at = (wanted - lo).clamp_(0, logits.size(1) - 1)
                inside = (wanted >= lo) & (wanted < lo + logits.size(1))
                picked = torch.where(inside, logits.gather(1, at[:, None])[:, 0], picked)
            lse[s : s + chunk] = torch.logsumexp(parts, dim=-1)
            out[s : s + chunk] = picked - lse[s : s + chunk]
        ctx.save_for_backward(states, weight, targets, lse)
        ctx.temperature, ctx.chunk, ctx.block, ctx.dtype = temperature, chunk, block, dtype
        return out

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        states, weight, targets, lse = ctx.saved_tensors
        w = weight.to(ctx.dtype)
        need_states, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        d_states = torch.empty_like(states) if need_states else None
        d_weight = torch.zeros_like(weight, dtype=torch.float32) if need_weight else None
        for s in range(0, states.size(0), ctx.chunk):
            rows = slice(s, s + ctx.chunk)
            x, wanted = states[rows].to(w.dtype), targets[rows]
            # d logp[target] / d logits = onehot(target) - softmax, times the upstream gradient and 1/T: the
            # softmax part block by block, the one-hot part (one weight row per token) added once
            scale = (grad[rows] / ctx.temperature).float()[:, None]
            acc = torch.zeros(x.size(0), states.size(1), dtype=torch.float32, device=states.device)
            for lo in range(0, w.size(0), ctx.block):
                logits = _block_logits(x, w, lo, ctx.block, ctx.temperature)
                d_logits = torch.exp_(logits.sub_(lse[rows, None])).mul_(scale).neg_()
                if need_states:
                    acc += d_logits.to(w.dtype) @ w[lo : lo + ctx.block]
                if need_weight:
                    d_weight[lo : lo + ctx.block] += d_logits.T @ states[rows].float()
            if need_states:
                acc += w[wanted].float() * scale
                d_states[rows] = acc.to(states.dtype)
            if need_weight:
                d_weight.index_add_(0, wanted, states[rows].float() * scale)
        return d_states, (d_weight.to(weight.dtype) if need_weight else None), None, None, None, None


def _block_logits(x: torch.Tensor, w: torch.Tensor, lo: int, block: int, temperature: float) -> torch.Tensor:
    """The float32 logits of rows ``x`` over vocabulary entries ``lo .. lo + block`` of ``w``, at ``temperature``."""
    logits = (x @ w[lo : lo + block].T).float()
    if temperature != 1.0:  # in place: a (rows, block) division costs as much as a pass over the product
        logits.div_(temperature)
    return logits


def projected_logps(
    states: torch.Tensor,
    head: Any,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk: int = 256,
    block: int | None = None,
) -> torch.Tensor:
    """The log-prob of each ``targets`` token from the hidden ``states`` ``(N, hidden)`` through the output
    projection ``head``, as ``-cross_entropy(head(states) / temperature, targets)`` computes it (same values and
    gradients, tested), without keeping ``(N, vocabulary)`` logits for the backward pass: it recomputes them
    there, ``chunk`` rows at a time. For a 49k-token vocabulary that is 200 KB per scored token not held between
    the forward and the backward pass.

    Each chunk's vocabulary is taken ``block`` entries at a time (default: :data:`CPU_VOCAB_BLOCK` on a CPU, the
    whole vocabulary elsewhere), its log-normaliser combined over the blocks: on a CPU the passes over a block's
    logits then run in the caches (on one core of an AVX512-BF16 EPYC, 1.3x on the head's forward and backward,
    1.5x on a pass without autograd: ``output_head_avx512.json``). A head with a bias (or not a plain linear layer) takes the direct path."""
    weight = getattr(head, "weight", None)
    if not isinstance(head, torch.nn.Linear) or head.bias is not None or weight is None:
        parts = [
            -F.cross_entropy(head(states[s : s + chunk]).float() / temperature, targets[s : s + chunk],
                             reduction="none")
            for s in range(0, states.size(0), chunk)
        ]  # fmt: skip
        return torch.cat(parts) if parts else states.new_zeros(0, dtype=torch.float32)
    if block is None:
        block = CPU_VOCAB_BLOCK if states.device.type == "cpu" else weight.size(0)
    if block < 1 or chunk < 1:
        raise ConfigError(
            f"projected_logps: chunk and block must be positive, got chunk={chunk}, block={block}; pass block=None "
            "for the default (CPU_VOCAB_BLOCK on a CPU, the whole vocabulary elsewhere)"
        )
    return _ProjectedLogps.apply(states, weight, targets, float(temperature), int(chunk), int(block))


def _last_only(input_ids: torch.Tensor) -> torch.Tensor:
    """``logits_to_keep`` for a forward pass that needs only hidden states: the last position, as an index tensor
    (transformers' documented form). The int form (``1``) slices the hidden states, and a strided slice through a
    bf16 ``linear`` on a CPU makes PyTorch expand the vocabulary projection's weight per row: 0.8 s per call on
    SmolLM2 (4 rows, 49,152 x 576), against 9 ms for the same product on an index-selected (contiguous) state."""
    return torch.tensor([input_ids.size(1) - 1], device=input_ids.device)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct prompts of a left-padded batch: ``(first row of each distinct prompt, each row's prompt
    index)``."""
    keyed = torch.where(prompt_mask.bool(), prompt_ids, torch.full_like(prompt_ids, -1))
    _, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    rows = torch.arange(inverse.numel(), device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), inverse.numel(), dtype=torch.long, device=inverse.device)
    return first.scatter_reduce(0, inverse, rows, reduce="amin"), inverse  # the first row of each prompt


def share_plan(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> str:
    """How :func:`completion_states` would run these rows' prompts: ``"prompts"`` (some prompt repeats: each
    distinct one runs once), ``"prefix"`` (all differ, but they share a beginning of at least
    :data:`MIN_SHARED_PREFIX` tokens, which runs once) or ``"full"`` (every row on its own)."""
    return _plan(prompt_ids, prompt_mask)[0]


def _plan(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[str, Any]:
    """:func:`share_plan` with what it found, so the forward does not find it again: the prompt groups
    (``"prompts"``) or the shared prefix's length (``"prefix"``)."""
    rows = prompt_ids.size(0)
    if rows < 2:
        return "full", None
    groups = prompt_groups(prompt_ids, prompt_mask)
    if groups[0].numel() < rows:
        return "prompts", groups
    shared = common_prefix(prompt_ids, prompt_mask)
    return ("prefix", shared) if shared >= MIN_SHARED_PREFIX else ("full", None)


def sequence_states(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The model's last (final-norm) hidden state at every position of each row, ``(rows, width, hidden)``: the
    plain forward pass, without the vocabulary projection (the last position's only), so no ``(rows, width,
    vocabulary)`` logits are built. ``attention_mask=None``: every row causal over all its columns."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        logits_to_keep=_last_only(input_ids),
        use_cache=False,  # nothing reads it: no key/value cache object per pass
    )
    return out.hidden_states[-1]


def completion_states(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    share_prompts: bool = True,
    unmasked_causal_rows: bool = True,
    attention_kernel: str = "auto",
) -> torch.Tensor:
    """The (final-norm) hidden state before each completion token, ``(rows, completion width, hidden)``: the
    state the next-token distribution of that token is read from, and the state a value head scores. With
    ``share_prompts`` (and a :func:`share_plan` other than ``"full"``) shared prompts or a shared prefix run once;
    otherwise one full forward pass (the same states, tested). With ``unmasked_causal_rows``, rows that need no
    attention mask (:func:`~agentr1_trl.causal_rows.rows_are_causal`) run without one
    (:func:`~agentr1_trl.causal_rows.causal_rows`; the same states, tested), through ``attention_kernel`` (one of
    :data:`~agentr1_trl.causal_rows.ATTENTION_KERNELS`; ``"auto"``: the block kernel for bf16 rows on a CPU)."""
    if prompt_ids.size(1) == 0:
        raise ValueError("completion_states needs at least one prompt token before the completion")
    plan, found = _plan(prompt_ids, prompt_mask) if share_prompts else ("full", None)
    parts = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    if plan == "prefix":
        return _shared_prefix_states(model, parts, found)
    # rows that need no attention mask (no prompt padding, completions padded only at their end) attend without
    # one: the kernel's causal path (agentr1_trl.causal_rows)
    unmask = unmasked_causal_rows and rows_are_causal(prompt_mask, completion_mask)
    with causal_rows(model, unmask, attention_kernel) as unmasked:
        if plan == "prompts":
            return _shared_prompt_states(model, parts, found, masked=not unmasked)
        states = sequence_states(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            None if unmasked else torch.cat([prompt_mask, completion_mask], dim=1),
        )
    return states[:, prompt_ids.size(1) - 1 : -1]


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
    chunk: int = 256,
    share_prompts: bool = True,
    head: Any | None = None,
    unmasked_causal_rows: bool = True,
    attention_kernel: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (at ``temperature``) of the completion tokens, ``(rows, completion width)`` float32; with
    ``hidden`` also the state before each completion token (what a value head reads), else None. The forward pass
    is :func:`completion_states` (``share_prompts``: each shared prompt or prefix once; ``unmasked_causal_rows``:
    no attention mask for rows that need none, through ``attention_kernel``).

    Only the tokens in ``needed`` (default: ``completion_mask``; the loss passes its action mask) go through the
    vocabulary projection ``head`` (default: the model's output embeddings; pass the unwrapped model's under DDP),
    ``chunk`` positions at a time; log-probs elsewhere are 0. The full ``(rows, width, vocabulary)`` logits are
    never built: on a CPU, allocating and normalising them costs as much as the transformer itself."""
    states = completion_states(
        model,
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        share_prompts=share_prompts,
        unmasked_causal_rows=unmasked_causal_rows,
        attention_kernel=attention_kernel,
    )
    where = (completion_mask if needed is None else needed).bool()
    logps = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
    if bool(where.any()):
        projection = model.get_output_embeddings() if head is None else head
        picked = projected_logps(states[where], projection, completion_ids[where], temperature, chunk)
        logps = logps.masked_scatter(where, picked)
    return logps, (states if hidden else None)


def _shared_prompt_states(
    model: Any,
    parts: tuple[torch.Tensor, ...],
    groups: tuple[torch.Tensor, torch.Tensor],
    masked: bool = True,
) -> torch.Tensor:
    """Each distinct prompt once (with the KV cache), every row's completion on top of its prompt's cache.
    ``parts``: ``(prompt_ids, prompt_mask, completion_ids, completion_mask)``; ``groups``: :func:`prompt_groups`'s;
    ``masked=False``: both passes without an attention mask (rows that need none, under :func:`causal_rows`)."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = parts
    first, inverse = groups
    out = model(
        input_ids=prompt_ids[first],
        attention_mask=prompt_mask[first] if masked else None,
        use_cache=True,
        logits_to_keep=_last_only(prompt_ids),
        output_hidden_states=True,
    )
    cache = out.past_key_values
    cache.batch_select_indices(inverse)  # every row gets its prompt's keys and values (autograd follows)
    rest = model(
        input_ids=completion_ids,
        attention_mask=torch.cat([prompt_mask, completion_mask], dim=1) if masked else None,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=_last_only(completion_ids),
        output_hidden_states=True,
    )
    # the (final-norm) state before each completion token: the prompt's last one, then the completion's own
    return torch.cat([out.hidden_states[-1][:, -1:][inverse], rest.hidden_states[-1][:, :-1]], dim=1)


def common_prefix(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> int:
    """How many leading tokens every row's prompt shares (a left-padded batch; each row's real tokens compared from
    its own start), at most the shortest prompt's length less one: every row keeps a token of its own, so the state
    before its first completion token comes from its own part."""
    lengths = prompt_mask.sum(1)
    shortest = int(lengths.min())
    if shortest < 2:
        return 0
    starts = prompt_ids.size(1) - lengths
    aligned = prompt_ids.gather(1, starts[:, None] + torch.arange(shortest, device=prompt_ids.device)[None])
    differs = (aligned != aligned[:1]).any(0)
    same = int(differs.nonzero()[0, 0]) if bool(differs.any()) else shortest
    return min(same, shortest - 1)


def _shared_prefix_states(model: Any, parts: tuple[torch.Tensor, ...], shared: int) -> torch.Tensor:
    """Rows with distinct prompts: the longest common prefix (``shared`` tokens, :func:`common_prefix`'s) once,
    then each row's rest of the prompt (left-padded after the prefix) and its completion on top, positioned as if
    the row had no padding."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = parts
    rows = prompt_ids.size(0)
    device = prompt_ids.device
    lengths = prompt_mask.sum(1)
    starts = prompt_ids.size(1) - lengths
    prefix = prompt_ids[:1, int(starts[0]) : int(starts[0]) + shared]
    out = model(
        input_ids=prefix,
        attention_mask=torch.ones_like(prefix),
        use_cache=True,
        logits_to_keep=_last_only(prefix),
    )
    cache = out.past_key_values
    cache.batch_select_indices(torch.zeros(rows, dtype=torch.long, device=device))
    # each row's own part of the prompt, left-padded to the longest, right after the prefix
    own = lengths - shared
    width = int(own.max())
    cols = torch.arange(width, device=device)[None]
    pad = width - own[:, None]
    take = (starts[:, None] + shared + cols - pad).clamp(min=0, max=prompt_ids.size(1) - 1)
    own_mask = (cols >= pad).long()
    own_ids = torch.where(own_mask.bool(), prompt_ids.gather(1, take), torch.zeros_like(take))
    # positions as in the unpadded row: the prefix's 0..shared-1, then its own tokens, then the completion
    own_pos = (shared + cols - pad).clamp(min=shared)
    comp_pos = lengths[:, None] + torch.arange(completion_ids.size(1), device=device)[None]
    rest = model(
        input_ids=torch.cat([own_ids, completion_ids], dim=1),
        attention_mask=torch.cat(
            [torch.ones(rows, shared, dtype=prompt_mask.dtype, device=device), own_mask.to(prompt_mask.dtype),
             completion_mask.to(prompt_mask.dtype)], dim=1),
        position_ids=torch.cat([own_pos, comp_pos], dim=1),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=_last_only(own_ids),
        output_hidden_states=True,
    )  # fmt: skip
    # the state before each completion token: the last own-prompt token's, then the completion's own
    return rest.hidden_states[-1][:, width - 1 : width - 1 + completion_ids.size(1)]


def row_lengths(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's prompt length and completion length (up to its last real completion token)."""
    prompt = batch["prompt_mask"].sum(1)
    mask = batch["completion_mask"]
    cols = torch.arange(1, mask.size(1) + 1, device=mask.device)[None]
    return prompt, (mask.bool() * cols).amax(1) if mask.size(1) else torch.zeros_like(prompt)


def pass_tokens(prompt_lens: torch.Tensor, completion_lens: torch.Tensor, shared: int) -> int:
    """The tokens one forward pass over these rows holds: ``rows x`` their padded width, less the ``shared``
    leading prompt tokens every row has, which run once."""
    if prompt_lens.numel() == 0:
        return 0
    width = int(prompt_lens.max()) + int(completion_lens.max())
    return shared + int(prompt_lens.numel()) * (width - shared)


def update_passes(batch: dict[str, Any], budget: int, shared: bool = False) -> list[torch.Tensor]:
    """The rows of a micro-batch cut into forward passes of at most ``budget`` tokens (:func:`pass_tokens`; with
    ``shared`` the micro-batch's common prompt prefix counts once per pass, as the shared-prefix forward runs it).

    Rows go longest first, each pass taking rows while the pass stays within the budget, so that rows of similar
    length share a pass (less padding); a row longer than the budget is a pass of its own (a row is never cut).
    ``budget`` <= 0: one pass. Returns each pass's row indices, in the micro-batch's order within a pass."""
    rows = batch["completion_ids"].size(0)
    every = torch.arange(rows, device=batch["completion_ids"].device)
    if budget <= 0 or rows <= 1:
        return [every]
    prompt, completion = row_lengths(batch)
    prefix = common_prefix(batch["prompt_ids"], batch["prompt_mask"]) if shared else 0
    prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
    if pass_tokens(prompt, completion, prefix) <= budget:
        return [every]
    order = sorted(range(rows), key=lambda r: -int(prompt[r] + completion[r]))
    passes: list[list[int]] = []
    for r in order:
        if passes:
            trial = torch.tensor(passes[-1] + [r])
            if pass_tokens(prompt[trial], completion[trial], prefix) <= budget:
                passes[-1].append(r)
                continue
        passes.append([r])
    return [torch.tensor(sorted(p), device=every.device) for p in passes]


def micro_batch_order(batch: dict[str, Any]) -> torch.Tensor:
    """An order of ``batch``'s rows (a row permutation) for cutting them into micro-batches: the rows of each
    distinct prompt (a GRPO group) consecutive, so that a micro-batch holding several of them runs the prompt
    once; groups by their longest row, longest first, and each group's rows longest first, so that rows of
    similar length share a micro-batch. Rows whose prompts all differ (step rows) come out longest first."""
    prompt, completion = row_lengths(batch)
    length = (prompt + completion).tolist()
    _, group = prompt_groups(batch["prompt_ids"], batch["prompt_mask"])
    group = group.tolist()
    longest: dict[int, int] = {}
    for g, n in zip(group, length):
        longest[g] = max(longest.get(g, 0), n)
    order = sorted(range(len(length)), key=lambda r: (-longest[group[r]], group[r], -length[r], r))
    return torch.tensor(order, dtype=torch.long, device=batch["prompt_ids"].device)


def regroup_micro_batches(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same rows in the same number of micro-batches of the same sizes, regrouped by
    :func:`micro_batch_order` and each trimmed (:func:`select_rows`) to the width its own rows need. ``chunks``:
    the micro-batches of one optimizer step, cut from one padded batch (TRL's ``split_tensor_dict``: per-row
    tensors and lists, scalars repeated in each)."""
    if len(chunks) == 0:
        return chunks
    first = chunks[0]
    sizes = [c["prompt_ids"].size(0) for c in chunks]
    merged: dict[str, Any] = {}
    for key, value in first.items():
        if torch.is_tensor(value) and value.dim() > 0:
            merged[key] = torch.cat([c[key] for c in chunks])
        elif isinstance(value, list) and len(value) == sizes[0]:
            merged[key] = [x for c in chunks for x in c[key]]
        else:  # a scalar or None: the same in every micro-batch
            merged[key] = value
    order = micro_batch_order(merged)
    out, start = [], 0
    for size in sizes:
        out.append(select_rows(merged, order[start : start + size]))
        start += size
    return out


def select_rows(batch: dict[str, Any], idx: torch.Tensor) -> dict[str, Any]:
    """The micro-batch's rows ``idx``: every per-row tensor indexed, the prompt columns that are padding in all of
    them dropped on the left and the completion columns after their last real token on the right (per-token
    entries are the completion's width), per-row lists indexed; anything else (scalars such as
    ``num_items_in_batch``) as it is."""
    rows, width = batch["completion_ids"].shape
    prompt, completion = row_lengths({k: batch[k][idx] for k in ("prompt_mask", "completion_mask")})
    keep_p, keep_c = int(prompt.max()), max(int(completion.max()), 1)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, list) and len(value) == rows:
            out[key] = [value[i] for i in idx.tolist()]
        elif not (torch.is_tensor(value) and value.dim() > 0 and value.size(0) == rows):
            out[key] = value
        elif key in ("prompt_ids", "prompt_mask"):
            out[key] = value[idx][:, value.size(1) - keep_p :]
        elif value.dim() >= 2 and value.size(1) == width:
            out[key] = value[idx][:, :keep_c]
        else:
            out[key] = value[idx]
    return out


def pad_width(batch: dict[str, Any], multiple: int) -> dict[str, Any]:
    """``batch`` with its completion columns padded on the right (zeros: masked out, in no sum) so that the
    forward pass's width, prompt and completion together, is a multiple of ``multiple``; ``batch`` itself when it
    already is or ``multiple`` <= 1.

    In RL every micro-batch has a new width, and on a GPU the first pass at a new shape pays for it (kernel
    selection, new allocator blocks: 2.40 s against 0.63 s once seen, ``benchmarks/results/gpu_step.json``).
    Widths rounded up to a multiple repeat from step to step; the padding costs at most ``multiple - 1``
    columns."""
    if multiple <= 1:
        return batch
    rows, width = batch["completion_ids"].shape
    total = batch["prompt_ids"].size(1) + width
    extra = -total % multiple
    if extra == 0:
        return batch
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if (
            torch.is_tensor(value)
            and key not in ("prompt_ids", "prompt_mask")
            and value.dim() >= 2
            and value.size(0) == rows
            and value.size(1) == width
        ):
            pad = value.new_zeros((rows, extra, *value.shape[2:]))
            out[key] = torch.cat([value, pad], dim=1)
        else:
            out[key] = value
    return out
