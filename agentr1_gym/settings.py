"""The settings every env shares (:class:`EnvSettings`: ``gym.make(id, max_turns=10)``), and the keyword check
around every env's ``__init__``: a concrete env's constructor names only its own keywords and passes
``**settings`` on; the accepted keywords (for ``gym.make``, the "did you mean" check and ``inspect.signature``)
are the union of its own, its env base classes' and :class:`EnvSettings`'. A task's own default settings
(``make_task(settings=...)``) are checked against them by :func:`check_task_settings`."""

from __future__ import annotations

import difflib
import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentr1_gym.context import parse_context
from agentr1_gym.errors import BadArgumentError, ConfigError
from agentr1_gym.formats import ToolCallFormat
from agentr1_gym.rewards import RewardConfig, unknown_process_reward_hint

__all__ = ["RENAMED_KEYWORDS", "EnvSettings", "accepted_keywords", "check_keywords", "check_task_settings"]


class EnvSettings(BaseModel):
    """The settings every :class:`~agentr1_gym.env.ToolEnv` takes as keyword arguments (``gym.make(id, max_turns=10)``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    tool_format: str | ToolCallFormat = Field(
        "hermes", description="How turns call tools and answer: 'hermes', 'search_r1' or a ToolCallFormat."
    )
    max_turns: int = Field(
        6, ge=1, description="Assistant turns per episode; the env truncates (scored) after it."
    )
    max_calls_per_turn: int = Field(1, ge=1, description="Tool calls allowed in one turn.")
    max_action_chars: int = Field(20_000, ge=1, description="Longer turns are a format error.")
    tool_output_chars: int = Field(
        4_000, ge=16, description="Tool output beyond it is cut with a '...[truncated N characters]' marker."
    )
    max_context_chars: int | None = Field(
        None, ge=1, description="Truncate the episode once the chat exceeds this many characters."
    )
    reward: RewardConfig = Field(
        default_factory=RewardConfig,
        description="Reward weights (a RewardConfig, its fields as a dict, or None).",
    )
    render_mode: Literal["ansi", "human"] | None = Field(None, description="Gymnasium render mode.")
    task_split: Literal["all", "train", "test"] = Field(
        "all",
        description="Envs with a fixed task list: all tasks, or the training or held-out part (a fixed, seeded "
        "split: test_fraction of the tasks are held out).",
    )
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="The held-out share of a fixed task list.")
    context: str | Callable[..., Any] = Field(
        "full",
        description="What the agent sees each step (info['context']): 'full' (the whole chat), 'window:K' (the task "
        "and the last K turns; a note says how many were left out), 'state' (the task and the world's compact "
        "state, from the env's state_text()), or a function (task_messages, history) -> messages.",
    )

    @field_validator("context")
    @classmethod
    def _check_context(cls, value: Any) -> Any:
        parse_context(value)
        return value

    @field_validator("reward", mode="before")
    @classmethod
    def _default_reward(cls, value: Any) -> Any:
        return RewardConfig() if value is None else value


#: keyword arguments renamed since 0.1 (old name -> new name); the old names still work, with a warning
RENAMED_KEYWORDS = {"protocol": "tool_format"}


def _own_keywords(init: Any) -> list[inspect.Parameter]:
    """The keyword parameters of one ``__init__`` (positional-only ones are supplied by subclasses, not users)."""
    return [
        p
        for name, p in inspect.signature(init).parameters.items()
        if name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


@functools.cache
def accepted_keywords(cls: type) -> list[inspect.Parameter]:
    """Every keyword a concrete env accepts: its own, its env base classes' and :class:`EnvSettings`'."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("_original_init")
        if init is not None:
            for p in _own_keywords(init):
                params.setdefault(p.name, p.replace(kind=p.KEYWORD_ONLY))
    for name, field in EnvSettings.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        params.setdefault(
            name,
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=field.annotation
            ),
        )
    return list(params.values())


def check_keywords(cls: type, init: Any) -> Any:
    """Wrap an env ``__init__``: unknown keyword arguments raise :class:`BadArgumentError` with a hint, renamed
    ones are mapped with a ``DeprecationWarning``, and the signature shows every accepted keyword."""

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        for old, new in RENAMED_KEYWORDS.items():
            if old in kwargs:
                warnings.warn(f"{old}= is now {new}=", DeprecationWarning, stacklevel=2)
                kwargs.setdefault(new, kwargs.pop(old))
        known = [p.name for p in accepted_keywords(type(self))]
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

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    positional = [
        p
        for name, p in inspect.signature(init).parameters.items()
        if name != "self" and p.kind is p.POSITIONAL_ONLY
    ]
    wrapper.__signature__ = inspect.Signature([self_param, *positional, *accepted_keywords(cls)])  # type: ignore[attr-defined]
    return wrapper


def check_task_settings(given: Any, max_turns: int, process_rewards: list[str]) -> dict[str, Any]:
    """A task's ``settings=`` (:func:`agentr1_gym.make_task`): its default env settings, named as ``gym.make``
    takes them, checked when the task is made (``process_rewards``: the names of the task's own process rewards,
    which ``reward.process`` may weight)."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"settings=: a dict of gym.make settings, got {type(given).__name__}")
    given = dict(given)
    if "max_turns" in given:
        raise ConfigError("settings={'max_turns': ...}: pass max_turns= to the task itself")
    try:
        checked = EnvSettings(**{**given, "max_turns": max_turns})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err["loc"])
        pool = (
            list(RewardConfig.model_fields)
            if err["loc"][:1] == ("reward",)
            else list(EnvSettings.model_fields)
        )
        close = difflib.get_close_matches(str(err["loc"][-1]), pool, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close and err["type"] == "extra_forbidden" else ""
        raise ConfigError(f"settings: bad env setting {where}: {err['msg']}{hint}") from None
    declared = list(process_rewards)
    for name in checked.reward.process:
        if name not in declared:
            hint = unknown_process_reward_hint(name, declared)
            raise ConfigError(
                f"settings: the task has no process reward {name!r}{hint}; its process rewards: {declared or 'none'}"
            )
    return given
