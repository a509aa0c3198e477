"""What serving an env over OpenEnv costs: steps per second and step latency (p50, p99) through `agentr1 serve-env`
(OpenEnv's own server, one env per WebSocket session) at 1, 16 and 64 concurrent sessions, against direct
``env.step`` in the same run.

The server runs in its own process (as it would on an env host); the sessions are client threads in this process,
each holding a WebSocket and sending OpenEnv ``step`` messages as fast as answers come back (its env reset when an
episode ends). The direct peer steps one env in one thread with the same turns. A turn is a real one: a search
call on the QA env (BM25 over its corpus), a ``look`` on the text game; every answer is checked to be an
observation, so the numbers are of real steps. Latency is per step as the client sees it (send to answer).

Needs the ``[openenv]`` extra (its own environment: ``bash .ci/engine-tests openenv`` makes ``.venv-openenv``)::

    .venv-openenv/bin/python benchmarks/env_server.py --json benchmarks/results/env_server.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

#: label -> (env id, env kwargs, (tool, arguments) of the turn each step plays)
ENVS = {
    "QA (HotpotQA, BM25 search)": (
        "AgentR1/HotpotQA-v0", {"max_turns": 8}, ("search", {"query": "who founded the company"}),
    ),
    "text game (Coin Collector)": (
        "AgentR1/TextWorld-CoinCollector-v0", {"level": 5, "num_games": 4, "max_turns": 8},
        ("act", {"command": "look"}),
    ),
}  # fmt: skip
SESSIONS = (1, 16, 64)


def _turn(env_id: str, kwargs: dict, call: tuple[str, dict]) -> str:
    import agentr1_gym

    env = agentr1_gym.make(env_id, **kwargs)
    env.reset(seed=0)
    return env.unwrapped.call_text(call[0], **call[1])


def _stats(latencies: list[float], seconds: float) -> dict:
    ordered = sorted(latencies)
    return {
        "steps": len(ordered),
        "steps_per_s": round(len(ordered) / seconds, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 3),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
    }


def direct(env_id: str, kwargs: dict, turn: str, seconds: float) -> dict:
    import agentr1_gym

    env = agentr1_gym.make(env_id, **kwargs)
    env.reset(seed=0)
    latencies, seed, end = [], 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(turn)
        latencies.append(time.perf_counter() - start)
        if terminated or truncated:
            seed += 1
            env.reset(seed=seed)
    return _stats(latencies, seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(env_id: str, kwargs: dict, sessions: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    argv = [sys.executable, "-m", "agentr1_gym.cli", "serve-env", env_id, "--port", str(port), "--max-sessions",
            str(sessions)]  # fmt: skip
    for k, v in kwargs.items():
        argv += ["--env-arg", f"{k}={json.dumps(v)}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"serve-env did not start: {proc.stderr.read()[-2000:]}") from None
            time.sleep(0.2)


def through_server(url: str, turn: str, sessions: int, seconds: float) -> dict:
    from websockets.sync.client import connect

    latencies: list[list[float]] = [[] for _ in range(sessions)]
    errors: list[str] = []
    ready = threading.Barrier(sessions + 1)
    stop = threading.Event()

    def client(i: int) -> None:
        try:
            with connect(url.replace("http", "ws") + "/ws", max_size=None) as ws:

                def ask(message: dict) -> dict:
                    ws.send(json.dumps(message))
                    answer = json.loads(ws.recv(timeout=120))
                    if answer.get("type") != "observation":
                        raise RuntimeError(f"not an observation: {str(answer)[:200]}")
                    return answer["data"]

                seed = 1000 * i
                ask({"type": "reset", "data": {"seed": seed}})
                ready.wait()
                while not stop.is_set():
                    start = time.perf_counter()
                    data = ask({"type": "step", "data": {"text": turn}})
                    latencies[i].append(time.perf_counter() - start)
                    if data["done"]:
                        seed += 1
                        ask({"type": "reset", "data": {"seed": seed}})
        except Exception as exc:
            errors.append(f"session {i}: {exc}")
            if not ready.broken:
                ready.abort()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=300)
    except threading.BrokenBarrierError:
        raise SystemExit(f"sessions failed to start: {errors[:3]}") from None
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    if errors:
        raise SystemExit(f"sessions failed: {errors[:3]}")
    return {"sessions": sessions, **_stats([x for per in latencies for x in per], seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="seconds each measurement runs (default 10)"
    )
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import emit, machine_info

    start, results = time.perf_counter(), []
    for label, (env_id, kwargs, call) in ENVS.items():
        turn = _turn(env_id, kwargs, call)
        base = direct(env_id, kwargs, turn, args.seconds)
        print(f"{label}: direct {base['steps_per_s']} steps/s, p50 {base['p50_ms']} ms", file=sys.stderr)
        proc, url = _serve(env_id, kwargs, max(SESSIONS))
        served = []
        try:
            for n in SESSIONS:
                served.append(through_server(url, turn, n, args.seconds))
                s = served[-1]
                print(f"  {n} sessions: {s['steps_per_s']} steps/s, p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms",
                      file=sys.stderr, flush=True)  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(30)
        results.append({
            "env": label, "env_id": env_id, "env_kwargs": kwargs, "turn": turn, "direct": base, "server": served,
            "added_p50_ms_one_session": round(served[0]["p50_ms"] - base["p50_ms"], 3),
            "throughput_vs_direct": {str(s["sessions"]): round(s["steps_per_s"] / base["steps_per_s"], 2)
                                     for s in served},
        })  # fmt: skip
    emit(
        {
            "benchmark": "env_server",
            "command": "python benchmarks/env_server.py --json benchmarks/results/env_server.json",
            "settings": f"{args.seconds:g} s per measurement; server and clients on one machine (loopback)",
            "envs": results,
            "seconds": round(time.perf_counter() - start, 1),
            "machine": machine_info("agentr1-gym", "openenv", "websockets", "uvicorn", "fastapi"),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
