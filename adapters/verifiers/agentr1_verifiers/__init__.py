"""verifiers adapter: every ``AgentR1/*`` env as a verifiers (v1) taskset plus the env that plays it.

The taskset id is ``agentr1-verifiers`` (verifiers imports this package by it)::

    vf-eval agentr1-verifiers --env.taskset.env-id AgentR1/HotpotQA-v0 -n 100 ...

:class:`AgentR1Taskset` yields one task per seed (the env's first messages as the prompt); :class:`AgentR1Env`
steps the Gymnasium env host-side as the run's user (see its docstring for what is scored and recorded).
verifiers 0.4 needs ``openai<3``, which the main environment's vLLM stack does not pin to: install it in its own
environment (``pip install -e ".[verifiers]"``; the README's verifiers section).
"""

from __future__ import annotations

from agentr1_verifiers.taskset import (
    AgentR1Data,
    AgentR1Env,
    AgentR1EnvConfig,
    AgentR1Task,
    AgentR1Taskset,
    AgentR1TasksetConfig,
)

__all__ = [
    "AgentR1Data",
    "AgentR1Env",
    "AgentR1EnvConfig",
    "AgentR1Task",
    "AgentR1Taskset",
    "AgentR1TasksetConfig",
]
