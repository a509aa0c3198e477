"""A tool that hangs or exits never takes the env (or the process) with it: ``timeout_s`` bounds sync and async
functions alike, an async tool that blocks its loop cannot stall later async or MCP calls, and ``sys.exit()`` in a
tool is a failed call."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import gymnasium as gym
import pytest

from agentr1_gym import register_task, tool
from agentr1_gym.tools.function import run_coroutine

RELEASE = threading.Event()


@tool(timeout_s=1)
def stuck(n: int) -> str:
    """Waits far longer than its deadline.

    Args:
        n: anything
    """
    RELEASE.wait(60)
    return "late"


@tool(timeout_s=1)
async def blocks_loop(n: int) -> str:
    """An async tool that blocks its event loop's thread (a bug: time.sleep in async code).

    Args:
        n: anything
    """
    time.sleep(3)
    return "late"


@tool(timeout_s=5)
async def quick(n: int) -> str:
    """A well-behaved async tool.

    Args:
        n: a number
    """
    await asyncio.sleep(0)
    return f"got {n}"


@tool
def exits(code: int) -> str:
    """Calls sys.exit.

    Args:
        code: the exit code
    """
    sys.exit(code)


register_task(
    "Tests/Deadlines-v0",
    [{"q": "?", "answer": "1"}],
    prompt="{q}",
    tools=[stuck, blocks_loop, quick, exits],
    max_turns=10,
)


def _env():
    env = gym.make("Tests/Deadlines-v0")
    env.reset(seed=0)
    return env


def test_a_sync_tool_past_its_timeout_is_a_failed_call_not_a_hang():
    env = _env()
    start = time.perf_counter()
    obs, *_, info = env.step(env.unwrapped.call_text("stuck", n=1))
    assert time.perf_counter() - start < 5
    assert "did not finish within 1 s" in obs and info["reward_components"]["tool_success"] == 0
    RELEASE.set()


def test_an_async_tool_that_blocks_its_loop_does_not_stall_later_calls():
    env = _env()
    obs, *_ = env.step(env.unwrapped.call_text("blocks_loop", n=1))
    assert "did not finish within 1 s" in obs
    start = time.perf_counter()  # the blocked loop was replaced: the next call does not wait behind it
    obs, *_, info = env.step(env.unwrapped.call_text("quick", n=7))
    assert "got 7" in obs and info["action_error"] is None
    assert time.perf_counter() - start < 1.5
    # and the MCP sessions' loop is another loop altogether
    assert run_coroutine(asyncio.sleep(0, result="mcp ok"), 2, loop="mcp") == "mcp ok"


def test_sys_exit_in_a_tool_is_a_failed_call():
    env = _env()
    obs, *_, info = env.step(env.unwrapped.call_text("exits", code=3))
    assert "SystemExit" in obs and info["action_error"] is None
    obs, *_ = env.step(env.unwrapped.call_text("quick", n=2))
    assert "got 2" in obs


def test_keyboard_interrupt_still_stops_the_run():
    """Ctrl-C is the user's, not the model's: it propagates (documented)."""

    @tool
    def interrupted() -> str:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    register_task("Tests/Interrupt-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=[interrupted])
    env = gym.make("Tests/Interrupt-v0")
    env.reset(seed=0)
    with pytest.raises(KeyboardInterrupt):
        env.step(env.unwrapped.call_text("interrupted"))
