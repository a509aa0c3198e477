"""Generation backends: Hugging Face ``generate`` (CPU/GPU), a scripted one for tests and value-guided decoding
over any of them. Every backend implements :class:`GenerationBackend` (token ids in, token ids + log-probs
out)."""

from agentr1_gym.generation import (
    BaseGenerator,
    Generation,
    GenerationBackend,
    GenerationError,
    SamplingConfig,
    check_generations,
)
from agentr1_trl.generation.hf import HFGenerator
from agentr1_trl.generation.scripted import ScriptedGenerator
from agentr1_trl.generation.value_guided import ValueGuidedGenerator

__all__ = [
    "BaseGenerator",
    "Generation",
    "GenerationBackend",
    "GenerationError",
    "HFGenerator",
    "SamplingConfig",
    "ScriptedGenerator",
    "ValueGuidedGenerator",
    "check_generations",
]
