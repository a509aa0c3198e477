"""Attention without a mask for rows that need none: the update's forward passes over causal rows.

A row of the update is a prompt and a completion, and a micro-batch of them is padded: prompts on the left,
completions on the right. transformers then hands PyTorch's attention an explicit mask. With one, the CPU
flash-attention kernel computes every block of the score matrix, where ``is_causal`` lets it skip the key blocks
above the diagonal, and transformers copies the grouped keys and values out to every query head (``repeat_kv``).

Many passes need no mask at all. When no row's prompt is padded (a micro-batch of one GRPO group, trimmed to its
rows, :func:`~agentr1_trl.forward.regroup_micro_batches`) and every completion is padded only after its last real
token (TRL's completion mask: ones up to the end of the turn, then zeros), each real token attends to exactly the
tokens before it: padding comes after every real token of its row, so causality alone excludes it. The padding
positions' own outputs are junk no loss reads.

:func:`causal_rows` runs a model's forward passes in that case through :func:`causal_rows_attention`, which
ignores the mask and asks the kernel for ``is_causal``. Queries that continue a cache (each row's completion on
top of its shared prompt's keys and values) need causality aligned to the lower right, where PyTorch's flag
aligns it to the upper left: zero queries in front of them make the two the same, at the price of the prompt's
own triangle of scores (the kernel skips the rest). Where that price is too high (:func:`zero_queries_pay`: short
rows, or a short continuation of a long cache), the pass keeps the mask.

With ``kernel="block"`` (what ``"auto"`` picks for bf16 rows on a CPU) the causal rows attend through
:func:`~agentr1_trl.block_attention.block_causal_attention` instead of PyTorch's flash-attention kernel: causal
attention as bf16 matrix products over blocks of queries, aligned to the lower right natively (no zero queries),
which runs the update's attention 1.5-2.8x faster on a CPU with native bf16 (``benchmarks/attention_kernel.py``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "ATTENTION_KERNELS",
    "CAUSAL_ROWS_ATTENTION",
    "CAUSAL_ROWS_BLOCK_ATTENTION",
    "KEY_BLOCK",
    "causal_rows",
    "causal_rows_attention",
    "rows_are_causal",
    "zero_queries_pay",
]

#: the name :func:`causal_rows_attention` is registered under in transformers' ``AttentionInterface``
CAUSAL_ROWS_ATTENTION = "agentr1_causal_rows"
#: the name the same attention is registered under with the block kernel for bf16 rows on a CPU
CAUSAL_ROWS_BLOCK_ATTENTION = "agentr1_causal_rows_block"
#: the kernels causal rows can attend through: ``auto`` (the block kernel for bf16 rows on a CPU, PyTorch's SDPA
#: elsewhere), ``sdpa`` (PyTorch's), ``block`` (:func:`~agentr1_trl.block_attention.block_causal_attention`
#: for every dtype and device: for tests and measurements)
ATTENTION_KERNELS = ("auto", "sdpa", "block")
#: the keys PyTorch's CPU flash-attention kernel takes per block: ``is_causal`` skips whole blocks only, so a
#: causal query row costs its keys rounded up to a block, about ``position + KEY_BLOCK / 2``
KEY_BLOCK = 512


def zero_queries_pay(queries: int, keys: int) -> bool:
    """Whether ``queries`` continuing a cache (``keys`` in all) cost less as a causal square with zero queries in
    front (each of ``keys`` rows about ``position + KEY_BLOCK / 2`` keys: ``keys * (keys + KEY_BLOCK) / 2``) than
    masked (every query against every key block). Short rows do not: a first version without this rule made the
    main job's update slower (``benchmarks/results/step_cost_causal_rows.json`` says by how much)."""
    blocks = -(-keys // KEY_BLOCK) * KEY_BLOCK
    return keys * (keys + KEY_BLOCK) / 2 < queries * blocks


def rows_are_causal(prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> bool:
    """Whether rows need no attention mask: no prompt padding, and each completion's real tokens a prefix of its
    columns (padding only after them)."""
    if not bool(prompt_mask.bool().all()):
        return False
    if completion_mask.size(1) == 0:
        return True
    real = completion_mask.bool()
    cols = torch.arange(real.size(1), device=real.device)[None]
    return bool((real == (cols < real.sum(1, keepdim=True))).all())


def causal_rows_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    kernel: str = "sdpa",
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention for rows :func:`rows_are_causal` says need no mask: ``is_causal`` and no
    mask (grouped keys and values stay grouped), lower-right aligned for queries that continue a cache. A decode
    step, a short continuation of a long cache or a position bias takes transformers' own SDPA path, with the
    causal mask built here (transformers builds none for an attention it does not know: ``attention_mask`` is
    None). ``kernel`` (one of :data:`ATTENTION_KERNELS`): ``"block"``, or ``"auto"`` on bf16 rows on a CPU, runs
    :func:`~agentr1_trl.block_attention.block_causal_attention` instead, for any number of queries (without
    dropout, a position bias, a soft cap or attention sinks, which it does not compute)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    queries, keys = query.shape[2], key.shape[2]
    kwargs.pop("is_causal", None)
    if _block_kernel(kernel, query, key, value, dropout, kwargs):
        from agentr1_trl.block_attention import block_causal_attention

        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        return block_causal_attention(query, key, value, scale), None
    if (queries < keys and not zero_queries_pay(queries, keys)) or kwargs.get("position_bias") is not None:
        mask = None
        if queries > 1:
            rows = torch.arange(queries, device=query.device)[:, None] + (keys - queries)
            mask = rows >= torch.arange(keys, device=query.device)[None]
        return sdpa_attention_forward(
            module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False, **kwargs
        )
    ahead = keys - queries
    if ahead > 0:  # zero queries for the cached positions: upper-left causality is then the lower-right one
        query = torch.cat([query.new_zeros(*query.shape[:2], ahead, query.shape[3]), query], dim=2)
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    out = F.scaled_dot_product_attention(
        query, key, value, dropout_p=dropout, scale=scaling, is_causal=True, enable_gqa=grouped
    )
    return out[:, :, ahead:].transpose(1, 2).contiguous(), None


def _block_kernel(
    kernel: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float, kwargs: dict
) -> bool:
    """Whether :func:`causal_rows_attention` runs the block kernel: asked for (``"block"``, or ``"auto"`` with bf16
    query, key and value on a CPU), and nothing it does not compute is asked of the attention."""
    if kernel == "sdpa" or dropout or any(kwargs.get(k) is not None for k in _NOT_IN_BLOCK_KERNEL):
        return False
    if kernel == "block":
        return True
    return query.device.type == "cpu" and query.dtype == key.dtype == value.dtype == torch.bfloat16


#: attention arguments the block kernel does not compute (a pass asking for one takes PyTorch's SDPA)
_NOT_IN_BLOCK_KERNEL = ("position_bias", "softcap", "s_aux", "sinks", "sliding_window")


@functools.cache
def _register() -> None:
    """Register :func:`causal_rows_attention` with transformers once per process, under one name per kernel."""
    from transformers import AttentionInterface

    for kernel, name in _KERNEL_NAMES.items():
        AttentionInterface.register(name, functools.partial(causal_rows_attention, kernel=kernel))


#: the name :func:`causal_rows_attention` is registered under for each of :data:`ATTENTION_KERNELS`
_KERNEL_NAMES = {
    "auto": CAUSAL_ROWS_BLOCK_ATTENTION,
    "sdpa": CAUSAL_ROWS_ATTENTION,
    "block": "agentr1_causal_rows_block_forced",
}


def _full_attention(config: Any) -> bool:
    """Whether every layer attends to the whole past (no sliding window, whose mask causality alone cannot
    replace): a config listing its ``layer_types`` says so per layer (Qwen2 with ``use_sliding_window`` off), one
    without them by having no ``sliding_window`` (Llama; Mistral has one)."""
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types) and not getattr(config, "use_sliding_window", False)
    return not getattr(config, "sliding_window", None)


@contextlib.contextmanager
def causal_rows(model: Any, enabled: bool = True, kernel: str = "auto") -> Iterator[bool]:
    """Within this block ``model``'s forward passes (a transformers model, PEFT- or DDP-wrapped) attend through
    :func:`causal_rows_attention` with ``kernel`` (one of :data:`ATTENTION_KERNELS`): for rows
    :func:`rows_are_causal` accepted, passed without an attention mask. Only where the model runs transformers'
    SDPA attention over the whole past in every layer (others are left as they are); yields whether it switched.
    A model with gradient checkpointing attends through PyTorch's kernel whatever ``kernel`` says (its layers are
    recomputed after the block, under SDPA). Not for models shared with other threads while the block runs."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}")
    inner = getattr(model, "module", model)  # DDP's wrapped model; PEFT passes attributes through
    config = getattr(inner, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if not enabled or before != "sdpa" or not _full_attention(config):
        yield False
        return
    _register()
    if getattr(inner, "is_gradient_checkpointing", False):
        # gradient checkpointing recomputes each layer in the backward pass, after this block has restored the
        # model's SDPA attention: the recomputation must run the kernel the forward pass ran
        kernel = "sdpa"
    config._attn_implementation = _KERNEL_NAMES[kernel]
    try:
        yield True
    finally:
        config._attn_implementation = before
