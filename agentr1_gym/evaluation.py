"""Evaluate a policy on an env: success, EM/F1, format validity and reward over many episodes.

A *policy* is any callable ``policy(obs, info, env) -> str`` that returns the next assistant turn
(``env`` is the unwrapped env, so scripted policies can read its state). Model-backed policies come with the TRL
adapter (``agentr1_trl``); :data:`POLICIES` holds the built-in scripted ones.
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentr1_gym.episodes import append_episodes, screenshot_of, scripted_record, turn_record
from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import task_facts

__all__ = [
    "POLICIES",
    "Policy",
    "evaluate",
    "for_display",
    "oracle_policy",
    "print_result",
    "random_policy",
    "success",
    "summarize",
    "task_list",
]

Policy = Callable[[str, dict[str, Any], Any], str]


def for_display(value: Any) -> Any:
    """``value`` with every float rounded to 6 significant digits (``1.0999999999999996`` -> ``1.1``)."""
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: for_display(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [for_display(v) for v in value]
    return value


def print_result(result: dict[str, Any], json_path: str | None = None) -> None:
    """A command's result: exact to ``json_path`` (if given), rounded for reading on stdout (the only thing a
    command prints there, so ``> result.json`` is valid JSON too)."""
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(for_display(result), indent=2), flush=True)


def task_list(env: Any) -> list[int]:
    """The task indices of an env with a fixed task list (its current split's), for ``--all-tasks``; a
    :class:`ConfigError` for a procedural env, whose tasks are as many as its seeds."""
    n = getattr(env.unwrapped, "num_tasks", None)
    if not n:
        raise ConfigError(
            f"--all-tasks needs an env with a fixed task list; {type(env.unwrapped).__name__} makes a task per seed "
            "(use --episodes N)"
        )
    return list(range(int(n)))


def success(metrics: dict[str, float]) -> float:
    """An episode's ``success`` metric (each env sets it at episode end by its own rule, ``env.is_success``)."""
    return float(metrics.get("success", 0.0))


def oracle_policy(obs: str, info: dict[str, Any], env: Any) -> str:
    """The env's own oracle (``env.oracle_action()``): knows the gold evidence and answer."""
    return env.oracle_action()


def no_tool_policy(obs: str, info: dict[str, Any], env: Any) -> str:
    """Answers at once with an empty guess (a floor for the reward)."""
    return env.answer_text("unknown")


def random_policy(obs: str, info: dict[str, Any], env: Any) -> str:
    """Acts at random among the moves the state allows (``env.random_action()``: a random admissible command, a
    random button); on answer-shaped envs it answers at once, as ``no-tool`` does."""
    return env.random_action()


#: ``canonical`` is the oracle under the name code benchmarks use (it submits the reference solution)
POLICIES: dict[str, Policy] = {
    "oracle": oracle_policy,
    "canonical": oracle_policy,
    "no-tool": no_tool_policy,
    "random": random_policy,
}


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per-episode metric rows -> the mean of each numeric key over the episodes that report it (a mixture's
    per-env keys, ``"<name>/success"``, are means over that env's episodes), plus ``pass@1`` where code envs report
    ``pass`` (one sample per task). The one summary every evaluator returns: :func:`evaluate`,
    ``agentr1_trl.model_eval.evaluate_model`` and the pipeline's held-out evaluations."""
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, numbers.Real)})
    out = {k: float(np.mean([float(r[k]) for r in rows if isinstance(r.get(k), numbers.Real)])) for k in keys}
    if "pass" in out:
        out["pass@1"] = out["pass"]
    return out


def evaluate(
    env: gym.Env | str,
    policy: Policy | str = "oracle",
    *,
    episodes: int = 100,
    seed: int = 0,
    progress: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    save_episodes: str | None = None,
    all_tasks: bool = False,
) -> dict[str, Any]:
    """Run ``episodes`` episodes (episode ``i`` is reset with seed ``seed + i``) and summarise them.

    ``all_tasks``: an env with a fixed task list plays each of its tasks once (reset option ``task_index``;
    ``episodes`` is ignored), as a benchmark's accuracy is defined (BFCL's, HumanEval's pass@1).

    ``save_episodes``: append every episode, turn by turn, to this JSONL file (:mod:`agentr1_gym.episodes`; what
    ``agentr1 view`` shows).

    Returns means of ``return`` (the episode return), ``success``, ``score``, ``format_ok``, ``turns`` and the env's
    answer metrics (``em``, ``f1``, ``sub_em`` for QA; ``pass`` for code; ``correct`` for math), plus
    ``episodes`` and per-episode ``returns``: the metric vocabulary of every evaluator and training log.
    """
    if isinstance(env, str):
        from agentr1_gym.registration import make

        env = make(env, **(env_kwargs or {}))
    if isinstance(policy, str):
        if policy not in POLICIES:
            close = difflib.get_close_matches(str(policy), list(POLICIES), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown policy {policy!r}; built-in policies: {sorted(POLICIES)}.{hint}")
        policy = POLICIES[policy]
    indices = task_list(env) if all_tasks else None
    if indices is not None:
        episodes = len(indices)
    if episodes < 1:
        raise ConfigError(f"episodes must be >= 1, got {episodes}")
    from tqdm.auto import tqdm

    returns: list[float] = []
    rows: list[dict[str, Any]] = []
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    for i in tqdm(range(episodes), desc="eval", disable=not progress, unit="ep"):
        options = {"task_index": indices[i]} if indices is not None else None
        obs, info = env.reset(seed=seed + i, options=options)
        prompt, task_id, first_page = obs, str(info.get("task_id", "")), screenshot_of(info)
        question, gold = task_facts(env.unwrapped) if save_episodes is not None else ("", ())
        total, done, turns = 0.0, False, []
        while not done:
            action = policy(obs, info, env.unwrapped)
            seen = info.get("context")
            rewritten = seen is not None and seen != info.get("messages")  # a context policy's own view
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            done = terminated or truncated
            if save_episodes is not None:
                turns.append(turn_record(action, reward, info, obs, seen if rewritten else None))
        returns.append(total)
        if save_episodes is not None:  # written as each episode ends: a later failure keeps what was played
            append_episodes(
                save_episodes,
                [scripted_record(
                    source="eval",
                    index=i,
                    env_id=env_id,
                    seed=seed + i,
                    task_id=task_id,
                    prompt=prompt,
                    turns=turns,
                    metrics=dict(info.get("metrics", {})),
                    terminated=bool(terminated),
                    truncated_reason=str(info.get("truncated_reason", "")),
                    question=question,
                    gold=gold,
                    answer=info["answer"] if isinstance(info.get("answer"), str) else None,
                    screenshot=first_page,
                )],
            )  # fmt: skip
        rows.append({**info.get("metrics", {}), "return": total})
    summary: dict[str, Any] = {"episodes": episodes, **summarize(rows)}
    summary["returns"] = returns
    return summary
