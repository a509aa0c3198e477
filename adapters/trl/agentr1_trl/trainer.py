"""Deprecated: this module is now :mod:`agentr1_trl.agent_trainer` (one of four modules was called trainer). The old path keeps working, with a
``DeprecationWarning``, for one release."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_trl.agent_trainer", globals())
