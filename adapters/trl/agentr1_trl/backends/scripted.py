"""A backend that replays scripted turns (for tests, demonstrations and benchmarks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import BaseGenerator, Generation, SamplingConfig

__all__ = ["ScriptedGenerator"]


class ScriptedGenerator(BaseGenerator):
    """Answers the ``i``-th prompt of each call with ``script(prompt_ids, i) -> text``, tokenised without special
    tokens. ``add_eos=True`` appends EOS to every turn; ``add_eos="unless_stopped"`` only to a turn that does not end
    with one of the sampling's stop strings, as a sampler ends a turn (it stops at a stop string without EOS, or ends
    the turn with EOS), so a warm start on such turns teaches the model to end a plain-text reply. Log-probs are 0
    and not a sampler's (``provides_logprobs = False``: the trainers then skip the importance-sampling correction).
    It records every generation it returned in ``history``."""

    provides_logprobs = False

    def __init__(
        self,
        tokenizer: Any,
        script: Callable[[Sequence[int], int], str],
        *,
        add_eos: bool | Literal["unless_stopped"] = False,
    ) -> None:
        if add_eos not in (True, False, "unless_stopped"):
            raise ConfigError(f'add_eos must be True, False or "unless_stopped", got {add_eos!r}')
        self.tokenizer = tokenizer
        self.script = script
        self.add_eos = add_eos
        self.history: list[list[int]] = []

    def describe(self) -> str:
        return "scripted (test) generator"

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        out = []
        for i, p in enumerate(prompts):
            text = self.script(p, i)
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: sampling.max_new_tokens]
            eos = self.add_eos is True or (
                self.add_eos == "unless_stopped" and not text.rstrip().endswith(tuple(sampling.stop_strings))
            )
            if eos and len(ids) < sampling.max_new_tokens:
                ids.append(self.tokenizer.eos_token_id)
            self.history.append(list(ids))
            out.append(Generation(ids=list(ids)))
        return out

    @classmethod
    def oracle(cls, tokenizer: Any, envs: Sequence[Any]) -> ScriptedGenerator:
        """Plays each env's ``oracle_action()``: the ``i``-th prompt of a call belongs to the ``i``-th env whose
        episode is still running (the order :func:`~agentr1_gym.rollout.collect_rollouts` uses), and ends a turn
        as a sampler would (``add_eos="unless_stopped"``)."""

        def script(prompt_ids: Sequence[int], i: int) -> str:
            live = [e for e in envs if not e.unwrapped.done]
            return live[i].unwrapped.oracle_action()

        return cls(tokenizer, script, add_eos="unless_stopped")
