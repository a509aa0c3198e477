"""Every script in examples/ runs end to end on the tiny model (2 optimizer steps), as a user would start it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _paths import REPO

pytest.importorskip("trl")

EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script, tiny_dir, tmp_path):
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
    cmd = [sys.executable, str(script), "--model", tiny_dir, "--max-steps", "2", "--max-new-tokens", "8",
           "--output-dir", str(tmp_path / "run"), "--backend", "hf"]  # fmt: skip
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "final " in run.stdout
