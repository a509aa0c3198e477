"""What the agent sees each step: an env's context policy (``context=``), parsed once per env into a
:class:`ContextPolicy` that the env and its world ask (``env.context_policy.kind == "state"``), and the view it
builds from the chat (``info["context"]``).

* ``full``: the whole chat;
* ``window:K``: the task message and the last K turns, with a note of how many were left out (and, when the user
  spoke more than once, the user's current message, so the request being worked on stays in view);
* ``state``: the task message and the world's compact state (the env's ``state_text()``);
* a function ``(task_messages, history) -> messages``: whatever it returns (checked).

Engines whose loop keeps its own chat history cannot show a rewritten context: :func:`require_full_context`
refuses such an env in one line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from agentr1_gym.errors import ConfigError, TaskCodeError
from agentr1_gym.text import clean_text

__all__ = ["ContextPolicy", "parse_context", "require_full_context", "split_turns"]


class ContextPolicy(NamedTuple):
    """A parsed context policy: ``kind`` is ``"full"``, ``"window"`` (``arg``: K), ``"state"`` or ``"function"``
    (``arg``: the function). A tuple, so ``kind, arg = policy`` reads it too."""

    kind: str
    arg: Any = None

    @classmethod
    def parse(cls, value: Any) -> ContextPolicy:
        """``"full"``, ``"window:K"`` (K >= 1), ``"state"``, a function, or a policy already parsed; a bad one
        raises ``ValueError`` saying what is accepted."""
        if isinstance(value, ContextPolicy):
            return value
        if callable(value):
            try:
                inspect.signature(value).bind(task_messages=[], history=[])
            except TypeError:
                raise ValueError(
                    f"a context function is called as fn(task_messages=..., history=...) -> messages; "
                    f"{getattr(value, '__name__', value)!r} does not take those keywords"
                ) from None
            except ValueError:  # a builtin without a readable signature: accepted, checked when called
                pass
            return cls("function", value)
        if value in ("full", "state"):
            return cls(value)
        if isinstance(value, str) and value.startswith("window:"):
            k = value.split(":", 1)[1]
            if k.isdigit() and int(k) >= 1:
                return cls("window", int(k))
        raise ValueError(
            f"context must be 'full', 'window:K' (K >= 1 turns), 'state' or a function (task_messages, history) "
            f"-> messages; got {value!r:.60}"
        )

    @property
    def rewrites(self) -> bool:
        """Whether the agent sees something other than the whole chat."""
        return self.kind != "full"

    def label(self) -> str:
        """The policy as the ``context=`` string that names it (a function by its name)."""
        if self.kind == "window":
            return f"window:{self.arg}"
        if self.kind == "function":
            return getattr(self.arg, "__name__", "function")
        return self.kind

    def view(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        state_text: Callable[[], Any],
        user_message_at: int = 0,
        where: str = "",
    ) -> list[dict[str, Any]]:
        """What the agent sees for its next turn, from the chat so far (``messages[0]`` is the task message).
        ``state_text``: the world's compact state (``state``); ``user_message_at``: the index of the user's
        current message when the user speaks more than once (0: none); ``where``: the task and turn, for a context
        function's error."""
        if self.kind == "full" or not messages:
            return list(messages)
        first, history = messages[0], messages[1:]
        if self.kind == "window":
            turns = split_turns(history)
            kept = turns[-self.arg :]
            dropped = len(turns) - len(kept)
            head = dict(first)
            if dropped:
                head["content"] = (
                    f"{first['content']}\n\n[{dropped} earlier turn{'s' if dropped > 1 else ''} not shown]"
                )
                # a user who speaks more than once: the request being worked on stays in view
                at = user_message_at
                if at and at <= len(messages) - 1 - sum(len(turn) for turn in kept):
                    head["content"] += f"\n\nThe user's current message:\n{messages[at]['content']}"
            return [head, *(m for turn in kept for m in turn)]
        if self.kind == "state":
            if not history:  # the task message already holds the world's first view
                return [dict(first)]
            state = clean_text(str(state_text()))
            return [{**first, "content": f"{first['content']}\n\nCurrent state:\n{state}"}]
        try:
            out = self.arg(task_messages=[dict(first)], history=[dict(m) for m in history])
        except Exception as exc:
            raise TaskCodeError(
                f"the context function {self.label()!r} raised {type(exc).__name__}: {exc} ({where})"
            ) from exc
        if (
            not isinstance(out, list)
            or not out
            or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in out
            )
        ):
            raise TaskCodeError(
                "the context function must return a non-empty list of messages ({'role': str, 'content': str}), "
                f"got {out!r:.80}"
            )
        return out


def parse_context(value: Any) -> ContextPolicy:
    """:meth:`ContextPolicy.parse`: ``("full", None)``, ``("window", K)``, ``("state", None)`` or
    ``("function", fn)``; a bad one raises ``ValueError`` saying what is accepted."""
    return ContextPolicy.parse(value)


def require_full_context(env: Any, engine: str) -> None:
    """Refuse, in one line, an env whose context policy rewrites what the agent sees (``window:K``, ``state``, a
    function), for an engine whose loop keeps its own chat history and only appends each observation to it (or
    trains one sequence per episode): it would show the policy the whole history, not what the env decided, and
    train on it. ``agentr1_trl``'s trainers read ``info["context"]`` and train each step as its own row."""
    base = getattr(env, "unwrapped", env)
    for part in getattr(base, "components", None) or [base]:
        policy = ContextPolicy.parse(getattr(part, "context_policy", "full"))
        if policy.rewrites:
            name = part.spec.id if getattr(part, "spec", None) is not None else type(part).__name__
            raise ConfigError(
                f"{engine} keeps its own chat history (or one sequence per episode), so it cannot show the agent the "
                f"context {name} builds (context={policy.label()!r}); use context='full' with {engine}, or train "
                "with agentr1_trl, which trains each step on its own context"
            )


def split_turns(history: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The chat after the first user message, cut into turns: each assistant message with the messages that answer
    it (tool results, user turns), in order."""
    turns: list[list[dict[str, Any]]] = []
    for message in history:
        if message.get("role") == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns
