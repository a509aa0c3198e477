"""How far shortcuts get in the WebShop-style shop: scripted policies that skip the reading a shopper must do, on
held-out goals, in today's catalog and in the catalog without knock-off listings (``knockoff_share=0``, the catalog
before reliability round 4), side by side.

Policies: ``first hit`` (search the bare instruction, buy the first result), ``first hit + options`` (the same,
clicking every option the instruction names that the product offers), ``random`` (the env's random admissible
clicks) and ``oracle`` (reads prices and options; the ceiling). A shortcut's success over the oracle's is the
figure the docs and the reward-hacking test (bound 0.2) quote. Beside them, the browsing oracle
(``oracle="browse"``: it decides from what the pages show, going back from products that do not meet the
instruction) within the learning protocol's 8 turns and within WebShop's 15: how much a policy that cannot see the
catalog gets within each budget.

    python benchmarks/shop_shortcuts.py --episodes 200 --out benchmarks/results/shop_shortcuts.json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _common import emit, machine_info, wilson

import agentr1_gym


def first_hit(env: Any) -> str:
    w = env.world
    if w.page == "search":
        return env.call_text("search", query=env.task.instruction)
    if w.page == "results":
        return env.call_text("click", button=w._page_asins()[0])
    return env.call_text("click", button="Buy Now")


def first_hit_with_options(env: Any) -> str:
    w = env.world
    if w.page in ("search", "results"):
        return first_hit(env)
    offered = [v for _, values in w.products[w.asin].options for v in values]
    for value in env.task.options:
        if value in offered and value not in w.chosen.values():
            return env.call_text("click", button=value)
    return env.call_text("click", button="Buy Now")


def oracle(env: Any) -> str:
    return env.oracle_action()


#: name -> (policy, the env's keyword arguments it plays under)
POLICIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "first hit": (first_hit, {}),
    "first hit + options": (first_hit_with_options, {}),
    "random": (lambda env: env.random_action(), {}),
    "oracle": (oracle, {}),
    "browsing oracle, 8 turns": (oracle, {"oracle": "browse", "max_turns": 8}),
    "browsing oracle, 15 turns": (oracle, {"oracle": "browse", "max_turns": 15}),
}


def play(policy: Any, episodes: int, **env_kwargs: Any) -> dict[str, Any]:
    env = agentr1_gym.make("AgentR1/WebShop-v0", split="test", **env_kwargs).unwrapped
    wins, reward, turns = 0.0, 0.0, 0
    for i in range(episodes):
        env.reset(seed=i, options={"task_index": i})
        for _ in range(env.max_turns):
            _, _, terminated, truncated, info = env.step(policy(env))
            turns += 1
            if terminated or truncated:
                break
        wins += info["metrics"]["success"]
        reward += info["metrics"]["reward"]
    env.close()
    success = wins / episodes
    return {
        "success": success,
        "success_95ci": list(wilson(success, episodes)),
        "webshop_reward": reward / episodes,
        "turns_per_episode": turns / episodes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=200, help="held-out goals per policy (default 200)")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    args = ap.parse_args()
    start = time.perf_counter()
    catalogs = {"today (knock-offs)": {}, "without knock-offs (before)": {"knockoff_share": 0.0}}
    rows = []
    for catalog, kwargs in catalogs.items():
        results = {
            name: play(policy, args.episodes, **kwargs, **extra) for name, (policy, extra) in POLICIES.items()
        }
        oracle = results["oracle"]["success"]
        for name, r in results.items():
            rows.append({"catalog": catalog, "policy": name, **r,
                         "of_oracle": r["success"] / oracle if oracle else None})  # fmt: skip
    emit(
        {
            "benchmark": "shop_shortcuts",
            "env": "AgentR1/WebShop-v0 (split=test, default catalog: 2000 products, seed 0)",
            "episodes": args.episodes,
            "rows": rows,
            "seconds": round(time.perf_counter() - start, 1),
            "machine": machine_info("agentr1-gym"),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
