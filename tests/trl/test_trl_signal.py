"""Learning-signal switches: the paper's two ablations, outcome-only advantages, per-step signal metrics, and
TRL options our loss does not implement refused by name."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from agentr1_trl import ScriptedGenerator
from agentr1_trl.advantages import gae_advantages
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
from agentr1_trl.signals import advantage_mask, answer_reward, group_signal_metrics, signal_token_rewards
from agentr1_trl.testing import alternating_script, tiny_model, tiny_tokenizer, trainer_settings
from peft import LoraConfig

import agentr1_gym  # noqa: F401
from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import Trajectory

BASE = trainer_settings(max_steps=1)


def _traj(answer: float, shaping: float) -> Trajectory:
    t = Trajectory(prompt_ids=[1], completion_ids=[5, 6, 7, 8], action_mask=[1, 1, 0, 1], turn_ends=[1, 3])
    t.rewards = [shaping, answer]
    t.reward_components = [{"retrieval": shaping, "answer": 0.0}, {"answer": answer, "format": 0.0}]
    return t


@pytest.mark.parametrize(
    "option",
    [
        {"importance_sampling_level": "sequence"},
        {"delta": 2.0},
        {"top_entropy_quantile": 0.2},
        {"entropy_coef": 0.01},
        {"off_policy_mask_threshold": 0.5},
        {"mask_truncated_completions": True},
        {"sync_ref_model": True},
        {"vllm_enable_sleep_mode": True},
        {"vllm_tensor_parallel_size": 2},
        {"repetition_penalty": 1.1},
        {"min_p": 0.1},
        {"loss_type": "cispo"},
    ],
)
def test_unimplemented_trl_options_are_refused_by_name(tmp_path, option):
    name = next(iter(option))
    with pytest.raises(ConfigError, match=name.split("_")[0]):
        AgentGRPOConfig(output_dir=str(tmp_path), **BASE, **option)
    with pytest.raises(ConfigError):
        AgentPPOConfig(output_dir=str(tmp_path), **BASE, **option)


def test_trl_vllm_switches_map_onto_our_backend(tmp_path):
    base = {**BASE, "output_dir": str(tmp_path)}
    cfg = AgentGRPOConfig(**base, use_vllm=True, vllm_mode="server", vllm_server_base_url="http://h:8001",
                          vllm_importance_sampling_correction=False)  # fmt: skip
    assert (cfg.generation_backend, cfg.use_vllm, cfg.vllm_server_urls) == ("vllm", False, ["http://h:8001"])
    assert cfg.importance_correction == "none"
    with pytest.raises(ConfigError, match="vllm_server_urls"):
        AgentPPOConfig(**base, generation_backend="vllm", vllm_mode="server")
    with pytest.raises(ConfigError, match="generation_backend"):
        AgentGRPOConfig(**base, generation_backend="sglang")
    assert AgentGRPOConfig(**base).vllm_enforce_eager is None  # the device's default
    assert AgentGRPOConfig(**base, vllm_enforce_eager=False).vllm_enforce_eager is False
    with pytest.raises(ConfigError, match="vllm_enforce_eager must be true, false or null"):
        AgentPPOConfig(**base, vllm_enforce_eager="no")  # e.g. --set vllm_enforce_eager=no


def test_truncated_importance_weights_by_hand():
    from agentr1_trl.losses import truncated_is_weights

    trainer = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, -0.5, -9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w, mean, worst = truncated_is_weights(trainer, sampler, mask, cap=1.5)
    # exp(0.5)=1.65 capped at 1.5; exp(-1)=0.37; exp(0)=1; off the mask: 1
    assert w.tolist()[0] == pytest.approx([1.5, math.exp(-1.0), 1.0, 1.0])
    assert mean == pytest.approx((0.5 + 1.0 + 0.0) / 3) and worst == pytest.approx(1.0)


def test_signal_metrics_separate_outcome_from_shaping():
    # group 1: outcomes equal, shaping differs -> only shaping signal; group 2: outcomes differ
    trajs = [_traj(0.0, 0.1), _traj(0.0, 0.0), _traj(1.0, 0.0), _traj(0.0, 0.0)]
    m = group_signal_metrics(trajs, 2)
    assert m["signal/outcome_varied_groups"] == 0.5 and m["signal/return_varied_groups"] == 1.0
    assert m["signal/outcome_share"] == pytest.approx(1.0 / 1.1)
    only_shaping = group_signal_metrics(trajs[:2], 2)
    assert only_shaping["signal/outcome_varied_groups"] == 0.0 and only_shaping["signal/outcome_share"] == 0.0
    assert answer_reward(trajs[2]) == 1.0
    assert signal_token_rewards(trajs[0], "outcome") == [0.0, 0.0, 0.0, 0.0]
    assert signal_token_rewards(trajs[0], "return") == [0.0, 0.1, 0.0, 0.0]


def test_advantage_mask_ablation_changes_gae_on_action_tokens():
    output = {
        "completion_mask": torch.tensor([[1, 1, 1, 1, 1]]),
        "action_mask": torch.tensor([[1, 1, 0, 0, 1]]),  # tokens 2-3: a tool response
    }
    action = advantage_mask(output, True)
    everything = advantage_mask(output, False)
    assert action.tolist() == [[1, 1, 0, 0, 1]] and everything.tolist() == [[1, 1, 1, 1, 1]]
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 0.9, -0.5, 0.3]])
    a_masked, _ = gae_advantages(rewards, values * action, action, gamma=0.9, lam=0.9)
    a_all, _ = gae_advantages(rewards, values * everything, everything, gamma=0.9, lam=0.9)
    on_actions = action.bool()
    assert not torch.allclose(a_masked[on_actions], a_all[on_actions])  # the tool tokens' values leak in
    assert torch.all(a_masked[~on_actions] == 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer_cls", "config_cls", "extra"),
    [
        (AgentPPOTrainer, AgentPPOConfig, {"advantage_mask": False}),
        (AgentGRPOTrainer, AgentGRPOConfig, {"advantage_estimator": "reinforce_pp", "advantage_mask": False}),
        (AgentGRPOTrainer, AgentGRPOConfig, {"reward_signal": "outcome"}),
        (AgentPPOTrainer, AgentPPOConfig, {"reward_signal": "outcome"}),
    ],
)
def test_switches_train_and_log_the_signal(tmp_path, trainer_cls, config_cls, extra):
    tok = tiny_tokenizer()
    trainer = trainer_cls(
        tiny_model(tok, seed=0),
        config_cls(output_dir=str(tmp_path), **BASE, **extra),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all(math.isfinite(h["loss"]) for h in logs)
    assert "signal/outcome_varied_groups" in logs[0] and "signal/return_varied_groups" in logs[0]


def _grpo(tmp_path, **extra):
    tok = tiny_tokenizer()
    return AgentGRPOTrainer(
        tiny_model(tok, seed=0),
        AgentGRPOConfig(output_dir=str(tmp_path), **{**BASE, **extra}),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script),
    )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_skipping_zero_advantage_rows_keeps_loss_and_gradient(tmp_path, loss_type):
    trainer = _grpo(tmp_path, loss_type=loss_type)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    model = trainer.model
    g = torch.Generator().manual_seed(0)
    rows, width = 4, 7
    inputs = {
        "prompt_ids": torch.randint(3, 60, (rows, 5), generator=g),
        "prompt_mask": torch.ones(rows, 5, dtype=torch.long),
        "completion_ids": torch.randint(3, 60, (rows, width), generator=g),
        "completion_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 7, [1] * 6 + [0]]),
        "action_mask": torch.tensor([[1, 1, 0, 0, 1, 1, 1]] * rows),
        "advantages": torch.tensor([0.7, 0.0, -0.3, 0.0]),
    }

    def loss_and_grads(skip: bool):
        trainer.args.skip_zero_advantage = skip
        model.zero_grad()
        loss = trainer.loss(model, dict(inputs))
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    full_loss, full_grads = loss_and_grads(False)
    skip_loss, skip_grads = loss_and_grads(True)
    assert skip_loss == pytest.approx(full_loss, rel=1e-5, abs=1e-7)
    assert full_grads.keys() == skip_grads.keys() and full_grads
    for name, grad in full_grads.items():
        assert torch.allclose(grad, skip_grads[name], atol=1e-6), name
    assert trainer._metrics["train"]["signal/skipped_rows"][-1] == 0.5
    # rows 1 and 3 (advantage 0) hold 5+5 and 5+6 of the 12+10+12+11 tokens
    assert trainer._metrics["train"]["signal/skipped_tokens"][-1] == pytest.approx(21 / 45)


def test_dynamic_sampling_replaces_only_flat_groups_within_budget(tmp_path):
    trainer = _grpo(tmp_path, dynamic_sampling=True, max_resample_rounds=2)
    calls = []

    def rollout(seeds):
        calls.append(list(seeds))
        # odd seeds give groups whose outcome varies, even seeds flat ones
        out = []
        for i, s in enumerate(seeds):
            out.append(_traj(float(s % 2 == 1 and i % 2 == 0), 0.1))
        return out

    varied = [_traj(1.0, 0.0), _traj(0.0, 0.0), _traj(1.0, 0.0), _traj(1.0, 0.0)]
    flat = [_traj(0.0, 0.3), _traj(0.0, 0.0), _traj(0.0, 0.1), _traj(0.0, 0.0)]  # varies only by shaping
    trainer._collect = rollout  # the generation step, scripted
    played = [100] * 4 + [101] * 4
    trajs = trainer._dynamic_sampling(varied + flat, played)
    assert trajs[:4] == varied and played[:4] == [100] * 4  # a group with outcome variance is never touched
    assert len(calls) <= 2 and all(len(c) == 4 for c in calls)  # only the flat group is regenerated
    group = trajs[4:]
    replaced = group is not flat and [answer_reward(t) for t in group] != [0.0] * 4
    assert replaced == any(c[0] % 2 == 1 for c in calls)
    assert played[4:] == ([next(c[0] for c in calls if c[0] % 2 == 1)] * 4 if replaced else [101] * 4)
    assert all(0 <= c[0] - trainer.args.seed_offset < trainer.args.num_tasks for c in calls)
    assert trainer._metrics["train"]["signal/resample_rounds"][-1] == len(calls)


def test_selective_rollouts_replace_tasks_whose_last_group_was_flat(tmp_path):
    """skip_flat_tasks: a task whose last group was flat is replaced before its rollout (here with probability 1)
    by a seed not known to be flat; a varied group clears its task; the state survives a checkpoint."""
    trainer = _grpo(tmp_path, skip_flat_tasks=1.0, num_tasks=6, per_device_train_batch_size=8)
    trainer.model.train()
    played = []

    def collect(seeds):  # seeds 0-3 always flat (every episode fails), 4 and 5 varied
        played.append(list(seeds))
        return [_traj(float(s >= 4 and i % 2 == 0), 0.0) for i, s in enumerate(seeds)]

    trainer._collect = collect
    seeds = [0] * 4 + [4] * 4
    trainer.rollout(seeds)
    assert played[-1] == [0] * 4 + [4] * 4 and trainer._flat_tasks == {0: 1}  # nothing known yet: as drawn
    assert trainer._metrics["train"]["signal/skipped_flat_groups"][-1] == 0.0
    seeds = [0] * 4 + [1] * 4
    trainer.rollout(seeds)  # 0 was flat: replaced by a seed not flat and not in the batch (2, 3, 4 or 5)
    assert played[-1] == seeds and seeds[4:] == [1] * 4
    assert seeds[0] in (2, 3, 4, 5) and seeds[:4] == [seeds[0]] * 4
    assert trainer._metrics["train"]["signal/skipped_flat_groups"][-1] == 0.5
    trainer._flat_tasks = {0: 1, 1: 2, 2: 1, 3: 1}
    seeds = [5] * 4 + [0] * 4
    trainer.rollout(seeds)
    assert seeds == [5] * 4 + [4] * 4  # the only seed left that is neither flat nor taken
    assert 4 not in trainer._flat_tasks and 5 not in trainer._flat_tasks  # varied groups clear their task
    trainer.save_extra(str(tmp_path))
    other = _grpo(tmp_path / "other", skip_flat_tasks=1.0, num_tasks=6, per_device_train_batch_size=8)
    other.load_extra(str(tmp_path))
    assert other._flat_tasks == trainer._flat_tasks
    every = {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
    trainer._flat_tasks = dict(every)
    seeds = [0] * 4 + [1] * 4
    trainer.rollout(seeds)  # every task flat: nothing to replace them with, they are played
    assert seeds == [0] * 4 + [1] * 4
    off = _grpo(tmp_path / "off", num_tasks=6, per_device_train_batch_size=8)
    off.model.train()
    off._collect, off._flat_tasks = collect, dict(every)
    seeds = [0] * 4 + [1] * 4
    off.rollout(seeds)  # off by default: no state kept, nothing replaced
    assert seeds == [0] * 4 + [1] * 4 and off._flat_tasks == every
    with pytest.raises(ConfigError, match="skip_flat_tasks"):
        AgentGRPOConfig(output_dir=str(tmp_path), **BASE, skip_flat_tasks=1.5)


@pytest.mark.slow
def test_selective_rollouts_train_and_log_what_they_skipped(tmp_path):
    trainer = _grpo(
        tmp_path, skip_flat_tasks=0.9, num_tasks=2, max_steps=3, save_strategy="steps", save_steps=1
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3 and all("signal/skipped_flat_groups" in h for h in logs)
    assert os.path.exists(tmp_path / "checkpoint-3" / "flat_tasks.json")


@pytest.mark.slow
def test_dynamic_sampling_trains(tmp_path):
    trainer = _grpo(tmp_path, dynamic_sampling=True, max_resample_rounds=1)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and "signal/resample_rounds" in logs[0] and math.isfinite(logs[0]["loss"])
    # scripted turns carry placeholder log-probs: no mismatch measured, no importance weights applied
    assert "mismatch/logp_abs_mean" not in logs[0]


def _stage_hops(trainer):
    """Each training step's curriculum stage and the hops of the tasks its episodes played."""
    seen = []
    rollout = trainer.rollout

    def recording(seeds):
        trajs = rollout(seeds)
        hops = {len(e.unwrapped.task.supporting_titles) for e in trainer._env_pool[: len(seeds)]}
        seen.append((trainer._stage, hops))
        return trajs

    trainer.rollout = recording
    return seen


@pytest.mark.slow
def test_curriculum_moves_on_after_its_steps(tmp_path):
    stages = [{"options": {"hops": 1}, "steps": 2}, {"options": {"hops": 2}}]
    trainer = _grpo(tmp_path, max_steps=3, curriculum=stages, env_kwargs={"max_turns": 3, "max_hops": 2})
    seen = _stage_hops(trainer)
    trainer.train()
    assert seen == [(0, {1}), (0, {1}), (1, {2})]
    assert [h["curriculum/stage"] for h in trainer.state.log_history if "loss" in h] == [0.0, 0.0, 1.0]


@pytest.mark.slow
def test_curriculum_moves_on_at_its_success_rate_and_resumes_there(tmp_path):
    stages = [{"options": {"hops": 1}, "min_success": 0.9}, {"options": {"hops": 2}}]
    # room for the oracle's whole tool call in a turn: it plans from the calls the env executed, so a call cut
    # short by the token limit would be suggested again rather than skipped
    trainer = _grpo(tmp_path, max_steps=4, curriculum=stages, env_kwargs={"max_turns": 3, "max_hops": 2},
                    max_new_tokens_per_turn=128)  # fmt: skip
    trainer.generator = ScriptedGenerator.oracle(trainer.processing_class, trainer._envs(4))  # success 1.0
    seen = _stage_hops(trainer)
    trainer.train()
    assert [stage for stage, _ in seen] == [0, 0, 0, 1]  # three steps at success 1.0 >= 0.9, then hops=2
    trainer.save_extra(str(tmp_path))
    other = _grpo(tmp_path / "b", curriculum=stages, env_kwargs={"max_turns": 3, "max_hops": 2})
    other.load_extra(str(tmp_path))
    assert (other._stage, other._stage_start) == (1, 3) and other.stage_options() == {"hops": 2}


@pytest.mark.parametrize(
    "stages, message",
    [
        ([{"options": {"hops": 1}}, {"options": {"hops": 2}}], "never ends"),
        ([{"opts": {"hops": 1}}], "unknown keys"),
        ([{"options": {"hops": 1}, "steps": 0}], "steps"),
        ([{"options": {"hops": 1}, "min_success": 1.5}], "min_success"),
        ([{"options": 1}], "options"),
    ],
)
def test_bad_curriculum_is_a_config_error(tmp_path, stages, message):
    with pytest.raises(ConfigError, match=message):
        AgentGRPOConfig(output_dir=str(tmp_path), **{**BASE, "curriculum": stages})


def test_bf16_on_a_cpu_machine_means_cpu_autocast(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine keeps TRL's device handling")
    kwargs = {k: v for k, v in BASE.items() if k not in ("use_cpu", "bf16")}
    config = AgentGRPOConfig(
        output_dir=str(tmp_path), bf16=True, **kwargs
    )  # TRL alone refuses bf16 without a GPU
    assert config.bf16 and config.use_cpu


@pytest.mark.slow
def test_the_update_precision_follows_the_measured_hardware(tmp_path, monkeypatch):
    """bf16 by default only where the hardware computes it faster: native bf16 on the CPU *and* products measured
    at least BF16_BASE_MIN_SPEEDUP times float32's with the base stored in bf16 (the CPU default), at least
    BF16_MIN_SPEEDUP times for autocast over float32 weights (bf16_base=False); flags alone do not decide."""
    import agentr1_trl.hardware as hw

    if torch.cuda.is_available():
        pytest.skip("a GPU decides by its own bf16 support")
    assert (
        1.0 < hw.BF16_BASE_MIN_SPEEDUP < 2.1 < hw.BF16_MIN_SPEEDUP
    )  # 2.1x: the slowest native-bf16 CPU measured
    kwargs = {k: v for k, v in BASE.items() if k not in ("use_cpu", "bf16", "bf16_base")}
    cases = (  # native, speedup, bf16 with the base in bf16 (default), bf16 under autocast (bf16_base=False)
        (False, 9.5, False, False),
        (True, 1.2, False, False),
        (True, 2.1, True, False),
        (True, 9.5, True, True),
    )
    for native, speedup, base_bf16, autocast in cases:
        monkeypatch.setattr(hw, "cpu_has_native_bf16", lambda native=native: native)
        monkeypatch.setattr(hw, "bf16_matmul_speedup", lambda speedup=speedup: speedup)
        for bf16_base, expected in ((None, base_bf16), (True, base_bf16), (False, autocast)):
            bf16, why = hw.update_precision(bf16_base)
            assert bf16 is expected and (f"{speedup:.1f}x" in why) is native
        assert AgentGRPOConfig(output_dir=str(tmp_path), **kwargs).bf16 is base_bf16
        config = AgentGRPOConfig(output_dir=str(tmp_path), bf16_base=False, **kwargs)
        assert config.bf16 is autocast and not config.stores_base_in_bf16("cpu")
        assert AgentGRPOConfig(output_dir=str(tmp_path), bf16=False, **kwargs).bf16 is False
    monkeypatch.undo()
    real = hw.bf16_matmul_speedup()  # a real measurement: a positive ratio, cached for the process
    assert real > 0 and hw.bf16_matmul_speedup() == real


# ---- the frozen base in bf16 ------------------------------------------------------------------------------------
def _lora_trainer(tmp_path, algo: str = "grpo", **settings):
    tok = tiny_tokenizer()
    config, trainer_class = (
        (AgentGRPOConfig, AgentGRPOTrainer) if algo == "grpo" else (AgentPPOConfig, AgentPPOTrainer)
    )
    trainer = trainer_class(
        tiny_model(tok, hidden_size=32),
        config(output_dir=str(tmp_path), **{**BASE, **settings}),
        tok,
        peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
    )
    trainer.generator = ScriptedGenerator(tok, alternating_script)
    return trainer


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_bf16_update_on_a_cpu_stores_the_frozen_base_in_bf16_and_trains_float32_adapters(tmp_path, algo):
    """bf16_base (the default with bf16 on a CPU): every frozen weight bf16, the adapter (and PPO's value head)
    float32 and trained; the step's loss finite."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU bf16 stays autocast over float32 weights unless asked")
    trainer = _lora_trainer(tmp_path, algo, bf16=True)
    assert trainer.args.bf16_base is None and trainer.bf16_base
    frozen = {n: p for n, p in trainer.model.named_parameters() if not p.requires_grad}
    trained = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert frozen and trained
    assert {p.dtype for p in frozen.values()} == {torch.bfloat16}
    assert {p.dtype for p in trained.values()} == {torch.float32}
    trainer.train()
    loss = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert loss and all(math.isfinite(x) for x in loss)
    after = dict(trainer.model.named_parameters())
    assert all(after[n].dtype == torch.float32 for n in trained)
    assert any(not torch.equal(after[n].detach(), before) for n, before in trained.items())
    if algo == "ppo":
        assert {p.dtype for p in trainer.value_head.parameters()} == {torch.float32}


def test_bf16_base_can_be_turned_off_and_needs_bf16(tmp_path):
    trainer = _lora_trainer(tmp_path, bf16=True, bf16_base=False)
    assert not trainer.bf16_base
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert not _lora_trainer(tmp_path / "fp32").bf16_base  # BASE: bf16=False
    with pytest.raises(ConfigError, match="bf16=True"):
        AgentGRPOConfig(output_dir=str(tmp_path), **{**BASE, "bf16_base": True})


@pytest.mark.parametrize(("algo", "bf16"), [("grpo", False), ("grpo", True), ("ppo", False)])
def test_train_top_layers_trains_the_top_of_an_adapter_on_every_layer(tmp_path, algo, bf16):
    """train_top_layers=1 on a 2-layer model with LoRA on both: the lower layer's adapter weights are frozen as the
    trainer found them (float32 even when the frozen base goes to bf16: they are saved with the adapter) and get no
    gradient; the top layer's train; a PPO value head still trains."""
    trainer = _lora_trainer(tmp_path, algo, train_top_layers=1, bf16=bf16)
    lora = {n: p for n, p in trainer.model.named_parameters() if "lora_" in n}
    lower = {n: p.detach().clone() for n, p in lora.items() if ".layers.0." in n}
    top = {n: p.detach().clone() for n, p in lora.items() if ".layers.1." in n}
    assert lower and top
    assert not any(lora[n].requires_grad for n in lower) and all(lora[n].requires_grad for n in top)
    assert {lora[n].dtype for n in lower} == {torch.float32}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    assert all(
        torch.equal(after[n].detach(), before) and after[n].grad is None for n, before in lower.items()
    )
    assert any(not torch.equal(after[n].detach(), before) for n, before in top.items())
    if algo == "ppo":
        assert all(p.requires_grad for p in trainer.value_head.parameters())
    with pytest.raises(ConfigError, match="train_top_layers=3, but the model has 2 decoder layers"):
        _lora_trainer(tmp_path / "too-many", algo, train_top_layers=3)
    with pytest.raises(ConfigError, match="train_top_layers must be a whole number"):
        AgentGRPOConfig(output_dir=str(tmp_path), **{**BASE, "train_top_layers": -1})


def test_bf16_frozen_base_converts_only_frozen_float32_parameters():
    from agentr1_trl.models import bf16_frozen_base
    from peft import get_peft_model

    model = get_peft_model(tiny_model(tiny_tokenizer()), LoraConfig(r=2, target_modules=["q_proj"]))
    frozen = sum(1 for p in model.parameters() if not p.requires_grad)
    assert bf16_frozen_base(model) == frozen
    assert bf16_frozen_base(model) == 0  # idempotent
    assert all((p.dtype == torch.float32) == p.requires_grad for p in model.parameters())
