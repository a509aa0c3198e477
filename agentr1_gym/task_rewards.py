"""A task's reward functions (:func:`agentr1_gym.make_task`'s ``reward=`` and ``process_rewards=``): each checked
when the task is made (its signature, weight and cap, its name against the env's own metrics) and, when called,
held to its contract (a number in [0, 1] for an outcome component; units >= 0 for a process reward), so that a bug
in a task's code raises :class:`RewardFunctionError` naming the function, never a silent or infinite reward."""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentr1_gym.errors import ConfigError, RewardRangeError
from agentr1_gym.matching import answer_match
from agentr1_gym.rewards import GENERIC_PROCESS_KEYS, OUTCOME_KEYS, REWARD_LIMIT, RewardConfig

__all__ = [
    "PROCESS_PARAMETERS",
    "RESERVED_METRICS",
    "REWARD_PARAMETERS",
    "ProcessRewardFn",
    "RewardFn",
    "RewardFunctionError",
    "golds",
    "process_reward_functions",
    "reward_functions",
]

#: the parameter names a reward function may take
REWARD_PARAMETERS = ("answer", "task", "world", "messages")
#: the parameter names a process-reward function may take (one successful tool call, and where it happened)
PROCESS_PARAMETERS = ("tool", "arguments", "result", "task", "world", "calls")
#: metric names the env sets itself (a reward component cannot take them)
RESERVED_METRICS = ("score", "success", "format_ok", "turns", "repeat_rate")


class RewardFunctionError(ConfigError):
    """A reward function returned something that is not a number in [0, 1], or raised (a bug in the task's code,
    never the model's fault). The message names the function and the task."""


@dataclass(frozen=True)
class RewardFn:
    name: str
    fn: Callable[..., Any]
    weight: float
    params: tuple[str, ...]  # the REWARD_PARAMETERS it takes

    def __call__(self, values: dict[str, Any], task_id: str) -> float:
        try:
            out = self.fn(**{p: values[p] for p in self.params})
        except Exception as exc:
            raise RewardFunctionError(
                f"reward function {self.name!r} raised {type(exc).__name__}: {exc} (task {task_id!r}, answer "
                f"{str(values.get('answer'))[:80]!r}); reward functions must score any answer, including None and "
                "garbage"
            ) from exc
        if isinstance(out, bool):
            return float(out)
        if not isinstance(out, (int, float)):  # numpy scalars and Fractions; a 0-d array or tensor by .item()
            if isinstance(out, numbers.Real):
                out = float(out)
            elif callable(getattr(out, "item", None)):
                with contextlib.suppress(TypeError, ValueError):
                    out = out.item()
        if (
            isinstance(out, bool)
            or not isinstance(out, (int, float))
            or not math.isfinite(out)
            or not 0.0 <= out <= 1.0
        ):
            raise RewardFunctionError(
                f"reward function {self.name!r} returned {out!r} for task {task_id!r}; a reward function returns "
                "a number in [0, 1] or a bool (scale components with weights)"
            )
        return float(out)


def _reward_fn(name: str, fn: Any, weight: Any, has_world: bool) -> RewardFn:
    if not callable(fn):
        raise ConfigError(f"reward {name!r}: expected a function, got {type(fn).__name__}")
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or not math.isfinite(weight)
        or weight <= 0
    ):
        raise ConfigError(f"reward {name!r}: its weight must be a positive number, got {weight!r}")
    if weight > REWARD_LIMIT:
        raise RewardRangeError(
            f"reward {name!r}: its weight {weight:g} is beyond the reward limit {REWARD_LIMIT:g}"
        )
    if name in RESERVED_METRICS:
        raise ConfigError(f"reward {name!r}: that metric name is the env's own; name the component otherwise")
    params = list(_params("reward function", name, fn, REWARD_PARAMETERS))
    takes_all = len(params) == len(REWARD_PARAMETERS)
    if "world" in params and not has_world and not takes_all:
        raise ConfigError(f"reward {name!r} takes 'world', but the task has no world= class")
    return RewardFn(name, fn, float(weight), tuple(params))


def reward_functions(reward: Any, answer_field: str | None, has_world: bool) -> tuple[RewardFn, ...]:
    if reward is None:
        if has_world or answer_field is None:
            raise ConfigError("reward=: a world task (or one without an answer field) needs reward functions")

        def correct(answer: str | None, task: dict[str, Any]) -> float:
            return 0.0 if answer is None else answer_match(answer, golds(task.get(answer_field)))

        return (RewardFn("correct", correct, 1.0, ("answer", "task")),)
    if callable(reward) and not isinstance(reward, (list, tuple, dict)):
        name = getattr(reward, "__name__", "")
        reward = {name if name and name != "<lambda>" else "reward": reward}
    if isinstance(reward, Mapping):
        items = []
        for name, value in reward.items():
            fn, weight = value if isinstance(value, tuple) else (value, 1.0)
            items.append(_reward_fn(str(name), fn, weight, has_world))
    elif isinstance(reward, Sequence):
        items = []
        for fn in reward:
            name = getattr(fn, "__name__", "")
            if not name or name == "<lambda>":
                raise ConfigError(
                    "reward=[...]: each function is reported under its name; name lambdas with a dict: "
                    "reward={'name': fn}"
                )
            items.append(_reward_fn(name, fn, 1.0, has_world))
    else:
        raise ConfigError(
            f"reward=: a function, a list of functions or a dict of them, got {type(reward).__name__}"
        )
    names = [r.name for r in items]
    if not items:
        raise ConfigError("reward=: no reward functions given")
    if len(set(names)) != len(names):
        raise ConfigError(f"reward=: two reward components have the same name: {names}")
    return tuple(items)


@dataclass(frozen=True)
class ProcessRewardFn:
    """A task's own process reward: ``fn`` returns the units one successful tool call earned (a number >= 0 or a
    bool), paid ``weight`` each, at most ``cap`` units per episode (the env enforces the cap, so repeating a
    rewarded call earns nothing once it is reached)."""

    name: str
    fn: Callable[..., Any]
    weight: float
    cap: float
    params: tuple[str, ...]  # the PROCESS_PARAMETERS it takes

    def __call__(self, values: dict[str, Any], task_id: str) -> float:
        try:
            out = self.fn(**{p: values[p] for p in self.params})
        except Exception as exc:
            raise RewardFunctionError(
                f"process reward {self.name!r} raised {type(exc).__name__}: {exc} (task {task_id!r}, call "
                f"{values['tool']}({str(values['arguments'])[:60]})); process rewards must take any call"
            ) from exc
        if isinstance(out, numbers.Real):  # bools, ints, numpy scalars
            out = float(out)
        if not isinstance(out, float) or not math.isfinite(out) or out < 0:
            raise RewardFunctionError(
                f"process reward {self.name!r} returned {out!r} for task {task_id!r}; a process reward returns "
                "the units a call earned: a number >= 0 or a bool (its weight sets the reward per unit)"
            )
        return out


def _params(kind: str, name: str, fn: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The parameters of ``fn`` among ``allowed`` (all of them for ``**kwargs``), or a ConfigError."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ConfigError(f"{kind} {name!r}: cannot read the function's signature") from None
    params: list[str] = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            return allowed
        if p.kind is p.VAR_POSITIONAL:
            continue
        if p.name in allowed:
            if p.kind is p.POSITIONAL_ONLY:
                raise ConfigError(
                    f"{kind} {name!r}: parameter {p.name!r} is positional-only; it is called by keyword"
                )
            params.append(p.name)
        elif p.default is p.empty:
            raise ConfigError(
                f"{kind} {name!r} takes parameter {p.name!r}; it may take any of {', '.join(allowed)} (by name)"
            )
    return tuple(params)


def process_reward_functions(given: Any, has_world: bool) -> tuple[ProcessRewardFn, ...]:
    if given is None:
        return ()
    if not isinstance(given, Mapping):
        raise ConfigError(
            "process_rewards=: a dict {'name': fn}, {'name': (fn, weight)} or {'name': (fn, weight, cap)}, got "
            f"{type(given).__name__}"
        )
    out = []
    for name, value in given.items():
        name = str(name)
        parts = value if isinstance(value, tuple) else (value,)
        if not 1 <= len(parts) <= 3:
            raise ConfigError(
                f"process reward {name!r}: fn, (fn, weight) or (fn, weight, cap), got {len(parts)} items"
            )
        fn, weight, cap = {1: (*parts, 0.1, 1.0), 2: (*parts, 1.0), 3: parts}[len(parts)]
        if not callable(fn):
            raise ConfigError(f"process reward {name!r}: expected a function, got {type(fn).__name__}")
        for label, number in (("weight", weight), ("cap", cap)):
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
                raise ConfigError(f"process reward {name!r}: its {label} must be a number, got {number!r}")
        if cap <= 0:
            raise ConfigError(
                f"process reward {name!r}: its cap (units per episode) must be > 0, got {cap!r}"
            )
        if abs(weight) * cap > REWARD_LIMIT:
            raise RewardRangeError(
                f"process reward {name!r}: weight x cap = {abs(weight) * cap:g} could pay more than the reward limit "
                f"+-{REWARD_LIMIT:g} in an episode; keep |weight| x cap within it"
            )
        if name in (
            *RESERVED_METRICS,
            *GENERIC_PROCESS_KEYS,
            *OUTCOME_KEYS,
            *RewardConfig.model_fields,
        ) or name.endswith("_reward"):
            raise ConfigError(
                f"process reward {name!r}: that name is the env's own or a RewardConfig field; name it otherwise"
            )
        params = _params("process reward", name, fn, PROCESS_PARAMETERS)
        if "world" in params and not has_world and len(params) < len(PROCESS_PARAMETERS):
            raise ConfigError(f"process reward {name!r} takes 'world', but the task has no world= class")
        out.append(ProcessRewardFn(name, fn, float(weight), float(cap), params))
    return tuple(out)


def golds(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
