"""From episodes to the learning signal: which reward an advantage is computed from (the whole return, or the
outcome alone), per token and per turn, and per-step measurements of how much of the signal is outcome.

Per turn (the inputs of the step-level estimators in :mod:`agentr1_trl.advantages`): each turn's reward under the
run's reward signal (:func:`turn_rewards`), the state it acted from (:func:`turn_state_keys`) and where it starts in
the token timeline (:func:`turn_starts`), on both timelines (a single sequence, or the action timeline of per-turn
rows).

Pure functions over :class:`~agentr1_gym.rollout.Trajectory` lists and TRL's batch tensors (the masks the
advantages are computed over); GRPO and PPO both use them.
"""

from __future__ import annotations

from typing import Any

import torch

from agentr1_gym.errors import RewardRangeError
from agentr1_gym.rewards import reward_problem
from agentr1_gym.rollout import Trajectory

__all__ = [
    "advantage_mask",
    "answer_reward",
    "check_rewards",
    "env_return",
    "flat_outcome",
    "group_signal_metrics",
    "signal_return",
    "signal_token_rewards",
    "token_reward_matrix",
    "turn_rewards",
    "turn_starts",
    "turn_state_keys",
]


def check_rewards(trajectories: list[Trajectory]) -> None:
    """The trainer's door for rewards: every step reward, reward component and return of a batch is finite and
    within :data:`~agentr1_gym.rewards.REWARD_LIMIT`, or :class:`~agentr1_gym.errors.RewardRangeError` names the
    episode (an infinite or float32-overflowing reward would give NaN advantages and a silently wasted step)."""
    for i, traj in enumerate(trajectories):
        values = [("return", traj.episode_return)]
        values += [(f"step {t} reward", r) for t, r in enumerate(traj.rewards)]
        values += [(f"step {t} {k!r}", v) for t, c in enumerate(traj.reward_components) for k, v in c.items()]
        for where, value in values:
            problem = reward_problem(value)
            if problem is not None:
                raise RewardRangeError(
                    f"episode {i} of the batch (task {traj.task_id!r}): its {where} is {problem}; the step is not "
                    "trained on it. Fix the env's or agent's reward (see agentr1_gym.rewards.REWARD_LIMIT)"
                )


def env_return(prompts: list, completions: list, episode_return: list[float], **_: Any) -> list[float]:
    """A TRL reward function: the env's episode return, computed during the rollout (``episode_return`` is an
    extra field of the rollout's output)."""
    return [float(r) for r in episode_return]


def answer_reward(traj: Trajectory) -> float:
    """The answer part of an episode's return: its ``answer`` reward components (the env's ``outcome_reward``
    adds the format reward to it; the ``outcome`` signal compares answers alone)."""
    return float(sum(c.get("answer", 0.0) for c in traj.reward_components))


def signal_return(traj: Trajectory, signal: str) -> float:
    """What group-level estimators compare: the episode return ('return') or its outcome part ('outcome')."""
    return traj.episode_return if signal == "return" else answer_reward(traj)


def signal_token_rewards(traj: Trajectory, signal: str) -> list[float]:
    """Per completion token rewards for per-token estimators: every step reward ('return') or the answer reward
    only ('outcome'), on the last generated token of the turn that earned it."""
    return traj.token_rewards(None if signal == "return" else ("answer",))


def flat_outcome(group: list[Trajectory]) -> bool:
    """Whether a group's outcome cannot teach: every episode's answer reward equal (all solved, or all failed)."""
    outcomes = [answer_reward(t) for t in group]
    return max(outcomes) - min(outcomes) <= 1e-9


def group_signal_metrics(trajs: list[Trajectory], group_size: int) -> dict[str, float]:
    """How much of the learning signal is outcome: the fraction of groups whose outcome (answer reward) varies,
    of groups whose return varies, and the outcome's share of the within-group return deviations (what GRPO's
    advantages are made of)."""
    groups = [trajs[i : i + group_size] for i in range(0, len(trajs), group_size)]
    out_var = ret_var = 0
    dev_outcome = dev_shaping = 0.0
    for g in groups:
        outcomes = [answer_reward(t) for t in g]
        returns = [t.episode_return for t in g]
        shaping = [r - o for r, o in zip(returns, outcomes)]
        out_var += not flat_outcome(g)
        ret_var += max(returns) - min(returns) > 1e-9
        mo, ms = sum(outcomes) / len(g), sum(shaping) / len(g)
        dev_outcome += sum(abs(o - mo) for o in outcomes)
        dev_shaping += sum(abs(x - ms) for x in shaping)
    metrics = {
        "signal/outcome_varied_groups": out_var / max(len(groups), 1),
        "signal/return_varied_groups": ret_var / max(len(groups), 1),
    }
    if dev_outcome + dev_shaping > 0:
        metrics["signal/outcome_share"] = dev_outcome / (dev_outcome + dev_shaping)
    return metrics


def advantage_mask(batch: dict[str, Any], use_action_mask: bool) -> torch.Tensor:
    """The tokens per-token advantages are computed over: the action tokens (Agent-R1's advantage mask) or, for
    the ablation, every completion token."""
    completion = batch["completion_mask"]
    return completion * batch["action_mask"] if use_action_mask else completion


def token_reward_matrix(trajs: list[Trajectory], width: int, signal: str) -> torch.Tensor:
    """``(B, width)`` per-token rewards (see :func:`~agentr1_trl.signals.signal_token_rewards`)."""
    rewards = torch.zeros((len(trajs), width))
    for i, t in enumerate(trajs):
        tr = signal_token_rewards(t, signal)[:width]
        rewards[i, : len(tr)] = torch.tensor(tr)
    return rewards


# ---- per turn: the step-level estimators' inputs -------------------------------------------------------------


def turn_rewards(traj: Trajectory, signal: str) -> list[float]:
    """Each turn's reward: the env's step reward ('return': process rewards, plus the outcome on the last turn)
    or only its answer reward ('outcome')."""
    if signal == "return":
        return [float(r) for r in traj.rewards[: traj.num_turns]]
    return [float(c.get("answer", 0.0)) for c in traj.reward_components[: traj.num_turns]]


def turn_starts(traj: Trajectory) -> list[int]:
    """The completion index of each turn's first generated token."""
    starts, previous_end = [], -1
    mask = traj.action_mask
    for end in traj.turn_ends:
        k = previous_end + 1
        while k <= end and not mask[k]:
            k += 1
        starts.append(k)
        previous_end = end
    return starts


def turn_state_keys(traj: Trajectory) -> list[Any]:
    """The state each turn acted from: the env's ``state_key()`` where it has one (world envs: equal for equal
    world states, whatever path led there), else the exact history the turn was generated from (answer-shaped
    envs, whose state is the history: two turns share a state only after identical histories)."""
    recorded = traj.state_keys
    keys: list[Any] = []
    starts = turn_starts(traj) if traj.one_sequence else []
    for t in range(traj.num_turns):
        key = recorded[t] if t < len(recorded) else None
        if key is not None:
            keys.append(("state", key))
            continue
        # the token sequence the turn was generated from, in one form on both timelines: a one-turn episode is
        # prefix-stable beside its group's per-turn-row episodes, and the same prompt must give the same key
        if traj.one_sequence:
            history = tuple(traj.prompt_ids) + tuple(traj.completion_ids[: starts[t]])
        else:
            history = tuple(traj.turns[t][0])
        keys.append(("history", hash(history)))
    return keys
