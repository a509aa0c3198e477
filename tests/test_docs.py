"""The README and the docs site say what the code and the result files say: the generated results pages and the
README's results table match benchmarks/results/*.json, the README stays short and starts with its two set-up
commands, and every relative link resolves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
    assert len(commands) == 2 and commands[1] == "python -m pytest"
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
