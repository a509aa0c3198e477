"""Generation backends: Hugging Face ``generate`` (CPU/GPU) and a scripted one for tests. Every backend
implements :class:`GenerationBackend` (token ids in, token ids + log-probs out)."""

from agentr1_trl.generation.base import Generation, GenerationBackend, SamplingConfig
from agentr1_trl.generation.hf import HFGenerator
from agentr1_trl.generation.scripted import ScriptedGenerator

__all__ = ["Generation", "GenerationBackend", "HFGenerator", "SamplingConfig", "ScriptedGenerator"]
