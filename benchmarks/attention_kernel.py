"""Causal attention on a CPU, forward and backward, at the update's shapes: PyTorch's flash-attention kernel against
``agentr1_trl.block_attention``'s block kernel (bf16 matrix products over blocks of queries).

    python benchmarks/attention_kernel.py --json benchmarks/results/attention_kernel.json
    python benchmarks/attention_kernel.py --smoke        # small shapes, one repeat (seconds)

Shapes are SmolLM2-135M's attention (9 query heads on 3 key-value heads of 64 dimensions) at the rows of the
learning runs' update passes: the main job's micro-batch (4 rows of 512 tokens), the shop's and Coin Collector's
(2 rows of 2,048), BFCL's (1 row of 4,096), and a group's completions continuing their prompt's cache (2 rows of
300 queries on 1,800 keys). Per shape and kernel: the forward and the backward pass's milliseconds (the median of
``--repeats``, the kernels taking turns, after one warm-up each), their useful GFLOP/s (the causal products only: a forward pass
``4 * rows * heads * dim`` per visible query-key pair, the backward twice that; the block kernel's recomputation
and diagonal squares are not counted), and the relative error of the output and of each gradient against a float64
reference, beside this CPU's square bf16 and float32 matrix-product peak, measured in the same run. One thread
(``--threads``): the learning runs train one core each.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, machine_info

#: (name, rows, queries, keys): the update's attention shapes in the learning runs' worlds
SHAPES = [
    ("main job: 4 rows of 512", 4, 512, 512),
    ("shop, Coin Collector: 2 rows of 2,048", 2, 2048, 2048),
    ("BFCL: 1 row of 4,096", 1, 4096, 4096),
    ("completions on a prompt's cache: 2 rows of 300 on 1,800 keys", 2, 300, 1800),
]
SMOKE_SHAPES = [("small", 2, 64, 64), ("small on a cache", 1, 16, 80)]
HEADS, KV_HEADS, DIM = 9, 3, 64


def _pairs(queries: int, keys: int) -> int:
    """Visible (query, key) pairs of causal attention aligned to the lower right."""
    return queries * (keys - queries) + queries * (queries + 1) // 2


def _fixed_block(q: Any, k: Any, v: Any, scale: float, *, block: int) -> Any:
    from agentr1_trl.block_attention import block_causal_attention

    return block_causal_attention(q, k, v, scale, block)


def _kernels(block_sizes: list[int]) -> dict[str, tuple[Any, str]]:
    import torch
    import torch.nn.functional as F
    from agentr1_trl.block_attention import block_causal_attention

    def sdpa(q, k, v, scale):
        queries, keys = q.shape[2], k.shape[2]
        if queries == keys:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        else:  # what agentr1_trl.causal_rows asks of it: the lower-right mask for a continuation
            mask = (torch.arange(queries)[:, None] + keys - queries) >= torch.arange(keys)[None]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        return out.transpose(1, 2)

    kernels: dict[str, tuple[Any, str]] = {
        "sdpa-float32": (sdpa, "float32"),
        "sdpa-bf16": (sdpa, "bfloat16"),
        "block-bf16": (lambda q, k, v, s: block_causal_attention(q, k, v, s), "bfloat16"),
    }
    for b in block_sizes:
        kernels[f"block{b}-bf16"] = (functools.partial(_fixed_block, block=b), "bfloat16")
    return kernels


def measure(shape: tuple[str, int, int, int], repeats: int, block_sizes: list[int]) -> dict[str, Any]:
    import torch

    name, rows, queries, keys = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, HEADS, queries, DIM, generator=g, dtype=torch.float64) * 2
    k = torch.randn(rows, KV_HEADS, keys, DIM, generator=g, dtype=torch.float64) * 2
    v = torch.randn(rows, KV_HEADS, keys, DIM, generator=g, dtype=torch.float64)
    grad = torch.randn(rows, queries, HEADS, DIM, generator=g, dtype=torch.float64)
    scale = 1 / math.sqrt(DIM)
    kernels = _kernels(block_sizes)

    def run(fn, dtype):
        x = [t.detach().to(dtype).clone().requires_grad_() for t in (q, k, v)]
        t0 = time.perf_counter()
        out = fn(*x, scale)
        t1 = time.perf_counter()
        out.backward(grad.to(dtype))
        t2 = time.perf_counter()
        return (out.detach(), *(t.grad for t in x)), t1 - t0, t2 - t1

    ref, _, _ = run(kernels["sdpa-float32"][0], torch.float64)
    forward_flop = 4 * rows * HEADS * DIM * _pairs(queries, keys)
    out: dict[str, Any] = {"shape": name, "rows": rows, "queries": queries, "keys": keys, "kernels": {}}
    times: dict[str, tuple[list[float], list[float]]] = {kernel: ([], []) for kernel in kernels}
    last: dict[str, Any] = {}
    for fn, dtype in kernels.values():
        run(fn, getattr(torch, dtype))  # warm-up
    for _ in range(repeats):  # round-robin: a clock drifting during the run touches every kernel alike
        for kernel, (fn, dtype) in kernels.items():
            last[kernel], f, b = run(fn, getattr(torch, dtype))
            times[kernel][0].append(f)
            times[kernel][1].append(b)
    for kernel, (_, dtype) in kernels.items():
        f, b = statistics.median(times[kernel][0]), statistics.median(times[kernel][1])
        errors = {
            part: float((x.double() - y).norm() / y.norm())
            for part, x, y in zip(("out", "dq", "dk", "dv"), last[kernel], ref)
        }
        out["kernels"][kernel] = {
            "dtype": dtype,
            "forward_ms": round(f * 1e3, 1),
            "backward_ms": round(b * 1e3, 1),
            "forward_gflops": round(forward_flop / f / 1e9, 1),
            "backward_gflops": round(2 * forward_flop / b / 1e9, 1),
            "relative_error": {p: float(f"{e:.2e}") for p, e in errors.items()},
        }
    base = out["kernels"]["sdpa-bf16"]
    for r in out["kernels"].values():
        r["forward_and_backward_vs_sdpa_bf16"] = round(
            (base["forward_ms"] + base["backward_ms"]) / (r["forward_ms"] + r["backward_ms"]), 2
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=9, help="timed repeats per shape and kernel (the median)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the learning runs: 1)")
    parser.add_argument(
        "--blocks", type=int, nargs="*", default=[32, 64, 128], help="block sizes to time too"
    )
    parser.add_argument("--smoke", action="store_true", help="small shapes, one repeat")
    parser.add_argument("--json", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be at least 1")
    import torch
    from step_cost import matmul_gflops

    torch.set_num_threads(args.threads)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    repeats = 1 if args.smoke else args.repeats
    results = []
    for i, shape in enumerate(shapes):
        t = time.perf_counter()
        results.append(measure(shape, repeats, args.blocks))
        print(
            f"attention_kernel: {i + 1}/{len(shapes)} {shape[0]} ({time.perf_counter() - t:.0f} s)",
            file=sys.stderr,
        )
    result = {
        "benchmark": "attention_kernel",
        "machine": machine_info("torch"),
        "args": vars(args),
        "threads": args.threads,
        "matmul_gflops": {} if args.smoke else matmul_gflops(args.threads),
        "heads": {"query": HEADS, "key_value": KV_HEADS, "dim": DIM},
        "shapes": results,
    }
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
