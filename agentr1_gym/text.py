"""Text that crosses a trust boundary: made safe once, where it enters the env, the token layer and the records.

Model output and what tools and servers send back are untrusted text. Two things in it broke runs downstream
(tokenizers, JSON writers, MCP's serializer) even though Python accepts them as ``str``:

* **lone surrogates** (``"Lima \\ud83c"``: valid JSON, an emoji escape cut in half) cannot be encoded as UTF-8;
  :func:`clean_text` replaces each with U+FFFD and leaves proper pairs joined;
* **deep nesting** (arguments 500 levels deep) overflows recursive serializers; :func:`clean_json` cuts a value
  at :data:`MAX_JSON_DEPTH` levels and says whether it had to.

:class:`~agentr1_gym.env.ToolEnv` applies them to every action, tool call's arguments, tool result and
observation; :mod:`agentr1_gym.rollout` applies :func:`clean_text` before tokenizing and
:mod:`agentr1_gym.episodes` before writing, so envs that are not ToolEnvs are covered too.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "clean_json", "clean_text"]

#: tool-call arguments nested deeper than this are refused (an invalid call); real schemas nest a few levels
MAX_JSON_DEPTH = 32


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the result always encodes as UTF-8); the same
    object back when there is nothing to replace (the common case costs one ``isascii`` or one encode)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 with surrogatepass joins proper pairs; the decode replaces what remains unpaired
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _json_leaf(value: Any) -> Any:
    """A scalar as JSON can hold it: strings cleaned, NaN/inf as None, numpy scalars as Python numbers, anything
    else as its ``str``."""
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return _json_leaf(item())
        except (TypeError, ValueError):
            pass
    return clean_text(str(value))


def clean_json(value: Any, max_depth: int = MAX_JSON_DEPTH, *, strict: bool = False) -> tuple[Any, bool]:
    """A JSON-like value (dicts, lists, scalars) with its strings (keys included) passed through
    :func:`clean_text`, and everything below ``max_depth`` levels of containers replaced by the string
    ``"..."``. Returns ``(cleaned, cut)``; ``cut`` says whether anything was cut. Iterative, so any depth is safe.
    ``strict``: also make every leaf something ``json.dumps(allow_nan=False)`` writes (NaN/inf become None, numpy
    scalars Python numbers, other objects their ``str``; keys become strings)."""
    leaf = _json_leaf if strict else (lambda v: clean_text(v) if isinstance(v, str) else v)

    def key_of(k: Any) -> Any:
        if isinstance(k, str):
            return clean_text(k)
        return clean_text(str(k)) if strict and not isinstance(k, (int, float, bool)) and k is not None else k

    if not isinstance(value, (dict, list, tuple)):
        return leaf(value), False
    cut = False
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any, int]] = [(value, root, 1)]
    while stack:
        src, dst, depth = stack.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for key, child in items:
            if isinstance(child, (dict, list, tuple)):
                if depth >= max_depth:
                    cut = True
                    new: Any = "..."
                else:
                    new = {} if isinstance(child, dict) else []
                    stack.append((child, new, depth + 1))
            else:
                new = leaf(child)
            if isinstance(dst, dict):
                dst[key_of(key)] = new
            else:
                dst.append(new)
    return root, cut
