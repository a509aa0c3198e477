"""``env.step`` never raises on model output: 10,000 adversarial turns for every registered env, both formats.

Turns are built from fragments that broke parsers before (unclosed and repeated tags, JSON with huge or deeply
nested numbers, wrong types, stringified arguments, control characters, huge turns) plus well-formed calls with
hostile arguments (calculator expressions that explode, Python that loops, crashes or floods output). Each step
must return a finite reward and a text observation within a time bound (a hang, not a slow step); the only exceptions allowed are none.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time
import zlib

import gymnasium as gym
import pytest
from _procs import processes_with

import agentr1_gym
from agentr1_gym.registration import env_ids

ENV_IDS = env_ids()  # every env that builds offline (AgentR1/OpenEnv-v0: tests/engines/test_openenv.py)

STEPS = int(os.environ.get("AGENTR1_FUZZ_STEPS", 10_000))  # per env; more for a long offline run
#: the browser world's full count: its step is a real page's (about 20 ms), so 10,000 of them were the slow tier's
#: longest test (3.4 minutes); AGENTR1_FUZZ_BROWSER_STEPS=10000 restores it for a long offline run
BROWSER_STEPS = int(os.environ.get("AGENTR1_FUZZ_BROWSER_STEPS", 3_000))
SLOW_STEP_S = 10.0  # catches hangs, not slow machines (round(1.5, 10**9) blocked for over a minute)

FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<think>", "</think>", "<search>", "</search>",
    "<information>", "<tool_response>", "{", "}", "[", "]", '"', ":", ",", "\\", "null", "true", "1e999",
    "9" * 5000, "-" + "9" * 4400, "[" * 3000, "{\"a\":" * 500, "\x00", "\x1b[2J", "\ud800", "é", "🙂", "\n",
    "```", "```json", "```python", " " * 50, "NaN", "Infinity", '"name"', '"arguments"', "search", "python",
    "calculator", "answer",
    # reliability round 4: escapes that decode to lone surrogates, nesting a parser takes but a serializer does not,
    # and chained game commands
    "\\ud83c", "\\udc00", "\\ud83d\\ude00", "[" * 490 + "]" * 490, '{"a":' * 300 + "1" + "}" * 300,
    "look. restart", "n then s", "look, yes",
]  # fmt: skip
#: argument values every tool kind gets besides its own hostile ones (a cut emoji escape, deep nesting)
UNIVERSAL_ARGS = ["Lima \ud83c", "\udc00\ud800", {"a": "\ud83d"}, "[" * 490 + "]" * 490]

HOSTILE_ARGS = {
    "query": ["", " ", "a" * 100_000, "\x00\x01", "[" * 1000, "🙂" * 500, 12, None, ["x"], {"q": 1}],
    "expression": [
        "round(1.5, 10**9)", "9**9**9", "2**4096", "(1/3)**-1000", "10**4000/7", "(" * 300 + "1" + ")" * 300,
        "1/0", "sqrt(-1)", "__import__('os')", "max(" + ",".join(["2**999"] * 60) + ")", "1" * 500, "", 5,
    ],
    "command": [
        "look. restart", "look then restart", "look, restart", "n. s. e. w. take coin", "inventory;quit",
        "quit", "restart", "yes", "restore", "save", "undo", "again", "g", "score", "take all", "eat all",
        "go north", "x" * 200, "", "\x00", "🙂" * 60, "put everything on everything", 5, None, ["look"],
    ],
    "button": [
        "Buy Now", "[Buy Now]", "Next >", "< Prev", "Back to Search", "Description", "Reviews", "", "B0" + "X" * 8,
        "x" * 300, "\n", "🙂", 3, None,
    ],
    "code": [
        "print(1)", "1/0", "while True: pass", "import os; os._exit(3)", "print('x' * 10**7)",
        "raise SystemExit('bye')", "import sys; sys.setrecursionlimit(10**6)\ndef f(): f()\nf()", "", 7,
        "import ctypes; ctypes.string_at(0)", "x = bytearray(10**10)", "import os; os.kill(os.getpid(), 40)",
        "import os\nfor _ in range(1500):\n    os.mkdir('d'); os.chdir('d')", "import os; os.memfd_create('m')",
        "import sys; print(sys._getframe().f_back)", "open('/tmp/f', 'wb').write(b'x' * 10**8)",
    ],
    # the browser's element actions: refs that are no element, not an int, huge or not finite; text with control
    # characters, lone surrogates and floods; keys that are none
    "ref": [0, 1, -1, 2**63, 10**400, 3.5, float("nan"), float("inf"), "4", True, None, [4], {"ref": 4}],
    "text": ["", "\x00\x1b[2J\n\t", "\ud800" * 3, "a" * 100_000, "🙂" * 300, "\x7f" * 50, 5, None],
    "key": ["Enter", "ctrl+alt+shift+delete", "+", "ctrl+", "F13", "\ud800", "", "a" * 1000, "ctrl+w", 3, None],
    "option": ["", "x" * 10_000, "\ud800", "\n", 1, None, ["a"]],
}  # fmt: skip
#: the argument a tool's hostile values go to when its own parameters have none listed above
TOOL_KEYS = {
    "search": "query",
    "calculator": "expression",
    "python": "code",
    "act": "command",
    "click": "button",
}


def _tool_params(info: dict) -> dict[str, list[str]]:
    """Each tool's parameter names, from the schemas a reset lists."""
    return {
        t["function"]["name"]: list(t["function"].get("parameters", {}).get("properties", {}))
        for t in info["tools"]
    }


def _adversarial(rng: random.Random, tools: dict[str, list[str]] | list[str]) -> str:
    """One hostile turn. ``tools``: each tool's parameters (:func:`_tool_params`), or only the tools' names."""
    if isinstance(tools, list):
        tools = {name: [] for name in tools}
    kind = rng.random()
    if kind < 0.45:  # soup of fragments
        return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 12)))
    if kind < 0.75:  # a well-formed call to a real tool with hostile arguments
        tool = rng.choice(list(tools))
        params = tools[tool]
        # the tool's own parameters where every one has hostile values listed, else its usual one
        keys = params if params and all(p in HOSTILE_ARGS for p in params) else [TOOL_KEYS.get(tool, "query")]
        key = keys[0]
        args = {k: rng.choice(HOSTILE_ARGS[k] + UNIVERSAL_ARGS) for k in keys}
        if rng.random() < 0.2:
            args["extra"] = rng.choice(FRAGMENTS)
        payload = {"name": tool, "arguments": args if rng.random() < 0.8 else json.dumps(args)}
        body = json.dumps(payload)
        if rng.random() < 0.3:  # a raw JSON value no encoder would write: huge, infinite or deeply nested
            raw = rng.choice(["9" * 5000, "-" + "9" * 4400, "1e999", "[" * 3000 + "]" * 3000, "{}" * 3,
                              "[" * 490 + "]" * 490, '"\\ud83c"', '{"k\\udc00": 1}'])  # fmt: skip
            body = json.dumps({"name": tool, "arguments": {key: "RAW"}}).replace('"RAW"', raw)
        if rng.random() < 0.2:
            body = body[: rng.randint(0, len(body))]  # cut short
        turn = f"<tool_call>{body}</tool_call>"
        if rng.random() < 0.2:
            turn += "<answer>x</answer>"
        return turn
    if kind < 0.85:  # Search-R1 style and answers
        tag = rng.choice(["search", "answer", "think"])
        return f"<{tag}>{rng.choice(FRAGMENTS)}{rng.choice(FRAGMENTS)}</{tag}>" * rng.randint(1, 4)
    if kind < 0.95:  # random unicode
        return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 200)))
    return rng.choice(["", " ", "<answer></answer>", "<answer>" * 5000, "x" * 1_000_001])


def _assert_recordable(obs: str, info: dict, action: str) -> None:
    """What the step returned reaches tokenizers and JSON writers: it must encode as UTF-8 and serialize."""
    obs.encode("utf-8")
    json.dumps(info["tool_calls"], ensure_ascii=False).encode(
        "utf-8"
    )  # 1e999 stays inf: episode files write null
    for message in info["messages"][-3:]:
        message["content"].encode("utf-8")
    if info["action_error"] is not None:
        info["action_error"].encode("utf-8")


def _make(env_id: str, protocol: str):
    kwargs = {"tool_format": protocol}
    if env_id == "AgentR1/HumanEval-v0":
        kwargs["sandbox"] = {"timeout_s": 0.05, "cpu_s": 1, "memory_mb": 256, "pool_size": 2}
    return agentr1_gym.make(env_id, **kwargs)


@pytest.mark.parametrize(
    "steps_per_env",
    [pytest.param(300, id="quick"), pytest.param(STEPS, id="full", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_adversarial_steps_never_crash_and_stay_recordable(env_id, steps_per_env, tmp_path, monkeypatch):
    """10,000 adversarial steps per env (AGENTR1_FUZZ_STEPS; 3,000 in the browser world) in the complete suite; 300
    in the README's quick run.
    A browser world leaves no browser process behind when its env closes, whatever the steps made it do."""
    if env_id.startswith("AgentR1/MiniWoB-") and steps_per_env == STEPS:
        steps_per_env = min(STEPS, BROWSER_STEPS)
    rng = random.Random(zlib.crc32(env_id.encode()))  # the same steps in every run (str hashes are salted)
    monkeypatch.setattr(
        tempfile, "tempdir", str(tmp_path)
    )  # this test's browsers, and no one else's, in here
    protocols = (
        ["hermes", "search_r1"]
        if env_id not in ("AgentR1/HumanEval-v0", "AgentR1/Calculator-v0", "AgentR1/BFCL-MultiTurn-v0")
        else ["hermes"]
    )
    steps = 0
    for protocol in protocols:
        env = _make(env_id, protocol)
        tools = _tool_params(env.reset(seed=0)[1])
        budget = steps_per_env // len(protocols)
        episode = 0
        while budget > 0:
            action = _adversarial(rng, tools)
            start = time.monotonic()
            obs, reward, terminated, truncated, info = env.step(action)
            elapsed = time.monotonic() - start
            assert isinstance(obs, str) and math.isfinite(reward), (env_id, action[:200])
            assert elapsed < SLOW_STEP_S, (env_id, round(elapsed, 2), action[:200])
            assert set(info["reward_components"]) >= {"answer", "format"}
            _assert_recordable(obs, info, action)
            budget -= 1
            steps += 1
            if terminated or truncated:
                episode += 1
                env.reset(seed=episode)
        env.close()
    assert steps >= steps_per_env - 1
    deadline = (
        time.monotonic() + 10
    )  # the keeper's clean-up runs as the env closes; give a loaded machine time
    profiles = os.path.join(
        str(tmp_path), "agentr1-browser-"
    )  # every browser process carries its profile's path
    while processes_with(profiles) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(profiles), "browser processes left behind"


def test_envs_are_registered():
    assert {"AgentR1/HotpotQA-v0", "AgentR1/HumanEval-v0", "AgentR1/Calculator-v0"} <= set(ENV_IDS)
    assert all(gym.spec(e) for e in ENV_IDS)


# ---- the tool kinds a user brings: typed functions (sync and async), world methods -----------------------------
@agentr1_gym.tool
def echo_city(city: str, note: str = "") -> str:
    """Echoes what it was given (the tutorial's tool shape: a plain str parameter).

    Args:
        city: a city
        note: anything
    """
    return f"no city named {city} {note}"


@agentr1_gym.tool(timeout_s=2)
async def echo_async(text: str) -> str:
    """Echoes, asynchronously.

    Args:
        text: anything
    """
    return text


class _Counter:
    def __init__(self, task):
        self.n, self.done = 0, False

    def bump(self, by: int, label: str = "") -> str:
        """Add to the counter.

        Args:
            by: how much
            label: a label echoed back
        """
        self.n += by
        self.done = self.n >= 3
        return f"n={self.n} {label}"


agentr1_gym.register_task(
    "Tests/FuzzTools-v0",
    [{"q": "Lima?", "answer": "Peru"}],
    prompt="{q}",
    tools=[echo_city, echo_async],
    max_turns=4,
)
agentr1_gym.register_task(
    "Tests/FuzzWorld-v0", [{"q": "count to 3"}], prompt="{q}", world=_Counter, reward=lambda world: world.n >= 3,
    max_turns=4,
)  # fmt: skip


@pytest.mark.parametrize("env_id", ["Tests/FuzzTools-v0", "Tests/FuzzWorld-v0"])
def test_user_tool_kinds_take_adversarial_steps(env_id):
    rng = random.Random(1)
    env = gym.make(env_id)
    tools = _tool_params(env.reset(seed=0)[1])
    for i in range(1500):
        if rng.random() < 0.5:
            value = rng.choice([*UNIVERSAL_ARGS, 5, None, "x" * 5000, "\x00"])
            name = rng.choice(list(tools))
            action = env.unwrapped.call_text(name, city=value, text=value, by=value, note=value, label=value)
        else:
            action = _adversarial(rng, tools)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and math.isfinite(reward), action[:200]
        _assert_recordable(obs, info, action)
        if terminated or truncated:
            env.reset(seed=i)
    env.close()
