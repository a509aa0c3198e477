"""Does an agent loop? The repeat rate of a learning run's held-out episodes, for its warm start and each RL run.

    python benchmarks/repeats.py --workdir runs/ctx --json benchmarks/results/context_repeats.json
    python benchmarks/repeats.py --smoke       # a tiny random model in a throwaway work dir

A policy that sees no history (``context="state"``) and decodes greedily acts the same way whenever the state text
is the same: on a page or in a room its action does not change, it repeats that action until the turns run out.
The env's ``repeat_rate`` metric (:func:`agentr1_gym.env.repeat_rate`: the share of an episode's turns that repeat
the previous turn word for word) shows it. This script reads it from the held-out episodes of a
``benchmarks/learning.py`` work dir (``WORKDIR/TASK[@CONTEXT]/LABEL.episodes.jsonl``, which ``--save-episodes``
writes). For a warm start or a run that saved no episodes it first evaluates the saved adapter (``sft`` or the
run's) with learning.py's own evaluation, on the same held-out seeds and settings (read from the run's
``start.json``), and saves them; the run's result files are not touched. Per label it reports the episodes, their
success, the mean repeat rate and the share of episodes that end stuck (their last three turns the same action).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, machine_info

#: an episode ends stuck when its last this-many turns are one action
STUCK_TAIL = 3


def summarize(path: Path) -> dict[str, Any]:
    """One episodes file -> its episodes, success, mean repeat rate and the share that ends stuck."""
    from agentr1_gym.env import repeat_rate

    rates, stuck, success = [], 0, 0.0
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            episode = json.loads(line)
            actions = [str(t.get("action") or "") for t in episode.get("turns", [])]
            rates.append(repeat_rate([{"role": "assistant", "content": a} for a in actions]))
            tail = [a.strip() for a in actions[-STUCK_TAIL:]]
            stuck += len(tail) == STUCK_TAIL and len(set(tail)) == 1
            success += float(episode.get("success") or 0.0)
    if not rates:
        raise SystemExit(f"{path}: no episodes in it")
    n = len(rates)
    return {
        "episodes": n,
        "success": round(success / n, 4),
        "repeat_rate": round(sum(rates) / n, 4),
        "stuck": round(stuck / n, 4),
    }


def _learning_args(run_dir: Path, workdir: Path, smoke: bool) -> argparse.Namespace:
    """learning.py's arguments for the runs of ``run_dir``, as its ``start.json`` recorded them."""
    import learning

    recorded = json.loads((run_dir / "start.json").read_text())["settings"]
    args = learning.build_parser().parse_args([])
    for key, value in recorded.items():
        if hasattr(args, key) and key not in ("train_env_kwargs", "eval_env_kwargs", "reward"):
            setattr(args, key, value)
    args.workdir = str(workdir)
    args.save_episodes, args.progress = True, False
    args.smoke = smoke or args.smoke
    return learning.finish_args(args)


def _label(adapter: Path) -> str:
    """The episodes file's label of an adapter dir: learning.py's (``after_sft`` for the warm start ``sft``)."""
    return "after_sft" if adapter.name == "sft" else adapter.name


def evaluate_missing(run_dir: Path, workdir: Path, smoke: bool, only: set[str] | None = None) -> list[str]:
    """Evaluate each adapter of ``run_dir`` (the warm start ``sft`` and every run's; those ``only`` names as
    ``DIR/LABEL``, when given) that has no episodes file yet; returns the labels evaluated."""
    import learning

    adapters = [d for d in sorted(run_dir.iterdir()) if d.is_dir() and (d / "adapter_config.json").exists()]
    todo = [
        d
        for d in adapters
        if not (run_dir / f"{_label(d)}.episodes.jsonl").exists()
        and (only is None or f"{run_dir.name}/{_label(d)}" in only)
    ]
    if not todo:
        return []
    args = _learning_args(run_dir, workdir, smoke)
    done: list[str] = []
    engine = None  # one vLLM engine per run dir, synced to each adapter's merged weights
    for d in todo:
        label = _label(d)
        base, tok = learning._policy(args)  # first: its loader hides the companion builds peft would trip on
        from peft import PeftModel

        policy = PeftModel.from_pretrained(base, str(d))
        policy.eval()
        t = time.perf_counter()
        if engine is None:
            engine = learning._engine(args, policy, tok)
        learning._evaluate(args, policy, tok, label, generator=learning._synced(engine, policy))
        print(f"{run_dir.name}/{label}: evaluated in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        done.append(label)
    return done


def _recorded(run_dir: Path, label: str) -> tuple[float | None, str]:
    """The success the learning run's result file records for the same evaluation (an evaluation here should
    match it: same adapter, seeds and greedy decoding), and who saved the episodes: ``"the run"`` where the run
    was made with ``--save-episodes``, else ``"repeats.py"``."""
    if label in ("plain", "after_sft"):
        record = json.loads((run_dir / "start.json").read_text())
        result = record.get(label) or {}
    else:
        path = run_dir / f"{label}.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        result = record.get("after") or {}
    by_run = bool((record.get("settings") or {}).get("save_episodes"))
    return result.get("success"), "the run" if by_run else "repeats.py"


def measure(
    workdir: Path, evaluate: bool, smoke: bool = False, only: set[str] | None = None
) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    for run_dir in sorted(d for d in workdir.iterdir() if d.is_dir() and (d / "start.json").exists()):
        evaluated = evaluate_missing(run_dir, workdir, smoke, only) if evaluate else []
        for path in sorted(run_dir.glob("*.episodes.jsonl")):
            label = path.name.removesuffix(".episodes.jsonl")
            recorded, saved_by = _recorded(run_dir, label)
            runs.setdefault(run_dir.name, {})[label] = {
                **summarize(path),
                "recorded_success": recorded,
                "saved_by": saved_by,
                "evaluated_now": label in evaluated,
            }
    if not runs:
        raise SystemExit(
            f"{workdir}: no learning.py run dir with saved episodes (run it with --save-episodes)"
        )
    return {
        "benchmark": "repeats",
        "machine": machine_info("agentr1-gym", "torch", "peft"),
        "workdir": str(workdir),
        "stuck_tail": STUCK_TAIL,
        "runs": runs,
    }


def _smoke(workdir: Path) -> dict[str, Any]:
    """The whole path on a tiny random model: a warm start, no RL run, its episodes evaluated here."""
    import subprocess

    here = Path(__file__).with_name("learning.py")
    common = [
        "--smoke",
        "--task",
        "webshop",
        "--context",
        "state",
        "--max-turns",
        "3",
        "--workdir",
        str(workdir),
    ]
    subprocess.run([sys.executable, str(here), "prepare", *common], check=True, capture_output=True)
    return measure(workdir, evaluate=True, smoke=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="runs/ctx", help="a benchmarks/learning.py work dir")
    parser.add_argument(
        "--no-evaluate", action="store_true", help="only read the episodes files there are (evaluate nothing)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="DIR/LABEL",
        help="evaluate only these adapters (textworld@state/after_sft, textworld@state/grpo-gigpo); every "
        "episodes file is still read",
    )
    parser.add_argument("--smoke", action="store_true", help="a tiny random model in a throwaway work dir")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.smoke:
        tmp = Path(tempfile.mkdtemp(prefix="repeats-"))
        try:
            result = _smoke(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        workdir = Path(args.workdir)
        if not workdir.is_dir():
            raise SystemExit(f"{workdir}: no such work dir (make one with benchmarks/learning.py)")
        result = measure(workdir, evaluate=not args.no_evaluate, only=set(args.only) if args.only else None)
    emit(result, args.json)


if __name__ == "__main__":
    main()
