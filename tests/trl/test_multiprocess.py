"""Every trainer in two processes on this CPU (`torchrun --nproc_per_node 2`, the launcher `accelerate launch`
wraps; gloo), tiny model: GRPO with each estimator (grpo, rloo, reinforce_pp, gigpo, turn_rloo) and PPO at token and
step level. Two processes with half the batch each must train the model one process trains on the whole batch (the
same losses and weights, LoRA and value head), and end with the same weights on both; the settings that read one
process's episodes alone refuse with the reason."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import SCRIPTS

pytest.importorskip("trl")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

SCRIPT = SCRIPTS / "multiprocess_train.py"


ALGOS = ("grpo", "grpo-rloo", "grpo-reinforce_pp", "grpo-gigpo", "grpo-turn_rloo", "ppo", "ppo-step")
ENV = {"TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"}


def _launch(mode: str, out: Path) -> subprocess.CompletedProcess:
    launcher = shutil.which("torchrun")
    assert launcher, "torchrun comes with torch"
    env = {**os.environ, **ENV}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [launcher, "--nproc_per_node", "2", "--master_port", str(port), str(SCRIPT), mode, str(out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_trainer_in_two_processes_trains_what_one_process_trains(tmp_path):
    single = subprocess.run(
        [sys.executable, str(SCRIPT), "single", str(tmp_path)],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    multi = _launch("multi", tmp_path)
    assert multi.returncode == 0, multi.stderr[-3000:]
    for algo in ALGOS:
        one = torch.load(tmp_path / f"single-{algo}-0.pt")
        ranks = [torch.load(tmp_path / f"multi-{algo}-{rank}.pt") for rank in (0, 1)]
        assert one["world"] == 1 and all(r["world"] == 2 for r in ranks)
        a, b = (r["weights"] for r in ranks)
        assert a.keys() == b.keys() == one["weights"].keys() and a, algo
        assert all(torch.equal(a[k], b[k]) for k in a), f"{algo}: the two processes ended apart"
        assert any(a[k].abs().sum() > 0 for k in a if "lora_B" in k), f"{algo}: nothing trained"
        for k, w in one["weights"].items():
            assert torch.allclose(a[k], w, rtol=1e-4, atol=1e-6), (algo, k, (a[k] - w).abs().max())
        assert len(one["losses"]) == 2
        for x, y in zip(one["losses"], ranks[0]["losses"]):
            assert abs(x - y) <= 1e-5 + 1e-4 * abs(x), (algo, one["losses"], ranks[0]["losses"])
    assert any(k.startswith("value_head") for k in one["weights"])  # PPO's critic is compared too


@pytest.mark.slow
def test_settings_that_read_one_process_alone_refuse_with_the_reason(tmp_path):
    run = _launch("refusals", tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    for name, word in (
        ("dynamic", "dynamic_sampling"),
        ("selective", "skip_flat_tasks"),
        ("curriculum", "min_success"),
    ):
        reasons = [(tmp_path / f"refused-{name}-{rank}.txt").read_text() for rank in (0, 1)]
        assert all(word in r and "one process" in r for r in reasons), (name, reasons)
