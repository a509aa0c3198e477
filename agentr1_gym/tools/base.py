"""The tool base class: a **Tool** executes one atomic action (a search, a code run) and reports raw results.

The env that owns the tool (:class:`~agentr1_gym.env.ToolEnv`) interprets them: it turns results into
observations and process rewards.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

__all__ = ["Tool", "ToolResult", "clean_schema", "describe_validation_error"]


@dataclass
class ToolResult:
    """What a tool reports: the text the agent sees, whether the call did its job, raw metadata (e.g. the ids of
    retrieved passages, the points a game move scored) that the env may turn into process rewards, and whether
    the call ended the episode (``terminal``: the world's end, such as a game won or lost or an item bought; the
    env then scores the world's final state)."""

    content: str
    success: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)
    terminal: bool = False


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic JSON schema -> compact OpenAI ``parameters`` (no titles)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "properties":
            value = {name: clean_schema(prop) for name, prop in value.items()}
        elif isinstance(value, dict):
            value = clean_schema(value)
        out[key] = value
    return out


class Tool(ABC):
    """A tool callable by the agent.

    ``Tool.from_function(fn)`` (attached by :mod:`agentr1_gym.tools.function`, which every ``import agentr1_gym``
    loads) makes a tool of a plain typed function. Subclasses set ``name``, ``description`` and ``Args`` (a pydantic model whose fields are the arguments;
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
            params = clean_schema(self.Args.model_json_schema())
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

    def for_env(self) -> Tool:
        """The instance an env uses (``ToolEnv.__init__`` asks each tool): the tool itself, shared by every env
        it is given to. A tool that holds a connection returns a holder of its own, so that ``env.close()``
        releases that env's claim and the connection closes with the last env using it."""
        return self

    def close(self) -> None:
        """Release what the tool holds (a connection); the owning env's ``close()`` calls it. Idempotent."""
        return None


def describe_validation_error(tool: str, exc: ValidationError) -> str:
    """One line naming each bad argument (what the model sees when its call does not validate)."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "arguments"
        parts.append(f"{loc}: {err['msg']}")
    return f"Invalid arguments for tool {tool!r}: " + "; ".join(parts) + "."
