"""What running BFCL's calls in a worker process costs: the env's calls through its ObjectWorker (a deadline and a
memory bound on each) against the same calls made in-process on the same API instances (what the env did before:
no deadline), in the same run.

    python benchmarks/object_worker.py [--tasks 40] [--json benchmarks/results/object_worker.json]

The oracle plays the first ``--tasks`` tasks of BFCL's ``base`` category twice: once as the env runs calls now, once
with ``run_function`` swapped for the in-process call. Every ``run_function`` call is timed (the method, the pickle
round trip and applying the state that comes back, or the method alone), and both runs must reach the same verdict
on every task (the work done is BFCL's, checked by its own rules). Also timed: starting a worker and loading a
task's instances (what an env pays once, and again after a call killed at its deadline).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

from _common import emit, machine_info

import agentr1_gym
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.object_worker import ObjectWorker, value_text


def _in_process(env):
    """The env's ``run_function`` as it was: the method called in this process, no deadline."""

    def run_function(name, arguments):
        instance = env.model[env._owner[name]]
        try:
            text, failed = value_text(getattr(instance, name)(**copy.deepcopy(arguments))), False
        except Exception as exc:
            text, failed = f"Error during execution: {exc}", True
        env.results.append(text)
        logical_error = text.startswith("{") and '"error"' in text[:20]
        return ToolResult(text, success=not (failed or logical_error))

    return run_function


def _play(env, tasks: int) -> tuple[list[float], list[float]]:
    """The oracle on tasks 0..tasks-1: (seconds per run_function call, verdict per task)."""
    times: list[float] = []
    timed = env.run_function

    def run_function(name, arguments):
        start = time.perf_counter()
        try:
            return timed(name, arguments)
        finally:
            times.append(time.perf_counter() - start)

    env.run_function = run_function
    verdicts = []
    for index in range(tasks):
        env.reset(options={"task_index": index})
        for _ in range(env.max_turns):
            *_, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        verdicts.append(info["metrics"]["verdict"])
    return times, verdicts


def _summary(times: list[float]) -> dict:
    return {
        "calls": len(times),
        "mean_us": round(statistics.fmean(times) * 1e6, 1),
        "median_us": round(statistics.median(times) * 1e6, 1),
        "p95_us": round(sorted(times)[int(0.95 * (len(times) - 1))] * 1e6, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=40)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    worker_env = agentr1_gym.make("AgentR1/BFCL-MultiTurn-v0").unwrapped
    _play(worker_env, 1)  # warm: the worker started, its classes imported
    worker_times, worker_verdicts = _play(worker_env, args.tasks)
    worker_env.close()

    direct_env = agentr1_gym.make("AgentR1/BFCL-MultiTurn-v0").unwrapped
    direct_env.run_function = _in_process(direct_env)
    _play(direct_env, 1)
    direct_times, direct_verdicts = _play(direct_env, args.tasks)
    assert worker_verdicts == direct_verdicts, "the worker changed a verdict"

    starts = []
    direct_env.reset(options={"task_index": 0})
    for token in range(5):  # a fresh worker started and loaded with one task's instances
        worker = ObjectWorker(5.0, 512.0)
        start = time.perf_counter()
        worker.load(direct_env.model, token)
        starts.append(time.perf_counter() - start)
        worker.close()
    direct_env.close()

    worker_s, direct_s = _summary(worker_times), _summary(direct_times)
    emit(
        {
            "benchmark": "object_worker",
            "machine": machine_info("bfcl-eval"),
            "bfcl_tasks": args.tasks,
            "verdicts_equal": True,
            "success": sum(worker_verdicts) / len(worker_verdicts),
            "worker": worker_s,
            "in_process": direct_s,
            "overhead_us_per_call": round(worker_s["mean_us"] - direct_s["mean_us"], 1),
            "worker_start_and_load_s": {
                "median": round(statistics.median(starts), 3),
                "max": round(max(starts), 3),
            },
            "note": "per run_function call: the worker's includes the pipe round trip, pickling the instance's "
            "state both ways and applying it; in_process is the method alone, with no deadline or memory bound",
        },
        args.json,
    )


if __name__ == "__main__":
    main()
