"""A verifiers (v1) taskset over an ``AgentR1/*`` Gymnasium env, and the env that plays it: the Gymnasium env
steps host-side as the run's user, each observation coming back as the next user turn."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

import agentr1_gym
from agentr1_gym.context import require_full_context
from agentr1_gym.errors import ConfigError


class AgentR1TasksetConfig(vf.TasksetConfig):
    """Which env and which task seeds (``--env.taskset.env-id``, ``--env.taskset.env-kwargs``, ...)."""

    env_id: str = "AgentR1/SyntheticMultihop-v0"
    """The registered AgentR1 env (``agentr1 envs`` lists them)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for ``agentr1_gym.make`` (e.g. ``{"retriever": "http", "server_url": ...}``)."""
    seed: int = 0
    """Task ``i`` is the env reset with seed ``seed + i``."""
    num_tasks: int | None = None
    """How many tasks; None: unbounded (bound a run with ``-n``)."""
    max_turns: int | None = None
    """The env's own turn limit (it truncates and scores there); None: the env's default."""


class AgentR1Data(vf.TaskData):
    info: dict[str, Any]
    """``env_id``, ``env_kwargs``, ``seed``: what the env resets from, so an episode can be reproduced."""


class AgentR1Task(vf.Task[AgentR1Data, vf.State, vf.TaskConfig]):
    pass


def _make(info: dict[str, Any]) -> Any:
    env = agentr1_gym.make(info["env_id"], **info.get("env_kwargs", {}))
    require_full_context(env, "verifiers")
    return env


class AgentR1Taskset(vf.Taskset[AgentR1Task, AgentR1TasksetConfig]):
    """Task ``i``: the env's first messages after ``reset(seed=seed + i)`` as the prompt (tools described in
    them, so no tool schemas cross); ``info`` holds what :class:`AgentR1Env` resets from."""

    INFINITE = True

    def __init__(self, config: AgentR1TasksetConfig) -> None:
        super().__init__(config)
        try:
            agentr1_gym.resolve_env_id(config.env_id)  # any registered id, or module:id
        except agentr1_gym.UnknownEnvError as exc:
            raise ConfigError(f"--env.taskset.env-id: {exc}") from None
        if config.num_tasks is not None:
            self._bounded = True

    def load(self) -> Iterator[AgentR1Task]:
        cfg = self.config
        kwargs = dict(cfg.env_kwargs)
        if cfg.max_turns is not None:
            kwargs["max_turns"] = int(cfg.max_turns)
        env = agentr1_gym.make(cfg.env_id, **kwargs)
        require_full_context(env, "verifiers")
        indices = itertools.count() if cfg.num_tasks is None else range(cfg.num_tasks)
        try:
            for i in indices:
                seed = cfg.seed + i
                _, info = env.reset(seed=seed)
                messages = [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
                system = [m["content"] for m in messages if m["role"] == "system"]
                yield AgentR1Task(
                    AgentR1Data(
                        name=f"{cfg.env_id}#{seed}",
                        id=str(info.get("task_id", seed)),
                        prompt=[m for m in messages if m["role"] != "system"],
                        system_prompt="\n\n".join(system) or None,
                        info={"env_id": cfg.env_id, "env_kwargs": kwargs, "seed": seed},
                    ),
                    cfg.task,
                )
        finally:
            env.close()


class AgentR1EnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    """The policy under training or evaluation (``--env.player.harness.id``, ``--env.player.runtime``...)."""


class AgentR1Env(vf.Env[AgentR1EnvConfig]):
    """One episode per task: the env resets from the task's ``info``; the player's first reply (the prompt is the
    env's own first messages) and each later one go to ``env.step`` (in a thread); the observation (tool
    responses, or the explanation of a malformed turn) is the next user turn; the exchange ends when the env
    terminates or truncates. If verifiers ends it first (the player's ``max_turns``, a harness error), the env is
    closed the way it closes a truncated episode, so the outcome is still scored.

    Scoring, on the player's trace: reward ``return`` (the episode return: process rewards + outcome, weight 1);
    metrics ``success``, ``score``, ``format_ok``, ``turns`` and the env's answer metrics; ``trace.info["agentr1"]``
    the per-step rewards, reward components, action errors and how the episode ended (verifiers has no per-step
    reward channel)."""

    async def run(self, task: AgentR1Task, agents: Any) -> None:
        info = task.data.info
        env = _make(info)
        try:
            _, reset_info = env.reset(seed=int(info["seed"]))
            expected = [m["content"] for m in reset_info["messages"] if m["role"] != "system"]
            got = [m["content"] if isinstance(m, dict) else m.content for m in (task.data.prompt or [])]
            if got != expected:
                raise ConfigError(
                    f"task {task.data.name}: the env's prompt after reset differs from the task's; the taskset and the "
                    "env must run the same agentr1-gym version and env kwargs"
                )
            steps: list[float] = []
            components: list[dict[str, float]] = []
            errors: list[str | None] = []
            metrics: dict[str, float] = {}
            ended = ""
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    obs, reward, terminated, truncated, step_info = await asyncio.to_thread(
                        env.step, segment.last_reply
                    )
                    steps.append(float(reward))
                    components.append(dict(step_info.get("reward_components", {})))
                    errors.append(step_info.get("action_error"))
                    if terminated or truncated:
                        metrics = dict(step_info.get("metrics", {}))
                        ended = (
                            "terminated" if terminated else step_info.get("truncated_reason") or "truncated"
                        )
                        break
                    segment = await interaction.turn(obs)
            if not ended:  # verifiers ended the exchange first: score it like a truncation
                outcome, metrics = env.unwrapped.close_episode(None)
                steps.append(float(sum(outcome.values())))
                components.append(dict(outcome))
                errors.append(None)
                ended = "verifiers"
            trace = interaction.trace
            trace.record_reward("return", float(sum(steps)), 1.0)
            trace.record_metrics({k: float(v) for k, v in metrics.items()})
            trace.info["agentr1"] = {
                "env_id": info["env_id"],
                "seed": int(info["seed"]),
                "step_rewards": steps,
                "reward_components": components,
                "action_errors": errors,
                "ended": ended,
            }
        finally:
            env.close()
