"""What a context policy costs in the update: seconds per GRPO step, tokens the forward pass runs, and peak memory,
per world and policy (SmolLM2-135M-Instruct, LoRA r=16, the CLI's defaults otherwise).

Each run is one process (its own peak memory): ``AgentGRPOTrainer`` on the world with ``context=POLICY``, 4
episodes a step (one group), micro-batches of 2 episodes (1 at 50 turns), episodes played by the
env's random admissible policy through a scripted generator (an untrained policy's long episodes; the rollout costs
milliseconds, so a step's time is the update); the first episode of each group writes malformed turns instead, so
returns differ in every group. The first step is warm-up; the rest are timed. Every run records the share of rows
trained and the first step's gradient norm: an update without a gradient fails the run.

``window:1 (no shared prefix)`` is window:1 with ``share_prompt_prefix=False``: each step row runs its whole
context, the task message included, so the pair shows what running the rows' common task prefix once saves.
A micro-batch's rows run in forward/backward passes of at most ``max_update_tokens``: 4,096 in the unlabelled
runs (the CPU default when they were recorded), 2,048 in the ``(2,048-token passes)`` runs (the CPU default
since, chosen from these runs and the main job's): memory against the compute of re-running the shared prefix
once per pass. The 50-turn world's 2,048-token run is the setting that stays within the main job's memory.

    python benchmarks/context_update.py --json benchmarks/results/context_update.json
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

#: label -> (env id, env kwargs, the runs measured there)
WORLDS = {
    "shop, 10 turns": (
        "AgentR1/WebShop-v0", {"split": "train", "max_turns": 10},
        ("full", "window:1", "window:2", "state", "window:1 (no shared prefix)", "window:1 (2,048-token passes)",
         "full (2,048-token passes)"),
    ),
    "Coin Collector, 20 turns": (
        "AgentR1/TextWorld-CoinCollector-v0", {"level": 10, "num_games": 8, "max_turns": 20},
        ("full", "window:2", "state", "full (2,048-token passes)"),
    ),
    # the long horizon: what the whole chat costs at 50 turns against a window (memory is the point)
    "Coin Collector, 50 turns": (
        "AgentR1/TextWorld-CoinCollector-v0", {"level": 10, "num_games": 8, "max_turns": 50},
        ("full", "window:2", "window:2 (2,048-token passes)"),
    ),
}  # fmt: skip
#: episodes per micro-batch (2 by default): one at 50 turns, where two whole chats of ~7k tokens each would take
#: most of this machine's 24 GB in one backward pass
MICRO = {"Coin Collector, 50 turns": 1}
#: the unlabelled runs at 4,096-token passes (the CPU default when they were recorded; 2,048 since)
RUNS = (
    ("full", {"max_update_tokens": 4096}),
    ("window:1", {"max_update_tokens": 4096}),
    ("window:2", {"max_update_tokens": 4096}),
    ("state", {"max_update_tokens": 4096}),
    ("window:1 (no shared prefix)", {"share_prompt_prefix": False, "max_update_tokens": 4096}),
    ("window:1 (2,048-token passes)", {"max_update_tokens": 2048}),
    ("full (2,048-token passes)", {"max_update_tokens": 2048}),
    ("window:2 (2,048-token passes)", {"max_update_tokens": 2048}),
)


def worker(world: str, run: str, steps: int) -> dict:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    from _common import step_timer
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.models import load_default_policy
    from peft import LoraConfig

    torch.manual_seed(0)
    env_id, env_kwargs, _ = WORLDS[world]
    policy, extra = run.split(" ")[0], dict(dict(RUNS)[run])
    model, tok = load_default_policy()
    times: list[float] = []
    args = AgentGRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=MICRO.get(world, 2),  # a micro-batch's episodes (or their step rows)
        gradient_accumulation_steps=4 // MICRO.get(world, 2),  # 4 episodes a step: one group
        num_generations=4,
        max_steps=steps + 1,
        learning_rate=1e-4,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        env_id=env_id,
        env_kwargs={**env_kwargs, "context": policy},
        max_new_tokens_per_turn=128,  # a shop search call is ~60 tokens: none is cut
        max_episode_tokens=8192,
        gradient_checkpointing=False,  # as `agentr1 train` (TRL's default recomputes, and turns the KV cache off)
        skip_zero_advantage=False,  # random play may tie a group: every row still trains (a real update)
        **extra,
    )
    holder: list = []

    def random_turn(prompt_ids, i):
        """The i-th live episode's env picks a random admissible action, except that the first episode of each
        group writes malformed turns (a format penalty each): returns differ within every group, so every row
        has an advantage and the update has a gradient."""
        live = [(j, e) for j, e in enumerate(holder[0]._envs(4)) if not e.unwrapped.done]
        j, env = live[i]
        return "no tool call here" if j % 4 == 0 else env.unwrapped.random_action()

    trainer = AgentGRPOTrainer(
        model,
        args,
        tok,
        peft_config=LoraConfig(
            r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
        generator=ScriptedGenerator(tok, random_turn),
        callbacks=[step_timer(times)],
    )
    holder.append(trainer)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    if not logs or not any(h.get("grad_norm") for h in logs):
        raise RuntimeError(f"{world} {run}: no gradient in any step: nothing was measured")

    def mean(xs):
        xs = xs[1:] if len(xs) > 1 else xs  # the first step is warm-up
        return sum(xs) / len(xs)

    return {
        "world": world,
        "env": env_id,
        "run": run,
        "context": policy,
        "share_prompt_prefix": extra.get("share_prompt_prefix", "default (on, CPU)"),
        "max_update_tokens": trainer.update_token_budget(),
        "bf16": bool(args.bf16),
        "sec_per_step": mean(times),
        "update_s_per_step": mean([h["time/update_s"] for h in logs]),
        "step_times": times,
        "update_tokens_per_step": mean([h["update/tokens"] for h in logs]),
        "passes_per_micro_batch": mean([h.get("update/passes", 1.0) for h in logs]),
        "turns_per_episode": mean([h["env/turns"] for h in logs]),
        "per_turn_rows": mean([h.get("signal/per_turn_rows", 0.0) for h in logs]),
        "rows_trained": 1.0 - mean([h.get("signal/skipped_rows", 0.0) for h in logs]),
        "grad_norm_first_step": logs[0].get("grad_norm"),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1, help="timed steps per run (after one warm-up step)")
    parser.add_argument(
        "--worlds", nargs="*", default=list(WORLDS), choices=list(WORLDS), help="default: every world"
    )
    parser.add_argument("--runs", nargs="*", default=[r for r, _ in RUNS], choices=[r for r, _ in RUNS])
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.steps)))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    start, results = time.perf_counter(), []
    plan = [(w, r) for w in args.worlds for r in args.runs if r in WORLDS[w][2]]
    for k, (world, run) in enumerate(plan):
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, "--worker", world, run, "--steps", str(args.steps)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{world} {run} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        left = (time.perf_counter() - start) / (k + 1) * (len(plan) - k - 1)
        r = results[-1]
        print(
            f"[{k + 1}/{len(plan)}] {world} {run}: {r['update_s_per_step']:.1f} s update/step, "
            f"{r['update_tokens_per_step']:.0f} tokens, {r['peak_rss_gb']} GB "
            f"({time.perf_counter() - t:.0f} s; about {left / 60:.0f} min to go)",
            file=sys.stderr,
            flush=True,
        )
        write(results, start, args.json, done=k + 1 == len(plan))


def write(results: list[dict], start: float, path: str | None, done: bool) -> None:
    """The result file, rewritten after every run (a run cut short keeps what was measured; ``complete`` says)."""
    from _common import emit, machine_info

    for r in results:
        full = next((x for x in results if x["world"] == r["world"] and x["run"] == "full"), None)
        r["update_vs_full"] = round(r["update_s_per_step"] / full["update_s_per_step"], 3) if full else None
    emit(
        {
            "benchmark": "context_update",
            "model": "SmolLM2-135M-Instruct, LoRA r=16 (q_proj, v_proj)",
            "settings": "4 episodes/step (one group), micro-batches of 2 episodes (1 at 50 turns), random "
            "admissible play",
            "worlds": {k: {"env": e, "env_kwargs": kw} for k, (e, kw, _) in WORLDS.items()},
            "runs": results,
            "complete": done,
            "seconds": round(time.perf_counter() - start, 1),
            "machine": machine_info("agentr1-gym", "torch", "transformers", "trl", "textworld"),
        },
        path,
        quiet=not done,
    )


if __name__ == "__main__":
    main()
