"""A supervised warm start on oracle demonstrations (for models that never produce a well-formed tool call).

:func:`oracle_samples` plays each env's ``oracle_action()`` through the same token-exact rollout code that RL uses,
so the demonstrations carry the same action masks; :func:`warm_start` minimises the masked negative log-likelihood
of the demonstrated turns (tool responses and template tokens carry no loss), updating whatever parameters are
trainable (with peft: the LoRA adapter only).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import agentr1_gym
from agentr1_gym.errors import ConfigError, NoOracleError
from agentr1_gym.generation import SamplingConfig
from agentr1_gym.rollout import Sample, collect_rollouts
from agentr1_trl.backends import ScriptedGenerator
from agentr1_trl.causal_rows import causal_rows
from agentr1_trl.forward import projected_logps, sequence_states
from agentr1_trl.hardware import stores_base_in_bf16
from agentr1_trl.models import bf16_frozen_base

__all__ = [
    "WARM_START_EPOCHS",
    "WARM_START_LR",
    "WARM_START_SEED",
    "oracle_samples",
    "oracle_warm_start",
    "turn_lengths",
    "warm_start",
]

WARM_START_EPOCHS = 3
#: the warm start's learning rate (fixed: a stronger fit leaves RL nothing to learn on the 1-hop task, a weaker
#: one leaves the format broken)
WARM_START_LR = 2e-4
WARM_START_SEED = 200_000


def turn_lengths(samples: Sequence[Sample]) -> list[int]:
    """The token count of every demonstrated turn (each run of action tokens in a sample's mask)."""
    out: list[int] = []
    for s in samples:
        run = 0
        for m in (*s.action_mask, 0):
            if m:
                run += 1
            elif run:
                out.append(run)
                run = 0
    return out


def oracle_samples(
    env_id: str,
    seeds: Sequence[int],
    tokenizer: Any,
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_episode_tokens: int = 8192,
) -> list[Sample]:
    """One training sample per oracle episode (per turn for templates that are not prefix-stable). A turn that does
    not end with a stop string (a plain-text reply that ends a user turn, as BFCL's "Done.") ends with EOS, as a
    sampler ends it, so the warm start teaches the model to end such a turn."""
    envs = [agentr1_gym.make(env_id, **(env_kwargs or {})) for _ in seeds]
    trajs = collect_rollouts(
        envs,
        ScriptedGenerator.oracle(tokenizer, envs),
        tokenizer,
        seeds=list(seeds),
        sampling=SamplingConfig(max_new_tokens=4096),
        max_episode_tokens=max_episode_tokens,
    )
    samples = [s for t in trajs for s in t.samples() if any(s.action_mask)]
    if not samples:
        longest = max(len(t.prompt_ids) for t in trajs)
        raise ConfigError(
            f"no oracle transcript of {env_id} fits max_episode_tokens={max_episode_tokens} (a first prompt is "
            f"{longest} tokens): nothing to warm-start on; raise max_episode_tokens"
        )
    return samples


def warm_start(
    model: Any,
    tokenizer: Any,
    samples: Sequence[Sample],
    *,
    epochs: int = 2,
    lr: float = 2e-4,
    batch_size: int = 4,
    micro_batch_size: int | None = None,
    seed: int = 0,
    progress: bool = True,
    bf16: bool = False,
    bf16_base: bool | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 10,
) -> list[float]:
    """Masked-NLL training on the samples; returns the mean loss of each epoch.

    Each optimizer step sees ``batch_size`` samples; ``micro_batch_size`` splits its forward/backward passes
    (gradient accumulation, weighted by assistant tokens so the step is the same) to bound memory on long
    transcripts. ``bf16``: forward passes under bf16 autocast (the adapter and the optimizer stay float32), as the
    RL update runs where :func:`agentr1_trl.hardware.update_precision` chooses it. ``bf16_base``: with ``bf16``,
    the frozen base's weights stored in bf16, in place (:func:`agentr1_trl.models.bf16_frozen_base`); None (the
    default): on a CPU, as the RL trainer's ``bf16_base`` does.

    ``checkpoint``: a file the progress is saved to (atomically) every ``checkpoint_every`` optimizer steps and at
    the end: the trainable parameters, the optimizer's state, the epoch's sample order and position, the losses so
    far and the random states. Called again with that file (after a kill), the warm start resumes where it was
    saved and ends as an uninterrupted one would (tested); once finished, it loads the result and returns at once.
    A file made with other samples or settings is refused (ConfigError): delete it to start over.
    """
    from tqdm.auto import tqdm

    samples = [
        s for s in samples if any(s.action_mask)
    ]  # a sample without assistant tokens has no loss (NaN)
    if not samples:
        raise ValueError("no sample has assistant tokens to train on")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters (wrap it with peft or unfreeze some)")
    micro = max(1, min(micro_batch_size or batch_size, batch_size))
    optimizer = torch.optim.AdamW([p for _, p in named], lr=lr)
    device = next(model.parameters()).device
    if stores_base_in_bf16(bf16, bf16_base, device.type):
        bf16_frozen_base(model)
    pad = tokenizer.pad_token_id
    gen = torch.Generator().manual_seed(seed)
    model.train()
    history: list[float] = []
    steps_per_epoch = -(-len(samples) // batch_size)
    fingerprint = _fingerprint(samples, epochs, lr, batch_size, micro, seed, bf16)
    saved = _load_progress(checkpoint, fingerprint, named, optimizer, gen)
    first_epoch, resume_at, resume_order, resume_losses = 0, 0, None, []
    if saved is not None:
        history, first_epoch = saved["history"], saved["epoch"]
        resume_at, resume_order, resume_losses = saved["position"], saved["order"], saved["losses"]
    done = first_epoch * steps_per_epoch + -(-resume_at // batch_size)
    bar = tqdm(
        total=epochs * steps_per_epoch, initial=done, desc="warm start", unit="step", disable=not progress
    )
    for epoch in range(first_epoch, epochs):
        if resume_order is not None:
            order, losses, first = resume_order, resume_losses, resume_at
            resume_order = None
        else:
            order, losses, first = torch.randperm(len(samples), generator=gen).tolist(), [], 0
        for start in range(first, len(order), batch_size):
            batch = [samples[i] for i in order[start : start + batch_size]]
            total = sum(sum(s.action_mask) for s in batch) or 1
            optimizer.zero_grad()
            step_loss = 0.0
            for m in range(0, len(batch), micro):
                part = batch[m : m + micro]
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    nll = _masked_nll(model, part, pad, device)
                loss = nll.float() * (sum(sum(s.action_mask) for s in part) / total)
                loss.backward()
                step_loss += loss.item()
            optimizer.step()
            losses.append(step_loss)
            done += 1
            bar.update(1)
            bar.set_postfix(loss=f"{step_loss:.3f}")
            if checkpoint is not None and done % checkpoint_every == 0 and start + batch_size < len(order):
                _save_progress(checkpoint, fingerprint, named, optimizer, gen, history=history, epoch=epoch,
                               position=start + batch_size, order=order, losses=losses)  # fmt: skip
        history.append(sum(losses) / len(losses))
    if checkpoint is not None and (saved is None or saved["epoch"] < epochs):
        _save_progress(checkpoint, fingerprint, named, optimizer, gen, history=history, epoch=epochs, position=0,
                       order=None, losses=[])  # fmt: skip
    bar.close()
    model.eval()
    return history


def _fingerprint(samples: Sequence[Sample], *settings: Any) -> str:
    """What a saved warm start must have been made with: the samples (their tokens and masks) and the settings."""
    digest = hashlib.sha256(repr(settings).encode())
    for s in samples:
        digest.update(repr((s.prompt_ids, s.completion_ids, s.action_mask)).encode())
    return digest.hexdigest()


def _save_progress(path: Any, fingerprint: str, named: list, optimizer: Any, gen: Any, **where: Any) -> None:
    state = {
        "fingerprint": fingerprint,
        "params": {n: p.detach().cpu().clone() for n, p in named},
        "optimizer": optimizer.state_dict(),
        "generator": gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        **where,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a kill mid-save leaves the previous file whole


def _load_progress(
    path: Any, fingerprint: str, named: list, optimizer: Any, gen: Any
) -> dict[str, Any] | None:
    """The saved progress (parameters, optimizer and random states restored), or None without a file."""
    if path is None or not Path(path).is_file():
        return None
    try:
        state = torch.load(path, weights_only=False)
    except Exception as exc:  # a truncated or foreign file: say which, do not train over it
        raise ConfigError(
            f"{path}: not a warm start's progress file ({exc}); delete it to start over"
        ) from None
    if state.get("fingerprint") != fingerprint:
        raise ConfigError(
            f"{path} is the progress of a warm start with other samples or settings; delete it to start over"
        )
    with torch.no_grad():
        for n, p in named:
            p.copy_(state["params"][n].to(p.device))
    optimizer.load_state_dict(state["optimizer"])
    gen.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    return state


def padded_rows(batch: Sequence[Sample], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of samples as right-padded rows: ``(input ids, attention mask, labels)``, each ``(rows, longest)``;
    the labels are the assistant's tokens (``action_mask``) at their positions and -100 elsewhere, as
    transformers' ``labels=`` loss reads them."""
    seqs = [s.prompt_ids + s.completion_ids for s in batch]
    width = max(len(x) for x in seqs)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    att = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, (s, seq) in enumerate(zip(batch, seqs)):
        ids[row, : len(seq)] = torch.tensor(seq)
        att[row, : len(seq)] = 1
        comp = torch.tensor(s.completion_ids)
        mask = torch.tensor(s.action_mask, dtype=torch.bool)
        labels[row, len(s.prompt_ids) : len(seq)] = torch.where(mask, comp, torch.tensor(-100))
    return ids, att, labels


def _masked_nll(model: Any, batch: Sequence[Sample], pad: int, device: Any) -> torch.Tensor:
    """Mean NLL over the assistant tokens of a right-padded batch, as the model's own ``labels=`` loss computes it
    (tested), with the vocabulary projection only where a token is scored (:func:`~agentr1_trl.forward.
    projected_logps`): a transcript's tool outputs and prompt are most of its positions, and their
    ``(positions, vocabulary)`` logits and softmax cost as much as the transformer. Padding only follows each row's
    tokens, so the rows need no attention mask: they attend through the kernel's causal path
    (:mod:`agentr1_trl.causal_rows`)."""
    ids, att, labels = padded_rows(batch, pad)
    with causal_rows(model) as unmasked:
        mask = None if unmasked else att.to(device)
        states = sequence_states(model, ids.to(device), mask)
    # the state at position t predicts the token at t + 1
    targets = labels[:, 1:].to(device)
    scored = targets != -100
    if not bool(scored.any()):  # no assistant token: nothing to fit (a zero that still reaches the graph)
        return states.sum() * 0.0
    logps = projected_logps(states[:, :-1][scored], model.get_output_embeddings(), targets[scored])
    return -logps.mean()


def oracle_warm_start(
    model: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    episodes: int,
    *,
    epochs: int = WARM_START_EPOCHS,
    lr: float = WARM_START_LR,
    seed: int = WARM_START_SEED,
    progress: bool = True,
    bf16: bool = False,
    bf16_base: bool | None = None,
    max_new_tokens: int | None = None,
    checkpoint: str | os.PathLike | None = None,
) -> list[float]:
    """Fit ``model`` (a peft model: its adapter trains) to ``episodes`` oracle transcripts of the env (seeds
    ``seed``+, masked NLL, :mod:`agentr1_trl.sft`); the loss per epoch. A ConfigError for an env without an
    oracle. ``max_new_tokens``: the rollouts' turn limit; a warning names it when oracle turns are longer (the
    warm start would teach turns the rollouts cut off). ``checkpoint``: :func:`warm_start`'s progress file (a
    killed warm start called again resumes from it)."""
    try:
        samples = oracle_samples(env_id, range(seed, seed + episodes), tokenizer, env_kwargs=env_kwargs)
    except (AttributeError, NoOracleError) as exc:
        raise ConfigError(
            f"a warm start needs an env with oracle_action() ({exc}); use --warm-start 0"
        ) from None
    lengths = turn_lengths(samples)
    longer = [n for n in lengths if max_new_tokens is not None and n > max_new_tokens]
    if lengths and not longer:  # the figure to size max_new_tokens_per_turn by, said once per run
        print(f"warm start: {len(lengths)} oracle turns, the longest {max(lengths)} tokens", flush=True)
    if longer:  # the rollouts would cut these turns off: the warm start teaches what RL cannot sample
        print(
            f"warning: {len(longer)} of {len(lengths)} oracle turns are longer than max_new_tokens_per_turn="
            f"{max_new_tokens} (the longest {max(longer)} tokens): rollouts cut such turns off; raise "
            f"max_new_tokens_per_turn to at least {max(longer)}",
            flush=True,
        )
    return warm_start(
        model,
        tokenizer,
        samples,
        epochs=epochs,
        lr=lr,
        micro_batch_size=1,  # bounded memory on long transcripts (same step as the full batch)
        progress=progress,
        bf16=bf16,
        bf16_base=bf16_base,
        checkpoint=checkpoint,
    )
