"""MCP servers that misbehave (tests/_mcp_hostile.py, plain JSON-RPC over stdio): their schemas never make the env
fetch a URL or read a file, their regular expressions run with a time bound, a broken schema is a typed error when
the tools are built, and protocol faults are infrastructure errors, never the model's slow call."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from typing import ClassVar

import gymnasium as gym
import pytest
from _paths import TESTS

pytest.importorskip("mcp")

from agentr1_gym import register_task
from agentr1_gym.errors import ToolInfrastructureError
from agentr1_gym.tools.mcp import STDERR_TAIL_BYTES, MCPConnection, MCPSchemaError, mcp_tools

HOSTILE = [sys.executable, str(TESTS / "_mcp_hostile.py")]


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = b'{"type": "string", "enum": ["AKIA-SECRET-KEY"]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metadata_server():
    """A stand-in for a cloud metadata endpoint on loopback, recording every request it gets."""
    _Recorder.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_schema_ref_to_a_url_is_refused_and_never_fetched(metadata_server):
    url = f"{metadata_server}/latest/meta-data/iam/security-credentials/role"
    with pytest.raises(MCPSchemaError, match="outside itself; the env fetches no URL"):
        mcp_tools([*HOSTILE, f"ref={url}"], names=["probe"])
    assert _Recorder.hits == []  # nothing was requested, at construction or later


def test_a_schema_ref_to_a_file_is_refused(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["TOP-SECRET"]}')
    with pytest.raises(MCPSchemaError, match="reads no file"):
        mcp_tools([*HOSTILE, f"ref={secret.as_uri()}"], names=["probe"])


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("badregex", "is invalid at properties/text/pattern"),
        ("badtype", "is invalid at properties/text/type"),
        ("unresolvable", "does not resolve"),
    ],
)
def test_broken_schemas_are_a_typed_error_when_the_tools_are_built(kind, message):
    with pytest.raises(MCPSchemaError, match=message) as info:
        mcp_tools([*HOSTILE, kind], names=["probe"])
    assert isinstance(info.value, ToolInfrastructureError)  # the server's fault, never the model's
    assert "\n" not in str(info.value)
    # the other tools of the same server are still usable by leaving the broken one out
    tools = mcp_tools([*HOSTILE, kind], names=["noisy"])
    tools[0].close()


def test_a_catastrophic_pattern_is_bounded_and_the_call_is_an_invalid_call():
    tools = mcp_tools([*HOSTILE, "redos"], names=["probe"])
    register_task("Tests/MCPRedos-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    env = gym.make("Tests/MCPRedos-v0")
    env.reset(seed=0)
    start = time.perf_counter()
    obs, _reward, *_, info = env.step(env.unwrapped.call_text("probe", text="a" * 35 + "!"))
    assert time.perf_counter() - start < 5
    assert info["reward_components"]["invalid_call"] < 0 and "does not match" in obs
    obs, *_, info = env.step(env.unwrapped.call_text("probe", text="aaaa"))
    assert info["action_error"] is None and '"aaaa"' in obs
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["garbage", "badutf8", "wrongid", "stop"])
def test_protocol_faults_are_infrastructure_errors_not_the_models_slow_call(tool):
    tools = mcp_tools([*HOSTILE, "plain"], names=[tool, "probe"], timeout_s=2)
    register_task(f"Tests/MCPFault-{tool}-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    env = gym.make(f"Tests/MCPFault-{tool}-v0")
    env.reset(seed=0)
    start = time.perf_counter()
    with pytest.raises(ToolInfrastructureError, match="MCP server"):
        env.step(env.unwrapped.call_text(tool))
    assert time.perf_counter() - start < 20
    env.close()


def test_lone_surrogates_and_deep_arguments_never_reach_the_session():
    tools = mcp_tools([*HOSTILE, "plain"], names=["probe"])
    register_task("Tests/MCPText-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=tools)
    env = gym.make("Tests/MCPText-v0")
    env.reset(seed=0)
    obs, *_, info = env.step(
        '<tool_call>{"name": "probe", "arguments": {"text": "Lima \\ud83c"}}</tool_call>'
    )
    assert info["action_error"] is None and "Lima" in obs
    obs.encode("utf-8")
    deep = "[" * 300 + "]" * 300
    obs, *_, info = env.step(
        '<tool_call>{"name": "probe", "arguments": {"text": "x", "extra": ' + deep + "}}</tool_call>"
    )
    assert "nest more than" in info["action_error"]
    # the session is still open and answers the next call
    obs, *_, info = env.step(env.unwrapped.call_text("probe", text="still here"))
    assert info["action_error"] is None and "still here" in obs
    env.close()


def test_a_noisy_servers_stderr_is_kept_bounded_in_memory_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tools = mcp_tools([*HOSTILE, "plain"], names=["noisy"])
    result = tools[0].execute(tools[0].validate({"mb": 8}))
    assert result.success
    conn = next(c for c in MCPConnection._pool.values() if c.key[0] == "stdio" and "plain" in c.key[1])
    deadline = time.time() + 10
    while "noisy: last line" not in conn.stderr.text() and time.time() < deadline:
        time.sleep(0.05)
    tail = conn.stderr.text()
    assert "noisy: last line" in tail and len(tail.encode()) <= STDERR_TAIL_BYTES
    tools[0].close()
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_broken_session_fails_fast_and_the_next_user_gets_a_fresh_one():
    """Before: after a protocol fault the pool kept handing out the wedged session, so listing the server's tools
    again timed out with a bare TimeoutError."""
    tools = mcp_tools([*HOSTILE, "plain"], names=["garbage", "probe"], timeout_s=2)
    garbage, probe = tools
    with pytest.raises(ToolInfrastructureError, match="could not be read"):
        garbage.execute(garbage.validate({}))
    start = time.perf_counter()
    with pytest.raises(ToolInfrastructureError, match="could not be read"):  # at once, not after a time-out
        probe.execute(probe.validate({"text": "x"}))
    assert time.perf_counter() - start < 1
    fresh = mcp_tools([*HOSTILE, "plain"], names=["probe"], timeout_s=2)[0]
    assert '"ok"' in fresh.execute(fresh.validate({"text": "ok"})).content
    for t in (*tools, fresh):
        t.close()
