"""One optimisation step of AgentGRPOTrainer and AgentPPOTrainer vs TRL's stock GRPOTrainer on the same model,
batch and tokens.

    python benchmarks/trainer_step.py [--steps 6] [--hidden 64] [--json out.json]          # tiny random Qwen2
    python benchmarks/trainer_step.py --model smollm2 --steps 2 --generations 4 [--json out.json]

Both trainers run the same multi-turn episodes on ``AgentR1/SyntheticMultihop-v0``: a scripted generator
replays the same turns for both, so the token counts are identical; the stock trainer gets them through our
``rollout_func`` bridge. Each trainer runs in its own subprocess (so peak memory is its own), with LoRA, the same
seed, ``num_generations`` episodes per group. The first step is warm-up and not timed. Reports mean seconds
per step, completion tokens per step, peak RSS, and the time ratio AgentGRPOTrainer / GRPOTrainer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

ENV = "AgentR1/SyntheticMultihop-v0"


def _script(prompt_ids, i):
    return (
        "<answer>Nobody</answer>"
        if i % 2 == 0
        else "<think>I am not sure what to do next, so I think</think>"
    )


def worker(name: str, steps: int, hidden: int, generations: int, model_name: str = "tiny") -> dict:
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    from _common import step_timer
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.algorithms import trainer_classes
    from agentr1_trl.stock_trl import env_return, make_rollout_func, prompt_dataset
    from agentr1_trl.testing import tiny_model, tiny_tokenizer
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    if model_name == "smollm2":
        from agentr1_trl.models import load_default_policy

        torch.manual_seed(0)
        model, tok = load_default_policy()
    else:
        tok = tiny_tokenizer()
        model = tiny_model(tok, hidden_size=hidden, seed=0)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    common = dict(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=generations,
        num_generations=generations,
        max_steps=steps + 1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        beta=0.04,
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    env_kwargs = {"max_turns": 4}
    times: list[float] = []

    if name in ("AgentPPOTrainer", "AgentGRPOTrainer"):
        Config, Trainer = trainer_classes("ppo" if name == "AgentPPOTrainer" else "grpo")
        args = Config(
            **common, env_id=ENV, env_kwargs=env_kwargs, max_new_tokens_per_turn=32, max_episode_tokens=2048
        )
        trainer = Trainer(
            model,
            args,
            tok,
            peft_config=lora,
            generator=ScriptedGenerator(tok, _script),
            callbacks=[step_timer(times)],
        )
    else:
        seeds = range(1000)
        rollout = make_rollout_func(
            ENV,
            seeds,
            env_kwargs=env_kwargs,
            max_new_tokens_per_turn=32,
            max_episode_tokens=2048,
            generator_factory=lambda trainer: ScriptedGenerator(tok, _script),
        )
        args = GRPOConfig(**common, max_completion_length=2048)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[env_return],
            args=args,
            processing_class=tok,
            train_dataset=prompt_dataset(ENV, seeds, env_kwargs),
            rollout_func=rollout,
            peft_config=lora,
            callbacks=[step_timer(times)],
        )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    tokens = [h["completions/mean_length"] * generations for h in logs]
    return {
        "trainer": name,
        "sec_per_step": sum(times[1:]) / len(times[1:]),
        "step_times": times,
        "generated_tokens_per_step": sum(tokens) / len(tokens),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "params": sum(p.numel() for p in trainer.model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps (after one warm-up step)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the tiny Qwen2 model")
    parser.add_argument("--generations", type=int, default=8, help="episodes per step (one group)")
    parser.add_argument(
        "--model",
        default="tiny",
        choices=["tiny", "smollm2"],
        help="tiny random Qwen2 or SmolLM2-135M-Instruct",
    )
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.steps, args.hidden, args.generations, args.model)))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import emit, machine_info

    runs = {}
    for name in ("AgentGRPOTrainer", "GRPOTrainer", "AgentPPOTrainer"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                name,
                "--steps",
                str(args.steps),
                "--hidden",
                str(args.hidden),
                "--generations",
                str(args.generations),
                "--model",
                args.model,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        runs[name] = json.loads(out.stdout.strip().splitlines()[-1])
    result = {
        "benchmark": "trainer_step",
        "machine": machine_info("agentr1-gym", "torch", "transformers", "trl", "peft"),
        "env": ENV,
        "model": args.model,
        "runs": runs,
        "time_ratio_agent_over_stock": round(
            runs["AgentGRPOTrainer"]["sec_per_step"] / runs["GRPOTrainer"]["sec_per_step"], 3
        ),
        "time_ratio_ppo_over_stock_grpo": round(
            runs["AgentPPOTrainer"]["sec_per_step"] / runs["GRPOTrainer"]["sec_per_step"], 3
        ),
        "same_tokens": len({r["generated_tokens_per_step"] for r in runs.values()}) == 1,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
