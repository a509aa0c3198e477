"""Run by tests/test_multiprocess.py under `torchrun --nproc_per_node 2`: a few GRPO (or PPO) steps
with the tiny model; each process saves its LoRA weights so the test can compare them."""

from __future__ import annotations

import os
import sys

#: the estimators that need every episode of a group (or batch) on one process
REFUSED = ("ppo", "grpo-rloo", "grpo-reinforce_pp", "grpo-gigpo", "grpo-turn_rloo")


def refused(algo: str, out: str, tok: object) -> None:
    """Build the trainer for ``algo``; write the refusal's text to ``refused-ALGO-RANK.txt`` (nothing if none)."""
    from agentr1_trl.testing import tiny_model
    from peft import LoraConfig

    from agentr1_gym.errors import ConfigError

    common = dict(
        output_dir=out, per_device_train_batch_size=4, num_generations=4, max_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False, env_kwargs={"max_turns": 3}, generation_backend="hf",
    )  # fmt: skip
    if algo == "ppo":
        from agentr1_trl.ppo import AgentPPOConfig as Config
        from agentr1_trl.ppo import AgentPPOTrainer as Trainer
    else:
        from agentr1_trl.grpo import AgentGRPOConfig as Config  # type: ignore[assignment]
        from agentr1_trl.grpo import AgentGRPOTrainer as Trainer  # type: ignore[assignment]

        common["advantage_estimator"] = algo.removeprefix("grpo-")
    try:
        Trainer(
            tiny_model(tok, seed=0),
            Config(**common),
            tok,
            peft_config=LoraConfig(r=2, target_modules=["q_proj"]),
        )
    except ConfigError as exc:
        rank = int(os.environ.get("RANK", "0"))
        with open(os.path.join(out, f"refused-{algo}-{rank}.txt"), "w") as f:
            f.write(str(exc))


def main() -> None:
    algo, out = sys.argv[1], sys.argv[2]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.testing import alternating_script, tiny_model, tiny_tokenizer
    from peft import LoraConfig

    from agentr1_gym.errors import ConfigError

    tok = tiny_tokenizer()
    if algo == "refusals":  # every single-process estimator, one after the other in the same two processes
        for name in REFUSED:
            refused(name, out, tok)
        return
    model = tiny_model(tok, seed=0)
    common = dict(
        output_dir=out, per_device_train_batch_size=4, num_generations=4, max_steps=2, learning_rate=5e-2,
        logging_steps=1, report_to="none", max_new_tokens_per_turn=16, max_episode_tokens=1536,
        save_strategy="no", use_cpu=True, bf16=False, seed=0, env_kwargs={"max_turns": 3},
        generation_backend="hf",
    )  # fmt: skip
    if algo == "ppo":
        from agentr1_trl.ppo import AgentPPOConfig as Config
        from agentr1_trl.ppo import AgentPPOTrainer as Trainer
    else:
        from agentr1_trl.grpo import AgentGRPOConfig as Config  # type: ignore[assignment]
        from agentr1_trl.grpo import AgentGRPOTrainer as Trainer  # type: ignore[assignment]

        common["advantage_estimator"] = algo.removeprefix("grpo-") if algo.startswith("grpo-") else "grpo"
    args = Config(**common)
    try:
        trainer = Trainer(model, args, tok, peft_config=LoraConfig(r=2, target_modules=["q_proj", "v_proj"]),
                          generator=ScriptedGenerator(tok, alternating_script))  # fmt: skip
    except ConfigError as exc:
        rank = int(os.environ.get("RANK", "0"))
        with open(os.path.join(out, f"refused-{rank}.txt"), "w") as f:
            f.write(str(exc))
        return
    trainer.train()
    rank = trainer.accelerator.process_index
    lora = {k: v.detach().cpu() for k, v in trainer.accelerator.unwrap_model(trainer.model).named_parameters()
            if "lora_" in k}  # fmt: skip
    torch.save(
        {"lora": lora, "world": trainer.accelerator.num_processes}, os.path.join(out, f"lora-{rank}.pt")
    )


if __name__ == "__main__":
    main()
