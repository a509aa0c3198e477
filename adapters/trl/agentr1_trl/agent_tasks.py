"""The user's side of :mod:`agentr1_trl.agent_loop`: the agent function (:func:`load_agent`: ``MODULE:FUNCTION``,
an ``async def rollout(client, task)``), what it returns (:func:`as_result`: a float, a dict of reward components
or an :class:`AgentResult`, held to the reward rule), and its tasks (:class:`AgentTasks`: a JSONL file or a
registered env; :class:`EnvSession` runs the env's tools for the agent and scores it with the env's own grader;
:func:`play_env_task` is an agent that plays an env task through the OpenAI client)."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1_gym.data.records import read_records_with_location
from agentr1_gym.errors import ConfigError, DataError, RewardRangeError
from agentr1_gym.rewards import REWARD_LIMIT, reward_problem

__all__ = ["AgentFn", "AgentResult", "AgentTasks", "EnvSession", "as_result", "load_agent", "play_env_task"]

#: the agent: ``async def rollout(client, task)`` returning its reward
AgentFn = Callable[[Any, dict[str, Any]], Awaitable[Any]]


@dataclass
class AgentResult:
    """What an agent episode earned: its ``reward``, its reward ``components`` (logged each) and ``metrics``
    (``success`` among them; by default ``reward > 0``)."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def as_result(value: Any) -> AgentResult:
    """The agent function's return value as an :class:`AgentResult`; a :class:`ConfigError` that says what to
    return for anything else (a programmer's mistake, not the model's)."""
    if isinstance(value, AgentResult):
        result = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = AgentResult(float(value))
    elif (
        isinstance(value, dict)
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())
    ):
        components = {str(k): float(v) for k, v in value.items()}
        result = AgentResult(sum(components.values()), components)
    else:
        raise ConfigError(
            f"the agent returned {type(value).__name__} {str(value)[:80]!r}; return a float reward, a dict of "
            "reward components, or an agentr1_trl.agent_loop.AgentResult"
        )
    numbers = [result.reward, *result.components.values(), *result.metrics.values()]
    if not all(math.isfinite(float(x)) for x in numbers):
        raise RewardRangeError(f"the agent returned a reward that is not a finite number: {result}")
    for name, x in (("reward", result.reward), *result.components.items()):
        problem = reward_problem(x)
        if problem is not None:
            raise RewardRangeError(
                f"the agent's {name} {problem}; return rewards within +-{REWARD_LIMIT:g} (agentr1_gym.rewards)"
            )
    metrics = {"success": float(result.reward > 0), "reward": float(result.reward), **result.metrics}
    return AgentResult(float(result.reward), dict(result.components) or {"reward": result.reward}, metrics)


def load_agent(spec: str) -> AgentFn:
    """``"MODULE:FUNCTION"`` -> the agent's ``async def rollout(client, task)``, imported with the working
    directory on the path (a one-line :class:`ConfigError` for anything else)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ConfigError(f"--agent must be MODULE:FUNCTION, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--agent {spec}: cannot import {module_name!r} ({exc})") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise ConfigError(f"--agent {spec}: {module_name} has no {name!r}")
    if not inspect.iscoroutinefunction(fn):
        raise ConfigError(
            f"--agent {spec}: {name} must be `async def {name}(client, task)` returning the reward"
        )
    if len(inspect.signature(fn).parameters) < 2:
        raise ConfigError(f"--agent {spec}: {name} must take (client, task)")
    return fn


class AgentTasks:
    """The tasks an agent trains on: a list of dicts (from a JSONL file), or a registered env's tasks by seed.

    ``task(seed)``: the JSONL task ``seed % len`` (with ``"id"`` set to its line number if it has none), or the
    env's task after ``reset(seed=seed)``."""

    def __init__(
        self,
        tasks: Sequence[dict[str, Any]] | None = None,
        *,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        source: str = "",
    ) -> None:
        if (tasks is None) == (env_id is None):
            raise ConfigError("AgentTasks needs either a list of tasks or an env_id")
        self.tasks = [dict(t) for t in tasks] if tasks is not None else None
        if self.tasks is not None and not self.tasks:
            raise ConfigError(f"{source or 'the task list'} holds no tasks")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.source = source or env_id or "tasks"
        self._env: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_jsonl(cls, path: str | Path) -> AgentTasks:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"task file not found: {path}")
        tasks = []
        try:  # JSONL (or a JSON list), as every dataset file is read: one line naming the file and the line
            for _, task in read_records_with_location(file):
                task.setdefault("id", str(len(tasks)))
                tasks.append(task)
        except DataError as exc:
            raise ConfigError(str(exc)) from None
        return cls(tasks, source=str(path))

    @classmethod
    def load(cls, spec: str, env_kwargs: dict[str, Any] | None = None) -> AgentTasks:
        """A JSONL file's tasks, or (anything else) a registered env's (checked now: an unknown id fails with the
        closest ones)."""
        if spec.endswith(".jsonl") or Path(spec).is_file():
            return cls.from_jsonl(spec)
        import agentr1_gym

        agentr1_gym.make(spec, **(env_kwargs or {})).close()
        return cls(env_id=spec, env_kwargs=env_kwargs)

    @property
    def fixed(self) -> int | None:
        """How many tasks a JSONL file holds (None for an env's: any seed is a task)."""
        return len(self.tasks) if self.tasks is not None else None

    def task(self, seed: int) -> dict[str, Any]:
        if self.tasks is not None:
            return dict(self.tasks[seed % len(self.tasks)])
        import agentr1_gym

        with self._lock:
            if self._env is None:
                self._env = agentr1_gym.make(self.env_id, **self.env_kwargs)
            _, info = self._env.reset(seed=seed)
            env = self._env.unwrapped
            return {
                "id": str(info.get("task_id", seed)),
                "seed": int(seed),
                "env_id": self.env_id,
                "env_kwargs": dict(self.env_kwargs),
                "prompt": env.task_text(),
                "messages": [dict(m) for m in info["context"]],
                "tools": info.get("tools") or [],
            }


def _call_parts(call: Any) -> tuple[str, str, Any]:
    """``(id, name, arguments)`` of an OpenAI tool call (the client's object or a dict)."""
    if isinstance(call, dict):
        fn = call.get("function") or {}
        return str(call.get("id", "")), str(fn.get("name", "")), fn.get("arguments", "")
    return str(call.id), str(call.function.name), call.function.arguments


class EnvSession:
    """A registered env's task, played by an agent of your own: its tools run by the env, its answer and its
    reward scored by the env's own grader, exactly as in our own rollouts.

    ``session = EnvSession(task)``; ``session.messages`` and ``session.tools`` start the agent's chat; for each
    assistant message with tool calls, ``messages += session.tool_messages(message.tool_calls)`` (the calls run as
    one turn of the env); a message without calls is the answer: ``session.answer(message.content)``; then
    ``return session.result()``. ``session.done`` says when the env ended the episode (an answer, the turn limit)."""

    def __init__(self, task: dict[str, Any]) -> None:
        import agentr1_gym

        if "env_id" not in task or "seed" not in task:
            raise ConfigError(
                "EnvSession needs a task from an env (AgentTasks.load(ENV_ID)): it has no env_id/seed"
            )
        self.env = agentr1_gym.make(task["env_id"], **task.get("env_kwargs", {}))
        _, info = self.env.reset(seed=int(task["seed"]))
        self.messages: list[dict[str, Any]] = [dict(m) for m in info["context"]]
        self.tools: list[dict[str, Any]] = info.get("tools") or []
        self.rewards: list[float] = []
        self.components: dict[str, float] = {}
        self.metrics: dict[str, float] = {}
        self.done = False

    def _step(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        before = len(self.env.unwrapped.messages)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.rewards.append(float(reward))
        for key, value in info.get("reward_components", {}).items():
            self.components[key] = self.components.get(key, 0.0) + float(value)
        if terminated or truncated:
            self.done = True
            self.metrics = {k: float(v) for k, v in info.get("metrics", {}).items()}
        return obs, info["messages"][before + 1 :]

    def tool_messages(self, tool_calls: Sequence[Any]) -> list[dict[str, Any]]:
        """Run one assistant message's tool calls as one turn of the env; one ``tool`` message per call (an
        error the env reports, a malformed call included, comes back as the calls' content)."""
        parts = [_call_parts(c) for c in tool_calls]
        if self.done:
            return [
                {"role": "tool", "tool_call_id": i, "content": "The episode has ended."} for i, _, _ in parts
            ]
        blocks = []
        for _, name, args in parts:
            try:
                parsed = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            except ValueError:
                parsed = args  # the env's parser reports arguments that are not JSON
            payload = json.dumps({"name": name, "arguments": parsed}, ensure_ascii=False)
            blocks.append(f"<tool_call>\n{payload}\n</tool_call>")
        obs, new = self._step("\n".join(blocks))
        tool_msgs = [m for m in new if m.get("role") == "tool"]
        if len(tool_msgs) == len(parts):
            contents = [m["content"] for m in tool_msgs]
        else:  # the turn failed as a whole (a format error): every call gets the env's message
            contents = [obs or "The episode has ended."] * len(parts)
        return [{"role": "tool", "tool_call_id": i, "content": c} for (i, _, _), c in zip(parts, contents)]

    def answer(self, text: str | None) -> str | None:
        """Give the model's reply as it wrote it: the env's own format rules apply, exactly as in our rollouts (an
        ``<answer>`` block ends the episode; anything else is a format error, penalised, and the episode goes
        on). Returns None once the episode has ended, else the env's feedback, for the agent to show the model
        as a user message, as our rollouts do."""
        if self.done:
            return None
        obs, _ = self._step(text or "")
        return None if self.done else obs

    def result(self) -> AgentResult:
        """The env's return for the episode, its components and metrics (an unfinished episode is scored as a
        truncation, as the env scores one)."""
        if not self.done:
            outcome, metrics = self.env.unwrapped.close_episode(None)
            for key, value in outcome.items():
                self.components[key] = self.components.get(key, 0.0) + float(value)
            self.rewards.append(float(sum(outcome.values())))
            self.metrics = {k: float(v) for k, v in metrics.items()}
            self.done = True
        self.env.close()
        return AgentResult(float(sum(self.rewards)), dict(self.components), dict(self.metrics))


async def play_env_task(client: Any, task: dict[str, Any]) -> AgentResult:
    """A plain tool-calling loop in the openai client that plays a registered env's task through
    :class:`EnvSession` (the tutorial's agent; the benchmark's and the tests' reference agent)."""
    session = EnvSession(task)
    messages = list(session.messages)
    while not session.done:
        response = await client.chat.completions.create(
            model="policy", messages=messages, tools=session.tools
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            messages += session.tool_messages(message.tool_calls)
        else:
            feedback = session.answer(message.content)
            if feedback:
                messages.append({"role": "user", "content": feedback})
    return session.result()
