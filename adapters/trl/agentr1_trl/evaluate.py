"""Model-backed evaluation: ``agentr1 eval ENV_ID --model PATH [--adapter DIR]``.

Policies (the paper's baselines and ours):

* ``tool`` (Base Tool Call): the model plays the env with its tools, turn by turn, as in training;
* ``naive-rag`` (Naive RAG): one retrieval with the question itself, then the model answers in one turn;
* ``value_guided=N`` (with a PPO adapter's ``value_head.pt``): each turn samples N candidates and keeps the one the
  value head scores highest.

Reports the means of success (EM = 1), EM, F1, format validity, return and turns over ``episodes`` seeds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import success
from agentr1_trl.generation import HFGenerator, SamplingConfig
from agentr1_trl.rollout import collect_rollouts, render_chat

__all__ = ["NAIVE_RAG_INSTRUCTION", "evaluate_model", "load_policy", "run_eval"]

NAIVE_RAG_INSTRUCTION = "Using the search results above, give the final answer inside <answer>...</answer>."


def load_policy(model: str, adapter: str | None = None) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, value_head or None)`` from ``"smollm2"`` or a local model directory, plus an optional
    LoRA adapter directory (its ``value_head.pt``, if any, is the PPO value head)."""
    import torch

    if adapter and not (Path(adapter) / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter} is not a LoRA adapter directory (no adapter_config.json)")
    if model == "smollm2":
        from agentr1_trl.models import load_default_policy

        policy, tokenizer = load_default_policy()
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not Path(model).is_dir():
            raise ConfigError(
                f"model must be 'smollm2' or a local model directory; {model} is not a directory"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(model)
            policy = AutoModelForCausalLM.from_pretrained(model)
        except (
            Exception
        ) as exc:  # transformers raises OSError, ValueError, KeyError... for broken directories
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"cannot load a model from {model}: {first}") from None
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    value_head = None
    if adapter:
        from peft import PeftModel

        try:
            policy = PeftModel.from_pretrained(policy, adapter)
            head_file = Path(adapter) / "value_head.pt"
            if head_file.exists():
                state = torch.load(head_file, map_location="cpu")
                value_head = torch.nn.Linear(state["weight"].shape[1], 1)
                value_head.load_state_dict(state)
        except Exception as exc:  # corrupt weights, shape mismatches, bad JSON
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise ConfigError(f"cannot load the adapter from {adapter}: {first}") from None
    policy.eval()
    return policy, tokenizer, value_head


def _summary(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    return {k: float(np.mean([r.get(k, 0.0) for r in rows])) for k in keys}


def evaluate_model(
    env_id: str,
    model: Any,
    tokenizer: Any,
    *,
    episodes: int = 100,
    seed: int = 0,
    batch_size: int = 16,
    baseline: str = "tool",
    env_kwargs: dict[str, Any] | None = None,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    value_guided: int = 0,
    value_head: Any = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a model policy on ``episodes`` seeds (``seed``, ``seed + 1``, ...). ``temperature=0`` is greedy."""
    if baseline not in ("tool", "naive-rag"):
        raise ConfigError(f"baseline must be 'tool' or 'naive-rag', got {baseline!r}")
    if value_guided and value_head is None:
        raise ConfigError("value-guided decoding needs a value head (an adapter trained with --algo ppo)")
    from tqdm.auto import tqdm

    sampling = SamplingConfig(
        max_new_tokens=max_new_tokens,
        temperature=temperature or 1.0,
        do_sample=temperature > 0 or value_guided > 1,
    )
    generator: Any = HFGenerator(model, tokenizer)
    if value_guided > 1:
        from agentr1_trl.ppo_trainer import ValueGuidedGenerator

        generator = ValueGuidedGenerator(generator, model, value_head, tokenizer, n=value_guided)
    rows: list[dict[str, float]] = []
    bar = tqdm(total=episodes, desc=f"eval {baseline}", disable=not progress, unit="ep")
    for start in range(0, episodes, batch_size):
        seeds = list(range(seed + start, seed + min(episodes, start + batch_size)))
        envs = [agentr1_gym.make(env_id, **(env_kwargs or {})) for _ in seeds]
        if baseline == "tool":
            for t in collect_rollouts(envs, generator, tokenizer, sampling=sampling, seeds=seeds):
                rows.append(
                    {
                        **t.metrics,
                        "return": t.episode_return,
                        "turns": float(t.num_turns),
                        "success": success(t.metrics),
                        "format_ok": t.metrics.get("format_ok", 0.0),
                    }
                )
        else:
            rows.extend(_naive_rag(envs, seeds, generator, tokenizer, sampling))
        bar.update(len(seeds))
    bar.close()
    return {
        "env": env_id,
        "baseline": baseline,
        "value_guided": value_guided,
        "episodes": episodes,
        **_summary(rows),
    }


def _naive_rag(
    envs: list[Any], seeds: list[int], generator: Any, tokenizer: Any, sampling: SamplingConfig
) -> list[dict[str, float]]:
    prompts, totals = [], []
    for env, s in zip(envs, seeds):
        _, info = env.reset(seed=s)
        env_u = env.unwrapped
        if "search" not in env_u.tools:
            raise ConfigError("naive-rag needs an env with a search tool")
        _, reward, *_ = env.step(env_u.call_text("search", query=env_u.task.question))
        totals.append(float(reward))
        messages = [*env_u.messages, {"role": "user", "content": NAIVE_RAG_INSTRUCTION}]
        text = render_chat(tokenizer, messages, info.get("tools"), add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    rows = []
    for env, gen, total in zip(envs, generator.generate(prompts, sampling), totals):
        text = tokenizer.decode(gen.ids, skip_special_tokens=True)
        _, reward, terminated, _, info = env.step(text)
        metrics = info.get("metrics") if terminated else None
        if metrics is None:  # no parsable answer: one attempt only, scored as no answer
            _, metrics = env.unwrapped._score(None)
            metrics = {**metrics, "format_ok": 0.0}
        rows.append(
            {
                **metrics,
                "return": total + float(reward),
                "turns": 2.0,
                "success": success(metrics),
            }
        )
    return rows


def run_eval(args: argparse.Namespace) -> int:
    """Entry point used by ``agentr1 eval --model ...`` (registered as an ``agentr1.policies`` entry point)."""
    model, tokenizer, value_head = load_policy(args.model, args.adapter)
    summary = evaluate_model(
        args.env_id,
        model,
        tokenizer,
        episodes=args.episodes,
        seed=args.seed,
        baseline=args.baseline,
        env_kwargs=args.env_kwargs_parsed,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        value_guided=args.value_guided,
        value_head=value_head,
        progress=not args.no_progress,
    )
    print(json.dumps({"model": args.model, "adapter": args.adapter, **summary}, indent=2))
    return 0
