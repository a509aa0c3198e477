"""``agentr1 train``: GRPO or PPO with LoRA on an AgentR1 env, from flags and/or a YAML config.

Registered into the ``agentr1`` command through the ``agentr1.commands`` entry point, so the core package never
imports the adapter. With ``--warm-start N`` (default 32) the LoRA adapter is first fitted to N oracle transcripts
of the env (masked NLL, :mod:`agentr1_trl.sft`): the plain SmolLM2-135M-Instruct almost never writes a well-formed
tool call, and RL cannot learn from a batch whose episodes all score the same. Writes ``OUTPUT_DIR/adapter`` (the LoRA adapter, the tokenizer and, for PPO, the value head),
``metrics.jsonl`` (the trainer's log history) and ``reward_curve.png``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from agentr1_gym.errors import ConfigError
from agentr1_trl.backends.factory import BACKENDS
from agentr1_trl.model_eval import EVAL_EPISODES, EVAL_SEED
from agentr1_trl.pipeline import RunPlan, run_training
from agentr1_trl.presets import MAIN_JOB, MAIN_JOB_ENV
from agentr1_trl.run_dir import RUN_FILE, merge_resume_overrides, read_run_file

#: the trainer config's defaults of a new run (the main job's; :data:`agentr1_trl.presets.MAIN_JOB`)
DEFAULTS: dict[str, Any] = dict(MAIN_JOB.trainer)

__all__ = ["DEFAULTS", "add_engine_flags", "add_eval_flags", "cmd_train", "positive_seconds", "register"]


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _load_yaml(path: str) -> dict[str, Any]:
    import yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(exc, 'problem', exc)})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} must hold a mapping of config fields, not {type(loaded).__name__}")
    return loaded


def _env_kwargs(text: str | None, env_id: str) -> dict[str, Any]:
    if text is None:
        return MAIN_JOB.env_kwargs_for(env_id)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"--env-kwargs must be a JSON object, e.g. '{{\"max_turns\": 4}}' ({exc})"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line sets explicitly (flag -> setting name); flags left out are absent."""
    given: dict[str, Any] = {}
    for flag, key in (
        ("algo", "algo"),
        ("model", "model"),
        ("lora_r", "lora_r"),
        ("lora_layers", "lora_layers"),
        ("warm_start", "warm_start"),
        ("max_steps", "max_steps"),
        ("env", "env_id"),
        ("backend", "generation_backend"),
        ("vllm_sync", "vllm_sync"),
        ("vllm_timeout", "vllm_timeout_s"),
        ("output_dir", "output_dir"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            given[key] = value
    env_args = getattr(args, "env_arg", None) or []
    if (
        args.env_kwargs is not None or env_args
    ):  # --env-arg K=V on top of the JSON object (or the env's defaults)
        from agentr1_gym.cli import parse_kv

        base = _env_kwargs(args.env_kwargs, given.get("env_id", MAIN_JOB_ENV))
        given["env_kwargs"] = {**base, **parse_kv(env_args)}
    if getattr(args, "mix", None):
        if "env_id" in given:
            raise ConfigError("give --mix or --env, not both")
        from agentr1_gym.mixture import parse_mix

        given["env_id"] = "AgentR1/Mixture-v0"
        given["env_kwargs"] = {**given.get("env_kwargs", {}), "envs": parse_mix(args.mix)}
    if args.vllm_server:
        given.update(generation_backend="vllm", vllm_mode="server", vllm_server_urls=list(args.vllm_server))
    _agent_flags(args, given)
    return given


def _agent_flags(args: argparse.Namespace, given: dict[str, Any]) -> None:
    """``--agent``, ``--tasks`` and ``--eval-tasks`` as settings: a task file is ``agent_tasks``; an env id is the
    run's env (its warm start, its held-out seeds)."""
    agent, tasks, eval_tasks = (getattr(args, k, None) for k in ("agent", "tasks", "eval_tasks"))
    if (tasks or eval_tasks) and not agent and "agent" not in given:
        raise ConfigError("--tasks and --eval-tasks go with --agent MODULE:FUNCTION")
    if agent is not None:
        given["agent"] = agent
    if tasks is not None:
        if tasks.endswith(".jsonl") or Path(tasks).is_file():
            if not Path(tasks).is_file():
                raise ConfigError(f"--tasks: no file {tasks}")
            given["agent_tasks"] = str(Path(tasks).resolve())
        else:
            if "env_id" in given and given["env_id"] != tasks:
                raise ConfigError("give the env as --tasks ENV_ID or --env, not both")
            given["env_id"] = tasks
    if eval_tasks is not None:
        if not Path(eval_tasks).is_file():
            raise ConfigError(f"--eval-tasks: no file {eval_tasks}")
        given["agent_eval_tasks"] = str(Path(eval_tasks).resolve())


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Flags, then the YAML config, then ``--set``: each wins over the one before."""
    overrides = _given_flags(args)
    if args.config:
        overrides.update(_load_yaml(args.config))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        overrides[key.strip()] = _value(value)
    return overrides


def _apply_credit(args: argparse.Namespace, overrides: dict[str, Any], algo: Any) -> None:
    """``--credit trajectory|step`` as the algorithm's own setting (a --set/--config of that setting wins)."""
    from agentr1_trl.estimators import credit_choice

    if getattr(args, "credit", None) is None or algo not in ("grpo", "ppo"):
        return
    key, value = credit_choice(algo, args.credit)
    overrides.setdefault(key, value)


def _plan(args: argparse.Namespace) -> tuple[dict[str, Any], Any, Path | None, list[str]]:
    """The run's flat settings (config fields plus algo, model, lora_r, lora_layers, warm_start), what to resume
    from (None, True or a checkpoint path), the record it resumes (None for a new run) and the changes applied to
    it."""
    overrides = _overrides(args)
    resume = overrides.pop("resume_from_checkpoint", None)
    if args.resume is None:
        _apply_credit(args, overrides, overrides.get("algo", MAIN_JOB.run["algo"]))
        settings = {**MAIN_JOB.settings(), **overrides}
        settings.setdefault("env_kwargs", _env_kwargs(None, settings["env_id"]))
        if getattr(args, "context", None) is not None:
            settings["env_kwargs"] = {**settings["env_kwargs"], "context": _context(args.context)}
        settings.setdefault("output_dir", f"runs/agentr1-{settings['algo']}")
        return settings, resume, None, []
    if args.resume is True:
        run_dir = Path(args.output_dir or f"runs/agentr1-{args.algo or MAIN_JOB.run['algo']}")
    else:
        run_dir = Path(args.resume)
        if not run_dir.exists():
            raise ConfigError(f"nothing to resume: {run_dir} does not exist")
    run_file = run_dir / RUN_FILE
    saved = read_run_file(run_file)
    _apply_credit(args, overrides, overrides.get("algo", saved["algo"]))
    flat = {**saved["settings"], **{k: saved[k] for k in ("algo", "model", "lora_r", "warm_start")}}
    flat["lora_layers"] = saved.get("lora_layers", 0)  # records from before the field: every layer
    if getattr(args, "context", None) is not None:  # a change is refused below, as any env_kwargs change is
        base = overrides.get("env_kwargs", saved["settings"]["env_kwargs"])
        overrides["env_kwargs"] = {**base, "context": _context(args.context)}
    was = saved["settings"].get("output_dir")
    moved = (
        [f"the run moved: it was in {was}, it continues in {run_dir}"]
        if was is not None and Path(str(was)).resolve() != run_dir.resolve()
        else []
    )
    settings, changes = merge_resume_overrides(run_dir, flat, overrides)
    return settings, resume or True, run_file, moved + changes


def _context(text: str) -> str:
    """``--context``, checked now (one line), before any model loads."""
    from agentr1_gym.context import parse_context

    try:
        parse_context(text)
    except ValueError as exc:
        raise ConfigError(f"--context: {exc}") from None
    return text


def cmd_train(args: argparse.Namespace) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    settings, resume, run_file, changes = _plan(args)
    eval_episodes = args.eval_episodes
    if run_file is not None:  # a resumed run evaluates as many episodes as it was started with
        recorded = json.loads(run_file.read_text(encoding="utf-8")).get("eval_episodes")
        if eval_episodes is None:
            eval_episodes = recorded
        elif recorded is not None and eval_episodes != recorded:
            changes.append(f"eval_episodes {recorded} -> {eval_episodes}")
    if eval_episodes is None:
        eval_episodes = EVAL_EPISODES
    if isinstance(eval_episodes, bool) or not isinstance(eval_episodes, int) or eval_episodes < 0:
        raise ConfigError(f"--eval-episodes must be a whole number >= 0, got {eval_episodes!r}")
    plan = RunPlan(
        algo=settings.pop("algo"),
        model=settings.pop("model"),
        lora_r=settings.pop("lora_r"),
        lora_layers=settings.pop("lora_layers", 0),
        warm_start=settings.pop("warm_start"),
        settings=settings,
        resume=resume,
        run_file=run_file,
        changes=changes,
        eval_episodes=eval_episodes,
        overwrite=bool(getattr(args, "overwrite", False)),
        json_path=getattr(args, "json", None),
    )
    if plan.overwrite and plan.resume:
        raise ConfigError("--overwrite starts a run over and --resume continues it: give one")
    return run_training(plan)


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def add_engine_flags(p: Any, *, training: bool) -> None:
    """``--backend``, ``--vllm-server`` and ``--vllm-timeout``, for ``train`` and ``eval --model`` alike. For
    ``train`` their defaults are None (a given flag is told apart from a default, which ``--resume`` needs)."""
    what = "rollout engine" if training else "with --model: generation engine"
    p.add_argument(
        "--backend",
        default=None if training else "auto",
        choices=list(BACKENDS),
        help=f"{what} (default auto: vLLM in this process when installed, else Hugging Face generate)",
    )
    p.add_argument(
        "--vllm-server",
        action="append",
        default=[],
        metavar="URL",
        help="generate on these vllm serve servers instead of in this process (repeatable; implies --backend "
        "vllm" + (", vllm_mode=server)" if training else ")"),
    )
    p.add_argument(
        "--vllm-timeout",
        type=positive_seconds,
        default=None if training else 600.0,
        metavar="S",
        help="with --vllm-server: the total deadline of one call to a server, retries included (default 600"
        + ("; config field vllm_timeout_s)" if training else ")"),
    )


def add_eval_flags(group: Any) -> None:
    """``agentr1 eval --model``'s flags (the ``agentr1.eval_options`` entry point: the core CLI adds them)."""
    group.add_argument(
        "--adapter", default=None, help="LoRA adapter directory for --model (from agentr1 train)"
    )
    group.add_argument(
        "--baseline",
        default="tool",
        choices=["tool", "naive-rag"],
        help="'tool' (Base Tool Call, default) or 'naive-rag' (one search with the question, then an answer; "
        "an untagged reply is scored whole)",
    )
    group.add_argument(
        "--value-guided",
        type=int,
        default=0,
        metavar="N",
        help="with a PPO adapter: sample N candidate turns, keep the highest-value one",
    )
    group.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens per turn (default: the run's own with an --adapter from agentr1 train, else 128)",
    )
    group.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    add_engine_flags(group, training=False)


def register(subparsers: Any) -> None:
    """Add ``train`` to the ``agentr1`` command."""
    p = subparsers.add_parser(
        "train",
        help="train a LoRA policy with GRPO or PPO on an AgentR1 env (default: SmolLM2-135M-Instruct "
        "on AgentR1/SyntheticMultihop-v0: at most about 12 minutes on 2 CPU cores with AVX512-BF16; longer on a busy "
        "or AVX2-only machine)",
    )
    _env_flags(p)
    _run_flags(p)
    p.set_defaults(func=cmd_train)


def _env_flags(p: Any) -> None:
    p.add_argument(
        "--env",
        default=None,
        help="env id (default AgentR1/SyntheticMultihop-v0, the synthetic env): any registered agentr1 env, or "
        "'your_module:Namespace/Name-v0' for one your module registers",
    )
    p.add_argument(
        "--mix",
        default=None,
        metavar="ID=W,ID=W",
        help="train on a weighted mixture of envs (AgentR1/Mixture-v0): each GRPO group is one env's task; "
        "metrics and the held-out evaluation are reported per env",
    )
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env keyword argument (repeatable), as in agentr1 eval and play, e.g. --env-arg max_turns=4; on top of "
        'the env\'s defaults (the synthetic env: {"max_hops": 1, "max_turns": 3}; other envs: their own)',
    )
    p.add_argument(
        "--env-kwargs",
        default=None,
        metavar="JSON",
        help="the same as one JSON object (--env-arg pairs go on top of it)",
    )
    p.add_argument(
        "--context",
        default=None,
        metavar="POLICY",
        help="what the agent sees each step: full (the whole chat; the default), window:K (the task and the last K "
        "turns: each step is its own training row, bounded by the window), or state (the world's compact state, "
        "for envs with state_text()); stored in the run's env_kwargs, so a resume keeps it",
    )
    p.add_argument(
        "--agent",
        default=None,
        metavar="MODULE:FUNCTION",
        help="train your own agent: an `async def rollout(client, task)` that runs it with the given "
        "openai.AsyncOpenAI client (its calls go through a recording endpoint) and returns its reward; GRPO only",
    )
    p.add_argument(
        "--tasks",
        default=None,
        metavar="FILE.jsonl|ENV_ID",
        help="with --agent: the tasks (a JSONL file, one JSON object per line; or an env id, whose tasks the agent "
        "plays through agentr1_trl.agent_loop.EnvSession; default: --env)",
    )
    p.add_argument(
        "--eval-tasks",
        default=None,
        metavar="FILE.jsonl",
        help="with --agent and a task file: held-out tasks for the evaluations before and after RL",
    )
    p.add_argument("--algo", default=None, choices=["grpo", "ppo"], help="default grpo")
    p.add_argument(
        "--credit",
        default=None,
        choices=["trajectory", "step"],
        help="credit assignment: 'trajectory' (default: one advantage per episode for GRPO, token-level GAE for "
        "PPO) or 'step' (each turn its own advantage: GRPO advantage_estimator=gigpo, PPO gae_level=step; "
        "--set advantage_estimator=turn_rloo for the per-turn leave-one-out baseline)",
    )
    add_engine_flags(p, training=True)
    p.add_argument(
        "--vllm-sync",
        default=None,
        choices=["auto", "merged", "lora"],
        help="vLLM weight sync (default auto: merged on CPUs, lora on GPUs)",
    )


def _run_flags(p: Any) -> None:
    p.add_argument(
        "--model",
        default=None,
        help="'smollm2' (the offline default policy, the default) or a local model dir",
    )
    p.add_argument("--output-dir", default=None, help="default runs/agentr1-ALGO")
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default 30)")
    p.add_argument("--lora-r", type=int, default=None, help="LoRA rank (default 16, on q_proj and v_proj)")
    p.add_argument(
        "--lora-layers",
        type=int,
        default=None,
        metavar="K",
        help="LoRA on the top K decoder layers only; the backward pass stops below them (default 0: every layer)",
    )
    p.add_argument(
        "--warm-start",
        type=int,
        default=None,
        metavar="N",
        help="fit the adapter to N oracle transcripts (seeds 200000+, 3 epochs) before RL (default 32; 0: none)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="YAML file of AgentGRPOConfig/AgentPPOConfig fields (and algo, "
        "model, lora_r, lora_layers, warm_start); its fields win over the flags, --set wins over both",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config field, e.g. --set learning_rate=1e-4 (repeatable)",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        metavar="N",
        help=f"greedy evaluation on N held-out seeds ({EVAL_SEED}+, never trained on) before and after RL "
        f"(default {EVAL_EPISODES}; 0: none; a resumed run keeps its own)",
    )
    p.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the run's result (held-out success before and after RL, steps, outputs) to FILE",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output dir that holds an earlier run (its checkpoints and outputs are removed); "
        "without it such a dir is refused",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="DIR",
        help="continue a killed or finished run from its newest complete checkpoint, in DIR (its directory, "
        "wherever it was moved; default runs/agentr1-grpo), with the settings it was started with. Flags, "
        "--config and --set change what can change (e.g. --set max_steps=60, --set learning_rate=1e-4, "
        "--vllm-server URL; each change is printed) and are refused, before anything is written, where they "
        "would change what the run is (--algo, --model, --lora-r, --lora-layers, --warm-start, --env, "
        "--env-arg/--env-kwargs)",
    )
