"""Advantage estimators and loss pieces against hand-computed values."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentr1_trl.advantages import (  # noqa: E402
    gae_advantages,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    rloo_advantages,
)
from agentr1_trl.losses import aggregate, clipped_policy_loss, clipped_value_loss, kl_penalty  # noqa: E402

# a two-turn trajectory: action, action, tool, tool, action (+ right padding)
MASK = torch.tensor([[1, 1, 0, 0, 1, 0]])
REWARDS = torch.tensor([[0.0, 0.1, 0.0, 0.0, 1.0, 0.0]])  # process reward at turn 1's end, outcome at the end
VALUES = torch.tensor([[0.5, 0.6, 9.0, 9.0, 0.8, 7.0]])  # values on tool/pad tokens must be ignored


def test_grpo():
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), 2)
    assert adv.tolist() == pytest.approx(
        [0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4), 0.0, 0.0]
    )
    assert grpo_advantages(torch.tensor([1.0, 0.0]), 2, scale=False).tolist() == [0.5, -0.5]


def test_rloo():
    assert rloo_advantages(torch.tensor([1.0, 0.0, 2.0]), 3).tolist() == pytest.approx([0.0, -1.5, 1.5])
    with pytest.raises(ValueError):
        rloo_advantages(torch.tensor([1.0]), 1)


def test_gae_skips_tool_tokens():
    adv, ret = gae_advantages(REWARDS, VALUES, MASK, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.6, 0.5, 0, 0, 0.2, 0])
    assert ret[0].tolist() == pytest.approx([1.1, 1.1, 0, 0, 1.0, 0])
    adv, _ = gae_advantages(REWARDS, VALUES, MASK, gamma=0.9, lam=0.5)
    assert adv[0].tolist() == pytest.approx([0.1795, 0.31, 0, 0, 0.2, 0])


def test_gae_batch_rows_are_independent():
    mask = torch.cat([MASK, torch.tensor([[1, 0, 0, 0, 0, 0]])])
    rewards = torch.cat([REWARDS, torch.tensor([[2.0, 0, 0, 0, 0, 0]])])
    values = torch.cat([VALUES, torch.tensor([[0.5, 0, 0, 0, 0, 0]])])
    adv, _ = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    assert adv[1].tolist() == pytest.approx([1.5, 0, 0, 0, 0, 0])
    assert adv[0].tolist() == pytest.approx([0.6, 0.5, 0, 0, 0.2, 0])


def test_reinforce_pp_returns_to_go_over_action_tokens():
    out = reinforce_pp_advantages(REWARDS, MASK, gamma=1.0, whiten=False)
    assert out[0].tolist() == pytest.approx([1.1, 1.1, 0, 0, 1.0, 0])
    out = reinforce_pp_advantages(REWARDS, MASK, gamma=0.5, whiten=False)
    assert out[0].tolist() == pytest.approx([0.05 + 0.25, 0.1 + 0.5, 0, 0, 1.0, 0])
    white = reinforce_pp_advantages(REWARDS, MASK)
    vals = white[MASK.bool()]
    assert float(vals.mean()) == pytest.approx(0.0, abs=1e-5) and float(white[0, 2]) == 0.0


def test_masked_whiten():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 0]])
    assert masked_whiten(x, m)[0].tolist() == pytest.approx([-1.0, 1.0, 0.0], abs=1e-3)


def test_kl_estimators():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(math.exp(-1) + 1 - 1)
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0
    with pytest.raises(ValueError):
        kl_penalty(lp, ref, "k2")


def test_clipped_policy_loss():
    lp, old = torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([[-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    loss = clipped_policy_loss(lp, old, torch.tensor([[1.0, -1.0, 5.0]]), mask)
    assert loss[0].tolist() == pytest.approx([-1.2, math.exp(0.5), 0.0])
    seq = clipped_policy_loss(lp, old, torch.tensor([2.0]), mask)  # (B,) advantages broadcast over tokens
    assert seq[0].tolist() == pytest.approx([-2.4, -2.4, 0.0])


def test_loss_aggregation_by_loss_type():
    per_token = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(per_token, mask, "grpo").item() == pytest.approx((1.5 + 3.0) / 2)
    assert aggregate(per_token, mask, "dapo").item() == pytest.approx(6.0 / 3)
    assert aggregate(per_token, mask, "dr_grpo").item() == pytest.approx(6.0 / (2 * 3))
    # the whole micro-batch's denominators when only some rows are passed
    assert aggregate(per_token[:1], mask[:1], "dapo", (2, 3.0, 3)).item() == pytest.approx(3.0 / 3)
    with pytest.raises(ValueError):
        aggregate(per_token, mask, "cispo")


def test_clipped_value_loss_by_hand():
    values, old, returns = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.0]), torch.tensor([0.0, 1.0])
    # row 0: unclipped (1-0)^2 = 1, clipped to 0.7: 0.49 -> max 1; row 1: (0-1)^2 = 1 either way
    assert clipped_value_loss(values, old, returns, 0.2).tolist() == pytest.approx([0.5, 0.5])
