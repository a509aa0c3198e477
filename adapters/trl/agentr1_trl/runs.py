"""Deprecated: this module is now :mod:`agentr1_trl.run_dir` (one room for the run directory, one for what a run
reports). The old path keeps working, with a ``DeprecationWarning``, until 0.3."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_trl.run_dir", globals())
