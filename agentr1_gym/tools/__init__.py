"""Tools the agent can call: the base class (:mod:`.base`), search over a corpus (:mod:`.search`), a sandboxed
Python interpreter (:mod:`.python`) and a calculator (:mod:`.calculator`). Importing this package imports the base
class and function tools (:mod:`.function`, which attaches ``Tool.from_function``); each tool's module (and its optional dependencies) loads when it is imported."""

from agentr1_gym.tools.base import Tool, ToolResult
from agentr1_gym.tools.function import FunctionTool, tool

__all__ = ["FunctionTool", "Tool", "ToolResult", "tool"]
