"""The run report: what an ``agentr1 train`` run tells a person: the hardware line and time estimates while it trains, the run
directory's own model card (``README.md``), and the closing lines that list every output and the next commands."""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentr1_gym.episodes import RunFiles
from agentr1_trl.hardware import bf16_matmul_speedup, cpu_info
from agentr1_trl.run_dir import OUTPUTS, RUN_FILE

__all__ = [
    "OUTPUTS",
    "closing_lines",
    "describe_hardware",
    "model_card",
    "plot_reward_curve",
    "quiet_progress",
    "step_clock",
    "wilson_interval",
]


def describe_hardware(bf16: bool, bf16_base: bool = False) -> str:
    """One line: the device the update runs on, whether it computes bf16 natively (and how much faster, as
    measured), and the precision chosen (``bf16_base``: the frozen base stored in bf16)."""
    import torch

    precision = "float32"
    if bf16:
        precision = "bf16, the frozen base stored in bf16" if bf16_base else "bf16 autocast"
    if torch.cuda.is_available():
        return f"training on {torch.cuda.get_device_name(0)} ({precision})"
    model, flags = cpu_info()
    native = [name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16")) if flag in flags]
    if native:
        bf16_note = (
            f"native bf16: {' and '.join(native)}, its products {bf16_matmul_speedup():.1f}x float32's here"
        )
    else:
        bf16_note = "no native bf16 (it would be emulated: slower)"
    return f"training on {os.cpu_count()} CPU cores, {model} ({bf16_note}); update in {precision}"


def step_clock(every: int = 10) -> Any:
    """A transformers callback printing, for each logged step, one line: how long the run has taken and will take
    (the first step includes warm-up; later estimates are the mean of the steps after the first) and the step's
    training return and success rate. Where steps are not logged one by one (``logging_steps`` > 1), the time
    line is printed after the first step, the second, every ``every`` steps and the last."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.start, self.first, self.line = 0.0, None, ""

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if not self.start:
                self.start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step, total = state.global_step, state.max_steps
            elapsed = time.perf_counter() - self.start
            if self.first is None:
                self.first = (step, elapsed)
            done = step - self.first[0]
            if step == self.first[0]:
                left, note = elapsed * (total - step), " (it includes warm-up)"
            else:
                per = (elapsed - self.first[1]) / done
                left, note = per * (total - step), f" ({per:.1f} s per step)"
            self.line = f"step {step}/{total} after {_minutes(elapsed)}{note}: about {_minutes(left)} to go"
            if getattr(args, "logging_steps", 1) != 1 and (done <= 1 or done % every == 0 or step == total):
                print(self.line, flush=True)
                self.line = ""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if not self.line or not isinstance(logs, dict) or "env/return" not in logs:
                return
            shown = [
                f"{name} {logs[key]:.3f}"
                for key, name in _STEP_METRICS
                if isinstance(logs.get(key), float | int)
            ]
            print(" · ".join([self.line, *shown]), flush=True)
            self.line = ""

    return StepClock()


#: what the step line shows of a step's logged metrics (training episodes of that step)
_STEP_METRICS = (("env/return", "return"), ("env/success", "success"), ("env/format_ok", "format-valid"))


def quiet_progress(trainer: Any) -> None:
    """Keep transformers from printing each step's log dict on stdout (its progress callback writes ``str(logs)``
    beside the bar; the printer callback prints it when bars are off): the logs still reach metrics.jsonl, the
    trackers and :func:`step_clock`'s line. The progress bar stays (on stderr)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class QuietProgress(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            pass

    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(QuietProgress())
    trainer.pop_callback(PrinterCallback)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def wilson_interval(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion ``p`` observed over ``n`` trials."""
    if n <= 0:
        return (0.0, 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _held_out(result: dict[str, Any] | None, episodes: int) -> str:
    if result is None:
        return "not measured"
    low, high = wilson_interval(float(result["success"]), int(result.get("episodes", episodes)))
    return f"{result['success']:.3f} [{low:.3f}, {high:.3f}]"


def eval_command(run_dir: Path, env_id: str, model: str, episodes: int, seed: int) -> str:
    """The ``agentr1 eval`` command that reproduces a run's held-out figure (it reads the run's settings)."""
    parts = ["agentr1", "eval", env_id, "--model", model, "--adapter", str(run_dir / RunFiles.adapter)]
    parts += ["--episodes", str(episodes), "--seed", str(seed)]
    return shlex.join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def model_card(
    run_dir: Path,
    *,
    algo: str,
    model: str,
    settings: dict[str, Any],
    evals: tuple[dict[str, Any] | None, dict[str, Any] | None],
    episodes: int,
    seed: int,
    steps: int,
    finished: bool = True,
) -> str:
    """The run directory's ``README.md``: what was trained on what, how it did, how to use it. ``agentr1 train``
    writes it when the run starts and at each checkpoint (``finished=False``: it says so), and last at the end."""
    env_id = settings["env_id"]
    agent = settings.get("agent") or ""
    keep = ("learning_rate", "num_generations", "per_device_train_batch_size", "max_steps", "beta",
            "max_new_tokens_per_turn", "max_episode_tokens", "env_kwargs", "seed")  # fmt: skip
    rows = "\n".join(f"| `{k}` | `{settings[k]!r}` |" for k in keep if k in settings)
    before, after = evals
    where = f"the tasks of `{settings['agent_tasks']}`" if settings.get("agent_tasks") else f"`{env_id}`"
    how = f" through the agent `{agent}` (its own loop, its calls recorded)" if agent else ""
    status = (
        ""
        if finished
        else (
            f"\n**In progress**: {_plural(steps, 'optimizer step')} of {settings.get('max_steps', '?')} so far. This card "
            "is written again at each checkpoint and when the run ends.\n"
        )
    )
    if episodes > 0:
        whose = "the agent's own loop, " if agent else ""
        held_out = f"""Greedy ({whose}{_plural(episodes, "episode")} on seeds {seed}+, never trained on); 95% Wilson
intervals.

| | success |
|---|---|
| before RL (after the warm start) | {_held_out(before, episodes)} |
| after RL | {_held_out(after, episodes) if finished else "not yet measured (the run is going)"} |
"""
    else:
        held_out = "Not measured: this run evaluated no held-out episodes (`--eval-episodes 0`).\n"
    evaluate = "" if agent or episodes <= 0 else eval_command(run_dir, env_id, model, episodes, seed) + "\n"
    return f"""# {algo.upper()} on {env_id}

A LoRA adapter for `{model}`, trained by `agentr1 train` (agentr1-gym) with {algo.upper()} for
{_plural(steps, "optimizer step")} on {where}{how}.
{status}
## Held-out success

{held_out}
## Settings

| field | value |
|---|---|
{rows}

All of them: `{RUN_FILE}`.

## Use it

```bash
agentr1 view {shlex.quote(str(run_dir))}             # the episodes, token by token, in a browser
{evaluate}agentr1 train --resume {shlex.quote(str(run_dir))} --set max_steps={max(steps, 1) * 2}   # train on
```

```python
from agentr1_trl.models import load_policy

policy, tokenizer, value_head = load_policy({model!r}, {str(run_dir / RunFiles.adapter)!r})  # value_head: PPO's, else None
```
"""


def closing_lines(
    run_dir: Path, env_id: str, model: str, episodes: int, seed: int, agent: str = ""
) -> list[str]:
    """The run's last lines: every output that exists, then the next commands (``agentr1 eval`` measures our
    rollout, not an agent's own loop: it is not suggested for an ``--agent`` run)."""
    lines = [f"done. In {run_dir}:"]
    width = max(len(name) for name in OUTPUTS)
    for name, what in OUTPUTS.items():
        if (run_dir / name).exists():
            lines.append(f"  {name:<{width}}  {what}")
    lines.append("next:")
    lines.append(f"  agentr1 view {shlex.quote(str(run_dir))}")
    if episodes > 0 and not agent:
        lines.append(f"  {eval_command(run_dir, env_id, model, episodes, seed)}")
    return lines


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` values (NaNs skipped)."""
    out = []
    for i in range(len(values)):
        seen = [v for v in values[max(0, i - window + 1) : i + 1] if v == v]
        out.append(sum(seen) / len(seen) if seen else float("nan"))
    return out


def plot_reward_curve(
    log_history: list[dict[str, Any]],
    path: str | Path,
    title: str = "",
    held_out: dict[str, tuple[int, dict[str, Any] | None]] | None = None,
) -> None:
    """Reward (and env success / format rates where logged) per logged step, as a PNG; ``held_out`` adds the
    held-out success before and after RL as ``{"before": (step, result), "after": (step, result)}``."""
    held_out = held_out or {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = [h for h in log_history if "reward" in h]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    steps = [h["step"] for h in logs]
    for key, label in (
        ("reward", "mean episode return"),
        ("env/success", "success rate"),
        ("env/format_ok", "format-valid rate"),
    ):
        if any(key in h for h in logs):
            values = [h.get(key, float("nan")) for h in logs]
            # the raw per-step points (a step is a few episodes: noisy), and their moving average as the line
            (points,) = ax.plot(steps, values, marker="o", markersize=3, linestyle="none", alpha=0.35)
            ax.plot(
                steps, _moving_average(values, 5), color=points.get_color(), label=f"{label} (5-step mean)"
            )
    for label, marker, (step, result) in (
        ("held-out success before RL", "s", held_out.get("before", (None, None))),
        ("held-out success after RL", "D", held_out.get("after", (None, None))),
    ):
        if result is not None:
            ax.plot([step], [result["success"]], marker=marker, markersize=9, linestyle="none", label=label)
            ax.annotate(f"{result['success']:.2f}", (step, result["success"]), textcoords="offset points",
                        xytext=(6, 6))  # fmt: skip
    ax.set_xlabel("optimizer step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside the data
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
