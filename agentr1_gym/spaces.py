"""A text space for free-form LLM text.

Gymnasium's :class:`gymnasium.spaces.Text` only admits a fixed character set (its default rejects spaces
and punctuation), which makes it unusable for chat messages. :class:`FreeText` admits any ``str`` up to
``max_length`` characters.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["FreeText", "SharedTexts"]

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


# ---- shared memory, so that AsyncVectorEnv (and gym.make_vec(..., vectorization_mode="async")) works with its
# default shared_memory=True: each env's slot holds the string's length, then its code points (int32).
@create_shared_memory.register(FreeText)
def _create_free_text_memory(space: FreeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence[str]):
    """The observations of a batch of envs, read live from shared memory (as Gymnasium's shared-memory arrays are
    views: ``AsyncVectorEnv`` reads the buffer once and returns a copy of it after every step)."""

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __len__(self) -> int:
        return self._data.shape[0]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        row = self._data[i]
        return row[1 : 1 + int(row[0])].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(FreeText)
def _read_free_text(space: FreeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(
        np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1))
    )


@write_to_shared_memory.register(FreeText)
def _write_free_text(space: FreeText, index: int, value: str, shared_memory: Any) -> None:
    if not space.contains(value):
        raise ValueError(f"{value!r:.60} is not in {space} (a str of at most {space.max_length} characters)")
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int32)
    size = space.max_length + 1
    slot = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    slot[0] = len(codes)
    slot[1 : 1 + len(codes)] = codes
