"""Deprecated: this module is now :mod:`agentr1_trl.agent_trainer` (one of four modules was called trainer). The old path keeps working, with a
``DeprecationWarning``, for one release."""

import warnings

import agentr1_trl.agent_trainer as _new
from agentr1_trl.agent_trainer import *  # noqa: F403

warnings.warn(
    "agentr1_trl.trainer is renamed agentr1_trl.agent_trainer; import from there (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # the module's other names, as before
    return getattr(_new, name)
