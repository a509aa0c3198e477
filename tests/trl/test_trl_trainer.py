"""AgentGRPOTrainer and the stock-TRL bridges on a tiny random Qwen2 model (a few steps each), and the one-file GRPO
(examples/grpo_from_scratch.py) computing the same first update as AgentGRPOTrainer."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import sys

import pytest
from _paths import REPO

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from agentr1_trl import ScriptedGenerator
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.stock_trl import (
    ACT_WITH_TOOLS,
    ANSWER_WITH_TOOL,
    component_reward,
    env_return,
    environment_dataset,
    make_environment_factory,
    make_rollout_func,
    prompt_dataset,
)
from agentr1_trl.testing import (
    alternating_script,
    record_rollouts,
    tiny_model,
    tiny_tokenizer,
    trainer_settings,
)
from peft import LoraConfig, get_peft_model
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from agentr1_gym.errors import ConfigError

ENV = "AgentR1/SyntheticMultihop-v0"


def _config(tmp_path, **kw):
    return AgentGRPOConfig(**trainer_settings(tmp_path, **{"beta": 0.04, **kw}))


def _trainer(tmp_path, **kw):
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0)
    base = copy.deepcopy(model)
    trainer = AgentGRPOTrainer(
        model,
        _config(tmp_path, **kw),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )
    return trainer, base


def _lora(model):
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


def _base(model):
    return {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach().clone()
        for k, v in model.named_parameters()
        if "lora_" not in k
    }


def test_agent_grpo_trains_lora_only_and_reference_is_the_base(tmp_path):
    trainer, base = _trainer(tmp_path)
    lora_before = _lora(trainer.model)
    seen = record_rollouts(trainer)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any(h.get("reward_std", 0) > 0 for h in trainer.state.log_history)
    lora_after = _lora(trainer.model)
    assert any(not torch.equal(lora_before[k], lora_after[k]) for k in lora_before), "LoRA weights must move"
    base_params = dict(base.named_parameters())
    for name, value in _base(trainer.model).items():
        assert torch.equal(value, base_params[name].detach()), f"base weight {name} changed"
    # the KL reference (adapter disabled) is exactly the base model
    ids = torch.tensor([seen[0].prompt_ids[:50]])
    with trainer.model.disable_adapter():
        ref_logits = trainer.model(input_ids=ids).logits
    assert torch.allclose(ref_logits, base(input_ids=ids).logits, atol=1e-6)
    assert not torch.allclose(trainer.model(input_ids=ids).logits, ref_logits)
    metrics = trainer.state.log_history[0]
    logged = {"env/success", "env/format_ok", "env/turns", "env/repeat_rate", "kl", "rewards/env_return/mean"}
    assert logged <= set(metrics)
    assert 0.0 <= metrics["env/repeat_rate"] <= 1.0


@pytest.mark.slow
def test_resume_reproduces_the_next_step(tmp_path):
    a, _ = _trainer(tmp_path / "a", save_strategy="steps", save_steps=1)
    a.train()
    final_a = _lora(a.model)
    b, _ = _trainer(tmp_path / "b", save_strategy="no")
    b.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    final_b = _lora(b.model)
    assert b.state.global_step == 2
    for k in final_a:
        assert torch.allclose(final_a[k], final_b[k], atol=1e-6), k


@pytest.mark.slow
def test_resuming_a_finished_run_trains_no_further_step(tmp_path):
    """A run resumed at its step budget (to evaluate or save it) loads the checkpoint and trains nothing:
    transformers' own loop would train one step past max_steps."""
    a, _ = _trainer(tmp_path / "a", save_strategy="steps", save_steps=1, max_steps=1)
    a.train()
    trained = _lora(a.model)
    b, _ = _trainer(tmp_path / "b", save_strategy="no", max_steps=1)
    fresh = _lora(b.model)
    out = b.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    assert out.global_step == b.state.global_step == 1
    assert len([h for h in b.state.log_history if "loss" in h]) == 1  # the checkpoint's history, no new step
    final = _lora(b.model)
    assert any(not torch.equal(fresh[k], final[k]) for k in fresh), "the checkpoint's adapter must be loaded"
    for k in trained:
        assert torch.equal(trained[k], final[k]), k


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["rloo", "reinforce_pp"])
def test_other_estimators_run(tmp_path, estimator):
    trainer, _ = _trainer(tmp_path, advantage_estimator=estimator, max_steps=1, kl_estimator="low_var_kl")
    trainer.train()
    assert math.isfinite(trainer.state.log_history[0]["loss"])


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_micro_batches_add_up_to_the_whole_batch(tmp_path, loss_type):
    """One step on 4 episodes as one micro-batch and as 4 accumulated micro-batches of 1 (long episodes need
    that to fit in memory): the same update (plain SGD, so its size is the gradient's) for the loss types whose
    normaliser does not depend on how the batch is split; bnpo's per-micro-batch token mean does (as in TRL)."""
    deltas = {}
    for micro in (4, 1):
        trainer, _ = _trainer(
            tmp_path / str(micro),
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=4 // micro,
            max_steps=1,
            beta=0.0,
            optim="sgd",
            learning_rate=1.0,
            loss_type=loss_type,
        )
        before = _lora(trainer.model)
        trainer.train()
        deltas[micro] = {k: v - before[k] for k, v in _lora(trainer.model).items()}
    assert any(d.abs().max() > 1e-6 for d in deltas[4].values()), "the step must move the LoRA weights"
    same = all(torch.allclose(deltas[4][k], deltas[1][k], rtol=1e-3, atol=1e-7) for k in deltas[4])
    assert same == (loss_type != "bnpo"), f"{loss_type}: micro-batched update differs: {same}"


def test_config_checks():
    with pytest.raises(ValueError, match="advantage_estimator"):
        AgentGRPOConfig(output_dir="/tmp/x", advantage_estimator="ppo", report_to="none")
    with pytest.raises(ValueError, match="kl_estimator"):
        AgentGRPOConfig(output_dir="/tmp/x", kl_estimator="k2", report_to="none")


def _stock_config(tmp_path):
    return GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=2,
        report_to="none",
        max_completion_length=24,
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        logging_steps=1,
        learning_rate=5e-2,
    )


@pytest.mark.slow
def test_stock_grpo_with_rollout_func(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    seeds = range(8)
    rollout = make_rollout_func(
        ENV,
        seeds,
        env_kwargs={"max_turns": 3},
        max_new_tokens_per_turn=16,
        max_episode_tokens=1536,
        generator_factory=lambda trainer: ScriptedGenerator(tok, alternating_script),
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_return, component_reward("invalid_format")],
        args=_stock_config(tmp_path),
        processing_class=tok,
        train_dataset=prompt_dataset(ENV, seeds, {"max_turns": 3}),
        rollout_func=rollout,
    )
    before = {k: v.clone() for k, v in model.named_parameters()}
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["rewards/env_invalid_format/mean"] < 0 and log["reward_std"] > 0
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())


def test_stock_grpo_with_environment_factory(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    factory = make_environment_factory(ENV, max_turns=3)
    env = factory()
    # an empty episode earns nothing: closed as unanswered, no format bonus
    assert env.reset(seed=1) and env.get_reward() == 0.0
    prompt = env.reset(seed=1)
    # one prompt: the task once, how to answer with the listed tools, none of the text-format instructions
    assert prompt.count("Question:") == 1 and ANSWER_WITH_TOOL in prompt
    assert "<tool_call>" not in prompt and "<answer>" not in prompt
    first_entity = env.env.unwrapped.task.supporting_titles[0]
    assert env.search(query=first_entity).startswith(f"Doc 1 (Title: {first_entity})")
    assert env.answer(answer=env.env.unwrapped.gold_answers[0]) == "Answer recorded."
    assert env.get_reward() == pytest.approx(0.1 + 1.0 + 0.1)  # gold paragraph + answer + format
    # a row that already holds a prompt is kept (nothing appended); one with the text-format instructions is refused
    assert env.reset(seed=2, prompt=[{"role": "user", "content": "my own prompt"}]) is None
    with pytest.raises(ConfigError, match="environment_dataset"):
        env.reset(**prompt_dataset(ENV, [2], {"max_turns": 3})[0])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=None,
        args=_stock_config(tmp_path),
        processing_class=tok,
        train_dataset=environment_dataset(range(8)),
        environment_factory=factory,
    )
    names = {t.__name__ for t in trainer.tools}
    assert {"search", "answer"} <= names
    # what the model sees: TRL appends reset()'s text to the row's empty message and lists the tools
    row = environment_dataset([5])[0]
    shown = [{"role": "user", "content": row["prompt"][-1]["content"] + env.reset(**row)}]
    rendered = tok.apply_chat_template(shown, tools=trainer.tools, tokenize=False, add_generation_prompt=True)
    assert rendered.count("Question:") == 1 and '"answer"' in rendered and '"search"' in rendered
    trainer.train()
    log = trainer.state.log_history[0]
    assert f"rewards/{type(env).__name__}/mean" in log and math.isfinite(log["loss"])


def test_environment_factory_for_a_world_has_no_answer_tool():
    """A world ends by its own tools (here: buying), so its environment class offers no ``answer``."""
    factory = make_environment_factory("AgentR1/WebShop-v0", split="test")
    env = factory()
    prompt = env.reset(seed=4)
    assert ACT_WITH_TOOLS in prompt and ANSWER_WITH_TOOL not in prompt and not hasattr(env, "answer")
    world = env.env.unwrapped
    while not env.done:
        call = json.loads(world.oracle_action().split("\n")[1])
        getattr(env, call["name"])(**call["arguments"])
    assert env.get_reward() == pytest.approx(world.max_episode_reward())


@pytest.mark.slow
def test_full_fine_tuning_of_a_model_object_keeps_a_frozen_reference(tmp_path):
    """No peft, beta > 0, a model built in memory (no path TRL could reload it from): the reference is a frozen
    copy of the object as given, and the step moves the policy, not the reference."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer = AgentGRPOTrainer(
        model, _config(tmp_path, max_steps=1), tok, generator=ScriptedGenerator(tok, alternating_script)
    )
    trainer.train()
    assert trainer.ref_model is not None and trainer.beta == 0.04
    ref = dict(trainer.ref_model.named_parameters())
    assert all(not p.requires_grad and torch.equal(p, before[k]) for k, p in ref.items())
    moved = [k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])]
    assert moved and "kl" in trainer.state.log_history[0]


@pytest.mark.slow
def test_lora_over_a_bf16_base_under_autocast_saves_episodes(tmp_path):
    """A bfloat16 base with float32 adapters (what a GPU run loads): the saved episodes' log-probs come from the
    same autocast the update runs in."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0).to(torch.bfloat16)
    trainer = AgentGRPOTrainer(
        model,
        _config(tmp_path, max_steps=1, bf16=True, save_episodes_steps=1),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    entropy = [x for x in records[0]["tokens"]["entropy"] if x is not None]
    assert entropy and all(math.isfinite(x) for x in entropy)


def test_prompt_sharing_defaults_to_cpus_only(tmp_path):
    trainer, _ = _trainer(tmp_path, max_steps=1)
    assert trainer.args.share_prompt_prefix is None and trainer.shares_prompts(trainer.model)
    off, _ = _trainer(tmp_path / "off", max_steps=1, share_prompt_prefix=False)
    assert not off.device_defaults.share_prompts and not off.shares_prompts(off.model)


def test_a_trainer_made_from_python_trains_on_the_train_part_as_the_cli_does(tmp_path):
    """AgentGRPOConfig(env_id=a fixed task list) from Python: the trainer's envs hold only the training part (the
    held-out tasks never reach a rollout), unless env_kwargs chose a split; procedural envs are made as given."""
    import agentr1_gym

    agentr1_gym.register_task(
        "TestTrainer/Split-v0", [{"id": f"q{i}", "q": f"word {i}", "answer": f"w{i}"} for i in range(10)],
        prompt="Say {q}.",
    )  # fmt: skip
    tok = tiny_tokenizer()

    def task_ids(env_kwargs):
        trainer = AgentGRPOTrainer(
            tiny_model(tok, seed=0),
            AgentGRPOConfig(
                **trainer_settings(tmp_path, env_id="TestTrainer/Split-v0", env_kwargs=env_kwargs)
            ),
            tok,
            generator=ScriptedGenerator(tok, lambda p, i: "<answer>x</answer>"),
        )
        env = trainer._envs(1)[0]
        return {env.reset(seed=s)[1]["task_id"] for s in range(80)}, trainer.env_factory.kwargs

    held_out = {
        agentr1_gym.make("TestTrainer/Split-v0", task_split="test").reset(options={"task_index": i})[1][
            "task_id"
        ]
        for i in range(2)
    }
    trained, kwargs = task_ids({"max_turns": 2})
    assert kwargs == {"max_turns": 2, "task_split": "train"}
    assert len(trained) == 8 and trained.isdisjoint(held_out)
    everything, kwargs = task_ids({"max_turns": 2, "task_split": "all"})  # the user's choice is kept
    assert kwargs["task_split"] == "all" and held_out <= everything


# ---- examples/grpo_from_scratch.py: the one-file GRPO computes the trainer's first update ------------------------
SCRIPT = REPO / "examples" / "grpo_from_scratch.py"


def _scratch():
    spec = importlib.util.spec_from_file_location("grpo_from_scratch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _trainable_params(model):
    return {k: p for k, p in model.named_parameters() if p.requires_grad}


@pytest.mark.slow
@pytest.mark.parametrize("share_prompt_prefix", [False, True])
def test_first_update_equals_agent_grpo_trainers(tmp_path, share_prompt_prefix):
    """share_prompt_prefix: the trainer's forward runs each group's prompt once (its CPU default) or the plain
    forward the script runs; either way the same update."""
    scratch = _scratch()
    tok = tiny_tokenizer()
    config = AgentGRPOConfig(
        **trainer_settings(
            tmp_path,
            per_device_train_batch_size=8,  # two groups of 4, one micro-batch, one optimizer step
            max_steps=1,
            learning_rate=1e-3,
            share_prompt_prefix=share_prompt_prefix,
            env_kwargs={"max_hops": 1, "max_turns": 3},
        )
    )
    assert (config.loss_type, config.beta, config.num_iterations) == ("dapo", 0.0, 1)  # the defaults compared

    def lora():
        return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)

    trainer = AgentGRPOTrainer(
        tiny_model(tok, seed=0),
        config,
        tok,
        peft_config=lora(),
        generator=ScriptedGenerator(tok, alternating_script),
    )
    # the script's policy, built on its own with the trainer's weights, adapter included (a deep copy of the
    # trainer's model was found to still run the trainer's LoRA weights)
    model = get_peft_model(tiny_model(tok, seed=0), lora())
    model.load_state_dict(trainer.model.state_dict())
    episodes = record_rollouts(trainer)
    grads: dict[str, torch.Tensor] = {}

    class Gradients(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):  # after clipping, before the step
            grads.update({k: p.grad.clone() for k, p in _trainable_params(trainer.model).items()})

    trainer.add_callback(Gradients())
    trainer.train()
    trained = {k: p.detach().clone() for k, p in _trainable_params(trainer.model).items()}
    trainer_loss = next(h["loss"] for h in trainer.state.log_history if "loss" in h)

    args = scratch.Args(
        tasks_per_step=2,
        group_size=4,
        max_steps=1,
        learning_rate=config.learning_rate,
        epsilon=config.epsilon,
        max_grad_norm=config.max_grad_norm,
        temperature=config.temperature,
    )
    params = list(_trainable_params(model).values())
    optimizer = torch.optim.AdamW(
        params,
        lr=args.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / args.max_steps)
    before = {k: p.detach().clone() for k, p in _trainable_params(model).items()}
    stats = scratch.update(model, optimizer, scheduler, episodes, args, tok.pad_token_id)

    # a real update: varied returns in both groups, a gradient on every LoRA weight, weights that moved
    returns = torch.tensor([t.episode_return for t in episodes]).view(2, 4)
    assert len(episodes) == 8 and bool((returns.std(1) > 0).all())
    assert grads.keys() == before.keys() and all(g.abs().sum() > 0 for g in grads.values())
    assert stats["loss"] == pytest.approx(trainer_loss, rel=1e-4, abs=1e-6)
    for k, p in _trainable_params(model).items():
        assert torch.allclose(p.grad, grads[k], rtol=1e-3, atol=1e-7), k
        assert not torch.equal(p.detach(), before[k]), k
        assert torch.allclose(p.detach(), trained[k], rtol=1e-4, atol=1e-7), k
