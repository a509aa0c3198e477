"""The advantage estimators, each declared once: what it needs and how it scores.

An estimator is the value of one config setting: GRPO's ``advantage_estimator`` (``grpo``, ``rloo``,
``reinforce_pp``, ``gigpo``, ``turn_rloo``) or PPO's ``gae_level`` (``token``, ``step``). Each entry says its
level (one advantage per episode, per action token or per turn), whether it compares a group's episodes (so it
needs ``num_generations >= 2``), whether rollouts must record each turn's world state, which value
``agentr1 train --credit trajectory|step`` selects, and, for the GRPO family, its scoring function. Config
validation, the trainers, the CLI and ``benchmarks/learning.py`` each look an estimator up here; none compares the
name itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import Trajectory
from agentr1_trl.advantages import (
    gigpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    step_advantages_to_tokens,
    turn_rloo_advantages,
)
from agentr1_trl.signals import token_reward_matrix, turn_rewards, turn_state_keys

__all__ = ["ESTIMATORS", "Estimator", "ScoreInputs", "credit_choice", "estimator", "names"]


@dataclass(frozen=True)
class ScoreInputs:
    """What a GRPO-family estimator scores: the whole generation batch (every process's episodes, a group's
    together), its loss timeline ``mask`` (rows x completion tokens), each episode's return, the group size and the
    trainer's config (``gamma``, ``reward_signal``, ``step_advantage_weight``, ``scale_rewards``)."""

    trajectories: Sequence[Trajectory]
    mask: torch.Tensor
    returns: Sequence[float]
    group: int
    args: Any


#: ``(inputs) -> (advantages per row and completion token, metrics to log under signal/)``
Scorer = Callable[[ScoreInputs], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class Estimator:
    name: str
    algo: str  #: "grpo" (the GRPO trainer's ``advantage_estimator``) or "ppo" (PPO's ``gae_level``)
    level: str  #: "trajectory" (one per episode), "token" (per action token) or "step" (one per turn)
    group: bool  #: compares a group's episodes: needs ``num_generations >= 2``
    state_keys: bool  #: groups turns by the world state they start from: rollouts record ``state_key()``
    credit: str  #: what ``--credit`` calls it: "trajectory" or "step"
    help: str
    #: GRPO family: the advantages; None where the trainer computes them itself (TRL's group normalisation for
    #: ``grpo``, GAE for PPO)
    score: Scorer | None = None

    @property
    def setting(self) -> str:
        """The config field whose value selects it."""
        return "advantage_estimator" if self.algo == "grpo" else "gae_level"


def _rloo(x: ScoreInputs) -> tuple[torch.Tensor, dict[str, float]]:
    return rloo_advantages(torch.tensor(list(x.returns), dtype=torch.float32), x.group), {}


def _reinforce_pp(x: ScoreInputs) -> tuple[torch.Tensor, dict[str, float]]:
    rewards = token_reward_matrix(list(x.trajectories), x.mask.size(1), x.args.reward_signal)
    return reinforce_pp_advantages(rewards, x.mask, gamma=x.args.gamma), {}


def _per_turn(
    x: ScoreInputs, per_turn: Any, metrics: dict[str, float]
) -> tuple[torch.Tensor, dict[str, float]]:
    return step_advantages_to_tokens(per_turn, [t.turn_ends for t in x.trajectories], x.mask), metrics


def _gigpo(x: ScoreInputs) -> tuple[torch.Tensor, dict[str, float]]:
    per_turn, metrics = gigpo_advantages(
        list(x.returns),
        [turn_rewards(t, x.args.reward_signal) for t in x.trajectories],
        [turn_state_keys(t) for t in x.trajectories],
        x.group,
        gamma=x.args.gamma,
        step_weight=x.args.step_advantage_weight,
        scale=x.args.scale_rewards not in ("none", False),
    )
    return _per_turn(x, per_turn, metrics)


def _turn_rloo(x: ScoreInputs) -> tuple[torch.Tensor, dict[str, float]]:
    rewards = [turn_rewards(t, x.args.reward_signal) for t in x.trajectories]
    per_turn, metrics = turn_rloo_advantages(rewards, x.group, gamma=x.args.gamma)
    return _per_turn(x, per_turn, metrics)


_ALL = (
    Estimator("grpo", "grpo", "trajectory", group=True, state_keys=False, credit="trajectory",
              help="group-normalised episode return (TRL's own normalisation)"),
    Estimator("rloo", "grpo", "trajectory", group=True, state_keys=False, credit="",
              help="episode return minus the mean of the group's other episodes", score=_rloo),
    Estimator("reinforce_pp", "grpo", "token", group=False, state_keys=False, credit="",
              help="per-token return-to-go over action tokens, batch-whitened (process rewards at the turns that "
                   "earned them)", score=_reinforce_pp),
    Estimator("gigpo", "grpo", "step", group=True, state_keys=True, credit="step",
              help="GRPO's episode advantage plus a step-level one among the group's turns taken from the same "
                   "world state", score=_gigpo),
    Estimator("turn_rloo", "grpo", "step", group=True, state_keys=False, credit="",
              help="each turn's return-to-go minus the other episodes' at the same turn", score=_turn_rloo),
    Estimator("token", "ppo", "token", group=False, state_keys=False, credit="trajectory",
              help="GAE over the action-token timeline (each token a step, values per token)"),
    Estimator("step", "ppo", "step", group=False, state_keys=False, credit="step",
              help="StepPO's step-level GAE: each turn a step valued at the state it starts from, its advantage "
                   "shared by its tokens and whitened over turns"),
)  # fmt: skip
#: (algo, name) -> estimator
ESTIMATORS: dict[tuple[str, str], Estimator] = {(e.algo, e.name): e for e in _ALL}


def names(algo: str) -> tuple[str, ...]:
    """The estimators of ``algo`` ("grpo" or "ppo"), in the order the docs list them."""
    return tuple(e.name for e in _ALL if e.algo == algo)


def estimator(algo: str, name: str) -> Estimator:
    """The estimator ``name`` of ``algo``; a one-line ConfigError naming the choices for an unknown one."""
    found = ESTIMATORS.get((algo, name))
    if found is None:
        setting = "advantage_estimator" if algo == "grpo" else "gae_level"
        raise ConfigError(f"{setting} must be one of {', '.join(map(repr, names(algo)))}, got {name!r}")
    return found


def credit_choice(algo: str, credit: str) -> tuple[str, str]:
    """``--credit trajectory|step`` as ``(setting, value)`` for ``algo``."""
    for e in _ALL:
        if e.algo == algo and e.credit == credit:
            return e.setting, e.name
    raise ConfigError(f"--credit must be 'trajectory' or 'step', got {credit!r}")
