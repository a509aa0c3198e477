"""Hugging Face models decoding from a static, slotted KV cache: the generation path of a policy without vLLM.

``model.generate`` pays, at every new token, for a dynamic cache that grows by concatenation, for the unmerged LoRA
adapters of every adapted layer (a peft layer runs its base product, then casts and runs two more products), for
logits processors and stopping criteria in Python, and for a kernel launch per operation. On a GPU that made a
1.5B-shaped policy generate 165 tokens/s on an H100 (``benchmarks/results/gpu_step.json``). This backend removes
each cost:

* **slots**: a fixed number of sequences decode together, each in its own row of a preallocated KV cache
  (``[slots, kv_heads, length, head_dim]`` per layer), each at its own position. A row that ends (EOS, a stop
  string, its token budget) frees its slot at once and the next waiting prompt is prefilled into it (*refill*):
  every prompt of a rollout turn goes through one loop, never more slots than there are prompts left;
* **LoRA merged for generation**: each adapted weight holds ``W + scale * B @ A`` while the loop runs, the adapters
  switched off; the exact base weights are copied back afterwards (restored bit for bit, never subtracted), so the
  update trains the unmerged adapters on the unchanged base;
* **grouped-query attention without copies**: one new token's query heads are grouped onto their key/value head
  (no ``repeat_kv`` of the whole cache at every step), masked by each slot's length;
* **CUDA graphs** (on a GPU): one decode step of all slots is captured once per (slots, length) bucket and replayed,
  so a step costs a graph launch instead of a thousand kernel launches. Slots and lengths are bucketed (multiples of
  8 slots, 256 positions) so that the shapes, and the graphs, repeat from call to call.

Greedy decoding is token-exact against step-by-step argmax of the unmerged policy in float32 (tests); log-probs
are the sampler's, after temperature, top-k and top-p, as :class:`~agentr1_trl.backends.hf.HFGenerator` returns
them. Model families with the standard attention (Llama, Qwen2/2.5/3, Mistral) decode this way;
:func:`supports_static_decoding` says which, and :func:`~agentr1_trl.backends.factory.make_generator` falls back to
``generate`` for the others.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import BaseGenerator, Generation, SamplingConfig
from agentr1_trl.backends.hf import end_of_turn_ids

__all__ = ["StaticCacheGenerator", "merged_lora", "supports_static_decoding"]

logger = logging.getLogger(__name__)

#: model types whose attention is the standard one this backend reproduces (scaled dot product over RoPE'd keys,
#: grouped heads, no soft-capping, sinks or sliding windows)
SUPPORTED_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})
ATTENTION_NAME = "agentr1_slots"
SLOT_BUCKET = 8
LENGTH_BUCKET = 256


def _base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports_static_decoding(model: Any) -> str | None:
    """None when ``model`` can decode from the slotted cache, else the reason it cannot (for logs)."""
    config = getattr(_base_model(model), "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        return f"model type {kind!r} is not one of {sorted(SUPPORTED_MODEL_TYPES)}"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "sliding-window attention"
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or [])):
        return "layers other than full attention"
    for module in model.modules():
        if any(getattr(module, "use_dora", {}).values()):
            return "DoRA adapters (their merge is not a weight sum)"
    return None


# ---- LoRA merged for generation -------------------------------------------------------------------------------
def _lora_layers(model: Any) -> list[tuple[Any, list[str]]]:
    layers = []
    for module in model.modules():
        if not (
            hasattr(module, "lora_A")
            and hasattr(module, "get_delta_weight")
            and hasattr(module, "base_layer")
        ):
            continue
        names = [n for n in getattr(module, "active_adapters", []) if n in module.lora_A]
        if names and not getattr(module, "merged", False):
            layers.append((module, names))
    return layers


@contextlib.contextmanager
def merged_lora(model: Any, saved: dict[int, torch.Tensor] | None = None) -> Iterator[int]:
    """While the block runs, every active LoRA adapter of ``model`` (a peft model) is merged into its base weight
    and the adapters are switched off, so a forward pass is the base layers' alone; afterwards each base weight is
    copied back from a saved copy, bit for bit. ``saved`` (by ``id`` of the weight) keeps the copies' buffers from
    call to call. Yields the number of merged layers (0 for a model without adapters: nothing changes)."""
    layers = _lora_layers(model)
    if not layers:
        yield 0
        return
    saved = {} if saved is None else saved
    weights = []
    # peft's switch marks every active adapter trainable again when it switches them back on: the flags are
    # restored as they were (adapters frozen by train_top_layers stay frozen)
    trainable = [(p, p.requires_grad) for p in model.parameters()]
    with torch.no_grad():
        try:
            for module, names in layers:
                weight = module.get_base_layer().weight
                copy = saved.get(id(weight))
                if copy is None or copy.shape != weight.shape or copy.dtype != weight.dtype:
                    copy = saved[id(weight)] = torch.empty_like(weight)
                copy.copy_(weight)
                weights.append((weight, copy))
                delta = sum(module.get_delta_weight(n).float() for n in names)
                weight.copy_((weight.float() + delta).to(weight.dtype))
            with model.disable_adapter():
                yield len(layers)
        finally:
            for weight, copy in weights:
                weight.copy_(copy)
            for param, flag in trainable:
                param.requires_grad_(flag)


# ---- attention over the slotted cache -------------------------------------------------------------------------
def _slot_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """One new token per slot against its whole cache row: the query heads of a key/value head are grouped onto
    it (no repeated keys), ``attention_mask`` is ``[slots, 1, 1, length]`` (True: attend). A prefill (several
    query positions) goes to PyTorch's SDPA as Hugging Face runs it."""
    if query.shape[2] != 1:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout
        )
    slots, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = scaling if scaling is not None else dim**-0.5
    q = query.reshape(slots, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # [slots, kv_heads, group, length]
    scores = scores.masked_fill(~attention_mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [slots, kv_heads, group, dim]
    return out.reshape(slots, heads, 1, dim).transpose(1, 2), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    if ATTENTION_NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION_NAME, _slot_attention)


class _SlotCache:
    """The KV cache of ``slots`` sequences, ``length`` positions each. ``prefill_rows`` set: a forward of those
    slots' right-padded prompts writes positions [0, T) of their rows and attends among them; else a decode step
    writes one token per slot at ``pos[slot]`` and attends over the whole row (the mask says which positions
    hold tokens)."""

    def __init__(self, layers: int, slots: int, kv_heads: int, length: int, dim: int, device) -> None:
        self.shape, self.device, self.layers = (slots, kv_heads, length, dim), device, layers
        # allocated at the first forward pass, in the dtype the keys come in (a float32 model under bf16 autocast
        # makes bf16 keys)
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows = torch.arange(slots, device=device)
        self.pos = torch.zeros(slots, dtype=torch.long, device=device)
        self.prefill_rows: torch.Tensor | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if not self.keys:
            dtype = key_states.dtype
            self.keys = [torch.zeros(self.shape, dtype=dtype, device=self.device) for _ in range(self.layers)]
            self.values = [
                torch.zeros(self.shape, dtype=dtype, device=self.device) for _ in range(self.layers)
            ]
        dtype = self.keys[layer_idx].dtype
        key_states, value_states = key_states.to(dtype), value_states.to(dtype)
        if self.prefill_rows is not None:
            width = key_states.shape[2]
            self.keys[layer_idx][:, :, :width].index_copy_(0, self.prefill_rows, key_states)
            self.values[layer_idx][:, :, :width].index_copy_(0, self.prefill_rows, value_states)
            return key_states, value_states
        self.keys[layer_idx][self.rows, :, self.pos] = key_states[:, :, 0]
        self.values[layer_idx][self.rows, :, self.pos] = value_states[:, :, 0]
        return self.keys[layer_idx], self.values[layer_idx]


@contextlib.contextmanager
def _attention_implementation(model: Any, name: str) -> Iterator[None]:
    config = _base_model(model).config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


# ---- one decoder state per (slots, length) bucket -------------------------------------------------------------
@dataclass
class _Decoder:
    slots: int
    length: int
    cache: _SlotCache
    ids: torch.Tensor  # [slots, 1]: each slot's last token
    positions: torch.Tensor = field(init=False)
    graph: Any = None
    logits: torch.Tensor | None = None  # the graph's output buffer

    def __post_init__(self) -> None:
        self.positions = torch.arange(self.length, device=self.ids.device)

    def mask(self) -> torch.Tensor:
        return (self.positions[None, :] <= self.cache.pos[:, None])[:, None, None, :]


class StaticCacheGenerator(BaseGenerator):
    """Batched decoding of a Hugging Face causal LM (or a peft model over one) from a slotted static KV cache,
    LoRA merged for the loop, CUDA graphs on a GPU. See the module's docstring for what each part saves.

    Args:
        model: the policy (``model.config.model_type`` one of :data:`SUPPORTED_MODEL_TYPES`).
        tokenizer: its tokenizer (``pad_token`` must be set).
        max_slots: at most this many sequences decode at once; more prompts wait and refill freed slots.
        cuda_graphs: capture the decode step as a CUDA graph (``"auto"``: on a CUDA device; ``"off"``; ``"on"``).
        prefill_tokens: at most this many (padded) prompt tokens per prefill forward pass.
        merge_lora: merge LoRA adapters into the weights for the loop (restored exactly afterwards).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_slots: int = 64,
        cuda_graphs: str = "auto",
        prefill_tokens: int = 16384,
        merge_lora: bool = True,
    ) -> None:
        reason = supports_static_decoding(model)
        if reason is not None:
            raise ConfigError(
                f"static-cache decoding does not support this model ({reason}): use hf_decode='generate'"
            )
        if cuda_graphs not in {"auto", "on", "off"}:
            raise ConfigError(f"cuda_graphs must be 'auto', 'on' or 'off', got {cuda_graphs!r}")
        if max_slots < 1 or prefill_tokens < 1:
            raise ConfigError(
                f"need max_slots >= 1 and prefill_tokens >= 1, got {max_slots}, {prefill_tokens}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_slots = max_slots
        self.prefill_tokens = prefill_tokens
        self.merge_lora = merge_lora
        self.cuda_graphs = cuda_graphs
        self.eos_ids = end_of_turn_ids(model, tokenizer)  # a ValueError without a pad token
        self._decoders: dict[tuple[int, int], _Decoder] = {}
        self._saved: dict[int, torch.Tensor] = {}
        self._graph_pool = None
        self._graph_failed: str | None = None
        self.stats = {
            "prefill_s": 0.0,
            "decode_steps": 0,
            "graph_captures": 0,
            "slot_steps": 0,
            "busy_slot_steps": 0,
        }
        _register_attention()

    # ---- description --------------------------------------------------------------------------------------
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _graphs_on(self) -> bool:
        if self._graph_failed is not None or self.cuda_graphs == "off":
            return False
        return self._device().type == "cuda"

    def describe(self) -> str:
        merged = "LoRA merged" if self.merge_lora and _lora_layers(self.model) else "weights as they are"
        graphs = "CUDA graphs" if self._graphs_on() else "eager"
        if self._graph_failed:
            graphs += f" (graph capture failed: {self._graph_failed})"
        return f"Hugging Face model, static-cache decoding (up to {self.max_slots} slots, refilled; {merged}; {graphs})"

    def close(self) -> None:
        self._decoders.clear()
        self._saved.clear()
        self._graph_pool = None

    # ---- generation ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        need = max(len(p) for p in prompts) + sampling.max_new_tokens
        length = _bucket(need, LENGTH_BUCKET)
        slots = min(_bucket(len(prompts), SLOT_BUCKET), _bucket(self.max_slots, SLOT_BUCKET))
        was_training = self.model.training
        self.model.eval()
        merge = merged_lora(self.model, self._saved) if self.merge_lora else contextlib.nullcontext(0)
        try:
            with merge, _attention_implementation(self.model, ATTENTION_NAME):
                decoder = self._decoder(slots, length)
                return self._run(decoder, prompts, sampling)
        finally:
            if was_training:
                self.model.train()

    def _decoder(self, slots: int, length: int) -> _Decoder:
        # a decoder of more slots or positions serves too; keep at most two (each holds a whole KV cache)
        for (s, n), dec in self._decoders.items():
            if s == slots and length <= n < 2 * length:
                return dec
        while len(self._decoders) >= 2:
            self._decoders.pop(next(iter(self._decoders)))
        config = _base_model(self.model).config
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        device = self._device()
        cache = _SlotCache(config.num_hidden_layers, slots, config.num_key_value_heads, length, dim, device)
        dec = _Decoder(slots, length, cache, torch.zeros(slots, 1, dtype=torch.long, device=device))
        if self._graphs_on():
            self._capture(dec)
        self._decoders[(slots, length)] = dec
        return dec

    def _forward_step(self, dec: _Decoder) -> torch.Tensor:
        out = self.model(
            input_ids=dec.ids,
            position_ids=dec.cache.pos[:, None],
            attention_mask=dec.mask(),
            past_key_values=dec.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def _capture(self, dec: _Decoder) -> None:
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._forward_step(dec)
            torch.cuda.current_stream().wait_stream(stream)
            if self._graph_pool is None:
                self._graph_pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pool):
                dec.logits = self._forward_step(dec)
            dec.graph = graph
            self.stats["graph_captures"] += 1
        except (
            Exception
        ) as exc:  # a model whose forward cannot be captured decodes eagerly, said in describe()
            self._graph_failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            logger.warning("CUDA graph capture failed, decoding eagerly: %s", self._graph_failed)
            dec.graph = None
            torch.cuda.synchronize()

    def _decode(self, dec: _Decoder) -> torch.Tensor:
        if dec.graph is not None:
            dec.graph.replay()
            return dec.logits
        return self._forward_step(dec)

    def _prefill(self, dec: _Decoder, slots: list[int], prompts: list[Sequence[int]]) -> torch.Tensor:
        """Write each prompt into its slot's cache row; the logits at each prompt's last token, [n, vocab]."""
        device = dec.ids.device
        out = []
        start = 0
        while start < len(prompts):  # chunks of at most prefill_tokens padded tokens
            width = len(prompts[start])
            end = start + 1
            while end < len(prompts):
                w = max(width, len(prompts[end]))
                if w * (end + 1 - start) > self.prefill_tokens:
                    break
                width, end = w, end + 1
            chunk = prompts[start:end]
            lengths = torch.tensor([len(p) for p in chunk], device=device)
            pad = self.tokenizer.pad_token_id
            ids = torch.tensor([list(p) + [pad] * (width - len(p)) for p in chunk], device=device)
            positions = torch.arange(width, device=device)
            valid = positions[None, :] < lengths[:, None]
            mask = (positions[None, :, None] >= positions[None, None, :]) & valid[
                :, None, :
            ]  # [n, T(q), T(k)]
            mask = mask | torch.eye(width, dtype=torch.bool, device=device)[None]  # pads attend to themselves
            dec.cache.prefill_rows = torch.tensor(slots[start:end], device=device)
            try:
                logits = self.model(
                    input_ids=ids,
                    position_ids=positions[None, :].expand(len(chunk), -1),
                    attention_mask=mask[:, None],
                    past_key_values=dec.cache,
                    use_cache=True,
                ).logits
            finally:
                dec.cache.prefill_rows = None
            out.append(logits[torch.arange(len(chunk), device=device), lengths - 1])
            start = end
        return torch.cat(out)

    def _run(
        self, dec: _Decoder, prompts: Sequence[Sequence[int]], sampling: SamplingConfig
    ) -> list[Generation]:
        waiting = deque(range(len(prompts)))
        slot_of: list[int | None] = [None] * dec.slots  # prompt index per slot
        ids: list[list[int]] = [[] for _ in prompts]
        logps: list[list[float]] = [[] for _ in prompts]
        texts = [""] * len(prompts)
        pos = [0] * dec.slots
        stop_keep = max((len(s) for s in sampling.stop_strings), default=0)
        eos = self.eos_ids

        def accept(slot: int, token: int, logp: float) -> bool:
            """Record a token for the slot's prompt; True when that prompt's turn has ended."""
            i = slot_of[slot]
            ids[i].append(token)
            logps[i].append(logp)
            if token in eos or len(ids[i]) >= sampling.max_new_tokens:
                return True
            if sampling.stop_strings:
                piece = self.tokenizer.decode([token], skip_special_tokens=False)
                texts[i] = (texts[i] + piece)[-(stop_keep + len(piece) + 8) :]
                return any(s in texts[i] for s in sampling.stop_strings)
            return False

        while waiting or any(s is not None for s in slot_of):
            free = [s for s in range(dec.slots) if slot_of[s] is None]
            if waiting and free:
                start = time.perf_counter()
                take = free[: len(waiting)]
                chosen = [waiting.popleft() for _ in take]
                for s, i in zip(take, chosen):
                    slot_of[s] = i
                logits = self._prefill(dec, take, [prompts[i] for i in chosen])
                tokens, token_logps = _sample(logits, sampling)
                for s, i, t, lp in zip(take, chosen, tokens.tolist(), token_logps.tolist()):
                    pos[s] = len(prompts[i])
                    if accept(s, t, lp):
                        slot_of[s] = None
                self.stats["prefill_s"] += time.perf_counter() - start
                continue  # freed slots refill before the next decode step
            busy = [s for s in range(dec.slots) if slot_of[s] is not None]
            last = [ids[slot_of[s]][-1] if slot_of[s] is not None else 0 for s in range(dec.slots)]
            dec.ids.copy_(torch.tensor(last, device=dec.ids.device)[:, None])
            dec.cache.pos.copy_(torch.tensor(pos, device=dec.ids.device))
            logits = self._decode(dec)
            tokens, token_logps = _sample(logits, sampling)
            tokens, token_logps = tokens.tolist(), token_logps.tolist()
            self.stats["decode_steps"] += 1
            self.stats["slot_steps"] += dec.slots
            self.stats["busy_slot_steps"] += len(busy)
            for s in busy:
                pos[s] += 1
                if accept(s, tokens[s], token_logps[s]):
                    slot_of[s] = None
        return [Generation(ids=ids[i], logprobs=logps[i]) for i in range(len(prompts))]


def _bucket(n: int, step: int) -> int:
    return max(step, math.ceil(n / step) * step)


def _sample(logits: torch.Tensor, sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of each row and its log-probability under the distribution it was drawn from (greedy: the
    raw logits'; sampled: after temperature, top-k and top-p, in Hugging Face's order)."""
    scores = logits.float()
    if not sampling.do_sample:
        tokens = scores.argmax(-1)
    else:
        scores = scores / max(sampling.temperature, 1e-6)
        if sampling.top_k and sampling.top_k < scores.shape[-1]:
            kth = torch.topk(scores, sampling.top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if sampling.top_p < 1.0:
            ordered, order = torch.sort(scores, descending=False, dim=-1)
            cumulative = ordered.softmax(-1).cumsum(-1)
            drop = cumulative <= (1 - sampling.top_p)
            drop[:, -1] = False  # the most likely token always stays
            scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
        tokens = torch.multinomial(scores.softmax(-1), 1)[:, 0]
    logp = torch.log_softmax(scores, dim=-1).gather(-1, tokens[:, None])[:, 0]
    return tokens, logp
