"""A tool that hangs or exits never takes the env (or the process) with it: ``timeout_s`` bounds sync and async
functions alike, an async tool that blocks its loop cannot stall later async or MCP calls, and ``sys.exit()`` in a
tool is a failed call."""

from __future__ import annotations

import asyncio
import os
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


@pytest.mark.slow
def test_a_sync_tool_past_its_timeout_is_a_failed_call_not_a_hang():
    env = _env()
    start = time.perf_counter()
    obs, *_, info = env.step(env.unwrapped.call_text("stuck", n=1))
    assert time.perf_counter() - start < 5
    assert "did not finish within 1 s" in obs and info["reward_components"]["tool_success"] == 0
    RELEASE.set()


@pytest.mark.slow
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


def test_a_tool_raising_timeout_error_itself_is_a_failed_call_naming_it():
    """TimeoutError from the function (a socket's, say) with no deadline set names the exception; before, the
    deadline's message formatted ``timeout_s=None`` and crashed the step."""

    @tool
    def times_out() -> str:
        """Raises its own TimeoutError."""
        raise TimeoutError("socket timed out")

    result = times_out.execute(times_out.validate({}))
    assert not result.success and result.content == "Error: TimeoutError: socket timed out"


def test_errors_raise_lets_a_functions_exception_propagate_and_survives_pickling():
    import copy

    from agentr1_gym.errors import ConfigError

    class World:
        def move(self, to: str) -> str:
            """Move somewhere.

            Args:
                to: where
            """
            return {"north": "moved"}[to]

    world = World()
    observing, raising = tool(world.move), tool(world.move, errors="raise")
    assert observing.execute(observing.validate({"to": "up"})).content == "Error: KeyError: 'up'"
    with pytest.raises(KeyError):
        raising.execute(raising.validate({"to": "up"}))
    copied = copy.deepcopy(raising)  # an env's copy rebuilds its tools (through the same reduce as pickling)
    assert copied.errors == "raise" and copied.fn.__self__ is not world
    with pytest.raises(ConfigError, match="errors='ignore'; use one of observe, raise"):
        tool(world.move, errors="ignore")


def test_annotated_constraints_reach_the_schema_and_the_validation():
    from typing import Annotated

    from pydantic import Field, ValidationError

    @tool
    def search(
        query: Annotated[str, Field(min_length=1, max_length=5)], k: Annotated[int, Field(ge=1)] = 3
    ) -> str:
        """Search.

        Args:
            query: words
        """
        return query * k

    props = search.schema()["function"]["parameters"]["properties"]
    assert props["query"] == {"description": "words", "maxLength": 5, "minLength": 1, "type": "string"}
    assert props["k"] == {"default": 3, "minimum": 1, "type": "integer"}
    for bad in ({"query": ""}, {"query": "toolong"}, {"query": "a", "k": 0}):
        with pytest.raises(ValidationError):
            search.validate(bad)


# ---- ObjectWorker: objects whose methods run in a worker process under a deadline and a memory bound ---------
class Hungry:
    """A world object whose methods a model's arguments can make slow or large."""

    def __init__(self) -> None:
        self.calls = 0

    def eat(self, mb: int) -> int:
        self.calls += 1
        return len(bytearray(mb * 1024 * 1024))

    def spin(self, seconds: float) -> str:
        self.calls += 1
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return "done"

    def set_precision(self, digits: int) -> str:
        import decimal

        decimal.getcontext().prec = digits
        return str(decimal.Decimal(1) / decimal.Decimal(3))


@pytest.mark.slow
def test_an_object_worker_bounds_memory_and_time_and_keeps_the_state():
    import decimal

    from agentr1_gym.tools.object_worker import CallFailed, CallTimedOut, ObjectWorker

    worker = ObjectWorker(timeout_s=1.0, memory_mb=100)
    world = Hungry()
    worker.load({"w": world}, token=1)
    value, state = worker.call("w", "eat", {"mb": 10})
    assert value == 10 * 1024 * 1024 and state == {"calls": 1}
    with pytest.raises(CallFailed, match="more than 100 MB") as info:
        worker.call("w", "eat", {"mb": 400})
    assert info.value.state == {"calls": 2}  # the worker survived; its state comes back
    start = time.monotonic()
    with pytest.raises(CallTimedOut):
        worker.call("w", "spin", {"seconds": 30})
    assert time.monotonic() - start < 5 and worker.restarts == 1
    worker.load({"w": world}, token=2)  # a new worker, loaded with the caller's copy
    text, state = worker.call("w", "set_precision", {"digits": 3}, text=True)
    assert text == "0.333" and decimal.getcontext().prec == 28  # the setting stayed in the worker
    pid = worker._proc.pid
    worker.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ---- a sync tool past its deadline is stopped, not left running ----------------------------------------------
PROGRESS = {"spins": 0, "chunks": 0, "first": None}


class _Chunk:
    def __init__(self) -> None:
        self.data = bytearray(1024 * 1024)


@tool(timeout_s=1)
def spins(n: int) -> str:
    """Loops for ever in Python.

    Args:
        n: anything
    """
    while True:
        PROGRESS["spins"] += 1


@tool(timeout_s=1)
def allocates(n: int) -> str:
    """Allocates a megabyte at a time for ever (a runaway result set), catching every Exception on the way.

    Args:
        n: anything
    """
    import weakref

    held = []
    while True:
        try:
            held.append(_Chunk())
            if PROGRESS["first"] is None:
                PROGRESS["first"] = weakref.ref(held[0])
            PROGRESS["chunks"] += 1
            time.sleep(0.005)
        except Exception:  # the stop is not an Exception: a tool's own handler cannot swallow it
            pass


register_task("Tests/Runaway-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=[spins, allocates])


@pytest.mark.slow
@pytest.mark.parametrize("name, counter", [("spins", "spins"), ("allocates", "chunks")])
def test_a_sync_tool_past_its_deadline_is_stopped_and_frees_what_it_held(name, counter):
    """Front door 3: a sync tool that timed out kept running (and, in the blind trial, went on allocating 1 GB).
    Now the call's thread is stopped at the deadline: its counter stops, and what it allocated is freed."""
    import gc

    env = gym.make("Tests/Runaway-v0")
    env.reset(seed=0)
    before = set(threading.enumerate())  # other tests' tool threads are not this test's to judge
    obs, *_ = env.step(env.unwrapped.call_text(name, n=1))
    assert "did not finish within 1 s" in obs
    started = [t for t in threading.enumerate() if t.name == "agentr1-tool-call" and t not in before]
    (ours,) = started or [None]
    deadline = time.monotonic() + 5
    while ours is not None and ours.is_alive():
        assert time.monotonic() < deadline, "the tool's thread is still running"
        time.sleep(0.05)
    stopped_at = PROGRESS[counter]
    time.sleep(0.3)
    assert PROGRESS[counter] == stopped_at > 0
    if name == "allocates":
        gc.collect()
        assert PROGRESS["first"]() is None  # the call's memory went with it
