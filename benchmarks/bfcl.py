"""BFCL multi-turn: the prompted model per category beside the leaderboard, and what RL on the base category does.

    python benchmarks/bfcl.py eval --json /tmp/bfcl_eval.json          # agentr1 eval, each category's test part
    # the warm start on a GPU (its evaluations with HF generate there); the RL runs on a CPU, one core each:
    python benchmarks/learning.py prepare --task bfcl --workdir runs/learning_bfcl_gpu --device cuda --backend hf \\
        --bf16 --sft-episodes 160 --sft-epochs 3 --max-new-tokens 224 --eval-batch 40 --save-episodes
    python benchmarks/learning.py train grpo --task bfcl --workdir runs/learning_bfcl_gpu --bf16 --threads 1 \\
        --micro-batch 2 --max-new-tokens 224 --minutes 30 --no-eval     # beside it, on the other core:
    python benchmarks/learning.py train grpo-gigpo ...same flags...
    python benchmarks/learning.py evaluate grpo --task bfcl --workdir runs/learning_bfcl_gpu --device cuda \\
        --backend hf --max-new-tokens 224 --eval-batch 40 --save-episodes      # and grpo-gigpo
    python benchmarks/bfcl.py report --eval /tmp/bfcl_eval.json --workdir runs/learning_bfcl_gpu \\
        --json benchmarks/results/bfcl.json

**Per category.** ``agentr1 eval AgentR1/BFCL-MultiTurn-v0 --model smollm2 --all-tasks`` on each category's
held-out part (``split=test``: 40 of its 200 tasks, the same fixed split the learning runs hold out), greedy, the
CLI's defaults otherwise. The metric is BFCL's: the share of tasks whose verdict is valid (every checked user turn
passes). The oracle runs the same tasks through the same command as a check on the scoring path (it must reach
1.0). Beside them, the leaderboard's published multi-turn accuracies of its smallest models, copied as numbers
from BFCL's own leaderboard table (``data_multi_turn.csv`` in ShishirPatil/gorilla at commit ``1045ee2``, the
BFCL v3 release). Those are on all 200 tasks of each category and with each model's own prompt or function-calling
handler; ours is on 40 held-out tasks and our Hermes prompt, so the comparison says "the same order of magnitude",
not a ranking.

**Learning.** SmolLM2-135M-Instruct + LoRA on the base category's train part (160 tasks): the prompted model, an
oracle warm start (every train task's transcript, 3 epochs, bf16 autocast), then GRPO and GiGPO for 30 minutes
each from that warm start, side by side on one core each, all evaluated on the 40 test tasks, greedy, each once,
with 95% Wilson intervals; 16 turns and 224 new tokens per turn (the longest oracle turn is 223). The warm start and
the evaluations ran on a GPU (HF generate; the result files record the device of each), the RL on the CPU: one
evaluation of a policy that calls until the turn limit takes 28 minutes on 2 cores and 2.3-4.1 minutes on an H200. BFCL
is an evaluation set: a model trained on its train part is not a leaderboard entry.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, machine_info, wilson

ENV_ID = "AgentR1/BFCL-MultiTurn-v0"
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
#: BFCL's leaderboard (v3 release), multi-turn accuracy in % per category, for its models of 3B parameters or
#: fewer: (model, billions of parameters, overall, base, miss_func, miss_param, long_context)
LEADERBOARD_SOURCE = "ShishirPatil/gorilla data_multi_turn.csv @ 1045ee2152d6bbd4b71e54e0da37ee323fa7e791"
LEADERBOARD_SMALL = (
    ("Hammer2.1-3b (FC)", 3, 17.38, 27.50, 17.50, 14.50, 10.00),
    ("Hammer2.1-1.5b (FC)", 1.5, 10.50, 14.50, 12.50, 9.00, 6.00),
    ("Llama-3.2-3B-Instruct (Prompt)", 3, 5.25, 8.50, 2.50, 4.50, 5.50),
    ("Qwen2.5-3B-Instruct (Prompt)", 3, 3.38, 5.50, 3.50, 2.00, 2.50),
    ("Hammer2.1-0.5b (FC)", 0.5, 2.25, 4.00, 0.50, 3.00, 1.50),
    ("Qwen2.5-1.5B-Instruct (Prompt)", 1.5, 1.12, 1.50, 2.50, 0.50, 0.00),
    ("xLAM-1b-fc-r (FC)", 1, 0.12, 0.50, 0.00, 0.00, 0.00),
    ("Gemma-2-2b-it (Prompt)", 2, 0.00, 0.00, 0.00, 0.00, 0.00),
    ("Llama-3.2-1B-Instruct (Prompt)", 1, 0.00, 0.00, 0.00, 0.00, 0.00),
    ("Qwen2.5-0.5B-Instruct (Prompt)", 0.5, 0.00, 0.00, 0.00, 0.00, 0.00),
)


def _cli_eval(category: str, extra: list[str], progress: bool) -> dict[str, Any]:
    """One ``agentr1 eval`` of a category's test part, as a user runs it; its ``--json`` result and wall time."""
    from agentr1_gym.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "eval.json"
        args = ["eval", ENV_ID, "--all-tasks", "--env-arg", f"category={category}", "--env-arg", "split=test",
                *extra]  # fmt: skip
        t = time.perf_counter()
        if cli([*args, "--json", str(out), *([] if progress else ["--no-progress"])]) != 0:
            raise SystemExit(f"agentr1 {' '.join(args)} failed")
        result = json.loads(out.read_text())
    result["seconds"] = round(time.perf_counter() - t, 1)
    result["command"] = "agentr1 " + " ".join(args)
    return result


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"model": args.model, "categories": {}}
    for category in CATEGORIES:
        oracle = _cli_eval(category, ["--policy", "oracle"], args.progress)
        model = _cli_eval(category, ["--model", args.model], args.progress)
        out["categories"][category] = {"oracle": oracle, "model": model}
        print(f"[bfcl] {category}: oracle {oracle['success']:.3f}, {args.model} {model['success']:.3f} "
              f"({model['episodes']} tasks, {model['seconds']} s)", file=sys.stderr, flush=True)  # fmt: skip
    emit(out, args.json)
    return out


def report(args: argparse.Namespace) -> dict[str, Any]:
    learning = {}
    start = Path(args.workdir) / "bfcl" / "start.json"
    if start.exists():
        learning = {"start": json.loads(start.read_text()), "runs": {}}
        order = {"grpo": 0, "grpo-gigpo": 1}  # GRPO, then GiGPO, then any other run by name
        runs = (p for p in (Path(args.workdir) / "bfcl").glob("*.json") if p.stem != "start")
        for path in sorted(runs, key=lambda p: (order.get(p.stem, 2), p.stem)):
            learning["runs"][path.stem] = json.loads(path.read_text())
    per_category = json.loads(Path(args.eval).read_text()) if args.eval else None
    if per_category:
        for entry in per_category["categories"].values():
            m = entry["model"]
            m["interval"] = list(wilson(m["success"], m["episodes"]))
    result = {
        "benchmark": "bfcl",
        "machine": machine_info("agentr1-gym", "torch", "trl", "peft", "bfcl-eval"),
        "per_category": per_category,
        "leaderboard": {
            "source": LEADERBOARD_SOURCE,
            "columns": ["model", "params_b", "overall", *CATEGORIES],
            "rows": [list(r) for r in LEADERBOARD_SMALL],
        },
        # the learning tables' layout (benchmarks/report.py renders "tasks" the way it renders learning.json)
        "tasks": {"bfcl": learning} if learning else {},
    }
    if args.note:
        result["note"] = args.note
    emit(result, args.json)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cmd", choices=["eval", "report"])
    parser.add_argument("--model", default="smollm2", help="eval: the model (agentr1 eval --model)")
    parser.add_argument("--eval", default=None, help="report: the eval's JSON")
    parser.add_argument("--workdir", default="runs/learning_bfcl_gpu", help="report: learning.py's work dir")
    parser.add_argument("--note", default=None, help="report: what a person should know beside the numbers")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    evaluate(args) if args.cmd == "eval" else report(args)


if __name__ == "__main__":
    main()
