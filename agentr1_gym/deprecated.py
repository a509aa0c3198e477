"""Old import paths kept for one release after a rename: the old module becomes an alias of the new one that warns
once, naming both. The renamed modules' old files each hold two lines: a docstring and a call of :func:`alias`."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["alias"]


def alias(old: str, new: str, namespace: dict[str, Any]) -> Callable[[str], Any]:
    """Fill ``namespace`` (the old module's globals) with the public names of module ``new``, warn that ``old`` is
    renamed (a ``DeprecationWarning`` at the importing line), and return the ``__getattr__`` that serves the new
    module's other names."""
    module = importlib.import_module(new)
    public = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    namespace.update({name: getattr(module, name) for name in public})
    namespace["__all__"] = list(public)
    warnings.warn(
        f"{old} is renamed {new}; import from there (this alias goes in the next release)",
        DeprecationWarning,
        stacklevel=3,  # alias() <- the old module's body <- the importing line (warn skips importlib's frames)
    )

    def __getattr__(name: str) -> Any:
        return getattr(module, name)

    return __getattr__
