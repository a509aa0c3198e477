"""Sandboxed code runs: warm worker pool vs a fresh ``python -c`` subprocess per call, in the same run.

    python benchmarks/sandbox.py [--calls 300] [--json out.json]

Each call runs a trivial snippet (``print(sum(range(100)))``) and is timed end to end from the caller. Reported
per variant: calls/s (one at a time), p50 and p99 latency in ms; for the pool also calls/s with ``run_many`` over
2 workers. Variants: the default sandbox (every kernel layer: user, mount, PID and network namespaces, seccomp,
runs forked from a zygote that never held a request; the layers are listed in the result); the same pool with
``isolation="off"`` (no namespaces: rlimits, seccomp, a drop to nobody and Python-level guards: what the
namespaces cost); a fresh subprocess (``python -c``, no isolation at all, the peer the target is stated against).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np
from _common import emit, machine_info

from agentr1_gym.tools.python import PythonSandbox, SandboxConfig

SNIPPET = "print(sum(range(100)))"


def _stats(latencies: list[float]) -> dict:
    arr = np.array(latencies) * 1000
    return {
        "calls": len(latencies),
        "calls_per_s": round(len(arr) / (arr.sum() / 1000), 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 3),
        "p99_ms": round(float(np.percentile(arr, 99)), 3),
    }


def bench_pool(calls: int, **config) -> dict:
    sb = PythonSandbox(SandboxConfig(pool_size=2, **config))
    layers = sb.isolation
    for _ in range(5):
        assert sb.run(SNIPPET).stdout == "4950\n"
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        sb.run(SNIPPET)
        lat.append(time.perf_counter() - t)
    out = _stats(lat)
    t = time.perf_counter()
    results = sb.run_many([SNIPPET] * calls)
    out["parallel_calls_per_s_2_workers"] = round(calls / (time.perf_counter() - t), 1)
    assert all(r.ok for r in results)
    sb.close()
    out["isolation"] = layers
    return out


def bench_fresh(calls: int) -> dict:
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=30)
        lat.append(time.perf_counter() - t)
        assert out.stdout == "4950\n"
    return _stats(lat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per variant (default 300)")
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    args = parser.parse_args()
    pool = bench_pool(args.calls)
    guards_only = bench_pool(args.calls, isolation="off")
    fresh = bench_fresh(max(args.calls // 3, 20))
    result = {
        "benchmark": "sandbox",
        "machine": machine_info("agentr1-gym"),
        "snippet": SNIPPET,
        "warm_pool": pool,
        "warm_pool_guards_only": guards_only,
        "fresh_python_c_subprocess": fresh,
        "speedup_vs_fresh": round(pool["calls_per_s"] / fresh["calls_per_s"], 1),
        "speedup_vs_fresh_guards_only": round(guards_only["calls_per_s"] / fresh["calls_per_s"], 1),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
