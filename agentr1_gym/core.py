"""The two core abstractions of Agent-R1: :class:`Tool` and :class:`ToolEnv`.

A **Tool** executes one atomic action (a search, a code run) and reports raw results. A **ToolEnv**
interprets them: it keeps the multi-turn state (the whole chat), parses each assistant turn with a
:class:`~agentr1_gym.protocol.ToolCallFormat`, runs the calls, decides termination and computes process
(per-step) and outcome rewards.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
from pydantic import BaseModel, ValidationError

from agentr1_gym.errors import BadArgumentError, ConfigError, ResetNeededError
from agentr1_gym.protocol import ParsedAction, ToolCall, ToolCallFormat, get_format
from agentr1_gym.rewards import OUTCOME_KEYS, PROCESS_KEYS, RewardConfig
from agentr1_gym.spaces import FreeText

__all__ = ["Tool", "ToolEnv", "ToolResult"]


@dataclass
class ToolResult:
    """What a tool reports: the text the agent sees, whether the call did its job, and raw metadata
    (e.g. the ids of retrieved passages) that the env may turn into process rewards."""

    content: str
    success: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic JSON schema -> compact OpenAI ``parameters`` (no titles)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "properties":
            value = {name: _clean_schema(prop) for name, prop in value.items()}
        elif isinstance(value, dict):
            value = _clean_schema(value)
        out[key] = value
    return out


class Tool(ABC):
    """A tool callable by the agent.

    Subclasses set ``name``, ``description`` and ``Args`` (a pydantic model whose fields are the arguments;
    use ``model_config = ConfigDict(extra="forbid")``), and implement :meth:`execute`. Override
    :meth:`execute_batch` when the backend batches (retrieval does). A tool raises
    :class:`~agentr1_gym.errors.ToolInfrastructureError` when its backing service fails; a call that runs but
    fails on the model's input returns ``ToolResult(success=False)``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI function-calling format (what chat templates' ``tools=`` take); a fresh copy."""
        return copy.deepcopy(self.schema_view())

    def schema_view(self) -> dict[str, Any]:
        """The same schema, computed once per tool class and shared: read it, never modify it."""
        cached = type(self).__dict__.get("_schema_cache")
        if cached is None:
            params = _clean_schema(self.Args.model_json_schema())
            params.setdefault("properties", {})
            cached = {
                "type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": params},
            }
            type(self)._schema_cache = cached  # type: ignore[attr-defined]
        return cached

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        """Validate raw JSON arguments; raises pydantic's ``ValidationError``."""
        return self.Args.model_validate(arguments)

    @abstractmethod
    def execute(self, args: BaseModel) -> ToolResult:
        """Run one call with validated arguments."""

    def execute_batch(self, batch: Sequence[BaseModel]) -> list[ToolResult]:
        """Run several calls; the default runs them one by one."""
        return [self.execute(a) for a in batch]


def _describe_validation_error(tool: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "arguments"
        parts.append(f"{loc}: {err['msg']}")
    return f"Invalid arguments for tool {tool!r}: " + "; ".join(parts) + "."


def _check_kwargs(init: Any) -> Any:
    """Wrap an env ``__init__`` so that unknown keyword arguments raise :class:`BadArgumentError` with a hint."""
    params = inspect.signature(init).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return init
    known = [n for n, p in params.items() if n != "self" and p.kind is not p.VAR_POSITIONAL]

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = [k for k in kwargs if k not in known]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, known, n=1)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise BadArgumentError(
                f"{type(self).__name__} got unknown keyword argument(s) {', '.join(hints)}; "
                f"accepted: {', '.join(known)}"
            )
        init(self, *args, **kwargs)

    return wrapper


def truncate_text(text: str, budget: int) -> str:
    """Cut ``text`` to ``budget`` characters with a marker that says how much was removed."""
    if len(text) <= budget:
        return text
    return text[:budget] + f"\n...[truncated {len(text) - budget} characters]"


class ToolEnv(gym.Env[str, str], ABC):
    """A Gymnasium text env in which the agent acts by writing assistant turns that may call tools.

    * observation: text (the first user message on reset; the rendered tool results after a step;
      ``""`` once terminated); action: one assistant turn of text.
    * ``info``: ``messages`` (the chat so far, OpenAI-style dicts), ``tools`` (JSON schemas, on reset),
      ``task_id``, ``turn``, and after a step ``reward_components`` (sums to the reward), ``process_reward``,
      ``outcome_reward``, ``action_error`` (None, or what was wrong with the turn), ``num_tool_calls``,
      ``truncated_reason`` and, at episode end, ``metrics``.
    * termination: a final answer; truncation: ``max_turns`` turns or the ``max_context_chars`` budget.

    Subclasses implement :meth:`_sample_task`, :meth:`_task_prompt` and :meth:`_score`, and may add process
    rewards in :meth:`_process_rewards`.
    """

    # render_fps: Gymnasium's checkers and recorders expect it; a text env renders one frame per turn
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    _spec: Any = None

    @property
    def spec(self) -> Any:
        """The env's ``EnvSpec``, with config objects among its kwargs stored as plain dicts (the envs accept
        both), so that ``env.spec.to_json()`` works and ``gym.make(env.spec)`` rebuilds the same env."""
        return self._spec

    @spec.setter
    def spec(self, value: Any) -> None:
        if value is not None and any(isinstance(v, BaseModel) for v in value.kwargs.values()):
            kwargs = {
                k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v
                for k, v in value.kwargs.items()
            }
            value = dataclasses.replace(value, kwargs=kwargs)
        self._spec = value

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "__init__" in cls.__dict__:
            cls.__init__ = _check_kwargs(cls.__init__)  # type: ignore[method-assign]

    def __init__(
        self,
        *,
        tools: Sequence[Tool],
        protocol: str | ToolCallFormat = "hermes",
        max_turns: int = 6,
        max_calls_per_turn: int = 1,
        max_action_chars: int = 20_000,
        tool_output_chars: int = 4_000,
        max_context_chars: int | None = None,
        reward: RewardConfig | dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
        if max_calls_per_turn < 1:
            raise ConfigError(f"max_calls_per_turn must be >= 1, got {max_calls_per_turn}")
        if tool_output_chars < 16:
            raise ConfigError(f"tool_output_chars must be >= 16, got {tool_output_chars}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"tool names must be unique, got {names}")
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.protocol = get_format(protocol)
        self.max_turns = int(max_turns)
        self.max_calls_per_turn = int(max_calls_per_turn)
        self.max_action_chars = int(max_action_chars)
        self.tool_output_chars = int(tool_output_chars)
        self.max_context_chars = max_context_chars
        if isinstance(reward, dict):
            try:
                reward = RewardConfig(**reward)
            except ValidationError as exc:
                raise ConfigError(f"bad reward config: {exc}") from None
        self.reward_config = reward or RewardConfig()
        self.render_mode = render_mode
        self.observation_space = FreeText(max_length=max(1_000_000, (max_context_chars or 0)))
        self.action_space = FreeText(max_length=self.max_action_chars)
        self._tool_schemas = [t.schema() for t in tools]
        self.task: Any = None
        self.messages: list[dict[str, Any]] = []
        self.turn = 0
        self._done = True
        self._format_ok = True
        self._context_chars = 0

    # ---- hooks -------------------------------------------------------------------------------------------
    @abstractmethod
    def _sample_task(self, options: dict[str, Any]) -> Any:
        """Pick the next task, drawing randomness from ``self.np_random`` only."""

    @abstractmethod
    def _task_prompt(self, task: Any) -> str:
        """The task-specific part of the first user message."""

    @abstractmethod
    def _score(self, answer: str | None) -> tuple[float, dict[str, float]]:
        """Score a final answer (``None``: none given): ``(score in [0, 1], metrics to log)``."""

    def _pick_task(self, tasks: Sequence[Any], options: dict[str, Any]) -> Any:
        """For envs over a fixed task list: ``options["task_index"]`` if given, else a draw from ``np_random``."""
        index = options.get("task_index")
        if index is None:
            return tasks[int(self.np_random.integers(len(tasks)))]
        if not isinstance(index, int) or not 0 <= index < len(tasks):
            raise ConfigError(f"options['task_index'] must be an int in [0, {len(tasks)}), got {index!r}")
        return tasks[index]

    def _process_rewards(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        """Extra process-reward components for one executed call (keys from ``PROCESS_KEYS``)."""
        return {}

    def _on_reset(self) -> None:
        """Reset per-episode state of subclasses."""

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (or none has started)."""
        return self._done

    def task_id(self) -> str:
        return str(getattr(self.task, "id", ""))

    # ---- gym API -----------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self._sample_task(dict(options or {}))
        self.turn = 0
        self._done = False
        self._format_ok = True
        self._on_reset()
        prompt = f"{self.protocol.instructions(list(self.tools.values()))}\n\n{self._task_prompt(self.task)}"
        self.messages = [{"role": "user", "content": prompt}]
        self._context_chars = len(prompt)
        info = {
            "messages": list(self.messages),
            "tools": copy.deepcopy(self._tool_schemas),
            "task_id": self.task_id(),
            "turn": 0,
        }
        if self.render_mode == "human":
            self.render()
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise ResetNeededError("Cannot call step() before reset(): call env.reset() first.")
        if self._done:
            raise ResetNeededError("The episode has ended (terminated or truncated); call env.reset() first.")
        if not isinstance(action, str):
            raise TypeError(f"an action is one assistant turn as str, got {type(action).__name__}")
        self.turn += 1
        components = dict.fromkeys(PROCESS_KEYS + OUTCOME_KEYS, 0.0)
        self.messages.append({"role": "assistant", "content": action})
        self._context_chars += len(action)

        if len(action) > self.max_action_chars:
            parsed = ParsedAction(
                error=f"The turn is {len(action)} characters long; the limit is {self.max_action_chars}. "
                "Write shorter turns."
            )
        else:
            parsed = self.protocol.parse(action, self.tools)
        if parsed.error is None and len(parsed.calls) > self.max_calls_per_turn:
            parsed = ParsedAction(
                error=f"The turn makes {len(parsed.calls)} tool calls; at most {self.max_calls_per_turn} "
                "per turn are allowed. Call one tool, wait for its result, then continue."
            )

        action_error: str | None = None
        new_messages: list[dict[str, Any]] = []
        obs_parts: list[str] = []
        terminated = False
        if parsed.error is not None:
            action_error = parsed.error
            self._format_ok = False
            components["invalid_format"] += self.reward_config.invalid_format_penalty
            new_messages.append({"role": "user", "content": parsed.error})
            obs_parts.append(parsed.error)
        elif parsed.answer is not None:
            terminated = True
        else:
            action_error = self._run_calls(parsed.calls, components, new_messages, obs_parts)

        self.messages.extend(new_messages)
        self._context_chars += sum(len(m["content"]) for m in new_messages)
        truncated_reason = ""
        if not terminated:
            if self.turn >= self.max_turns:
                truncated_reason = "max_turns"
            elif self.max_context_chars is not None and self._context_chars > self.max_context_chars:
                truncated_reason = "context_budget"
        truncated = bool(truncated_reason)

        info: dict[str, Any] = {
            "task_id": self.task_id(),
            "turn": self.turn,
            "action_error": action_error,
            "num_tool_calls": len(parsed.calls),
            "truncated_reason": truncated_reason,
        }
        if terminated or truncated:
            self._done = True
            score, metrics = self._score(parsed.answer if terminated else None)
            components.update(self.reward_config.outcome(score, self._format_ok and terminated))
            info["metrics"] = {
                **metrics,
                "score": score,
                "format_ok": float(self._format_ok and terminated),
                "turns": float(self.turn),
            }
        process = sum(components[k] for k in PROCESS_KEYS)
        outcome = sum(components[k] for k in OUTCOME_KEYS)
        info.update(
            reward_components=components,
            process_reward=process,
            outcome_reward=outcome,
            messages=list(self.messages),
        )
        obs = "" if terminated else "\n".join(obs_parts)
        if self.render_mode == "human":
            self.render()
        return obs, float(process + outcome), terminated, truncated, info

    def _run_calls(
        self,
        calls: Sequence[ToolCall],
        components: dict[str, float],
        new_messages: list[dict[str, Any]],
        obs_parts: list[str],
    ) -> str | None:
        """Validate and run the calls of one turn (batched per tool); fill the result messages."""
        role = self.protocol.result_role
        errors: list[str] = []
        results: list[ToolResult | None] = [None] * len(calls)
        pending: dict[str, list[tuple[int, BaseModel]]] = {}
        for i, call in enumerate(calls):
            tool = self.tools.get(call.name)
            if tool is None:
                close = difflib.get_close_matches(call.name, list(self.tools), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                errors.append(
                    f"Unknown tool {call.name[:100]!r}; available tools: {sorted(self.tools)}.{hint}"
                )
                results[i] = ToolResult(errors[-1], success=False, metadata={"call_error": True})
                continue
            try:
                pending.setdefault(call.name, []).append((i, tool.validate(call.arguments)))
            except ValidationError as exc:
                errors.append(_describe_validation_error(call.name, exc))
                results[i] = ToolResult(errors[-1], success=False, metadata={"call_error": True})
        for name, items in pending.items():
            outputs = self.tools[name].execute_batch([args for _, args in items])
            for (i, _), out in zip(items, outputs, strict=True):
                results[i] = out
        for call, result in zip(calls, results, strict=True):
            assert result is not None
            if result.metadata.get("call_error"):
                self._format_ok = False
                components["invalid_call"] += self.reward_config.invalid_call_penalty
            elif result.success:
                components["tool_success"] += self.reward_config.tool_success_reward
                for key, value in self._process_rewards(call, result).items():
                    components[key] += value
            content = truncate_text(result.content, self.tool_output_chars)
            new_messages.append(
                {"role": role, "name": call.name, "content": content}
                if role == "tool"
                else {"role": role, "content": self.protocol.render_result(content)}
            )
            obs_parts.append(self.protocol.render_result(content))
        return " ".join(errors) if errors else None

    def render(self) -> str | None:
        text = "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # ---- helpers -----------------------------------------------------------------------------------------
    def call_text(self, name: str, **arguments: Any) -> str:
        """An assistant turn that calls tool ``name`` in this env's format (for scripted policies)."""
        return self.protocol.format_call(ToolCall(name=name, arguments=arguments))

    def answer_text(self, answer: str) -> str:
        """An assistant turn that gives ``answer`` in this env's format."""
        return self.protocol.format_answer(answer)
