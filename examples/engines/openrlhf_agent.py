"""OpenRLHF agent file for the AgentR1 envs (OpenRLHF 0.11): ``--train.agent_func_path THIS_FILE``.

OpenRLHF's multi-turn executor generates token ids on its vLLM engines but hands the env only text: the prompt and
each piece of environment feedback are tokenized by OpenRLHF as given. So this file renders them with the
policy's own chat template (set ``AGENTR1_TOKENIZER`` to the model path you train): the prompt is the env's reset
messages and tool schemas through the template with the generation prompt; the feedback after a turn is the
template's text between the end of that turn and the start of the next one (turn close, tool responses, next
assistant header), the same delta our own token-exact rollouts use (``agentr1_gym.rollout.observation_delta``). OpenRLHF masks the feedback out of the loss
(its ``action_ranges``). Rewards are per step (``rewards``; OpenRLHF sums them), the episode metrics go to
``extra_logs``.

Dataset rows (JSONL, ``--data.prompt_dataset rows.jsonl --data.input_key input --data.label_key label``, without
``--data.apply_chat_template``)::

    {"input": "AgentR1/HotpotQA-v0#7", "label": "{\\"env_id\\": \\"AgentR1/HotpotQA-v0\\", \\"seed\\": 7}"}

:func:`dataset_rows` writes them. Limits of a text interface: the template must be prefix-stable (checked every
turn); whether the model closed its turn with the end-of-turn token is inferred from the text (a turn that does
not end in one of the env's stop strings ended with EOS).
"""

from __future__ import annotations

import asyncio
import json
import os
from functools import cache
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

import agentr1_gym
from agentr1_gym.context import require_full_context
from agentr1_gym.errors import ConfigError
from agentr1_gym.rollout import observation_delta, render_chat


@cache
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class AgentInstance(AgentInstanceBase):
    """One AgentR1 episode per OpenRLHF prompt; the row's ``label`` (JSON) names env id, seed and env kwargs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        path = os.environ.get("AGENTR1_TOKENIZER")
        if not path:
            raise ConfigError(
                "set AGENTR1_TOKENIZER to the policy's model path (its chat template renders turns)"
            )
        self.tok = _tokenizer(path)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        spec = json.loads(states["label"])
        self.env = agentr1_gym.make(spec["env_id"], **spec.get("env_kwargs", {}))
        require_full_context(self.env, "OpenRLHF")
        _, info = self.env.reset(seed=spec.get("seed"))
        self.messages, self.tools = [dict(m) for m in info["messages"]], info.get("tools")
        self.stops = tuple(self.env.unwrapped.tool_format.stop_strings)
        self.rendered = render_chat(self.tok, self.messages, self.tools, add_generation_prompt=True)
        self.total = 0.0
        return {"observation": self.rendered}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        action = states["action_text"]
        _, reward, terminated, truncated, info = await asyncio.to_thread(self.env.step, action)
        self.total += float(reward)
        done = bool(terminated or truncated)
        feedback, logs = "", {}
        if done:
            logs = {k: float(v) for k, v in info.get("metrics", {}).items()}
            self.env.close()
        else:
            feedback = self._feedback(action, [dict(m) for m in info["messages"]])
        return {
            "rewards": torch.tensor(float(reward)),
            "scores": torch.tensor(self.total),
            "environment_feedback": feedback,
            "done": done,
            "extra_logs": logs,
        }

    def _feedback(self, action: str, messages: list[dict]) -> str:
        # a turn that does not end in one of the env's stop strings ended with EOS, which is among its ids
        delta, nxt = observation_delta(
            self.tok, self.rendered, self.messages, messages, self.tools, not action.endswith(self.stops)
        )
        if delta is None:
            raise ConfigError(
                "the chat template is not prefix-stable; OpenRLHF's text interface cannot follow it"
            )
        self.rendered, self.messages = nxt, messages
        return delta


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self) -> None:
        super().__init__(AgentInstance)


def dataset_rows(env_id: str, seeds: range, env_kwargs: dict | None = None) -> list[dict]:
    """JSONL rows for OpenRLHF's prompt dataset: ``input`` a readable name, ``label`` the episode spec."""
    spec = {"env_id": env_id, "env_kwargs": dict(env_kwargs or {})}
    return [{"input": f"{env_id}#{s}", "label": json.dumps({**spec, "seed": int(s)})} for s in seeds]
