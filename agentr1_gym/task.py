"""Your own task without subclassing: a dataset, a prompt template, tools and reward functions.

>>> from agentr1_gym import register_task, tool
>>> @tool
... def lookup(city: str) -> str:
...     '''The country a city is in.
...
...     Args:
...         city: a city name
...     '''
...     return {"Paris": "France", "Lima": "Peru"}.get(city, "unknown city")
>>> spec = register_task(
...     "Docs/Capitals-v0",
...     [{"question": "Which country is Paris in?", "answer": "France"},
...      {"question": "Which country is Lima in?", "answer": "Peru"}],
...     prompt="{question}",
...     tools=[lookup],
... )
>>> import gymnasium as gym
>>> env = gym.make("Docs/Capitals-v0", max_turns=3)

**Answer-shaped** tasks end on the model's ``<answer>``; the default reward is :func:`~agentr1_gym.matching.answer_match`
of the answer against the row's ``answer`` field. **World-shaped** tasks pass ``world=`` a class: each episode
builds ``world(task_row)``; its public methods are the tools (typed and documented like :func:`tool` functions);
the episode ends when a call leaves ``world.done`` true; reward functions read the world's final state; an optional
``state_key()`` method gives step-level credit the world's state, ``state_text()`` the ``state`` context policy
its text, and ``admissible_actions()`` (``[(method, kwargs), ...]``) the random policy its moves.

Reward functions are plain functions whose parameters are named from ``answer`` (the final answer, ``None`` when
there is none), ``task`` (the dataset row), ``world`` (world tasks) and ``messages`` (the chat). Each returns a
number in [0, 1] (or a bool). Several are weighted (``{"name": (fn, weight)}``); each is reported as a metric of
that name, and ``score`` is their weighted mean. An episode succeeds when ``score >= success_threshold``.
"""

from __future__ import annotations

import difflib
import inspect
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1_gym.data.records import load_rows
from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError, NoOracleError, TaskCodeError
from agentr1_gym.rewards import ProcessReward, RewardConfig
from agentr1_gym.settings import EnvSettings, check_task_settings
from agentr1_gym.task_rewards import (
    PROCESS_PARAMETERS,
    REWARD_PARAMETERS,
    ProcessRewardFn,
    RewardFn,
    RewardFunctionError,
    golds,
    process_reward_functions,
    reward_functions,
)
from agentr1_gym.tools.base import Tool, ToolResult
from agentr1_gym.tools.function import FunctionTool, from_function, public_methods, to_result, tool_class

__all__ = [
    "PROCESS_PARAMETERS",
    "REWARD_PARAMETERS",
    "RewardFunctionError",
    "TaskCodeError",
    "TaskEnv",
    "TaskSpec",
    "load_rows",
    "make_task",
    "register_task",
]

#: world methods that are not tools
_WORLD_API = ("state_key", "state_text", "admissible_actions")
#: registered tasks: env id -> spec
_TASKS: dict[str, TaskSpec] = {}


# ---- the prompt template -------------------------------------------------------------------------------------
def _template_fields(template: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"prompt template {template[:60]!r}: {exc}") from None
    names = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        root = name.split(".", 1)[0].split("[", 1)[0]
        if not root or root.isdigit():
            raise ConfigError(
                f"prompt template {template[:60]!r}: fields are named after dataset columns, got {{{name}}}"
            )
        names.append(root)
    return names


# ---- the spec and the env ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskSpec:
    """A validated task (what :func:`make_task` returns); :class:`TaskEnv` runs it."""

    rows: tuple[dict[str, Any], ...]
    prompt: str | Callable[[dict[str, Any]], str]
    tools: tuple[Tool, ...]
    rewards: tuple[RewardFn, ...]
    answer_field: str | None
    id_field: str
    world: type | None
    oracle: Callable[[ToolEnv], str | list[Any]] | None
    success_threshold: float
    max_turns: int
    final_answer: bool
    description: str = ""
    world_tools: tuple[type[FunctionTool], ...] = field(default=())
    #: the row field holding the user's later messages (None: the user speaks once)
    user_turns: str | None = None
    #: the task's own process rewards, paid per successful call and capped per episode
    process_rewards: tuple[ProcessRewardFn, ...] = field(default=())
    #: the task's default env settings, named as gym.make takes them (gym.make's own override them)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def make(self, **settings: Any) -> TaskEnv:
        """A :class:`TaskEnv` of this task (unregistered; :func:`register_task` gives it an id)."""
        return TaskEnv(self, **settings)


def make_task(
    dataset: Any,
    *,
    prompt: str | Callable[[dict[str, Any]], str],
    tools: Sequence[Tool | Callable[..., Any]] = (),
    reward: Any = None,
    world: type | None = None,
    answer_field: str | None = "answer",
    id_field: str = "id",
    oracle: Callable[[ToolEnv], str | list[Any]] | None = None,
    success_threshold: float = 1.0,
    max_turns: int = 6,
    final_answer: bool | None = None,
    description: str = "",
    user_turns: str | None = None,
    process_rewards: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> TaskSpec:
    """Validate a task made of parts (see the module docstring); every mistake is a one-line
    :class:`ConfigError` naming the field.

    Args:
        dataset: the tasks: a list or iterable of dicts, a JSONL path or a ``datasets.Dataset``.
        prompt: a ``str.format`` template over the row's fields (``"{question}"``) or a function of the row.
        tools: :class:`Tool` instances or plain typed functions (made tools with :meth:`Tool.from_function`).
        reward: a reward function, a list of them, or ``{"name": fn}`` / ``{"name": (fn, weight)}``; default:
            :func:`~agentr1_gym.matching.answer_match` against ``answer_field``.
        world: world-shaped tasks: a class built from each row; its public methods are tools; ``done`` ends it.
        answer_field: the row field holding the gold answer(s) (``None``: no gold answers).
        id_field: the row field holding the task's id (else its index).
        oracle: ``oracle(env) -> str``, the next turn of a policy that knows the answer (for warm starts and
            tests; build turns with ``env.call_text(tool, **args)`` / ``env.answer_text(text)``), or the whole
            plan as a list, each step a call ``(tool, {args})`` (``(tool,)`` without arguments) or the answer
            text; the oracle plays the first step that the calls succeeded so far have not done (so it resumes
            after any deviation, and a failed call is played again) (``lambda env: [("sql", {"query": env.task["query"]}), env.task["answer"]]``). Default
            for answer tasks with gold answers: answer at once.
        success_threshold: an episode succeeds when its ``score`` is at least this.
        max_turns: the default episode length (``gym.make(id, max_turns=...)`` overrides it).
        final_answer: whether ``<answer>`` ends the episode (default: True without a world, False with one).
        description: one line for ``agentr1 list``.
        user_turns: a user who speaks more than once: the row field holding the user's later messages (a list of
            strings). A turn without a tool call is then the agent's reply; the next message follows it as a user
            turn, and the episode ends after the reply to the last one (reward functions get that reply as
            ``answer`` and the whole chat as ``messages``).
        process_rewards: the task's own per-step rewards, ``{"name": fn}``, ``{"name": (fn, weight)}`` or
            ``{"name": (fn, weight, cap)}``: after each *successful* tool call, ``fn`` returns the units the call
            earned (a number >= 0 or a bool), taking by name any of ``tool`` (its name), ``arguments``, ``result``
            (the tool's text), ``task``, ``world`` and ``calls`` (the episode's calls so far, this one last). Each
            unit pays ``weight`` (default 0.1), at most ``cap`` units per episode (default 1): repeating a rewarded
            call earns nothing once the cap is reached. Reported in ``info["reward_components"][name]``; a run
            reweights it with ``gym.make(id, reward={"process": {name: w}})`` like any env's process reward.
        settings: the task's default env settings, with the names ``gym.make`` takes (``{"reward":
            {"tool_success_reward": 0.05}, "max_calls_per_turn": 2}``); checked now, with a "did you mean" for a
            typo. ``gym.make``'s own settings override them (a ``reward`` dict field by field).
    """
    rows = tuple(load_rows(dataset))
    seen: set[str] = set()
    for i, row in enumerate(rows):
        rid = row.get(id_field)
        if rid is None:
            continue
        if str(rid) in seen:  # the train/held-out split is by task: one id in both would leak the test set
            raise ConfigError(
                f"dataset row {i}: id {rid!r} ({id_field!r}) is used by an earlier row; ids must be unique"
            )
        seen.add(str(rid))
    if isinstance(prompt, str):
        for name in _template_fields(prompt):
            for i, row in enumerate(rows):
                if name not in row:
                    rid = row.get(id_field, i)
                    raise ConfigError(
                        f"dataset row {i} (id {rid!r}) lacks the field {name!r} that the prompt template needs "
                        f"(its fields: {sorted(row)[:10]})"
                    )
        # attribute, index and format-spec errors too, now rather than at reset
        for i, row in enumerate(rows):
            try:
                prompt.format_map(row)
            except Exception as exc:
                raise ConfigError(
                    f"dataset row {i} (id {row.get(id_field, i)!r}): the prompt template {prompt[:60]!r} cannot "
                    f"be filled ({type(exc).__name__}: {str(exc)[:120]})"
                ) from None
    elif not callable(prompt):
        raise ConfigError(f"prompt=: a format string or a function of the row, got {type(prompt).__name__}")
    if world is not None and not isinstance(world, type):
        raise ConfigError(f"world=: a class (built from each row as world(task)), got {type(world).__name__}")
    if user_turns is not None:
        for i, row in enumerate(rows):
            said = row.get(user_turns)
            if not isinstance(said, list) or not all(isinstance(m, str) for m in said):
                raise ConfigError(
                    f"dataset row {i} (id {row.get(id_field, i)!r}): user_turns={user_turns!r} names a field that "
                    f"must hold a list of the user's later messages (strings), got {type(said).__name__}"
                )
    if not 0.0 < success_threshold <= 1.0:
        raise ConfigError(f"success_threshold must be in (0, 1], got {success_threshold!r}")
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ConfigError(f"max_turns must be an int >= 1, got {max_turns!r}")
    built: list[Tool] = []
    for i, t in enumerate(tools):
        if isinstance(t, Tool):
            built.append(t)
        elif callable(t):
            built.append(from_function(t))
        else:
            raise ConfigError(f"tools[{i}]: a Tool or a typed function, got {type(t).__name__}")
    world_tools: list[type[FunctionTool]] = []
    if world is not None:
        for name in public_methods(world, _WORLD_API):
            method = getattr(world, name)
            if inspect.iscoroutinefunction(method):
                raise ConfigError(
                    f"world {world.__name__}.{name}: world methods are called synchronously; use def"
                )
            world_tools.append(tool_class(method, None, None, skip_first=True))
        if not world_tools and not built:
            raise ConfigError(
                f"world {world.__name__} has no public methods to act with (and no tools= given)"
            )
    names = [t.name for t in built] + [t.name for t in world_tools]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise ConfigError(
            f"tool name {clashes[0]!r} is used twice (tools= and world methods must have distinct names)"
        )
    if answer_field is not None and reward is None and world is None:
        missing = [i for i, row in enumerate(rows) if row.get(answer_field) is None]
        if missing:
            raise ConfigError(
                f"dataset row {missing[0]} lacks the answer field {answer_field!r} that the default reward needs "
                "(pass answer_field= or reward=)"
            )
    rewards = reward_functions(reward, answer_field, world is not None)
    process = process_reward_functions(process_rewards, world is not None)
    clash = sorted({p.name for p in process} & {r.name for r in rewards})
    if clash:
        raise ConfigError(f"process reward {clash[0]!r} has the name of a reward function; name it otherwise")
    defaults = check_task_settings(settings, max_turns, [f.name for f in process])
    if oracle is not None and not callable(oracle):
        raise ConfigError(f"oracle=: a function oracle(env) -> str or a plan, got {type(oracle).__name__}")
    return TaskSpec(
        rows=rows,
        prompt=prompt,
        tools=tuple(built),
        rewards=rewards,
        answer_field=answer_field,
        id_field=id_field,
        world=world,
        oracle=oracle,
        success_threshold=float(success_threshold),
        max_turns=max_turns,
        final_answer=(world is None) if final_answer is None else bool(final_answer),
        description=description,
        world_tools=tuple(world_tools),
        user_turns=user_turns,
        process_rewards=process,
        settings=defaults,
    )


def register_task(
    env_id: str, dataset: Any = None, *, spec: TaskSpec | None = None, **parts: Any
) -> TaskSpec:
    """Register a task under ``env_id`` (``"Namespace/Name-v0"``): ``gym.make(env_id)`` and everything downstream
    (``check_env``, ``agentr1 eval/play/train`` with ``your_module:Namespace/Name-v0``, both trainers) then work.
    Takes :func:`make_task`'s arguments, or a ready ``spec=``. Registering the same id again replaces the task."""
    from gymnasium.envs.registration import register, registry

    from agentr1_gym.registration import USER_DESCRIPTIONS

    if spec is None:
        if dataset is None:
            raise ConfigError("register_task needs a dataset (or spec=)")
        _check_parts(parts)
        spec = make_task(dataset, **parts)
    elif dataset is not None or parts:
        raise ConfigError("register_task: pass either spec= or make_task's arguments, not both")
    if not isinstance(env_id, str) or "/" not in env_id or not env_id.rsplit("-v", 1)[-1].isdigit():
        raise ConfigError(f"env id {env_id!r}: use the Gymnasium form 'Namespace/Name-v0'")
    if env_id.startswith("AgentR1/"):
        raise ConfigError(
            f"env id {env_id!r}: the AgentR1/ namespace is the library's; use your own namespace"
        )
    entry = f"{__name__}:TaskEnv"
    if env_id in registry and registry[env_id].entry_point != entry:
        raise ConfigError(
            f"env id {env_id!r} is already registered with Gymnasium by {registry[env_id].entry_point}"
        )
    _TASKS[env_id] = spec
    count = f"{len(spec.rows)} task{'' if len(spec.rows) == 1 else 's'}"
    shape = f"{count}, {'world' if spec.world else 'answer'}-shaped"
    doc = spec.description or _first_paragraph(spec.world.__doc__ if spec.world else None)
    doc = doc or _first_paragraph(sys._getframe(1).f_globals.get("__doc__"))  # the registering module's
    USER_DESCRIPTIONS[env_id] = f"{doc} ({shape})" if doc else shape
    if env_id not in registry:
        register(id=env_id, entry_point=entry, kwargs={"task": env_id})
    return spec


def _first_paragraph(doc: Any) -> str:
    """A docstring's first paragraph on one line, at most 120 characters ('' for none)."""
    if not isinstance(doc, str) or not doc.strip():
        return ""
    text = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    return text if len(text) <= 120 else text[:117] + "..."


def _check_parts(parts: Mapping[str, Any]) -> None:
    """A one-line ConfigError for an argument make_task does not take, saying where such a setting goes."""
    known = [p for p in inspect.signature(make_task).parameters if p != "dataset"]
    for name in parts:
        if name in known:
            continue
        if name in RewardConfig.model_fields or name.endswith("_reward"):
            where = f"settings={{'reward': {{{name!r}: ...}}}} (a RewardConfig field)"
        elif name in EnvSettings.model_fields:
            where = f"settings={{{name!r}: ...}} (an env setting)"
        else:
            close = difflib.get_close_matches(name, known, n=1)
            where = f"{close[0]}=" if close else f"one of {', '.join(known)}"
        raise ConfigError(f"register_task got an unknown argument {name!r}; did you mean {where}?")


class _WorldCall:
    """Calls one method of the env's current world; marks the result terminal when the world is done."""

    def __init__(self, env: TaskEnv, name: str) -> None:
        self.env, self.name = env, name

    def __call__(self, **kwargs: Any) -> ToolResult:
        world = self.env.world
        out = to_result(getattr(world, self.name)(**kwargs))
        if getattr(world, "done", False) and not out.terminal:
            out = ToolResult(out.content, out.success, out.metadata, terminal=True)
        return out


class TaskEnv(ToolEnv):
    """The env of a :class:`TaskSpec` (``task``: a registered id or the spec itself)."""

    def __init__(self, task: str | TaskSpec, **settings: Any) -> None:
        if isinstance(task, str):
            if task not in _TASKS:
                raise ConfigError(
                    f"no task registered as {task!r} in this process; import the module that calls register_task "
                    f"(the 'your_module:{task}' form does it)"
                )
            spec = _TASKS[task]
        elif isinstance(task, TaskSpec):
            spec = task
        else:
            raise ConfigError(f"task: a registered id or a TaskSpec, got {type(task).__name__}")
        self.task_spec = spec
        self._task_key = task if isinstance(task, str) else None
        self.tasks = spec.rows
        self.final_answer = spec.final_answer
        self.answer_metrics = ("score", *(r.name for r in spec.rewards))
        self.world: Any = None
        self.user_turns = spec.user_turns is not None  # type: ignore[misc]
        self._said: list[str] = []
        tools = [*spec.tools, *(cls(_WorldCall(self, cls.name)) for cls in spec.world_tools)]
        self.default_max_turns = spec.max_turns  # type: ignore[misc]
        for key, value in spec.settings.items():  # the task's defaults; gym.make's own settings win
            given = settings.get("reward") if key == "reward" else None
            if isinstance(given, Mapping) and isinstance(value, Mapping):
                settings["reward"] = {**value, **given}
            else:
                settings.setdefault(key, value)
        own = (
            ProcessReward(f.name, f.weight, f"the task's process reward {f.name!r}")
            for f in spec.process_rewards
        )
        self.process_rewards = (*type(self).process_rewards, *own)  # type: ignore[misc]  # a subclass's, the task's
        super().__init__(tools, **settings)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        if self._task_key is not None:  # a registered task travels by its id (its functions may be lambdas)
            state["task_spec"] = None
            state["tasks"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        key = state.get("_task_key")
        if key is not None:
            if key not in _TASKS:
                raise ConfigError(
                    f"no task registered as {key!r} in this process; import the module that calls register_task "
                    f"(the 'your_module:{key}' form does it)"
                )
            state["task_spec"] = _TASKS[key]
            state["tasks"] = _TASKS[key].rows
        super().__setstate__(state)

    def task_prompt(self, task: dict[str, Any]) -> str:
        prompt = self.task_spec.prompt
        if isinstance(prompt, str):
            return prompt.format_map(task)
        try:
            text = prompt(task)
        except Exception as exc:
            raise TaskCodeError(
                f"the prompt function raised {type(exc).__name__}: {str(exc)[:200]} (task {self.task_id()!r})"
            ) from exc
        if not isinstance(text, str):
            raise ConfigError(
                f"prompt function returned {type(text).__name__} for task {self.task_id()!r}, not str"
            )
        return text

    def task_id(self) -> str:
        if isinstance(self.task, dict) and self.task.get(self.task_spec.id_field) is not None:
            return str(self.task[self.task_spec.id_field])
        return str(getattr(self, "_task_index", ""))

    def task_answers(self, task: dict[str, Any]) -> tuple[str, ...]:
        field_ = self.task_spec.answer_field
        return tuple(str(g) for g in golds(task.get(field_))) if field_ else ()

    def next_user_message(self) -> str | None:
        """The row's next later message (``user_turns=``), or None after the last."""
        return self._said.pop(0) if self._said else None

    def process_reward_units(self, call: Any, result: ToolResult) -> dict[str, float]:
        """The task's own process rewards (``process_rewards=``) for one successful call."""
        self._succeeded.append((call.name, dict(call.arguments)))
        if not self.task_spec.process_rewards:
            return {}
        values = {
            "tool": call.name,
            "arguments": dict(call.arguments),
            "result": result.content if isinstance(result.content, str) else str(result.content),
            "task": self.task,
            "world": self.world,
            "calls": [(c.name, dict(c.arguments)) for c in self.executed_calls],
        }
        earned = {f.name: f(values, self.task_id()) for f in self.task_spec.process_rewards}
        return {name: units for name, units in earned.items() if units}

    def process_reward_caps(self) -> dict[str, float]:
        return {f.name: f.cap for f in self.task_spec.process_rewards}

    def on_reset(self) -> None:
        self._succeeded: list[tuple[str, dict[str, Any]]] = []  # the calls that ran and succeeded, in order
        field_ = self.task_spec.user_turns
        self._said = list(self.task[field_]) if field_ else []
        world = self.task_spec.world
        if world is not None:
            try:
                self.world = world(dict(self.task))
            except Exception as exc:
                raise TaskCodeError(
                    f"world {world.__name__}(task) raised {type(exc).__name__}: {str(exc)[:200]} "
                    f"(task {self.task_id()!r}); a world must build from every row of its dataset"
                ) from exc

    def score_answer(self, answer: str | None) -> dict[str, float]:
        values = {
            "answer": answer,
            "task": dict(self.task),
            "world": self.world,
            "messages": list(self.messages),
        }
        tid = self.task_id()
        parts = {r.name: r(values, tid) for r in self.task_spec.rewards}
        total = sum(r.weight for r in self.task_spec.rewards)
        score = sum(parts[r.name] * r.weight for r in self.task_spec.rewards) / total
        return {"score": score, **parts}

    def is_success(self, metrics: dict[str, float]) -> bool:
        return float(metrics.get("score", 0.0)) >= self.task_spec.success_threshold - 1e-9

    def state_key(self) -> Any:
        key = getattr(self.world, "state_key", None)
        return key() if callable(key) else None

    def has_state_text(self) -> bool:
        world = self.task_spec.world
        return world is not None and callable(getattr(world, "state_text", None))

    def state_text(self) -> str:
        """The world's own ``state_text()`` (``context='state'``)."""
        try:
            return str(self.world.state_text())
        except Exception as exc:
            raise TaskCodeError(
                f"world {type(self.world).__name__}.state_text() raised {type(exc).__name__}: {str(exc)[:200]}"
            ) from exc

    def random_action(self) -> str:
        """A random admissible move (``--policy random``), drawn with ``self.np_random``: one of the world's own
        moves when it lists them (a method ``admissible_actions()`` returning ``[(method, kwargs), ...]``), else
        one of its methods that need no argument; answer tasks answer "unknown"."""
        self._require_task("random_action()")
        if self.world is None:
            return super().random_action()
        world_tools = {cls.name for cls in self.task_spec.world_tools}
        listed = getattr(self.world, "admissible_actions", None)
        if callable(listed):
            try:
                moves = [(str(name), dict(kwargs)) for name, kwargs in listed()]
            except Exception as exc:
                raise TaskCodeError(
                    f"world {type(self.world).__name__}.admissible_actions() must return [(method, kwargs), ...]; "
                    f"it raised {type(exc).__name__}: {str(exc)[:200]}"
                ) from exc
            unknown = sorted({name for name, _ in moves} - world_tools)
            if unknown:
                raise ConfigError(
                    f"world {type(self.world).__name__}.admissible_actions() names {unknown[:3]}, which are not "
                    f"its tools ({sorted(world_tools)[:10]})"
                )
            if moves:
                name, kwargs = moves[int(self.np_random.integers(len(moves)))]
                return self.call_text(name, **kwargs)
        free = sorted(
            name for name in world_tools
            if not self.tools[name].schema_view()["function"]["parameters"].get("required")
        )  # fmt: skip
        if not free:
            raise NoOracleError(
                f"world {type(self.world).__name__} has no move that needs no argument and lists none: define "
                "admissible_actions() -> [(method, kwargs), ...] for a random policy"
            )
        return self.call_text(free[int(self.np_random.integers(len(free)))])

    def _plan_step(self, plan: list[Any]) -> str:
        """The next step of an oracle's plan, from the calls that succeeded so far (not the turn number): a call
        ``(tool, {args})`` (or ``(tool,)``) whose match among them, in order, is missing, or else the answer text.
        So a plan resumes after any deviation: a malformed turn, a stray call or a failed call (played again)."""
        done = iter(self._succeeded)
        for index, step in enumerate(plan):
            if isinstance(step, str):
                return self.answer_text(step)
            if not (
                isinstance(step, tuple)
                and len(step) in (1, 2)
                and isinstance(step[0], str)
                and (len(step) == 1 or isinstance(step[1], dict))
            ):
                raise ConfigError(
                    f"step {index} of the oracle's plan is {step!r:.80}: a step is a call (tool, {{args}}) or "
                    "the answer text"
                )
            call = (step[0], dict(step[1]) if len(step) == 2 else {})
            if not any(made == call for made in done):  # consumes the calls up to its match
                return self.call_text(call[0], **call[1])
        raise ConfigError(
            f"the oracle's plan has {len(plan)} steps, every call of it has run, and it gives no answer after "
            "them: end a plan with the answer text, or with the call that ends the world"
        )

    def oracle_action(self) -> str:
        self._require_task("oracle_action()")
        if self.task_spec.oracle is not None:
            turn = self.task_spec.oracle(self)
            if isinstance(turn, list):  # the whole plan: play this turn's step
                return self._plan_step(turn)
            if not isinstance(turn, str):
                raise ConfigError(
                    f"oracle returned {type(turn).__name__}: return the turn's text, or the plan as a list"
                )
            return turn
        golds = self.gold_answers
        if self.final_answer and golds:
            return self.answer_text(golds[0])
        raise NoOracleError(
            f"task {self.spec.id if self.spec else ''!r} has no oracle: pass oracle= to make_task"
        )
