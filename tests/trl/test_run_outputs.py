"""What `agentr1 train` tells a person: the hardware and time left, its own model card, the closing list of outputs
and next commands (the eval command among them reproduces the held-out figure with the run's settings), a reward
curve, and a refusal to start over an earlier run unless told to."""

from __future__ import annotations

import json
import shlex

import pytest

pytest.importorskip("trl")

from test_trl_durable import TINY_FLAGS  # the tiny runs: no warm start, LoRA r=2

from agentr1_gym.cli import main

FLAGS = [*TINY_FLAGS, "--eval-episodes", "2", "--backend", "hf", "--max-steps", "2"]


@pytest.mark.slow
def test_a_run_says_what_it_runs_on_lists_its_outputs_and_writes_its_own_card(tmp_path, tiny_dir, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model",
                tiny_dir,
                *FLAGS,
                "--output-dir",
                str(run),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "r.json").read_text())
    assert (
        summary["steps"] == 2
        and summary["held_out_after_rl"]["episodes"] == 2
        and "adapter" in summary["outputs"]
    )
    assert "training on " in out and ("native bf16" in out or "CUDA" in out or "GPU" in out)
    assert "step 1/2 after" in out and "to go" in out
    # one line per step with its training return, and no log dict of transformers' on stdout
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all(" · return " in line and " · success " in line for line in steps)
    assert not any(line.lstrip().startswith("{") for line in out.splitlines())
    lines = out.splitlines()
    start = lines.index(f"done. In {run}:")
    listed = {line.split()[0] for line in lines[start + 1 : lines.index("next:")]}
    assert listed == {"adapter", "README.md", "run_config.json", "metrics.jsonl", "reward_curve.png",
                      "episodes.jsonl", "eval_before_rl.json", "eval_after_rl.json"}  # fmt: skip
    nexts = lines[lines.index("next:") + 1 :]
    assert nexts[0].strip() == f"agentr1 view {run}"
    card = (run / "README.md").read_text()
    assert card.startswith("# GRPO on AgentR1/SyntheticMultihop-v0") and f"`{tiny_dir}`" in card
    assert (
        "before RL" in card
        and "after RL" in card
        and "load_policy" in card
        and "huggingface.co/None" not in card
    )
    # the printed eval command reproduces the held-out figure after RL, with the run's own settings
    command = shlex.split(nexts[1].strip())
    assert command[:2] == ["agentr1", "eval"]
    assert main([*command[1:], "--backend", "hf", "--no-progress"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    after = json.loads((run / "eval_after_rl.json").read_text())
    assert "using the run's settings" in captured.err
    assert result["success"] == after["success"] and result["return"] == pytest.approx(after["return"])
    # a second run into the same directory is refused (one line), unless told to start over
    assert main(["train", "--model", tiny_dir, *FLAGS, "--output-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds an earlier run" in err[0] and "--overwrite" in err[0]
    assert main(["train", "--model", tiny_dir, *FLAGS, "--output-dir", str(run), "--overwrite"]) == 0
    assert f"--overwrite: removed the earlier run in {run}" in capsys.readouterr().out
    assert main(["train", "--resume", str(run), "--overwrite"]) == 2
    assert "give one" in capsys.readouterr().err


def test_the_reward_curve_smooths_and_labels(tmp_path):
    from agentr1_trl.run_report import _moving_average, plot_reward_curve

    assert _moving_average([1.0, 3.0, float("nan"), 5.0], 2) == [1.0, 2.0, 3.0, 5.0]
    history = [{"step": i, "reward": float(i % 3), "env/success": 0.1 * i} for i in range(1, 31)]
    path = tmp_path / "curve.png"
    plot_reward_curve(
        history, path, "t", held_out={"before": (0, {"success": 0.1}), "after": (30, {"success": 0.6})}
    )
    assert path.stat().st_size > 10_000


NATIVE_WRITER = r"""
import os, sys
from agentr1_trl._quiet import harmless_native_while
with harmless_native_while():
    os.write(2, b"[W1126 15:34:55.2 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation\n")
    os.write(2, b"kept 1\n[W1126 other.cpp:1] Warning: something else\n")
    os.write(2, b"progress 50%\r")
    os.write(2, b"[W1126 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy (split ")
    os.write(2, b"over two writes)\nkept 2\n")
    print("to stderr from Python", file=sys.stderr)
os.write(2, b"after the block\n")
print("stdout untouched")
"""


@pytest.mark.slow
def test_native_numa_warning_is_dropped_and_everything_else_kept():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NATIVE_WRITER], capture_output=True, timeout=60)
    err = done.stderr.decode()
    assert done.returncode == 0 and done.stdout.decode() == "stdout untouched\n"
    assert "NUMA" not in err
    assert (
        err.index("kept 1") < err.index("something else") < err.index("progress 50%\r") < err.index("kept 2")
    )
    assert "to stderr from Python" in err and err.endswith("after the block\n")


def test_the_hardware_line_names_the_update_precision(tmp_path):
    """The run's first line says which precision the update runs in, the frozen base's included, as the config
    resolves it (bf16_base None: a bf16 update on a CPU stores the base in bf16)."""
    from agentr1_trl.grpo import AgentGRPOConfig
    from agentr1_trl.run_report import describe_hardware
    from agentr1_trl.testing import trainer_settings

    assert describe_hardware(False).endswith("float32") or "(float32)" in describe_hardware(False)
    assert "bf16 autocast" in describe_hardware(True, False)
    assert "the frozen base stored in bf16" in describe_hardware(True, True)
    config = AgentGRPOConfig(**trainer_settings(tmp_path, bf16=True))
    assert config.stores_base_in_bf16("cpu") and not config.stores_base_in_bf16("cuda")
    config.bf16_base = False
    assert not config.stores_base_in_bf16("cpu")


@pytest.mark.parametrize(
    ("settings", "run", "expected"),
    [
        # defaults (None) on a CPU: bf16 base with bf16, a 2,048-token pass, shared prompts
        ({"bf16": True}, {"device": "cpu"}, (True, 2048, True)),
        ({"bf16": False}, {"device": "cpu"}, (False, 2048, True)),
        # on a GPU: autocast over float32 weights, one pass per micro-batch, the full forward
        ({"bf16": True}, {"device": "cuda"}, (False, 0, False)),
        # several processes or DeepSpeed: one pass per micro-batch; several processes: no shared prompts
        ({"bf16": True}, {"device": "cuda", "processes": 2}, (False, 0, False)),
        ({"share_prompt_prefix": True, "max_update_tokens": 512}, {"device": "cpu", "processes": 2}, (False, 0, False)),
        ({"max_update_tokens": 512}, {"device": "cpu", "deepspeed": True}, (False, 0, True)),
        # gradient checkpointing turns the KV cache off: no shared prompts, asked for or not
        ({"share_prompt_prefix": True}, {"device": "cpu", "checkpointing": True}, (False, 2048, False)),
        # what was asked for, where the device allows it
        ({"bf16": True, "bf16_base": True, "share_prompt_prefix": True, "max_update_tokens": 64},
         {"device": "cuda"}, (True, 64, True)),
        ({"bf16": True, "bf16_base": False, "share_prompt_prefix": False, "max_update_tokens": 0},
         {"device": "cpu"}, (False, 0, False)),
    ],
)  # fmt: skip
def test_device_defaults_follow_one_rule_per_setting(settings, run, expected):
    """Every setting whose default follows the device and the process count is decided in one place, once."""
    from types import SimpleNamespace

    from agentr1_trl.hardware import DeviceDefaults

    args = SimpleNamespace(**{"bf16": False, "bf16_base": None, "max_update_tokens": None,
                              "share_prompt_prefix": None, **settings})  # fmt: skip
    got = DeviceDefaults.resolve(args, **run)
    assert (got.bf16_base, got.update_tokens, got.share_prompts) == expected
    assert got.bf16 == bool(args.bf16) and got.device == run["device"]
