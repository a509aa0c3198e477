"""Templates that are not prefix-stable (earlier <think> blocks dropped): episodes train as one row per turn, in
GRPO and PPO, with advantages, sampler/old/reference log-probs and values that are each turn's own."""

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
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
from agentr1_trl.testing import THINK_DROPPING_TEMPLATE as THINK_DROPPING
from agentr1_trl.testing import record_rollouts, tiny_model, tiny_tokenizer, trainer_settings
from agentr1_trl.turn_rows import expand_turn_rows, turn_spans
from peft import LoraConfig

import agentr1_gym  # noqa: F401

ENV = "AgentR1/SyntheticMultihop-v0"

SEARCH = '<think>look it up</think><tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'


@pytest.fixture(scope="module")
def tok():
    t = copy.deepcopy(tiny_tokenizer())
    t.chat_template = THINK_DROPPING
    return t


def _script(tok):
    """Odd episodes answer at once (format bonus); even ones search, write a malformed turn, then answer
    (format penalty, no bonus): the return varies within a group. The first turn's live index picks the kind."""

    def script(prompt_ids, i):
        text = tok.decode(prompt_ids)
        turn = text.count("<|im_start|>assistant") - 1
        if turn == 0:
            return SEARCH if i % 2 == 0 else "<think>so</think><answer>Nobody</answer>"
        return "<think>hmm</think>" if turn == 1 else "<think>so</think><answer>Nobody</answer>"

    return script


def _batch(trajs, pad_id, advantages):
    """A batch as TRL builds it from our rollout rows (prompts left-padded, completions right-padded)."""
    n = len(trajs)
    wp = max(len(t.prompt_ids) for t in trajs)
    wc = max(len(t.completion_ids) for t in trajs)
    b = {
        "prompt_ids": torch.full((n, wp), pad_id),
        "prompt_mask": torch.zeros((n, wp), dtype=torch.long),
        "completion_ids": torch.full((n, wc), pad_id),
        "completion_mask": torch.zeros((n, wc), dtype=torch.long),
        "action_mask": torch.zeros((n, wc), dtype=torch.long),
        "sampling_per_token_logps": torch.zeros((n, wc)),
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": torch.tensor(7.0),
    }
    for i, t in enumerate(trajs):
        p, c = len(t.prompt_ids), len(t.completion_ids)
        b["prompt_ids"][i, wp - p :] = torch.tensor(t.prompt_ids)
        b["prompt_mask"][i, wp - p :] = 1
        b["completion_ids"][i, :c] = torch.tensor(t.completion_ids)
        b["completion_mask"][i, :c] = 1
        b["action_mask"][i, :c] = torch.tensor(t.action_mask)
        b["sampling_per_token_logps"][i, :c] = torch.tensor([0.01 * (k + 1) for k in range(c)])
    return b


def test_expand_turn_rows_cuts_each_episode_into_its_turns(tok):
    envs = [gym.make(ENV, max_turns=3) for _ in range(2)]
    (unstable,) = collect_rollouts(envs[:1], ScriptedGenerator(tok, _script(tok)), tok, seeds=[3])
    (stable,) = collect_rollouts(
        envs[1:], ScriptedGenerator(tiny_tokenizer(), _script(tok)), tiny_tokenizer(), seeds=[3]
    )
    assert not unstable.one_sequence and unstable.num_turns == 3 and stable.one_sequence
    # the action timeline: only generated ids, turn ends indexing it
    assert all(unstable.action_mask) and len(unstable.completion_ids) == sum(
        len(g) for _, g, _ in unstable.turns
    )
    assert [e + 1 for e in unstable.turn_ends] == [end for _, end in turn_spans(unstable)]
    pad = tok.pad_token_id
    batch = _batch([stable, unstable], pad, [0.5, -1.5])
    out, turn_rows = expand_turn_rows(batch, [stable, unstable], pad_id=pad, multiple=4)
    assert turn_rows == [1, 2, 3] and out["completion_ids"].size(0) == 4  # 1 + 3 turns
    assert out["advantages"].tolist() == [0.5, -1.5, -1.5, -1.5]
    out2, _ = expand_turn_rows(batch, [stable, unstable], pad_id=pad, multiple=3)
    assert out2["completion_ids"].size(0) == 6  # padded with 2 zero-mask dummies
    assert out2["advantages"][4:].tolist() == [0.0, 0.0] and out2["completion_mask"][4:].sum() == 0
    assert out2["action_mask"][4:].sum() == 0
    # the stable row is unchanged
    pw = out["prompt_ids"].size(1)
    assert out["prompt_ids"][0, pw - len(stable.prompt_ids) :].tolist() == stable.prompt_ids
    assert out["completion_ids"][0, : len(stable.completion_ids)].tolist() == stable.completion_ids
    assert out["action_mask"][0, : len(stable.action_mask)].tolist() == stable.action_mask
    # each turn row: its own context (earlier thinking dropped) and its own generated ids and sampler log-probs
    for row, (context, gen, _), (start, end) in zip(turn_rows, unstable.turns, turn_spans(unstable)):
        mask = out["prompt_mask"][row].bool()
        assert out["prompt_ids"][row][mask].tolist() == context
        assert out["completion_ids"][row, : len(gen)].tolist() == gen
        assert out["completion_mask"][row].sum() == len(gen) == out["action_mask"][row].sum()
        expected = batch["sampling_per_token_logps"][1, start:end]
        assert torch.equal(out["sampling_per_token_logps"][row, : len(gen)], expected)
    assert "look it up" not in tok.decode(out["prompt_ids"][2][out["prompt_mask"][2].bool()])
    assert "look it up" in tok.decode(out["completion_ids"][1])
    assert out["num_items_in_batch"] == 7.0


def _config_kwargs(tmp_path, **kw):
    # one update pass per micro-batch (max_update_tokens=0): these tests read each micro-batch whole in the loss;
    # passes bounded by tokens have their own tests (tests/trl/test_trl_forward.py)
    settings = {"beta": 0.04, "max_new_tokens_per_turn": 64, "max_update_tokens": 0, **kw}
    return trainer_settings(tmp_path, **settings)


def _capture_loss_batches(trainer, check):
    """Wrap the trainer's loss to record each micro-batch with ``check(model, batch)``, computed before the
    update."""
    seen = []
    loss = trainer.loss

    def wrapped(model, batch):
        seen.append((batch, check(model, batch)))
        return loss(model, batch)

    trainer.loss = wrapped
    return seen


@torch.no_grad()
def _reference_checks(trainer, model, batch):
    """The reference log-probs (adapter disabled) of every row, computed here in the row's own context."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    with trainer.accelerator.unwrap_model(model).disable_adapter():
        ref = trainer.token_logps(model, ids, attention, width)
    return ref


@pytest.mark.parametrize("algo", ["grpo", "reinforce_pp"])
def test_grpo_trains_on_per_turn_rows(tmp_path, tok, algo):
    model = tiny_model(tiny_tokenizer(), seed=0)
    args = AgentGRPOConfig(**_config_kwargs(tmp_path, advantage_estimator=algo))
    trainer = AgentGRPOTrainer(
        model,
        args,
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, _script(tok)),
    )
    seen = record_rollouts(trainer)
    batches = _capture_loss_batches(trainer, lambda model, batch: _reference_checks(trainer, model, batch))
    lora = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_" in k}
    trainer.train()
    assert any(not t.one_sequence for t in seen)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert any(h.get("signal/per_turn_rows", 0) > 0 for h in trainer.state.log_history)
    assert any(not torch.equal(v, lora[k]) for k, v in trainer.model.named_parameters() if "lora_" in k)
    batch, ref = batches[0]
    mask = batch["completion_mask"].bool()
    # the reference log-probs the loss used are each row's own (recomputed for per-turn rows)
    assert torch.allclose(batch["ref_per_token_logps"][mask], ref[mask], atol=1e-5)
    # one row per turn of each episode that is not prefix-stable, one row per other episode
    first = seen[: args.per_device_train_batch_size]
    assert batch["completion_ids"].size(0) == sum(1 if t.one_sequence else t.num_turns for t in first)
    if algo == "grpo":  # an episode-level advantage, repeated on each of the episode's rows
        assert batch["advantages"].dim() == 1 and len(set(batch["advantages"].tolist())) == 2


@pytest.mark.slow
def test_ppo_trains_on_per_turn_rows_with_each_turns_values(tmp_path, tok):
    model = tiny_model(tiny_tokenizer(), seed=0)
    args = AgentPPOConfig(**_config_kwargs(tmp_path, max_steps=1))
    trainer = AgentPPOTrainer(
        model,
        args,
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, _script(tok)),
    )
    # a value head that is not zero, so that values depend on the context
    torch.nn.init.normal_(trainer.value_head.weight, std=0.5)

    @torch.no_grad()
    def values(model, batch):
        ids, attention, n = trainer._inputs(batch)
        return trainer._logps_and_values(model, ids, attention, n)[1]

    seen = _capture_loss_batches(trainer, values)
    trainer.train()
    assert math.isfinite(trainer.state.log_history[0]["loss"])
    batch, values = seen[0]
    assert batch["completion_ids"].size(0) > args.per_device_train_batch_size
    mask = batch["action_mask"].bool()
    # the values GAE used (old_values) are the value head's on each row's own context
    assert torch.allclose(batch["old_values"][mask], values[mask], atol=1e-5)
    assert batch["old_values"][mask].abs().sum() > 0
