"""``agentr1 train --resume``: keyed to the directory it is given, overrides checked against the run before
anything is written, compatible ones applied (and printed), a damaged record named in one line."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

pytest.importorskip("trl")

from agentr1_trl.run_dir import latest_complete_checkpoint
from test_trl_durable import TINY_FLAGS  # the same tiny runs: no warm start, no evaluations, LoRA r=2

from agentr1_gym.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_dir):
    """A GRPO run of 2 steps (copied by each test that changes it)."""
    run = tmp_path_factory.mktemp("base") / "run"
    argv = ["train", "--model", tiny_dir, *TINY_FLAGS, "--max-steps", "2", "--output-dir", str(run)]
    assert main(argv) == 0
    return run


@pytest.fixture
def run(trained, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _record(run):
    return json.loads((run / "run_config.json").read_text())


def _step(run):
    latest = latest_complete_checkpoint(run)
    return json.loads((latest / "trainer_state.json").read_text())["global_step"]


@pytest.mark.slow
def test_a_moved_run_resumes_where_it_now_is(trained, tmp_path, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(trained, moved)
    before = _record(moved)["settings"]["output_dir"]
    assert before == str(trained)
    capsys.readouterr()
    assert main(["train", "--resume", str(moved), "--set", "max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert f"resuming from {moved / 'checkpoint-2'}" in out and "the run moved" in out
    assert _step(moved) == 3 and (moved / "checkpoint-3").is_dir()
    assert _record(moved)["settings"]["output_dir"] == str(moved)
    # the original directory was not touched (the old code re-created it and retrained steps 1-3 there)
    assert not (trained / "checkpoint-3").exists() and _step(trained) == 2


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--set", "lora_r=4"], "lora_r"),
        (["--lora-r", "4"], "lora_r"),
        (["--lora-layers", "1"], "lora_layers"),
        (["--set", "algo=ppo"], "algo"),
        (["--algo", "ppo"], "algo"),
        (["--model", "smollm2"], "model"),
        (["--warm-start", "8"], "warm_start"),
        (["--env", "AgentR1/Calculator-v0"], "env_id"),
        (["--env-kwargs", '{"max_turns": 5}'], "env_kwargs"),
    ],
)
def test_an_incompatible_override_is_refused_before_anything_is_written(run, flags, field, capsys):
    record = (run / "run_config.json").read_bytes()
    files = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "max_steps=3", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot resume {run} with {field}=" in err
    assert "Traceback" not in err and "start a new run" in err
    assert (run / "run_config.json").read_bytes() == record and sorted(p.name for p in run.iterdir()) == files
    if (
        field == "lora_r" and flags[0] == "--set"
    ):  # the run is not poisoned: a plain resume still continues it
        assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 0 and _step(run) == 3


def test_an_edited_record_cannot_load_a_checkpoint_of_another_shape(run, capsys):
    record = _record(run)
    record["lora_r"] = 4
    (run / "run_config.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 2
    err = capsys.readouterr().err
    assert "holds a LoRA adapter of rank 2, but the run's lora_r is 4" in err
    record["lora_r"], record["lora_layers"] = 2, 1
    (run / "run_config.json").write_text(json.dumps(record))
    assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 2
    assert "holds a LoRA adapter on every layer, but the run's lora_layers is 1" in capsys.readouterr().err
    record["lora_layers"], record["algo"] = 0, "ppo"
    (run / "run_config.json").write_text(json.dumps(record))
    assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 2
    assert "written by GRPO (it has no value head), but the run's algo is ppo" in capsys.readouterr().err
    assert _step(run) == 2


@pytest.mark.slow
def test_compatible_overrides_are_applied_and_printed(run, capsys):
    capsys.readouterr()
    argv = ["train", "--resume", str(run), "--max-steps", "3", "--set", "learning_rate=0.5"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resume: max_steps 2 -> 3" in out and "resume: learning_rate 0.0005 -> 0.5" in out
    assert "learning rate 0.0005 -> 0.5 from step 3" in out
    # the resumed step trained at the new rate (the old code recorded 0.5 and trained at 0.0005)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lr = {r["step"]: r["learning_rate"] for r in rows if "learning_rate" in r}
    assert lr[1] == lr[2] == pytest.approx(5e-4) and lr[3] == pytest.approx(0.5)
    record = _record(run)
    assert record["settings"]["learning_rate"] == 0.5 and record["settings"]["max_steps"] == 3


def test_server_flags_on_resume_replace_the_stored_ones(trained):
    from agentr1_trl.cli import _plan, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["train", "--resume", str(trained), "--vllm-server", "http://127.0.0.1:9", "--vllm-timeout", "7"]
    )
    settings, resume, run_file, changes = _plan(args)
    assert settings["vllm_server_urls"] == ["http://127.0.0.1:9"] and settings["vllm_mode"] == "server"
    assert settings["generation_backend"] == "vllm" and settings["vllm_timeout_s"] == 7.0
    assert any(c.startswith("vllm_server_urls") for c in changes) and resume is True
    assert run_file == trained / "run_config.json"


def test_resume_and_another_output_dir_are_refused(run, tmp_path, capsys):
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--output-dir", str(tmp_path / "other")]) == 2
    assert "names another" in capsys.readouterr().err and not (tmp_path / "other").exists()


CORRUPT = {
    "empty": (b"", "not valid JSON"),
    "cut short": (b'{"algo": "grpo", "sett', "not valid JSON"),
    "not UTF-8": (b"\xff\xfe\x00{", "not UTF-8"),
    "a list": (b"[1, 2]", "a JSON list"),
    "foreign": (b'{"name": "another tool"}', "no field 'settings'"),
    "settings a list": (b'{"settings": [], "algo": "grpo"}', "field 'settings' must be an object"),
    "no algo": (None, "no field 'algo'"),
    "algo unknown": ({"algo": "dpo"}, "field 'algo' must be 'grpo' or 'ppo'"),
    "lora_r a string": ({"lora_r": "16"}, "field 'lora_r' must be a whole number"),
    "model null": ({"model": None}, "field 'model' must be a string"),
    "env_kwargs a string": ({"settings.env_kwargs": "x"}, "field 'settings.env_kwargs' must be an object"),
    "unknown setting": ({"settings.learning_rte": 1e-4}, "unknown config field 'learning_rte'"),
    "setting of a wrong type": ({"settings.learning_rate": "fast"}, "config field learning_rate='fast'"),
    "future format": ({"format": "agentr1-train/9"}, "field 'format' is 'agentr1-train/9'"),
}


@pytest.mark.parametrize("kind", list(CORRUPT))
def test_a_damaged_record_is_one_line_naming_file_and_field(run, kind, capsys):
    change, expected = CORRUPT[kind]
    path = run / "run_config.json"
    if isinstance(change, bytes):
        path.write_bytes(change)
    else:
        record = _record(run)
        if change is None:
            del record["algo"]
        else:
            for key, value in change.items():
                if key.startswith("settings."):
                    record["settings"][key.removeprefix("settings.")] = value
                else:
                    record[key] = value
        path.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and expected in err, err
    assert "Traceback" not in err


def test_an_unwritable_output_dir_is_one_line(tmp_path, tiny_dir, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    argv = [
        "train",
        "--model",
        tiny_dir,
        *TINY_FLAGS,
        "--max-steps",
        "1",
        "--output-dir",
        str(blocker / "run"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot write to the output dir {blocker / 'run'}" in err


@pytest.mark.slow
def test_a_resume_keeps_the_runs_own_evaluation_count(run, capsys):
    """The run was started with --eval-episodes 0; resuming without the flag adds no evaluations."""
    assert _record(run)["eval_episodes"] == 0
    assert main(["train", "--resume", str(run), "--set", "max_steps=3"]) == 0
    assert _step(run) == 3
    assert not (run / "eval_before_rl.json").exists() and not (run / "eval_after_rl.json").exists()
    assert not any(line.startswith("held-out") for line in capsys.readouterr().out.splitlines())


@pytest.mark.slow
def test_a_resume_never_measures_before_rl_on_a_fresh_adapter(run, capsys):
    """Asked for evaluations on resume, a run without eval_before_rl.json reports no before-RL figure (the
    policy's checkpoint loads only when training resumes) and evaluates after RL on the trained policy."""
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "max_steps=3", "--eval-episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "eval_episodes 0 -> 2" in out and "the RL start cannot be measured after training began" in out
    assert not (run / "eval_before_rl.json").exists()
    assert json.loads((run / "eval_after_rl.json").read_text())["episodes"] == 2
    assert (run / "adapter").is_dir() and (run / "metrics.jsonl").is_file()
