"""The output projection's log-probs on a CPU, forward and backward, by vocabulary block: ``projected_logps`` with
the whole vocabulary per chunk of rows (what it did before ``CPU_VOCAB_BLOCK``) against blocks of it.

    python benchmarks/output_head.py --json benchmarks/results/output_head_avx512.json
    python benchmarks/output_head.py --smoke        # a small vocabulary, one repeat (seconds)

The head is SmolLM2-135M's (576 hidden, 49,152 vocabulary entries), under bf16 autocast as the trainer runs it,
on the scored tokens of one update pass in the learning runs' worlds: the main job's micro-batch (4 completions of
128 tokens), the shop's and Coin Collector's (2 rows of 1,536) and BFCL's (one row of 4,096). Per shape and
vocabulary block: the loss pass (forward with autograd, then backward into the states) and the old/reference pass
(forward without autograd) in milliseconds (the median of ``--repeats``, the blocks taking turns, after one
warm-up each); their GFLOP/s (the products only: ``2 * tokens * hidden * vocabulary`` a product, three in the loss
pass and one in the other; no recomputation is uncounted); the share of this CPU's bf16 matrix-product peak measured
in the same run; and the error of the log-probs and of the states' gradient against a float64 reference, so a
faster block is seen to compute the same thing. One thread (``--threads``): the learning runs train one core each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, machine_info

#: (name, scored tokens): one update pass's completion tokens in the learning runs' worlds
SHAPES = [
    ("main job: 4 completions of 128", 512),
    ("shop, Coin Collector: 2 rows of 1,536", 3072),
    ("BFCL: 1 row of 4,096", 4096),
]
SMOKE_SHAPES = [("small", 96)]
HIDDEN, VOCABULARY = 576, 49152
SMOKE_VOCABULARY = 5000


def measure(
    shape: tuple[str, int], vocabulary: int, blocks: list[int], chunk: int, repeats: int
) -> dict[str, Any]:
    import torch
    from agentr1_trl.forward import projected_logps

    name, tokens = shape
    g = torch.Generator().manual_seed(0)
    states64 = torch.randn(tokens, HIDDEN, generator=g, dtype=torch.float64)
    head = torch.nn.Linear(HIDDEN, vocabulary, bias=False).requires_grad_(False)  # frozen, as under LoRA
    with torch.no_grad():  # logits of a few units, as SmolLM2's
        head.weight.copy_(torch.randn(vocabulary, HIDDEN, generator=g) / 24)
    targets = torch.randint(0, vocabulary, (tokens,), generator=g)
    upstream = torch.randn(tokens, generator=g)

    # the float64 reference: log softmax of the exact logits (states and weight as the bf16 run sees them)
    x64 = states64.to(torch.bfloat16).double().requires_grad_()
    w64 = head.weight.to(torch.bfloat16).double()
    want = torch.log_softmax(x64 @ w64.T, dim=-1).gather(1, targets[:, None])[:, 0]
    (want * upstream.double()).sum().backward()
    want_grad = x64.grad

    def loss_pass(block: int) -> tuple[Any, Any, float, float]:
        states = states64.float().requires_grad_()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = projected_logps(states, head, targets, 1.0, chunk, block)
        t1 = time.perf_counter()
        (out * upstream).sum().backward()
        t2 = time.perf_counter()
        return out.detach(), states.grad, t1 - t0, t2 - t1

    def scoring_pass(block: int) -> float:
        states = states64.float()
        t0 = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            projected_logps(states, head, targets, 1.0, chunk, block)
        return time.perf_counter() - t0

    times: dict[int, dict[str, list[float]]] = {
        b: {"forward": [], "backward": [], "scoring": []} for b in blocks
    }
    last: dict[int, tuple[Any, Any]] = {}
    for b in blocks:  # warm-up
        loss_pass(b)
        scoring_pass(b)
    for _ in range(repeats):  # round-robin: a clock drifting during the run touches every block alike
        for b in blocks:
            out, grad, f, bw = loss_pass(b)
            last[b] = (out, grad)
            times[b]["forward"].append(f)
            times[b]["backward"].append(bw)
            times[b]["scoring"].append(scoring_pass(b))
    product = 2 * tokens * HIDDEN * vocabulary
    result: dict[str, Any] = {"shape": name, "tokens": tokens, "vocabulary": vocabulary, "blocks": {}}
    for b in blocks:
        f, bw, sc = (statistics.median(times[b][k]) for k in ("forward", "backward", "scoring"))
        out, grad = last[b]
        result["blocks"][str(b)] = {
            "block": b,
            "whole_vocabulary": b >= vocabulary,
            "loss_pass_ms": round((f + bw) * 1e3, 1),
            "forward_ms": round(f * 1e3, 1),
            "backward_ms": round(bw * 1e3, 1),
            "scoring_pass_ms": round(sc * 1e3, 1),
            "loss_pass_gflops": round(3 * product / (f + bw) / 1e9, 1),
            "scoring_pass_gflops": round(product / sc / 1e9, 1),
            "logp_max_abs_error": float(f"{(out.double() - want.detach()).abs().max():.2e}"),
            "grad_relative_error": float(f"{(grad.double() - want_grad).norm() / want_grad.norm():.2e}"),
            "grad_norm": round(float(grad.norm()), 4),
        }
    whole = result["blocks"][str(max(blocks))]
    for r in result["blocks"].values():
        r["loss_pass_vs_whole"] = round(whole["loss_pass_ms"] / r["loss_pass_ms"], 2)
        r["scoring_pass_vs_whole"] = round(whole["scoring_pass_ms"] / r["scoring_pass_ms"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed repeats per shape and block (the median)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the learning runs: 1)")
    parser.add_argument(
        "--chunk", type=int, default=256, help="rows per chunk (projected_logps' default: 256)"
    )
    parser.add_argument(
        "--blocks",
        type=int,
        nargs="*",
        default=[2048, 4096, 8192, 16384],
        help="vocabulary blocks to time, beside the whole vocabulary (the baseline)",
    )
    parser.add_argument("--smoke", action="store_true", help="a small vocabulary and shape, one repeat")
    parser.add_argument("--json", help="also write the JSON result here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.threads < 1 or args.chunk < 1 or any(b < 1 for b in args.blocks):
        parser.error("--repeats, --threads, --chunk and every --blocks must be at least 1")
    import torch
    from agentr1_trl.forward import CPU_VOCAB_BLOCK
    from step_cost import matmul_gflops

    torch.set_num_threads(args.threads)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    vocabulary = SMOKE_VOCABULARY if args.smoke else VOCABULARY
    repeats = 1 if args.smoke else args.repeats
    blocks = sorted({min(b, vocabulary) for b in args.blocks} | {vocabulary})
    results = []
    for i, shape in enumerate(shapes):
        t = time.perf_counter()
        results.append(measure(shape, vocabulary, blocks, args.chunk, repeats))
        print(
            f"output_head: {i + 1}/{len(shapes)} {shape[0]} ({time.perf_counter() - t:.0f} s)",
            file=sys.stderr,
        )
    peak = {} if args.smoke else matmul_gflops(args.threads)
    bf16 = peak.get("bfloat16")
    if bf16:
        for shape in results:
            for r in shape["blocks"].values():
                r["loss_pass_share_of_bf16_peak"] = round(r["loss_pass_gflops"] / bf16, 3)
                r["scoring_pass_share_of_bf16_peak"] = round(r["scoring_pass_gflops"] / bf16, 3)
    result = {
        "benchmark": "output_head",
        "machine": machine_info("torch"),
        "args": vars(args),
        "threads": args.threads,
        "default_cpu_vocab_block": CPU_VOCAB_BLOCK,
        "matmul_gflops": peak,
        "head": {"hidden": HIDDEN, "vocabulary": vocabulary},
        "shapes": results,
    }
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
