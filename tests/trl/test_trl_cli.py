"""`agentr1 train` end to end on the tiny model (2 steps): adapter, metrics and reward-curve PNG."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")


import agentr1_gym
from agentr1_gym.cli import main
from agentr1_gym.registration import env_ids


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_train_writes_adapter_metrics_and_png(tmp_path, tiny_dir, algo, capsys):
    config = tmp_path / "config.yaml"
    warm = 4 if algo == "grpo" else 0  # the warm start (default 32 transcripts) on one of the two
    config.write_text(
        f"algo: {algo}\nper_device_train_batch_size: 2\nnum_generations: 2\nuse_cpu: true\nwarm_start: {warm}\n"
    )
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--model",
            tiny_dir,
            "--config",
            str(config),
            "--max-steps",
            "2",
            "--lora-r",
            "2",
            "--set",
            "max_new_tokens_per_turn=8",
            "--set",
            "max_episode_tokens=1536",
            "--eval-episodes",
            "6",
            "--output-dir",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert ("warm start on 4 oracle transcripts" in printed) == (algo == "grpo")
    assert "held-out before RL (6 episodes" in printed and "held-out after RL (6 episodes" in printed
    assert "x the RL start" in printed or "held-out success" in printed
    for name in ("eval_before_rl.json", "eval_after_rl.json"):
        result = json.loads((out / name).read_text())
        assert result["episodes"] == 6 and 0.0 <= result["success"] <= 1.0
    assert (out / "adapter" / "adapter_config.json").exists()
    assert (out / "reward_curve.png").stat().st_size > 1000
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum("reward" in r for r in rows) == 2
    if algo == "ppo":
        assert (out / "adapter" / "value_head.pt").exists()


def test_train_rejects_bad_fields(tmp_path, tiny_dir, capsys):
    assert (
        main(["train", "--model", tiny_dir, "--set", "no_such_field=1", "--output-dir", str(tmp_path)]) == 2
    )
    assert "unknown config field 'no_such_field'" in capsys.readouterr().err


def _eval(capsys, *argv):
    capsys.readouterr()
    assert main(["eval", *argv, "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_eval_model_baselines_and_value_guided(tmp_path, tiny_dir, capsys):
    out = tmp_path / "ppo"
    assert (
        main(
            [
                "train",
                "--model",
                tiny_dir,
                "--algo",
                "ppo",
                "--max-steps",
                "1",
                "--lora-r",
                "2",
                "--warm-start",
                "0",
                "--eval-episodes",
                "0",
                "--set",
                "per_device_train_batch_size=2",
                "--set",
                "num_generations=2",
                "--set",
                "use_cpu=true",
                "--set",
                "max_new_tokens_per_turn=8",
                "--output-dir",
                str(out),
            ]
        )
        == 0
    )
    tool = _eval(
        capsys,
        "AgentR1/SyntheticMultihop-v0",
        "--model",
        tiny_dir,
        "--episodes",
        "3",
        "--max-new-tokens",
        "8",
        "--env-arg",
        "max_turns=2",
        "--env-arg",
        "max_hops=1",
    )
    assert tool["episodes"] == 3 and tool["baseline"] == "tool" and 0.0 <= tool["success"] <= 1.0
    assert tool["turns"] == 2.0  # a random model never answers: both turns used
    rag = _eval(
        capsys,
        "AgentR1/HotpotQA-v0",
        "--model",
        tiny_dir,
        "--baseline",
        "naive-rag",
        "--episodes",
        "2",
        "--max-new-tokens",
        "8",
    )
    assert rag["baseline"] == "naive-rag" and rag["turns"] == 2.0 and "f1" in rag
    guided = _eval(
        capsys,
        "AgentR1/SyntheticMultihop-v0",
        "--model",
        tiny_dir,
        "--adapter",
        str(out / "adapter"),
        "--value-guided",
        "2",
        "--episodes",
        "2",
        "--max-new-tokens",
        "8",
        "--env-arg",
        "max_turns=2",
        "--env-arg",
        "max_hops=1",
    )
    assert guided["value_guided"] == 2 and guided["episodes"] == 2
    assert (
        main(
            [
                "eval",
                "AgentR1/SyntheticMultihop-v0",
                "--model",
                tiny_dir,
                "--value-guided",
                "2",
                "--episodes",
                "1",
                "--no-progress",
            ]
        )
        == 2
    )  # no value head without a PPO adapter


#: one text-game family stands for the four, and HotpotQA for the three QA datasets, in the default run (the same
#: env class each; the others run with -m slow)
_STAND_INS = {"AgentR1/Musique-v0", "AgentR1/2WikiMultihopQA-v0"}
# reasoning-gym: one curated id stands for the others (same env class), and the mixture covers two envs at once
_STAND_INS |= {"AgentR1/ReasoningGym-v0", "AgentR1/RG-BasicArithmetic-v0", "AgentR1/RG-GSMSymbolic-v0"}
_EVERY_ENV = [
    pytest.param(e, marks=pytest.mark.slow)
    if (e.startswith("AgentR1/TextWorld-") and "Cooking" not in e) or e in _STAND_INS
    else e
    for e in env_ids()  # AgentR1/OpenEnv-v0 trains in tests/engines/test_openenv.py
]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", _EVERY_ENV)
def test_train_and_eval_a_model_on_every_env(env_id, tmp_path, tiny_dir, capsys):
    """`agentr1 train --env ID` (each env from its own defaults) and `agentr1 eval ID --model` run on every
    registered env."""
    out = tmp_path / "run"
    argv = ["train", "--env", env_id, "--model", tiny_dir, "--max-steps", "1", "--lora-r", "2", "--warm-start",
            "2", "--eval-episodes", "2", "--output-dir", str(out)]  # fmt: skip
    budget = 2048
    if env_id == "AgentR1/BFCL-MultiTurn-v0":  # its prompt lists a whole API: ~15k ids of the tiny tokenizer
        budget = 20480
        argv[argv.index("--warm-start") + 1] = "0"  # the oracle's transcripts are longer still
        argv += ["--backend", "hf"]  # past the tiny model's positions, which vLLM holds a model to
        # every turn of the tiny model runs over the whole listing again: one turn, not BFCL's 16 (5 minutes of the
        # slow tier alone were this test at 16, 2.3 at 3); tests/envs/test_bfcl.py plays whole multi-turn episodes
        argv += ["--env-arg", "max_turns=1"]
    for field in ("per_device_train_batch_size=2", "num_generations=2", "use_cpu=true",
                  "max_new_tokens_per_turn=8", f"max_episode_tokens={budget}"):  # fmt: skip
        argv += ["--set", field]
    assert main(argv) == 0, capsys.readouterr().err
    after = json.loads((out / "eval_after_rl.json").read_text())
    if env_id == "AgentR1/Mixture-v0":  # evaluated per env (--eval-episodes each)
        assert set(after["per_env"]) == {"RG-ChainSum", "Calculator"} and after["episodes"] == 4
    else:
        assert after["episodes"] == 2
    assert (out / "adapter" / "adapter_config.json").exists()
    extra = ["--backend", "hf"] if env_id == "AgentR1/BFCL-MultiTurn-v0" else []
    summary = _eval(capsys, env_id, "--model", tiny_dir, "--adapter", str(out / "adapter"), "--episodes", "2",
                    "--max-new-tokens", "8", *extra)  # fmt: skip
    assert summary["episodes"] == 2 and {"return", "success", "format_ok"} <= set(summary)


@pytest.mark.parametrize("baseline", ["tool", "naive-rag"])
def test_evaluate_model_on_listed_tasks_keeps_rows(baseline):
    """``task_indices`` plays exactly those tasks of a fixed list, each once; ``keep_rows`` returns each episode's
    metrics (the Table 3 benchmark's confidence intervals need them)."""
    from agentr1_trl.backends import ScriptedGenerator
    from agentr1_trl.model_eval import EvalSettings, evaluate_model
    from agentr1_trl.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    env = agentr1_gym.make("AgentR1/HotpotQA-v0", split="dev")
    gold = env.unwrapped.tasks[4].answers[0]
    answer_task_4 = ScriptedGenerator(tok, lambda ids, i: f"<answer>{gold}</answer>", add_eos=True)
    out = evaluate_model(
        "AgentR1/HotpotQA-v0", None, tok, env_kwargs={"split": "dev"}, baseline=baseline, task_indices=[4, 7, 4],
        generator=answer_task_4, keep_rows=True, progress=False, max_new_tokens=64,
    )  # fmt: skip
    assert out["episodes"] == 3 and len(out["rows"]) == 3
    assert [r["em"] for r in out["rows"]] == [1.0, 0.0, 1.0]
    assert out["em"] == pytest.approx(2 / 3)
    # the same evaluation from a settings object, a keyword overriding one of its fields
    settings = EvalSettings(env_kwargs={"split": "dev"}, baseline=baseline, task_indices=[4, 7, 4], keep_rows=True,
                            progress=False, max_new_tokens=64, episodes=99)  # fmt: skip
    again = evaluate_model(
        "AgentR1/HotpotQA-v0", None, tok, settings, generator=answer_task_4, task_indices=[7]
    )
    assert again["episodes"] == 1 and again["em"] == 0.0
    with pytest.raises(agentr1_gym.ConfigError, match=r"unknown setting\(s\) \['max_new_token'\]"):
        evaluate_model("AgentR1/HotpotQA-v0", None, tok, generator=answer_task_4, max_new_token=64)


def test_naive_rag_scores_an_untagged_reply_as_the_answer():
    """Naive RAG measures answering from the retrieved text: a reply without ``<answer>`` tags is scored as a whole
    (format_ok 0), a tagged one by its tags (format_ok 1); a wrong untagged reply scores 0."""
    from agentr1_trl.backends import ScriptedGenerator
    from agentr1_trl.model_eval import evaluate_model
    from agentr1_trl.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    env = agentr1_gym.make("AgentR1/HotpotQA-v0", split="dev")
    gold = env.unwrapped.tasks[4].answers[0]

    def run(reply):
        out = evaluate_model(
            "AgentR1/HotpotQA-v0", None, tok, env_kwargs={"split": "dev"}, baseline="naive-rag", task_indices=[4],
            generator=ScriptedGenerator(tok, lambda ids, i: reply, add_eos=True), keep_rows=True, progress=False,
            max_new_tokens=64,
        )  # fmt: skip
        return out["rows"][0]

    untagged, tagged, wrong = run(f" {gold} "), run(f"<answer>{gold}</answer>"), run("no idea at all")
    assert (untagged["em"], untagged["format_ok"]) == (1.0, 0.0)
    assert (tagged["em"], tagged["format_ok"]) == (1.0, 1.0)
    assert (wrong["em"], wrong["f1"]) == (0.0, 0.0)


def test_train_takes_env_args_as_eval_does():
    """`agentr1 train --env-arg K=V` (repeatable), the spelling eval and play use, on top of the env's defaults or
    of --env-kwargs' JSON object."""
    from agentr1_trl.cli import _plan

    from agentr1_gym.cli import build_parser

    def env_kwargs(*argv):
        settings, *_ = _plan(build_parser().parse_args(["train", *argv]))
        return settings["env_kwargs"]

    assert env_kwargs() == {"max_hops": 1, "max_turns": 3}  # the main job's
    assert env_kwargs("--env-arg", "max_turns=4") == {"max_hops": 1, "max_turns": 4}
    assert env_kwargs("--env-kwargs", '{"max_hops": 2}', "--env-arg", "max_turns=5", "--env-arg", "context=window:1") == {
        "max_hops": 2, "max_turns": 5, "context": "window:1"}  # fmt: skip
    assert env_kwargs("--env", "AgentR1/Calculator-v0", "--env-arg", "max_turns=2") == {"max_turns": 2}


@pytest.mark.parametrize(
    "record",
    ["{not json", "[1, 2]", '{"settings": 5}', '{"settings": {"env_id": 3}}',
     '{"algo": "grpo", "model": "m", "lora_r": 8, "warm_start": 0, "settings": {"env_id": "AgentR1/SyntheticMultihop-v0",'
     ' "env_kwargs": {}, "max_steps": 1, "max_new_tokens_per_turn": "lots"}}'],
)  # fmt: skip
def test_eval_next_to_a_damaged_run_record_is_a_one_line_error(tmp_path, record):
    """Finding 13: `agentr1 eval --adapter` beside a damaged run_config.json raised raw AttributeError/ValueError/
    TypeError. Now a ConfigError that names the file (the run's settings decide what the eval measures, so a
    record that cannot be read is not quietly replaced by defaults)."""
    import argparse

    from agentr1_trl.model_eval import _run_settings

    from agentr1_gym.errors import ConfigError

    (tmp_path / "adapter").mkdir()
    (tmp_path / "run_config.json").write_text(record)
    args = argparse.Namespace(adapter=str(tmp_path / "adapter"), env_id="AgentR1/SyntheticMultihop-v0",
                              max_new_tokens=None)  # fmt: skip
    with pytest.raises(ConfigError, match=r"run_config\.json") as info:
        _run_settings(args, {})
    assert "\n" not in str(info.value)


def test_a_value_head_file_runs_no_pickle(tmp_path):
    """Finding 14: value_head.pt was loaded without weights_only=True; the [trl] extra allows torch versions
    that would run a pickle's code. A file that carries code is refused, whatever the torch version."""
    import pickle

    import torch
    from agentr1_trl.value_head import VALUE_HEAD_FILE, load_value_head

    class Payload:
        def __reduce__(self):
            return (print, ("PAYLOAD RAN",))

    with open(tmp_path / VALUE_HEAD_FILE, "wb") as f:
        pickle.dump({"weight": Payload()}, f)
    with pytest.raises(pickle.UnpicklingError):
        load_value_head(tmp_path)
    torch.save({"weight": torch.zeros(1, 4), "bias": torch.zeros(1)}, tmp_path / VALUE_HEAD_FILE)
    assert load_value_head(tmp_path).weight.shape == (1, 4)


def test_lora_on_the_top_layers_only_trains_those_and_resumes(tmp_path, tiny_dir, capsys):
    """``--lora-layers K``: the adapter covers the top K decoder layers (PEFT's layers_to_transform), the record
    keeps K, a resume loads the checkpoint; more layers than the model has is one line before anything is written;
    a record from before the field resumes as every layer."""
    import torch
    from agentr1_trl.pipeline import lora_config
    from agentr1_trl.testing import tiny_model, tiny_tokenizer

    from agentr1_gym.errors import ConfigError

    model = tiny_model(tiny_tokenizer(), hidden_size=64)
    total = model.config.num_hidden_layers
    assert (
        lora_config(2).layers_to_transform is None
        and lora_config(2, total, model).layers_to_transform is None
    )
    assert lora_config(2, 1, model).layers_to_transform == [total - 1]
    with pytest.raises(ConfigError, match=f"the model has {total} decoder layers"):
        lora_config(2, total + 1, model)
    out = tmp_path / "run"
    flags = ["--model", tiny_dir, "--lora-r", "2", "--warm-start", "2", "--eval-episodes", "0", "--output-dir",
             str(out), "--set", "per_device_train_batch_size=2", "--set", "num_generations=2", "--set",
             "max_new_tokens_per_turn=8", "--set", "use_cpu=true"]  # fmt: skip
    assert main(["train", *flags, "--max-steps", "1", "--lora-layers", str(total + 1)]) == 2
    assert f"lora_layers={total + 1}, but the model has {total}" in capsys.readouterr().err
    assert not (out / "run_config.json").exists()
    assert main(["train", *flags, "--max-steps", "1", "--lora-layers", "1"]) == 0
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["layers_to_transform"] == [total - 1]
    from safetensors.torch import load_file

    weights = load_file(out / "adapter" / "adapter_model.safetensors")
    assert weights and all(f"layers.{total - 1}." in name for name in weights)
    assert all(torch.count_nonzero(w) for name, w in weights.items() if "lora_A" in name)
    record = json.loads((out / "run_config.json").read_text())
    assert record["lora_layers"] == 1
    assert main(["train", "--resume", str(out), "--set", "max_steps=2"]) == 0
    del record["lora_layers"]  # a record from before the field: every layer, which this checkpoint is not
    (out / "run_config.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--set", "max_steps=3"]) == 2
    assert (
        "holds a LoRA adapter on the top 1 layer, but the run's lora_layers is 0" in capsys.readouterr().err
    )
