"""reasoning-gym datasets as envs (scored by their own score_answer) and the env mixture (one run over several
envs: a GRPO group is one env's task; metrics and held-out evaluation per env)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import evaluate, summarize
from agentr1_gym.mixture import mixture_components, short_name

pytest.importorskip("reasoning_gym")


def test_any_dataset_is_an_env_scored_by_its_own_scorer():
    import reasoning_gym

    env = gym.make("AgentR1/ReasoningGym-v0", task="leg_counting", tool="none")
    _, info = env.reset(seed=3)
    task = env.unwrapped.task
    item = reasoning_gym.create_dataset("leg_counting", seed=task["seed"], size=1)[0]
    assert task["question"] == item["question"] and info["messages"][0]["content"].endswith(item["question"])
    assert info["tools"] == []
    metrics = env.step(env.unwrapped.answer_text(item["answer"]))[4]["metrics"]
    assert metrics["correct"] == 1.0 and metrics["success"] == 1.0
    env.reset(seed=3)
    wrong = env.step(env.unwrapped.answer_text(str(int(item["answer"]) + 1)))[4]["metrics"]
    assert wrong["correct"] == 0.0 and wrong["success"] == 0.0


def test_partial_credit_is_the_score_and_full_credit_the_success():
    env = gym.make("AgentR1/RG-GSMSymbolic-v0")
    env.reset(seed=0)
    gold = env.unwrapped.gold_answers[0]
    m = env.step(env.unwrapped.answer_text(str(int(float(gold)) + 7)))[4]["metrics"]
    assert 0.0 < m["score"] < 1.0 and m["correct"] == 0.0  # reasoning-gym's 0.01 for a wrong number
    strict = gym.make("AgentR1/RG-GSMSymbolic-v0", partial_credit=False)
    strict.reset(seed=0)
    _, _, _, _, info = strict.step(strict.unwrapped.answer_text(str(int(float(gold)) + 7)))
    assert info["metrics"]["score"] == 0.0 and info["reward_components"]["answer"] == 0.0


@pytest.mark.parametrize(
    "env_id", ["AgentR1/RG-ChainSum-v0", "AgentR1/RG-BasicArithmetic-v0", "AgentR1/RG-GSMSymbolic-v0"]
)
def test_curated_ids_oracle_uses_the_calculator_and_solves(env_id):
    summary = evaluate(env_id, "oracle", episodes=20, progress=False)
    assert summary["success"] == 1.0 and summary["turns"] > 1.5  # tool turns, then the answer


def test_bad_task_names_and_configs_are_one_line_errors():
    with pytest.raises(ConfigError, match=r"no dataset 'chain_sums'.*did you mean 'chain_sum'"):
        agentr1_gym.make("AgentR1/ReasoningGym-v0", task="chain_sums")
    with pytest.raises(ConfigError, match="reasoning-gym 'chain_sum' config"):
        agentr1_gym.make("AgentR1/ReasoningGym-v0", task="chain_sum", config={"min_terms": 5, "max_terms": 2})
    with pytest.raises(ConfigError, match="tool must be"):
        agentr1_gym.make("AgentR1/ReasoningGym-v0", tool="abacus")


# ---- mixtures -------------------------------------------------------------------------------------------------
MIX = [{"id": "AgentR1/RG-ChainSum-v0", "weight": 3}, {"id": "AgentR1/Calculator-v0", "name": "calc"}]


def test_a_seed_picks_one_env_and_one_task_so_a_group_is_one_envs_task():
    env = gym.make("AgentR1/Mixture-v0", envs=MIX)
    seen = {}
    for seed in range(200):
        _, info = env.reset(seed=seed)
        again = env.reset(seed=seed)[1]
        assert (again["env"], again["task_id"]) == (info["env"], info["task_id"])
        seen[info["env"]] = seen.get(info["env"], 0) + 1
    assert set(seen) == {"RG-ChainSum", "calc"}
    assert 0.65 < seen["RG-ChainSum"] / 200 < 0.85  # weight 3:1
    _, info = env.reset(seed=1, options={"env": "calc"})
    assert info["env"] == "calc" and info["task_id"].startswith("calc:")
    with pytest.raises(ConfigError, match="options\\['env'\\] 'calk' \\(did you mean 'calc'\\?\\)"):
        env.reset(options={"env": "calk"})


def test_metrics_are_tagged_per_env_and_evaluation_reports_each():
    summary = evaluate(gym.make("AgentR1/Mixture-v0", envs=MIX), "oracle", episodes=30, progress=False)
    assert summary["success"] == 1.0
    assert summary["RG-ChainSum/success"] == 1.0 and summary["calc/success"] == 1.0
    assert summary["calc/turns"] > summary["RG-ChainSum/turns"]  # means over each env's own episodes


def test_mixture_components_are_what_the_mixture_builds_and_summaries_share_one_vocabulary():
    """The public helper that evaluates a mixture per component gives each component the kwargs the mixture built
    it with; `summarize` is the one summary of per-episode rows (means over the episodes reporting a key)."""
    kwargs = {"envs": [{"id": "AgentR1/RG-ChainSum-v0", "kwargs": {"max_turns": 3}}, "AgentR1/Calculator-v0"],
              "max_turns": 8}  # fmt: skip
    parts = mixture_components(kwargs)
    assert parts == [
        ("RG-ChainSum", "AgentR1/RG-ChainSum-v0", {"max_turns": 3}),
        ("Calculator", "AgentR1/Calculator-v0", {"max_turns": 8}),
    ]
    env = gym.make("AgentR1/Mixture-v0", **kwargs).unwrapped
    assert [c.max_turns for c in env.components] == [kw["max_turns"] for _, _, kw in parts]
    assert [e["name"] for e in env.entries] == [name for name, _, _ in parts]
    assert mixture_components({"max_turns": 3}) == [] and short_name("mod:Org/My-Task-v12") == "My-Task"
    rows = [
        {"success": 1.0, "a/success": 1.0, "return": 2, "env": "a"},
        {"success": 0.0, "b/success": 0.0, "return": 0},
    ]
    assert summarize(rows) == {
        "success": 0.5,
        "a/success": 1.0,
        "b/success": 0.0,
        "return": 1.0,
    }
    assert summarize([{"pass": 1.0}, {"pass": 0.0}])["pass@1"] == 0.5


def test_mixture_settings_apply_to_every_component_and_own_kwargs_win():
    env = gym.make(
        "AgentR1/Mixture-v0",
        envs=[{"id": "AgentR1/RG-ChainSum-v0", "kwargs": {"max_turns": 3}}, "AgentR1/Calculator-v0"],
        max_turns=8,
    ).unwrapped
    assert [c.max_turns for c in env.components] == [3, 8]
    with pytest.raises(ConfigError, match="cannot contain a mixture"):
        agentr1_gym.make("AgentR1/Mixture-v0", envs=["AgentR1/Mixture-v0", "AgentR1/Calculator-v0"])
    with pytest.raises(ConfigError, match="weight must be a finite positive number"):
        agentr1_gym.make("AgentR1/Mixture-v0", envs=[{"id": "AgentR1/Calculator-v0", "weight": 0}, MIX[0]])
    with pytest.raises(ConfigError, match="named alike"):
        agentr1_gym.make("AgentR1/Mixture-v0", envs=["AgentR1/Calculator-v0", "AgentR1/Calculator-v0"])
    with pytest.raises(ConfigError, match="unknown field"):
        agentr1_gym.make("AgentR1/Mixture-v0", envs=[{"id": "AgentR1/Calculator-v0", "wieght": 1}, MIX[0]])


def test_parse_mix_and_the_train_flag():
    from agentr1_gym.mixture import parse_mix

    assert parse_mix("A/X-v0=2, B/Y-v0") == [{"id": "A/X-v0", "weight": 2.0}, {"id": "B/Y-v0", "weight": 1.0}]
    with pytest.raises(ConfigError, match="at least two envs"):
        parse_mix("A/X-v0")
    with pytest.raises(ConfigError, match="must be a number"):
        parse_mix("A/X-v0=lots,B/Y-v0")


@pytest.mark.slow
def test_grpo_on_a_mixture_groups_by_env_and_logs_each(tmp_path):
    pytest.importorskip("trl")
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.testing import alternating_script, record_rollouts, tiny_model, tiny_tokenizer
    from peft import LoraConfig

    tok = tiny_tokenizer()
    config = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_steps=2, logging_steps=1,
        report_to="none", max_new_tokens_per_turn=16, max_episode_tokens=1536, save_strategy="no", use_cpu=True,
        env_id="AgentR1/Mixture-v0", env_kwargs={"envs": MIX, "max_turns": 5},
    )  # fmt: skip
    trainer = AgentGRPOTrainer(
        tiny_model(tok, seed=0), config, tok, peft_config=LoraConfig(r=2, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )  # fmt: skip
    seen = record_rollouts(trainer)
    trainer.train()
    envs = [next(k.split("/")[0] for k in t.metrics if "/" in k) for t in seen]
    groups = [envs[i : i + 4] for i in range(0, len(envs), 4)]
    assert len(groups) == 4 and all(len(set(g)) == 1 for g in groups)  # a group is one env's task
    logged = {k for row in trainer.state.log_history for k in row}
    assert {f"env/{name}/success" for name in set(envs)} <= logged


def test_the_train_command_plans_a_mixture_and_evaluates_each_env(capsys):
    pytest.importorskip("trl")
    import argparse

    from agentr1_trl.cli import _plan, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["train", "--mix", "AgentR1/RG-ChainSum-v0=2,AgentR1/Calculator-v0", "--env-kwargs",
                              '{"max_turns": 5}'])  # fmt: skip
    settings, *_ = _plan(args)
    assert settings["env_id"] == "AgentR1/Mixture-v0"
    assert settings["env_kwargs"] == {
        "max_turns": 5,
        "envs": [
            {"id": "AgentR1/RG-ChainSum-v0", "weight": 2.0},
            {"id": "AgentR1/Calculator-v0", "weight": 1.0},
        ],
    }
    with pytest.raises(ConfigError, match="--mix or --env, not both"):
        _plan(parser.parse_args(["train", "--mix", "A/B-v0,C/D-v0", "--env", "AgentR1/Calculator-v0"]))


def test_a_yaml_config_names_a_mixture(tmp_path):
    pytest.importorskip("trl")
    import argparse

    from agentr1_trl.cli import _plan, register

    config = tmp_path / "mix.yaml"
    config.write_text(
        "env_id: AgentR1/Mixture-v0\n"
        "env_kwargs:\n"
        "  max_turns: 5\n"
        "  envs:\n"
        "    - {id: AgentR1/RG-ChainSum-v0, weight: 3}\n"
        "    - {id: AgentR1/Calculator-v0, name: calc}\n"
    )
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    settings, *_ = _plan(parser.parse_args(["train", "--config", str(config)]))
    assert settings["env_id"] == "AgentR1/Mixture-v0"
    env = gym.make(settings["env_id"], **settings["env_kwargs"]).unwrapped
    assert env.names == ["RG-ChainSum", "calc"] and list(env.weights) == [0.75, 0.25]
