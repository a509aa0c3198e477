"""``AgentR1/OpenEnv-v0`` against servers that drip, lie or redirect (reliability round 5). Each server here is a
hand-written loopback listener that speaks just enough of OpenEnv's protocol (``/schema``, ``/mcp``, ``/ws``) to
reach the step it is hostile at; no openenv install needed, so these run in the main suite.

Before the fixes: a dripped ``/schema`` kept ``reset`` past 40 s with ``timeout_s=2``; Infinity rewards and
metrics came out of ``env.step``; ``NaN``/string rewards became 0.0; bad counts and deep nesting raised
``ValueError``/``TypeError``/``RecursionError``; a ``302`` on ``/ws`` sent the handshake to another listener; a
17 MB message retried until ``episode_timeout_s``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("websockets")

from _loopback import accept_each, listener

import agentr1_gym
from agentr1_gym.envs.openenv import EnvServerError

pytestmark = pytest.mark.timeout(120)

OUR_SCHEMA = {"action": {"properties": {"text": {"type": "string"}, "tool_name": {}, "arguments": {}}}}


def _observation(text: str = "hello", **over: Any) -> dict[str, Any]:
    """An observation message as ``agentr1 serve-env`` sends it (``over`` replaces data fields or metadata)."""
    meta = {"task_id": "t0", "turn": 0, "tools": [], "new_messages": [{"role": "user", "content": text}],
            "max_episode_reward": 1.0}  # fmt: skip
    meta.update(over.pop("metadata", {}))
    data = {"observation": {"text": text, "metadata": meta}, "reward": 0.0, "done": False, **over}
    return {"type": "observation", "data": data}


def _step_answer(**meta: Any) -> dict[str, Any]:
    base = {"reward_components": {"answer": 1.0}, "process_reward": 0.0, "outcome_reward": 1.0,
            "num_tool_calls": 0, "tool_calls": [], "metrics": {"score": 1.0, "success": 1.0}, "terminated": True,
            "new_messages": [{"role": "assistant", "content": "a"}]}  # fmt: skip
    base.update(meta)
    return {"type": "observation", "data": {"observation": {"text": "", "metadata": base}, "reward": 1.0,
                                            "done": True}}  # fmt: skip


class Server:
    """A loopback listener; ``http(path) -> (status, headers, body bytes, drip seconds per byte or 0)`` answers
    HTTP, ``ws(message) -> raw text or None`` answers WebSocket messages."""

    def __init__(
        self,
        http: Callable[[str], tuple[int, dict[str, str], bytes, float]] | None = None,
        ws: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self.http = http or (lambda path: _json_answer(OUR_SCHEMA if path == "/schema" else {}))
        self.ws = ws or (lambda message: json.dumps(_observation()))
        self.sock, self.url = listener()
        self.handshakes = 0
        self.stop = threading.Event()
        threading.Thread(target=accept_each, args=(self.sock, self.stop, self._serve), kwargs={"threads": True},
                         daemon=True).start()  # fmt: skip

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            request, _, rest = head.partition(b"\r\n\r\n")
            lines = request.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            if headers.get("upgrade", "").lower() == "websocket":
                self.handshakes += 1
                return self._websocket(conn, path, head)
            length = int(headers.get("content-length", "0") or 0)
            while len(rest) < length:
                rest += conn.recv(65536)
            status, extra, body, drip = self.http(path.split("?")[0])
            out = [f"HTTP/1.1 {status} X", f"Content-Length: {extra.pop('Content-Length', len(body))}",
                   "Connection: close", *(f"{k}: {v}" for k, v in extra.items())]  # fmt: skip
            conn.sendall(("\r\n".join(out) + "\r\n\r\n").encode())
            if drip:
                for byte in body:
                    if self.stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(drip)
            else:
                conn.sendall(body)

    def _websocket(self, conn: socket.socket, path: str, head: bytes) -> None:
        """The handshake and text frames through websockets' sans-I/O protocol."""
        from websockets.frames import Opcode
        from websockets.protocol import State
        from websockets.server import ServerProtocol

        status, extra, _, _ = self.http("/ws")
        if status != 101 and status != 200:  # a redirect (or a refusal) instead of the handshake
            out = [f"HTTP/1.1 {status} X", "Content-Length: 0", *(f"{k}: {v}" for k, v in extra.items())]
            conn.sendall(("\r\n".join(out) + "\r\n\r\n").encode())
            return
        protocol = ServerProtocol(max_size=None)
        protocol.receive_data(head)
        request = protocol.events_received()[0]
        protocol.send_response(protocol.accept(request))
        while True:
            for data in protocol.data_to_send():
                if data:
                    conn.sendall(data)
            if protocol.close_expected() or self.stop.is_set():
                return
            data = conn.recv(65536)
            if not data:
                return
            protocol.receive_data(data)
            for event in protocol.events_received():
                if event.opcode is Opcode.TEXT and protocol.state is State.OPEN:
                    answer = self.ws(json.loads(event.data))
                    if answer is not None:
                        protocol.send_text(answer.encode())

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _json_answer(
    value: Any, status: int = 200, drip: float = 0.0
) -> tuple[int, dict[str, str], bytes, float]:
    return status, {"Content-Type": "application/json"}, json.dumps(value).encode(), drip


@contextlib.contextmanager
def serving(**kw: Any) -> Iterator[Server]:
    server = Server(**kw)
    try:
        yield server
    finally:
        server.close()


def _env(url: str, **kw: Any) -> Any:
    return agentr1_gym.make(
        "AgentR1/OpenEnv-v0", base_url=url, **{"timeout_s": 2, "episode_timeout_s": 6, **kw}
    )


def test_a_well_behaved_stand_in_server_plays_an_episode():
    """The stand-in server is good enough to play on: every hostile case below differs from it in one thing."""
    ws = lambda m: json.dumps(_observation() if m["type"] == "reset" else _step_answer())  # noqa: E731
    with serving(ws=ws) as server:
        env = _env(server.url)
        obs, info = env.reset(seed=0)
        assert obs == "hello" and info["task_id"] == "t0"
        _, reward, terminated, _, info = env.step("<answer>a</answer>")
        assert reward == 1.0 and terminated and info["metrics"]["success"] == 1.0
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/schema", "/mcp"])
def test_a_dripped_http_answer_cannot_hold_a_call_past_its_deadline(path):
    """Finding 3: a large Content-Length and one byte every 0.25 s (urllib's timeout is per read). Before: reset
    blocked past 40 s with timeout_s=2; now EnvServerError within the deadline."""
    body = (
        json.dumps(OUR_SCHEMA if path == "/schema" else {"result": {"session_id": "s"}}).ljust(5000).encode()
    )

    def http(p: str) -> tuple[int, dict[str, str], bytes, float]:
        if p == path:
            return 200, {}, body, 0.25
        return _json_answer(OUR_SCHEMA if p == "/schema" else {"result": {"session_id": "s"}})

    with serving(http=http) as server:
        env = _env(server.url)
        start = time.monotonic()
        with pytest.raises(EnvServerError, match="within 2 s"):
            env.reset(seed=0)
        assert time.monotonic() - start < 4
        env.close()


@pytest.mark.parametrize(
    "raw, match",
    [
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": Infinity, "done": false}}',
            "valid JSON",
        ),
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": -Infinity, "done": false}}',
            "valid JSON",
        ),
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": NaN, "done": false}}',
            "valid JSON",
        ),
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": 1e400, "done": false}}',
            "valid JSON",
        ),
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": 1e308, "done": false}}',
            "beyond",
        ),
        (
            '{"type": "observation", "data": {"observation": {"text": "x"}, "reward": "lots", "done": false}}',
            "reward str",
        ),
    ],
)
def test_a_non_finite_or_unbounded_step_reward_is_a_server_error(raw, match):
    """Finding 4: Infinity/-Infinity came out of env.step, NaN and strings became 0.0, 1e308 per step overflowed
    the return."""
    ws = lambda m: json.dumps(_observation()) if m["type"] == "reset" else raw  # noqa: E731
    with serving(ws=ws) as server:
        env = _env(server.url)
        env.reset(seed=0)
        with pytest.raises(EnvServerError, match=match):
            env.step("hi")
        env.close()


@pytest.mark.parametrize(
    "meta, match",
    [
        ({"metrics": {"score": 10**400}}, "metric 'score'"),
        ({"process_reward": "lots"}, "process_reward str"),
        (
            {"process_reward": 0.5, "outcome_reward": None},
            None,
        ),  # None is OpenEnv's "no reward": 0.0, accepted
        ({"outcome_reward": "missing"}, "outcome_reward str"),
        ({"num_tool_calls": "many"}, "num_tool_calls"),
        ({"num_tool_calls": 10**400}, "num_tool_calls"),
        ({"num_tool_calls": True}, "num_tool_calls"),
        ({"tool_calls": 5}, "tool_calls"),
        ({"reward_components": {"answer": 1e9}}, "reward component 'answer'"),
    ],
)
def test_every_value_of_our_server_s_step_is_checked(meta, match):
    """Finding 5: a string process reward was a ValueError, process_reward without outcome_reward a KeyError,
    num_tool_calls 'many' a ValueError and Infinity an OverflowError, tool_calls 5 a TypeError: none of them the
    EnvServerError that infrastructure retries catch."""
    if "outcome_reward" in meta and meta["outcome_reward"] == "missing":
        meta = {k: v for k, v in meta.items() if k != "outcome_reward"}
        answer = _step_answer(**meta)
        answer["data"]["observation"]["metadata"].pop("outcome_reward")
    else:
        answer = _step_answer(**meta)
    ws = lambda m: json.dumps(_observation() if m["type"] == "reset" else answer)  # noqa: E731
    with serving(ws=ws) as server:
        env = _env(server.url)
        env.reset(seed=0)
        if match is None:
            _, _, _, _, info = env.step("hi")
            assert info["process_reward"] == 0.5 and info["outcome_reward"] == 0.0
        else:
            with pytest.raises(EnvServerError, match=match):
                env.step("hi")
        env.close()


@pytest.mark.parametrize("bound", [float("nan"), "lots", 1e300])
def test_a_bad_max_episode_reward_at_reset_is_a_server_error(bound):
    """Finding 4: max_episode_reward NaN at reset made max_episode_reward() NaN."""
    text = json.dumps(_observation(metadata={"max_episode_reward": bound})).replace("NaN", "NaN")
    with serving(ws=lambda m: text) as server:
        env = _env(server.url)
        with pytest.raises(EnvServerError):
            env.reset(seed=0)
        env.close()


@pytest.mark.parametrize("where", ["/ws", "/schema", "/mcp"])
def test_an_answer_nested_100000_deep_is_a_server_error(where):
    """Finding 5: RecursionError from json.loads on the WebSocket, /schema or /mcp."""
    deep = "[" * 100_000 + "]" * 100_000

    def http(p: str) -> tuple[int, dict[str, str], bytes, float]:
        if p == where:
            return 200, {}, deep.encode(), 0.0
        return _json_answer(OUR_SCHEMA if p == "/schema" else {"result": {"session_id": "s"}})

    ws = (lambda m: deep) if where == "/ws" else None
    with serving(http=http, ws=ws) as server:
        env = _env(server.url)
        if (
            where == "/mcp"
        ):  # a session answer that cannot be read: a server without HTTP sessions, then a reset
            obs, _ = env.reset(seed=0)
            assert obs == "hello"
        else:
            with pytest.raises(EnvServerError, match="nested too deep"):
                env.reset(seed=0)
        env.close()


def test_the_websocket_handshake_follows_no_redirect():
    """Finding 6: /ws answering 302 to another listener sent the handshake there."""
    with serving() as other:

        def http(p: str) -> tuple[int, dict[str, str], bytes, float]:
            if p == "/ws":
                return 302, {"Location": other.url.replace("http", "ws") + "/ws"}, b"", 0.0
            return _json_answer(OUR_SCHEMA if p == "/schema" else {})

        with serving(http=http) as server:
            env = _env(server.url)
            with pytest.raises(EnvServerError, match="redirect"):
                env.reset(seed=0)
            env.close()
            assert server.handshakes >= 1 and other.handshakes == 0


def test_an_http_redirect_is_refused():
    with serving() as other:
        http = lambda p: (302, {"Location": other.url + p}, b"", 0.0)  # noqa: E731
        with serving(http=http) as server:
            env = _env(server.url)
            with pytest.raises(EnvServerError, match="redirect"):
                env.reset(seed=0)
            env.close()


def test_a_message_over_the_size_limit_fails_at_once():
    """Finding 17: a 17 MB answer made reset retry until episode_timeout_s; now one EnvServerError, no retry."""
    big = json.dumps(_observation("x" * (17 * 1024 * 1024)))
    with serving(ws=lambda m: big) as server:
        env = _env(server.url, timeout_s=5, episode_timeout_s=30)
        start = time.monotonic()
        with pytest.raises(EnvServerError, match="larger than"):
            env.reset(seed=0)
        assert time.monotonic() - start < 15
        env.close()


_VALUES = [None, True, 0, -1, 3, 10**400, 1e6, 1e7, -1e300, 0.5, "", "lots", "NaN", [], [1, {}], {}, {"a": 1},
           {"score": "x"}, {"score": 10**400}, [[[[]]]]]  # fmt: skip
_RAW = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "[" * 3000 + "]" * 3000,
    '"\\ud800"',
    "{}",
    "null",
    "{",
    "\u0000",
]


def _lying_answer(rng) -> str:
    """A step answer from a server that lies about one to three of its fields, or sends a raw token there."""
    answer = _step_answer(terminated=False)
    answer["data"]["done"] = rng.random() < 0.2
    meta = answer["data"]["observation"]["metadata"]
    fields = ["reward", "reward_components", "process_reward", "outcome_reward", "num_tool_calls", "tool_calls",
              "metrics", "new_messages", "action_error", "truncated", "done", "observation"]  # fmt: skip
    raw = None
    for name in rng.sample(fields, rng.randint(1, 3)):
        value = rng.choice(_VALUES)
        if rng.random() < 0.25:
            raw, value = rng.choice(_RAW), "__RAW__"
        if name in ("reward", "done", "observation"):
            answer["data"][name] = value
        else:
            meta[name] = value
    text = json.dumps(answer)
    return text.replace('"__RAW__"', raw) if raw is not None else text


@pytest.mark.slow
def test_a_lying_server_fuzzed_gives_a_step_or_an_env_server_error():
    """300 steps against a server whose answers lie at random (wrong types, non-finite numbers, raw NaN and
    Infinity, deep nesting): each step returns a finite reward within the rule, or raises EnvServerError (an
    infrastructure retry catches it); nothing else escapes."""
    import random

    from agentr1_gym.rewards import reward_problem

    rng = random.Random(0)
    ws = lambda m: json.dumps(_observation()) if m["type"] == "reset" else _lying_answer(rng)  # noqa: E731
    outcomes = {"step": 0, "server_error": 0}
    with serving(ws=ws) as server:
        env = _env(server.url, max_turns=10_000)
        for _ in range(300):
            try:
                env.reset(seed=0)
                _, reward, _, _, info = env.step("hi")
            except EnvServerError:
                outcomes["server_error"] += 1
                continue
            assert reward_problem(reward) is None and reward_problem(info["process_reward"]) is None
            assert all(reward_problem(v) is None for v in info["reward_components"].values())
            outcomes["step"] += 1
        env.close()
    assert outcomes["step"] > 20 and outcomes["server_error"] > 100, outcomes
