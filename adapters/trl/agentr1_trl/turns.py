"""Deprecated: this module is now :mod:`agentr1_trl.turn_rows` (it builds the per-turn training rows). The old path keeps working, with a
``DeprecationWarning``, for one release."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_trl.turn_rows", globals())
