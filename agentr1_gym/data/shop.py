"""Deprecated: this module is now :mod:`agentr1_gym.data.webshop` (named after its env, envs/webshop.py). The old path keeps working, with a
``DeprecationWarning``, for one release."""

from agentr1_gym.deprecated import alias

__getattr__ = alias(__name__, "agentr1_gym.data.webshop", globals())
