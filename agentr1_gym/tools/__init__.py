"""Tools the agent can call: the base class (:mod:`.base`), search over a corpus (:mod:`.search`), a sandboxed
Python interpreter (:mod:`.python`) and a calculator (:mod:`.calculator`). Importing this package imports only the
base class; each tool's module (and its optional dependencies) loads when it is imported."""

from agentr1_gym.tools.base import Tool, ToolResult

__all__ = ["Tool", "ToolResult"]
