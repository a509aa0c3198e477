"""Train the agent you already have: your agent's own loop, its calls recorded by :mod:`agentr1_trl.agent_proxy`,
trained with our GRPO.

The user's side is one function::

    async def rollout(client: openai.AsyncOpenAI, task: dict) -> float:
        ...  # run the agent against `client` (any framework: give it str(client.base_url)), return its reward

It may return a float, a dict of reward components (summed; each logged), or an :class:`AgentResult` (reward,
components, metrics such as ``success``). Tasks come from a JSONL file (one JSON object per line, handed over as
they are) or from a registered env: then each task is ``{"id", "seed", "env_id", "env_kwargs", "prompt",
"messages", "tools"}`` and :class:`EnvSession` runs the env's tools for the agent and scores it with the env's own
grader (``return session.result()``).

:class:`AgentGRPOLoopTrainer` runs ``num_generations`` episodes of each task (a GRPO group) at most
``agent_concurrency`` at a time, each with its own episode id and client, and turns each episode's calls into a
token-exact trajectory (:func:`~agentr1_trl.agent_proxy.calls_to_trajectory`). Every estimator, checkpoints,
resume, metrics and the viewer work as for our own rollouts. An episode that raises, runs past
``agent_timeout_s`` or makes no call is dropped, counted (``agent/dropped_*``) and run again, at most
``agent_retries`` times: a task whose every attempt fails stops training with the agent's last error. It never
becomes a silent zero. Each episode runs on an event loop of its own in its own thread, so the deadline holds even
for an ``async def`` agent that blocks (``time.sleep``, a sync client): it is dropped at ``agent_timeout_s``, and
if 16 dropped episodes are still blocked a further ``agent_timeout_s`` later the run stops and says why. A reward
that breaks the reward rule (not finite, or beyond ``agentr1_gym.rewards.REWARD_LIMIT``) is a
:class:`~agentr1_gym.errors.RewardRangeError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentr1_gym.errors import AgentR1Error, ConfigError, MissingDependencyError
from agentr1_gym.formats import HermesFormat
from agentr1_gym.generation import SamplingConfig
from agentr1_gym.rollout import Trajectory
from agentr1_trl.agent_proxy import AgentProxy, EpisodeCalls, calls_to_trajectory
from agentr1_trl.agent_tasks import (
    AgentFn,
    AgentResult,
    AgentTasks,
    EnvSession,
    as_result,
    load_agent,
    play_env_task,
)
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.model_eval import EVAL_SEED

__all__ = [
    "AgentFailedError",
    "AgentGRPOLoopTrainer",
    "AgentResult",
    "AgentTasks",
    "EnvSession",
    "as_result",
    "evaluate_agent",
    "load_agent",
    "play_env_task",
    "run_agent_episodes",
]

logger = logging.getLogger(__name__)


class AgentFailedError(AgentR1Error, RuntimeError):
    """Every attempt of the agent at one task failed (it raised, timed out or made no call): training stops with
    the agent's last error rather than scoring the task as a zero."""


@dataclass
class AgentEpisode:
    """One finished agent episode: its trajectory (rewards set), or why it was dropped."""

    task: dict[str, Any]
    trajectory: Trajectory | None = None
    splits: int = 0
    dropped: str = ""  # "raised", "timeout" or "no_call"
    error: BaseException | None = None
    attempts: int = 1


#: agent threads dropped at their deadline and maybe still running (a blocking call inside the coroutine)
_ABANDONED: list[tuple[threading.Thread, float]] = []
#: how many such threads may still be blocked at once before the run stops
MAX_BLOCKED_AGENTS = 16


def _start_agent(
    agent: AgentFn, client_class: Any, base_url: str, task: dict[str, Any], timeout_s: float
) -> tuple[concurrent.futures.Future, threading.Thread]:
    """Run one agent episode on an event loop of its own, in a daemon thread. An ``async def`` agent that makes a
    blocking call (``time.sleep``, a sync HTTP client) blocks only its own loop: the trainer's loop drops it at
    ``timeout_s`` and goes on; its calls to the ended episode are refused."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()

    async def episode() -> Any:
        client = client_class(base_url=base_url, api_key="agentr1", max_retries=0, timeout=timeout_s)
        try:
            return await agent(client, task)
        finally:
            await client.close()

    def run() -> None:
        try:
            value = asyncio.run(episode())
        except BaseException as exc:  # handed to the waiting trainer, or dropped if it stopped waiting
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(exc)
        else:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_result(value)

    thread = threading.Thread(target=run, name="agentr1-agent", daemon=True)
    thread.start()
    return future, thread


def _check_blocked(timeout_s: float) -> None:
    """Stop the run, with the reason, when too many dropped agent episodes are still blocked past twice their
    deadline: a sync call that never returns would otherwise pile up threads for ever."""
    now = time.monotonic()
    _ABANDONED[:] = [(t, at) for t, at in _ABANDONED if t.is_alive()]
    stuck = sum(1 for _, at in _ABANDONED if now - at > timeout_s)
    if stuck >= MAX_BLOCKED_AGENTS:
        raise AgentFailedError(
            f"{stuck} agent episodes dropped at agent_timeout_s={timeout_s:g} s are still blocked a further "
            f"{timeout_s:g} s: the agent makes a blocking call inside `async def` (time.sleep, a sync HTTP client "
            "or framework call). Await an async client, or wrap the sync call in asyncio.to_thread"
        )


async def _one_attempt(
    proxy: AgentProxy, agent: AgentFn, task: dict[str, Any], timeout_s: float
) -> AgentEpisode:
    try:
        from openai import AsyncOpenAI
    except ImportError:
        raise MissingDependencyError("openai", "agent", "training an agent through the endpoint") from None

    _check_blocked(timeout_s)
    eid = proxy.open_episode()
    out = AgentEpisode(task)
    value: Any = None
    future, thread = _start_agent(agent, AsyncOpenAI, proxy.base_url(eid), dict(task), timeout_s)
    try:
        value = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError as exc:
        out.dropped, out.error = "timeout", exc
        _ABANDONED.append((thread, time.monotonic()))
    except ConfigError:
        raise
    except Exception as exc:  # the agent's own failure (its code, its framework, a refused call)
        out.dropped, out.error = "raised", exc
    finally:
        record: EpisodeCalls = proxy.close_episode(eid)
    if not record.calls:
        out.dropped = out.dropped or "no_call"
        return out
    if out.dropped and not record.over_budget:
        return out
    traj, out.splits = calls_to_trajectory(record.calls)
    if (
        record.over_budget
    ):  # the context limit cut it: a truncated episode, scored as one (no answer: nothing)
        result = AgentResult(0.0, {"reward": 0.0}, {"success": 0.0, "reward": 0.0})
        traj.truncated, traj.truncated_reason = True, "token_budget"
        out.dropped, out.error = "", None
        if value is not None:
            result = as_result(value)
    else:
        result = as_result(value)
        traj.terminated = True
    n = len(record.calls)
    traj.rewards = [0.0] * (n - 1) + [result.reward]
    traj.reward_components = [{} for _ in range(n - 1)] + [dict(result.components)]
    traj.observations = [""] * n
    traj.metrics = dict(result.metrics)
    traj.task_id = str(task.get("id", ""))
    traj.question = str(task.get("prompt") or task.get("question") or "")[:4000]
    out.trajectory = traj
    return out


async def _episode(
    proxy: AgentProxy,
    agent: AgentFn,
    task: dict[str, Any],
    timeout_s: float,
    retries: int,
    gate: asyncio.Semaphore,
) -> tuple[AgentEpisode, list[AgentEpisode]]:
    failed: list[AgentEpisode] = []
    for attempt in range(retries + 1):
        async with gate:
            ep = await _one_attempt(proxy, agent, task, timeout_s)
        ep.attempts = attempt + 1
        if not ep.dropped:
            return ep, failed
        failed.append(ep)
        logger.warning("agent episode dropped (%s) at task %s: %r", ep.dropped, task.get("id"), ep.error)
    last = failed[-1]
    why = {"raised": "raised", "timeout": f"ran past {timeout_s:g} s", "no_call": "made no call"}[
        last.dropped
    ]
    raise AgentFailedError(
        f"the agent failed all {retries + 1} attempts at task {str(task.get('id'))[:80]!r}; the last one {why}"
        + (
            f": {type(last.error).__name__}: {last.error}"
            if last.error is not None and last.dropped == "raised"
            else ""
        )
    ) from last.error


def run_agent_episodes(
    proxy: AgentProxy,
    agent: AgentFn,
    tasks: Sequence[dict[str, Any]],
    *,
    concurrency: int = 16,
    timeout_s: float = 300.0,
    retries: int = 2,
) -> tuple[list[AgentEpisode], list[AgentEpisode]]:
    """Run one agent episode per task (at most ``concurrency`` at once) through a started ``proxy``; returns the
    episodes (in task order) and the dropped attempts."""

    async def main() -> list[tuple[AgentEpisode, list[AgentEpisode]]]:
        gate = asyncio.Semaphore(concurrency)
        return await asyncio.gather(*(_episode(proxy, agent, t, timeout_s, retries, gate) for t in tasks))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pairs = asyncio.run(main())
    else:  # called from inside an event loop (a notebook): run ours in a thread
        box: dict[str, Any] = {}

        def runner() -> None:
            try:
                box["out"] = asyncio.run(main())
            except BaseException as exc:
                box["err"] = exc

        thread = threading.Thread(target=runner)
        thread.start()
        thread.join()
        if "err" in box:
            raise box["err"]
        pairs = box["out"]
    return [p[0] for p in pairs], [d for p in pairs for d in p[1]]


class AgentGRPOLoopTrainer(AgentGRPOTrainer):
    """:class:`~agentr1_trl.grpo.AgentGRPOTrainer` whose episodes are your agent's own loop, through the recording
    endpoint. Arguments as the GRPO trainer, plus ``agent`` (the async function, or ``"MODULE:FUNCTION"``; default
    ``args.agent``) and ``tasks`` (:class:`AgentTasks`; default from ``args.agent_tasks``, else ``args.env_id``)."""

    def __init__(
        self,
        model: Any,
        args: AgentGRPOConfig,
        processing_class: Any,
        *,
        agent: AgentFn | str | None = None,
        tasks: AgentTasks | None = None,
        **kwargs: Any,
    ) -> None:
        agent = agent or args.agent
        if not agent:
            raise ConfigError("AgentGRPOLoopTrainer needs agent= (or args.agent='MODULE:FUNCTION')")
        self.agent: AgentFn = load_agent(agent) if isinstance(agent, str) else agent
        if not inspect.iscoroutinefunction(self.agent):
            raise ConfigError("agent must be an `async def rollout(client, task)`")
        self.tasks = tasks or AgentTasks.load(args.agent_tasks or args.env_id, args.env_kwargs)
        if self.tasks.fixed is not None:  # a task file: its tasks are the training set
            args.num_tasks, args.seed_offset = self.tasks.fixed, 0
        self._proxy: AgentProxy | None = None
        super().__init__(model, args, processing_class, **kwargs)

    def proxy(self, sampling: SamplingConfig) -> AgentProxy:
        """The endpoint over the current generation backend (started once; its weights synced each step)."""
        backend = self.rollout_generator()
        if self._proxy is None or self._proxy.backend is not backend:
            if self._proxy is not None:
                self._proxy.close()
            self._proxy = AgentProxy(
                backend,
                self.processing_class,
                sampling,
                max_context_tokens=self.args.max_episode_tokens,
                vocab_size=self._vocab_size(),
                chat_template_kwargs=self.args.chat_template_kwargs,
            ).start()
        self._proxy.sampling = sampling
        return self._proxy

    def sampling(self, greedy: bool = False) -> SamplingConfig:
        args = self.args
        return SamplingConfig(
            max_new_tokens=args.max_new_tokens_per_turn,
            temperature=0.0 if greedy else args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
            do_sample=not greedy,
            stop_strings=HermesFormat.stop_strings,
        )

    def run_tasks(self, tasks: Sequence[dict[str, Any]], *, greedy: bool = False) -> list[AgentEpisode]:
        """One agent episode per task through the endpoint; logs the drops, splits and calls."""
        proxy = self.proxy(self.sampling(greedy))
        self._sampler_logprobs = bool(proxy.backend.provides_logprobs)
        args = self.args
        episodes, dropped = run_agent_episodes(
            proxy, self.agent, tasks, concurrency=args.agent_concurrency, timeout_s=args.agent_timeout_s,
            retries=args.agent_retries,
        )  # fmt: skip
        for reason in ("raised", "timeout", "no_call"):
            self.log_metric(f"agent/dropped_{reason}", float(sum(d.dropped == reason for d in dropped)))
        self.log_metric("drift/split_calls", float(sum(e.splits for e in episodes)))
        self.log_metric(
            "agent/calls", sum(len(e.trajectory.turn_ends) for e in episodes if e.trajectory) / len(episodes)
        )
        self.log_metric(
            "agent/truncated", float(sum(bool(e.trajectory and e.trajectory.truncated) for e in episodes))
        )
        return episodes

    def _collect(self, seeds: list[int]) -> list[Trajectory]:
        episodes = self.run_tasks([self.tasks.task(s) for s in seeds], greedy=not self.model.training)
        return [e.trajectory for e in episodes]  # type: ignore[misc]

    def close_generation(self) -> None:
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        super().close_generation()

    @classmethod
    def plan_tasks(
        cls, settings: dict[str, Any], evaluates: bool
    ) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """The agent loads now (a one-line error if it cannot). A task file (``agent_tasks``) has no env to probe
        and no oracle to imitate (no warm start); an env's tasks are split as for our rollout."""
        load_agent(settings["agent"])
        if settings.get("agent_tasks"):
            AgentTasks.from_jsonl(settings["agent_tasks"])
            kwargs = dict(settings["env_kwargs"])
            return kwargs, kwargs, False
        return super().plan_tasks(settings, evaluates)

    def held_out(
        self, label: str, episodes: int, env_kwargs: dict[str, Any], *, save_episodes: str | None, step: int
    ) -> dict[str, Any] | None:
        """Greedy evaluation of the agent through its own loop (:func:`evaluate_agent`): the env's held-out seeds,
        or the ``agent_eval_tasks`` file of a task-file run; None when there is nothing to evaluate."""
        if episodes <= 0:
            return None
        args = self.args
        if args.agent_tasks:
            if not args.agent_eval_tasks:
                print(
                    f"held-out {label}: none (a task file's run evaluates on --eval-tasks FILE.jsonl)",
                    flush=True,
                )
                return None
            tasks, seed = AgentTasks.from_jsonl(args.agent_eval_tasks), 0
        else:
            tasks, seed = AgentTasks(env_id=args.env_id, env_kwargs=env_kwargs), EVAL_SEED
        result = evaluate_agent(self, tasks, episodes, seed)
        where = f"seeds {seed}+" if not args.agent_tasks else tasks.source
        print(
            f"held-out {label} ({result['episodes']} agent episodes, {where}, greedy): success "
            f"{result['success']:.3f}, mean return {result['return']:.3f}, {result['calls']:.1f} calls per episode",
            flush=True,
        )
        return result


def evaluate_agent(
    trainer: AgentGRPOLoopTrainer, tasks: AgentTasks, episodes: int, seed: int = 0
) -> dict[str, Any]:
    """Greedy evaluation of the agent through the endpoint on ``episodes`` tasks (seeds ``seed``, ``seed + 1``,
    ...; a JSONL file's first ``episodes`` tasks): the mean of each metric (``success``, ``reward``, ...), the
    episodes' mean return, calls and drops."""
    model = trainer.model
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    try:
        n = min(episodes, tasks.fixed) if tasks.fixed is not None else episodes
        ran = trainer.run_tasks([tasks.task(seed + i) for i in range(n)], greedy=True)
    finally:
        model.train(was_training)
    trajs = [e.trajectory for e in ran if e.trajectory is not None]
    keys = sorted({k for t in trajs for k in t.metrics})
    summary: dict[str, Any] = {k: sum(t.metrics.get(k, 0.0) for t in trajs) / len(trajs) for k in keys}
    summary.update(
        episodes=len(trajs),
        seed=seed,
        **{"return": sum(t.episode_return for t in trajs) / len(trajs)},
        calls=sum(t.num_turns for t in trajs) / len(trajs),
        split_calls=sum(e.splits for e in ran),
        seconds=time.perf_counter() - start,
    )
    summary.setdefault("success", 0.0)
    return summary
