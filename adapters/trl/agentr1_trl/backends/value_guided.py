"""Value-guided decoding: sample several candidate turns and keep the one whose resulting state a value head
(a PPO critic, :class:`~agentr1_trl.ppo.AgentPPOTrainer`'s) scores highest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import BaseGenerator, Generation, GenerationBackend, SamplingConfig, check_backend
from agentr1_trl.value_head import state_values

__all__ = ["ValueGuidedGenerator"]


class ValueGuidedGenerator(BaseGenerator):
    """Value-guided decoding: sample ``n`` candidate turns per prompt with ``base`` and keep the one whose
    resulting state the value head scores highest (ties: the first)."""

    def __init__(
        self, base: GenerationBackend, model: Any, value_head: nn.Linear, tokenizer: Any, *, n: int = 4
    ) -> None:
        if n < 1:
            raise ConfigError("n must be >= 1")
        self.base = check_backend(base)
        self.model, self.value_head, self.tokenizer, self.n = model, value_head, tokenizer, n
        self.provides_logprobs = base.provides_logprobs
        self.last_scores: list[list[float]] = []

    def describe(self) -> str:
        return f"value-guided decoding (best of {self.n}) over {self.base.describe()}"

    def close(self) -> None:
        self.base.close()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        repeated = [p for p in prompts for _ in range(self.n)]
        candidates = self.base.generate(repeated, sampling)
        scores = state_values(
            self.model,
            self.value_head,
            self.tokenizer,
            [list(p) + c.ids for p, c in zip(repeated, candidates)],
        ).view(len(prompts), self.n)
        self.last_scores = scores.tolist()
        best = scores.argmax(dim=1).tolist()
        return [candidates[i * self.n + b] for i, b in enumerate(best)]
