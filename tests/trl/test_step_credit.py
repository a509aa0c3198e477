"""Step-level credit: the estimators against hand-computed cases, the per-turn baseline's unbiasedness checked by
Monte Carlo against the exact gradient of a small MDP (and the naive per-turn normalisation shown biased), and
the wiring: GRPO (gigpo, turn_rloo) and PPO (gae_level='step') train on both token timelines and log their
signal metrics; world state keys reach the step groups."""

from __future__ import annotations

import copy
import math
import os
import random

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from agentr1_trl.advantages import (
    gigpo_advantages,
    step_advantages_to_tokens,
    step_gae_advantages,
    step_returns,
    turn_rloo_advantages,
)
from agentr1_trl.signals import turn_rewards, turn_starts, turn_state_keys

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import Trajectory


def _close(a, b, tol=1e-6):
    return all(len(x) == len(y) and all(abs(p - q) <= tol for p, q in zip(x, y)) for x, y in zip(a, b))


def test_step_returns_are_discounted_returns_to_go():
    assert step_returns([[1.0, 0.0, 2.0], []], gamma=0.5) == [[1.5, 1.0, 2.0], []]


def test_gigpo_by_hand():
    # one group of two episodes; states A and B are visited by both, C by one
    rewards = [[0.0, 1.0], [0.0, 0.0, 0.0]]
    keys = [["A", "B"], ["A", "C", "B"]]
    adv, metrics = gigpo_advantages([1.0, 0.0], rewards, keys, 2, scale=False)
    # episode: +-0.5; step groups A: G (1, 0) -> +-0.5, B: G (1, 0) -> +-0.5; C alone -> 0
    assert _close(adv, [[1.0, 1.0], [-1.0, -0.5, -1.0]])
    assert metrics["step_groups_nontrivial"] == pytest.approx(4 / 5)
    assert metrics["step_baseline_explained"] == pytest.approx(0.0)  # both groups have the same mean
    scaled, _ = gigpo_advantages([1.0, 0.0], rewards, keys, 2)
    r = 1 / math.sqrt(2)  # 0.5 / std(1, 0)
    assert _close(scaled, [[2 * r, 2 * r], [-2 * r, -r, -2 * r]], tol=1e-5)
    weighted, _ = gigpo_advantages([1.0, 0.0], rewards, keys, 2, scale=False, step_weight=0.0)
    assert _close(weighted, [[0.5, 0.5], [-0.5, -0.5, -0.5]])  # weight 0: GRPO's advantage on every turn


def test_gigpo_step_groups_stay_inside_their_task_group():
    # two groups; the same key in different groups (different tasks) never shares a baseline
    adv, metrics = gigpo_advantages(
        [1.0, 1.0, 0.0, 0.0], [[1.0], [1.0], [0.0], [0.0]], [["s"]] * 4, 2, scale=False
    )
    assert _close(adv, [[0.0]] * 4) and metrics["step_groups_nontrivial"] == 1.0
    # the returns differ between the tasks, not inside a step group: the step means explain all of it
    assert metrics["step_baseline_explained"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="groups of 3"):
        gigpo_advantages([1.0] * 4, [[1.0]] * 4, [["s"]] * 4, 3)


def test_gigpo_explained_variance_by_hand():
    # states X (G 2, 0) and Y (G 5, 5): the step means (1, 1, 5, 5) explain part of the spread of (2, 0, 5, 5)
    adv, metrics = gigpo_advantages(
        [2.0, 5.0, 0.0, 5.0], [[2.0], [5.0], [0.0], [5.0]], [["X"], ["Y"], ["X"], ["Y"]], 4, scale=False
    )
    mean = 3.0
    total = (2 - mean) ** 2 + (0 - mean) ** 2 + 2 * (5 - mean) ** 2
    assert metrics["step_baseline_explained"] == pytest.approx(1 - 2.0 / total)
    assert _close(adv, [[-1.0 + 1.0], [2.0 + 0.0], [-3.0 - 1.0], [2.0 + 0.0]])


def test_turn_rloo_by_hand():
    rewards = [[0.0, 1.0], [0.0, 0.0, 0.0], [1.0]]
    adv, metrics = turn_rloo_advantages(rewards, 3)
    # turn 0: baselines (0+1)/2, (1+1)/2, (1+0)/2; turn 1: ep0 vs ep1 only; turn 2: ep1 alone (baseline 0)
    assert _close(adv, [[0.5, 1.0], [-1.0, -1.0, 0.0], [0.5]])
    g, b = [1, 1, 0, 0, 0, 1], [0.5, 0, 1, 1, 0, 0.5]
    expected = 1 - sum((x - y) ** 2 for x, y in zip(g, b)) / sum((x - 0.5) ** 2 for x in g)
    assert metrics["step_baseline_explained"] == pytest.approx(expected)


def test_step_gae_by_hand():
    adv, ret = step_gae_advantages([[0.0, 1.0]], [[0.5, 0.8]], gamma=1.0, lam=1.0, whiten=False)
    assert _close(adv, [[0.5, 0.2]]) and _close(ret, [[1.0, 1.0]])
    adv, _ = step_gae_advantages([[0.0, 1.0]], [[0.5, 0.8]], gamma=0.9, lam=0.5, whiten=False)
    d1 = 1.0 - 0.8
    d0 = 0.0 + 0.9 * 0.8 - 0.5
    assert _close(adv, [[d0 + 0.45 * d1, d1]])
    white, _ = step_gae_advantages([[0.0, 1.0], [1.0]], [[0.5, 0.8], [0.0]], gamma=1.0, lam=1.0)
    flat = [0.5, 0.2, 1.0]
    m = sum(flat) / 3
    s = math.sqrt(sum((x - m) ** 2 for x in flat) / 3)
    assert _close(white, [[(0.5 - m) / s, (0.2 - m) / s], [(1.0 - m) / s]], tol=1e-5)


def test_turn_advantages_reach_exactly_their_turns_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0]])
    out = step_advantages_to_tokens([[2.0, -1.0], [3.0, 4.0]], [[1, 6], [0, 3]], mask)
    assert out.tolist() == [[2, 2, 0, 0, -1, -1, -1, 0], [3, 4, 4, 4, 0, 0, 0, 0]]


# ---- unbiasedness, by Monte Carlo on an MDP whose gradient is known ------------------------------------------
def _sample_episode(rng: random.Random, q: float, horizon: int) -> tuple[list[int], list[float]]:
    """At each turn the agent goes on (a=1, reward 1) with probability q or stops (a=0, reward 0, the end)."""
    actions, rewards = [], []
    for _ in range(horizon):
        a = 1 if rng.random() < q else 0
        actions.append(a)
        rewards.append(float(a))
        if not a:
            break
    return actions, rewards


def _mean_gradient(baseline: str, q: float, groups: int, size: int = 4, horizon: int = 3) -> float:
    rng = random.Random(0)
    total = 0.0
    for _ in range(groups):
        eps = [_sample_episode(rng, q, horizon) for _ in range(size)]
        rewards = [r for _, r in eps]
        if baseline == "turn_rloo":
            adv, _ = turn_rloo_advantages(rewards, size)
        else:  # naive: each turn against the mean of the episodes that reached it, itself included
            g = step_returns(rewards)
            adv = []
            for i in range(size):
                row = []
                for t in range(len(g[i])):
                    reached = [g[j][t] for j in range(size) if len(g[j]) > t]
                    row.append(g[i][t] - sum(reached) / len(reached))
                adv.append(row)
        for (actions, _), a_row in zip(eps, adv):
            total += sum((a - q) * x for a, x in zip(actions, a_row))  # d log pi / d logit = a - q
    return total / (groups * size)


def test_the_per_turn_baseline_is_unbiased_when_episode_lengths_differ():
    q = 0.6
    exact = (1 + 2 * q + 3 * q * q) * q * (1 - q)  # d/dlogit of E[return] = q + q^2 + q^3
    rloo = _mean_gradient("turn_rloo", q, 20000)
    naive = _mean_gradient("naive", q, 20000)
    assert rloo == pytest.approx(exact, rel=0.03)  # the Monte Carlo error here is about 1%
    assert naive < 0.85 * exact  # self-inclusion shrinks each turn's gradient by 1 - 1/n_t


# ---- the trajectory side ------------------------------------------------------------------------------------
def _traj(one_sequence=True):
    # prompt [9]; turn 0 = [1, 2], observation [7], turn 1 = [3]
    t = Trajectory(prompt_ids=[9], completion_ids=[1, 2, 7, 3], action_mask=[1, 1, 0, 1], turn_ends=[1, 3])
    t.rewards = [0.5, 1.0]
    t.reward_components = [{"process": 0.5}, {"answer": 1.0}]
    return t


def test_turns_their_rewards_starts_and_states():
    t = _traj()
    assert turn_starts(t) == [0, 3]
    assert turn_rewards(t, "return") == [0.5, 1.0] and turn_rewards(t, "outcome") == [0.0, 1.0]
    same, other = _traj(), _traj()
    other.completion_ids = [1, 5, 7, 3]  # a different first turn: a different history before turn 1
    k, k_same, k_other = turn_state_keys(t), turn_state_keys(same), turn_state_keys(other)
    assert k == k_same and k[0] == k_other[0] and k[1] != k_other[1]
    t.state_keys = ["room", "kitchen"]  # a world's keys win over the history
    other.state_keys = ["room", "kitchen"]
    assert turn_state_keys(t) == turn_state_keys(other) == [("state", "room"), ("state", "kitchen")]


def test_a_history_has_one_key_on_both_timelines():
    """A one-turn episode stays prefix-stable while its group's longer episodes become per-turn rows (a template
    that drops earlier thinking): the same prompt must still be the same state, or GiGPO finds no step group."""
    whole = Trajectory(prompt_ids=[9, 8], completion_ids=[1, 2], action_mask=[1, 1], turn_ends=[1])
    rows = Trajectory(prompt_ids=[9, 8], completion_ids=[1, 3, 4], action_mask=[1, 1, 1], turn_ends=[1, 2],
                      one_sequence=False, turns=[([9, 8], [1, 3], []), ([9, 8, 1, 7], [4], [])])  # fmt: skip
    assert turn_state_keys(whole)[0] == turn_state_keys(rows)[0]
    longer = Trajectory(prompt_ids=[9, 8], completion_ids=[1, 7, 4], action_mask=[1, 0, 1], turn_ends=[0, 2])
    assert turn_state_keys(longer)[1] == turn_state_keys(rows)[1]  # the same ids before the turn


def test_world_state_keys_are_recorded_by_rollouts():
    from agentr1_trl import collect_rollouts
    from agentr1_trl.backends import ScriptedGenerator
    from agentr1_trl.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    envs = [agentr1_gym.make("AgentR1/WebShop-v0") for _ in range(2)]
    script = ScriptedGenerator(
        tok,
        lambda prompt, i: '<tool_call>{"name": "search", "arguments": {"query": "red shoes"}}</tool_call>',
    )
    trajs = collect_rollouts(envs, script, tok, seeds=[0, 0], record_state_keys=True,
                             sampling=__import__("agentr1_trl").SamplingConfig(max_new_tokens=64))  # fmt: skip
    for t in trajs:
        assert len(t.state_keys) == t.num_turns >= 1 and all(k is not None for k in t.state_keys)
    # the same task, the same first state; equal actions lead to equal states
    assert trajs[0].state_keys == trajs[1].state_keys
    plain = collect_rollouts([agentr1_gym.make("AgentR1/WebShop-v0")], script, tok, seeds=[0],
                             sampling=__import__("agentr1_trl").SamplingConfig(max_new_tokens=64))  # fmt: skip
    assert plain[0].state_keys == [None] * plain[0].num_turns  # not asked: not computed


# ---- wiring ---------------------------------------------------------------------------------------------------
SEARCH = '<think>look it up</think><tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'


def _multi_turn_script(tok):
    """Even episodes search, write a malformed turn, then answer; odd ones answer at once (returns vary in a
    group, and the searching episodes share their first states)."""

    def script(prompt_ids, i):
        turn = tok.decode(prompt_ids).count("<|im_start|>assistant") - 1
        if turn == 0:
            return SEARCH if i % 2 == 0 else "<think>so</think><answer>Nobody</answer>"
        return "<think>hmm</think>" if turn == 1 else "<think>so</think><answer>Nobody</answer>"

    return script


def _grpo(tmp_path, tok, **kw):
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.testing import tiny_model
    from peft import LoraConfig

    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1, learning_rate=5e-2,
        logging_steps=1, report_to="none", max_new_tokens_per_turn=16, max_episode_tokens=1536, save_strategy="no",
        use_cpu=True, bf16=False, seed=0, env_kwargs={"max_turns": 3}, **kw,
    )  # fmt: skip
    return AgentGRPOTrainer(
        tiny_model(tok, seed=0), args, tok, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, _multi_turn_script(tok)),
    )  # fmt: skip


def _train_one_step(tmp_path, estimator, timeline):
    """One GRPO step on the scripted episodes (per-turn rows: a template that drops earlier thinking): the
    trainer, its LoRA B weights before the step, the episodes it collected and the first scored batch's
    advantages (one row per episode)."""
    from agentr1_trl.testing import THINK_DROPPING_TEMPLATE, record_rollouts, tiny_tokenizer

    tok = copy.deepcopy(tiny_tokenizer())
    if timeline == "per-turn rows":
        tok.chat_template = THINK_DROPPING_TEMPLATE
    trainer = _grpo(tmp_path, tok, advantage_estimator=estimator)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if "lora_B" in k}
    seen = record_rollouts(trainer)
    advantages = []
    score = trainer.score_batch

    def recording(batch, trajectories):
        out = score(batch, trajectories)
        advantages.append(out["advantages"].clone())
        return out

    trainer.score_batch = recording
    trainer.train()
    assert any(not t.one_sequence for t in seen) == (timeline == "per-turn rows")
    return trainer, before, seen, advantages[0]


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["gigpo", "turn_rloo"])
@pytest.mark.parametrize("timeline", ["sequence", "per-turn rows"])
def test_grpo_trains_with_step_level_credit(tmp_path, estimator, timeline):
    trainer, before, _, adv = _train_one_step(tmp_path, estimator, timeline)
    assert adv.dim() == 2 and adv.abs().sum() > 0  # per token, not one number per episode
    log = next(h for h in trainer.state.log_history if "loss" in h)
    assert "signal/step_baseline_explained" in log or "signal/step_groups_nontrivial" in log
    if estimator == "gigpo":
        assert 0.0 <= log["signal/step_groups_nontrivial"] <= 1.0
    after = {k: v for k, v in trainer.model.named_parameters() if "lora_B" in k}
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_ppo_step_level_gae_trains(tmp_path):
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
    from agentr1_trl.testing import tiny_model, tiny_tokenizer
    from peft import LoraConfig

    tok = tiny_tokenizer()
    args = AgentPPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1, learning_rate=5e-2,
        logging_steps=1, report_to="none", max_new_tokens_per_turn=16, max_episode_tokens=1536, save_strategy="no",
        use_cpu=True, bf16=False, seed=0, env_kwargs={"max_turns": 3}, gae_level="step",
    )  # fmt: skip
    trainer = AgentPPOTrainer(
        tiny_model(tok, seed=0), args, tok, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, _multi_turn_script(tok)),
    )  # fmt: skip
    seen = []
    score = trainer.score_batch

    def recording(batch, trajectories):
        out = score(batch, trajectories)
        seen.append((out, trajectories))
        return out

    trainer.score_batch = recording
    trainer.train()
    out, trajs = seen[0]
    adv = out["advantages"]
    for b, t in enumerate(trajs):  # one advantage per turn, on exactly that turn's generated tokens
        for s, end in zip(turn_starts(t), t.turn_ends):
            values = adv[b, s : end + 1][torch.tensor(t.action_mask[s : end + 1]).bool()]
            assert torch.allclose(values, values[0].expand_as(values))
    assert any(h.get("loss/value") is not None for h in trainer.state.log_history)


def test_bad_settings_are_refused():
    from agentr1_trl.grpo import AgentGRPOConfig
    from agentr1_trl.ppo import AgentPPOConfig

    common = dict(output_dir="/tmp/x", report_to="none", use_cpu=True)
    with pytest.raises(ConfigError, match="advantage_estimator must be one of"):
        AgentGRPOConfig(**common, advantage_estimator="gigp0")
    with pytest.raises(ConfigError, match="step_advantage_weight must be >= 0"):
        AgentGRPOConfig(**common, advantage_estimator="gigpo", step_advantage_weight=-1.0)
    with pytest.raises(ConfigError, match="gae_level must be"):
        AgentPPOConfig(**common, gae_level="turn")


@pytest.mark.parametrize(
    "algo, key, value", [("grpo", "advantage_estimator", "gigpo"), ("ppo", "gae_level", "step")]
)
def test_the_credit_flag_selects_step_level_credit(algo, key, value):
    import argparse

    from agentr1_trl.cli import _plan, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    settings, *_ = _plan(parser.parse_args(["train", "--algo", algo, "--credit", "step"]))
    assert settings[key] == value
    settings, *_ = _plan(
        parser.parse_args(["train", "--algo", algo, "--credit", "step", "--set", f"{key}=x"])
    )
    assert settings[key] == "x"  # --set wins
    settings, *_ = _plan(parser.parse_args(["train", "--algo", algo]))
    assert key not in settings  # the config's default (trajectory level)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["gigpo", "turn_rloo"])
def test_step_credit_gives_per_turn_rows_the_whole_chats_advantages(tmp_path, estimator):
    """The same episodes scored on the whole chat's timeline and on per-turn rows' (a template that drops earlier
    thinking): every action token gets the same advantage, in the same order (a row's turn is not shifted onto
    its neighbour's advantage)."""
    seen: dict[str, list[torch.Tensor]] = {}
    for timeline in ("sequence", "per-turn rows"):
        _, _, trajs, adv = _train_one_step(tmp_path / timeline.replace(" ", "-"), estimator, timeline)
        seen[timeline] = [
            adv[i, : len(t.action_mask)][torch.tensor(t.action_mask) == 1]
            for i, t in enumerate(trajs[: adv.size(0)])
        ]
    assert len(seen["sequence"]) == len(seen["per-turn rows"]) == 4
    for whole, rows in zip(seen["sequence"], seen["per-turn rows"]):
        assert torch.allclose(whole, rows, atol=1e-6)
    assert (
        torch.cat(seen["sequence"]).unique().numel() > 1
    )  # the advantages vary: there was something to compare
