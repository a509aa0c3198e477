"""MCP servers' tools as agent tools, against a real local server (the official SDK's MCPServer) over stdio and
streamable HTTP: schemas from the server, calls, tool errors and timeouts as observations, a dead server as a
typed infrastructure error, one connection shared by env copies and closed with the last env."""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from _paths import TESTS

pytest.importorskip("mcp")

from agentr1_gym import register_task
from agentr1_gym.errors import ConfigError, ToolInfrastructureError
from agentr1_gym.tools.mcp import MCPConnection, mcp_tools

SERVER = str(TESTS / "_mcp_server.py")
STDIO = [sys.executable, SERVER, "stdio"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_url():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the MCP test server did not start")
    yield f"http://127.0.0.1:{port}/mcp"
    proc.kill()
    proc.wait()


def _pool_users(server) -> int:
    key = ("http", server) if isinstance(server, str) else None
    for k, conn in MCPConnection._pool.items():
        if k == key or (key is None and k[0] == "stdio" and list(k[1]) == list(server)):
            return conn.users
    return 0


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_server_tools_run_in_an_env(transport, request):
    server = STDIO if transport == "stdio" else request.getfixturevalue("http_url")
    tools = mcp_tools(server, names=["add", "lookup", "slow"], timeout_s=1.0)
    add = tools[0]
    assert add.schema()["function"]["name"] == "add"
    assert add.schema()["function"]["description"] == "Add two integers."
    assert add.schema()["function"]["parameters"]["properties"]["a"]["type"] == "integer"
    register_task(f"Tests/MCP{transport}-v0", [{"q": "2+3?", "answer": "5"}], prompt="{q}", tools=tools)
    env = gym.make(f"Tests/MCP{transport}-v0")
    env.reset(seed=0)
    u = env.unwrapped
    obs, _, _, _, info = env.step(u.call_text("add", a=2, b=3))
    assert "5" in obs and info["action_error"] is None and info["reward_components"]["invalid_call"] == 0.0
    # arguments the server's schema rejects never reach it: an invalid call, named
    obs, _, _, _, info = env.step(u.call_text("add", a="x"))
    assert "Invalid arguments for tool 'add'" in info["action_error"] and "'b' is a required property" in obs
    assert info["reward_components"]["invalid_call"] < 0
    # a tool error is a failed call the model sees
    env.reset(seed=0)
    obs, *_ = env.step(u.call_text("lookup", city="Atlantis"))
    assert "Error:" in obs and "lookup" in obs
    # a slow call times out as an observation, and the connection still serves the next call
    t = time.perf_counter()
    obs, *_ = env.step(u.call_text("slow", seconds=5))
    assert "did not answer within 1 s" in obs and time.perf_counter() - t < 4
    obs, *_ = env.step(u.call_text("add", a=1, b=1))
    assert "2" in obs
    env.close()


@pytest.mark.slow
def test_connections_are_shared_by_env_copies_and_closed_with_the_last(tmp_path):
    tools = mcp_tools(STDIO, names=["add"])
    assert _pool_users(STDIO) == 1
    register_task("Tests/MCPShared-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    env = gym.make("Tests/MCPShared-v0").unwrapped
    copies = [copy.deepcopy(env) for _ in range(3)]
    assert _pool_users(STDIO) == 4  # one connection, four holders
    conn = next(c for c in MCPConnection._pool.values() if c.key[0] == "stdio")
    for c in copies:
        c.reset(seed=0)
        assert "7" in c.step(c.call_text("add", a=3, b=4))[0]
        c.close()
    assert _pool_users(STDIO) == 1 and not conn.closed
    env.close()
    assert _pool_users(STDIO) == 0 and conn.closed


@pytest.mark.slow
def test_a_dead_server_is_an_infrastructure_error_never_a_silent_zero():
    tools = mcp_tools(STDIO, names=["die", "add"])
    register_task("Tests/MCPDead-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    env = gym.make("Tests/MCPDead-v0")
    env.reset(seed=0)
    with pytest.raises(ToolInfrastructureError, match=r"MCP server .*_mcp_server.py stdio"):
        env.step(env.unwrapped.call_text("die"))
    with pytest.raises(
        ToolInfrastructureError, match=r"MCP server .*(is not connected|failed on .add.: Connection closed)"
    ):
        env.step(env.unwrapped.call_text("add", a=1, b=2))
    env.close()


@pytest.mark.slow
def test_bad_servers_and_names_fail_at_construction():
    with pytest.raises(ToolInfrastructureError, match="cannot connect to MCP server"):
        mcp_tools([sys.executable, "-c", "import sys; sys.exit(1)"], connect_timeout_s=20)
    with pytest.raises(ToolInfrastructureError, match=r"cannot connect to MCP server 'http://127.0.0.1:"):
        mcp_tools(f"http://127.0.0.1:{_free_port()}/mcp", connect_timeout_s=20)
    with pytest.raises(ConfigError, match="has no tool 'mul'; it has"):
        mcp_tools(STDIO, names=["mul"])
    with pytest.raises(ConfigError, match="streamable-HTTP URL"):
        mcp_tools("server.py")


@pytest.mark.slow
def test_envs_made_from_one_tool_list_each_hold_the_connection_until_closed():
    tools = mcp_tools(STDIO, names=["add"])
    register_task("Tests/MCPMany-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    envs = [gym.make("Tests/MCPMany-v0") for _ in range(4)]  # as a trainer makes its batch of envs
    assert _pool_users(STDIO) == 4  # the first env took over the tool list's claim
    conn = next(c for c in MCPConnection._pool.values() if c.key[0] == "stdio")
    for env in envs[:3]:
        env.close()
    envs[3].reset(seed=0)
    assert "3" in envs[3].step(envs[3].unwrapped.call_text("add", a=1, b=2))[0] and not conn.closed
    envs[3].close()
    assert conn.closed and _pool_users(STDIO) == 0


@pytest.mark.slow
def test_fuzz_mcp_tools_and_no_reward_without_the_answer():
    import math
    import random

    from test_fuzz_steps import UNIVERSAL_ARGS, _adversarial, _assert_recordable

    tools = mcp_tools(STDIO, names=["add", "lookup"], timeout_s=5.0)
    register_task("Tests/MCPFuzz-v0", [{"q": "2+3?", "answer": "5"}], prompt="{q}", tools=tools, max_turns=4)
    env = gym.make("Tests/MCPFuzz-v0")
    rng = random.Random(0)
    env.reset(seed=0)
    for i in range(300):
        action = _adversarial(rng, ["add", "lookup"])
        if rng.random() < 0.4:  # well-formed calls with hostile values under the server's own parameter names
            value = rng.choice(
                ["", "x" * 50_000, -(10**30), None, [1], {"a": 1}, "\x00", 1e308, "🙂", *UNIVERSAL_ARGS]
            )
            action = env.unwrapped.call_text(rng.choice(["add", "lookup"]), a=value, b=value, city=value)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and math.isfinite(reward), action[:200]
        _assert_recordable(obs, info, action)
        if terminated or truncated:
            env.reset(seed=i)
    # calling tools until the turns run out earns no more than answering wrong at once
    env.reset(seed=0)
    total = sum(env.step(env.unwrapped.call_text("add", a=2, b=3))[1] for _ in range(4))
    assert total <= 0.0
    env.close()
