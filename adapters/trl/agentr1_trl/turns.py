"""Deprecated: this module is now :mod:`agentr1_trl.turn_rows` (it builds the per-turn training rows). The old path keeps working, with a
``DeprecationWarning``, for one release."""

import warnings

import agentr1_trl.turn_rows as _new
from agentr1_trl.turn_rows import *  # noqa: F403

warnings.warn(
    "agentr1_trl.turns is renamed agentr1_trl.turn_rows; import from there (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # the module's other names, as before
    return getattr(_new, name)
