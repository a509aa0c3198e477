"""verl's agent loop over an ``AgentR1/*`` Gymnasium env, the dataset rows that drive it, and per-step rewards as
token-level rewards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

import agentr1_gym
from agentr1_gym.context import require_full_context
from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import EpisodeRecorder

#: the ``agent_name`` of our loop (dataset rows name it; verl looks it up in its agent-loop registry)
AGENT_NAME = "agentr1"
#: the agent-loop config file for ``actor_rollout_ref.rollout.agent.agent_loop_config_path``: registers the loop
#: in verl's worker processes, which do not import this package themselves
AGENT_LOOP_CONFIG = str(Path(__file__).with_name("agent_loop.yaml"))
#: episode metrics every AgentR1 env reports; they travel as verl's ``reward_extra_info`` (verl needs the same
#: keys in every row of a batch, so env-specific metrics go in ``extra_fields["agentr1_metrics"]`` instead)
COMMON_METRICS = ("success", "score", "format_ok", "turns", "repeat_rate")
_ROW_KEYS = ("env_id", "seed", "env_kwargs", "max_turns", "task_index")


def _settings(extra_info: Any) -> dict[str, Any]:
    if extra_info is None:
        extra_info = {}
    if not isinstance(extra_info, dict):
        raise ConfigError(f"the row's extra_info must be a mapping, got {type(extra_info).__name__}")
    out = {k: extra_info[k] for k in _ROW_KEYS if extra_info.get(k) is not None}
    if not out.get("env_id"):
        raise ConfigError(
            f"agent loop {AGENT_NAME!r} needs the AgentR1 env id in the row's extra_info.env_id "
            "(build rows with agentr1_verl.verl_dataset)"
        )
    kwargs = out.get("env_kwargs") or {}
    if isinstance(kwargs, str):  # parquet-friendly form written by verl_dataset
        kwargs = json.loads(kwargs) if kwargs.strip() else {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"extra_info.env_kwargs must be a mapping or its JSON, got {type(kwargs).__name__}")
    out["env_kwargs"] = kwargs
    return out


@register(AGENT_NAME)
class AgentR1AgentLoop(AgentLoopBase):
    """One episode of an ``AgentR1/*`` env per dataset row, token in / token out.

    The row's ``extra_info`` names the env (``env_id``, ``env_kwargs``, ``seed``, ``max_turns``,
    ``task_index``); the env's reset writes the prompt (its messages and tool schemas through the tokenizer's chat
    template; the row's ``prompt`` is only what verl's length filter sees). Each turn asks verl's LLM server for
    tokens from the exact context ids (the env's tool-call stop strings added), passes the decoded turn to
    ``env.step`` in a thread, and appends the observation tokens: the bookkeeping is our own
    :class:`~agentr1_gym.rollout.EpisodeRecorder`, so verl's sequences are the ones our TRL trainers train on.

    Output: ``response_mask`` 1 exactly on generated tokens (observations 0); ``response_logprobs`` the server's
    when verl asked for them; ``reward_score`` the episode return (process rewards + outcome; verl puts it on the
    last token); ``extra_fields["turn_scores"]`` the per-step rewards (turn by turn, for a reward function or
    :func:`process_reward_tensor`), ``["reward_extra_info"]`` the :data:`COMMON_METRICS` (verl logs them),
    ``["agentr1_metrics"]`` all episode metrics, ``["agentr1"]`` reward components, action errors and how the
    episode ended. Episodes end when the env terminates or truncates (``max_turns``, scored either way) or when
    ``rollout.response_length`` is used up (the env is not scored then: no outcome reward).
    """

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        settings = _settings(kwargs.get("extra_info"))
        env_kwargs = dict(settings["env_kwargs"])
        if settings.get("max_turns") is not None:
            env_kwargs["max_turns"] = int(settings["max_turns"])
        env = agentr1_gym.make(settings["env_id"], **env_kwargs)
        require_full_context(env, "verl's agent loop (one sequence per episode)")
        try:
            return await self._episode(env, settings, sampling_params)
        finally:
            env.close()

    async def _episode(
        self, env: Any, settings: dict[str, Any], sampling_params: dict[str, Any]
    ) -> AgentLoopOutput:
        prompt_limit = int(self.rollout_config.prompt_length)
        response_limit = int(self.rollout_config.response_length)
        options = {"task_index": int(settings["task_index"])} if "task_index" in settings else None
        seed = settings.get("seed")
        _, info = env.reset(seed=None if seed is None else int(seed), options=options)
        rec = EpisodeRecorder(
            self.tokenizer,
            info,
            max_episode_tokens=prompt_limit + response_limit,
            max_completion_tokens=response_limit,
            chat_template_kwargs=self.apply_chat_template_kwargs or None,
        )
        if len(rec.traj.prompt_ids) > prompt_limit:
            raise ConfigError(
                f"{settings['env_id']} seed {seed}: the env's prompt is {len(rec.traj.prompt_ids)} tokens, over "
                f"rollout.prompt_length={prompt_limit}; raise data.max_prompt_length"
            )
        stops = list(env.unwrapped.tool_format.stop_strings)
        params = dict(sampling_params)
        if stops:
            params["stop"] = list(dict.fromkeys([*(params.get("stop") or []), *stops]))
            params["include_stop_str_in_output"] = True  # the env parses the closing tag
        request_id = uuid4().hex  # one id per episode: sticky routing, the server's prefix cache
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        want_logprobs = bool(sampling_params.get("logprobs"))
        while not rec.done:
            t = time.perf_counter()
            out = await self.server_manager.generate(
                request_id,
                prompt_ids=list(rec.context_ids),
                sampling_params={**params, "max_tokens": rec.room},
            )
            timing["generate_sequences"] += time.perf_counter() - t
            logprobs = list(out.log_probs) if out.log_probs is not None else [0.0] * len(out.token_ids)
            action = rec.add_generation(list(out.token_ids), logprobs)
            if action is None:
                break
            t = time.perf_counter()
            _, reward, terminated, truncated, step_info = await self.loop.run_in_executor(
                None, env.step, action
            )
            timing["tool_calls"] += time.perf_counter() - t
            rec.add_step(reward, terminated, truncated, step_info)
        traj = rec.traj
        if not traj.one_sequence:
            raise ConfigError(
                "the tokenizer's chat template is not prefix-stable (it rewrites earlier turns, e.g. drops "
                "<think> blocks), so an episode is no single sequence verl can train on; use a prefix-stable "
                "template (data.apply_chat_template_kwargs / actor_rollout_ref.model.custom_chat_template)"
            )
        n = min(len(traj.completion_ids), response_limit)
        metrics = dict(traj.metrics)
        return AgentLoopOutput(
            prompt_ids=list(traj.prompt_ids),
            response_ids=traj.completion_ids[:n],
            response_mask=traj.action_mask[:n],
            response_logprobs=traj.logprobs[:n] if want_logprobs else None,
            reward_score=traj.episode_return,
            num_turns=len(rec.messages) + (1 if rec.done and traj.actions else 0),
            metrics=AgentLoopMetrics(**timing),
            extra_fields={
                "turn_scores": list(traj.rewards),
                "tool_rewards": [],
                "reward_extra_info": {k: float(metrics.get(k, 0.0)) for k in COMMON_METRICS},
                "agentr1_metrics": metrics,
                "agentr1": {
                    "env_id": settings["env_id"],
                    "seed": seed,
                    "task_id": traj.task_id,
                    "reward_components": traj.reward_components,
                    "action_errors": traj.action_errors,
                    "terminated": traj.terminated,
                    "truncated_reason": traj.truncated_reason,
                },
            },
        )


def process_reward_tensor(response_mask: Any, turn_scores: Sequence[Sequence[float]]) -> Any:
    """Token-level rewards with each turn's step reward on the last generated token of that turn (the runs of 1s in
    ``response_mask``, one per turn), for a verl reward function or advantage estimator that uses process rewards;
    ``response_mask`` is verl's ``[batch, response_length]`` tensor, ``turn_scores`` its non-tensor field."""
    import torch

    rewards = torch.zeros(response_mask.shape, dtype=torch.float32)
    for row, scores in enumerate(turn_scores):
        mask = response_mask[row].to(torch.int64)
        nxt = torch.cat([mask[1:], mask.new_zeros(1)])
        ends = torch.nonzero((mask == 1) & (nxt == 0)).flatten().tolist()
        scores = list(scores)
        if len(ends) < len(
            scores
        ):  # the last turn(s) were cut by response_length: their rewards go to the end
            ends += [ends[-1] if ends else mask.numel() - 1] * (len(scores) - len(ends))
        for end, score in zip(ends, scores):
            rewards[row, end] += float(score)
    return rewards


def verl_dataset(
    env_id: str,
    seeds: Iterable[int],
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_turns: int | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """verl dataset rows for these task seeds: ``prompt`` (the env's first messages, so verl's prompt-length filter
    sees the real length), ``agent_name`` (:data:`AGENT_NAME`), ``data_source`` (the env id), ``reward_model``
    (style ``env``: the env scores) and ``extra_info`` (``env_id``, ``seed``, ``env_kwargs`` as JSON,
    ``max_turns``, ``index``, ``split``). Save with ``datasets.Dataset.from_list(rows).to_parquet(path)``."""
    rows = []
    kwargs = dict(env_kwargs or {})
    env = agentr1_gym.make(env_id, **kwargs)
    require_full_context(env, "verl's agent loop (one sequence per episode)")
    try:
        for index, seed in enumerate(seeds):
            _, info = env.reset(seed=int(seed))
            extra: dict[str, Any] = {
                "env_id": env_id,
                "seed": int(seed),
                "env_kwargs": json.dumps(kwargs, sort_keys=True),
                "index": index,
                "split": split,
            }
            if max_turns is not None:
                extra["max_turns"] = int(max_turns)
            rows.append(
                {
                    "data_source": env_id,
                    "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                    "agent_name": AGENT_NAME,
                    "ability": "agent",
                    "reward_model": {"style": "env", "ground_truth": ""},
                    "extra_info": extra,
                }
            )
    finally:
        env.close()
    return rows
