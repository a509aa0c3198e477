"""Deprecated: this package is now :mod:`agentr1_trl.backends` (the protocol the backends implement lives in
:mod:`agentr1_gym.generation`, and ``SamplingConfig``, ``Generation`` and the rest are imported from there). The old
path keeps working, with a ``DeprecationWarning``, until 0.3."""

from agentr1_gym.deprecated import alias
from agentr1_gym.generation import (  # noqa: F401  (the protocol names this package used to re-export)
    BaseGenerator,
    Generation,
    GenerationBackend,
    GenerationError,
    SamplingConfig,
    check_generations,
)

__getattr__ = alias(__name__, "agentr1_trl.backends", globals())
