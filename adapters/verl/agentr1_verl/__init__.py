"""verl adapter: every ``AgentR1/*`` env as a verl agent loop, for verl's PPO/GRPO trainers.

``import agentr1_verl`` registers the agent loop ``"agentr1"`` (:data:`AGENT_NAME`) in verl's registry; verl's
worker processes find it through :data:`AGENT_LOOP_CONFIG` (pass it as
``actor_rollout_ref.rollout.agent.agent_loop_config_path``). Dataset rows name the env in ``extra_info``
(:func:`verl_dataset` builds them)::

    {"prompt": [...], "agent_name": "agentr1", "data_source": "AgentR1/HotpotQA-v0",
     "extra_info": {"env_id": "AgentR1/HotpotQA-v0", "seed": 7, "env_kwargs": "{\\"retriever\\": \\"http\\"}"}}

See :class:`AgentR1AgentLoop` for what crosses the mapping (tokens and masks, the episode return as verl's
reward, per-step process rewards as ``turn_scores``, metrics). verl pins ``transformers<5.11``: install it in its
own environment (``pip install -e ".[verl]"``; the README's verl section).
"""

from __future__ import annotations

from agentr1_verl.loop import (
    AGENT_LOOP_CONFIG,
    AGENT_NAME,
    COMMON_METRICS,
    AgentR1AgentLoop,
    process_reward_tensor,
    verl_dataset,
)

__all__ = [
    "AGENT_LOOP_CONFIG",
    "AGENT_NAME",
    "COMMON_METRICS",
    "AgentR1AgentLoop",
    "process_reward_tensor",
    "verl_dataset",
]
