"""SkyRL-Gym adapter: every ``AgentR1/*`` env as a ``skyrl_gym`` text env, for SkyRL's trainers.

``import agentr1_skyrl`` registers, in ``skyrl_gym``'s registry, one id per registered AgentR1 env (the same id,
e.g. ``"AgentR1/HotpotQA-v0"``) and the generic ``"agentr1"`` (whose env id comes from the dataset row). A SkyRL
dataset row names its env in ``env_class`` and carries the rest as extras (:func:`skyrl_dataset` builds them)::

    {"prompt": [...], "env_class": "AgentR1/HotpotQA-v0",
     "extra_info": {"seed": 7, "env_kwargs": {"retriever": "http", "server_url": "..."}, "max_turns": 4}}

See :class:`AgentR1SkyRLEnv` for what crosses the mapping (observations, per-step process rewards, termination,
metrics).
"""

from __future__ import annotations

from agentr1_skyrl.env import GENERIC_ID, AgentR1SkyRLEnv, register_skyrl_envs, skyrl_dataset

__all__ = ["GENERIC_ID", "AgentR1SkyRLEnv", "register_skyrl_envs", "skyrl_dataset"]

register_skyrl_envs()
