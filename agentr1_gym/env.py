"""The env abstraction of Agent-R1: :class:`ToolEnv`, a Gymnasium text env whose actions are assistant turns.

A :class:`~agentr1_gym.tools.base.Tool` executes one atomic action; a **ToolEnv** interprets it: it keeps the
multi-turn state (the whole chat), parses each assistant turn with a :class:`~agentr1_gym.formats.ToolCallFormat`,
runs the calls, decides termination and computes process (per-step) and outcome rewards.

Settings every env shares live in one typed place, :class:`~agentr1_gym.settings.EnvSettings` (with the keyword
check around every env's ``__init__``); what the agent sees each step is the env's context policy,
:class:`~agentr1_gym.context.ContextPolicy`, parsed once when the env is made.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ValidationError

from agentr1_gym.context import ContextPolicy
from agentr1_gym.errors import (
    ConfigError,
    NoOracleError,
    ResetNeededError,
    RewardRangeError,
    ToolContractError,
)
from agentr1_gym.formats import ParsedAction, ToolCall, for_world, get_format, strip_thinking
from agentr1_gym.rewards import (
    GENERIC_PROCESS_KEYS,
    OUTCOME_KEYS,
    ProcessReward,
    RewardConfig,
    reward_problem,
    unknown_process_reward_hint,
)
from agentr1_gym.settings import EnvSettings, check_keywords
from agentr1_gym.spaces import FreeText
from agentr1_gym.text import MAX_JSON_DEPTH, clean_json, clean_text
from agentr1_gym.tools.base import Tool, ToolResult, describe_validation_error

__all__ = ["ToolEnv", "repeat_rate", "truncate_text"]

#: names that moved out of this module (0.2): importing them from here still works, with a warning, until 0.3
_MOVED = {
    "parse_context": "agentr1_gym.context",
    "require_full_context": "agentr1_gym.context",
    "split_turns": "agentr1_gym.context",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        warnings.warn(
            f"agentr1_gym.env.{name} is now {_MOVED[name]}.{name}; import it from there (until 0.3)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'agentr1_gym.env' has no attribute {name!r}")


def _check_result(tool: str, result: Any) -> None:
    """A tool's result has ToolResult's types (a tool's code is the programmer's: a wrong one is a
    :class:`ToolContractError` naming the tool, not an AttributeError deep in the env)."""
    problem = None
    if not isinstance(result, ToolResult):
        problem = f"returned {type(result).__name__}, not a ToolResult"
    elif not isinstance(result.content, str):
        problem = f"returned ToolResult(content={type(result.content).__name__}); content must be str"
    elif not isinstance(result.metadata, dict):
        problem = f"returned ToolResult(metadata={type(result.metadata).__name__}); metadata must be a dict"
    elif not isinstance(result.success, (int, np.bool_)) or not isinstance(result.terminal, (int, np.bool_)):
        problem = "returned a ToolResult whose success or terminal is not a bool"
    if problem:
        raise ToolContractError(f"tool {tool!r} {problem}")


def _clean_calls(parsed: ParsedAction) -> tuple[ParsedAction, frozenset[int]]:
    """The parsed calls with untrusted text made safe (:func:`~agentr1_gym.text.clean_json`), and the indices
    of calls whose arguments had to be cut for depth (those calls are refused, never run)."""
    if not parsed.calls:
        return parsed, frozenset()
    calls, deep = [], set()
    for i, call in enumerate(parsed.calls):
        arguments, cut = clean_json(call.arguments)
        if cut:
            deep.add(i)
        calls.append(ToolCall(name=clean_text(call.name), arguments=arguments))
    return dataclasses.replace(parsed, calls=tuple(calls)), frozenset(deep)


#: subclass hooks that became public (old name -> new name)
_RENAMED_HOOKS = {
    "_task_prompt": "task_prompt",
    "_score": "score_answer",
    "_gold_answers": "task_answers",
    "_generate_task": "generate_task",
    "_process_rewards": "process_reward_units",
    "_process_caps": "process_reward_caps",
    "_on_reset": "on_reset",
}


def repeat_rate(messages: Sequence[dict[str, Any]]) -> float:
    """The share of an episode's assistant turns that repeat the previous assistant turn word for word (whitespace
    at the ends aside): 0.0 for a one-turn episode. An agent stuck in a loop (the same click on a page that does not
    change, the same search again) scores near 1; the metric is a diagnostic and never enters the reward."""
    actions = [str(m.get("content") or "").strip() for m in messages if m.get("role") == "assistant"]
    if not actions:
        return 0.0
    return sum(a == b for a, b in itertools.pairwise(actions)) / len(actions)


def truncate_text(text: str, budget: int) -> str:
    """Cut ``text`` to ``budget`` characters with a marker that says how much was removed."""
    if len(text) <= budget:
        return text
    return text[:budget] + f"\n...[truncated {len(text) - budget} characters]"


class ToolEnv(gym.Env[str, str], ABC):
    """A Gymnasium text env in which the agent acts by writing assistant turns that may call tools.

    * observation: text (the first user message on reset; the rendered tool results after a step;
      ``""`` once terminated); action: one assistant turn of text.
    * ``info``: ``messages`` (the chat so far, OpenAI-style dicts), ``context`` (the messages the agent sees for
      its next turn under the ``context`` setting: the whole chat, a window of the last K turns, the world's
      compact state, see :meth:`context_messages`), ``tools`` (JSON schemas, on reset),
      ``task_id``, ``turn``, and after a step ``reward_components`` (sums to the reward), ``process_reward``,
      ``outcome_reward``, ``action_error`` (None, or what was wrong with the turn), ``num_tool_calls``,
      ``tool_calls`` (the parsed calls, ``{"name", "arguments"}``), ``truncated_reason`` and, at episode end, ``metrics`` (``score``, ``success``, ``format_ok``, ``turns``,
      ``repeat_rate`` (see :func:`repeat_rate`) and the env's answer metrics).
    * termination: a final answer (answer-shaped tasks), or a tool call after which the world says the episode is
      over (world-shaped tasks: a game won or lost, an item bought; :attr:`ToolResult.terminal`); truncation:
      ``max_turns`` turns or the ``max_context_chars`` budget, scored like an episode that ran out (whatever
      wrapper cuts it, see :meth:`close_episode`).
    * ``reset(options={"task_index": i})`` picks task ``i`` in every env (a fixed task list's ``i``-th task, or a
      procedural env's ``i``-th generated task); other options are listed in ``reset_options``.

    The optional API every env declares (callers never probe with ``hasattr``): :meth:`oracle_action`,
    :meth:`random_action`, :meth:`max_episode_reward`, :attr:`gold_answers`, :meth:`is_success`,
    :attr:`num_tasks`, :meth:`state_key`.

    **Writing an env** (the public subclass API; :func:`agentr1_gym.task.make_task` builds one without
    subclassing). Pass the tools (positionally) and ``**settings`` to ``ToolEnv.__init__``, then implement:

    * :meth:`task_prompt` (the task's part of the first user message) and :meth:`score_answer` (the answer
      metrics of an episode's end), and optionally :meth:`task_answers` (gold answers, for the oracle and tests);
    * where the tasks come from: set ``self.tasks`` (a fixed list; it gets train/held-out splits through the
      ``task_split`` setting) or implement :meth:`generate_task` (procedural tasks, one per seed);
    * process rewards: declare the components in ``process_rewards`` and return the units one *successful* call
      earned from :meth:`process_reward_units` (failed calls earn none); bound them per episode with
      :meth:`process_reward_caps` (so :meth:`max_episode_reward` stays true);
    * :meth:`on_reset` for per-episode state; :meth:`oracle_action` (a scripted turn that knows the answer; it must
      not change the env: tests and warm starts call it between steps) and :meth:`random_action` if you have them;
    * per-process resources (a database connection, a client): open them in :meth:`open_resources` (call it at the
      end of ``__init__``) and name the attributes in ``process_local``; a pickled env (vector envs, worker
      processes) leaves them out and reopens them in the new process, and :meth:`close` closes them and the tools.

    A task is any object; ``task_id()`` reads its ``id`` attribute or ``"id"`` key (else its index in ``tasks``).

    Two kinds of task share this contract. **Answer-shaped** (QA, code, math): tools only observe, an
    ``<answer>`` ends the episode and :meth:`score_answer` scores it. **World-shaped** (text games, a shop, a user's
    database): tools change the world, a tool result with ``terminal=True`` ends the episode, and :meth:`score_answer`
    (called with ``None``) reads the outcome off the world's final state; such envs set ``final_answer = False``
    (an ``<answer>`` is then a format error) unless the world also takes a final answer, and expose the world's
    state as a hashable :meth:`state_key` (for step-level credit). Metrics, process rewards, the oracle,
    ``task_index`` and everything downstream are the same for both.
    """

    # render_fps: Gymnasium's checkers and recorders expect it; a text env renders one frame per turn
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    #: the env's own process-reward components (weights overridable with ``RewardConfig(process=...)``)
    process_rewards: ClassVar[tuple[ProcessReward, ...]] = ()
    #: the answer metrics ``RewardConfig.answer_metric`` may pick (the first is the default)
    answer_metrics: ClassVar[tuple[str, ...]] = ("score",)
    #: the metric that decides ``metrics["success"]`` (an episode succeeds when it is >= 1)
    success_metric: ClassVar[str] = "score"
    #: the env's episode length when ``max_turns`` is not given (``gym.make(id, max_turns=...)`` overrides it)
    default_max_turns: ClassVar[int] = 6
    #: reset options besides ``task_index``
    reset_options: ClassVar[tuple[str, ...]] = ()
    #: whether ``<answer>`` ends an episode (answer-shaped tasks); world-shaped envs whose world decides when the
    #: episode ends set False, and the prompt then does not ask for an answer
    final_answer: ClassVar[bool] = True
    #: whether the task's user speaks more than once: a turn without a tool call is then the agent's reply to the
    #: current user message, the next one (:meth:`next_user_message`) follows it as a user turn, and the episode
    #: ends after the last (see :meth:`step`)
    user_turns: ClassVar[bool] = False
    #: whether the calls of one turn run one by one in the order written (stateful worlds whose calls depend on
    #: each other: a ``cd`` before an ``mv``); by default a turn's calls are batched per tool
    ordered_calls: ClassVar[bool] = False
    #: a fixed task list, or None for procedural envs (which implement ``generate_task``)
    tasks: Sequence[Any] | None = None
    #: attributes holding per-process resources (connections, clients): left out when the env is pickled, and
    #: reopened by :meth:`open_resources` in the process that unpickles it
    process_local: ClassVar[tuple[str, ...]] = ()
    _spec: Any = None
    _pool: tuple[int, int, list[int]] | None = None

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
        for old, new in _RENAMED_HOOKS.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__} defines {old}(); the hook is now public: rename it to {new}() (same signature)"
                )
        if "__init__" in cls.__dict__:
            cls._original_init = cls.__dict__["__init__"]  # type: ignore[attr-defined]
            cls.__init__ = check_keywords(cls, cls._original_init)  # type: ignore[method-assign]

    def __init__(self, tools: Sequence[Tool], /, **settings: Any) -> None:
        settings.setdefault("max_turns", self.default_max_turns)
        try:
            config = EnvSettings(**settings)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(x) for x in err["loc"])
            hint = ""
            if err["type"] == "extra_forbidden" and err["loc"][:1] == ("reward",):  # a typo'd reward field
                close = difflib.get_close_matches(str(err["loc"][-1]), list(RewardConfig.model_fields), n=1)
                hint = (
                    f" (did you mean {close[0]!r}?)" if close
                    else f" (an env's own process reward is '{err['loc'][-1]}_reward' or process={{name: weight}})"
                )  # fmt: skip
            raise ConfigError(
                f"bad env setting {where}: {err['msg']}{hint} (got {err.get('input')!r:.80})"
            ) from None
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"tool names must be unique, got {names}")
        tools = [t.for_env() for t in tools]
        self.settings = config
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.tool_format = get_format(config.tool_format)
        self.max_turns = config.max_turns
        self.max_calls_per_turn = config.max_calls_per_turn
        self.max_action_chars = config.max_action_chars
        self.tool_output_chars = config.tool_output_chars
        self.max_context_chars = config.max_context_chars
        self.render_mode = config.render_mode
        self.context_policy = ContextPolicy.parse(config.context)
        if self.context_policy.kind == "state" and not self.has_state_text():
            raise ConfigError(
                f"context='state' needs the world's compact state, and {type(self).__name__} has no state_text(); "
                "use context='window:K' (the task and the last K turns) or 'full'"
            )
        self.reward_config = config.reward
        self.answer_metric = self._check_rewards(config.reward)
        self._weights = {c.name: config.reward.process_weight(c) for c in self.process_rewards}
        self._component_keys = (*GENERIC_PROCESS_KEYS, *self._weights, *OUTCOME_KEYS)
        self.observation_space = FreeText(max_length=max(1_000_000, (config.max_context_chars or 0)))
        self.action_space = FreeText(max_length=self.max_action_chars)
        # a server's tool descriptions are untrusted text too
        self._tool_schemas = [clean_json(t.schema(), 64)[0] for t in tools]
        self.task: Any = None
        self.messages: list[dict[str, Any]] = []
        self.turn = 0
        self._done = True
        self._format_ok = True
        self._world_ended = False
        #: the tool calls this episode executed, in order (well formed ones, failed or not): what an oracle reads
        #: to plan the next turn without counting its own calls
        self.executed_calls: list[ToolCall] = []
        self._context_chars = 0
        self._user_message_at = 0
        self._paid_units: dict[str, float] = {}

    def _check_rewards(self, reward: RewardConfig) -> str:
        declared = [c.name for c in self.process_rewards]
        for name in reward.process:
            if name not in declared:
                hint = unknown_process_reward_hint(name, declared)
                raise ConfigError(
                    f"{type(self).__name__} has no process reward {name!r}{hint}; its process rewards: "
                    f"{declared or 'none'} (generic ones are RewardConfig fields)"
                )
        metric = reward.answer_metric or self.answer_metrics[0]
        if metric not in self.answer_metrics:
            raise ConfigError(
                f"{type(self).__name__} has no answer metric {metric!r}; choose one of {list(self.answer_metrics)}"
            )
        return metric

    # ---- hooks -------------------------------------------------------------------------------------------
    @abstractmethod
    def task_prompt(self, task: Any) -> str:
        """The task-specific part of the first user message."""

    @abstractmethod
    def score_answer(self, answer: str | None) -> dict[str, float]:
        """The answer metrics of a final answer (``None``: none given), each in [0, 1]; must hold every name in
        ``answer_metrics`` and ``success_metric``."""

    def task_answers(self, task: Any) -> tuple[str, ...]:
        """The task's gold answers as text (what :attr:`gold_answers` returns; none by default)."""
        return ()

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Any:
        """Procedural envs: make a task from ``rng`` (envs with a fixed ``tasks`` list need not implement it)."""
        raise NotImplementedError(f"{type(self).__name__} sets neither tasks nor generate_task()")

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        """Units of the env's process components earned by one executed call (each is paid its weight)."""
        return {}

    def process_reward_caps(self) -> dict[str, float]:
        """The most units of each process component an episode on the current task can earn."""
        return {}

    def on_reset(self) -> None:
        """Reset per-episode state of subclasses."""

    def open_resources(self) -> None:
        """Open per-process resources (named in ``process_local``): call it at the end of ``__init__``; it runs
        again in a process that unpickles the env."""

    def close_resources(self) -> None:
        """Close what :meth:`open_resources` opened (``env.close()`` calls it)."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self.process_local:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.process_local:
            self.open_resources()

    def close(self) -> None:
        """Close per-process resources and the tools (tools backed by a connection release it)."""
        self.close_resources()
        for tool in getattr(self, "tools", {}).values():
            tool.close()
        super().close()

    # ---- fixed task lists: train / held-out splits -------------------------------------------------------
    def _task_pool(self) -> list[int]:
        """The indices into ``tasks`` of the current ``task_split`` (all of them for ``"all"``)."""
        assert self.tasks is not None
        n, split = len(self.tasks), self.settings.task_split
        if self._pool is None or self._pool[0] != n or self._pool[1] != id(self.tasks):
            if split == "all":
                pool = list(range(n))
            else:
                if n < 2:
                    raise ConfigError(
                        f"task_split={split!r} needs at least 2 tasks to split; {type(self).__name__} has {n}"
                    )
                order = np.random.default_rng(0).permutation(n)
                held = min(n - 1, max(1, round(self.settings.test_fraction * n)))
                pool = sorted(int(i) for i in (order[:held] if split == "test" else order[held:]))
            self._pool = (n, id(self.tasks), pool)
        return self._pool[2]

    def split_kwargs(self, split: Literal["train", "test"]) -> dict[str, Any]:
        """The keyword arguments that rebuild this env on its training or held-out tasks (``{}`` for procedural
        envs, whose held-out tasks are other seeds). The CLI trains on ``"train"`` and evaluates on ``"test"``;
        envs with their own split keyword (the text games, the shop) override it."""
        return {} if self.tasks is None else {"task_split": split}

    def kwargs_for_split(self, env_kwargs: dict[str, Any], split: Literal["train", "test"]) -> dict[str, Any]:
        """``env_kwargs`` (what this env was made with) moved to its training or held-out tasks: a split the user
        chose is kept for training, the held-out split always wins for evaluation."""
        own = self.split_kwargs(split)
        return {**own, **env_kwargs} if split == "train" else {**env_kwargs, **own}

    def state_text(self) -> str:
        """The world's compact state as text, for ``context='state'`` (text games: the room, the inventory, the
        score and the last feedback; the shop: the page and the options chosen). Envs that have one override it."""
        raise NotImplementedError(f"{type(self).__name__} has no state_text()")

    def last_feedback(self) -> str:
        """What the env answered the last turn (tool outputs and error messages, the format's wrapping removed);
        ``""`` before the first turn. For :meth:`state_text`."""
        parts: list[str] = []
        for message in reversed(self.messages[1:]):
            if message["role"] == "assistant":
                break
            parts.append(self.tool_format.unwrap_result(message["content"]).strip())
        return "\n".join(reversed(parts))

    def has_state_text(self) -> bool:
        """Whether :meth:`state_text` is available (``context='state'`` needs it)."""
        return type(self).state_text is not ToolEnv.state_text

    def context_messages(self) -> list[dict[str, Any]]:
        """What the agent sees for its next turn under the env's context policy (``info["context"]``): the whole
        chat (``full``), the task and the last K turns with a note of how many were left out (``window:K``), the
        task and :meth:`state_text` (``state``), or what the user's function returns. The env decides; every
        rollout loop, evaluation and engine adapter that reads ``info["context"]`` shows the same."""
        return self.context_policy.view(
            self.messages,
            state_text=self.state_text,
            user_message_at=self._user_message_at,
            where=f"task {self._episode_task_id!r}, turn {self.turn}",
        )

    def state_key(self) -> Any:
        """A hashable key of the world's current state, equal for equal states (world envs: the room, the
        inventory, the page; step-level credit groups turns by it). ``None`` for answer-shaped envs, whose state
        is the whole history."""
        return None

    # ---- users who speak more than once (``user_turns = True``) -----------------------------------------------
    def next_user_message(self) -> str | None:
        """The user's next message, once the agent has replied to the current one; None when the user has said
        everything (the episode then ends). Only envs with ``user_turns = True`` are asked."""
        return None

    def user_turn_units(self, reply: str) -> dict[str, float]:
        """Process-reward units the user turn that ``reply`` ends has earned (a world that checks each user turn
        pays here; capped per episode by :meth:`process_reward_caps`, as every process reward is)."""
        return {}

    def listed_tools(self) -> list[Tool]:
        """The tools the first message lists (every tool by default). An env may keep a tool callable before it
        lists it (BFCL's held-back functions, which a later user turn adds)."""
        return list(self.tools.values())

    def on_tool_calls(self, calls: Sequence[ToolCall]) -> None:
        """Called with a turn's well-formed tool calls before they run (valid or not; a world that scores what
        was attempted records them here)."""
        return None

    def _user_turn_reply(self, action: str, parsed: ParsedAction) -> str | None:
        """The agent's reply to the current user message: a turn with no tool call (and no malformed one), or an
        ``<answer>``; None for anything else."""
        if parsed.calls:
            return None
        if parsed.answer is not None:
            return parsed.answer
        text = strip_thinking(action)
        if "<tool_call>" in text or "<answer>" in text or "</tool_call>" in text:
            return None  # a call or an answer that did not parse: a format error, as in any env
        return text.strip()

    # ---- the declared optional API -----------------------------------------------------------------------
    @property
    def num_tasks(self) -> int | None:
        """How many tasks ``task_index`` ranges over (None: unbounded, procedural)."""
        return None if self.tasks is None else len(self._task_pool())

    @property
    def gold_answers(self) -> tuple[str, ...]:
        """The current task's gold answers (never shown in observations or info); empty before the first reset
        (wrappers such as GEM's read attributes then)."""
        return tuple(self.task_answers(self.task)) if self.task is not None else ()

    def oracle_action(self) -> str:
        """The next turn of a policy that knows the gold evidence and answer (scripted; for tests, warm starts
        and evaluation floors). Envs without one raise :class:`~agentr1_gym.errors.NoOracleError`."""
        raise NoOracleError(f"{type(self).__name__} has no oracle_action(); choose another policy")

    def random_action(self) -> str:
        """A turn of a policy that acts at random among the actions the current state allows (a floor for
        evaluations), drawn with ``self.np_random``. Answer-shaped envs answer "unknown"; world envs pick among
        the moves their world offers (admissible commands, clickable buttons)."""
        self._require_task("random_action()")
        return self.answer_text("unknown")

    def max_episode_reward(self) -> float:
        """The largest return an episode on the current task can reach under the reward config."""
        self._require_task("max_episode_reward()")
        caps = self.process_reward_caps()
        total = self.reward_config.max_outcome()
        total += sum(max(w, 0.0) * caps.get(name, 0.0) for name, w in self._weights.items())
        w = self.reward_config.tool_success_reward
        if w > 0:  # paid for at most tool_success_cap calls; an answer-shaped task's last turn answers
            calls = (self.max_turns - (1 if self.final_answer else 0)) * self.max_calls_per_turn
            total += w * min(self.reward_config.tool_success_cap, calls)
        return total

    def is_success(self, metrics: dict[str, float]) -> bool:
        """Whether an episode with these answer metrics solved its task (``success_metric`` >= 1)."""
        return float(metrics.get(self.success_metric, 0.0)) >= 1.0

    def task_text(self) -> str:
        """The task-specific part of the first user message, without the tool-call format's instructions (for
        frameworks that present the tools themselves, such as TRL's ``environment_factory``)."""
        self._require_task("task_text()")
        return self.task_prompt(self.task)

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (or none has started)."""
        return self._done

    def task_id(self) -> str:
        """The current task's id: its ``id`` attribute or ``"id"`` key, else its index in ``tasks``."""
        task = self.task
        found = task.get("id") if isinstance(task, dict) else getattr(task, "id", None)
        if found is None and self.tasks is not None and task is not None:
            found = getattr(self, "_task_index", None)
        return "" if found is None else str(found)

    def _require_task(self, what: str) -> None:
        if self.task is None:
            raise ResetNeededError(f"call reset() before {what}")

    # ---- gym API -----------------------------------------------------------------------------------------
    def _pick(self, options: dict[str, Any]) -> Any:
        allowed = ["task_index", *self.reset_options]
        for key in options:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(
                    f"unknown reset option {key!r}{hint}; {type(self).__name__} takes {allowed}"
                )
        index = options.get("task_index")
        n = self.num_tasks
        if index is not None:
            if (
                isinstance(index, bool)
                or not isinstance(index, (int, np.integer))
                or index < 0
                or (n is not None and index >= n)
            ):
                bound = f"[0, {n})" if n is not None else ">= 0"
                raise ConfigError(f"options['task_index'] must be an int in {bound}, got {index!r}")
            if n is None:  # procedural: task i is the one generated from seed i
                return self.generate_task(np.random.default_rng(int(index)), options)
            self._task_index = self._task_pool()[int(index)]
            return self.tasks[self._task_index]  # type: ignore[index]
        if n is None:
            return self.generate_task(self.np_random, options)
        self._task_index = self._task_pool()[int(self.np_random.integers(n))]
        return self.tasks[self._task_index]  # type: ignore[index]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self.task = self._pick(dict(options or {}))
        self.turn = 0
        self._done = False
        self._format_ok = True
        self._world_ended = False
        self._paid_units = {}  # process-reward units paid this episode, per component
        self.executed_calls = []
        self.on_reset()
        instructions = self.tool_format.instructions(self.listed_tools(), answer=self.final_answer)
        prompt = clean_text(f"{instructions}\n\n{self.task_prompt(self.task)}")
        self.messages = [{"role": "user", "content": prompt}]
        self._user_message_at = 0  # where the user's current message is in ``messages`` (user_turns worlds)
        self._context_chars = len(prompt)
        self._episode_task_id = self.task_id()  # the task is fixed for the episode: every step reports this
        info = {
            "messages": list(self.messages),
            "context": self.context_messages(),
            "tools": copy.deepcopy(self._tool_schemas),
            "task_id": self._episode_task_id,
            "turn": 0,
        }
        if self.render_mode == "human":
            self._shown = 0
            self.render()
        return prompt, info

    def close_episode(
        self, answer: str | None = None, *, terminated: bool = False
    ) -> tuple[dict[str, float], dict[str, float]]:
        """End the episode: score ``answer`` (None: truncated, no answer) and return ``(outcome reward
        components, metrics)``. ``step`` calls it; a wrapper that cuts an episode short can call it too, so that the cut episode is
        scored like one the env truncated."""
        self._done = True
        metrics = self.score_answer(answer if terminated else None)
        score = float(metrics[self.answer_metric])
        format_ok = self._format_ok and terminated
        success = self.is_success(metrics)
        components = self.reward_config.outcome(score, format_ok, success)
        metrics = {
            **metrics,
            "score": score,
            "success": float(success),
            "format_ok": float(format_ok),
            "turns": float(self.turn),
            "repeat_rate": repeat_rate(self.messages),
        }
        return components, metrics

    def checked_action(self, action: Any) -> str:
        """``action`` as a step takes it (lone surrogates replaced: model text is untrusted, see
        :mod:`agentr1_gym.text`); a step before ``reset`` or after the episode's end, or an action that is not text,
        raises (for subclasses that write their own ``step``)."""
        if self.task is None:
            raise ResetNeededError("Cannot call step() before reset(): call env.reset() first.")
        if self._done:
            raise ResetNeededError("The episode has ended (terminated or truncated); call env.reset() first.")
        if not isinstance(action, str):
            raise TypeError(f"an action is one assistant turn as str, got {type(action).__name__}")
        return clean_text(action)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = self.checked_action(action)
        self.turn += 1
        components = dict.fromkeys(self._component_keys, 0.0)
        self.messages.append({"role": "assistant", "content": action})
        self._context_chars += len(action)

        if len(action) > self.max_action_chars:
            parsed = ParsedAction(
                error=f"The turn is {len(action)} characters long; the limit is {self.max_action_chars}. "
                "Write shorter turns."
            )
        else:
            parsed = self.tool_format.parse(action, self.tools)
        parsed, too_deep = _clean_calls(parsed)
        if parsed.error is None and len(parsed.calls) > self.max_calls_per_turn:
            parsed = ParsedAction(
                error=f"The turn makes {len(parsed.calls)} tool calls; at most {self.max_calls_per_turn} "
                "per turn are allowed. Call one tool, wait for its result, then continue."
            )

        action_error: str | None = None
        new_messages: list[dict[str, Any]] = []
        obs_parts: list[str] = []
        terminated = False
        user_spoke = False  # the observation is the user's next message (not a tool's answer)
        reply = self._user_turn_reply(action, parsed) if self.user_turns else None
        if reply is not None:  # the agent answered the current user message: the user speaks next, or the end
            earned = self.user_turn_units(reply)
            caps = self.process_reward_caps() if earned else {}
            for key, units in earned.items():
                self._pay(components, key, units, self._weights[key], caps.get(key, 1.0))
            following = self.next_user_message()
            if following is None:
                terminated = True
                parsed = ParsedAction(answer=reply)
            else:
                following = clean_text(following)
                self._user_message_at = len(self.messages) + len(new_messages)
                new_messages.append({"role": "user", "content": following})
                obs_parts.append(following)
                user_spoke = True
        elif parsed.error is not None:
            action_error = parsed.error if self.final_answer else for_world(parsed.error)
            parsed = ParsedAction(error=action_error)
            self._format_ok = False
            components["invalid_format"] += self.reward_config.invalid_format_penalty
            new_messages.append({"role": "user", "content": parsed.error})
            obs_parts.append(parsed.error)
        elif parsed.answer is not None and not self.final_answer:
            action_error = (
                "This task has no final answer: it ends when the world says so. Act with the tools instead."
            )
            self._format_ok = False
            components["invalid_format"] += self.reward_config.invalid_format_penalty
            new_messages.append({"role": "user", "content": action_error})
            obs_parts.append(action_error)
        elif parsed.answer is not None:
            terminated = True
        else:
            action_error = self._run_calls(parsed.calls, components, new_messages, obs_parts, too_deep)
            terminated = self._world_ended

        for message in new_messages:  # error texts may quote the model's own (untrusted) text
            message["content"] = clean_text(message["content"])
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
            "task_id": self._episode_task_id,
            "turn": self.turn,
            "action_error": action_error,
            "num_tool_calls": len(parsed.calls),
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in parsed.calls],
            "truncated_reason": truncated_reason,
        }
        if user_spoke:
            info["user_spoke"] = True
        if terminated and self.final_answer and parsed.answer is not None:
            info["answer"] = (
                parsed.answer
            )  # the model's final answer, as scored (records put it beside the gold)
        if terminated or truncated:
            outcome_parts, info["metrics"] = self.close_episode(parsed.answer, terminated=terminated)
            components.update(outcome_parts)
        process = sum(v for k, v in components.items() if k not in OUTCOME_KEYS)
        outcome = sum(components[k] for k in OUTCOME_KEYS)
        self.finish_info(info, components, process, outcome)
        obs = "" if terminated else clean_text("\n".join(obs_parts))
        if self.render_mode == "human":
            self.render()
        return obs, float(process + outcome), terminated, truncated, info

    def finish_info(
        self, info: dict[str, Any], components: dict[str, float], process: float, outcome: float
    ) -> dict[str, Any]:
        """Complete a step's ``info``: its reward components and their process/outcome split, the chat so far and
        what the agent sees next under the context policy (for subclasses that write their own ``step``). Every
        value keeps the reward rule (finite, within ``REWARD_LIMIT``) or this raises
        :class:`~agentr1_gym.errors.RewardRangeError` naming it: an env never hands a trainer an infinite step."""
        for key, value in (*components.items(), ("process_reward", process), ("outcome_reward", outcome)):
            problem = reward_problem(value)
            if problem is not None:
                raise RewardRangeError(
                    f"{type(self).__name__} step {self.turn}: reward component {key!r} is {problem}; check the "
                    "weights and reward functions that pay it"
                )
        info.update(
            reward_components=components,
            process_reward=process,
            outcome_reward=outcome,
            messages=list(self.messages),
        )
        info["context"] = info["messages"] if not self.context_policy.rewrites else self.context_messages()
        return info

    def _run_calls(
        self,
        calls: Sequence[ToolCall],
        components: dict[str, float],
        new_messages: list[dict[str, Any]],
        obs_parts: list[str],
        too_deep: frozenset[int] = frozenset(),
    ) -> str | None:
        """Validate and run the calls of one turn (batched per tool); fill the result messages. ``too_deep``:
        the indices of calls whose arguments nest deeper than :data:`~agentr1_gym.text.MAX_JSON_DEPTH`."""
        role = self.tool_format.result_role
        self.on_tool_calls(calls)
        errors: list[str] = []
        results: list[ToolResult | None] = [None] * len(calls)
        pending: dict[str, list[tuple[int, BaseModel]]] = {}
        ordered: list[
            tuple[str, list[tuple[int, BaseModel]]]
        ] = []  # ordered_calls: one batch per call, in order
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
            if i in too_deep:
                errors.append(
                    f"Invalid arguments for tool {call.name!r}: they nest more than {MAX_JSON_DEPTH} levels deep."
                )
                results[i] = ToolResult(errors[-1], success=False, metadata={"call_error": True})
                continue
            try:
                validated = tool.validate(call.arguments)
            except ValidationError as exc:
                errors.append(describe_validation_error(call.name, exc))
                results[i] = ToolResult(errors[-1], success=False, metadata={"call_error": True})
                continue
            if self.ordered_calls:
                ordered.append((call.name, [(i, validated)]))
            else:
                pending.setdefault(call.name, []).append((i, validated))
        for name, items in ordered or list(pending.items()):
            outputs = self.tools[name].execute_batch([args for _, args in items])
            if not isinstance(outputs, list) or len(outputs) != len(items):
                raise ToolContractError(
                    f"tool {name!r}: execute_batch returned {type(outputs).__name__} for {len(items)} calls; it must "
                    "return a list of one ToolResult per call"
                )
            for (i, _), out in zip(items, outputs, strict=True):
                _check_result(name, out)
                results[i] = out
        caps: dict[str, float] | None = None
        for call, result in zip(calls, results, strict=True):
            assert result is not None
            if not result.metadata.get("call_error"):
                self.executed_calls.append(call)
            if result.metadata.get("call_error"):
                self._format_ok = False
                components["invalid_call"] += self.reward_config.invalid_call_penalty
            elif result.success:
                cfg = self.reward_config
                self._pay(components, "tool_success", 1.0, cfg.tool_success_reward, cfg.tool_success_cap)
                earned = self.process_reward_units(call, result)
                if earned and caps is None:
                    caps = self.process_reward_caps()
                for key, units in earned.items():
                    self._pay(components, key, units, self._weights[key], caps.get(key, 1.0))  # type: ignore[union-attr]
            if result.terminal:
                self._world_ended = True
            raw = result.content if isinstance(result.content, str) else str(result.content)
            content = truncate_text(clean_text(raw), self.tool_output_chars)
            new_messages.append(
                {"role": role, "name": call.name, "content": content}
                if role == "tool"
                else {"role": role, "content": self.tool_format.render_result(content)}
            )
            obs_parts.append(self.tool_format.render_result(content))
        return " ".join(errors) if errors else None

    def _pay(self, components: dict[str, float], key: str, units: float, weight: float, cap: float) -> None:
        """Pay ``units`` of process component ``key`` at ``weight``, never more than ``cap`` units per episode
        (the library enforces every cap: an env's declared :meth:`process_reward_caps`, 1 unit for a component
        it declares none for, and ``tool_success_cap``). Negative units (an env's own penalties) are not capped."""
        if units > 0:
            paid = self._paid_units.get(key, 0.0)
            units = max(0.0, min(float(units), cap - paid))
            if units <= 1e-12:
                return
            self._paid_units[key] = paid + units
        components[key] += units * weight

    def render(self) -> str | None:
        """``render_mode="ansi"``: the whole chat as text. ``"human"``: prints the messages not printed yet (the
        chat at a reset, then each step's new messages), so a terminal shows the conversation once, however often
        ``render()`` is called."""
        if self.render_mode == "human":
            shown = getattr(self, "_shown", 0)
            self._shown = len(self.messages)
            if self.messages[shown:]:
                print("\n".join(f"[{m['role']}] {m['content']}" for m in self.messages[shown:]))
            return None
        return "\n".join(f"[{m['role']}] {m['content']}" for m in self.messages)

    # ---- helpers -----------------------------------------------------------------------------------------
    def call_text(self, name: str, **arguments: Any) -> str:
        """An assistant turn that calls tool ``name`` in this env's format (for scripted policies)."""
        return self.tool_format.format_call(ToolCall(name=name, arguments=arguments))

    def answer_text(self, answer: str) -> str:
        """An assistant turn that gives ``answer`` in this env's format."""
        return self.tool_format.format_answer(answer)
