"""What the example scripts share: their command line (model, steps, output) and loading the policy."""

from __future__ import annotations

import argparse
from typing import Any


def parse(description: str, **defaults: Any) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "--model", default="smollm2", help="'smollm2' (offline default policy) or a model directory"
    )
    ap.add_argument("--max-steps", type=int, default=defaults.get("max_steps", 20), help="optimizer steps")
    ap.add_argument("--output-dir", default=defaults.get("output_dir", "runs/example"), help="where to write")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="tokens per assistant turn")
    ap.add_argument("--backend", default="auto", choices=["auto", "hf", "vllm"], help="rollout engine")
    return ap.parse_args()


def policy(name: str) -> tuple[Any, Any]:
    from agentr1_trl.models import load_policy

    model, tokenizer, _ = load_policy(name)
    model.train()
    return model, tokenizer
