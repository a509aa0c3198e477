"""TRL's own GRPOTrainer on our env through a rollout_func: multi-turn, token-exact, with the action mask.

python examples/stock_trl_rollout_func.py [--model smollm2] [--max-steps 20]
"""

from __future__ import annotations

from _common import parse, policy


def main() -> None:
    args = parse(__doc__.split("\n\n")[0], output_dir="runs/stock-rollout-func")
    from agentr1_trl.stock_trl import component_reward, env_return, make_rollout_func, prompt_dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    env_id, env_kwargs, seeds = "AgentR1/SyntheticMultihop-v0", {"max_hops": 1, "max_turns": 3}, range(64)
    model, tokenizer = policy(args.model)
    trainer = GRPOTrainer(
        model=model,
        # the episode return is the reward; the retrieval component is logged only (weight 0)
        reward_funcs=[env_return, component_reward("retrieval")],
        args=GRPOConfig(
            output_dir=args.output_dir,
            per_device_train_batch_size=8,
            num_generations=4,
            max_steps=args.max_steps,
            reward_weights=[1.0, 0.0],
            learning_rate=1e-4,
            save_strategy="no",
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=False,
        ),
        processing_class=tokenizer,
        train_dataset=prompt_dataset(env_id, seeds, env_kwargs),
        rollout_func=make_rollout_func(
            env_id, seeds, env_kwargs=env_kwargs, max_new_tokens_per_turn=args.max_new_tokens
        ),
        peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    print("final reward:", [h.get("reward") for h in trainer.state.log_history if "loss" in h][-1])


if __name__ == "__main__":
    main()
