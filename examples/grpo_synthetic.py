"""GRPO with action masks and LoRA on the synthetic k-hop env: the smallest complete training script.

python examples/grpo_synthetic.py [--model smollm2] [--max-steps 20] [--output-dir runs/grpo-synthetic]
"""

from __future__ import annotations

from _common import parse, policy


def main() -> None:
    args = parse(__doc__.split("\n\n")[0], output_dir="runs/grpo-synthetic")
    from agentr1_trl import AgentGRPOConfig, AgentGRPOTrainer
    from peft import LoraConfig

    model, tokenizer = policy(args.model)
    config = AgentGRPOConfig(
        output_dir=args.output_dir,
        env_id="AgentR1/SyntheticMultihop-v0",
        env_kwargs={"max_hops": 1, "max_turns": 3},
        num_generations=4,  # episodes per task: the GRPO group
        per_device_train_batch_size=8,  # two tasks per step
        max_steps=args.max_steps,
        max_new_tokens_per_turn=args.max_new_tokens,
        learning_rate=1e-4,
        beta=0.0,
        generation_backend=args.backend,
        dynamic_sampling=True,  # regenerate groups whose outcome does not vary
        save_strategy="no",
        logging_steps=1,
        report_to="none",
    )
    trainer = AgentGRPOTrainer(
        model, config, tokenizer, peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    )
    trainer.train()
    trainer.save_model(f"{args.output_dir}/adapter")
    print("final env/success:", [h.get("env/success") for h in trainer.state.log_history if "loss" in h][-1])


if __name__ == "__main__":  # vLLM's engine needs the guard
    main()
