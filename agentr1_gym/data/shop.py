"""Deprecated: this module is now :mod:`agentr1_gym.data.webshop` (named after its env, ``envs/webshop.py``). The
old path keeps working, with a ``DeprecationWarning``, for one release."""

import warnings

import agentr1_gym.data.webshop as _new
from agentr1_gym.data.webshop import *  # noqa: F403

warnings.warn(
    "agentr1_gym.data.shop is renamed agentr1_gym.data.webshop; import from there (this alias goes in the next "
    "release)",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):  # the module's other names, as before
    return getattr(_new, name)
