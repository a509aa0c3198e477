"""The PPO critic's value head: a linear layer on the policy's last hidden state, its file in a checkpoint or
adapter directory, and the values it gives token sequences. PPO trains it (:class:`~agentr1_trl.ppo.AgentPPOTrainer`),
value-guided decoding reads it (:class:`~agentr1_trl.backends.ValueGuidedGenerator`), and
:func:`~agentr1_trl.models.load_policy` loads it next to an adapter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentr1_trl.forward import sequence_states

__all__ = ["VALUE_HEAD_FILE", "load_value_head", "new_value_head", "state_values"]

#: the value head's file in a PPO checkpoint or adapter directory
VALUE_HEAD_FILE = "value_head.pt"


def new_value_head(model: Any) -> nn.Linear:
    """A fresh value head for ``model``: ``hidden_size -> 1``."""
    return nn.Linear(model.config.get_text_config().hidden_size, 1)


def load_value_head(directory: str | Path) -> nn.Linear | None:
    """The value head saved in ``directory`` (a PPO checkpoint or adapter), None if it holds none."""
    path = Path(directory) / VALUE_HEAD_FILE
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)  # a downloaded adapter runs no pickle
    head = nn.Linear(state["weight"].shape[1], 1)
    head.load_state_dict(state)
    return head


@torch.no_grad()
def state_values(
    model: Any, head: nn.Linear, tokenizer: Any, sequences: Sequence[Sequence[int]]
) -> torch.Tensor:
    """The value head's estimate for each token sequence (the state after its last token), left-padded."""
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id
    device = head.weight.device
    ids = torch.tensor([[pad] * (width - len(s)) + list(s) for s in sequences], device=device)
    att = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)
    last = sequence_states(model, ids, att)[:, -1]  # no logits: only the last state is read
    return head(last.to(head.weight.dtype)).squeeze(-1).float()
