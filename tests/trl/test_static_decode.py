"""The static-cache decoder (agentr1_trl.backends.static_decode) on the CPU: token-exact against step-by-step argmax
of the unmerged LoRA policy for the model families it supports, slots refilled as turns end, stop strings, the
sampler's log-probs, base weights restored bit for bit; the fused LoRA forward equal to peft's; padded update
widths; what the device defaults choose. The same decoder with CUDA graphs is tested on a GPU (test_gpu.py)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agentr1_trl.backends.factory import GenerationSettings, hf_generator  # noqa: E402
from agentr1_trl.backends.hf import HFGenerator  # noqa: E402
from agentr1_trl.backends.static_decode import StaticCacheGenerator, merged_lora  # noqa: E402
from agentr1_trl.forward import pad_width  # noqa: E402
from agentr1_trl.hardware import DeviceDefaults  # noqa: E402
from agentr1_trl.models import fuse_lora_forward  # noqa: E402
from agentr1_trl.testing import tiny_model, tiny_tokenizer  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402

from agentr1_gym.errors import ConfigError  # noqa: E402
from agentr1_gym.generation import SamplingConfig  # noqa: E402


def _llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def _policy(tok, family="qwen2"):
    model = tiny_model(tok, hidden_size=64, layers=2) if family == "qwen2" else _llama(tok)
    torch.manual_seed(1)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    return get_peft_model(model, lora).eval()


def _prompts(tok, n=11):
    return [
        tok.encode(f"Question {i}: who wrote {'the ' * i}book?", add_special_tokens=False) for i in range(n)
    ]


def _argmax(policy, prompt, steps):
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            seq.append(int(policy(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    return seq[len(prompt) :]


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_greedy_decoding_equals_step_by_step_argmax_through_refilled_slots(family):
    tok = tiny_tokenizer()
    policy = _policy(tok, family)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    prompts = _prompts(tok)  # 11 prompts of different lengths through 8 slots
    gen = StaticCacheGenerator(policy, tok, max_slots=8)
    out = gen.generate(prompts, SamplingConfig(max_new_tokens=10, temperature=0))
    assert [g.ids for g in out] == [_argmax(policy, p, 10) for p in prompts]
    # the log-probs are the unmerged policy's, as Hugging Face generate reports them
    ref = HFGenerator(policy, tok).generate(prompts, SamplingConfig(max_new_tokens=10, temperature=0))
    for g, r in zip(out, ref):
        assert g.ids == r.ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, r.logprobs)) < 1e-4
    assert (
        gen.stats["busy_slot_steps"] < gen.stats["slot_steps"]
    )  # slots idled after the 8 ended: then refilled
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert "static-cache" in gen.describe() and "LoRA merged" in gen.describe() and "eager" in gen.describe()


def test_turns_end_at_eos_and_stop_strings_and_free_their_slot():
    tok = tiny_tokenizer()
    policy = _policy(tok)
    prompts = _prompts(tok, 5)
    torch.manual_seed(3)
    free = StaticCacheGenerator(policy, tok).generate(prompts[:1], SamplingConfig(max_new_tokens=24))[0].ids
    texts = [tok.decode([t], skip_special_tokens=False) for t in free]
    k = next(i for i in range(3, len(free)) if texts[i].strip() and texts[i] not in "".join(texts[:i]))
    torch.manual_seed(3)
    stop = SamplingConfig(max_new_tokens=24, stop_strings=(texts[k],))
    cut = StaticCacheGenerator(policy, tok).generate(prompts[:1], stop)[0].ids
    assert cut == free[: k + 1]
    # an EOS ends a turn: a policy whose every token is EOS writes one token per prompt
    eos = tok.eos_token_id
    with torch.no_grad():
        policy.get_base_model().lm_head.weight.zero_()
        policy.get_base_model().model.embed_tokens.weight[eos] = 0  # tied: the lm_head is the embedding
    bias = torch.zeros(len(tok))
    bias[eos] = 10.0
    handle = policy.get_base_model().lm_head.register_forward_hook(lambda m, i, o: o + bias.to(o.dtype))
    try:
        out = StaticCacheGenerator(policy, tok, max_slots=2).generate(
            prompts, SamplingConfig(max_new_tokens=8)
        )
    finally:
        handle.remove()
    assert [g.ids for g in out] == [[eos]] * len(prompts)


def test_sampled_log_probs_are_the_samplers_after_temperature_top_k_and_top_p():
    tok = tiny_tokenizer()
    policy = _policy(tok)
    prompt = _prompts(tok, 1)[0]
    sampling = SamplingConfig(max_new_tokens=6, temperature=0.7, top_k=20, top_p=0.9)
    torch.manual_seed(0)
    g = StaticCacheGenerator(policy, tok).generate([prompt], sampling)[0]
    seq = list(prompt) + g.ids
    with torch.no_grad():
        logits = policy(input_ids=torch.tensor([seq])).logits[0, len(prompt) - 1 : -1].float() / 0.7
    for row, token, logp in zip(logits, g.ids, g.logprobs):
        kth = torch.topk(row, 20).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
        probs = row.softmax(-1)
        ordered, order = probs.sort(descending=True)
        keep = (ordered.cumsum(-1) - ordered) < 0.9  # the smallest set whose mass reaches top_p
        kept = torch.full_like(row, float("-inf"))
        kept[order[keep]] = row[order[keep]]
        assert torch.isfinite(kept[token])
        assert abs(torch.log_softmax(kept, -1)[token].item() - logp) < 1e-4


def test_merged_lora_restores_the_exact_base_weights_even_after_an_error():
    tok = tiny_tokenizer()
    policy = _policy(tok).to(torch.bfloat16)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    frozen = [p for n, p in policy.named_parameters() if "layers.0." in n and "lora_" in n]
    for p in frozen:  # as train_top_layers leaves a lower layer's adapter
        p.requires_grad_(False)
    x = torch.tensor([_prompts(tok, 1)[0]])
    with torch.no_grad():
        unmerged = policy(input_ids=x).logits.float()
        with merged_lora(policy) as n:
            assert n == 2 * 7
            merged = policy(input_ids=x).logits.float()
            assert not all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
        with pytest.raises(RuntimeError, match="boom"), merged_lora(policy):
            raise RuntimeError("boom")
    assert all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert (merged - unmerged).abs().max() < 0.1 * unmerged.abs().max()  # bf16 rounding, not another model
    assert policy.get_base_model().model.layers[0].self_attn.q_proj.disable_adapters is False
    assert frozen and not any(p.requires_grad for p in frozen)
    assert any(p.requires_grad for n, p in policy.named_parameters() if "layers.1." in n)


def test_hf_generator_chooses_static_decoding_on_gpus_and_for_supported_models_only():
    tok = tiny_tokenizer()
    policy = _policy(tok)
    assert isinstance(hf_generator(policy, tok, "auto"), HFGenerator)  # the CPU keeps generate by default
    assert isinstance(hf_generator(policy, tok, "static"), StaticCacheGenerator)
    gpt2 = copy.deepcopy(policy)
    gpt2.get_base_model().config.model_type = "gpt2"
    with pytest.raises(ConfigError, match="model type 'gpt2'"):
        hf_generator(gpt2, tok, "static")
    with pytest.raises(ConfigError, match="hf_decode"):
        GenerationSettings(hf_decode="fast")


def test_the_fused_lora_forward_equals_peft_and_keeps_float32_adapters():
    tok = tiny_tokenizer()
    plain = _policy(tok).train()
    fused = copy.deepcopy(plain)
    assert fuse_lora_forward(fused) == 2 * 7
    x = torch.randint(0, len(tok), (3, 20))
    a, b = plain(input_ids=x).logits, fused(input_ids=x).logits
    assert torch.allclose(a, b, atol=1e-6)
    a.square().mean().backward()
    b.square().mean().backward()
    for (name, p), q in zip(plain.named_parameters(), fused.parameters()):
        if p.grad is not None:
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7), name
            assert q.dtype == torch.float32
    with fused.disable_adapter():  # adapters switched off: peft's own forward, the base alone
        base = fused(input_ids=x).logits
    with plain.disable_adapter():
        assert torch.allclose(base, plain(input_ids=x).logits)


def test_update_widths_are_padded_to_a_multiple_with_masked_zeros():
    batch = {
        "prompt_ids": torch.ones(2, 5, dtype=torch.long),
        "prompt_mask": torch.ones(2, 5, dtype=torch.long),
        "completion_ids": torch.full((2, 7), 9),
        "completion_mask": torch.ones(2, 7),
        "advantages": torch.ones(2),
        "num_items_in_batch": 14,
    }
    out = pad_width(batch, 8)
    assert out["prompt_ids"].shape == (2, 5) and out["completion_ids"].shape == (2, 11)
    assert out["completion_mask"][:, 7:].sum() == 0 and torch.equal(
        out["completion_ids"][:, :7], batch["completion_ids"]
    )
    assert out["advantages"] is batch["advantages"] and out["num_items_in_batch"] == 14
    assert pad_width(batch, 1) is batch and pad_width(batch, 12) is batch  # 5 + 7 is already a multiple of 12


def test_the_device_decides_fused_lora_and_width_buckets():
    class Args:
        bf16 = False

    cpu = DeviceDefaults.resolve(Args(), device="cpu")
    gpu = DeviceDefaults.resolve(Args(), device="cuda")
    assert (cpu.fuse_lora, cpu.width_multiple) == (False, 1)
    assert (gpu.fuse_lora, gpu.width_multiple) == (True, 64)
    Args.fuse_lora, Args.update_width_multiple = True, 32
    assert (
        DeviceDefaults.resolve(Args(), device="cpu").fuse_lora,
        DeviceDefaults.resolve(Args(), device="cpu").width_multiple,
    ) == (True, 32)


def test_a_float32_policy_under_bf16_autocast_and_a_fused_bf16_base_decode():
    """Two cases first met on a GPU: the trainer's autocast makes bf16 keys from a float32 model (the cache takes
    the keys' dtype), and ``generate`` runs the fused forward over a bf16 base without autocast (the float32
    adapter is cast to the input's dtype)."""
    from agentr1_trl.models import bf16_frozen_base

    tok = tiny_tokenizer()
    prompts = _prompts(tok, 3)
    sampling = SamplingConfig(max_new_tokens=6, temperature=0)
    policy = _policy(tok)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = StaticCacheGenerator(policy, tok).generate(prompts, sampling)
    assert [len(g.ids) for g in out] == [6, 6, 6]
    fused = _policy(tok).train()
    bf16_frozen_base(fused)
    fuse_lora_forward(fused)
    gen = HFGenerator(fused, tok).generate(prompts, sampling)
    static = StaticCacheGenerator(fused, tok).generate(prompts, sampling)
    assert [len(g.ids) for g in gen] == [6, 6, 6] and [len(g.ids) for g in static] == [6, 6, 6]
