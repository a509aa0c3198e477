"""PPO (value head, GAE over action tokens) on HotpotQA's bundled train sample with the in-process BM25 search.

    python examples/ppo_hotpotqa.py [--model smollm2] [--max-steps 20] [--output-dir runs/ppo-hotpotqa]

For a shared retrieval server (several trainer processes or machines), start `agentr1 serve-retriever --env
AgentR1/HotpotQA-v0` and add `"retriever": "http", "server_url": "http://HOST:8000"` to env_kwargs.
"""

from __future__ import annotations

from _common import parse, policy


def main() -> None:
    args = parse(__doc__.split("\n\n")[0], output_dir="runs/ppo-hotpotqa")
    from agentr1_trl import AgentPPOConfig, AgentPPOTrainer
    from peft import LoraConfig

    model, tokenizer = policy(args.model)
    config = AgentPPOConfig(
        output_dir=args.output_dir,
        env_id="AgentR1/HotpotQA-v0",
        env_kwargs={"split": "train", "max_turns": 4},
        num_generations=2,
        per_device_train_batch_size=4,
        max_steps=args.max_steps,
        max_new_tokens_per_turn=args.max_new_tokens,
        learning_rate=1e-4,
        critic_warmup_steps=1,  # the value head learns alone first
        generation_backend=args.backend,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
    )
    trainer = AgentPPOTrainer(
        model, config, tokenizer, peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    )
    trainer.train()
    trainer.save_model(f"{args.output_dir}/adapter")  # the value head is saved beside it (value_head.pt)
    print("final env/f1:", [h.get("env/f1") for h in trainer.state.log_history if "loss" in h][-1])


if __name__ == "__main__":
    main()
