"""The agentr1 command: list, eval (oracle) and play with a scripted stdin."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from agentr1_gym.cli import main
from agentr1_gym.registration import DESCRIPTIONS


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "AgentR1/HotpotQA-v0" in out and "AgentR1/SyntheticMultihop-v0" in out


def test_eval_oracle(capsys):
    assert main(["eval", "AgentR1/Musique-v0", "--episodes", "5", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 5 and summary["success"] == 1.0 and summary["em"] == 1.0
    assert summary["format_ok"] == 1.0 and summary["return"] > 1.0


def test_eval_unknown_env_is_a_clean_error(capsys):
    assert main(["eval", "AgentR1/HotPotQA-v0", "--episodes", "1"]) == 2
    assert "Did you mean 'AgentR1/HotpotQA-v0'" in capsys.readouterr().err


def test_play_with_scripted_stdin(monkeypatch, capsys):
    monkeypatch.setattr(
        sys,
        "stdin",
        io.StringIO(
            '<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>\n/oracle\n<answer>no idea</answer>\n/quit\n'
        ),
    )
    assert main(["play", "AgentR1/SyntheticMultihop-v0", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "Did you mean 'search'?" in out and "reward -0.050" in out
    assert "episode terminated" in out and "'em': 0.0" in out


def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "play" in out.stdout and "eval" in out.stdout


@pytest.mark.parametrize("env_id", sorted(DESCRIPTIONS))
def test_play_every_env_to_the_end(env_id, monkeypatch, capsys):
    """An answer ends the episode (graded and shown with what was expected), then a second episode truncates."""
    turns = "x\n" * 6
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"<answer>42</answer>\n/reset\n{turns}/quit\n"))
    assert main(["play", env_id, "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "episode terminated" in out and "episode truncated" in out and "gold " in out


@pytest.mark.parametrize("env_id", sorted(DESCRIPTIONS))
@pytest.mark.parametrize("policy", ["oracle", "no-tool"])
def test_eval_every_env_with_every_builtin_policy(env_id, policy, capsys):
    assert main(["eval", env_id, "--policy", policy, "--episodes", "2", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 2 and {"return", "success", "score", "format_ok", "turns"} <= set(summary)
    assert summary["success"] == (1.0 if policy == "oracle" else 0.0)
