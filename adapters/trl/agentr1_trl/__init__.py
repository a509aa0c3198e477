"""agentr1_trl: the TRL adapter of agentr1-gym.

Token-exact multi-turn rollouts over ``AgentR1/*`` envs with action masks (:mod:`agentr1_trl.rollout`),
advantage estimators (:mod:`agentr1_trl.advantages`), :class:`AgentGRPOTrainer` (LoRA through peft, the KL
reference is the base model with the adapter disabled), and bridges for TRL's stock ``GRPOTrainer``
(:mod:`agentr1_trl.bridges`).
"""

from agentr1_trl.generation import (
    Generation,
    GenerationBackend,
    HFGenerator,
    SamplingConfig,
    ScriptedGenerator,
)
from agentr1_trl.rollout import Sample, Trajectory, collect_rollouts

__all__ = [
    "Generation",
    "GenerationBackend",
    "HFGenerator",
    "Sample",
    "SamplingConfig",
    "ScriptedGenerator",
    "Trajectory",
    "collect_rollouts",
]
