"""Run by tests/trl/test_multiprocess.py: every trainer for two steps on the tiny model, either in one process on the
whole batch (``single OUT``) or under ``torchrun --nproc_per_node 2`` on half of it each (``multi OUT``); each run
saves its trained weights (LoRA, and PPO's value head) and losses for the test to compare. ``refusals OUT``
builds the trainers whose settings cannot run multi-process and writes each refusal's text."""

from __future__ import annotations

import os
import sys

#: every trainer and estimator: GRPO's estimators and PPO at token and step level
ALGOS = ("grpo", "grpo-rloo", "grpo-reinforce_pp", "grpo-gigpo", "grpo-turn_rloo", "ppo", "ppo-step")
#: the settings that keep a trainer on one process, with the word their refusal names
REFUSED = {
    "dynamic": {"dynamic_sampling": True},
    "selective": {"skip_flat_tasks": 0.5},
    "curriculum": {"curriculum": [{"min_success": 0.5}, {}]},
}
#: episodes per optimizer step in all: one group, which the two processes split (4 episodes each)
BATCH = 8


def persona_script(tok: object):
    """A scripted policy whose every episode plays one of 4 personas, chosen by its place in its group at the
    first turn and read back from its own transcript after that (so that an episode plays the same turns whichever
    process and call it is in): persona k writes k junk turns (a format penalty each) before answering, up to the
    episode's 3 turns; returns 0, -0.1, -0.2, -0.3 in every group."""

    def script(prompt_ids: object, i: int) -> str:
        text = tok.decode(list(prompt_ids), skip_special_tokens=False)
        played = [k for k in range(4) if f"persona {k}" in text]
        k = played[0] if played else i % 4
        junk_so_far = text.count(f"persona {k}")
        if junk_so_far >= k:
            return f"<think>persona {k}</think><answer>Nobody</answer>"
        return f"<think>persona {k}</think>"

    return script


def _trainer(algo: str, out: str, tok: object, rows: int, **extra: object) -> object:
    from agentr1_trl import ScriptedGenerator
    from agentr1_trl.testing import tiny_model
    from peft import LoraConfig

    common = dict(
        output_dir=os.path.join(out, algo), per_device_train_batch_size=rows, num_generations=BATCH, max_steps=2,
        learning_rate=0.5, optim="sgd", beta=0.04, logging_steps=1, report_to="none", max_new_tokens_per_turn=16,
        max_episode_tokens=1536, save_strategy="no", save_episodes_steps=0, use_cpu=True, bf16=False, seed=0,
        env_kwargs={"max_turns": 3}, generation_backend="hf", **extra,
    )  # fmt: skip
    if algo.startswith("ppo"):
        from agentr1_trl.ppo import AgentPPOConfig as Config
        from agentr1_trl.ppo import AgentPPOTrainer as Trainer

        common["gae_level"] = "step" if algo == "ppo-step" else "token"
    else:
        from agentr1_trl.grpo import AgentGRPOConfig as Config  # type: ignore[assignment]
        from agentr1_trl.grpo import AgentGRPOTrainer as Trainer  # type: ignore[assignment]

        common["advantage_estimator"] = algo.removeprefix("grpo-") if "-" in algo else "grpo"
    return Trainer(
        tiny_model(tok, seed=0),
        Config(**common),
        tok,
        peft_config=LoraConfig(r=2, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, persona_script(tok)),
    )


def train(mode: str, out: str, tok: object) -> None:
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    for algo in ALGOS:
        trainer = _trainer(algo, out, tok, BATCH // world)
        trainer.train()
        model = trainer.accelerator.unwrap_model(trainer.model)
        weights = {k: v.detach().cpu().clone() for k, v in model.named_parameters()
                   if "lora_" in k or "value_head" in k}  # fmt: skip
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        rank = trainer.accelerator.process_index
        state = {"weights": weights, "losses": losses, "world": trainer.accelerator.num_processes}
        torch.save(state, os.path.join(out, f"{mode}-{algo}-{rank}.pt"))


def refusals(out: str, tok: object) -> None:
    from agentr1_gym.errors import ConfigError

    for name, extra in REFUSED.items():
        try:
            _trainer("grpo", out, tok, BATCH // 2, **extra)
        except ConfigError as exc:
            rank = int(os.environ.get("RANK", "0"))
            with open(os.path.join(out, f"refused-{name}-{rank}.txt"), "w") as f:
                f.write(str(exc))


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from agentr1_trl.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    if mode == "refusals":
        refusals(out, tok)
    else:
        train(mode, out, tok)


if __name__ == "__main__":
    main()
