"""Hugging Face ``generate`` backend (CPU or GPU): batched, left-padded, stops on stop strings and EOS."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentr1_gym.generation import BaseGenerator, Generation, SamplingConfig

__all__ = ["HFGenerator", "end_of_turn_ids", "trim_generation"]


def trim_generation(ids: list[int], tokenizer: Any, eos_ids: set[int], stop_strings: Sequence[str]) -> int:
    """Length of the real generation: up to and including the first EOS or the token that completes a stop string.

    ``generate`` pads finished rows (with a pad id that may equal EOS), so the cut is recomputed from the tokens.
    """
    text = ""
    longest = max((len(s) for s in stop_strings), default=0)
    for i, tok in enumerate(ids):
        if tok in eos_ids:
            return i + 1
        if stop_strings:
            piece = tokenizer.decode([tok], skip_special_tokens=False)
            text = (text + piece)[-(longest + len(piece) + 8) :]
            if any(s in text for s in stop_strings):
                return i + 1
    return len(ids)


def end_of_turn_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end a turn: the tokenizer's EOS and the model's generation config's; a ``ValueError`` if the
    tokenizer has no pad token (batches are padded)."""
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token (tokenizer.pad_token = tokenizer.eos_token works)")
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id] + (extra if isinstance(extra, list) else [extra])
    return {i for i in ids if i is not None}


class HFGenerator(BaseGenerator):
    """Batched sampling with ``model.generate``.

    Args:
        model: a causal LM (a peft model works; the current adapter is used).
        tokenizer: its tokenizer (``pad_token`` must be set).
        batch_size: at most this many prompts per ``generate`` call.
    """

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_ids = end_of_turn_ids(model, tokenizer)

    def describe(self) -> str:
        return "Hugging Face generate"

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[start : start + self.batch_size], sampling))
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": sampling.do_sample,
            "pad_token_id": pad,
            "eos_token_id": sorted(self.eos_ids),
            "return_dict_in_generate": True,
            "output_scores": True,
        }
        if sampling.do_sample:
            kwargs.update(
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None
            )
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if sampling.stop_strings:
            kwargs.update(stop_strings=list(sampling.stop_strings), tokenizer=self.tokenizer)
        was_training = self.model.training
        self.model.eval()
        try:
            result = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        finally:
            if was_training:
                self.model.train()
        new = result.sequences[:, width:]
        scores = torch.stack(
            result.scores, dim=1
        ).float()  # (batch, new_tokens, vocab), after logits processors
        logps = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        gens = []
        for row, row_logps in zip(new.tolist(), logps.tolist()):
            n = trim_generation(row, self.tokenizer, self.eos_ids, sampling.stop_strings)
            gens.append(Generation(ids=row[:n], logprobs=row_logps[:n]))
        return gens
