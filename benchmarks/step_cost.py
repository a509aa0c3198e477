"""What an RL step costs, part by part, in each world the learning runs train on: the main job, the shop, Coin
Collector and BFCL base, each at its learning protocol's settings, under each update precision, on identical tokens.

    python benchmarks/step_cost.py --jobs 2 --json benchmarks/results/step_cost.json   # SmolLM2-135M, every world
    python benchmarks/step_cost.py --worlds main shop --variants fp32 fp32-regrouped --steps 2
    python benchmarks/step_cost.py --smoke       # a tiny random model, the main job, one timed step (a minute)

The policy is SmolLM2-135M-Instruct with the CLI's LoRA (r=16), GRPO with 2 task seeds x 4 episodes a step, the
micro-batch, turn and episode budgets of the world's learning runs (``WORLDS`` below; ``benchmarks/learning.py``'s
commands in ``step_credit.json``, ``bfcl.json`` and the main job's preset). The turns are scripted, so that every
variant trains on the same tokens: each env's oracle plays, except the first episode of every group, which writes
malformed turns until its turn limit (a format penalty each). Returns then differ within every group, every row has
an advantage and is trained (``rows_trained``; a run that trained no row fails: an empty update is not a
speed-up), and the token load is an oracle-like policy's, which is what the warm start imitates. Generation is
therefore not measured here (``benchmarks/learning.py`` splits a sampled step into generation, env, scoring and
update); everything after it is.

Each (world, variant) runs in its own process (its own peak memory), pinned to its own ``--threads`` cores (``--jobs``
runs side by side: the learning runs train one core each); one warm-up step, then ``--steps`` timed
ones. Per step: ``score`` (TRL's old/reference log-probs and our advantages, between rollout and loss),
``forward`` (the loss's forward passes), ``backward``, ``optimizer``; the tokens through the update (real and
padding), the update passes; the update's FLOPs (counted by ``torch.utils.flop_counter`` on the warm-up step, per
update token, times each timed step's tokens) and its achieved GFLOP/s against this CPU's matrix-product peak
measured in the same run, fp32 and bf16; peak RSS; the CPU's model and vector flags. Variants:

* ``fp32``: the update in float32 (every CPU without native bf16 runs this), on TRL's micro-batches (the step's
  rows shuffled, each micro-batch padded to the step's longest row);
* ``fp32-regrouped``: fp32 on regrouped micro-batches (``regroup_micro_batches``: a group's rows together, so its
  prompt runs once; rows of similar length together; each micro-batch trimmed to its rows' width);
* ``regrouped-lora-top-half``, ``regrouped-lora-top-third``: that, with LoRA on the top half or third of the
  layers only (``--lora-layers``, PEFT's ``layers_to_transform``; the others adapt every layer): nothing below the
  lowest adapted layer needs a gradient, so the backward pass stops there. Fewer adapted layers may learn less
  per step: this measures the cost side only;
* ``bf16-autocast-regrouped``: regrouped, ``bf16=True, bf16_base=False`` (autocast over the float32 weights:
  every product casts its weight, and norms, rotary embeddings and the residual stream stay float32);
* ``bf16-base-regrouped``: regrouped, ``bf16=True`` with the frozen base stored in bf16 (``bf16_base``, the
  default with bf16 on a CPU; the adapter, its gradients and optimizer state float32), and the same with LoRA on
  the top third; ``bf16-base-regrouped-train-top-third``: the adapter on every layer (as a warm start trains it)
  and RL training its top third only (``train_top_layers``). The bf16 variants pay only on a CPU with native bf16 (AVX512-BF16, AMX): elsewhere bf16 is
  emulated, hundreds of times slower per product.
* ``bf16-base-regrouped-sdpa``: ``bf16-base-regrouped`` with its causal rows through PyTorch's flash-attention
  kernel (``attention_kernel="sdpa"``), where the default (``"auto"``) runs bf16 rows on a CPU through
  ``agentr1_trl.block_attention``. The FLOPs are counted with PyTorch's kernel in every variant, which the
  counter gives no FLOPs: the achieved GFLOP/s leave attention's own products out, and the update's tokens per
  second compare the kernels;
* ``bf16-base-regrouped-whole-vocab``: ``bf16-base-regrouped`` with the output projection's log-probs over the
  whole vocabulary per chunk of rows, as before ``agentr1_trl.forward.CPU_VOCAB_BLOCK`` (the default takes a
  CPU's vocabulary 4,096 entries at a time, so that each block's logits stay in the caches);
* ``bf16-base-regrouped-masked``, ``fp32-regrouped-masked``: those with ``unmasked_causal_rows=False``, every
  forward pass with transformers' padding mask (as before ``agentr1_trl.causal_rows``); the other variants run
  rows that need no mask without one.

The viewer's saved episodes (``save_episodes_steps``: a forward pass per saved episode every 10th step) are off:
they are not part of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

#: the worlds, each at its learning runs' settings: env, env kwargs, turn and episode budgets, episodes per pass
WORLDS: dict[str, dict[str, Any]] = {
    "main": {  # the README's main job (agentr1_trl.presets.MAIN_JOB)
        "env": "AgentR1/SyntheticMultihop-v0",
        "env_kwargs": {"max_hops": 1, "max_turns": 3},
        "max_new_tokens_per_turn": 48,
        "max_episode_tokens": 1536,
        "micro_batch": 4,
    },
    "shop": {  # step_credit.json's shop runs
        "env": "AgentR1/WebShop-v0",
        "env_kwargs": {"split": "train", "max_turns": 8},
        "max_new_tokens_per_turn": 64,
        "max_episode_tokens": 2048,
        "micro_batch": 2,
    },
    "coin": {  # step_credit.json's text-game runs (Coin Collector level 5, 10 turns)
        "env": "AgentR1/TextWorld-CoinCollector-v0",
        "env_kwargs": {"level": 5, "max_turns": 10, "split": "train", "num_games": 8},
        "max_new_tokens_per_turn": 64,
        "max_episode_tokens": 2048,
        "micro_batch": 4,
    },
    "bfcl": {  # bfcl.json's RL runs on the base category
        "env": "AgentR1/BFCL-MultiTurn-v0",
        "env_kwargs": {"category": "base", "split": "train", "max_turns": 16},
        "max_new_tokens_per_turn": 128,
        "max_episode_tokens": 4096,
        "micro_batch": 2,
    },
}
VARIANTS: dict[str, dict[str, Any]] = {
    # TRL's micro-batches: the step's rows shuffled, every micro-batch padded to the step's longest row
    "fp32": {"bf16": False, "bf16_base": False, "lora_layers": 1.0, "regroup": False},
    # micro-batches regrouped (regroup_micro_batches): a group's rows together, similar lengths together, each
    # trimmed to its own rows' width
    "fp32-regrouped": {"bf16": False, "bf16_base": False, "lora_layers": 1.0, "regroup": True},
    # and LoRA on the top half / third of the layers only (PEFT's layers_to_transform): below the lowest adapted
    # layer nothing requires a gradient, so the backward pass stops there
    "regrouped-lora-top-half": {"bf16": False, "bf16_base": False, "lora_layers": 1 / 2, "regroup": True},
    "regrouped-lora-top-third": {"bf16": False, "bf16_base": False, "lora_layers": 1 / 3, "regroup": True},
    # bf16 autocast over the float32 weights (what a bf16 CPU ran before bf16_base)
    "bf16-autocast-regrouped": {"bf16": True, "bf16_base": False, "lora_layers": 1.0, "regroup": True},
    # and the frozen base stored in bf16 (bf16_base, the default with bf16 on a CPU): the adapter, its gradients
    # and optimizer state float32
    "bf16-base-regrouped": {"bf16": True, "bf16_base": True, "lora_layers": 1.0, "regroup": True},
    # and causal rows through PyTorch's flash-attention kernel (before the block kernel, attention_kernel="auto")
    "bf16-base-regrouped-sdpa": {
        "bf16": True,
        "bf16_base": True,
        "lora_layers": 1.0,
        "regroup": True,
        "attention_kernel": "sdpa",
    },
    # and the output projection's log-probs over the whole vocabulary per chunk of rows (before CPU_VOCAB_BLOCK:
    # agentr1_trl.forward.projected_logps takes a CPU's vocabulary in blocks that stay in the caches)
    "bf16-base-regrouped-whole-vocab": {
        "bf16": True,
        "bf16_base": True,
        "lora_layers": 1.0,
        "regroup": True,
        "whole_vocab": True,
    },
    # and every pass with transformers' padding mask (before unmasked_causal_rows: the attention kernel then
    # computes every block of the score matrix, and grouped keys and values are copied out to every head)
    "bf16-base-regrouped-masked": {
        "bf16": True,
        "bf16_base": True,
        "lora_layers": 1.0,
        "regroup": True,
        "unmasked_causal_rows": False,
    },
    "fp32-regrouped-masked": {
        "bf16": False,
        "bf16_base": False,
        "lora_layers": 1.0,
        "regroup": True,
        "unmasked_causal_rows": False,
    },
    "bf16-base-regrouped-lora-top-third": {
        "bf16": True,
        "bf16_base": True,
        "lora_layers": 1 / 3,
        "regroup": True,
    },
    # the adapter on every layer (as the warm start trains it), RL training its top third only
    # (train_top_layers): the lower layers' adapter runs frozen, without autograd
    "bf16-base-regrouped-train-top-third": {
        "bf16": True,
        "bf16_base": True,
        "lora_layers": 1.0,
        "train_top": 1 / 3,
        "regroup": True,
    },
}
GENERATIONS, GROUPS = 4, 2
MALFORMED = "I am not sure which tool to use, so I will think about it first."


def _script(envs: list[Any]):
    """The oracle of each env, except the first episode of every group: malformed turns (no call, no answer)."""

    def script(prompt_ids, i: int) -> str:
        live = [e for e in envs if not e.unwrapped.done]
        env = live[i]
        return MALFORMED if envs.index(env) % GENERATIONS == 0 else env.unwrapped.oracle_action()

    return script


def worker(world: str, variant: str, steps: int, threads: int, model_name: str) -> dict[str, Any]:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    import torch
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.pipeline import lora_config
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import TrainerCallback

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    spec, settings = WORLDS[world], VARIANTS[variant]
    if settings.get("whole_vocab"):  # this worker's process only: every projected_logps call in one block
        import agentr1_trl.forward

        agentr1_trl.forward.CPU_VOCAB_BLOCK = 1 << 30
    if model_name == "smollm2":
        from agentr1_trl.models import load_default_policy

        model, tok = load_default_policy()
    else:  # --smoke: a tiny random Qwen2 built from a config
        from agentr1_trl.testing import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer()
        model = tiny_model(tok, hidden_size=64)
    rows = GENERATIONS * GROUPS
    micro = spec["micro_batch"]
    layers = model.config.num_hidden_layers
    adapted = max(1, round(layers * settings["lora_layers"]))
    trained_layers = round(layers * settings["train_top"]) if settings.get("train_top") else 0
    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="step-cost-"),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro,
        num_generations=GENERATIONS,
        max_steps=steps + 1,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        gradient_checkpointing=False,
        bf16=settings["bf16"],
        bf16_base=settings["bf16_base"],
        regroup_micro_batches=settings["regroup"],
        unmasked_causal_rows=settings.get("unmasked_causal_rows", True),
        attention_kernel=settings.get("attention_kernel", "auto"),
        train_top_layers=trained_layers,
        save_episodes_steps=0,  # the viewer's episodes (a forward pass each, every 10th step) are not the step
        env_id=spec["env"],
        env_kwargs=spec["env_kwargs"],
        max_new_tokens_per_turn=spec["max_new_tokens_per_turn"],
        max_episode_tokens=spec["max_episode_tokens"],
    )
    step_s: list[float] = []
    phases: dict[str, list[float]] = {"forward": [], "optimizer": []}
    flops: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.step_start = time.perf_counter()
            phases["forward"].append(0.0)

        def on_pre_optimizer_step(self, a, state, control, **kw):
            self.opt_start = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            now = time.perf_counter()
            phases["optimizer"].append(now - self.opt_start)
            step_s.append(now - self.step_start)

    peft_config = lora_config(16, adapted, model)  # the CLI's adapter, as --lora-layers ADAPTED makes it
    trainer = AgentGRPOTrainer(model, args, tok, peft_config=peft_config, callbacks=[Timer()])
    trainer.generator = ScriptedGenerator(tok, _script(trainer._envs(rows)))
    loss = trainer.loss

    def timed_loss(m, batch, **kw):
        t = time.perf_counter()
        out = loss(m, batch, **kw)
        phases["forward"][-1] += time.perf_counter() - t
        return out

    trainer.loss = timed_loss
    step = trainer.training_step

    def counted_step(*a, **kw):  # the warm-up step's FLOPs (forward and backward of every pass, and scoring)
        if trainer.state.global_step > 0:
            return step(*a, **kw)
        # counted with PyTorch's attention kernel in every variant, so that each counts the same work: the
        # counter has no formula for its CPU flash-attention kernel (attention's scores and mixing are not
        # counted), and would count the block kernel's products, recomputation and diagonal squares included
        kernel, trainer.args.attention_kernel = trainer.args.attention_kernel, "sdpa"
        try:
            with FlopCounterMode(display=False) as counter:
                out = step(*a, **kw)
        finally:
            trainer.args.attention_kernel = kernel
        flops.append(counter.get_total_flops())
        return out

    trainer.training_step = counted_step
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    if len(logs) != steps + 1:
        raise RuntimeError(f"{len(logs)} logged steps, expected {steps + 1}")
    trained = [1.0 - h.get("signal/skipped_rows", 0.0) for h in logs]
    if min(trained) <= 0.0:
        raise RuntimeError("a step's update skipped every row (no advantage anywhere): nothing was measured")
    passes_per_step = rows // micro

    def tokens(h: dict[str, Any]) -> float:  # the trainer logs each micro-batch's real tokens, averaged
        return h["update/tokens"] * passes_per_step

    flops_per_token = sum(flops) / tokens(logs[0])
    timed = logs[1:]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    update = mean([h["time/update_s"] for h in timed])
    forward = mean(phases["forward"][1:])
    step_tokens = mean([tokens(h) for h in timed])
    update_flops = flops_per_token * step_tokens
    return {
        "world": world,
        "variant": variant,
        "env": spec["env"],
        "settings": {k: v for k, v in spec.items() if k != "env"} | settings,
        "lora_layers": f"{adapted} of {layers}",
        "trained_layers": f"{trained_layers or adapted} of {layers}",
        "model": model_name,
        "threads": threads,
        "sec_per_step": round(mean(step_s[1:]), 3),
        "step_times": [round(s, 3) for s in step_s],
        "split_s": {
            "rollout (scripted turns + env)": round(mean([h["time/rollout_s"] for h in timed]), 3),
            "score": round(mean([h["time/score_s"] for h in timed]), 3),
            "forward": round(forward, 3),
            "backward": round(update - forward, 3),
            "optimizer": round(mean(phases["optimizer"][1:]), 3),
        },
        "update_share_of_step": round((update + mean(phases["optimizer"][1:])) / mean(step_s[1:]), 3),
        "tokens_per_step": round(step_tokens),
        "padding_fraction": round(mean([h["update/padding_fraction"] for h in timed]), 3),
        "update_passes_per_micro_batch": mean([h.get("update/passes", 1.0) for h in timed]),
        "update_tokens_per_s": round(step_tokens / update, 1),
        "update_gflop_per_step": round(update_flops / 1e9, 1),
        "update_gflops_achieved": round(update_flops / update / 1e9, 1),
        "flops_per_token_warmup": round(flops_per_token),
        # proof of a real update: the share of rows with a non-zero advantage, the first step's gradient norm
        "rows_trained": round(mean(trained), 3),
        "grad_norm_first_step": logs[0].get("grad_norm"),
        # the timed steps' (the warm-up step is counted with PyTorch's attention kernel in every variant)
        "grad_norm_timed_steps": [h.get("grad_norm") for h in timed],
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def matmul_gflops(threads: int, n_max: int = 2048, seconds: float = 0.5) -> dict[str, float]:
    """This CPU's square matrix-product rate, fp32 and bf16 (the peak the update's rate is compared against): the
    side doubles from 256 up to ``n_max`` while one product takes under 0.1 s, then products repeat for about
    ``seconds`` (a CPU without native bf16 multiplies bf16 hundreds of times slower: a fixed 2048 side would take
    minutes there)."""
    import torch

    torch.set_num_threads(threads)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        n = 256
        while True:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            t = time.perf_counter()
            a @ b
            once = time.perf_counter() - t
            if once >= 0.1 or n >= n_max:
                break
            n *= 2
        reps = max(1, min(20, round(seconds / max(once, 1e-6))))
        best = 0.0
        for _ in range(3):  # the best of three rounds: a peak, not one round's clock or turbo luck
            t = time.perf_counter()
            for _ in range(reps):
                a @ b
            best = max(best, reps * 2 * n**3 / (time.perf_counter() - t) / 1e9)
        out[str(dtype).replace("torch.", "")] = round(best, 1)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=list(WORLDS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="timed steps per run, after one warm-up step (each plays other tasks)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per run (the learning protocol: 1)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs side by side, each pinned to its own --threads cores"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny random model, the main job, fp32, regrouped and bf16 with a bf16 base, 1 timed step",
    )
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", nargs=2, metavar=("WORLD", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"], help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.steps, args.threads, args.model)))
        return
    if args.steps < 1:
        raise SystemExit("step_cost.py: --steps must be at least 1")
    if args.smoke:
        args.worlds, args.steps, args.model = ["main"], 1, "tiny"
        args.variants = ["fp32", "fp32-regrouped", "bf16-base-regrouped"]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import core_slots, emit, machine_info, run_pinned
    from tqdm.auto import tqdm

    result: dict[str, Any] = {
        "benchmark": "step_cost",
        "machine": machine_info("agentr1-gym", "torch", "transformers", "trl", "peft"),
        "matmul_gflops": matmul_gflops(args.threads),
        "threads": args.threads,
        "jobs_side_by_side": args.jobs,
        "steps": args.steps,
        "runs": {},
    }
    jobs = [(w, v) for w in args.worlds for v in args.variants]
    slots = core_slots(args.jobs, args.threads, "step_cost.py")  # each run its own cores

    def command(job: tuple[str, str]) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "--worker", *job, "--steps", str(args.steps),
                "--threads", str(args.threads), "--model", args.model]  # fmt: skip

    def done(job: tuple[str, str], run: subprocess.CompletedProcess) -> None:
        world, variant = job
        bar.update()
        # a failed run is reported, never a silent zero; the others still run
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            result["runs"][f"{world}/{variant}"] = {"world": world, "variant": variant, "error": last}
            print(f"step_cost: {world}/{variant} failed: {last}", file=sys.stderr)
            return
        out = json.loads(run.stdout.strip().splitlines()[-1])
        bf16 = VARIANTS[variant]["bf16"]
        peak = result["matmul_gflops"]["bfloat16" if bf16 else "float32"]
        out["share_of_matmul_peak"] = round(out["update_gflops_achieved"] / peak, 3)
        result["runs"][f"{world}/{variant}"] = out
        emit(result, args.json, quiet=True)  # partial results as the runs go

    with tqdm(total=len(jobs), desc="step_cost", unit="run") as bar:
        run_pinned(jobs, command, slots, done)
    for world in args.worlds:  # each variant's update against fp32's, same tokens
        base = result["runs"].get(f"{world}/fp32", {}).get("update_tokens_per_s")
        for variant in args.variants:
            run = result["runs"].get(f"{world}/{variant}", {})
            if base and "update_tokens_per_s" in run:
                run["update_speed_vs_fp32"] = round(run["update_tokens_per_s"] / base, 2)
    emit(result, args.json)
    if any("error" in r for r in result["runs"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
