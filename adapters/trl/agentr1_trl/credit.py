"""From trajectories to the per-turn inputs of the step-level estimators in :mod:`agentr1_trl.advantages`: each
turn's reward (under the run's reward signal), the state it acted from, and where it starts in the token
timeline. Works on both timelines (a single sequence, or the action timeline of per-turn rows)."""

from __future__ import annotations

from typing import Any

from agentr1_gym.rollout import Trajectory

__all__ = ["turn_rewards", "turn_starts", "turn_state_keys"]


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
    starts = turn_starts(traj) if traj.prefix_stable else []
    for t in range(traj.num_turns):
        key = recorded[t] if t < len(recorded) else None
        if key is not None:
            keys.append(("state", key))
            continue
        if traj.prefix_stable:
            history = (tuple(traj.prompt_ids), tuple(traj.completion_ids[: starts[t]]))
        else:
            history = tuple(traj.turns[t][0])
        keys.append(("history", hash(history)))
    return keys
