"""TRL's own GRPOTrainer with our env as an environment_factory: TRL runs the tool calls (the env's tools as
typed methods plus an `answer` tool); the env's episode return is the reward.

    python examples/stock_trl_environment_factory.py [--model smollm2] [--max-steps 20]
"""

from __future__ import annotations

from _common import parse, policy


def main() -> None:
    args = parse(__doc__.split("\n\n")[0], output_dir="runs/stock-environment-factory")
    from agentr1_trl.stock_trl import environment_dataset, make_environment_factory
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = policy(args.model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=None,  # the environment's get_reward()
        args=GRPOConfig(
            output_dir=args.output_dir,
            per_device_train_batch_size=8,
            num_generations=4,
            max_steps=args.max_steps,
            max_completion_length=4 * args.max_new_tokens,
            learning_rate=1e-4,
            save_strategy="no",
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=False,
        ),
        processing_class=tokenizer,
        train_dataset=environment_dataset(range(64)),  # empty prompts: reset() writes each task's prompt
        environment_factory=make_environment_factory("AgentR1/SyntheticMultihop-v0", max_hops=1, max_turns=3),
        peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    print("final reward:", [h.get("reward") for h in trainer.state.log_history if "loss" in h][-1])


if __name__ == "__main__":
    main()
