"""Table 3 of the Agent-R1 paper in miniature: Base Tool Call, Naive RAG, GRPO and PPO on the bundled QA dev sets.

    python benchmarks/table3.py --minutes 30 --json benchmarks/results/table3.json --plot benchmarks/results/table3.png
    python benchmarks/table3.py --smoke          # the whole pipeline in a few minutes on a tiny random model

Policy: SmolLM2-135M-Instruct + LoRA (q/v), as in ``benchmarks/learning.py``, whose steps this script reuses (in
``--workdir``, each skipped when its result file is already there, so an interrupted run resumes):

1. ``prepare`` for task ``hotpotqa``: a supervised warm start on oracle transcripts of the HotpotQA *train* split;
2. ``train grpo`` and ``train ppo`` from that adapter, ``--minutes`` of wall-clock time each, on the train split;
3. every row evaluated greedily on every question of the dev samples, once each: HotpotQA (300), 2Wiki (177) and
   MuSiQue (50; the paper's out-of-domain check), ``max_turns`` 4. Rows: **Base Tool Call** (the plain instruct
   model playing the env with its search tool), **Naive RAG** (the plain model, one retrieval with the question,
   one answer), **Warm start** (the supervised adapter that both RL runs start from; not a row of the paper's
   table, here so that what RL added can be told from what the warm start did), **GRPO** and **PPO** (the trained
   adapters, with tools).

Reports EM and F1 per dataset with n and a 95% interval (Wilson for EM, normal approximation for F1's mean).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import learning
from _common import emit, machine_info

import agentr1_gym

#: dataset -> env id (dev split)
DATASETS = {
    "hotpotqa": "AgentR1/HotpotQA-v0",
    "2wiki": "AgentR1/2WikiMultihopQA-v0",
    "musique": "AgentR1/Musique-v0",
}
#: row -> (adapter in the workdir or None for the plain model, evaluation baseline)
ROWS = {
    "Base Tool Call": (None, "tool"),
    "Naive RAG": (None, "naive-rag"),
    "Warm start": ("sft", "tool"),  # not in the paper's table: what RL started from, so its gain can be seen
    "GRPO": ("grpo", "tool"),
    "PPO": ("ppo", "tool"),
}
EVAL_KWARGS = {"split": "dev", "max_turns": 4}


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """Mean and its 95% normal-approximation interval (clipped to [0, 1])."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    half = z * (var / n) ** 0.5
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    rows = out["rows"]
    n = len(rows)
    em = sum(r.get("em", 0.0) for r in rows) / n
    f1, f1_lo, f1_hi = mean_interval([r.get("f1", 0.0) for r in rows])
    em_lo, em_hi = learning.wilson(em, n)
    return {
        "n": n,
        "em": em,
        "em_ci": [em_lo, em_hi],
        "f1": f1,
        "f1_ci": [f1_lo, f1_hi],
        "format_ok": out.get("format_ok"),
        "turns": out.get("turns"),
        "seconds": out.get("seconds"),
    }


def _policy(largs: argparse.Namespace, adapter: str | None) -> tuple[Any, Any]:
    model, tok = learning._policy(largs)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(learning._dir(largs) / adapter))
    return model, tok


def evaluate_row(
    largs: argparse.Namespace, name: str, datasets: list[str], limit: int | None, progress: bool
) -> dict[str, Any]:
    from agentr1_trl.model_eval import evaluate_model

    adapter, baseline = ROWS[name]
    model, tok = _policy(largs, adapter)
    engine = learning._engine(largs, model, tok)
    generator = learning._synced(engine, model)
    out: dict[str, Any] = {}
    for ds in datasets:
        env_id = DATASETS[ds]
        env = agentr1_gym.make(env_id, **EVAL_KWARGS)
        n = len(env.unwrapped.tasks)
        env.close()
        t = time.perf_counter()
        result = evaluate_model(
            env_id,
            model,
            tok,
            env_kwargs=EVAL_KWARGS,
            baseline=baseline,
            task_indices=range(n if limit is None else min(n, limit)),
            keep_rows=True,
            generator=generator,
            batch_size=64 if generator is not None else 16,
            max_new_tokens=largs.max_new_tokens,
            max_episode_tokens=2048,
            progress=progress,
        )
        result["seconds"] = round(time.perf_counter() - t, 1)
        out[ds] = summarize(result)
        print(f"[table3] {name} on {ds}: {out[ds]}", file=sys.stderr, flush=True)
    if engine is not None:
        engine.close()
    return out


def markdown(result: dict[str, Any]) -> str:
    datasets = result["datasets"]
    head = "| method | " + " | ".join(f"{d} EM | {d} F1" for d in datasets) + " |"
    lines = [head, "|---|" + "---|---|" * len(datasets)]
    for name, per in result["rows"].items():
        cells = []
        for d in datasets:
            r = per[d]
            cells.append(f"{r['em']:.3f} [{r['em_ci'][0]:.2f}, {r['em_ci'][1]:.2f}] (n={r['n']})")
            cells.append(f"{r['f1']:.3f} [{r['f1_ci'][0]:.2f}, {r['f1_ci'][1]:.2f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """EM and F1 per dataset, one bar per row, with the 95% intervals as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets, rows = result["datasets"], list(result["rows"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), squeeze=False)
    width = 0.8 / max(len(rows), 1)
    for ax, metric in zip(axes[0], ("em", "f1")):
        for i, name in enumerate(rows):
            per = result["rows"][name]
            ys = [per[d][metric] for d in datasets]
            lo = [per[d][metric] - per[d][f"{metric}_ci"][0] for d in datasets]
            hi = [per[d][f"{metric}_ci"][1] - per[d][metric] for d in datasets]
            xs = [j + (i - (len(rows) - 1) / 2) * width for j in range(len(datasets))]
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=name)
        ns = ", ".join(f"{d} n={result['rows'][rows[0]][d]['n']}" for d in datasets) if rows else ""
        ax.set_xticks(range(len(datasets)), datasets)
        ax.set_ylabel(f"{metric.upper()} (95% interval)")
        ax.set_title(f"{metric.upper()} on the dev samples ({ns})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="RL wall-clock budget per algorithm")
    parser.add_argument("--workdir", default="runs/table3")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--limit", type=int, default=None, help="questions per dev set (default: all)")
    parser.add_argument(
        "--sft-episodes",
        type=int,
        default=64,
        help="oracle transcripts for the warm start (32 x 2 epochs left the model copying the prompt's placeholder)",
    )
    parser.add_argument("--sft-epochs", type=int, default=3)
    parser.add_argument(
        "--train-eval-episodes",
        type=int,
        default=50,
        help="the learning steps' own held-out evaluations (HotpotQA dev seeds; the table's are separate)",
    )
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=1,
        help="RL episodes per forward/backward pass (HotpotQA episodes run to ~2,000 tokens: a step's 8 in one pass "
        "took over 16 GB of activations)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--backend", default="auto", choices=["auto", "hf", "vllm"])
    parser.add_argument("--smoke", action="store_true", help="tiny random model, tiny budgets")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="a PNG of EM and F1 per dataset and row")
    args = parser.parse_args()
    largs = learning.build_parser().parse_args(
        ["--task", "hotpotqa", "--workdir", args.workdir, "--minutes", str(args.minutes)]
        + ["--threads", str(args.threads), "--backend", args.backend, "--vg-episodes", "0"]
        + ["--eval-episodes", str(args.train_eval_episodes), "--micro-batch", str(args.micro_batch)]
        + ["--sft-episodes", str(args.sft_episodes), "--sft-epochs", str(args.sft_epochs)]
        + (["--smoke"] if args.smoke else [])
        + (["--progress"] if args.progress else [])
    )
    largs = learning.finish_args(largs)
    if args.smoke and args.limit is None:
        args.limit = 4
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    workdir = learning._dir(largs)
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "start.json").exists():
        learning.prepare(largs)
    for name in args.rows:
        adapter = ROWS[name][0]
        if adapter in ("grpo", "ppo") and not (workdir / f"{adapter}.json").exists():  # "sft": from prepare
            learning.train(adapter, largs)
    rows: dict[str, Any] = {}
    for name in args.rows:
        path = workdir / f"table3-{name.replace(' ', '_')}.json"
        if path.exists():
            rows[name] = json.loads(path.read_text())
            continue
        rows[name] = evaluate_row(largs, name, args.datasets, args.limit, args.progress)
        path.write_text(json.dumps(rows[name], indent=2))
    result = {
        "benchmark": "table3",
        "machine": machine_info("agentr1-gym", "torch", "trl", "peft"),
        "args": vars(args),
        "eval_env_kwargs": EVAL_KWARGS,
        "warm_start": {
            k: v for k, v in json.loads((workdir / "start.json").read_text()).items() if k != "settings"
        },
        "train": {
            algo: {
                k: v for k, v in json.loads((workdir / f"{algo}.json").read_text()).items() if k != "settings"
            }
            for algo in ("grpo", "ppo")
            if (workdir / f"{algo}.json").exists()
        },
        "datasets": args.datasets,
        "rows": rows,
    }
    emit(result, args.json)
    print(markdown(result), file=sys.stderr)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
