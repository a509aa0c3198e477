"""Tiny, offline models for tests, examples and benchmarks: a byte-level BPE tokenizer trained locally on env
text, with a Qwen2.5-style chat template (TRL ships it as ``trl/chat_templates/qwen2_5.jinja``, which TRL's tool
parsing recognises), and a randomly initialised Qwen2-architecture model built from a config."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "MODEL_SHAPES",
    "THINK_DROPPING_TEMPLATE",
    "alternating_script",
    "corpus_for_tokenizer",
    "qwen25_chat_template",
    "record_rollouts",
    "shaped_model",
    "tiny_model",
    "tiny_tokenizer",
    "trainer_settings",
]

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: markup that gets one token each, as in Qwen2.5's vocabulary
MARKUP_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<tools>",
    "</tools>",
]


def qwen25_chat_template() -> str:
    """TRL's copy of the Qwen2.5 chat template (renders tools, tool calls and tool responses)."""
    return (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")


def corpus_for_tokenizer(
    env_ids: Iterable[str] = ("AgentR1/SyntheticMultihop-v0",), episodes: int = 50
) -> list[str]:
    """Text to train the tiny tokenizer on: prompts and oracle transcripts of the given envs, and the template."""
    import gymnasium as gym

    import agentr1_gym  # noqa: F401

    texts = [qwen25_chat_template()]
    for env_id in env_ids:
        env = gym.make(env_id).unwrapped
        for seed in range(episodes):
            obs, _ = env.reset(seed=seed)
            texts.append(obs)
            done = False
            while not done:
                action = env.oracle_action()
                obs, _, term, trunc, _ = env.step(action)
                texts += [action, obs]
                done = term or trunc
    return texts


@lru_cache(maxsize=4)
def tiny_tokenizer(
    vocab_size: int = 600, env_ids: tuple[str, ...] = ("AgentR1/SyntheticMultihop-v0",)
) -> Any:
    """A byte-level BPE tokenizer trained in about a second, wrapped as a ``PreTrainedTokenizerFast`` with the
    Qwen2.5 chat template, ``eos = <|im_end|>`` and ``pad = <|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_for_tokenizer(env_ids), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.add_tokens(MARKUP_TOKENS)
    fast.chat_template = qwen25_chat_template()
    fast.padding_side = "left"
    return fast


def tiny_model(tokenizer: Any, *, hidden_size: int = 16, layers: int = 2, seed: int = 0) -> Any:
    """A randomly initialised Qwen2 causal LM sized for the tokenizer (about 20k parameters by default)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


#: the published architectures of two real models, to build randomly initialised models of their shape (nothing
#: is downloaded): what the GPU tests and ``benchmarks/gpu_step.py`` run on. ``vocab_size`` is the model's;
#: :func:`shaped_model` may be given the test tokenizer's instead.
MODEL_SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(
        architecture="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, vocab_size=49152, rope_theta=100000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=8192,
    ),
    "qwen2.5-1.5b": dict(
        architecture="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
        num_attention_heads=12, num_key_value_heads=2, vocab_size=151936, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=32768,
    ),
}  # fmt: skip


def shaped_model(
    shape: str,
    tokenizer: Any,
    *,
    vocab_size: int | None = None,
    dtype: Any = None,
    device: Any = None,
    seed: int = 0,
) -> Any:
    """A randomly initialised causal LM of one of :data:`MODEL_SHAPES` (built on ``device``, in ``dtype``; default
    the CPU and float32). ``vocab_size`` defaults to the shape's own (the tokenizer's ids are all below it: ids
    above ``len(tokenizer)`` decode to nothing); pass ``len(tokenizer)`` for a model the size of the tests'."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if shape not in MODEL_SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; one of {sorted(MODEL_SHAPES)}")
    fields = dict(MODEL_SHAPES[shape])
    architecture = fields.pop("architecture")
    fields["vocab_size"] = int(vocab_size or fields["vocab_size"])
    config_cls, model_cls = (
        (LlamaConfig, LlamaForCausalLM) if architecture == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    )
    config = config_cls(
        **fields,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    with torch.device(device or "cpu"):
        model = model_cls(config)
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def alternating_script(prompt_ids: Any, i: int) -> str:
    """A :class:`~agentr1_trl.backends.ScriptedGenerator` script with reward variance inside a group: even live
    episodes answer at once (well formed, wrong: return 0), odd ones write junk (format penalties, below 0)."""
    return "<answer>Nobody</answer>" if i % 2 == 0 else "<think>I am not sure what to do</think>"


def record_rollouts(trainer: Any) -> list[Any]:
    """A list that collects every trajectory ``trainer`` rolls out from now on (for tests that inspect them)."""
    seen: list[Any] = []
    rollout = trainer.rollout

    def recording(seeds: list[int]) -> list[Any]:
        trajs = rollout(seeds)
        seen.extend(trajs)
        return trajs

    trainer.rollout = recording
    return seen


#: a chat template that renders every earlier assistant turn without its ``<think>`` block (as DeepSeek-R1-style
#: templates do): not prefix-stable, for tests of the per-turn path
THINK_DROPPING_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] }}"
    "{%- else %}{{ m.content }}{%- endif %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def trainer_settings(output_dir: Any = None, **overrides: Any) -> dict[str, Any]:
    """The trainer config the tests share: one or two steps of 4-episode groups on a CPU, a high learning rate
    (so that a step visibly changes a tiny model), no saving, 3-turn episodes; ``overrides`` win."""
    settings: dict[str, Any] = dict(
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=2,
        learning_rate=5e-2,
        logging_steps=1,
        report_to="none",
        max_new_tokens_per_turn=16,
        max_episode_tokens=1536,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
        env_kwargs={"max_turns": 3},
    )
    if output_dir is not None:
        settings["output_dir"] = str(output_dir)
    return {**settings, **overrides}
