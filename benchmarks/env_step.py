"""Env step throughput and per-step overhead, and embedded BM25 against rank_bm25 (and bm25s if installed).

    python benchmarks/env_step.py [--episodes 200] [--json out.json]

Part 1, for every AgentR1/* env: the oracle policy plays episodes after one untimed warm-up episode (its actions
are produced outside the timed region); each ``env.step`` is timed and split into parse (tool-call format), tool
(the search, sandbox run or calculation; in a world, its simulation: a game move, a shop page), reward (scoring,
including HumanEval's hidden tests, and process rewards) and the rest (bookkeeping). ``overhead_us`` = step time
minus tool time. World envs also report ``world_us`` (the tool and the world's scoring of its final state:
WebShop's reward, a game's won/lost) and ``beyond_world_us`` = step time minus that: what the env contract adds to
the world's own simulation. Text-game pools (8 games per family) are generated first, in parallel, into a fresh
cache (``--user-cache``: the user's, reusing games already there), and that time is reported.

Part 2, on the bundled HotpotQA corpus with the 300 bundled questions as queries: index build time, queries/s
one query per call and batched, and recall@5 of gold paragraphs (by title), for our ``bm25`` backend and for
``rank_bm25.BM25Okapi`` over the same tokens, in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import defaultdict

import gymnasium as gym
import numpy as np
from _common import emit, machine_info

import agentr1_gym
from agentr1_gym.data import bundled_corpus, bundled_tasks
from agentr1_gym.tools.search.bm25 import BM25Retriever
from agentr1_gym.tools.search.text import make_analyzer


class _Timed:
    """Wrap a callable and accumulate its wall time."""

    def __init__(self, fn, bucket: dict, key: str):
        self.fn, self.bucket, self.key = fn, bucket, key

    def __call__(self, *a, **k):
        t = time.perf_counter()
        try:
            return self.fn(*a, **k)
        finally:
            self.bucket[self.key] += time.perf_counter() - t


def _play(env, seed: int) -> None:
    env.reset(seed=seed)
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(env.oracle_action())
        done = term or trunc


def bench_env(env_id: str, episodes: int, **kwargs) -> dict:
    env = agentr1_gym.make(env_id, **kwargs).unwrapped
    spent: dict[str, float] = defaultdict(float)
    env.tool_format.parse = _Timed(env.tool_format.parse, spent, "parse")
    for tool in env.tools.values():  # the tool itself (a search, a sandbox run, a calculation)
        tool.execute_batch = _Timed(tool.execute_batch, spent, "tool")
    env.score_answer = _Timed(env.score_answer, spent, "score")
    env.process_reward_units = _Timed(env.process_reward_units, spent, "reward")
    # one untimed episode first: first-call costs (imports, caches) are not per-step costs
    _play(env, seed=episodes)
    spent.clear()
    steps, total = 0, 0.0
    for ep in range(episodes):
        env.reset(seed=ep)
        done = False
        while not done:
            action = env.oracle_action()
            t = time.perf_counter()
            _, _, term, trunc, _ = env.step(action)
            total += time.perf_counter() - t
            steps += 1
            done = term or trunc
    us = lambda x: round(1e6 * x / steps, 2)  # noqa: E731
    reward = spent["reward"] + spent["score"]
    out = {
        "steps": steps,
        "steps_per_s": round(steps / total, 1),
        "step_us": us(total),
        "overhead_us": us(total - spent["tool"]),
        "parse_us": us(spent["parse"]),
        "tool_us": us(spent["tool"]),
        "reward_us": us(reward),
        "other_us": us(total - spent["tool"] - spent["parse"] - reward),
    }
    if not env.final_answer:  # a world: its simulation is the tool calls and the scoring of its final state
        world = spent["tool"] + spent["score"]
        out.update(world_us=us(world), beyond_world_us=us(total - world))
    return out


def _world_kwargs(env_id: str) -> tuple[dict, float]:
    """Text games: a pool of 8 games, generated up front (seconds reported)."""
    if not env_id.startswith("AgentR1/TextWorld-"):
        return {}, 0.0
    from agentr1_gym.data.textgames import ensure_games, game_specs

    family = gym.spec(env_id).kwargs["family"]  # the registration's, without building an env
    return {"num_games": 8}, ensure_games(game_specs(family, [1], "train", 8), progress=False)


def _recall_at_5(hits_titles: list[list[str]], golds: list[tuple[str, ...]]) -> float:
    return float(np.mean([np.mean([g in set(h[:5]) for g in gold]) for h, gold in zip(hits_titles, golds)]))


def bench_bm25(repeats: int) -> dict:
    corpus = bundled_corpus("hotpotqa")
    tasks = bundled_tasks("hotpotqa")
    queries = [t.question for t in tasks]
    golds = [t.supporting_titles for t in tasks]
    analyze = make_analyzer("light")
    out: dict = {"corpus_passages": len(corpus), "queries": len(queries)}

    for name, k1, b in (("agentr1_bm25", 0.9, 0.4), ("agentr1_bm25_k1.5_b.75", 1.5, 0.75)):
        t = time.perf_counter()
        ours = BM25Retriever(corpus, k1=k1, b=b, cache=False)
        build = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(repeats):
            single = [ours.search([q], 5)[0] for q in queries]
        qps_single = repeats * len(queries) / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(repeats):
            batched = ours.search(queries, 5)
        qps_batched = repeats * len(queries) / (time.perf_counter() - t)
        assert [[p.id for p in h] for h in single] == [[p.id for p in h] for h in batched]
        out[name] = {
            "build_s": round(build, 4),
            "qps_single": round(qps_single, 1),
            "qps_batched": round(qps_batched, 1),
            "recall@5": round(_recall_at_5([[p.title for p in h] for h in single], golds), 4),
        }

    from rank_bm25 import BM25Okapi

    t = time.perf_counter()
    docs = [analyze(f"{p.title} {p.text}") for p in corpus]
    peer = BM25Okapi(docs, k1=1.5, b=0.75)
    build = time.perf_counter() - t
    t = time.perf_counter()
    hits = []
    for q in queries:
        scores = peer.get_scores(analyze(q))
        top = np.argsort(-scores, kind="stable")[:5]
        hits.append([corpus[int(i)].title for i in top])
    qps = len(queries) / (time.perf_counter() - t)
    out["rank_bm25_BM25Okapi_k1.5_b.75"] = {
        "build_s": round(build, 4),
        "qps_single": round(qps, 1),
        "recall@5": round(_recall_at_5(hits, golds), 4),
    }
    try:
        import bm25s
    except ImportError:
        out["bm25s"] = "not installed"
    else:
        t = time.perf_counter()
        r = bm25s.BM25(k1=0.9, b=0.4)
        r.index([analyze(f"{p.title} {p.text}") for p in corpus], show_progress=False)
        build = time.perf_counter() - t
        vocab = r.vocab_dict
        qtok = [[w for w in analyze(q) if w in vocab] or [next(iter(vocab))] for q in queries]
        t = time.perf_counter()
        for _ in range(repeats):
            ids, _ = r.retrieve([[w for w in q] for q in qtok], k=5, show_progress=False, n_threads=1)
        qps = repeats * len(queries) / (time.perf_counter() - t)
        t = time.perf_counter()
        for q in qtok[:100]:
            r.retrieve([q], k=5, show_progress=False)
        qps_single = 100 / (time.perf_counter() - t)
        out["bm25s_k0.9_b0.4"] = {
            "build_s": round(build, 4),
            "qps_single": round(qps_single, 1),
            "qps_batched": round(qps, 1),
            "recall@5": round(_recall_at_5([[corpus[int(i)].title for i in row] for row in ids], golds), 4),
        }
    base = out["rank_bm25_BM25Okapi_k1.5_b.75"]["qps_single"]
    out["speedup_vs_rank_bm25"] = {
        "single_same_params": round(out["agentr1_bm25_k1.5_b.75"]["qps_single"] / base, 1),
        "batched_same_params": round(out["agentr1_bm25_k1.5_b.75"]["qps_batched"] / base, 1),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="oracle episodes per env (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the queries per BM25 timing")
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument(
        "--user-cache",
        action="store_true",
        help="use the user's cache (games already generated are reused); default: a fresh one, so that the "
        "text-game pools' generation time is measured",
    )
    args = parser.parse_args()
    fresh = None if args.user_cache else tempfile.mkdtemp(prefix="agentr1-env-step-")
    if fresh:
        os.environ["AGENTR1_CACHE"] = fresh
    envs = {}
    try:
        for env_id in agentr1_gym.env_ids():
            kwargs, generated = _world_kwargs(env_id)
            envs[env_id] = bench_env(env_id, args.episodes, **kwargs)
            if kwargs:
                envs[env_id]["pool_generation_s"] = round(generated, 1)
    finally:
        if fresh:
            shutil.rmtree(fresh, ignore_errors=True)
    result = {
        "benchmark": "env_step",
        "machine": machine_info(
            "agentr1-gym", "gymnasium", "scipy", "numpy", "rank-bm25", "bm25s", "textworld"
        ),
        "envs": envs,
        "bm25": bench_bm25(args.repeats),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
