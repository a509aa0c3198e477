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
import sys
from pathlib import Path
from typing import Any

from agentr1_gym.cli import positive_seconds
from agentr1_gym.episodes import EPISODES_FILE
from agentr1_gym.errors import ConfigError, NoOracleError
from agentr1_trl.runs import (
    RUN_FILE,
    check_checkpoint_matches,
    merge_resume_overrides,
    read_run_file,
    write_run_file,
)

__all__ = ["cmd_train", "plot_reward_curve", "register"]

DEFAULTS: dict[str, Any] = {
    # two task seeds x four episodes per optimizer step, through the update four at a time: one pass of eight
    # episodes held 4-5 GB of activations and took the main job past 8 GB peak RSS; two passes of four give the
    # same update (the dapo loss divides by the whole batch's action tokens) within 6 GB
    # (benchmarks/results/main_job.json)
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "num_generations": 4,
    # a 135M model's activations fit in memory without checkpointing, and without it the forward pass runs each
    # group's shared prompt once (share_prompt_prefix; benchmarks/update_step.py)
    "gradient_checkpointing": False,
    # chosen on validation seeds (300000+, benchmarks/learning.py --eval-seed), never on the held-out ones
    # (benchmarks/results/lr_selection.json)
    "learning_rate": 5e-4,
    "lr_scheduler_type": "constant",
    "beta": 0.0,
    # off: at a fixed wall-clock budget, plain GRPO learned more than with regenerated flat groups
    # (benchmarks/results/learning_fast.json); --set dynamic_sampling=true turns it on
    "dynamic_sampling": False,
    "max_new_tokens_per_turn": 48,
    "max_episode_tokens": 1536,
    "logging_steps": 1,
    # a checkpoint after every step, the last two kept: a killed run loses at most the step in progress
    "save_strategy": "steps",
    "save_steps": 1,
    "save_total_limit": 2,
    "report_to": "none",
    # at 1.0 the warm-started 135M model breaks the tool-call format in most sampled turns (see benchmarks/learning.py)
    "temperature": 0.7,
}
WARM_START_EPOCHS = 3
#: the warm start's learning rate (fixed: a stronger fit leaves RL nothing to learn on the 1-hop task, a weaker
#: one leaves the format broken)
WARM_START_LR = 2e-4
#: held-out evaluation seeds (training uses seed_offset + [0, num_tasks), the warm start 200000+)
EVAL_SEED = 100_000
EVAL_EPISODES = 100


def split_env_kwargs(env: Any, env_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The env kwargs to train with and to evaluate with: an env with a fixed task list trains on its training
    part and is evaluated on its held-out part (``ToolEnv.kwargs_for_split``); a split the user gave is kept for
    training. Procedural envs train and evaluate on the same kwargs (held-out seeds are held-out tasks)."""
    train = env.kwargs_for_split(env_kwargs, "train")
    held = env.kwargs_for_split(env_kwargs, "test")
    if held != train and "envs" not in env_kwargs:
        own = env.split_kwargs("test")
        print(
            f"training on the env's training tasks, evaluating on its held-out tasks "
            f"({', '.join(f'{k}={v}' for k, v in own.items())})",
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
    from agentr1_trl.model_eval import evaluate_model

    kwargs = config.env_kwargs if env_kwargs is None else env_kwargs
    runs = [("", config.env_id, kwargs)]
    if "envs" in kwargs:  # a mixture: each env on its own held-out seeds, reported apart
        from agentr1_gym.mixture import _short

        shared = {k: v for k, v in kwargs.items() if k != "envs"}
        runs = [
            (e.get("name") or _short(e["id"]), e["id"], {**shared, **(e.get("kwargs") or {})})
            for e in (x if isinstance(x, dict) else {"id": x} for x in kwargs["envs"])
        ]
    was_training = model.training
    model.eval()
    results = {}
    for name, env_id, env_kw in runs:
        result = evaluate_model(
            env_id,
            model,
            tokenizer,
            episodes=episodes,
            seed=EVAL_SEED,
            env_kwargs=env_kw,
            max_new_tokens=config.max_new_tokens_per_turn,
            generator=generator,
            max_episode_tokens=config.max_episode_tokens,
            save_episodes=save_episodes,
            save_source=f"held-out {label}{' on ' + name if name else ''}",
            save_step=step,
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
    keys = ("success", "score", "format_ok", "return", "turns")
    mean = {k: float(sum(r.get(k, 0.0) for r in results.values()) / len(results)) for k in keys}
    return {**mean, "episodes": episodes * len(results), "per_env": results}


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


#: the main job's env settings (1-hop questions, 3 turns); other envs start from their own defaults
MAIN_JOB_ENV = "AgentR1/SyntheticMultihop-v0"
MAIN_JOB_ENV_KWARGS: dict[str, Any] = {"max_hops": 1, "max_turns": 3}


def _env_kwargs(text: str | None, env_id: str) -> dict[str, Any]:
    if text is None:
        return dict(MAIN_JOB_ENV_KWARGS) if env_id == MAIN_JOB_ENV else {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"--env-kwargs must be a JSON object, e.g. '{{\"max_turns\": 4}}' ({exc})"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _check_field_types(config_cls: Any, settings: dict[str, Any]) -> None:
    """Refuse unknown fields (with a hint) and values of the wrong type before any model is loaded: a dataclass
    config would take ``learning_rate="abc"`` and fail deep inside the optimizer."""
    import dataclasses
    import difflib
    import types
    import typing

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for key, value in settings.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config field {key!r}{hint}")
        hint_type = hints.get(key)
        args = typing.get_args(hint_type)
        allowed = (
            set(args) if typing.get_origin(hint_type) in (typing.Union, types.UnionType) else {hint_type}
        )
        if value is None and type(None) in allowed:
            continue
        scalar = {t for t in allowed if t in (int, float, bool, str)}
        if not scalar or len(scalar) < len(allowed - {type(None)}):
            continue  # lists, dicts, enums, literals: left to the config's own checks
        ok = (
            (bool in scalar and isinstance(value, bool))
            or (int in scalar and isinstance(value, int) and not isinstance(value, bool))
            or (float in scalar and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (str in scalar and isinstance(value, str))
        )
        if not ok:
            names = " or ".join(sorted(t.__name__ for t in scalar))
            raise ConfigError(f"config field {key}={value!r}: expected {names}")


def build_config(config_cls: Any, settings: dict[str, Any]) -> Any:
    """The trainer config from CLI/YAML settings, with every problem as one ConfigError."""
    _check_field_types(config_cls, settings)
    max_steps = settings.get("max_steps")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigError(
            f"max_steps must be a whole number >= 1 (got {max_steps!r}); the env stream is endless"
        )
    try:
        return config_cls(**settings)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad config: {str(exc).strip().splitlines()[0]}") from None


def plot_reward_curve(
    log_history: list[dict[str, Any]],
    path: str | Path,
    title: str = "",
    held_out: dict[str, tuple[int, dict[str, Any] | None]] | None = None,
) -> None:
    """Reward (and env success / format rates where logged) per logged step, as a PNG; ``held_out`` adds the
    held-out success before and after RL as ``{"before": (step, result), "after": (step, result)}``."""
    held_out = held_out or {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = [h for h in log_history if "reward" in h]
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [h["step"] for h in logs]
    for key, label in (
        ("reward", "mean episode return"),
        ("env/success", "success rate"),
        ("env/format_ok", "format-valid rate"),
    ):
        if any(key in h for h in logs):
            ax.plot(steps, [h.get(key, float("nan")) for h in logs], marker="o", label=label)
    for label, marker, (step, result) in (
        ("held-out success before RL", "s", held_out.get("before", (None, None))),
        ("held-out success after RL", "D", held_out.get("after", (None, None))),
    ):
        if result is not None:
            ax.plot([step], [result["success"]], marker=marker, markersize=9, linestyle="none", label=label)
    ax.set_xlabel("optimizer step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: the flags' defaults for a new run (argparse leaves them None, so that a given flag can be told apart)
FLAG_DEFAULTS: dict[str, Any] = {
    "algo": "grpo",
    "model": "smollm2",
    "lora_r": 16,
    "warm_start": 32,
    "max_steps": 30,
    "env_id": MAIN_JOB_ENV,
}


def _given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line sets explicitly (flag -> setting name); flags left out are absent."""
    given: dict[str, Any] = {}
    for flag, key in (
        ("algo", "algo"),
        ("model", "model"),
        ("lora_r", "lora_r"),
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
    if args.env_kwargs is not None:
        given["env_kwargs"] = _env_kwargs(args.env_kwargs, given.get("env_id", MAIN_JOB_ENV))
    if getattr(args, "mix", None):
        if "env_id" in given:
            raise ConfigError("give --mix or --env, not both")
        from agentr1_gym.mixture import parse_mix

        given["env_id"] = "AgentR1/Mixture-v0"
        given["env_kwargs"] = {**given.get("env_kwargs", {}), "envs": parse_mix(args.mix)}
    if args.vllm_server:
        given.update(generation_backend="vllm", vllm_mode="server", vllm_server_urls=list(args.vllm_server))
    return given


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


#: ``--credit``: the setting it selects per algorithm, and its values
CREDIT = {
    "grpo": ("advantage_estimator", {"trajectory": "grpo", "step": "gigpo"}),
    "ppo": ("gae_level", {"trajectory": "token", "step": "step"}),
}


def _apply_credit(args: argparse.Namespace, overrides: dict[str, Any], algo: Any) -> None:
    """``--credit trajectory|step`` as the algorithm's own setting (a --set/--config of that setting wins)."""
    if getattr(args, "credit", None) is None or algo not in CREDIT:
        return
    key, values = CREDIT[algo]
    overrides.setdefault(key, values[args.credit])


def _check_writable(output_dir: Path) -> None:
    """The output dir exists (made if needed) and takes files: one line if not, before any model loads."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / f".agentr1-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write to the output dir {output_dir}: {exc.strerror or exc}") from None


def _plan(args: argparse.Namespace) -> tuple[dict[str, Any], Any, Path | None, list[str]]:
    """The run's flat settings (config fields plus algo, model, lora_r, warm_start), what to resume from (None,
    True or a checkpoint path), the record it resumes (None for a new run) and the changes applied to it."""
    overrides = _overrides(args)
    resume = overrides.pop("resume_from_checkpoint", None)
    if args.resume is None:
        _apply_credit(args, overrides, overrides.get("algo", FLAG_DEFAULTS["algo"]))
        settings = {**DEFAULTS, **FLAG_DEFAULTS, **overrides}
        settings.setdefault("env_kwargs", _env_kwargs(None, settings["env_id"]))
        settings.setdefault("output_dir", f"runs/agentr1-{settings['algo']}")
        return settings, resume, None, []
    if args.resume is True:
        run_dir = Path(args.output_dir or f"runs/agentr1-{args.algo or FLAG_DEFAULTS['algo']}")
    else:
        run_dir = Path(args.resume)
        if not run_dir.exists():
            raise ConfigError(f"nothing to resume: {run_dir} does not exist")
    run_file = run_dir / RUN_FILE
    saved = read_run_file(run_file)
    _apply_credit(args, overrides, overrides.get("algo", saved["algo"]))
    flat = {**saved["settings"], **{k: saved[k] for k in ("algo", "model", "lora_r", "warm_start")}}
    was = saved["settings"].get("output_dir")
    moved = (
        [f"the run moved: it was in {was}, it continues in {run_dir}"]
        if was is not None and Path(str(was)).resolve() != run_dir.resolve()
        else []
    )
    settings, changes = merge_resume_overrides(run_dir, flat, overrides)
    return settings, resume or True, run_file, moved + changes


def cmd_train(args: argparse.Namespace) -> int:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from peft import LoraConfig

    settings, resume, run_file, changes = _plan(args)
    algo = settings.pop("algo")
    model_name = settings.pop("model")
    lora_r = settings.pop("lora_r")
    warm = settings.pop("warm_start")
    where = f"{run_file}: " if run_file is not None else ""
    if algo not in ("grpo", "ppo"):
        raise ConfigError(f"{where}algo must be grpo or ppo, got {algo!r}")
    for key, value in (("lora_r", lora_r), ("warm_start", warm)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if key == "lora_r" else 0):
            raise ConfigError(
                f"{where}{key} must be a whole number >= {1 if key == 'lora_r' else 0}, got {value!r}"
            )
    if not isinstance(model_name, str) or not model_name:
        raise ConfigError(f"{where}model must be 'smollm2' or a model directory, got {model_name!r}")
    if algo == "ppo":
        from agentr1_trl.ppo import AgentPPOConfig as Config
        from agentr1_trl.ppo import AgentPPOTrainer as Trainer
    elif algo == "grpo":
        from agentr1_trl.grpo import AgentGRPOConfig as Config  # type: ignore[assignment]
        from agentr1_trl.grpo import AgentGRPOTrainer as Trainer  # type: ignore[assignment]
    try:
        _check_field_types(Config, settings)
    except ConfigError as exc:
        raise ConfigError(f"{where}{exc}") from None
    import agentr1_gym

    # the env id and its kwargs are checked now (UnknownEnvError with the closest ids, BadArgumentError with
    # the closest keyword), not after the model has loaded
    probe = agentr1_gym.make(settings["env_id"], **settings["env_kwargs"])
    train_kwargs, eval_kwargs = split_env_kwargs(probe.unwrapped, settings["env_kwargs"])
    probe.close()
    output_dir = Path(settings["output_dir"])
    from agentr1_trl.checkpoints import resolve_resume

    config = build_config(Config, settings)
    config.env_kwargs = train_kwargs  # a fixed task list trains on its training part, evaluates on the rest
    args.eval_env_kwargs = eval_kwargs
    resume_from = resolve_resume(resume, output_dir)
    if resume is not None and resume_from is None:
        print(f"no complete checkpoint in {output_dir} yet: starting from the beginning")
    if resume_from:
        check_checkpoint_matches(resume_from, algo, lora_r)
        done = json.loads((Path(resume_from) / "trainer_state.json").read_text(encoding="utf-8"))[
            "global_step"
        ]
        if done >= int(settings["max_steps"]):
            # transformers would run one more step past max_steps; the run's outputs stay as they are
            print(
                f"{output_dir} already reached max_steps={settings['max_steps']} ({resume_from}); nothing to "
                "train. Extend it with --set max_steps=N."
            )
            return 0
    _check_writable(output_dir)
    if not resume_from:  # a new run's saved episodes start empty (a resumed run appends to its own)
        (output_dir / EPISODES_FILE).unlink(missing_ok=True)
    for change in changes:
        print(f"resume: {change}", flush=True)

    lora = LoraConfig(
        r=lora_r, lora_alpha=2 * lora_r, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    from agentr1_trl.models import load_policy

    model, tokenizer, _ = load_policy(model_name)  # after every check above: a bad flag fails in a second
    model.train()
    # written only now that the model loaded: a failed invocation never overwrites an earlier run's config,
    # which `--resume` reads
    run = {"algo": algo, "model": model_name, "lora_r": lora_r, "warm_start": warm, "settings": settings}
    if run_file is not None:  # a resumed run keeps what it recorded about itself (its engine, ...)
        run = {**json.loads(run_file.read_text(encoding="utf-8")), **run}
    write_run_file(output_dir / RUN_FILE, run)
    if resume_from:
        print(f"resuming from {resume_from} (the warm start is in its adapter)")
    if warm > 0 and not resume_from:
        from peft import get_peft_model

        from agentr1_trl.sft import oracle_samples, warm_start

        model = get_peft_model(model, lora)
        try:
            samples = oracle_samples(
                config.env_id, range(200_000, 200_000 + warm), tokenizer, env_kwargs=config.env_kwargs
            )
        except (AttributeError, NoOracleError) as exc:
            print(
                f"error: --warm-start needs an env with oracle_action() ({exc}); use --warm-start 0",
                file=sys.stderr,
            )
            return 2
        losses = warm_start(
            model,
            tokenizer,
            samples,
            epochs=WARM_START_EPOCHS,
            lr=WARM_START_LR,
            micro_batch_size=1,  # bounded memory on long transcripts (same step as the full batch)
        )
        print(f"warm start on {warm} oracle transcripts: loss per epoch {[round(x, 3) for x in losses]}")
        model.train()
        trainer = Trainer(model, config, tokenizer)
    else:
        trainer = Trainer(model, config, tokenizer, peft_config=lora)
    try:
        _train_and_report(trainer, config, tokenizer, run, output_dir, resume_from, args, algo, model_name)
    finally:
        trainer.close_generation()  # a vLLM engine and its temporary weights go now, on errors too
    return 0


def _train_and_report(
    trainer: Any,
    config: Any,
    tokenizer: Any,
    run: dict[str, Any],
    output_dir: Path,
    resume_from: str | None,
    args: argparse.Namespace,
    algo: str,
    model_name: str,
) -> None:
    """Evaluate before RL (once per run), train, evaluate after, and write the adapter, metrics and curve."""
    engine = trainer.describe_generation()
    print(f"rollouts and evaluations generate with {engine}", flush=True)
    run["engine"] = engine
    write_run_file(output_dir / RUN_FILE, run)
    before_file = output_dir / "eval_before_rl.json"
    if resume_from and before_file.is_file():
        before = json.loads(before_file.read_text(encoding="utf-8"))
    else:
        before = held_out_eval(
            config,
            trainer.model,
            tokenizer,
            args.eval_episodes,
            "before RL",
            trainer.rollout_generator(),
            getattr(args, "eval_env_kwargs", None),
            save_episodes=str(output_dir / EPISODES_FILE),
            step=0,
        )
        if before is not None:
            before_file.write_text(json.dumps(before, indent=1), encoding="utf-8")
    trainer.train(resume_from_checkpoint=resume_from)
    after = held_out_eval(
        config,
        trainer.model,
        tokenizer,
        args.eval_episodes,
        "after RL",
        trainer.rollout_generator(),
        getattr(args, "eval_env_kwargs", None),
        save_episodes=str(output_dir / EPISODES_FILE),
        step=trainer.state.global_step,
    )
    if after is not None:
        (output_dir / "eval_after_rl.json").write_text(json.dumps(after, indent=1), encoding="utf-8")
        if before is not None:
            if before["success"] > 0:
                change = f"{after['success'] / before['success']:.2f}x the RL start"
            else:
                change = "the RL start had none" if after["success"] == 0 else "up from none at the RL start"
            print(f"held-out success {before['success']:.3f} -> {after['success']:.3f} ({change})")
    adapter = output_dir / "adapter"
    trainer.save_model(str(adapter))
    tokenizer.save_pretrained(str(adapter))
    with (output_dir / "metrics.jsonl").open("w", encoding="utf-8") as f:
        for row in trainer.state.log_history:
            f.write(json.dumps(row) + "\n")
    plot_reward_curve(
        trainer.state.log_history,
        output_dir / "reward_curve.png",
        f"{algo.upper()} on {config.env_id} ({model_name})",
        held_out={"before": (0, before), "after": (trainer.state.global_step, after)},
    )
    print(f"wrote {adapter}, {output_dir / 'metrics.jsonl'} and {output_dir / 'reward_curve.png'}")


def register(subparsers: Any) -> None:
    """Add ``train`` to the ``agentr1`` command."""
    p = subparsers.add_parser(
        "train",
        help="train a LoRA policy with GRPO or PPO on an AgentR1 env (default: SmolLM2-135M-Instruct "
        "on AgentR1/SyntheticMultihop-v0, a few minutes on a CPU)",
    )
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
        "--env-kwargs",
        default=None,
        help='env keyword arguments as JSON (default for the synthetic env {"max_hops": 1, "max_turns": 3}; '
        "other envs: their own defaults)",
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
    p.add_argument(
        "--backend",
        default=None,
        choices=["auto", "hf", "vllm"],
        help="rollout engine (default auto: vLLM in this process when installed, else Hugging Face generate)",
    )
    p.add_argument(
        "--vllm-server",
        action="append",
        default=[],
        metavar="URL",
        help="generate on these vllm serve servers (repeatable; implies --backend vllm, vllm_mode=server)",
    )
    p.add_argument(
        "--vllm-timeout",
        type=positive_seconds,
        default=None,
        metavar="S",
        help="with --vllm-server: the total deadline of one call to a server, retries included (default 600; "
        "config field vllm_timeout_s)",
    )
    p.add_argument(
        "--vllm-sync",
        default=None,
        choices=["auto", "merged", "lora"],
        help="vLLM weight sync (default auto: merged on CPUs, lora on GPUs)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="'smollm2' (the offline default policy, the default) or a local model dir",
    )
    p.add_argument("--output-dir", default=None, help="default runs/agentr1-ALGO")
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default 30)")
    p.add_argument("--lora-r", type=int, default=None, help="LoRA rank (default 16, on q_proj and v_proj)")
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
        "model, lora_r, warm_start); its fields win over the flags, --set wins over both",
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
        default=EVAL_EPISODES,
        metavar="N",
        help=f"greedy evaluation on N held-out seeds ({EVAL_SEED}+, never trained on) before and after RL "
        f"(default {EVAL_EPISODES}; 0: none)",
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
        "would change what the run is (--algo, --model, --lora-r, --warm-start, --env, --env-kwargs)",
    )
    p.set_defaults(func=cmd_train)
