"""The README and the docs site say what the code and the result files say: the generated results pages and the
README's results table match benchmarks/results/*.json, the README stays short and starts with its two set-up
commands, and every relative link resolves."""

from __future__ import annotations

import re
import subprocess
import sys

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
