"""The vLLM server client against a stand-in server on loopback that misbehaves in every way we know of: each
call ends within its deadline, and every bad answer is one typed error naming the server and the problem (never a
hang, a raw ``KeyError``/``TypeError``, or a silent empty turn). Also: nothing out of the vocabulary reaches a
rollout from any backend, and temporary weights are removed on close, at exit, on errors and after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from _paths import TESTS

pytest.importorskip("trl")

from _standin_vllm import StandinVLLM
from agentr1_trl.backends.vllm import VLLMGenerator, sweep_sync_dirs, sync_root
from agentr1_trl.testing import tiny_tokenizer

from agentr1_gym.errors import ConfigError, InferenceServerError
from agentr1_gym.generation import BaseGenerator, Generation, GenerationError, SamplingConfig

SAMPLING = SamplingConfig(max_new_tokens=4, temperature=1.0)


@pytest.fixture(scope="module")
def server(tok):
    s = StandinVLLM(vocab_size=len(tok), eos_id=tok.eos_token_id)
    yield s
    s.close()


@pytest.fixture
def standin(server):
    server.mode, server.models_mode, server.failures_left = "ok", "ok", 0
    server.calls.clear()
    return server


def _client(standin, tok, **kw):
    return VLLMGenerator(standin.url, tok, mode="server", server_urls=[standin.url], **kw)


def test_a_good_answer_comes_back_token_exact(standin, tok):
    gens = _client(standin, tok).generate([[1, 2, 3], [4, 5]], SAMPLING)
    assert [g.ids for g in gens] == [[7, 8, 9, 10]] * 2 and gens[0].logprobs == [-0.5] * 4


@pytest.mark.parametrize(
    "mode, problem",
    [
        ("http500", 'HTTP 500: {"error": "CUDA out of memory"}'),
        ("not_json", "the answer is not JSON (starts '<html>502 Bad Gateway</html>')"),
        ("empty", "an empty answer (HTTP 200), JSON expected"),
        ("list", "the answer is a JSON list, not an object"),
        ("error_object", "error {'message': 'model not found'}"),
        ("no_choices", "no 'choices' list in the answer"),
        ("too_few", "1 choices for 2 prompts"),
        ("duplicate_index", "choice index 0 appears twice"),
        ("index_out_of_range", "choice index 99 is not one of 0..1"),
        ("no_token_ids", "choice 0 has no 'token_ids'"),
        ("negative_id", "token id -3 is outside the policy's vocabulary"),
        ("out_of_vocab", "is outside the policy's vocabulary"),
        ("float_ids", "'token_ids' is not a list of whole numbers"),
        ("extra_tokens", "6 tokens, more than the 4 asked for"),
        ("no_logprobs", "no log-probs ('logprobs.token_logprobs'), which were asked for"),
        ("logprob_count", "3 log-probs for 4 tokens"),
        ("nan_logprob", "log-prob nan is not a finite number <= 0"),
        ("positive_logprob", "log-prob 2.5 is not a finite number <= 0"),
        ("after_eos", "3 tokens after the end-of-sequence token"),
        ("length_but_short", "finish_reason 'length' after 1 of 4 tokens"),
        ("stop_without_stop", "finish_reason 'stop', but the tokens end in neither an EOS nor a stop string"),
        ("no_finish_reason", "finish_reason None (expected 'stop' or 'length')"),
    ],
)
def test_every_bad_answer_is_one_typed_error(standin, tok, mode, problem):
    engine = _client(standin, tok, retries=0)
    standin.mode = mode
    with pytest.raises(InferenceServerError) as caught:
        engine.generate([[1, 2, 3], [4, 5]], SAMPLING)
    assert caught.value.url == standin.url and problem in str(caught.value), str(caught.value)
    assert str(caught.value).startswith(f"inference server {standin.url}: /v1/completions: ")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_slow_server_cannot_hold_a_call_past_its_deadline(standin, tok, mode):
    engine = _client(standin, tok, timeout_s=1.5)
    standin.mode = mode
    start = time.monotonic()
    with pytest.raises(InferenceServerError, match=r"no complete answer within 1.5 s"):
        engine.generate([[1, 2, 3]], SAMPLING)
    # the old client waited per read: a byte every 0.5 s kept it waiting for the whole (~700 s) answer
    assert time.monotonic() - start < 5


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, problem", [("cut_short", "the answer was cut short"), ("drop", "the connection broke")]
)
def test_a_broken_connection_is_retried_then_named(standin, tok, mode, problem):
    engine = _client(standin, tok, retries=2)
    standin.mode = mode
    standin.calls.clear()
    with pytest.raises(InferenceServerError, match=problem + r".*\(3 attempts\)"):
        engine.generate([[1, 2, 3]], SAMPLING)
    assert standin.calls.count("/v1/completions") == 3


@pytest.mark.slow
def test_an_overloaded_server_is_retried_with_back_off(standin, tok):
    engine = _client(standin, tok, retries=2)
    standin.mode, standin.failures_left = "flaky", 2
    standin.calls.clear()
    assert engine.generate([[1, 2, 3]], SAMPLING)[0].ids == [7, 8, 9, 10]
    assert standin.calls.count("/v1/completions") == 3
    standin.failures_left = 5
    with pytest.raises(InferenceServerError, match=r"HTTP 503.*\(3 attempts\)"):
        engine.generate([[1, 2, 3]], SAMPLING)


def test_an_unreachable_server_is_named(tok):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(InferenceServerError, match=rf"inference server {url}: /v1/models: unreachable"):
        VLLMGenerator(url, tok, mode="server", server_urls=[url], timeout_s=2, retries=1)


@pytest.mark.parametrize(
    "mode, problem",
    [
        ("empty", "the server serves no model"),
        ("not_json", "the answer is not JSON"),
        ("no_data", "no 'data' list of models with ids"),
    ],
)
def test_a_bad_model_list_is_named(standin, tok, mode, problem):
    standin.models_mode = mode
    with pytest.raises(InferenceServerError, match=problem):
        _client(standin, tok)


def test_lora_loading_is_never_repeated(standin, tok, tiny_dir, tmp_path):
    """Loading an adapter is not idempotent: a broken connection is reported, not retried."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    policy = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=2, target_modules=["q_proj"])
    )
    engine = _client(standin, tok, sync="lora", sync_dir=str(tmp_path))
    standin.calls.clear()
    engine.sync_weights(policy)
    assert standin.calls == ["/v1/load_lora_adapter"]
    engine.close()


# ---- nothing out of the vocabulary reaches a rollout, from any backend --------------------------------------
class _Broken(BaseGenerator):
    def __init__(self, gens):
        self.gens = gens

    def generate(self, prompts, sampling):
        return [self.gens(len(p)) for p in prompts]


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda vocab: Generation(ids=[vocab + 1]), "is outside the vocabulary"),
        (lambda vocab: Generation(ids=[-1]), "token id -1 is outside the vocabulary"),
        (lambda vocab: Generation(ids=[5] * 40), "40 tokens, more than the 8 asked for"),
        (lambda vocab: Generation(ids=[5], logprobs=[float("inf")]), "log-prob inf is not a finite number"),
    ],
)
def test_rollouts_check_every_backend(tok, make, problem):
    from agentr1_trl import collect_rollouts

    import agentr1_gym

    backend = _Broken(lambda _n: make(len(tok)))
    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0")
    with pytest.raises(GenerationError, match=problem):
        collect_rollouts([env], backend, tok, sampling=SamplingConfig(max_new_tokens=8), seeds=[0])


@pytest.mark.slow
def test_an_out_of_vocabulary_turn_stops_training_before_the_update(tmp_path):
    """Before: the id reached the update and crashed it with ``IndexError: index out of range in self`` (a
    device-side assert on GPUs); now the rollout refuses it with the backend's name."""
    from agentr1_trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.testing import tiny_model
    from peft import LoraConfig

    tok = tiny_tokenizer()
    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1, report_to="none",
        max_new_tokens_per_turn=8, max_episode_tokens=1536, save_strategy="no", use_cpu=True, bf16=False,
    )  # fmt: skip
    backend = _Broken(lambda _n: Generation(ids=[len(tok) + 3]))
    trainer = AgentGRPOTrainer(
        tiny_model(tok), args, tok, peft_config=LoraConfig(r=2, target_modules=["q_proj"]), generator=backend
    )
    with pytest.raises(GenerationError, match="outside the vocabulary"):
        trainer.train()


@pytest.mark.slow
def test_a_prompt_over_the_episode_budget_is_a_config_error(tmp_path):
    """Before: TRL failed on the empty completion with ``IndexError: list index out of range``."""
    from agentr1_trl import AgentGRPOConfig, AgentGRPOTrainer
    from agentr1_trl.backends import ScriptedGenerator
    from agentr1_trl.testing import tiny_model
    from peft import LoraConfig

    from agentr1_gym.errors import ConfigError

    tok = tiny_tokenizer()
    args = AgentGRPOConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1, report_to="none",
        max_new_tokens_per_turn=8, max_episode_tokens=64, save_strategy="no", use_cpu=True, bf16=False,
    )  # fmt: skip
    trainer = AgentGRPOTrainer(
        tiny_model(tok), args, tok, peft_config=LoraConfig(r=2, target_modules=["q_proj"]),
        generator=ScriptedGenerator(tok, lambda prompt, i: "<answer>x</answer>"),
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"first prompt is \d+ tokens, at or over max_episode_tokens=64"):
        trainer.train()


# ---- temporary weights ---------------------------------------------------------------------------------------
def _merged_policy(tiny_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    return get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=2, target_modules=["q_proj"])
    )


def test_one_sync_dir_per_engine_reused_and_removed_on_close(standin, tok, tiny_dir, tmp_path):
    engine = _client(standin, tok, sync="merged", sync_dir=str(tmp_path))
    assert engine.sync_dir is None  # nothing written before a sync needs it
    policy = _merged_policy(tiny_dir)
    engine.sync_weights(policy)
    folder = engine.sync_dir
    engine.sync_weights(policy)
    assert engine.sync_dir == folder and folder.parent == sync_root(str(tmp_path))
    weights = sorted(p.name for p in folder.rglob("*.safetensors*"))
    assert weights == ["model.safetensors"]  # one copy, reused across steps
    assert standin.calls.count("/collective_rpc") == 2
    engine.close()
    assert not folder.exists()
    engine.close()  # twice is fine


_CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from agentr1_trl.backends.vllm import VLLMGenerator
    from agentr1_trl.testing import tiny_tokenizer
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    tok = tiny_tokenizer()
    engine = VLLMGenerator({url!r}, tok, mode="server", server_urls=[{url!r}], sync="merged", sync_dir={root!r})
    engine.sync_weights(get_peft_model(AutoModelForCausalLM.from_pretrained({tiny!r}), LoraConfig(r=2, target_modules=["q_proj"])))
    print(engine.sync_dir, flush=True)
    if {how!r} == "error":
        raise RuntimeError("a crash after a sync")
    if {how!r} == "kill":
        time.sleep(60)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "error", "kill"])
def test_temporary_weights_are_removed_at_exit_on_errors_and_after_a_kill(standin, tiny_dir, tmp_path, how):
    code = _CHILD.format(tests=str(TESTS), url=standin.url, root=str(tmp_path), tiny=tiny_dir, how=how)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    folder = proc.stdout.readline().strip()
    assert folder.startswith(str(sync_root(str(tmp_path))))  # the child synced into its own directory
    if how == "kill":
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=120)
    proc.stdout.close()
    if how != "kill":
        assert folder and not os.path.exists(folder)  # the process removed its own weights
        return
    assert os.path.isdir(folder)  # a SIGKILL leaves them: the next start removes them
    live = sync_root(str(tmp_path)) / f"{os.getpid()}-0-abc123"  # this (live) process's: kept
    live.mkdir()
    assert sweep_sync_dirs(sync_root(str(tmp_path))) == [sync_root(str(tmp_path)) / os.path.basename(folder)]
    assert not os.path.exists(folder) and live.is_dir()


def test_the_next_engine_to_start_removes_a_killed_runs_weights(standin, tok, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    left = sync_root(str(tmp_path)) / f"{dead.pid}-12345-deadbeef0000"
    left.mkdir(parents=True)
    (left / "model.safetensors").write_bytes(b"x" * 1000)
    _client(standin, tok, sync_dir=str(tmp_path))  # starting is enough
    assert not left.exists()


@pytest.mark.parametrize("backend", ["auto", "vllm"])
def test_server_mode_without_urls_is_refused_before_anything_starts(tmp_path, backend):
    """Server mode with no server to call is a ConfigError, whether vLLM was asked for or picked by auto (it
    would otherwise start an engine in this process instead)."""
    from agentr1_trl.grpo import AgentGRPOConfig
    from agentr1_trl.testing import trainer_settings

    with pytest.raises(ConfigError, match="vllm_mode='server' needs vllm_server_urls"):
        AgentGRPOConfig(**trainer_settings(tmp_path, vllm_mode="server", generation_backend=backend))
    AgentGRPOConfig(**trainer_settings(tmp_path, vllm_mode="server", generation_backend="hf"))
