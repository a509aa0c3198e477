"""Model-backed evaluation: ``agentr1 eval ENV_ID --model PATH [--adapter DIR]``.

Policies (the paper's baselines and ours):

* ``tool`` (Base Tool Call): the model plays the env with its tools, turn by turn, as in training;
* ``naive-rag`` (Naive RAG): one retrieval with the question itself, then the model answers in one turn; a reply
  without ``<answer>`` tags is scored as a whole (flexible extraction, with ``format_ok`` 0), so that the baseline
  measures answering from the retrieved text rather than following the tag format (a small plain model rarely
  writes the tags: a strict parse scored SmolLM2-135M 0 on every question);
* ``value_guided=N`` (with a PPO adapter's ``value_head.pt``): each turn samples N candidates and keeps the one the
  value head scores highest.

Reports the means of success (EM = 1), EM, F1, format validity, return and turns over ``episodes`` seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import summarize
from agentr1_gym.generation import SamplingConfig
from agentr1_gym.rollout import collect_rollouts, render_chat
from agentr1_trl.backends.factory import GenerationSettings, hf_generator, make_generator, policy_vocab_size
from agentr1_trl.models import load_policy

__all__ = [
    "EVAL_EPISODES",
    "EVAL_SEED",
    "NAIVE_RAG_INSTRUCTION",
    "EvalSettings",
    "evaluate_model",
    "held_out_eval",
    "run_eval",
    "split_env_kwargs",
]

#: held-out evaluation seeds (training uses seed_offset + [0, num_tasks), the warm start 200000+)
EVAL_SEED = 100_000
EVAL_EPISODES = 100

NAIVE_RAG_INSTRUCTION = "Using the search results above, give the final answer inside <answer>...</answer>."


@dataclass(frozen=True)
class EvalSettings:
    """How :func:`evaluate_model` evaluates (each field is also one of its keywords, which override the object's).

    ``episodes`` seeds ``seed``, ``seed + 1``, ... (or exactly the tasks ``task_indices`` of a fixed task list,
    each once: reset option ``task_index``; ``episodes`` is then their number, e.g. ``range(n_dev)`` for a whole
    dev set), ``batch_size`` at a time; ``baseline`` ``tool`` or ``naive-rag``; ``temperature=0`` is greedy;
    ``value_guided=N`` keeps the best of N samples per turn by the value head; ``keep_rows``: also return each
    episode's metrics under ``rows`` (for confidence intervals); ``save_episodes``: append each episode (its tokens,
    action mask and sampler log-probs, turn by turn) to this JSONL file as ``agentr1 view`` reads it, with
    ``save_source`` and ``save_step``."""

    episodes: int = 100
    seed: int = 0
    batch_size: int = 16
    baseline: str = "tool"
    env_kwargs: dict[str, Any] | None = None
    max_new_tokens: int = 128
    temperature: float = 0.0
    value_guided: int = 0
    progress: bool = True
    max_episode_tokens: int = 4096
    task_indices: Any = None
    keep_rows: bool = False
    save_episodes: str | None = None
    save_source: str = "eval"
    save_step: int | None = None


def evaluate_model(
    env_id: str,
    model: Any,
    tokenizer: Any,
    settings: EvalSettings | None = None,
    *,
    generator: Any = None,
    value_head: Any = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Evaluate a model policy on an env, as ``settings`` (an :class:`EvalSettings`) and the keyword
    ``overrides`` of its fields say; the summary is :func:`agentr1_gym.evaluation.summarize`'s. ``generator``: the
    backend that samples from ``model`` (default Hugging Face ``generate`` on it; a vLLM engine synced to the
    model's weights works the same); ``value_head``: a PPO adapter's, for ``value_guided``."""
    unknown = sorted(set(overrides) - set(EvalSettings.__dataclass_fields__))
    if unknown:
        raise ConfigError(
            f"evaluate_model got unknown setting(s) {unknown}; its settings: {list(EvalSettings.__dataclass_fields__)}"
        )
    s = dataclasses.replace(settings or EvalSettings(), **overrides)
    episodes, seed, batch_size, baseline, env_kwargs = (
        s.episodes,
        s.seed,
        s.batch_size,
        s.baseline,
        s.env_kwargs,
    )
    max_new_tokens, temperature, value_guided, progress = (
        s.max_new_tokens,
        s.temperature,
        s.value_guided,
        s.progress,
    )
    max_episode_tokens, task_indices, keep_rows = s.max_episode_tokens, s.task_indices, s.keep_rows
    save_episodes, save_source, save_step = s.save_episodes, s.save_source, s.save_step
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
    generator = generator or hf_generator(model, tokenizer)
    if value_guided > 1:
        from agentr1_trl.backends.value_guided import ValueGuidedGenerator

        generator = ValueGuidedGenerator(generator, model, value_head, tokenizer, n=value_guided)
    if task_indices is not None:
        task_indices = [int(i) for i in task_indices]
        episodes = len(task_indices)
    rows: list[dict[str, float]] = []
    bar = tqdm(total=episodes, desc=f"eval {baseline}", disable=not progress, unit="ep")
    for start in range(0, episodes, batch_size):
        seeds = list(range(seed + start, seed + min(episodes, start + batch_size)))
        options = (
            [{"task_index": i} for i in task_indices[start : start + len(seeds)]]
            if task_indices is not None
            else [None] * len(seeds)
        )
        envs = [agentr1_gym.make(env_id, **(env_kwargs or {})) for _ in seeds]
        if baseline == "tool":
            trajs = collect_rollouts(
                envs,
                generator,
                tokenizer,
                sampling=sampling,
                seeds=seeds,
                options=options,
                max_episode_tokens=max_episode_tokens,
                vocab_size=policy_vocab_size(model, tokenizer),
            )
            for t in trajs:
                rows.append({**t.metrics, "return": t.episode_return, "turns": float(t.num_turns)})
            if save_episodes is not None:
                from agentr1_gym.episodes import append_episodes
                from agentr1_trl.episodes import trajectory_records

                append_episodes(
                    save_episodes,
                    trajectory_records(
                        trajs,
                        tokenizer,
                        source=save_source,
                        step=save_step,
                        env_id=env_id,
                        seeds=seeds,
                        indices=range(start, start + len(seeds)),
                    ),
                )
        else:
            rows.extend(_naive_rag(envs, seeds, options, generator, tokenizer, sampling))
        bar.update(len(seeds))
    bar.close()
    out = {
        "env": env_id,
        "baseline": baseline,
        "value_guided": value_guided,
        "episodes": episodes,
        **summarize(rows),
    }
    if keep_rows:
        out["rows"] = rows
    return out


def _naive_rag(
    envs: list[Any],
    seeds: list[int],
    options: list[dict | None],
    generator: Any,
    tokenizer: Any,
    sampling: SamplingConfig,
) -> list[dict[str, float]]:
    prompts, totals = [], []
    for env, s, opt in zip(envs, seeds, options):
        _, info = env.reset(seed=s, options=opt)
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
        _, reward, _, _, info = env.step(text)
        total += float(reward)
        metrics = info.get("metrics")
        if metrics is None:  # no <answer> tags: the reply itself is the answer (format_ok stays 0)
            outcome, metrics = env.unwrapped.close_episode(text.strip(), terminated=True)
            total += sum(outcome.values())
        rows.append({**metrics, "return": total, "turns": 2.0})
    return rows


def policy_generator(
    model: Any, tokenizer: Any, backend: str = "auto", server_urls: Any = (), timeout_s: float = 600.0
) -> Any:
    """A generation backend that samples from ``model`` (:func:`~agentr1_trl.backends.factory.make_generator`):
    Hugging Face ``generate``, or a vLLM engine on the model's base directory (or ``server_urls``) with the
    adapter's weights synced in (``auto``: vLLM when installed and the model has a directory). ``timeout_s``: the
    total deadline of one call to a vLLM server. Close it after use: a vLLM engine may hold temporary weights."""
    settings = GenerationSettings(backend=backend, server_urls=tuple(server_urls), timeout_s=timeout_s)
    return make_generator(model, tokenizer, settings, sync=hasattr(model, "peft_config"))


def _run_settings(args: argparse.Namespace, env_kwargs: dict[str, Any]) -> tuple[dict[str, Any], int, int]:
    """With an ``--adapter`` inside an ``agentr1 train`` run on the same env, the settings its held-out number was
    measured with: the run's env kwargs for the held-out part (``kwargs_for_split(..., "test")``), tokens per turn
    and per episode, under what the command gives (said on stderr). Otherwise the command's, or the defaults."""
    import sys

    from agentr1_trl.run_dir import RUN_FILE, read_run_file

    defaults = (env_kwargs, 128 if args.max_new_tokens is None else args.max_new_tokens, 4096)
    record = Path(args.adapter).parent / RUN_FILE if args.adapter else None
    if record is None or not record.is_file():
        return defaults
    settings = read_run_file(record)["settings"]  # a damaged record: a one-line ConfigError naming the field
    if settings["env_id"] != args.env_id:
        return defaults
    counts = {}
    for key, default in (("max_new_tokens_per_turn", 128), ("max_episode_tokens", 4096)):
        value = settings.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{record}: field 'settings.{key}' must be a positive integer, got {value!r}")
        counts[key] = value
    env = agentr1_gym.make(args.env_id, **settings["env_kwargs"])
    held_out = env.unwrapped.kwargs_for_split(dict(settings["env_kwargs"]), "test")
    env.close()
    merged = {**held_out, **env_kwargs}
    max_new = args.max_new_tokens
    if max_new is None:
        max_new = counts["max_new_tokens_per_turn"]
    episode = counts["max_episode_tokens"]
    print(f"using the run's settings ({record}): env kwargs {merged}, {max_new} tokens per turn, {episode} per "
          "episode", file=sys.stderr)  # fmt: skip
    return merged, max_new, episode


def run_eval(args: argparse.Namespace, env_kwargs: dict[str, Any] | None = None) -> int:
    """``agentr1 eval --model ...`` (the ``agentr1.policies`` entry point): ``args`` holds the core's eval flags
    and this adapter's (:func:`~agentr1_trl.cli.add_eval_flags`), ``env_kwargs`` the parsed ``--env-arg``s."""
    env_kwargs, max_new_tokens, max_episode_tokens = _run_settings(args, dict(env_kwargs or {}))
    # a bad env id or argument fails now, not after the model has loaded
    probe = agentr1_gym.make(args.env_id, **env_kwargs)
    indices = None
    if getattr(args, "all_tasks", False):
        from agentr1_gym.evaluation import task_list

        indices = task_list(probe)
    probe.close()
    model, tokenizer, value_head = load_policy(args.model, args.adapter)
    generator = policy_generator(model, tokenizer, args.backend, args.vllm_server, args.vllm_timeout)
    try:
        summary = evaluate_model(
            args.env_id,
            model,
            tokenizer,
            episodes=args.episodes,
            seed=args.seed,
            baseline=args.baseline,
            env_kwargs=env_kwargs,
            max_new_tokens=max_new_tokens,
            max_episode_tokens=max_episode_tokens,
            temperature=args.temperature,
            value_guided=args.value_guided,
            value_head=value_head,
            progress=not args.no_progress,
            generator=generator,
            save_episodes=args.save_episodes,
            task_indices=indices,
        )
        engine = generator.describe()
    finally:
        generator.close()  # the engine and any temporary weights go now, on errors too
    from agentr1_gym.evaluation import print_result

    print_result({"model": args.model, "adapter": args.adapter, "engine": engine, **summary}, args.json)
    return 0


def split_env_kwargs(
    env: Any, env_kwargs: dict[str, Any], evaluates: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The env kwargs to train with and to evaluate with: an env with a fixed task list trains on its training
    part and is evaluated on its held-out part (``ToolEnv.kwargs_for_split``); a split the user gave is kept for
    training. Procedural envs train and evaluate on the same kwargs (held-out seeds are held-out tasks).
    ``evaluates``: whether the run evaluates at all (what it prints says so)."""
    train = env.kwargs_for_split(env_kwargs, "train")
    held = env.kwargs_for_split(env_kwargs, "test")
    if held != train and "envs" not in env_kwargs:
        own = ", ".join(f"{k}={v}" for k, v in env.split_kwargs("test").items())
        print(
            f"training on the env's training tasks, evaluating on its held-out tasks ({own})"
            if evaluates
            else "training on the env's training tasks (no held-out evaluation: --eval-episodes 0)",
            flush=True,
        )
    return train, held


def held_out_eval(
    config: Any,
    model: Any,
    tokenizer: Any,
    episodes: int,
    label: str,
    generator: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    save_episodes: str | None = None,
    step: int | None = None,
) -> dict[str, Any] | None:
    """Greedy evaluation of the policy on the held-out seeds (None when ``episodes`` is 0), with ``env_kwargs``
    (default: the training env's), which for envs with a fixed task list select its held-out part."""
    if episodes <= 0:
        return None
    kwargs = config.env_kwargs if env_kwargs is None else env_kwargs
    from agentr1_gym.mixture import mixture_components

    # a mixture: each env on its own held-out seeds, reported apart
    runs = mixture_components(kwargs) or [("", config.env_id, kwargs)]
    was_training = model.training
    model.eval()
    results = {}
    settings = EvalSettings(
        episodes=episodes,
        seed=EVAL_SEED,
        max_new_tokens=config.max_new_tokens_per_turn,
        max_episode_tokens=config.max_episode_tokens,
        save_episodes=save_episodes,
        save_step=step,
    )
    for name, env_id, env_kw in runs:
        source = f"held-out {label}{' on ' + name if name else ''}"
        result = evaluate_model(
            env_id, model, tokenizer, settings, env_kwargs=env_kw, save_source=source, generator=generator
        )
        results[name] = result
        print(
            f"held-out {label}{' on ' + name if name else ''} ({episodes} episodes, seeds {EVAL_SEED}+, greedy): "
            f"success {result['success']:.3f}, format-valid {result.get('format_ok', 0.0):.3f}, mean return "
            f"{result['return']:.3f}",
            flush=True,
        )
    if was_training:
        model.train()
    if len(runs) == 1:
        return results[""]
    from agentr1_gym.evaluation import summarize

    keys = ("success", "score", "format_ok", "return", "turns")  # the mean over the envs, each counted once
    mean = summarize([{k: r.get(k, 0.0) for k in keys} for r in results.values()])
    return {**mean, "episodes": episodes * len(results), "per_env": results}
