"""A local MCP server for the tests (the official SDK's MCPServer): ``python _mcp_server.py stdio`` or
``python _mcp_server.py http PORT``."""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentr1-test")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def lookup(city: str) -> str:
    """The country a city is in."""
    countries = {"Paris": "France", "Lima": "Peru"}
    if city not in countries:
        raise ValueError(f"no city named {city}")
    return countries[city]


@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "awake"


@server.tool()
def die() -> str:
    """Exit the server process (a crash)."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
