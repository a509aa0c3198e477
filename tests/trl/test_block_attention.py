"""The block attention kernel (agentr1_trl.block_attention): exact causal attention, its gradients, its bf16
rounding, and where the update's forward passes use it."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from agentr1_trl.block_attention import block_causal_attention, block_size


def _reference(q, k, v, scale):
    """Causal attention aligned to the lower right, through PyTorch's SDPA with an explicit mask:
    ``[batch, queries, heads, dim]``."""
    queries, keys = q.shape[2], k.shape[2]
    mask = (torch.arange(queries)[:, None] + keys - queries) >= torch.arange(keys)[None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


def _inputs(batch, heads, kv_heads, queries, keys, dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, queries, dim, generator=g, dtype=torch.float64) * 2
    k = torch.randn(batch, kv_heads, keys, dim, generator=g, dtype=torch.float64) * 2
    v = torch.randn(batch, kv_heads, keys, dim, generator=g, dtype=torch.float64)
    grad = torch.randn(batch, queries, heads, dim, generator=g, dtype=torch.float64)
    return [x.to(dtype) for x in (q, k, v, grad)]


def _run(fn, q, k, v, grad):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize(
    "batch,heads,kv_heads,queries,keys,block",
    [
        (2, 4, 2, 37, 37, 8),  # grouped heads, a last block shorter than the others
        (1, 3, 3, 20, 20, 1),  # one query per block, no grouping
        (2, 6, 2, 11, 29, 4),  # queries continuing a cache: the lower-right diagonal
        (1, 2, 1, 1, 16, None),  # a single query (a decode step) on its cache
        (1, 2, 2, 50, 50, 500),  # one block larger than the rows
    ],
)
def test_block_attention_is_causal_attention_with_its_gradients(batch, heads, kv_heads, queries, keys, block):
    """In float64 the kernel's output and its gradients for query, key and value equal SDPA's with the causal
    mask to rounding, whatever the block, the grouping and the cache offset."""
    q, k, v, grad = _inputs(batch, heads, kv_heads, queries, keys, 8, torch.float64)
    scale = 0.3
    ref = _run(lambda a, b, c: _reference(a, b, c, scale), q, k, v, grad)
    got = _run(lambda a, b, c: block_causal_attention(a, b, c, scale, block), q, k, v, grad)
    for name, x, y in zip(("out", "dq", "dk", "dv"), got, ref):
        assert x.shape == y.shape, name
        assert torch.allclose(x, y, atol=1e-10, rtol=1e-9), name


def test_block_attention_in_bf16_rounds_like_eager_bf16_attention():
    """In bf16 the error against float64 stays within eager bf16 attention's (scores rounded to bf16): under 3e-2
    relative, and at most 3x PyTorch's flash kernel's in bf16 (which keeps its scores in float32)."""
    q, k, v, grad = _inputs(2, 6, 2, 200, 200, 64, torch.float64, seed=1)
    scale = 1 / math.sqrt(64)
    ref = _run(lambda a, b, c: _reference(a, b, c, scale), q, k, v, grad)
    low = [x.to(torch.bfloat16) for x in (q, k, v, grad)]
    got = _run(lambda a, b, c: block_causal_attention(a, b, c, scale), *low)
    flash = _run(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, scale=scale,
                                                                   enable_gqa=True).transpose(1, 2), *low)  # fmt: skip
    for x, f, y in zip(got, flash, ref):
        assert x.dtype == torch.bfloat16
        err = float((x.double() - y).norm() / y.norm())
        flash_err = float((f.double() - y).norm() / y.norm())
        assert err < 3e-2 and err < 3 * flash_err, (err, flash_err)


def test_block_attention_runs_outside_autocast_and_refuses_bad_shapes():
    """Under CPU autocast the kernel runs in its inputs' dtype; shapes it cannot attend raise a ValueError that
    names the shapes it wants."""
    q, k, v, grad = _inputs(1, 4, 2, 16, 16, 8, torch.float32)
    ref = _run(lambda a, b, c: _reference(a, b, c, 0.5), q, k, v, grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _run(lambda a, b, c: block_causal_attention(a, b, c, 0.5, 4), q, k, v, grad)
    for x, y in zip(got, ref):
        assert x.dtype == torch.float32 and torch.allclose(x, y, atol=1e-5)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        block_causal_attention(torch.zeros(1, 3, 4, 8), torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), 1.0)
    with pytest.raises(ValueError, match="queries <= keys"):
        block_causal_attention(torch.zeros(1, 2, 9, 8), torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), 1.0)
    with pytest.raises(ValueError, match="at least 1"):
        block_causal_attention(q, k, v, 1.0, 0)
    assert block_size(512) == 64 and block_size(4096) == 128
