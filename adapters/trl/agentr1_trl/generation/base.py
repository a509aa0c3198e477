"""The generation-backend interface: batched, token-in/token-out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Generation", "GenerationBackend", "SamplingConfig"]


@dataclass
class SamplingConfig:
    """Sampling settings shared by every backend. ``temperature=0`` means greedy decoding (as in vLLM)."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.temperature == 0:
            self.do_sample = False


@dataclass
class Generation:
    """One generated turn: the token ids exactly as sampled and the log-probability of each under the sampler."""

    ids: list[int]
    logprobs: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.logprobs:
            self.logprobs = [0.0] * len(self.ids)
        if len(self.logprobs) != len(self.ids):
            raise ValueError("logprobs must have one entry per generated token")


@runtime_checkable
class GenerationBackend(Protocol):
    """Generates one assistant turn for each prompt (a list of token ids). A backend whose log-probs are not the
    sampler's (a scripted one) sets ``provides_logprobs = False``."""

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """One :class:`Generation` per prompt, stopping at EOS or the end of a stop string (inclusive)."""
        ...
