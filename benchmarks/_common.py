"""Helpers shared by the benchmark scripts: machine/version info and JSON output."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from importlib import metadata
from typing import Any


def machine_info(*packages: str) -> dict[str, Any]:
    versions = {}
    for p in packages:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        **_cpu(),
        "versions": versions,
    }


def _cpu() -> dict[str, Any]:
    """The CPU's model name and its widest vector instructions (figures from machines that differ there differ:
    bf16 is native with AVX512-BF16 or AMX, emulated elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
    except OSError:
        return {}
    model = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), ""
    )
    flags = {
        w for line in info.splitlines() if line.startswith("flags") for w in line.split(":", 1)[1].split()
    }
    vector = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return {"cpu_model": model, "cpu_vector": vector}


def core_slots(jobs: int, threads: int, script: str) -> list[list[int]]:
    """``jobs`` disjoint sets of ``threads`` cores of this process's affinity, one per run side by side (threads
    oversubscribing a core run many times slower); a one-line SystemExit where there are too few."""
    cpus = sorted(os.sched_getaffinity(0))
    if jobs * threads > len(cpus):
        raise SystemExit(
            f"{script}: --jobs {jobs} x --threads {threads} needs {jobs * threads} cores; "
            f"this process may use {len(cpus)}"
        )
    return [cpus[i * threads : (i + 1) * threads] for i in range(jobs)]


def run_pinned(
    jobs: Sequence[Any],
    command: Callable[[Any], list[str]],
    slots: list[list[int]],
    on_done: Callable[[Any, subprocess.CompletedProcess], None],
) -> None:
    """Each job's ``command`` in its own process pinned (``taskset``) to a slot of cores, as many side by side as
    there are slots, in order; ``on_done(job, completed process)`` in this thread as each ends."""
    free = list(range(len(slots)))
    queue = list(jobs)
    with ThreadPoolExecutor(len(slots)) as pool:
        pending: dict[Any, tuple[int, Any]] = {}
        while queue or pending:
            while queue and free:
                slot, job = free.pop(), queue.pop(0)
                cmd = ["taskset", "-c", ",".join(map(str, slots[slot])), *command(job)]
                pending[pool.submit(subprocess.run, cmd, capture_output=True, text=True)] = (slot, job)
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                slot, job = pending.pop(future)
                free.append(slot)
                on_done(job, future.result())


def emit(result: dict[str, Any], path: str | None, *, quiet: bool = False) -> None:
    """Write ``result`` as JSON to ``path`` (and print it, unless ``quiet``: partial results saved as a long run
    goes)."""
    text = json.dumps(result, indent=2)
    if not quiet:
        print(text)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def step_timer(times: list[float]):
    """A transformers TrainerCallback that appends each optimizer step's wall time (seconds) to ``times``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t)

    return StepTimer()


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate ``p`` over ``n`` episodes."""
    if n <= 0:
        return float("nan"), float("nan")
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def two_proportion_z(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The two-proportion z statistic of success ``a`` against ``b`` (pooled variance)."""
    na, nb = a["episodes"], b["episodes"]
    pool = (a["success"] * na + b["success"] * nb) / (na + nb)
    se = (pool * (1 - pool) * (1 / na + 1 / nb)) ** 0.5
    return (a["success"] - b["success"]) / se if se > 0 else 0.0


def context_dir_suffix(context: str) -> str:
    """learning.py's run-dir suffix for a context policy (``""`` for ``full``, ``"@window-2"`` for ``window:2``):
    a directory name holds no colon."""
    return "" if context == "full" else "@" + context.replace(":", "-")


def split_context_key(key: str) -> tuple[str, str]:
    """A learning work dir's ``TASK[@CONTEXT]`` name -> the task and its context policy as a user writes it
    (``webshop@window-2`` -> ``("webshop", "window:2")``; ``""`` for the whole chat): the inverse of
    :func:`context_dir_suffix`."""
    task, _, context = key.partition("@")
    return task, context.replace("-", ":", 1)


#: learning.py's episode budget in tokens (prompt and turns) for a task that names none
EPISODE_TOKENS = 2048


def lr_label(settings: dict) -> str:
    """A run's learning rate as result tables write it (``lr 3e-4``)."""
    mantissa, exponent = f"{settings['lr']:.0e}".split("e")
    return f"lr {mantissa}e{int(exponent)}"
