"""What the oracle warm start costs per transcript, in each world the learning runs train on: its NLL with the
vocabulary projection only at the assistant's tokens (``agentr1_trl.sft``, now) against the model's own
``labels=`` loss, which projects every position of a transcript onto the vocabulary (before).

    python benchmarks/warm_start_cost.py --jobs 2 --json benchmarks/results/warm_start_cost.json
    python benchmarks/warm_start_cost.py --smoke     # a tiny random model, the main job, 2 transcripts (seconds)

Per world (``step_cost.WORLDS``: the main job, the shop, Coin Collector, BFCL base, at their learning settings) the
oracle plays ``--episodes`` training tasks; SmolLM2-135M-Instruct with the CLI's LoRA (r=16) fits them for one
epoch as the learning runs' warm start does (``agentr1_trl.sft.warm_start``: batches of 4, one transcript per
forward pass, bf16 autocast with the frozen base in bf16), from the same initial adapter in every variant:

* ``scored-only``: the package's NLL (the final hidden states of every position, the vocabulary projection and
  its log-softmax only where an assistant token is scored: ``agentr1_trl.forward.projected_logps``);
* ``labels-loss``: the same transcripts through ``model(..., labels=...).loss`` (transformers' loss: logits for
  every position, then cross-entropy over the scored ones), as the warm start computed it before.

Each (world, variant) runs in its own process, pinned to its own core (``--jobs`` side by side). Recorded: the epoch's
seconds in all and per transcript, the median forward pass per transcript, tokens and scored tokens,
the epoch's loss (the variants compute the same NLL: their losses agree to bf16's rounding), how far the adapter
moved (a real update), peak RSS, and this CPU's model and flags.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

VARIANTS = ("scored-only", "labels-loss")


def labels_nll(model: Any, batch: Any, pad: int, device: Any) -> Any:
    """The warm start's NLL as it was computed before: the model's own ``labels=`` loss, the vocabulary projection
    and its softmax at every position of the right-padded rows."""
    from agentr1_trl.causal_rows import causal_rows
    from agentr1_trl.sft import padded_rows

    ids, att, labels = padded_rows(batch, pad)
    with causal_rows(model) as unmasked:
        mask = None if unmasked else att.to(device)
        return model(input_ids=ids.to(device), attention_mask=mask, labels=labels.to(device)).loss


def worker(world: str, variant: str, episodes: int, threads: int, model_name: str) -> dict[str, Any]:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    import torch
    from agentr1_trl import sft
    from agentr1_trl.pipeline import lora_config
    from peft import get_peft_model
    from step_cost import WORLDS

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    spec = WORLDS[world]
    if model_name == "smollm2":
        from agentr1_trl.models import load_default_policy

        model, tok = load_default_policy()
        bf16 = True
    else:  # --smoke: a tiny random Qwen2 built from a config, float32
        from agentr1_trl.testing import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer()
        model = tiny_model(tok, hidden_size=64)
        bf16 = False
    model = get_peft_model(model, lora_config(16))
    samples = sft.oracle_samples(spec["env"], range(episodes), tok, env_kwargs=spec["env_kwargs"])
    if variant == "labels-loss":
        sft._masked_nll = labels_nll  # this worker's process only
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    nll, passes = sft._masked_nll, []

    def timed(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        out = nll(*a, **kw)
        passes.append(time.perf_counter() - t)  # the forward pass (its backward is timed with the step)
        return out

    sft._masked_nll = timed
    t = time.perf_counter()
    losses = sft.warm_start(
        model, tok, samples, epochs=1, lr=1e-3, micro_batch_size=1, progress=False, bf16=bf16
    )
    total = time.perf_counter() - t
    moved = sum(
        float((p.detach() - trained[n]).norm() ** 2) for n, p in model.named_parameters() if n in trained
    )
    tokens = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    scored = [sum(s.action_mask) for s in samples]
    return {
        "world": world,
        "variant": variant,
        "env": spec["env"],
        "env_kwargs": spec["env_kwargs"],
        "model": model_name,
        "bf16": bf16,
        "threads": threads,
        "transcripts": len(samples),
        "tokens": sum(tokens),
        "scored_tokens": sum(scored),
        "scored_share": round(sum(scored) / sum(tokens), 3),
        "longest_transcript": max(tokens),
        "seconds": round(total, 2),
        "seconds_per_transcript": round(total / len(samples), 3),
        "tokens_per_s": round(sum(tokens) / total, 1),
        "forward_s_per_transcript_median": round(statistics.median(passes), 3),
        "epoch_loss": round(losses[0], 5),
        "adapter_change_norm": round(moved**0.5, 5),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worlds", nargs="+", default=["main", "shop", "coin", "bfcl"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--episodes", type=int, default=8, help="oracle transcripts per run (one epoch)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (the learning runs: 1)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs side by side, each on its own --threads cores"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny random model, the main job, 2 transcripts"
    )
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", nargs=2, metavar=("WORLD", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"], help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from step_cost import WORLDS, matmul_gflops

    unknown = [w for w in args.worlds if w not in WORLDS]
    if unknown:
        parser.error(f"unknown world(s) {unknown}; choose from {sorted(WORLDS)}")
    if args.episodes < 1 or args.threads < 1 or args.jobs < 1:
        parser.error("--episodes, --threads and --jobs must be at least 1")
    if args.worker:
        print(json.dumps(worker(*args.worker, args.episodes, args.threads, args.model)))
        return 0
    if args.smoke:
        args.worlds, args.episodes, args.model = ["main"], 2, "tiny"
    from _common import core_slots, emit, machine_info, run_pinned

    slots = core_slots(args.jobs, args.threads, "warm_start_cost.py")
    result: dict[str, Any] = {
        "benchmark": "warm_start_cost",
        "machine": machine_info("agentr1-gym", "torch", "transformers", "peft"),
        "matmul_gflops": {} if args.smoke else matmul_gflops(args.threads),
        "threads": args.threads,
        "jobs_side_by_side": args.jobs,
        "episodes": args.episodes,
        "runs": {},
    }
    jobs = [(w, v) for w in args.worlds for v in args.variants]
    started = time.perf_counter()

    def command(job: tuple[str, str]) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "--worker", *job, "--episodes", str(args.episodes),
                "--threads", str(args.threads), "--model", args.model]  # fmt: skip

    def done(job: tuple[str, str], run: subprocess.CompletedProcess) -> None:
        world, variant = job
        key = f"{world}/{variant}"
        if run.returncode != 0:  # reported, never a silent zero; the other runs go on
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            result["runs"][key] = {"world": world, "variant": variant, "error": last}
            print(f"warm_start_cost: {key} failed: {last}", file=sys.stderr)
        else:
            result["runs"][key] = json.loads(run.stdout.strip().splitlines()[-1])
        n, elapsed = len(result["runs"]), time.perf_counter() - started
        print(f"warm_start_cost: {n}/{len(jobs)} {key} ({elapsed:.0f} s, about "
              f"{elapsed / n * (len(jobs) - n):.0f} s left)", file=sys.stderr)  # fmt: skip
        emit(result, args.json, quiet=True)  # partial results as the runs go

    run_pinned(jobs, command, slots, done)
    for world in args.worlds:  # the package's NLL against the labels= loss, same transcripts
        now, before = (result["runs"].get(f"{world}/{v}", {}) for v in VARIANTS)
        if "seconds" in now and "seconds" in before:
            now["speed_vs_labels_loss"] = round(before["seconds"] / now["seconds"], 2)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
