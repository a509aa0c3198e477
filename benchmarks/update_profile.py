"""The update, operator by operator: one forward and backward pass of the policy (SmolLM2-135M with the CLI's LoRA,
r=16 on every layer) over the completion log-probs, as the GRPO loss computes them, and one optimizer step, in each
precision, with PyTorch's profiler naming where the time goes.

    python benchmarks/update_profile.py --json benchmarks/results/update_profile_amx.json
    python benchmarks/update_profile.py --rows 2 --prompt 512 --completion 1536   # a shop-like pass
    python benchmarks/update_profile.py --smoke      # a tiny random model, every variant, no profile (seconds)

Variants (each in its own process, pinned to one core, one thread, as the learning runs train):

* ``fp32``: float32 weights, no autocast;
* ``bf16-autocast``: bf16 autocast over the float32 weights (what a bf16 CPU ran before ``bf16_base``);
* ``bf16-base``: the frozen base stored in bf16 (``agentr1_trl.models.bf16_frozen_base``, the trainer's default with
  bf16 on a CPU), the adapter float32, under autocast as the trainer runs it;
* ``bf16-base-strided-logits``: that, with the forward passes asking for the last position's logits as
  ``logits_to_keep=1`` (a strided slice of the hidden states, as before the fix in ``agentr1_trl.forward``): it
  shows what that cost.
* ``bf16-base-fp32-attention``: ``bf16-base`` with the attention kernel run in float32 (queries, keys and values
  cast up, autocast off inside it, the output cast back to bf16): whether PyTorch's CPU attention, whose backward
  gained nothing from bf16 on AMX (``update_profile_amx_long.json``), is cheaper in float32 on bf16 inputs.
* ``bf16-base-compiled-mlp-norms``: ``bf16-base`` with each decoder layer's MLP and RMS norms compiled by
  ``torch.compile`` (inductor's fused C++ kernels for the elementwise work between the matrix products; one
  graph for every length, ``dynamic=True``); ``first_step_s`` includes the compilation.
* ``bf16-base-compiled-layers``: every decoder layer compiled whole, the attention kernel left eager.

The rows share no prompt (each row its own forward over prompt and completion, as a step row of a context policy
or a micro-batch of distinct tasks does). Per variant: the best of ``--reps`` timed steps after a warm-up one
(forward, backward, optimizer), tokens per second, peak RSS, and the ``--top`` operators by self CPU time over one
profiled step (name, input shapes, milliseconds, calls, share). The loss is the mean completion log-prob, so the
gradient reaches every adapted layer: a real update, not an empty one (``grad_norm`` in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

VARIANTS = (
    "fp32",
    "bf16-autocast",
    "bf16-base",
    "bf16-base-strided-logits",
    "bf16-base-fp32-attention",
    "bf16-base-compiled-mlp-norms",
    "bf16-base-compiled-layers",
)


def _compile_regions(model: Any, whole_layers: bool) -> int:
    """Regional ``torch.compile`` (inductor, ``dynamic=True``: one graph for every row length and every layer) of
    each decoder layer: its MLP and its two RMS norms, or (``whole_layers``) the whole layer with the attention
    kernel left eager (its Python loop over blocks of queries would specialise a graph on the length). These passes
    keep no key/value cache, so the layers share their graphs; a pass on a prompt's cache would compile one per
    layer (the cache's per-layer state is guarded). Returns the layers compiled."""
    import torch
    from agentr1_trl import block_attention

    layers = model.get_base_model().model.layers
    if whole_layers:  # (room for a graph with and one without gradients per layer, should guards differ)
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(layers))
        apply = block_attention._BlockCausalAttention.apply
        block_attention._BlockCausalAttention.apply = torch.compiler.disable(apply)
        for layer in layers:
            layer.compile(dynamic=True)
        return len(layers)
    for layer in layers:
        for part in (layer.mlp, layer.input_layernorm, layer.post_attention_layernorm):
            part.compile(dynamic=True)
    return len(layers)


def _fp32_attention(model: Any) -> None:
    """Run ``model``'s attention through transformers' SDPA function in float32: bf16 queries, keys and values
    cast up (autocast off inside, or it would cast them back down), the output cast back to their dtype."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def sdpa_fp32(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        dtype = query.dtype
        with torch.autocast("cpu", enabled=False):
            out, weights = sdpa_attention_forward(
                module, query.float(), key.float(), value.float(), attention_mask, **kwargs
            )
        return out.to(dtype), weights

    AttentionInterface.register("sdpa_fp32", sdpa_fp32)
    model.set_attn_implementation("sdpa_fp32")


def worker(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    import torch
    from agentr1_trl import forward
    from agentr1_trl.models import bf16_frozen_base
    from agentr1_trl.pipeline import lora_config
    from peft import get_peft_model
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.smoke:
        from agentr1_trl.testing import tiny_model, tiny_tokenizer

        model = tiny_model(tiny_tokenizer(), hidden_size=64)
        vocab = model.config.vocab_size
    else:
        from agentr1_trl.models import load_default_policy

        model, _ = load_default_policy()
        vocab = 40_000
    model = get_peft_model(model, lora_config(16, 0, model))
    if variant.startswith("bf16-base"):
        bf16_frozen_base(model)
    if variant == "bf16-base-fp32-attention":
        _fp32_attention(model)
    if variant.startswith("bf16-base-compiled"):
        _compile_regions(model, whole_layers=variant.endswith("layers"))
    if variant == "bf16-base-strided-logits":
        forward._last_only = lambda input_ids: 1  # the int form: a strided slice of the hidden states
    autocast = variant != "fp32"
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(100, vocab, (args.rows, args.prompt), generator=gen)
    completion = torch.randint(100, vocab, (args.rows, args.completion), generator=gen)
    masks = torch.ones_like(prompt), torch.ones_like(completion)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    grad_norms: list[float] = []

    def step() -> tuple[float, float]:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logps, _ = forward.completion_logps(
                model, prompt, masks[0], completion, masks[1], share_prompts=False
            )
            loss = -logps.float().mean()
        middle = time.perf_counter()
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        grad_norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - start, middle - start

    first = step()[0]
    timed = [step() for _ in range(args.reps)]
    best = min(timed)
    tokens = args.rows * (args.prompt + args.completion)
    out: dict[str, Any] = {
        "variant": variant,
        "step_s": round(best[0], 3),
        "forward_s": round(best[1], 3),
        "backward_and_optimizer_s": round(best[0] - best[1], 3),
        "step_times": [round(t, 3) for t, _ in timed],
        "first_step_s": round(first, 3),
        "tokens_per_s": round(tokens / best[0], 1),
        "grad_norm": round(grad_norms[0], 6),
        "frozen_dtypes": sorted({str(p.dtype) for p in model.parameters() if not p.requires_grad}),
        "trained_dtypes": sorted({str(p.dtype) for p in model.parameters() if p.requires_grad}),
        "attention": model.config._attn_implementation,
    }
    if args.top:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            step()
        events = prof.key_averages(group_by_input_shape=True)
        total = sum(e.self_cpu_time_total for e in events) or 1
        ops = sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]
        out["profiled_step_ms"] = round(total / 1000, 1)
        out["top_ops"] = [
            {
                "op": e.key,
                "shapes": str(e.input_shapes)[:120],
                "self_ms": round(e.self_cpu_time_total / 1000, 1),
                "calls": e.count,
                "share": round(e.self_cpu_time_total / total, 3),
            }
            for e in ops
        ]
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument(
        "--rows", type=int, default=4, help="rows in the pass (default 4, the main job's micro-batch)"
    )
    parser.add_argument("--prompt", type=int, default=384, help="prompt tokens per row")
    parser.add_argument("--completion", type=int, default=128, help="completion tokens per row")
    parser.add_argument("--reps", type=int, default=4, help="timed steps per variant (the best counts)")
    parser.add_argument("--top", type=int, default=12, help="operators listed per variant (0: no profile)")
    parser.add_argument(
        "--cpu", type=int, default=None, help="the core to pin each run to (default: the first)"
    )
    parser.add_argument("--smoke", action="store_true", help="a tiny random model, 1 timed step, no profile")
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if min(args.rows, args.prompt, args.completion, args.reps) < 1 or args.top < 0:
        raise SystemExit(
            "update_profile.py: --rows, --prompt, --completion and --reps must be >= 1, --top >= 0"
        )
    if args.smoke:
        args.reps, args.top, args.rows, args.prompt, args.completion = 1, 0, 2, 24, 8
    if args.worker:
        print(json.dumps(worker(args.worker, args)))
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import emit, machine_info
    from step_cost import matmul_gflops

    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    result: dict[str, Any] = {
        "benchmark": "update_profile",
        "machine": machine_info("agentr1-gym", "torch", "transformers", "peft"),
        "matmul_gflops": matmul_gflops(1),
        "shape": {"rows": args.rows, "prompt": args.prompt, "completion": args.completion},
        "model": "tiny" if args.smoke else "SmolLM2-135M-Instruct + LoRA r=16 (every layer)",
        "threads": 1,
        "runs": {},
    }
    shape = ["--rows", str(args.rows), "--prompt", str(args.prompt), "--completion", str(args.completion),
             "--reps", str(args.reps), "--top", str(args.top), *(["--smoke"] if args.smoke else [])]  # fmt: skip
    for variant in args.variants:
        cmd = [
            "taskset",
            "-c",
            str(cpu),
            sys.executable,
            os.path.abspath(__file__),
            *shape,
            "--worker",
            variant,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:  # a failed run is reported, never a silent zero
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(f"update_profile.py: {variant} failed: {last}")
        result["runs"][variant] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{variant}: {result['runs'][variant]['step_s']} s a step", file=sys.stderr, flush=True)
    base = result["runs"].get("fp32", {}).get("tokens_per_s")
    for run in result["runs"].values():
        if base:
            run["speed_vs_fp32"] = round(run["tokens_per_s"] / base, 2)
    emit(result, args.json)


if __name__ == "__main__":
    main()
