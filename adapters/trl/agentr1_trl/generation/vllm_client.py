"""Deprecated: this module is now :mod:`agentr1_trl.backends.vllm_client`. The old path keeps working, with a
``DeprecationWarning``, until 0.3."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_trl.backends.vllm_client", globals())
