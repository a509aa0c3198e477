"""Scale-out on existing engines: the trainers in two processes on this CPU (`torchrun --nproc_per_node 2`, the
launcher `accelerate launch` wraps; gloo), tiny model. GRPO must end with the same LoRA weights on both processes (the gradients were all-reduced, so the
processes trained one model); estimators that need every episode on one process refuse with the reason."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "scripts" / "multiprocess_train.py"


def _launch(algo: str, out: Path) -> subprocess.CompletedProcess:
    launcher = shutil.which("torchrun")
    assert launcher, "torchrun comes with torch"
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [launcher, "--nproc_per_node", "2", "--master_port", str(port), str(SCRIPT), algo, str(out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def test_grpo_two_processes_end_with_the_same_lora_weights(tmp_path):
    run = _launch("grpo", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    states = [torch.load(tmp_path / f"lora-{rank}.pt") for rank in (0, 1)]
    assert all(s["world"] == 2 for s in states)
    a, b = (s["lora"] for s in states)
    assert a.keys() == b.keys() and a
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(a[k].abs().sum() > 0 for k in a if "lora_B" in k)  # and they trained (B starts at zero)


def test_single_process_estimators_refuse_multi_process_with_the_reason(tmp_path):
    run = _launch(
        "refusals", tmp_path
    )  # PPO, RLOO, REINFORCE++, GiGPO, per-turn RLOO in one pair of processes
    assert run.returncode == 0, run.stderr[-3000:]
    for algo in ("ppo", "grpo-rloo", "grpo-reinforce_pp", "grpo-gigpo", "grpo-turn_rloo"):
        reasons = [(tmp_path / f"refused-{algo}-{rank}.txt").read_text() for rank in (0, 1)]
        assert all("one process" in r and "grpo" in r.lower() for r in reasons), (algo, reasons)
