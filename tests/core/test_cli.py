"""The agentr1 command: list, eval (oracle) and play with a scripted stdin."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from agentr1_gym.cli import main
from agentr1_gym.registration import env_ids


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


@pytest.mark.interpreter
def test_console_script_help():
    out = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "play" in out.stdout and "eval" in out.stdout


@pytest.mark.parametrize("env_id", env_ids())
def test_play_every_env_to_the_end(env_id, monkeypatch, capsys):
    """The oracle's turns, typed in, end the episode (graded, and shown with what was expected where there is an
    answer), then a second episode truncates."""
    import agentr1_gym

    shadow = agentr1_gym.make(env_id).unwrapped
    shadow.reset(seed=0)
    typed, done = [], False
    while not done:
        action = shadow.oracle_action()
        typed.append(action.replace("\n", "\\n"))
        _, _, terminated, truncated, _ = shadow.step(action)
        done = terminated or truncated
    turns = "<tool_call>\n" * shadow.max_turns  # format errors until the turn limit
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(typed) + f"\n/reset\n{turns}/quit\n"))
    assert main(["play", env_id, "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "episode terminated" in out and "episode truncated" in out and "'success': 1.0" in out
    assert ("gold " in out) == shadow.final_answer


@pytest.mark.parametrize("env_id", env_ids())
@pytest.mark.parametrize("policy", ["oracle", "no-tool", "random"])
def test_eval_every_env_with_every_builtin_policy(env_id, policy, capsys):
    assert main(["eval", env_id, "--policy", policy, "--episodes", "2", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 2 and {"return", "success", "score", "format_ok", "turns"} <= set(summary)
    if policy != "random":  # a random admissible move can win an easy game
        assert summary["success"] == (1.0 if policy == "oracle" else 0.0)


@pytest.mark.parametrize("env_id", env_ids())
def test_serve_retriever_and_index_build_on_every_env(env_id, monkeypatch, capsys, tmp_path):
    """`--env ID` serves or indexes the corpus that env searches; envs without a search tool are one error line.
    (The server loop and the index builders are replaced: they have their own tests with real backends.)"""
    import agentr1_gym
    import agentr1_gym.retrieval_server
    import agentr1_gym.tools.search.lucene

    served, built = [], []
    monkeypatch.setattr(
        agentr1_gym.retrieval_server, "serve", lambda retriever, **kw: served.append(retriever)
    )
    monkeypatch.setattr(
        agentr1_gym.tools.search.lucene, "build_lucene_index", lambda corpus, out, **kw: built.append(corpus)
    )
    from agentr1_gym.envs.qa import QAEnvBase

    env = agentr1_gym.make(env_id).unwrapped
    code = main(["serve-retriever", "--env", env_id, "--port", "8123"])
    code_index = main(
        ["index", "build", "--backend", "lucene", "--env", env_id, "--output", str(tmp_path / "i")]
    )
    out, err = capsys.readouterr()
    if not isinstance(env, QAEnvBase):  # no passage corpus (the shop's search is its own world's)
        assert (
            code == code_index == 2 and "has no search corpus" in err and len(err.strip().splitlines()) == 2
        )
        return
    assert code == code_index == 0 and "serving bm25 over" in out
    env.reset(seed=0)
    title = env.task.supporting_titles[0]
    (hits,) = served[0].search([title], 3)
    assert title in [p.title for p in hits]  # the env's own corpus is what is served
    assert built[0] is env.corpus or built[0].key == env.corpus.key


def test_serve_env_without_openenv_and_a_space_written_without_it(tmp_path, capsys):
    """serve-env names the extra it needs in one line; --write-space needs only the env (tests/engines/test_openenv.py
    serves and parses the files with openenv itself)."""
    import importlib.util

    if importlib.util.find_spec("openenv") is None:
        assert main(["serve-env", "AgentR1/Calculator-v0", "--port", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and 'pip install "agentr1-gym[openenv]"' in err[0]
    assert main(["serve-env", "AgentR1/Nope-v0", "--write-space", str(tmp_path / "x")]) == 2
    assert "Did you mean" in capsys.readouterr().err
    out = tmp_path / "space"
    assert main(["serve-env", "AgentR1/SyntheticMultihop-v0", "--env-arg", "max_turns=3", "--write-space",
                 str(out)]) == 0  # fmt: skip
    manifest = (out / "openenv.yaml").read_text()
    assert "runtime: fastapi" in manifest and "range: [" in manifest
    assert """json.loads('{"max_turns": 3}')""" in (out / "server" / "app.py").read_text()
    assert main(["serve-env", "AgentR1/SyntheticMultihop-v0", "--write-space", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err


def test_the_remote_env_is_listed_but_needs_a_server(capsys):
    import agentr1_gym
    from agentr1_gym.errors import ConfigError

    assert main(["list"]) == 0
    assert "AgentR1/OpenEnv-v0" in capsys.readouterr().out
    assert "AgentR1/OpenEnv-v0" not in agentr1_gym.env_ids()
    with pytest.raises(ConfigError, match="base_url"):
        agentr1_gym.make("AgentR1/OpenEnv-v0")
