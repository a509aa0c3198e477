"""Training survives kills: checkpoints by default, complete-or-ignored, and ``agentr1 train --resume``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("trl")

from agentr1_trl.run_dir import COMPLETE_MARKER, is_complete, latest_complete_checkpoint, resolve_resume

from agentr1_gym.cli import main
from agentr1_gym.errors import ConfigError

TINY_FLAGS = [
    "--warm-start", "0", "--lora-r", "2", "--eval-episodes", "0",
    "--set", "per_device_train_batch_size=2", "--set", "num_generations=2", "--set", "use_cpu=true",
    "--set", "max_new_tokens_per_turn=8",
]  # fmt: skip


def _steps(run):
    return sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))


@pytest.mark.slow
def test_a_killed_run_resumes_losing_at_most_one_step(tmp_path, tiny_dir, capsys):
    run = tmp_path / "run"
    argv = ["train", "--model", tiny_dir, *TINY_FLAGS, "--max-steps", "8", "--output-dir", str(run)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentr1_gym.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 240
        while (
            latest_complete_checkpoint(run) is None or latest_complete_checkpoint(run).name != "checkpoint-3"
        ):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint-3 in time"
            time.sleep(0.02)
        assert proc.poll() is None  # killed mid-run (somewhere in step 4 or its save)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done_before_kill = latest_complete_checkpoint(run)
    assert done_before_kill is not None and int(done_before_kill.name.split("-")[1]) >= 3
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"resuming from {done_before_kill}" in out  # nothing after the last complete step was lost
    state = json.loads((run / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows if "reward" in r) == list(range(1, 9))
    assert (run / "adapter" / "adapter_config.json").is_file()
    assert (
        all(is_complete(run / f"checkpoint-{s}") for s in _steps(run)) and len(_steps(run)) == 2
    )  # last K=2


@pytest.mark.slow
def test_partial_checkpoint_never_breaks_resume(tmp_path, tiny_dir, capsys):
    run = tmp_path / "run"
    assert (
        main(["train", "--model", tiny_dir, *TINY_FLAGS, "--max-steps", "2", "--output-dir", str(run)]) == 0
    )
    # what a SIGKILL while checkpoint-3 was being written leaves: some files, no completion marker
    partial = run / "checkpoint-3"
    shutil.copytree(run / "checkpoint-2", partial)
    (partial / COMPLETE_MARKER).unlink()
    for name in ("optimizer.pt", "trainer_state.json"):
        if (partial / name).exists():
            (partial / name).write_bytes(b"\x00" * 10)  # torn write
    with pytest.raises(ConfigError, match=r"incomplete.*latest complete one is .*checkpoint-2"):
        resolve_resume(str(partial), run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 0
    assert f"resuming from {run / 'checkpoint-2'}" in capsys.readouterr().out
    assert is_complete(run / "checkpoint-3") and list(run.glob(".partial-checkpoint-3-*"))
    state = json.loads((run / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


@pytest.mark.slow
def test_every_ppo_checkpoint_carries_the_value_head(tmp_path, tiny_dir):
    run = tmp_path / "ppo"
    argv = [
        "train",
        "--algo",
        "ppo",
        "--model",
        tiny_dir,
        *TINY_FLAGS,
        "--max-steps",
        "3",
        "--output-dir",
        str(run),
    ]
    assert main([*argv, "--set", "save_total_limit=5"]) == 0
    steps = _steps(run)
    assert steps == [1, 2, 3]
    for s in steps:
        ckpt = run / f"checkpoint-{s}"
        marker = json.loads((ckpt / COMPLETE_MARKER).read_text())
        assert (ckpt / "value_head.pt").is_file() and "value_head.pt" in marker["files"]


def test_resume_needs_a_run(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert os.path.exists(tmp_path) and resolve_resume(None, tmp_path) is None
