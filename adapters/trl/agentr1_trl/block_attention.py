"""Causal attention in blocks of queries, on bf16 matrix products: the update's attention on a CPU with native bf16.

PyTorch's CPU flash-attention kernel runs its bf16 backward pass at 29-90 GFLOP/s on the machines this project
measures, a fifth to under a tenth of their bf16 matrix-product peak and not much more than in float32
(``benchmarks/results/update_profile_amx_long.json``, ``benchmarks/results/attention_kernel.json``), so on the long
rows of multi-turn episodes the backward pass of attention became most of the bf16 update.
:func:`block_causal_attention` computes the same attention as a loop over blocks of ``block`` queries: per block,
the scores against every key it may see (one batched bf16 product, the scale fused into it), the causal mask on the
block's own diagonal square only, a row softmax, and the values' product. The backward pass recomputes each block's
probabilities (only the inputs are saved; flash attention also keeps the output and the log-sum-exp) and runs five
bf16 products per block and PyTorch's fused softmax backward. Grouped keys and values stay grouped: a block holds
every query head of a key head, so each product reads the key head once.

It is exact attention, not an approximation. Its rounding is eager bf16 attention's (the scores rounded to bf16
before the softmax, which runs in float32 inside the kernel), against flash attention's float32 scores: 1.3-1.6e-2
relative error in outputs and gradients against a float64 reference, flash attention's bf16 0.9-1.1e-2
(``benchmarks/attention_kernel.py`` measures both, with the speed of each). Queries that continue a cache (fewer
queries than keys) are aligned to the lower right: query ``i`` of ``q`` sits at position ``keys - queries + i``.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["block_causal_attention", "block_size"]


def block_size(queries: int) -> int:
    """Queries per block (times the query heads per key head: the rows of each product): 64 up to 1,024 queries,
    128 beyond, the fastest of 32, 64 and 128 on 2-core AVX512-BF16 and AMX CPUs (``benchmarks/attention_kernel.py``):
    smaller blocks waste less of each diagonal square, larger ones call fewer, larger products."""
    return 64 if queries <= 1024 else 128


def _layout(x: torch.Tensor, heads: int, groups: int) -> torch.Tensor:
    """``[batch, heads * groups, length, dim]`` -> ``[batch * heads, length * groups, dim]``, a position's query heads
    of one key head side by side, so a block of positions is one contiguous slice."""
    b, _, n, d = x.shape
    return x.reshape(b, heads, groups, n, d).permute(0, 1, 3, 2, 4).reshape(b * heads, n * groups, d)


def _probs(
    qb: torch.Tensor, k_t: torch.Tensor, scale: float, start: int, rows: int, groups: int, ahead: int
) -> torch.Tensor:
    """One block's attention probabilities, ``[batch * heads, rows * groups, keys]`` in the inputs' dtype: the
    scaled scores (one batched product), ``-inf`` above the diagonal of the block's own square, the row softmax."""
    keys = k_t.shape[2]
    scores = torch.baddbmm(
        qb.new_zeros(()).expand(qb.shape[0], qb.shape[1], keys), qb, k_t, beta=0, alpha=scale
    )
    square = scores.view(qb.shape[0], rows, groups, keys)[..., ahead + start :]
    above = torch.ones(rows, rows, dtype=torch.bool, device=qb.device).triu_(1)
    square.masked_fill_(above[:, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


class _BlockCausalAttention(torch.autograd.Function):
    @staticmethod
    @torch.autocast("cpu", enabled=False)
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, block: int
    ) -> torch.Tensor:
        batch, q_heads, queries, dim = q.shape
        heads, keys = k.shape[1], k.shape[2]
        groups, ahead = q_heads // heads, keys - queries
        qr = _layout(q, heads, groups)
        kr, vr = k.reshape(batch * heads, keys, dim), v.reshape(batch * heads, keys, dim)
        k_t = kr.transpose(1, 2)
        out = torch.empty_like(qr)
        for start in range(0, queries, block):
            end = min(queries, start + block)
            rows, seen = end - start, ahead + end
            qb = qr[:, start * groups : end * groups]
            p = _probs(qb, k_t[:, :, :seen], scale, start, rows, groups, ahead)
            torch.bmm(p, vr[:, :seen], out=out[:, start * groups : end * groups])
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.block = scale, block
        # [batch * heads, queries * groups, dim] -> [batch, queries, heads * groups, dim]: transformers' layout
        return (
            out.view(batch, heads, queries, groups, dim)
            .permute(0, 2, 1, 3, 4)
            .reshape(batch, queries, q_heads, dim)
        )

    @staticmethod
    @torch.autocast("cpu", enabled=False)
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v = ctx.saved_tensors
        scale, block = ctx.scale, ctx.block
        batch, q_heads, queries, dim = q.shape
        heads, keys = k.shape[1], k.shape[2]
        groups, ahead = q_heads // heads, keys - queries
        qr = _layout(q, heads, groups)
        kr, vr = k.reshape(batch * heads, keys, dim), v.reshape(batch * heads, keys, dim)
        k_t, v_t = kr.transpose(1, 2), vr.transpose(1, 2)
        gr = (
            grad.reshape(batch, queries, heads, groups, dim)
            .permute(0, 2, 1, 3, 4)
            .reshape(qr.shape)
            .to(q.dtype)
        )
        dq = torch.empty_like(qr)
        acc = torch.promote_types(k.dtype, torch.float32)  # key and value gradients summed over blocks
        dk = torch.zeros(kr.shape, dtype=acc, device=k.device)
        dv = torch.zeros(vr.shape, dtype=acc, device=v.device)
        for start in range(0, queries, block):
            end = min(queries, start + block)
            rows, seen = end - start, ahead + end
            qb, gb = qr[:, start * groups : end * groups], gr[:, start * groups : end * groups]
            p = _probs(qb, k_t[:, :, :seen], scale, start, rows, groups, ahead)
            dv[:, :seen] += torch.bmm(p.transpose(1, 2), gb)
            ds = torch._softmax_backward_data(torch.bmm(gb, v_t[:, :, :seen]), p, -1, p.dtype)
            torch.bmm(ds, kr[:, :seen], out=dq[:, start * groups : end * groups])
            dk[:, :seen] += torch.bmm(ds.transpose(1, 2), qb)
        dq = dq.mul_(scale).view(batch, heads, queries, groups, dim).permute(0, 1, 3, 2, 4)
        dk = dk.mul_(scale).view(k.shape).to(k.dtype)
        return dq.reshape(q.shape), dk, dv.view(v.shape).to(v.dtype), None, None


def block_causal_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float, block: int | None = None
) -> torch.Tensor:
    """Causal attention of ``query`` ``[batch, heads, queries, dim]`` on ``key`` and ``value``
    ``[batch, kv_heads, keys, dim]`` (``heads`` a multiple of ``kv_heads``: grouped-query attention), aligned to the
    lower right when ``queries < keys``; returns ``[batch, queries, heads, dim]`` (transformers' attention-output
    layout). Differentiable in all three inputs; ``block``: queries per block (default :func:`block_size`). Pays
    where bf16 matrix products are native (bf16 inputs on a CPU with AVX512-BF16 or AMX); see the module's
    docstring. Runs outside CPU autocast, in the inputs' dtype (key and value are cast to the query's)."""
    if (
        query.dim() != 4
        or key.shape != value.shape
        or query.shape[1] % key.shape[1]
        or query.shape[2] > key.shape[2]
    ):
        raise ValueError(
            f"block_causal_attention wants query [batch, heads, queries, dim] and key, value [batch, kv_heads, keys, "
            f"dim] with heads a multiple of kv_heads and queries <= keys; got {tuple(query.shape)}, "
            f"{tuple(key.shape)}, {tuple(value.shape)}"
        )
    block = block_size(query.shape[2]) if block is None else int(block)
    if block < 1:
        raise ValueError(f"block_causal_attention's block must be at least 1 query; got {block}")
    key, value = key.to(query.dtype), value.to(query.dtype)
    return _BlockCausalAttention.apply(query, key, value, float(scale), block)
