"""GRPO and PPO steps of the agent trainers on a GPU: generation and update throughput, the step's time split,
peak memory and the update's MFU, for two model shapes, LoRA and full fine-tuning, with and without gradient
checkpointing; and the largest micro-batch that fits.

Models are built from the published configs of SmolLM2-135M and Qwen2.5-1.5B with random weights (nothing is
downloaded; :data:`agentr1_trl.testing.MODEL_SHAPES`), with the tests' local tokenizer: the embedding keeps the
shape's vocabulary, ids the tokenizer lacks decode to nothing. Each run is the trainer itself (``AgentGRPOTrainer``
/ ``AgentPPOTrainer`` on ``AgentR1/SyntheticMultihop-v0``), timed step by step:

* **generation**: the rollout (Hugging Face ``generate`` on the GPU, env steps included). In the ``gen`` runs the
  policy generates; in the update matrix a scripted generator writes fixed-length turns (a random model writes
  until ``max_new_tokens``), so that every run trains on rows of one known length;
* **scoring**: TRL's old/reference log-probs, the advantages (PPO: the value pass and GAE);
* **update**: forward, backward and optimizer step of the micro-batch;
* **other**: the rest of the step (data loading, logging).

MFU is the update's model FLOPs over its seconds and the card's dense bf16 peak. Model FLOPs count the work each
token needs (the decoder's matrix products, attention over its context, the vocabulary projection of the scored
positions; a shared GRPO prompt once per group where the trainer runs it once): 3x the forward for full
fine-tuning, 2x for LoRA (the frozen weights get no gradient; the adapters' own 3x is added), recomputation under
gradient checkpointing not counted. Padding is not counted as work.

Run on a GPU: ``python benchmarks/gpu_step.py --json benchmarks/results/gpu_step.json`` (``scripts/gpu_run.sh``
does it on the GPU machine). ``--tiny`` runs the same code on the CPU on a tiny model (the default test run does).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from _common import emit, machine_info

#: dense bf16 peak (FLOP/s) of the cards the device tool lends, by a piece of their name
PEAK_BF16 = {"H100 PCIe": 756e12, "H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
ENV = "AgentR1/SyntheticMultihop-v0"
#: episodes per micro-batch by shape: the most that fit an 80 GB card in every run of the matrix (full fine-tuning
#: without gradient checkpointing is the largest); the largest-batch search goes on from there
ROWS = {"qwen2.5-1.5b": 8, "smollm2-135m": 16, "tiny": 4}
#: turns of every episode (the env needs 3 to allow two searches and an answer)
TURNS = 3
WORDS = [
    "the",
    "river",
    "city",
    "bridge",
    "north",
    "archive",
    "station",
    "museum",
    "painter",
    "harbour",
    "council",
    "tower",
]


def peak_flops(name: str) -> float | None:
    for key in sorted(PEAK_BF16, key=len, reverse=True):
        if key in name:
            return PEAK_BF16[key]
    return None


def script_for(tok: Any, tokens: int) -> Any:
    """A scripted policy whose every turn is about ``tokens`` tokens (a long ``<think>``, then an unclosed answer,
    which the env answers with a format penalty); in the last of the episode's :data:`TURNS` turns even episodes
    close their answer: every episode has the same turns and length, and every group's returns vary (no row's
    advantage is zero)."""
    per_word = len(tok.encode(" ".join(WORDS * 8), add_special_tokens=False)) / (len(WORDS) * 8)
    words = max(1, int((tokens - 12) / per_word))
    calls = {"turn": -1}

    def script(prompt_ids: Any, i: int) -> str:
        if i == 0:  # each turn of a batch of episodes is one generate call, its prompts numbered from 0
            calls["turn"] += 1
        last = calls["turn"] % TURNS == TURNS - 1
        rng = random.Random(calls["turn"] * 7919 + i)
        body = " ".join(rng.choice(WORDS) for _ in range(words))
        answer = "<answer>Nobody</answer>" if last and i % 2 == 0 else "<answer>Nobody"
        return f"<think>{body}</think>{answer}"

    return script


# ---- FLOPs ---------------------------------------------------------------------------------------------------
def shape_numbers(config: Any) -> dict[str, int]:
    d, layers = config.hidden_size, config.num_hidden_layers
    head = getattr(config, "head_dim", None) or d // config.num_attention_heads
    q, kv = config.num_attention_heads * head, config.num_key_value_heads * head
    per_layer = d * q + 2 * d * kv + q * d + 3 * d * config.intermediate_size
    return {"hidden": d, "layers": layers, "q_width": q, "kv_width": kv, "vocab": config.vocab_size,
            "linear_params": layers * per_layer, "ffn": config.intermediate_size}  # fmt: skip


def lora_params_per_token(model: Any) -> int:
    """Multiply-adds of the LoRA adapters per token: r x (in + out) per adapted matrix."""
    total = 0
    for name, p in model.named_parameters():
        if "lora_A" in name or "lora_B" in name:
            total += p.numel()
    return total


def micro_batch_work(inputs: dict[str, Any], shared: bool, ppo: bool) -> dict[str, float]:
    """Tokens the forward pass ran (real ones, a shared prompt once), positions it projected onto the vocabulary,
    and the attention's (query, key) pairs, for one micro-batch."""
    from agentr1_trl.forward import prompt_groups

    pm, cm = inputs["prompt_mask"], inputs["completion_mask"]
    p_len, c_len = pm.sum(1).double(), cm.sum(1).double()
    rows = pm.size(0)
    if shared:
        first, _ = prompt_groups(inputs["prompt_ids"], pm)
        prompt_tokens = float(p_len[first].sum())
        pairs = float((p_len[first] ** 2 / 2).sum() + (c_len * (p_len + c_len / 2)).sum())
    else:
        prompt_tokens = float(p_len.sum())
        pairs = float(((p_len + c_len) ** 2 / 2).sum())
    if shared:
        mask = inputs.get("action_mask", cm)
        scored = float(mask.sum())
    else:  # the full forward projects every completion position (PPO its n + 1 logits)
        scored = float(rows * (cm.size(1) + (1 if ppo else 0)))
    real = float(p_len.sum() + c_len.sum())
    return {"tokens": prompt_tokens + float(c_len.sum()), "real_tokens": real, "scored": scored,
            "pairs": pairs, "padded": float(rows * (pm.size(1) + cm.size(1)))}  # fmt: skip


def update_flops(work: dict[str, float], numbers: dict[str, int], lora_per_token: int, full: bool) -> float:
    forward = (
        2 * numbers["linear_params"] * work["tokens"]
        + 2 * 2 * numbers["layers"] * numbers["q_width"] * work["pairs"]
        + 2 * numbers["hidden"] * numbers["vocab"] * work["scored"]
    )
    if full:
        return 3 * forward
    return 2 * forward + 3 * 2 * lora_per_token * work["tokens"]


# ---- one run -------------------------------------------------------------------------------------------------
class StepProbe:
    """Times each optimizer step's phases and records each micro-batch's work, by wrapping the trainer's hooks."""

    def __init__(self, trainer: Any, cuda: bool) -> None:
        from transformers import TrainerCallback

        self.cuda, self.steps, self.micro = cuda, [], []
        self._cur: dict[str, float] = {}
        probe = self
        rollout, score, compute = (
            trainer.rollout,
            trainer._generate_and_score_completions,
            trainer._compute_loss,
        )

        def timed_rollout(seeds):
            start = probe.now()
            trajs = rollout(seeds)
            probe._cur["rollout_s"] = probe._cur.get("rollout_s", 0.0) + probe.now() - start
            probe._cur["generated"] = probe._cur.get("generated", 0) + sum(sum(t.action_mask) for t in trajs)
            return trajs

        def timed_score(inputs):
            start = probe.now()
            out = score(inputs)
            probe._cur["score_start"], probe._cur["score_end"] = start, probe.now()
            return out

        def counted_loss(model, inputs):
            if model.training:
                shared = trainer.shares_prompts(model) and inputs["completion_ids"].size(1) < (
                    inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1)
                )
                probe.micro.append(
                    (len(probe.steps), micro_batch_work(inputs, shared, ppo=hasattr(trainer, "value_head")))
                )
            return compute(model, inputs)

        trainer.rollout, trainer._generate_and_score_completions = timed_rollout, timed_score
        trainer._compute_loss = counted_loss

        class Clock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                probe._cur = {"begin": probe.now()}

            def on_step_end(self, args, state, control, **kw):
                cur, end = probe._cur, probe.now()
                step = end - cur["begin"]
                rollout = cur.get("rollout_s", 0.0)
                scoring = cur.get("score_end", cur["begin"]) - cur.get("score_start", cur["begin"]) - rollout
                update = end - cur.get("score_end", cur["begin"])
                probe.steps.append({"step_s": step, "generation_s": rollout, "scoring_s": scoring,
                                    "update_s": update, "other_s": step - rollout - scoring - update,
                                    "generated_tokens": cur.get("generated", 0)})  # fmt: skip

        trainer.add_callback(Clock())

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def one_run(spec: dict[str, Any], opts: argparse.Namespace) -> dict[str, Any]:
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.algorithms import trainer_classes
    from agentr1_trl.testing import shaped_model, tiny_model, tiny_tokenizer
    from peft import LoraConfig

    cuda = not opts.tiny
    tok = tiny_tokenizer()
    full = spec["mode"] == "full"
    # LoRA trains adapters over a frozen bf16 base; full fine-tuning keeps fp32 master weights under autocast
    if opts.tiny:
        model = tiny_model(tok, hidden_size=64, layers=2)
    else:
        dtype = None if full else torch.bfloat16
        model = shaped_model(spec["shape"], tok, dtype=dtype, device="cuda")
    numbers = shape_numbers(model.config)
    gen = spec["rollout"].startswith("hf-")
    rows = spec["rows"]
    settings = dict(
        output_dir=str(Path(opts.workdir) / f"{spec['name']}"),
        per_device_train_batch_size=rows,
        num_generations=min(8, rows),
        gradient_accumulation_steps=1,
        max_steps=opts.steps,
        learning_rate=1e-5 if full else 1e-4,
        beta=0.0,
        skip_zero_advantage=False,  # a random policy's groups may not vary: their rows still run (real work)
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        save_episodes_steps=0,
        use_cpu=not cuda,
        bf16=cuda,
        seed=0,
        max_new_tokens_per_turn=opts.gen_tokens if gen else opts.turn_tokens + 64,
        max_episode_tokens=opts.episode_tokens,
        env_kwargs={"max_turns": TURNS},
        gradient_checkpointing=spec["checkpointing"],
        gradient_checkpointing_kwargs={"use_reentrant": False} if spec["checkpointing"] else None,
    )
    cfg, cls = trainer_classes(spec["algo"])
    lora = None if full else LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")
    generator = None if gen else ScriptedGenerator(tok, script_for(tok, opts.turn_tokens))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    update = spec.get("update", "fused")
    settings.update(
        fuse_lora=update == "fused",
        update_width_multiple=None if update == "fused" else 1,
        hf_decode="static" if spec["rollout"] == "hf-static" else "generate",
    )
    trainer = cls(model, cfg(**settings, generation_backend="hf"), tok, peft_config=lora, generator=generator)
    probe = StepProbe(trainer, cuda)
    if spec.get("profile"):
        profile_training(trainer, opts, cuda)
    else:
        trainer.train()
    lora_per_token = 0 if full else lora_params_per_token(trainer.model)
    measured = probe.steps[1:] or probe.steps  # the first step warms up kernels, the allocator, CUDA graphs
    first = len(probe.steps) - len(measured)
    works = [w for i, w in probe.micro if i >= first]
    flops = sum(update_flops(w, numbers, lora_per_token, full) for w in works)
    mean = {k: sum(s[k] for s in measured) / len(measured) for k in measured[0]}
    tokens = sum(w["real_tokens"] for w in works) / len(measured)
    result = {
        **spec,
        "steps_measured": len(measured),
        "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        "step_s": mean["step_s"],
        "split_s": {k: mean[f"{k}_s"] for k in ("generation", "scoring", "update", "other")},
        "generated_tokens_per_step": mean["generated_tokens"],
        "generation_tokens_per_s": mean["generated_tokens"] / mean["generation_s"] if gen else None,
        "update_tokens_per_step": tokens,
        "update_tokens_per_s": tokens / mean["update_s"],
        "padding_fraction": 1
        - sum(w["real_tokens"] for w in works) / max(sum(w["padded"] for w in works), 1),
        "update_tflops": flops / len(measured) / 1e12,
        "update_tflop_per_s": flops / len(measured) / mean["update_s"] / 1e12,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "first_step_s": probe.steps[0]["step_s"],
        "generation": trainer.describe_generation() if gen else "scripted",
    }
    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    result["update_mfu"] = (flops / len(measured) / mean["update_s"] / peak) if peak else None
    result["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    del trainer, model
    release(cuda)
    return result


def profile_training(trainer: Any, opts: argparse.Namespace, cuda: bool) -> None:
    """Train under torch.profiler; the kernels by total device time go to ``<json>.profile.txt``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        trainer.train()
    sort = "cuda_time_total" if cuda else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=40)
    path = Path(opts.json or "gpu_step.json").with_suffix(".profile.txt")
    path.write_text(table, encoding="utf-8")
    print(table[:6000], flush=True)


def release(cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def plan(shape: str, rows: int) -> list[dict[str, Any]]:
    """The runs of one shape, each a before/after pair in the same process: the LoRA update as peft runs it
    (``update="peft"``: adapters cast their input to float32, widths as they come) against the fused forward and
    bucketed widths (``"fused"``, the GPU default), with and without gradient checkpointing; full fine-tuning for
    reference; PPO with the GPU defaults; then the policy generating with Hugging Face ``generate`` against the
    static-cache decoder (``rollout="hf-generate"`` / ``"hf-static"``)."""
    base = {"shape": shape, "rows": rows, "algo": "grpo", "mode": "lora", "rollout": "scripted"}
    runs = [
        {**base, "checkpointing": ckpt, "update": update}
        for ckpt in (False, True)
        for update in ("peft", "fused")
    ]
    runs.append({**base, "mode": "full", "checkpointing": False, "update": "fused"})
    runs.append({**base, "algo": "ppo", "checkpointing": True, "update": "fused"})
    # before: generate over peft's unmerged adapters; after: the static-cache decoder (adapters merged for it)
    for rollout, update in (("hf-generate", "peft"), ("hf-static", "fused")):
        runs.append({**base, "checkpointing": False, "update": update, "rollout": rollout})
    for run in runs:
        run["name"] = "-".join(
            [run["shape"], run["algo"], run["mode"], "gc" if run["checkpointing"] else "nogc", run["rollout"],
             run["update"]]
        )  # fmt: skip
    return runs


def largest_batch(opts: argparse.Namespace, shape: str, checkpointing: bool, out: dict[str, Any]) -> None:
    """Double the micro-batch of a GRPO LoRA step until it no longer fits (or the cap): the largest that fit,
    with its throughput, and the first that did not."""
    key = f"{shape}-grpo-lora-{'gc' if checkpointing else 'nogc'}"
    found: dict[str, Any] = {"fits": [], "first_oom": None}
    out["largest_batch"][key] = found
    rows = opts.rows or ROWS[shape]
    while rows <= opts.max_rows:
        if time.perf_counter() - START > opts.budget_s:
            found["stopped"] = "time budget"
            return
        spec = {"shape": shape, "rows": rows, "algo": "grpo", "mode": "lora", "checkpointing": checkpointing,
                "rollout": "scripted", "update": "fused", "name": f"{key}-rows{rows}"}  # fmt: skip
        try:
            result = one_run(spec, opts)
        except torch.OutOfMemoryError:
            result = None
        if result is None:  # outside the except block: its traceback no longer holds the run's model
            release(not opts.tiny)
            found["first_oom"] = rows
            return
        found["fits"].append({k: result[k] for k in ("rows", "update_tokens_per_step", "update_tokens_per_s",
                                                     "update_mfu", "peak_memory_gb", "step_s")})  # fmt: skip
        print(f"  {key}: {rows} rows fit ({result['peak_memory_gb']} GiB)", flush=True)
        rows *= 2
    found["stopped"] = f"cap ({opts.max_rows} rows)"


START = time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="the CPU on a tiny model (what the tests run)")
    parser.add_argument("--shapes", nargs="+", default=["qwen2.5-1.5b", "smollm2-135m"])
    parser.add_argument(
        "--search-shape", default="qwen2.5-1.5b", help="the shape whose largest batch is found"
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="episodes per micro-batch (groups of 8); default per shape: ROWS",
    )
    parser.add_argument("--steps", type=int, default=2, help="steps per run; all but the first are measured")
    parser.add_argument("--turn-tokens", type=int, default=384, help="tokens of a scripted turn")
    parser.add_argument("--gen-tokens", type=int, default=128, help="max new tokens of a generated turn")
    parser.add_argument("--episode-tokens", type=int, default=2048)
    parser.add_argument("--max-rows", type=int, default=256, help="cap of the largest-batch search")
    parser.add_argument("--budget-s", type=float, default=270.0, help="start no run after this many seconds")
    parser.add_argument("--only", default=None, help="run only the runs whose name contains this")
    parser.add_argument("--no-search", action="store_true", help="skip the largest-batch search")
    parser.add_argument(
        "--profile",
        default=None,
        help="profile the run of this name (torch.profiler): its top kernels to a .txt",
    )
    parser.add_argument("--workdir", default="/tmp/agentr1-gpu-step")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    if opts.tiny:
        opts.steps, opts.turn_tokens, opts.gen_tokens, opts.max_rows = 2, 16, 8, 8
        opts.episode_tokens = 1024
    elif not torch.cuda.is_available():
        print("gpu_step: no CUDA GPU here; --tiny runs the same code on the CPU", file=sys.stderr)
        return 2
    import agentr1_trl  # noqa: F401

    import agentr1_gym  # noqa: F401

    out: dict[str, Any] = {
        "machine": machine_info("torch", "transformers", "trl", "peft", "accelerate"),
        "settings": {k: v for k, v in vars(opts).items() if k not in {"json", "workdir"}},
        "runs": [],
        "largest_batch": {},
        "skipped": [],
    }
    if torch.cuda.is_available() and not opts.tiny:
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = {
            "name": props.name,
            "memory_gb": props.total_memory / 2**30,
            "multiprocessors": props.multi_processor_count,
            "cuda": torch.version.cuda,
            "bf16_peak_tflops": (peak_flops(props.name) or 0) / 1e12 or None,
        }
        try:
            import subprocess

            out["gpu"]["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            out["gpu"]["driver"] = None
    # the larger shape first: its MFU and largest batch are the figures that matter most if time runs out
    for shape in ["tiny"] if opts.tiny else opts.shapes:
        for spec in plan(shape, opts.rows or ROWS[shape]):
            if opts.only and opts.only not in spec["name"]:
                continue
            elapsed = time.perf_counter() - START
            if elapsed > opts.budget_s:
                out["skipped"].append(
                    {"name": spec["name"], "why": f"time budget ({opts.budget_s:.0f} s) spent"}
                )
                continue
            print(f"{spec['name']} ({elapsed:.0f} s in)", flush=True)
            try:
                result, why = one_run(spec, opts), None
            except torch.OutOfMemoryError as e:
                result, why = None, f"out of memory: {str(e)[:200]}"
            except Exception as e:  # one broken run must not cost the others their figures
                result, why = None, f"{type(e).__name__}: {str(e)[:300]}"
                traceback.print_exc()
            if result is None:
                release(not opts.tiny)
                out["skipped"].append({"name": spec["name"], "why": why})
                continue
            out["runs"].append(result)
            print(f"    step {result['step_s']:.2f} s (first {result['first_step_s']:.2f}), update "
                  f"{result['update_tokens_per_s']:.0f} tok/s, MFU {result['update_mfu']}, generation "
                  f"{result['generation_tokens_per_s']} tok/s, peak {result['peak_memory_gb']} GiB", flush=True)  # fmt: skip
            emit(out, opts.json, quiet=True)
    # the largest batch last: every shape's before/after pairs come first if time runs out
    if not opts.no_search:
        for checkpointing in (False, True):
            largest_batch(opts, "tiny" if opts.tiny else opts.search_shape, checkpointing, out)
            emit(out, opts.json, quiet=True)
    if opts.profile:  # a separate run under the profiler (its times are not the ones reported above)
        shape = next((k for k in ROWS if opts.profile.startswith(k + "-")), "")
        specs = [r for r in plan(shape, opts.rows or ROWS.get(shape, 8)) if r["name"] == opts.profile]
        if not specs:
            parser.error(f"--profile: no run is named {opts.profile!r}")
        one_run({**specs[0], "profile": True}, opts)
        out["profile_of"] = opts.profile
    out["seconds"] = time.perf_counter() - START
    emit(out, opts.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
