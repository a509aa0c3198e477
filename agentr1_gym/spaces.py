"""A text space for free-form LLM text.

Gymnasium's :class:`gymnasium.spaces.Text` only admits a fixed character set (its default rejects spaces
and punctuation), which makes it unusable for chat messages. :class:`FreeText` admits any ``str`` up to
``max_length`` characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

__all__ = ["FreeText"]

# What ``sample`` draws from: printable ASCII, whitespace, tag characters and a few non-ASCII letters.
_SAMPLE_ALPHABET = np.array(
    list(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t.,;:!?'\"-_/\\()[]{}<>=+*&%$#@"
        "éüßøł中文日本語😀\x00\x07"
    )
)


class FreeText(Space[str]):
    """Any Python ``str`` of at most ``max_length`` characters.

    ``sample()`` draws random strings (including the characters tool-call formats use) from the space's own
    seeded RNG, so that ``check_env`` and fuzzers exercise the parser.
    """

    def __init__(self, max_length: int = 100_000, *, seed: int | np.random.Generator | None = None) -> None:
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise ValueError("FreeText.sample does not support masks")
        length = int(self.np_random.integers(0, min(self.max_length, 256) + 1))
        return "".join(self.np_random.choice(_SAMPLE_ALPHABET, size=length).tolist())

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("FreeText", self.max_length))

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)
