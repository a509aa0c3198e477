"""Every bad ``agentr1`` invocation ends in one ``error:`` line (exit 2), fast, before any model is trained;
``--debug`` shows the traceback instead."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")


from agentr1_gym.cli import main


def _files(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [1, 2\nb: }")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "empty_model").mkdir()
    (tmp_path / "broken_adapter").mkdir()
    (tmp_path / "broken_adapter" / "adapter_config.json").write_text("{not json")
    (tmp_path / "no_adapter").mkdir()
    return tmp_path


BAD = {
    "missing config": (["train", "--config", "{t}/missing.yaml"], "config file not found"),
    "bad yaml": (["train", "--config", "{t}/bad.yaml"], "not valid YAML at line"),
    "yaml not a mapping": (["train", "--config", "{t}/list.yaml"], "mapping"),
    "learning rate not a number": (["train", "--set", "learning_rate=abc"], "learning_rate='abc': expected float"),
    "groups do not divide the batch": (["train", "--set", "num_generations=3"], "num_generations"),
    "negative max steps": (["train", "--set", "max_steps=-1"], "max_steps must be"),
    "zero max steps": (["train", "--max-steps", "0"], "max_steps must be"),
    "unknown field": (["train", "--set", "learning_rat=1e-4"], "did you mean 'learning_rate'"),
    "set without key": (["train", "--set", "=5"], "key=value"),
    "bool field": (["train", "--set", "use_cpu=maybe"], "expected bool"),
    "bad env kwargs json": (["train", "--env-kwargs", "{max_turns: 3"], "JSON object"),
    "env kwargs not an object": (["train", "--env-kwargs", "[1, 2]"], "JSON object"),
    "unknown env": (["train", "--env", "AgentR1/HotpotQA-v9"], "Did you mean"),
    "unknown algo in config": (["train", "--set", "algo=dqn"], "grpo or ppo"),
    "model does not exist": (["train", "--model", "{t}/nope"], "not a directory"),
    "model dir without weights": (["train", "--model", "{t}/empty_model", "--warm-start", "0"], "cannot load a model"),
    "eval missing adapter": (
        ["eval", "AgentR1/SyntheticMultihop-v0", "--model", "{tiny}", "--adapter", "{t}/no_adapter", "--episodes", "1"],
        "not a LoRA adapter",
    ),
    "eval corrupt adapter": (
        ["eval", "AgentR1/SyntheticMultihop-v0", "--model", "{tiny}", "--adapter", "{t}/broken_adapter"],
        "cannot load the adapter",
    ),
    "eval unknown env": (["eval", "AgentR1/Nope-v0", "--policy", "oracle"], "Did you mean"),
    "eval model missing": (["eval", "AgentR1/SyntheticMultihop-v0", "--model", "{t}/nope"], "not a directory"),
    "serve missing corpus": (["serve-retriever", "--corpus", "{t}/nope.jsonl"], "not found"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_invocation_is_one_line(case, tmp_path, tiny_dir, capsys, monkeypatch):
    argv, fragment = BAD[case]
    t = _files(tmp_path)
    monkeypatch.chdir(tmp_path)  # the default output dir, runs/agentr1-grpo, is relative
    argv = [a.replace("{t}", str(t)).replace("{tiny}", tiny_dir) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1]  # (earlier lines may be a weight-loading progress bar)
    assert last.startswith("error:") and "Traceback" not in err, err
    assert fragment in last, err


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(Exception, match="config file not found"):
        main(["--debug", "train", "--config", str(tmp_path / "missing.yaml")])


def test_a_failed_train_leaves_an_earlier_runs_config_alone(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text('{"algo": "grpo", "model": "smollm2"}')
    argv = ["train", "--model", str(tmp_path / "nope"), "--output-dir", str(run)]
    assert main(argv) == 2
    assert "holds an earlier run" in capsys.readouterr().err
    # told to start over, a command that fails (here: the model) still leaves the earlier run alone
    assert main([*argv, "--overwrite"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert (run / "run_config.json").read_text() == '{"algo": "grpo", "model": "smollm2"}'


def test_a_misspelt_env_arg_is_one_line_without_gymnasiums_clause(capsys):
    assert main(["eval", "AgentR1/HotpotQA-v0", "--env-arg", "max_turn=3", "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'max_turns'" in err
    assert "environment creator" not in err and "with kwargs" not in err
