"""What one GRPO update costs on SmolLM2-135M-Instruct, per setting, on identical tokens.

    python benchmarks/update_step.py [--steps 2] [--threads 2] [--json out.json]

AgentGRPOTrainer with the CLI's settings (LoRA r=16 on q_proj/v_proj, 8 episodes = 2 seeds x 4, beta=0,
AgentR1/SyntheticMultihop-v0 with 1 hop and 3 turns). Turns come from a scripted generator, so every variant
trains on the same tokens and a step's time is the update (the scripted rollout costs milliseconds). The script
differs within each GRPO group (one episode of four writes malformed turns), so every group has reward variance
and every row is trained: each run records the share of rows trained (``rows_trained``, from the trainer's
``signal/skipped_rows``) and the first step's gradient norm, and a run whose update skipped every row fails (an
empty update is not a speed-up). Each variant runs in its own process (its own peak memory); the first step is
warm-up and not timed. Variants:

* ``trl-default``: TRL's GRPOConfig default, gradient checkpointing on (every forward is recomputed in backward);
* ``no-checkpointing``: gradient checkpointing off (same arithmetic, more activation memory), full forward;
* ``shared-prompt``: checkpointing off and each distinct prompt run once (``share_prompt_prefix``, the CLI's
  default): a GRPO group's 4 episodes share their prompt;
* ``bf16``, ``shared-prompt+bf16``: the same with bf16 autocast on the CPU (not the same arithmetic; whether it is
  faster depends on the CPU's bf16 matmul speed, printed in the JSON as ``matmul_gflops``);
* ``shared-prompt+bf16-weights``: the base model's weights stored in bf16, the LoRA adapter and its optimizer
  state in fp32 (peft keeps adapter weights in fp32), no autocast;
* ``defaults``, ``defaults+fused-lora``: the trainer's own defaults on this machine (``DeviceDefaults``), then the
  same with the fused LoRA forward that GPUs get by default (``fuse_lora=True``).

Each run reports the step split: ``forward`` (the loss's forward pass), ``backward``, ``optimizer`` (the
optimizer step and zeroing), the micro-batch's tokens and padding fraction, and ``score`` (what TRL computes
between rollout and loss: old/reference log-probs, none with these settings).
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

VARIANTS = {
    "trl-default": {"gradient_checkpointing": True, "bf16": False, "share_prompt_prefix": False},
    "no-checkpointing": {"gradient_checkpointing": False, "bf16": False, "share_prompt_prefix": False},
    "shared-prompt": {"gradient_checkpointing": False, "bf16": False, "share_prompt_prefix": True},
    "bf16": {"gradient_checkpointing": True, "bf16": True, "share_prompt_prefix": False},
    "shared-prompt+bf16": {"gradient_checkpointing": False, "bf16": True, "share_prompt_prefix": True},
    "shared-prompt+bf16-weights": {
        "gradient_checkpointing": False, "bf16": False, "share_prompt_prefix": True, "bf16_weights": True,
    },
    # the trainer's own defaults on this machine (precision, frozen base, passes, shared prompts: DeviceDefaults),
    # then the same with the GPU's fused LoRA forward (agentr1_trl.models.fuse_lora_forward)
    "defaults": {"fuse_lora": False},
    "defaults+fused-lora": {"fuse_lora": True},
}  # fmt: skip
TURN = '<tool_call>{"name": "search", "arguments": {"query": "who founded the record label of the band"}}</tool_call>'


def _script(tok):
    """One episode of four writes malformed turns (a format penalty each), the others search, then answer once a
    tool response is in their context: the returns differ within every group, so no row has a zero advantage."""

    def script(prompt_ids, i):
        if i % 4 == 0:
            return "no tags at all"
        searched = "tool_response" in tok.decode(list(prompt_ids)[-300:])
        return "<answer>the founder of the label</answer>" if searched else TURN

    return script


def worker(variant: str, steps: int, threads: int) -> dict:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    from _common import step_timer
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.models import load_default_policy
    from peft import LoraConfig
    from transformers import TrainerCallback

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    settings = dict(VARIANTS[variant])
    bf16_weights = settings.pop("bf16_weights", False)
    model, tok = load_default_policy(dtype=torch.bfloat16 if bf16_weights else None)
    times: list[float] = []

    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=steps + 1,
        learning_rate=1e-4,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        env_id="AgentR1/SyntheticMultihop-v0",
        env_kwargs={"max_hops": 1, "max_turns": 3},
        max_new_tokens_per_turn=48,
        max_episode_tokens=1536,
        **settings,
    )
    phases: dict[str, list[float]] = {"forward": [], "optimizer": []}

    class OptimizerTimer(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            phases["optimizer"].append(time.perf_counter() - self.t)

    trainer = AgentGRPOTrainer(
        model,
        args,
        tok,
        peft_config=LoraConfig(
            r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
        generator=ScriptedGenerator(tok, _script(tok)),
        callbacks=[step_timer(times), OptimizerTimer()],
    )
    loss = trainer.loss

    def timed_loss(model, batch, whole=None):  # ``whole``: the micro-batch a pass is one of (update passes)
        t = time.perf_counter()
        out = loss(model, batch, whole=whole)
        phases["forward"].append(time.perf_counter() - t)
        return out

    trainer.loss = timed_loss
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]

    def mean(xs):
        xs = xs[1:]  # the first step is warm-up
        return sum(xs) / len(xs)

    trained = 1.0 - sum(h.get("signal/skipped_rows", 0.0) for h in logs) / max(len(logs), 1)
    if not logs or trained <= 0.0:
        raise RuntimeError("the update skipped every row (no advantage anywhere): nothing was measured")
    update = mean([h["time/update_s"] for h in logs])
    forward = mean(phases["forward"])
    return {
        "variant": variant,
        **VARIANTS[variant],
        "sec_per_step": mean(times),
        "step_times": times,
        "split_s": {
            "forward": forward,
            "backward": update - forward,
            "optimizer": mean(phases["optimizer"]),
            "score": mean([h["time/score_s"] for h in logs]),
            "rollout (scripted)": mean([h["time/rollout_s"] for h in logs]),
        },
        "micro_batch_tokens": logs[-1]["update/tokens"],
        "padding_fraction": logs[-1]["update/padding_fraction"],
        # proof of a real update: the share of rows with a non-zero advantage, and the first step's gradient
        "rows_trained": trained,
        "grad_norm_first_step": logs[0].get("grad_norm") if logs else None,
        "loss_first_step": logs[0]["loss"] if logs else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def matmul_gflops(threads: int) -> dict[str, float]:
    """This CPU's 2048x2048 matmul rate, fp32 and bf16 (what the update's FLOP rate compares against)."""
    import time

    import torch

    torch.set_num_threads(threads)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
        a @ b
        t = time.perf_counter()
        for _ in range(5):
            a @ b
        out[str(dtype).replace("torch.", "")] = round(5 * 2 * 2048**3 / (time.perf_counter() - t) / 1e9, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=int, default=2, help="timed steps per variant (after one warm-up step)"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads per run")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.threads)))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import emit, machine_info
    from tqdm.auto import tqdm

    runs = {}
    for variant in tqdm(args.variants, desc="variants", unit="run"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                variant,
                "--steps",
                str(args.steps),
                "--threads",
                str(args.threads),
            ],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            runs[variant] = {"variant": variant, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
            continue
        runs[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    base = runs.get("trl-default", {}).get("sec_per_step")
    for r in runs.values():
        if base and "sec_per_step" in r:
            r["speedup_vs_trl_default"] = round(base / r["sec_per_step"], 2)
    emit(
        {
            "benchmark": "update_step",
            "machine": machine_info("agentr1-gym"),
            "matmul_gflops": matmul_gflops(args.threads),
            "threads": args.threads,
            "runs": runs,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
