"""Deprecated: this module is now :mod:`agentr1_trl.signals` (the learning signal has one home: per token and per turn). The old path keeps working, with a
``DeprecationWarning``, for one release."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_trl.signals", globals())
