"""AgentPPOTrainer on the tiny random Qwen2 (a few steps) and value-guided decoding."""

from __future__ import annotations

import copy
import math
import os

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym
import torch
from agentr1_trl import ScriptedGenerator, collect_rollouts
from agentr1_trl.backends import ValueGuidedGenerator
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
from agentr1_trl.testing import (
    alternating_script,
    record_rollouts,
    tiny_model,
    tiny_tokenizer,
    trainer_settings,
)
from peft import LoraConfig

import agentr1_gym  # noqa: F401


def _trainer(tmp_path, **kw):
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0)
    base = copy.deepcopy(model)
    cfg = trainer_settings(tmp_path, beta=0.04)
    cfg.update(kw)
    trainer = AgentPPOTrainer(
        model,
        AgentPPOConfig(**cfg),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )
    return trainer, base


def _params(model, key):
    return {k: v.detach().clone() for k, v in model.named_parameters() if key in k}


def test_ppo_trains_lora_and_value_head_not_the_base(tmp_path):
    trainer, base = _trainer(tmp_path)
    lora0, head0 = _params(trainer.model, "lora_"), _params(trainer.model, "value_head")
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) and math.isfinite(h["loss/value"]) for h in logs)
    assert any(not torch.equal(v, _params(trainer.model, "lora_")[k]) for k, v in lora0.items())
    assert any(not torch.equal(v, _params(trainer.model, "value_head")[k]) for k, v in head0.items())
    base_params = dict(base.named_parameters())
    for name, value in trainer.model.named_parameters():
        if "lora_" in name or "value_head" in name:
            continue
        clean = name.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(value, base_params[clean]), name
    assert {"loss/policy", "loss/value", "value/explained_variance", "kl"} <= set(logs[0])


@pytest.mark.slow
def test_critic_warmup_keeps_the_policy_fixed(tmp_path):
    trainer, _ = _trainer(tmp_path, critic_warmup_steps=5, beta=0.0, max_steps=1)
    lora0 = _params(trainer.model, "lora_")
    trainer.train()
    assert all(torch.equal(v, _params(trainer.model, "lora_")[k]) for k, v in lora0.items())
    assert trainer.value_head.weight.abs().sum() > 0


@pytest.mark.slow
@pytest.mark.parametrize("needs_signal", [True, False])
def test_equal_returns_train_the_critic_not_the_policy(tmp_path, needs_signal):
    # every episode returns 0; a biased critic makes GAE advantages that are only its own errors
    flat = {"answer_weight": 0, "format_weight": 0, "invalid_format_penalty": 0, "invalid_call_penalty": 0}
    trainer, _ = _trainer(
        tmp_path,
        beta=0.0,
        max_steps=1,
        policy_needs_signal=needs_signal,
        env_kwargs={"max_turns": 3, "reward": {**flat, "process_scale": 0}},
    )
    with torch.no_grad():
        trainer.value_head.bias.fill_(0.5)
    lora0, head0 = _params(trainer.model, "lora_"), _params(trainer.model, "value_head")
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs[0]["rewards/env_return/std"] == 0.0
    assert logs[0].get("signal/policy_skipped", 0.0) == float(needs_signal)
    lora_moved = any(not torch.equal(v, _params(trainer.model, "lora_")[k]) for k, v in lora0.items())
    assert lora_moved is not needs_signal
    assert any(not torch.equal(v, _params(trainer.model, "value_head")[k]) for k, v in head0.items())


@pytest.mark.slow
def test_ppo_resume_reproduces_the_next_step(tmp_path):
    a, _ = _trainer(tmp_path / "a", save_strategy="steps", save_steps=1)
    a.train()
    assert (tmp_path / "a" / "checkpoint-1" / "value_head.pt").exists()
    b, _ = _trainer(tmp_path / "b")
    b.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    for key in ("lora_", "value_head"):
        pa, pb = _params(a.model, key), _params(b.model, key)
        assert all(torch.allclose(pa[k], pb[k], atol=1e-6) for k in pa), key


def test_value_guided_decoding_picks_the_highest_value(tmp_path):
    trainer, _ = _trainer(tmp_path, max_steps=1)
    tok = trainer.processing_class
    torch.manual_seed(0)
    with torch.no_grad():  # a random (non-zero) head, so the candidates get different values
        trainer.value_head.weight.normal_()
    texts = iter(["<answer>a</answer>", "<answer>bbb</answer>", "<answer>cc</answer>"] * 10)
    base = ScriptedGenerator(tok, lambda p, i: next(texts))
    guided = ValueGuidedGenerator(base, trainer.model, trainer.value_head, tok, n=3)
    envs = [gym.make("AgentR1/SyntheticMultihop-v0")]
    (traj,) = collect_rollouts(envs, guided, tok, seeds=[0])
    assert len(guided.last_scores[0]) == 3 and traj.terminated
    scores = guided.last_scores[0]
    assert len(set(scores)) == 3
    assert (
        traj.actions[0]
        == ["<answer>a</answer>", "<answer>bbb</answer>", "<answer>cc</answer>"][scores.index(max(scores))]
    )


def test_sft_warm_start_on_oracle_demonstrations():
    from agentr1_trl.sft import oracle_samples, warm_start
    from peft import get_peft_model

    tok = tiny_tokenizer()
    model = get_peft_model(
        tiny_model(tok, hidden_size=32, seed=1), LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
    )
    samples = oracle_samples("AgentR1/SyntheticMultihop-v0", range(6), tok, env_kwargs={"max_hops": 1})
    assert len(samples) == 6 and all(sum(s.action_mask) < len(s.action_mask) for s in samples)
    base = {k: v.clone() for k, v in model.named_parameters() if "lora_" not in k}
    losses = warm_start(model, tok, samples, epochs=4, lr=5e-3, progress=False)
    assert losses[-1] < losses[0]
    assert all(torch.equal(v, dict(model.named_parameters())[k]) for k, v in base.items())


@pytest.mark.parametrize("bf16_base", [None, False])
def test_sft_warm_start_in_bf16_stores_the_frozen_base_in_bf16_on_a_cpu(bf16_base):
    """bf16 on a CPU: the frozen base in bf16 (as the RL trainer's bf16_base default), the adapter float32 and
    learning; bf16_base=False keeps every weight float32."""
    from agentr1_trl.sft import oracle_samples, warm_start
    from peft import get_peft_model

    tok = tiny_tokenizer()
    model = get_peft_model(
        tiny_model(tok, hidden_size=32, seed=1), LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
    )
    samples = oracle_samples("AgentR1/SyntheticMultihop-v0", range(4), tok, env_kwargs={"max_hops": 1})
    losses = warm_start(
        model, tok, samples, epochs=3, lr=5e-3, progress=False, bf16=True, bf16_base=bf16_base
    )
    assert losses[-1] < losses[0]
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert frozen == ({torch.bfloat16} if bf16_base is None else {torch.float32})
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}


def test_sft_micro_batches_take_the_same_step():
    """Gradient accumulation over micro-batches (bounded memory on long transcripts) gives the full-batch step."""
    from agentr1_trl.sft import oracle_samples, warm_start
    from peft import get_peft_model

    tok = tiny_tokenizer()
    samples = oracle_samples("AgentR1/SyntheticMultihop-v0", range(4), tok, env_kwargs={"max_hops": 2})
    assert len({sum(s.action_mask) for s in samples}) > 1  # unequal token counts: the weighting matters
    models = [
        get_peft_model(
            tiny_model(tok, hidden_size=32, seed=1), LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
        )
        for _ in range(2)
    ]
    for model, micro in zip(models, (None, 1)):
        warm_start(
            model, tok, samples, epochs=1, lr=1e-2, batch_size=4, micro_batch_size=micro, progress=False
        )
    full, split = (dict(m.named_parameters()) for m in models)
    moved = [k for k in full if "lora_" in k and not torch.allclose(full[k], split[k], atol=1e-6)]
    assert not moved
    assert any("lora_B" in k and full[k].abs().sum() > 0 for k in full)


@pytest.mark.slow
def test_no_action_mask_ablation_trains_on_tool_tokens(tmp_path):
    trainer, _ = _trainer(tmp_path, max_steps=1)
    trainer.args.action_mask = False
    seen = record_rollouts(trainer)
    trainer.train()
    assert math.isfinite(trainer.state.log_history[0]["loss"])
    # TRL counts the masked-in completion tokens: with no action mask that is the whole completion
    log = trainer.state.log_history[0]
    lengths = [len(t.completion_ids) for t in seen]
    assert log["completions/max_length"] == max(lengths)


def test_warm_start_names_turns_longer_than_the_rollouts_turn_limit(capsys):
    """Oracle turns longer than max_new_tokens_per_turn would teach what rollouts cut off: the warm start says so,
    with the length to raise it to; turns that fit say nothing."""
    from agentr1_trl.sft import oracle_samples, oracle_warm_start, turn_lengths
    from peft import get_peft_model

    tok = tiny_tokenizer()
    kwargs = {"max_hops": 2}
    samples = oracle_samples("AgentR1/SyntheticMultihop-v0", range(3), tok, env_kwargs=kwargs)
    lengths = turn_lengths(samples)
    assert sum(lengths) == sum(sum(s.action_mask) for s in samples) and len(lengths) >= 2 * len(samples)
    longest = max(lengths)

    def run(limit):
        model = get_peft_model(
            tiny_model(tok, hidden_size=32, seed=1), LoraConfig(r=4, target_modules=["q_proj"])
        )
        oracle_warm_start(model, tok, "AgentR1/SyntheticMultihop-v0", kwargs, 3, epochs=1, seed=0, progress=False,
                          max_new_tokens=limit)  # fmt: skip
        return capsys.readouterr().out

    said = run(longest - 1)
    assert "warning:" in said and f"at least {longest}" in said
    assert "warning" not in run(longest)


def test_sft_warm_start_killed_and_resumed_ends_as_an_uninterrupted_one(tmp_path, monkeypatch):
    """A warm start with a progress file, killed after its 5th step and called again (a fresh process's model):
    the same adapter and losses as one run through; once finished it returns at once; a file of another warm
    start is refused."""
    from agentr1_trl import sft
    from peft import get_peft_model

    from agentr1_gym.errors import ConfigError

    tok = tiny_tokenizer()
    samples = sft.oracle_samples("AgentR1/SyntheticMultihop-v0", range(10), tok, env_kwargs={"max_hops": 1})

    def model():
        torch.manual_seed(3)
        return get_peft_model(
            tiny_model(tok, hidden_size=32, seed=1),
            LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.1),
        )

    def run(m, **kw):
        return sft.warm_start(
            m, tok, samples, epochs=3, lr=5e-3, batch_size=3, micro_batch_size=1, progress=False, **kw
        )

    def adapter(m):
        return {k: v.detach().clone() for k, v in m.named_parameters() if v.requires_grad}

    whole = model()
    whole_losses = run(whole)
    progress = tmp_path / "warm-start.pt"
    real, calls = sft._masked_nll, []

    def killed_after_five_steps(*a, **kw):
        if len(calls) == 5 * 3:  # micro-batches of one sample: 3 per step
            raise KeyboardInterrupt
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(sft, "_masked_nll", killed_after_five_steps)
    with pytest.raises(KeyboardInterrupt):
        run(model(), checkpoint=progress, checkpoint_every=2)
    assert progress.is_file()
    monkeypatch.setattr(sft, "_masked_nll", real)
    resumed = model()
    assert run(resumed, checkpoint=progress, checkpoint_every=2) == pytest.approx(whole_losses)
    for k, v in adapter(whole).items():
        assert torch.allclose(adapter(resumed)[k], v, atol=1e-6), k
    # finished: the result loads, nothing trains
    monkeypatch.setattr(
        sft, "_masked_nll", lambda *a, **kw: pytest.fail("a finished warm start trained again")
    )
    again = model()
    assert run(again, checkpoint=progress, checkpoint_every=2) == pytest.approx(whole_losses)
    assert all(torch.equal(adapter(again)[k], v) for k, v in adapter(resumed).items())
    with pytest.raises(ConfigError, match="other samples or settings"):
        sft.warm_start(
            model(), tok, samples, epochs=3, lr=1e-3, batch_size=3, progress=False, checkpoint=progress
        )
