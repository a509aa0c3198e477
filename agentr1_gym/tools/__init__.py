"""Tools the agent can call. Heavy backends import their optional dependencies lazily."""

from agentr1_gym.core import Tool, ToolResult
from agentr1_gym.tools.search import SearchTool, make_retriever

__all__ = ["SearchTool", "Tool", "ToolResult", "make_retriever"]
