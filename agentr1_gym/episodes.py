"""Saved episodes: one JSON object per line, what ``agentr1 view`` shows.

Training (``save_episodes_steps``), the held-out evaluations of ``agentr1 train`` and ``agentr1 eval
--save-episodes FILE`` write the same record. Token fields are present where a model generated the episode
(``tokens`` is None for scripted policies):

.. code-block:: text

    {"schema": 1,
     "source": "train" | "held-out before RL" | "held-out after RL" | "eval",
     "step": optimizer step the episode trained (train) or the step it was evaluated at,
     "index": position in its batch, "group": GRPO group (train), "env_id", "task_id", "seed",
     "prompt": the first user message,
     "screenshot": the page the first turn saw, where the env shows one (``info["screenshot"]``, below),
     "question": the task without the tool instructions (the env's ``task_text()``; "" where the env has none),
     "gold": the task's gold answers ([] for world envs), "answer": the final answer the env scored (None: none),
     "turns": [{"action", "tool_calls": [{"name", "arguments"}], "observation", "reward",
                "reward_components": {...}, "action_error": str | None,
                "context": the text the agent saw, only where the env rewrote it (a context policy),
                "user": true where the observation is the user speaking again (multi-user-turn envs),
                "screenshot": the page after the action, where the env shows one}, ...],
     "success", "return", "ended": "terminated" | "max_turns" | "token_budget" | ..., "metrics": {...},
     "tokens": None | {"ids", "text" (one piece per token), "action_mask",
                       "turn_ends" (index of each turn's last generated token),
                       "special" (1 where the token is one of the tokenizer's special tokens: chat-template
                                  scaffolding such as ``<|im_start|>``),
                       "advantage" (per token, 0 off the mask), "logprob" (the sampler's),
                       "ratio" (exp(trainer log-prob - sampler log-prob), action tokens),
                       "entropy" (the policy's, action tokens)}}

Screenshots: an env that renders a page (``AgentR1/MiniWoB-v0`` with ``screenshots=True``) puts a small image of it in
``info["screenshot"]`` at reset and after each step, as a ``data:image/png;base64,...`` URI; the record keeps it where
it is such a URI of at most :data:`MAX_SCREENSHOT_CHARS` characters (:func:`screenshot_of`), and the viewer draws
each turn beside the page it saw. Records without them are unchanged.

Any of ``advantage``, ``ratio`` and ``entropy`` may be None (an evaluation has no advantage; an episode whose chat
template is not prefix-stable has no single sequence to score).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentr1_gym.text import clean_json

__all__ = [
    "EPISODES_FILE",
    "MAX_SCREENSHOT_CHARS",
    "SCHEMA",
    "RunFiles",
    "append_episodes",
    "read_episodes",
    "screenshot_of",
    "scripted_record",
    "turn_record",
]  # fmt: skip

#: the file a training run writes its saved episodes to (in its output directory)
EPISODES_FILE = "episodes.jsonl"


class RunFiles:
    """The names of what a run's output directory holds: the trainer writes them, ``--resume`` and the viewer read
    them, each by this one name."""

    config = "run_config.json"  #: the run's settings (what --resume reads)
    metrics = "metrics.jsonl"  #: the trainer's metrics, one line per logged step
    episodes = EPISODES_FILE  #: saved training and held-out episodes
    eval_before = "eval_before_rl.json"  #: the held-out evaluation before RL
    eval_after = "eval_after_rl.json"  #: the held-out evaluation after RL
    curve = "reward_curve.png"  #: the reward curves
    card = "README.md"  #: the run's model card
    adapter = "adapter"  #: the trained LoRA adapter (a directory)


SCHEMA = 1

#: the longest screenshot a record keeps (a data URI; MiniWoB's 160x210 task area is about 4-12 thousand)
MAX_SCREENSHOT_CHARS = 200_000
_DATA_URI = re.compile(r"data:image/(?:png|jpeg|webp);base64,[A-Za-z0-9+/]+={0,2}")


def screenshot_of(info: dict[str, Any]) -> str | None:
    """``info["screenshot"]`` where it is an image as a base64 data URI (PNG, JPEG or WebP) of at most
    :data:`MAX_SCREENSHOT_CHARS` characters; None otherwise (no screenshot, or anything else: a record never
    carries other text where the viewer draws an image)."""
    shot = info.get("screenshot") if isinstance(info, dict) else None
    if isinstance(shot, str) and len(shot) <= MAX_SCREENSHOT_CHARS and _DATA_URI.fullmatch(shot):
        return shot
    return None


#: records nest a few levels (a turn's tool call arguments); anything deeper is cut when written
_RECORD_DEPTH = 64


def _finite(value: Any) -> Any:
    """A record as JSON can hold it (:func:`agentr1_gym.text.clean_json`, strict): NaN/inf become None (a number
    a browser can show stays a number), lone surrogates U+FFFD, and nesting past 64 levels ``"..."``. Model text
    reaches records (a rejected call's raw arguments), so writing one never raises on what a model wrote."""
    return clean_json(value, _RECORD_DEPTH, strict=True)[0]


def append_episodes(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Append records (one JSON line each) to ``path``, each flushed as it is written (a run that stops later
    keeps what was written); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a", encoding="utf-8") as f:
        for record in records:
            f.write(
                json.dumps(_finite({"schema": SCHEMA, **record}), ensure_ascii=False, allow_nan=False) + "\n"
            )
            f.flush()
            n += 1
    return n


def read_episodes(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of an episodes file. A line that is not a JSON object (a run killed mid-write leaves a partial
    last line), is not UTF-8, or nests past the parser's limit is skipped. NaN and Infinity are read."""
    with Path(path).open("rb") as f:
        for raw in f:
            try:
                line = raw.decode("utf-8").strip()
                record = json.loads(line) if line else None
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(record, dict) and "turns" in record:
                yield record


def _ended(terminated: bool, truncated_reason: str) -> str:
    return "terminated" if terminated else (truncated_reason or "truncated")


def scripted_record(
    *,
    source: str,
    index: int,
    env_id: str,
    seed: int | None,
    task_id: str,
    prompt: str,
    turns: list[dict[str, Any]],
    metrics: dict[str, float],
    terminated: bool,
    truncated_reason: str = "",
    step: int | None = None,
    question: str = "",
    gold: tuple[str, ...] | list[str] = (),
    answer: str | None = None,
    screenshot: str | None = None,
) -> dict[str, Any]:
    """The record of an episode without tokens (a scripted policy's); ``screenshot``: the page the first turn saw
    (:func:`screenshot_of` the reset's ``info``)."""
    record = {
        "source": source,
        "step": step,
        "index": index,
        "group": None,
        "env_id": env_id,
        "task_id": task_id,
        "seed": seed,
        "prompt": prompt,
        "question": question,
        "gold": list(gold),
        "answer": answer,
        "turns": turns,
        "success": float(metrics.get("success", 0.0)),
        "return": float(sum(t["reward"] for t in turns)),
        "ended": _ended(terminated, truncated_reason),
        "metrics": {k: float(v) for k, v in metrics.items()},
        "tokens": None,
    }
    if screenshot is not None:
        record["screenshot"] = screenshot
    return record


def turn_record(
    action: str,
    reward: float,
    info: dict[str, Any],
    observation: str,
    context: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One turn of a record, from the env's ``step`` answer; ``context``: the messages the agent saw for this turn
    when the env's context policy rewrote them (kept as text, ``[role] content`` per message)."""
    record = {
        "action": action,
        "tool_calls": list(info.get("tool_calls") or []),
        "observation": observation,
        "reward": float(reward),
        "reward_components": {k: float(v) for k, v in (info.get("reward_components") or {}).items()},
        "action_error": info.get("action_error"),
    }
    if info.get("user_spoke"):
        record["user"] = True
    shot = screenshot_of(info)
    if shot is not None:
        record["screenshot"] = shot
    if context is not None:
        record["context"] = "\n\n".join(f"[{m.get('role')}] {m.get('content')}" for m in context)
    return record
