"""The README and the docs site say what the code and the result files say: the generated results pages and the
README's results table match benchmarks/results/*.json, the README stays short and starts with its two set-up
commands, and every relative link resolves."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from _paths import REPO

ROOT = REPO
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_results_pages_and_the_readme_table_are_what_the_json_says():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_changed_number_is_caught(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report
    finally:
        sys.path.pop(0)
    files = report.generate()
    page = ROOT / "docs" / "results" / "reasoning_gym_learning.md"
    assert files[page] == page.read_text(encoding="utf-8")
    data = report._load("reasoning_gym_learning")
    task = next(iter(data["tasks"].values()))
    run = next(iter(task["runs"].values()))
    run["after"]["success"] += 0.1  # a number typed differently from the JSON
    monkeypatch.setattr(report, "_load", lambda name: data if name == "reasoning_gym_learning" else report.json.loads(
        (report.RESULTS / f"{name}.json").read_text()))  # fmt: skip
    changed = report.generate()
    assert changed[page] != files[page] and changed[report.README] != files[report.README]


def test_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first = re.match(r"```bash\n(.*?)\n```", text, re.S)
    assert first, "the README starts with a bash block"
    commands = first.group(1).splitlines()
    assert len(commands) == 2 and commands[1] == "python -m pytest -n auto"
    # CI calls the README's test command as written
    assert commands[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "uninstall" not in commands[0] and commands[0].endswith("agentr1 train")
    assert commands[0] in (ROOT / "docs" / "install.md").read_text(encoding="utf-8")


def test_relative_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_step_credit_arms_are_compared_with_grpo_of_their_own_training_seed(monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report
    finally:
        sys.path.pop(0)

    def run(success: float, skipped: list[float]) -> dict:
        curve = [{"step": i + 1, "reward": 0.0, "signal/skipped_rows": s} for i, s in enumerate(skipped)]
        return {
            "after": {"success": success, "episodes": 200},
            "train": {"steps": len(skipped), "wall_s": 1900.0, "curve": curve},
            "settings": {"minutes": 30.0},
        }

    data = {"tasks": {"textworld": {
        "start": {"env": "AgentR1/TextWorld-CoinCollector-v0", "after_sft": {"success": 0.1, "episodes": 200}},
        "runs": {"grpo": run(0.2, [0.0, 1.0]), "grpo-gigpo": run(0.4, [0.5, 0.5]),
                 "grpo-seed1": run(0.3, [0.0]), "grpo-gigpo-seed1": run(0.3, [1.0])},
    }}}  # fmt: skip
    table = report._step_credit(data).split("#### textworld")[1]
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in table.splitlines()
        if line.startswith("| grpo")
    }
    assert (
        rows["grpo-gigpo"][2] == "+0.200" and rows["grpo-gigpo-seed1"][2] == "+0.000"
    )  # each against its own seed's GRPO
    assert (
        rows["grpo"][6] == "1 (50%)" and rows["grpo-gigpo"][6] == "2 (50%)"
    )  # updates: steps not wholly skipped
    assert report._seed_of("grpo-gigpo-seed12") == "-seed12" and report._seed_of("grpo-gigpo") == ""
    monkeypatch.setattr(report, "_load", lambda name: data if name == "step_credit" else report.json.loads(
        (report.RESULTS / f"{name}.json").read_text()))  # fmt: skip
    row = next(r for r in report.headline_rows() if "step-level credit" in r[0])
    assert "GRPO 0.200, 0.300, grpo-gigpo 0.400, 0.300" in row[1] and "training seeds 0, 1" in row[1]
    assert row[2] == "4 runs, 30 min of training each"  # the budget, not a last step's overrun


def test_main_job_variants_run_seed_by_seed_and_compare_on_their_page(monkeypatch, tmp_path):
    """``main_job.py --variant``: each seed runs every variant in turn (a drift of the machine falls on all alike),
    each variant's own arguments after the shared ones, and the page compares them per seed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import main_job
        import report
    finally:
        sys.path.pop(0)
    calls = []

    def fake_run(out, extra):
        calls.append((out.relative_to(tmp_path).as_posix(), extra))
        top = "--set" in extra and "train_top_layers=10" in extra
        after = 0.5 if top else 0.6
        return {
            "command": "agentr1 train " + " ".join(extra), "wall_clock_s": 600.0, "peak_rss_gb": 6.0,
            "run_config": {"settings": {"max_steps": 30, "per_device_train_batch_size": 4,
                                        "gradient_accumulation_steps": 2, "num_generations": 4,
                                        "train_top_layers": 10 if top else 0}},
            "before_rl": {"success": 0.12, "episodes": 100}, "after_rl": {"success": after, "episodes": 100},
            "success_ratio": after / 0.12, "steps": 30, "train_runtime_s": 240.0 if top else 320.0,
            "per_step_mean": {"step_time": 8.0 if top else 10.6, "time/rollout_s": 5.0,
                              "time/update_s": 2.8 if top else 5.4,
                              "signal/outcome_varied_groups": 0.5 if top else 0.25,
                              "signal/skipped_flat_groups": 0.2 if top else None},
        }  # fmt: skip

    monkeypatch.setattr(main_job, "run_one", fake_run)
    out = tmp_path / "r.json"
    argv = ["main_job.py", "--seeds", "42", "1", "--output-dir", str(tmp_path), "--json", str(out),
            "--variant", "all=", "--variant", "top10=--set train_top_layers=10", "--max-steps", "30"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    main_job.main()
    assert calls == [
        ("all/seed-42", ["--max-steps", "30"]),
        ("top10/seed-42", ["--max-steps", "30", "--set", "train_top_layers=10"]),
        ("all/seed-1", ["--max-steps", "30", "--set", "seed=1"]),
        ("top10/seed-1", ["--max-steps", "30", "--set", "train_top_layers=10", "--set", "seed=1"]),
    ]
    data = json.loads(out.read_text())
    assert data["variants"] == {"all": "", "top10": "--set train_top_layers=10"}
    assert [r["seed"] for r in data["comparison"]["top10"]] == [42, 1]
    assert data["summary"]["all"]["success_after"] == [0.6, 0.6]
    text = report._main_job_variants(data)
    assert "| top10 | 1 | 0.120 | 0.50 [0.40, 0.60] | 4.000 | 8.000 | 5.000 | 2.800 | 0.095 |" in text
    # the groups that can teach: 30 steps of 2 groups (8 episodes in groups of 4), the share whose outcome varied
    assert (
        data["comparison"]["top10"][0]["groups"] == 60
        and data["comparison"]["top10"][0]["varied_groups"] == 30
    )
    assert "| top10 | 42 | 60 | 30.000 | 0.200 | 8.000 |" in text  # 240 s over 30 groups
    # the README row: success per seed by the layers RL trains, then the update's cost and the learning per minute
    row = report._train_top_layers_row(data)
    assert "before RL, after: every layer 0.60, 0.60; top 10 of 30 layers 0.50, 0.50 (seeds 42, 1)" in row[1]
    assert "every layer 5.4 s, +0.090; top 10 of 30 layers 2.8 s, +0.095" in row[2]
    assert "| all | 1 | 60 | 15.000 | 0.000 | 21.300 |" in text  # 320 s over 15
    with pytest.raises(SystemExit, match="expected NAME=ARGS"):
        main_job.parse_variants(["all=", "all=--set bf16=true"])
    # the README row of a selective-rollouts comparison reads the same comparison
    data["variants"] = {"all": "--set num_tasks=16", "top10": "--set num_tasks=16 --set skip_flat_tasks=0.75"}
    label, result, cost = report._skip_flat_row(data)
    assert label.endswith("(docs/results/main_job_skip_flat.md)")
    assert result == (
        "held-out success 0.12, 0.12 before RL, after: `--set num_tasks=16`: 0.60, 0.60, 15.0 of 60 groups with a "
        "varied outcome; `--set num_tasks=16 --set skip_flat_tasks=0.75`: 0.50, 0.50, 30.0 of 60 groups with a "
        "varied outcome (2 seeds)"
    )
    assert cost.startswith("RL seconds per group with a varied outcome: 21.3 s against 8.0 s (")
    # a run in which no group varied: its seconds are left out of the mean
    data["comparison"]["all"][0].update(varied_groups=0.0, s_per_varied_group=None)
    label, result, cost = report._skip_flat_row(data)
    assert "7.5 of 60 groups" in result and "outcome: 21.3 s against" in cost
