"""What a context policy costs in tokens: the rows the update trains on, per world and policy, and the longest row
against episode length (SmolLM2-135M-Instruct's tokenizer and chat template).

Each episode is played by the env's random admissible policy (a long episode, as an untrained policy plays) through
the token layer's ``EpisodeRecorder``, exactly as rollouts record it; the rows are ``Trajectory.samples()``, what
the update consumes. ``full`` is one row per episode (the whole chat); ``window:K`` and ``state`` are one row per
step. Reported: tokens trained per episode (the sum of the rows' lengths), the longest row (what bounds the
update's activation memory) and the mean row. The second table plays "look" for 10, 25 and 50 turns on a Coin
Collector game: the longest row as the episode grows. Update seconds and peak memory of the update itself are not
measured here (``benchmarks/update_step.py`` measures an update's cost per token).

    python benchmarks/context.py --episodes 8 --out benchmarks/results/context.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import emit, machine_info

import agentr1_gym
from agentr1_gym.rollout import EpisodeRecorder

WORLDS = {
    "AgentR1/WebShop-v0": {"split": "test"},
    "AgentR1/TextWorld-Cooking-v0": {"level": 3, "num_games": 8},
    "AgentR1/TextWorld-CoinCollector-v0": {"level": 10, "num_games": 8},
}
POLICIES = ("full", "window:1", "window:2", "state")


def play(env: Any, tok: Any, seed: int, action: Any) -> list[int]:
    """One episode through the token layer; the lengths of its training rows."""
    _, info = env.reset(seed=seed, options={"task_index": seed})
    rec = EpisodeRecorder(tok, info, max_episode_tokens=10**7)
    while not rec.done:
        text = action(env.unwrapped)
        ids = tok.encode(text, add_special_tokens=False)
        sent = rec.add_generation(ids, [0.0] * len(ids))
        if sent is None:
            break
        _, reward, terminated, truncated, info = env.step(sent)
        rec.add_step(reward, terminated, truncated, info)
    return [len(s.prompt_ids) + len(s.completion_ids) for s in rec.traj.samples()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=8, help="episodes per world and policy (default 8)")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    args = ap.parse_args()
    from agentr1_trl.models import load_default_policy

    _, tok = load_default_policy()
    start = time.perf_counter()
    rows = []
    for env_id, kwargs in WORLDS.items():
        for policy in POLICIES:
            env = agentr1_gym.make(env_id, context=policy, **kwargs)
            lengths = [play(env, tok, i, lambda e: e.random_action()) for i in range(args.episodes)]
            env.close()
            flat = [n for ep in lengths for n in ep]
            rows.append({
                "env": env_id, "context": policy, "episodes": args.episodes,
                "rows_per_episode": len(flat) / args.episodes,
                "tokens_per_episode": sum(flat) / args.episodes,
                "longest_row": max(flat), "mean_row": sum(flat) / len(flat),
            })  # fmt: skip
    growth = []
    for policy in ("full", "window:2", "state"):
        for turns in (10, 25, 50):
            env = agentr1_gym.make("AgentR1/TextWorld-CoinCollector-v0", level=10, num_games=1, context=policy,
                                   max_turns=turns)  # fmt: skip
            look = env.unwrapped.call_text("act", command="look")
            lengths = play(env, tok, 0, lambda e, look=look: look)
            env.close()
            growth.append({"context": policy, "turns": turns, "longest_row": max(lengths),
                           "tokens_per_episode": sum(lengths)})  # fmt: skip
    emit(
        {
            "benchmark": "context",
            "tokenizer": "SmolLM2-135M-Instruct (the agent chat template)",
            "cost": rows,
            "longest_row_vs_episode_length": growth,
            "seconds": round(time.perf_counter() - start, 1),
            "machine": machine_info("agentr1-gym", "textworld"),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
