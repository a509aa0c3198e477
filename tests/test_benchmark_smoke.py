"""The learning benchmark's whole pipeline on a tiny model (slow: run with `pytest -m slow`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learning_benchmark_smoke(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "learning.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "learning.py"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--smoke",
            "--algos",
            "grpo",
            "ppo",
            "grpo-gigpo",
            "ppo-step",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "runs"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    result = json.loads(out.read_text())
    task = result["tasks"]["synthetic"]
    assert task["start"]["plain"]["episodes"] == 4 and len(task["start"]["sft"]["losses"]) == 2
    for algo in ("grpo", "ppo", "grpo-gigpo", "ppo-step"):
        run = task["runs"][algo]
        assert run["train"]["steps"] >= 1 and "success" in run["after"]
    assert task["runs"]["ppo"]["value_guided"]["value_guided"] == 2
    assert (tmp_path / "runs" / "synthetic" / "ppo" / "value_head.pt").exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_table3_benchmark_smoke(tmp_path):
    """Table 3 in miniature on the tiny model: warm start and both RL runs on HotpotQA train, then every row on the
    first dev questions of the three datasets, with n and intervals."""
    pytest.importorskip("trl")
    out, png = tmp_path / "table3.json", tmp_path / "table3.png"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "table3.py"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--smoke",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--workdir",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    result = json.loads(out.read_text())
    assert list(result["rows"]) == ["Base Tool Call", "Naive RAG", "Warm start", "GRPO", "PPO"]
    for per in result["rows"].values():
        assert set(per) == {"hotpotqa", "2wiki", "musique"}
        for r in per.values():
            assert r["n"] == 4 and r["em_ci"][0] <= r["em"] <= r["em_ci"][1] and 0.0 <= r["f1"] <= 1.0
    assert set(result["train"]) == {"grpo", "ppo"}
    assert png.stat().st_size > 10_000
