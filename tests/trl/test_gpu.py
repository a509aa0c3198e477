"""The trainers on a CUDA GPU (marked ``gpu``: run with ``pytest -m gpu tests/trl/test_gpu.py``; skipped without CUDA).

A SmolLM2-135M-shaped model with random weights and the tests' local tokenizer (its vocabulary, so that the model
is 135M-shaped in every layer but the embedding): a GRPO and a PPO step with LoRA in bfloat16, a full-parameter
step, the action and advantage masks, the GPU's float32 loss and gradients against the CPU's on one batch,
checkpoints saved on the GPU and resumed there and on the CPU, Hugging Face generation with LoRA, the KV cache and
stop strings, and the vLLM GPU engine where the ``vllm`` package is installed. ``scripts/gpu_run.sh`` runs this
file on a GPU machine (see the docs' GPU page)."""

from __future__ import annotations

import copy
import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from agentr1_trl import HFGenerator, SamplingConfig, ScriptedGenerator  # noqa: E402
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer  # noqa: E402
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer  # noqa: E402
from agentr1_trl.testing import (  # noqa: E402
    alternating_script,
    record_rollouts,
    shaped_model,
    tiny_tokenizer,
    trainer_settings,
)
from peft import LoraConfig, get_peft_model  # noqa: E402

SHAPE = "smollm2-135m"
LORA = dict(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


def _settings(tmp_path, *, gpu=True, bf16=True, **kw):
    return trainer_settings(
        tmp_path, **{"beta": 0.04, "use_cpu": not gpu, "bf16": bf16, "learning_rate": 1e-3, **kw}
    )


def _trainer(tmp_path, algo="grpo", *, lora=True, gpu=True, bf16=True, dtype=None, generator="script", **kw):
    tok = tiny_tokenizer()
    model = shaped_model(SHAPE, tok, vocab_size=len(tok), dtype=dtype, seed=0)
    cls, cfg = (AgentGRPOTrainer, AgentGRPOConfig) if algo == "grpo" else (AgentPPOTrainer, AgentPPOConfig)
    return cls(
        model,
        cfg(**_settings(tmp_path, gpu=gpu, bf16=bf16, **kw)),
        tok,
        peft_config=LoraConfig(**LORA) if lora else None,
        generator=ScriptedGenerator(tok, alternating_script) if generator == "script" else None,
    )


def _params(model, key=None, exclude=None):
    return {
        k: v.detach().float().cpu().clone()
        for k, v in model.named_parameters()
        if (key is None or key in k) and (exclude is None or exclude not in k)
    }


def _moved(before, after):
    return [k for k in before if not torch.equal(before[k], after[k])]


def _losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_lora_step_in_bf16_on_the_gpu(tmp_path, algo):
    trainer = _trainer(tmp_path, algo, dtype=torch.bfloat16, max_steps=1)
    assert trainer.accelerator.device.type == "cuda" and trainer.args.bf16
    lora, base = _params(trainer.model, "lora_"), _params(trainer.model, exclude="lora_")
    trainer.train()
    assert all(p.device.type == "cuda" for p in trainer.model.parameters())
    assert {
        p.dtype for n, p in trainer.model.named_parameters() if "lora_" not in n and "value_head" not in n
    } == {torch.bfloat16}
    assert len(_losses(trainer)) == 1 and math.isfinite(_losses(trainer)[0])
    assert _moved(lora, _params(trainer.model, "lora_")), "the LoRA weights must move"
    frozen = {k: v for k, v in base.items() if "value_head" not in k}
    assert not _moved(frozen, _params(trainer.model, exclude="lora_")), "the base weights must not move"
    if algo == "ppo":
        assert trainer.value_head.weight.device.type == "cuda"
        assert trainer.value_head.weight.abs().sum() > 0  # it starts at zero


def test_a_full_parameter_step_on_the_gpu(tmp_path):
    trainer = _trainer(tmp_path, lora=False, max_steps=1)
    before = _params(trainer.model)
    trainer.train()
    assert math.isfinite(_losses(trainer)[0])
    moved = _moved(before, _params(trainer.model))
    assert len(moved) > len(before) // 2, f"a full step moves most weights, moved {len(moved)}/{len(before)}"


def test_the_trainer_generates_on_the_gpu(tmp_path):
    """The default rollout engine without vLLM (the static-cache decoder, CUDA graphs) samples on the GPU inside a
    training step."""
    trainer = _trainer(tmp_path, dtype=torch.bfloat16, generator=None, generation_backend="hf", max_steps=1)
    seen = record_rollouts(trainer)
    trainer.train()
    assert "static-cache decoding" in trainer.describe_generation()
    assert "CUDA graphs" in trainer.describe_generation() and "failed" not in trainer.describe_generation()
    assert len(seen) == 4 and all(t.completion_ids for t in seen)
    assert all(len(t.logprobs) == len(t.completion_ids) for t in seen)
    assert math.isfinite(_losses(trainer)[0])


@pytest.mark.parametrize(
    "algo,extra",
    [("grpo", {}), ("grpo", {"advantage_estimator": "reinforce_pp"}), ("ppo", {})],
    ids=["grpo", "reinforce_pp", "ppo"],
)
def test_action_and_advantage_masks_hold_on_the_gpu(tmp_path, algo, extra):
    """What the CPU tests check, on the GPU: the loss's mask is the episodes' action mask (tool responses and
    template tokens out), no gradient reaches a log-prob outside it, and token-level advantages are zero there."""
    trainer = _trainer(tmp_path, algo, dtype=torch.bfloat16, max_steps=1, **extra)
    seen = record_rollouts(trainer)
    captured = []
    terms = trainer.policy_terms

    def capture(logps, mask, batch):
        logps.retain_grad()
        captured.append((logps, mask, batch))
        return terms(logps, mask, batch)

    trainer.policy_terms = capture
    trainer.train()
    logps, mask, batch = captured[0]
    assert mask.device.type == "cuda"
    completion = batch["completion_mask"].bool()
    assert bool((mask.bool() <= completion).all())
    assert int(mask.sum()) == sum(sum(t.action_mask) for t in seen)
    assert int(completion.sum()) > int(mask.sum()), "the episodes hold tool responses the mask leaves out"
    assert logps.grad is not None
    outside = ~mask.bool()
    assert float(logps.grad[outside].abs().max()) == 0.0
    assert float(logps.grad[mask.bool()].abs().max()) > 0.0
    advantages = batch["advantages"]
    if advantages.dim() == 2:  # token-level (reinforce_pp, PPO's GAE)
        assert float(advantages[outside & completion].abs().max()) == 0.0


def test_fp32_loss_and_gradients_on_the_gpu_match_the_cpu(tmp_path):
    trainer = _trainer(tmp_path, gpu=False, bf16=False, max_steps=1)
    batches = []
    compute = trainer._compute_loss

    def capture(model, inputs):
        batches.append({k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in inputs.items()})
        return compute(model, inputs)

    trainer._compute_loss = capture
    trainer.train()
    batch, model = batches[0], trainer.model
    results = []
    for device in ("cpu", "cuda"):
        model.to(device)
        model.zero_grad()
        moved = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in batch.items()}
        loss = trainer.loss(model, moved)
        loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((float(loss), grads))
    (cpu_loss, cpu_grads), (gpu_loss, gpu_grads) = results
    assert cpu_grads and cpu_grads.keys() == gpu_grads.keys()
    assert math.isclose(cpu_loss, gpu_loss, rel_tol=1e-4, abs_tol=1e-6), (cpu_loss, gpu_loss)
    for name, g in cpu_grads.items():
        assert torch.allclose(g, gpu_grads[name], rtol=1e-3, atol=1e-6), name


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_gpu_checkpoint_resumes_on_the_gpu_and_on_the_cpu(tmp_path, algo):
    keys = ("lora_", "value_head") if algo == "ppo" else ("lora_",)
    a = _trainer(tmp_path / "a", algo, bf16=False, save_strategy="steps", save_steps=1)
    a.train()
    checkpoint = str(tmp_path / "a" / "checkpoint-1")
    final = {key: _params(a.model, key) for key in keys}
    for gpu in (True, False):
        b = _trainer(tmp_path / f"b-{gpu}", algo, gpu=gpu, bf16=False)
        b.train(resume_from_checkpoint=checkpoint)
        assert b.state.global_step == 2
        assert next(b.model.parameters()).device.type == ("cuda" if gpu else "cpu")
        tol = 1e-5 if gpu else 1e-3  # the same kernels on the GPU; the CPU's differ in summation order
        for key in keys:
            got = _params(b.model, key)
            assert all(torch.allclose(final[key][k], got[k], atol=tol) for k in got), (key, gpu)


def _peft_policy(tok):
    model = shaped_model(SHAPE, tok, vocab_size=len(tok), seed=0).cuda()
    torch.manual_seed(1)
    peft = get_peft_model(model, LoraConfig(**LORA, init_lora_weights=False))
    peft.eval()
    return peft


def _prompt(tok):
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Question: who wrote it?"}], tokenize=False, add_generation_prompt=True
    )
    return tok.encode(text, add_special_tokens=False)


def test_hf_generation_on_the_gpu_with_lora_kv_cache_and_stop_strings():
    tok = tiny_tokenizer()
    policy = _peft_policy(tok)
    prompt = _prompt(tok)
    greedy = SamplingConfig(max_new_tokens=12, temperature=0)
    gen = HFGenerator(policy, tok).generate([prompt, prompt[3:]], greedy)
    ids = gen[0].ids
    assert len(ids) == 12 and len(gen[1].ids) > 0
    # the KV-cached generation equals step-by-step argmax over the whole sequence, and its log-probs the forward's
    with torch.no_grad():
        seq = list(prompt)
        for _ in range(12):
            logits = policy(input_ids=torch.tensor([seq], device="cuda"), use_cache=False).logits[0, -1]
            seq.append(int(logits.argmax()))
        logits = policy(input_ids=torch.tensor([seq[:-1]], device="cuda")).logits[0, len(prompt) - 1 :]
        forward = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids, device="cuda")[:, None])
    assert seq[len(prompt) :] == ids
    assert torch.allclose(forward[:, 0].cpu(), torch.tensor(gen[0].logprobs), atol=1e-3)
    # a stop string cuts a sampled generation at the token that completes it (sampled: a random model's greedy
    # text repeats itself; the same seed samples the same tokens up to the stop)
    sampled = SamplingConfig(max_new_tokens=24, temperature=1.0)
    torch.manual_seed(3)
    free = HFGenerator(policy, tok).generate([prompt], sampled)[0].ids
    texts = [tok.decode([t], skip_special_tokens=False) for t in free]
    k = next(i for i in range(4, len(free)) if texts[i].strip() and texts[i] not in "".join(texts[:i]))
    torch.manual_seed(3)
    stop = SamplingConfig(max_new_tokens=24, temperature=1.0, stop_strings=(texts[k],))
    cut = HFGenerator(policy, tok).generate([prompt], stop)[0].ids
    assert cut == free[: k + 1], (cut, free, texts[k])


def test_vllm_gpu_engine_matches_hf_generation(tmp_path):
    pytest.importorskip(
        "vllm",
        reason="the vllm package is not installed here (the GPU image has none; it does not fit in 64 MiB)",
    )
    from agentr1_trl.backends.vllm import VLLMGenerator

    tok = tiny_tokenizer()
    model = shaped_model(SHAPE, tok, vocab_size=len(tok), seed=0)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    engine = VLLMGenerator(str(tmp_path), tok, sync="lora", dtype="float32", max_model_len=2048)
    try:
        prompt = _prompt(tok)
        greedy = SamplingConfig(max_new_tokens=8, temperature=0)
        expected = HFGenerator(copy.deepcopy(model).cuda(), tok).generate([prompt], greedy)[0].ids
        assert engine.generate([prompt], greedy)[0].ids == expected
    finally:
        engine.close()


def test_static_cache_decoding_on_the_gpu_is_token_exact_with_refill_and_cuda_graphs():
    from agentr1_trl.backends.static_decode import StaticCacheGenerator

    tok = tiny_tokenizer()
    policy = _peft_policy(tok)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    base = _prompt(tok)
    prompts = [base[i:] for i in range(0, 30, 3)]  # 10 prompts of different lengths through 8 slots: a refill
    greedy = SamplingConfig(max_new_tokens=12, temperature=0)
    gen = StaticCacheGenerator(policy, tok, max_slots=8)
    out = gen.generate(prompts, greedy)
    assert "CUDA graphs" in gen.describe() and "failed" not in gen.describe(), gen.describe()
    assert gen.stats["graph_captures"] >= 1 and gen.stats["busy_slot_steps"] < gen.stats["slot_steps"]
    with torch.no_grad():
        for prompt, g in zip(prompts, out):
            seq = list(prompt)
            for _ in range(len(g.ids)):
                logits = policy(input_ids=torch.tensor([seq], device="cuda"), use_cache=False).logits[0, -1]
                seq.append(int(logits.argmax()))
            assert seq[len(prompt) :] == g.ids
            logits = policy(input_ids=torch.tensor([seq[:-1]], device="cuda")).logits[0, len(prompt) - 1 :]
            forward = torch.log_softmax(logits.float(), -1).gather(
                -1, torch.tensor(g.ids, device="cuda")[:, None]
            )
            assert torch.allclose(forward[:, 0].cpu(), torch.tensor(g.logprobs), atol=1e-3)
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the merged base restored bit for bit
    again = gen.generate(prompts, greedy)  # the captured graph replays on a second call
    assert [g.ids for g in again] == [g.ids for g in out]


def test_the_fused_lora_update_on_the_gpu_matches_peft(tmp_path):
    from agentr1_trl.models import fuse_lora_forward

    tok = tiny_tokenizer()
    plain = _peft_policy(tok).train()
    fused = copy.deepcopy(plain)
    assert fuse_lora_forward(fused) == 30 * 4
    ids = torch.randint(0, len(tok), (4, 96), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = plain(input_ids=ids).logits.float(), fused(input_ids=ids).logits.float()
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    a.square().mean().backward()
    b.square().mean().backward()
    grads = [(p.grad, q.grad) for p, q in zip(plain.parameters(), fused.parameters()) if p.grad is not None]
    assert grads and all(((g - h).norm() / g.norm()).item() < 0.05 for g, h in grads)
