"""Deprecated: this module is now :mod:`agentr1_trl.signals` (the learning signal has one home: per token and per turn). The old path keeps working, with a
``DeprecationWarning``, for one release."""

import warnings

import agentr1_trl.signals as _new
from agentr1_trl.signals import *  # noqa: F403

warnings.warn(
    "agentr1_trl.credit is renamed agentr1_trl.signals; import from there (this alias goes in the next release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # the module's other names, as before
    return getattr(_new, name)
