"""examples/grpo_from_scratch.py, the one-file GRPO, computes the same first update as ``AgentGRPOTrainer``: on the
trainer's own episodes, the same loss, the same clipped gradient on every LoRA weight and the same weights after
the optimizer step (a tiny model, two groups of four episodes with varied returns)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from agentr1_trl import ScriptedGenerator
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.testing import (
    alternating_script,
    record_rollouts,
    tiny_model,
    tiny_tokenizer,
    trainer_settings,
)
from peft import LoraConfig, get_peft_model
from transformers import TrainerCallback

SCRIPT = Path(__file__).parent.parent / "examples" / "grpo_from_scratch.py"


def _scratch():
    spec = importlib.util.spec_from_file_location("grpo_from_scratch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def _trainable(model):
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
            grads.update({k: p.grad.clone() for k, p in _trainable(trainer.model).items()})

    trainer.add_callback(Gradients())
    trainer.train()
    trained = {k: p.detach().clone() for k, p in _trainable(trainer.model).items()}
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
    params = list(_trainable(model).values())
    optimizer = torch.optim.AdamW(
        params,
        lr=args.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / args.max_steps)
    before = {k: p.detach().clone() for k, p in _trainable(model).items()}
    stats = scratch.update(model, optimizer, scheduler, episodes, args, tok.pad_token_id)

    # a real update: varied returns in both groups, a gradient on every LoRA weight, weights that moved
    returns = torch.tensor([t.episode_return for t in episodes]).view(2, 4)
    assert len(episodes) == 8 and bool((returns.std(1) > 0).all())
    assert grads.keys() == before.keys() and all(g.abs().sum() > 0 for g in grads.values())
    assert stats["loss"] == pytest.approx(trainer_loss, rel=1e-4, abs=1e-6)
    for k, p in _trainable(model).items():
        assert torch.allclose(p.grad, grads[k], rtol=1e-3, atol=1e-7), k
        assert not torch.equal(p.detach(), before[k]), k
        assert torch.allclose(p.detach(), trained[k], rtol=1e-4, atol=1e-7), k
