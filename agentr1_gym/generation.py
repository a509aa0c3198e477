"""The generation-backend interface: batched, token-in/token-out, engine-neutral (no torch).

A backend generates one assistant turn per prompt (token ids in; token ids as sampled and their log-probs out) and
declares what it provides: :meth:`~GenerationBackend.describe` (what runs, for logs and result files),
``provides_logprobs`` (whether its log-probs are the sampler's, which importance correction needs),
:meth:`~GenerationBackend.sync_weights` (the policy's new weights, for an engine that holds its own copy) and
:meth:`~GenerationBackend.close` (what it holds, released). :class:`BaseGenerator` gives the defaults; the
backends themselves live with the engines that run them (``agentr1_trl.backends``: Hugging Face ``generate``,
vLLM, a scripted one for tests, value-guided decoding), and the token layer (:mod:`agentr1_gym.rollout`) drives
any of them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentr1_gym.errors import ConfigError, ToolInfrastructureError

__all__ = [
    "BaseGenerator",
    "Generation",
    "GenerationBackend",
    "GenerationError",
    "SamplingConfig",
    "check_backend",
    "check_generations",
]


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
    """Generates one assistant turn for each prompt (a list of token ids), and says what it provides."""

    #: whether ``Generation.logprobs`` are the sampler's (a scripted backend's are not: the trainers then skip the
    #: train/inference importance correction)
    provides_logprobs: bool

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """One :class:`Generation` per prompt, stopping at EOS or the end of a stop string (inclusive)."""
        ...

    def describe(self) -> str:
        """What generates, in a few words (e.g. "vLLM colocate (in this process, bfloat16), merged weight
        sync")."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Bring the backend's weights up to ``model``'s (after an optimizer step); a no-op for a backend that
        generates with the training model itself."""
        ...

    def close(self) -> None:
        """Release what the backend holds (an engine, temporary weights); a no-op for most."""
        ...


class BaseGenerator:
    """The defaults of :class:`GenerationBackend` for a backend to inherit: sampler log-probs, its class name as
    description, nothing to close. A subclass implements :meth:`generate`."""

    provides_logprobs: bool = True

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        raise NotImplementedError(f"{type(self).__name__} must implement generate(prompts, sampling)")

    def describe(self) -> str:
        return type(self).__name__

    def sync_weights(self, model: Any) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> BaseGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_backend(backend: Any) -> GenerationBackend:
    """``backend``, checked to implement :class:`GenerationBackend`; a :class:`ConfigError` that says what is
    missing otherwise (inherit :class:`BaseGenerator` for the defaults)."""
    missing = [
        name
        for name in ("generate", "describe", "sync_weights", "close", "provides_logprobs")
        if not hasattr(backend, name)
        or (name != "provides_logprobs" and not callable(getattr(backend, name)))
    ]
    if missing:
        raise ConfigError(
            f"{type(backend).__name__} is not a generation backend: it lacks {', '.join(missing)}; inherit "
            "agentr1_gym.generation.BaseGenerator (it provides describe, sync_weights, close and provides_logprobs) "
            "and "
            "implement generate(prompts, sampling)"
        )
    return backend


class GenerationError(ToolInfrastructureError):
    """A generation backend returned something no policy can have sampled (a wrong count, ids outside the
    vocabulary, more tokens than asked for, impossible log-probs). Raised before a rollout or an update uses it."""


def check_generations(
    backend: Any, gens: Any, n: int, *, vocab_size: int, max_new_tokens: int
) -> list[Generation]:
    """``gens`` (the answer of ``backend.generate`` for ``n`` prompts), checked: a list of ``n``
    :class:`Generation`, every id in ``[0, vocab_size)``, at most ``max_new_tokens`` each, finite log-probs
    <= 0. Every backend's output passes here before a rollout records it: an id outside the vocabulary would
    otherwise decode to nothing and crash the update (``IndexError``, a device-side assert on GPUs)."""
    name = backend.describe()

    def bad(problem: str) -> GenerationError:
        return GenerationError(f"generation backend {name}: {problem}")

    if not isinstance(gens, list) or len(gens) != n:
        got = len(gens) if isinstance(gens, list) else type(gens).__name__
        raise bad(f"{got} generations for {n} prompts")
    for k, gen in enumerate(gens):
        if not isinstance(gen, Generation):
            raise bad(f"generation {k} is a {type(gen).__name__}, not a Generation")
        if len(gen.ids) > max_new_tokens:
            raise bad(f"generation {k} has {len(gen.ids)} tokens, more than the {max_new_tokens} asked for")
        for t in gen.ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
                raise bad(f"generation {k}: token id {t!r} is outside the vocabulary (0..{vocab_size - 1})")
        for lp in gen.logprobs:
            if not math.isfinite(lp) or lp > 1e-3:
                raise bad(f"generation {k}: log-prob {lp!r} is not a finite number <= 0")
    return gens
