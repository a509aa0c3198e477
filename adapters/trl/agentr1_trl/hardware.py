"""What this machine computes fast, for the choices that follow the hardware: the update's precision and the
vLLM engine's dtype; and :class:`DeviceDefaults`, every setting whose default follows the device and the process
count, resolved once when a trainer starts.

On a CPU, bfloat16 pays only where the CPU computes it natively (AVX512-BF16, AMX), and there only where its matrix
products are fast enough to cover what bf16 adds. The flags alone do not say which, so :func:`update_precision`
measures it: the same matrix product (the shape of a SmolLM2-135M MLP over 1,024 tokens) in float32 and in
bfloat16, with the threads torch uses, about 0.2 s once per process. What bf16 adds depends on where the frozen base
lives, so there are two thresholds:

* the base stored in bf16 (``bf16_base``, the default with bf16 on a CPU): no weight is cast, only the LoRA
  adapter, its gradients and the optimizer state stay float32. Chosen where bf16 products are at least
  :data:`BF16_BASE_MIN_SPEEDUP` times float32's. On the slowest native-bf16 CPU this project has measured, a 2-core
  AMD EPYC with AVX512-BF16 whose products measured 2.1-2.3x float32's, this update ran 1.73-1.82x float32's
  tokens per second in the four learning worlds, in 25-29% less memory
  (``benchmarks/results/step_cost_bf16_base_slow.json``), and the whole main job took 8.4 and 10.4 minutes against
  11.0 and 12.2 in float32 at two seeds, learning less at one of them (held-out 0.31 against 0.55; every run over
  2x its start; ``main_job_bf16_base_slow.json``); on EPYCs of the same flags whose products measure 4.1-4.5x it ran
  1.85-2.21x (``step_cost_avx512.json``) and learned more than float32 at two seeds of three and as much at the
  third (``main_job_avx512.json``); on a Xeon with AMX (products 7x) 1.53-2.45x (``step_cost_amx.json``);
* bf16 autocast over float32 weights (``bf16_base=False``): every product casts its weight, so it needs products
  at least :data:`BF16_MIN_SPEEDUP` times faster. On the EPYC whose products measured 2.1-2.3x, the main job's update
  under autocast took 7.5-7.9 s a step against 7.7-7.9 s in float32 (seeds 1 and 2;
  ``benchmarks/results/main_job_bf16.json`` against ``main_job.json``) and used 0.5 GB more.

On an AVX2-only CPU bf16 is emulated and slower: float32 there, whatever the product measures.
"""

from __future__ import annotations

import functools
import platform
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BF16_BASE_MIN_SPEEDUP",
    "BF16_MIN_SPEEDUP",
    "CPU_UPDATE_TOKENS",
    "DeviceDefaults",
    "bf16_matmul_speedup",
    "cpu_has_native_bf16",
    "cpu_info",
    "stores_base_in_bf16",
    "update_precision",
]

#: a bf16 update with the frozen base stored in bf16 (the CPU default with bf16) is chosen on a CPU whose bf16 matrix
#: product is at least this much faster than float32's: at 2.1-2.3x (the slowest native-bf16 CPU measured) it ran
#: 1.73-1.82x float32's update; the margin below 2.1 keeps one machine's choice from flipping with the check's noise
BF16_BASE_MIN_SPEEDUP = 1.5
#: bf16 autocast over float32 weights (``bf16_base=False``) is chosen on a CPU whose bf16 matrix product is at least
#: this much faster than float32's: at 2.2x (AVX512-BF16 here) the main job's update step gained nothing, the casts
#: autocast adds eating the products' gain
BF16_MIN_SPEEDUP = 3.0


def cpu_info(cpuinfo: str | None = None) -> tuple[str, frozenset[str]]:
    """The CPU's model name and its flags (Linux's ``/proc/cpuinfo``; elsewhere the platform's name, no flags)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            return platform.processor() or platform.machine(), frozenset()
    lines = cpuinfo.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    flags = frozenset(w for ln in lines if ln.startswith("flags") for w in ln.split(":", 1)[-1].split())
    return model or platform.machine(), flags


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512-BF16 or AMX-BF16). Without either, bf16 matrix
    products are emulated: vLLM decoded SmolLM2-135M on a 2-core AVX2 CPU 3.1-3.9x slower in bfloat16 than in
    float32 (16-48 sequences; ``benchmarks/vllm_dtype.py``)."""
    return bool(cpu_info(cpuinfo)[1] & {"avx512_bf16", "amx_bf16"})


@functools.cache
def bf16_matmul_speedup(tokens: int = 1024, width: int = 576, inner: int = 1536, reps: int = 5) -> float:
    """float32 time / bfloat16 time of one ``(tokens, width) @ (width, inner)`` product on the CPU (the best of
    ``reps`` runs each, after a warm-up), with torch's current thread count. Measured once per process."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(tokens, width, generator=gen)
    b = torch.randn(width, inner, generator=gen)

    def best(x: torch.Tensor, y: torch.Tensor) -> float:
        torch.mm(x, y)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(x, y)
            times.append(time.perf_counter() - start)
        return min(times)

    return best(a, b) / max(best(a.bfloat16(), b.bfloat16()), 1e-9)


def update_precision(bf16_base: bool | None = None) -> tuple[bool, str]:
    """``(bf16, why)``: whether the update should run in bf16 on this machine, and the reason in a few words
    (printed when a run starts). On a GPU: whether it supports bf16. On a CPU: native bf16 and a measured product
    speed-up of at least :data:`BF16_BASE_MIN_SPEEDUP` where the frozen base would be stored in bf16
    (``bf16_base`` None or True: :func:`stores_base_in_bf16`), of :data:`BF16_MIN_SPEEDUP` where it would stay
    float32 under autocast (``bf16_base=False``)."""
    import torch

    if torch.cuda.is_available():
        ok = bool(torch.cuda.is_bf16_supported())
        return ok, "the GPU computes in bf16" if ok else "the GPU has no bf16"
    if not cpu_has_native_bf16():
        return False, "no native bf16 on this CPU (it would be emulated: slower)"
    speedup = bf16_matmul_speedup()
    needed = BF16_MIN_SPEEDUP if bf16_base is False else BF16_BASE_MIN_SPEEDUP
    if speedup >= needed:
        return True, f"native bf16, its products measured {speedup:.1f}x float32's here"
    return (
        False,
        f"native bf16, but its products measured only {speedup:.1f}x float32's here (below {needed}x)",
    )


#: ``max_update_tokens`` on a CPU by default. Measured against 4,096: the main job never reaches either (every
#: micro-batch one pass, benchmarks/results/main_job_passes.json); the shop's and Coin Collector's whole chats run
#: the same passes under both (context_update_passes.json); step rows peak far lower at 2,048 (the shop's
#: window:1 7.60 GB against 11.83, Coin Collector's window:2 over 50 turns 9.74 against 16.65) in 0.83x-1.03x the
#: update time (context_update.json)
CPU_UPDATE_TOKENS = 2048


def stores_base_in_bf16(bf16: bool, bf16_base: bool | None, device_type: str) -> bool:
    """Whether an update (or warm start) on ``device_type`` stores the frozen base in bf16: only with ``bf16``, and
    then ``bf16_base``, or where it is None, on a CPU (a GPU keeps autocast over float32 weights unless asked)."""
    return bool(bf16) and (device_type == "cpu" if bf16_base is None else bool(bf16_base))


@dataclass(frozen=True)
class DeviceDefaults:
    """The settings whose default (None) follows the device and the process count, decided once, when the trainer
    starts, in one place: the rule for each is written here and nowhere else.

    - ``bf16``: the update under bf16 (``bf16=None`` was resolved by :func:`update_precision` in the config);
    - ``bf16_base``: the frozen base stored in bf16 (:func:`stores_base_in_bf16`);
    - ``update_tokens``: the most tokens one forward/backward pass holds (``max_update_tokens``; None:
      :data:`CPU_UPDATE_TOKENS` on a CPU, 0 on a GPU); 0, one pass per micro-batch, wherever several processes
      (DDP syncs on every backward) or DeepSpeed (it scales and steps per backward) run the update;
    - ``share_prompts``: each shared prompt run once in the log-prob forward (``share_prompt_prefix``; None: on a
      CPU, where the saved tokens are saved time; the cached forward measured slower on a GPU), never with
      gradient checkpointing (it turns the KV cache off) or several processes (DDP wants one forward per
      backward);
    - ``fuse_lora``: each LoRA-adapted linear layer runs the fused forward
      (:func:`~agentr1_trl.models.fuse_lora_forward`; ``fuse_lora``; None: on a GPU, where peft's casts and
      elementwise passes were 39% of a LoRA update; on a 2-core AMX CPU it measured slower, 6.55 against 5.92 s a
      step, ``update_step_fused_lora_amx.json``);
    - ``width_multiple``: each forward/backward pass padded to a width that is a multiple of this
      (:func:`~agentr1_trl.forward.pad_width`; ``update_width_multiple``; None: 64 on a GPU, where a new shape
      costs its first pass seconds, 1 on a CPU, where padding is only more work).
    """

    device: str
    processes: int
    bf16: bool
    bf16_base: bool
    update_tokens: int
    share_prompts: bool
    fuse_lora: bool = False
    width_multiple: int = 1

    @classmethod
    def resolve(
        cls,
        args: Any,
        *,
        device: str,
        processes: int = 1,
        deepspeed: bool = False,
        checkpointing: bool = False,
    ) -> DeviceDefaults:
        """From a trainer config (``bf16``, ``bf16_base``, ``max_update_tokens``, ``share_prompt_prefix``; absent
        ones count as None) and what the accelerator says about the run."""
        bf16 = bool(getattr(args, "bf16", False))
        budget = getattr(args, "max_update_tokens", None)
        if processes > 1 or deepspeed:
            budget = 0
        elif budget is None:
            budget = CPU_UPDATE_TOKENS if device == "cpu" else 0
        share = getattr(args, "share_prompt_prefix", None)
        if share is None:
            share = device == "cpu"
        fuse = getattr(args, "fuse_lora", None)
        multiple = getattr(args, "update_width_multiple", None)
        return cls(
            device=device,
            processes=processes,
            bf16=bf16,
            bf16_base=stores_base_in_bf16(bf16, getattr(args, "bf16_base", None), device),
            update_tokens=int(budget),
            share_prompts=bool(share) and not checkpointing and processes == 1,
            fuse_lora=bool(device == "cuda" if fuse is None else fuse),
            width_multiple=int((64 if device == "cuda" else 1) if multiple is None else max(1, multiple)),
        )
