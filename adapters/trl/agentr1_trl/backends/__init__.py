"""Generation backends: Hugging Face ``generate`` (CPU/GPU), a scripted one for tests and value-guided decoding
over any of them; vLLM (colocated or on servers) in :mod:`agentr1_trl.backends.vllm`, and the choice between them
in :func:`agentr1_trl.backends.factory.make_generator`. Each implements the protocol that lives in
:mod:`agentr1_gym.generation` (:class:`~agentr1_gym.generation.GenerationBackend`: token ids in, token ids and
log-probs out), which this package does not re-export: import ``SamplingConfig``, ``Generation`` and the rest from
there."""

from agentr1_trl.backends.hf import HFGenerator
from agentr1_trl.backends.scripted import ScriptedGenerator
from agentr1_trl.backends.value_guided import ValueGuidedGenerator

__all__ = ["HFGenerator", "ScriptedGenerator", "ValueGuidedGenerator"]
