"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` driven by multi-turn Gym rollouts.

What comes from TRL unchanged: the training loop, generation-batch buffering, group reward normalisation (for
``advantage_estimator="grpo"``), old/reference log-probs (with LoRA the reference is the base model with the
adapter disabled: no second model in memory), peft wrapping, logging through ``report_to``, checkpoints and
resume. What this class adds, because TRL lacks it:

* rollouts: each group is ``num_generations`` episodes of one task seed, run token-exact by
  :func:`~agentr1_trl.rollout.collect_rollouts`; the action mask goes to TRL as ``env_mask``;
* rewards: the env's episode return (process + outcome rewards) is the reward; env metrics are logged as
  ``env/*``;
* advantages: ``rloo`` and ``reinforce_pp`` (token-level, with process rewards at the turns that earned them);
* the loss: clipped surrogate over action tokens only plus a selectable KL estimator (k1/k3/low-var), written with
  the pure functions of :mod:`agentr1_trl.advantages`.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOTrainer

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.evaluation import success
from agentr1_trl.advantages import clipped_policy_loss, kl_penalty, reinforce_pp_advantages, rloo_advantages
from agentr1_trl.checkpoints import DurableCheckpointsMixin
from agentr1_trl.generation import GenerationBackend, HFGenerator, SamplingConfig
from agentr1_trl.grpo_config import AgentGRPOConfig
from agentr1_trl.rollout import Trajectory, collect_rollouts

__all__ = ["AgentGRPOTrainer", "env_return", "seed_dataset"]


def env_return(prompts: list, completions: list, episode_return: list[float], **_: Any) -> list[float]:
    """Reward function: the env's episode return (or its outcome part, per ``reward_signal``), computed during the
    rollout."""
    return [float(r) for r in episode_return]


def outcome_reward(traj: Trajectory) -> float:
    """The outcome part of an episode's return: its ``answer`` reward components."""
    return float(sum(c.get("answer", 0.0) for c in traj.reward_components))


def signal_return(traj: Trajectory, signal: str) -> float:
    """What group-level estimators compare: the episode return ('return') or its outcome part ('outcome')."""
    return traj.episode_return if signal == "return" else outcome_reward(traj)


def signal_token_rewards(traj: Trajectory, signal: str) -> list[float]:
    """Per completion token rewards for per-token estimators: every step reward ('return') or the answer reward
    only ('outcome'), on the last generated token of the turn that earned it."""
    if signal == "return":
        return traj.token_rewards()
    out = [0.0] * len(traj.completion_ids)
    for end, comps in zip(traj.turn_ends, traj.reward_components):
        if 0 <= end < len(out):
            out[end] += float(comps.get("answer", 0.0))
    return out


def advantage_mask_of(output: dict[str, Any], use_action_mask: bool) -> torch.Tensor:
    """The tokens per-token advantages are computed over: the action tokens (Agent-R1's advantage mask) or, for
    the ablation, every completion token."""
    completion = output["completion_mask"]
    if not use_action_mask:
        return completion
    return completion * output.get("tool_mask", torch.ones_like(completion))


def group_signal_metrics(trajs: list[Trajectory], group_size: int) -> dict[str, float]:
    """How much of the learning signal is outcome: the fraction of groups whose outcome (answer reward) varies,
    of groups whose return varies, and the outcome's share of the within-group return deviations (what GRPO's
    advantages are made of)."""
    groups = [trajs[i : i + group_size] for i in range(0, len(trajs), group_size)]
    out_var = ret_var = 0
    dev_outcome = dev_shaping = 0.0
    for g in groups:
        outcomes = [outcome_reward(t) for t in g]
        returns = [t.episode_return for t in g]
        shaping = [r - o for r, o in zip(returns, outcomes)]
        out_var += max(outcomes) - min(outcomes) > 1e-9
        ret_var += max(returns) - min(returns) > 1e-9
        mo, ms = sum(outcomes) / len(g), sum(shaping) / len(g)
        dev_outcome += sum(abs(o - mo) for o in outcomes)
        dev_shaping += sum(abs(x - ms) for x in shaping)
    metrics = {
        "signal/outcome_varied_groups": out_var / max(len(groups), 1),
        "signal/return_varied_groups": ret_var / max(len(groups), 1),
    }
    if dev_outcome + dev_shaping > 0:
        metrics["signal/outcome_share"] = dev_outcome / (dev_outcome + dev_shaping)
    return metrics


def seed_dataset(num_tasks: int, seed_offset: int = 0) -> Dataset:
    """A training "dataset" of task seeds (the env owns the tasks; the prompt column is a placeholder)."""
    seeds = list(range(seed_offset, seed_offset + num_tasks))
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"task {s}"}] for s in seeds], "seed": seeds}
    )


class AgentGRPOTrainer(DurableCheckpointsMixin, GRPOTrainer):
    """GRPO (or RLOO / REINFORCE++) on an ``AgentR1/*`` env with action masks.

    Args:
        model: a causal LM or a path (see TRL's ``GRPOTrainer``).
        args: :class:`AgentGRPOConfig`.
        processing_class: the tokenizer; it needs a chat template.
        peft_config: a peft ``LoraConfig`` to train a LoRA adapter (recommended).
        env_factory: callable returning a fresh env; default ``agentr1_gym.make(args.env_id, **args.env_kwargs)``.
        generator: a generation backend; default :class:`~agentr1_trl.generation.HFGenerator` over the policy.
        train_dataset: rows with a ``seed`` column; default ``seed_dataset(args.num_tasks, args.seed_offset)``.
    """

    _tag_names = ["trl", "grpo", "agentr1"]  # noqa: RUF012  (TRL declares it this way)

    def __init__(
        self,
        model: Any,
        args: AgentGRPOConfig,
        processing_class: Any,
        *,
        peft_config: Any = None,
        env_factory: Any = None,
        generator: GenerationBackend | None = None,
        train_dataset: Any = None,
        callbacks: Any = None,
    ) -> None:
        if not isinstance(args, AgentGRPOConfig):
            raise ConfigError("AgentGRPOTrainer needs an AgentGRPOConfig")
        if getattr(processing_class, "chat_template", None) is None:
            raise ConfigError(
                "the tokenizer has no chat_template; set one that renders tools and tool messages"
            )
        self.env_factory = env_factory or partial(agentr1_gym.make, args.env_id, **args.env_kwargs)
        self._env_pool: list[Any] = []
        self._pending_inputs: list[dict[str, Any]] | None = None
        self.last_trajectories: list[Trajectory] = []
        super().__init__(
            model=model,
            reward_funcs=[env_return],
            args=args,
            train_dataset=train_dataset
            if train_dataset is not None
            else seed_dataset(args.num_tasks, args.seed_offset),
            processing_class=processing_class,
            peft_config=peft_config,
            callbacks=callbacks,
            rollout_func=self._rollout,
        )
        if args.advantage_estimator != "grpo" and self.accelerator.num_processes > 1:
            raise ConfigError(
                f"advantage_estimator={args.advantage_estimator!r} runs on one process; use 'grpo' "
                "for multi-process training"
            )
        self.generator = generator

    # ---- rollouts ---------------------------------------------------------------------------------------
    def _envs(self, n: int) -> list[Any]:
        while len(self._env_pool) < n:
            self._env_pool.append(self.env_factory())
        return self._env_pool[:n]

    def _rollout(self, prompts: list, trainer: Any) -> dict[str, list]:
        inputs = self._pending_inputs
        if inputs is None or len(inputs) != len(prompts):
            raise RuntimeError("internal: rollout inputs were not staged")
        args: AgentGRPOConfig = self.args
        generator = self.generator or HFGenerator(
            self.accelerator.unwrap_model(self.model), self.processing_class
        )
        sampling = SamplingConfig(
            max_new_tokens=args.max_new_tokens_per_turn,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
            do_sample=True,
        )

        def rollout(seeds: list[int]) -> list[Trajectory]:
            return collect_rollouts(
                self._envs(len(seeds)),
                generator,
                self.processing_class,
                sampling=sampling,
                seeds=seeds,
                max_episode_tokens=args.max_episode_tokens,
                chat_template_kwargs=args.chat_template_kwargs,
            )

        trajs = rollout([int(x["seed"]) for x in inputs])
        if args.dynamic_sampling and self.model.training:
            trajs = self._dynamic_sampling(trajs, rollout)
        unstable = [t for t in trajs if not t.prefix_stable]
        if unstable:
            raise ConfigError(
                "the chat template is not prefix-stable across turns (it rewrites earlier turns, e.g. drops "
                "<think> blocks), so one sequence per episode would be mis-masked. Use a template that keeps "
                "history verbatim (TRL ships '*_training.jinja' variants), or train on Trajectory.samples() "
                "(one sample per turn) in your own loop."
            )
        self.last_trajectories = trajs
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["env/success"].append(sum(success(t.metrics) for t in trajs) / len(trajs))
        for key in ("em", "f1", "format_ok"):
            self._metrics[mode][f"env/{key}"].append(sum(t.metrics.get(key, 0.0) for t in trajs) / len(trajs))
        self._metrics[mode]["env/turns"].append(sum(t.num_turns for t in trajs) / len(trajs))
        self._metrics[mode]["env/process_reward"].append(
            sum(sum(r for r in t.rewards[:-1]) for t in trajs) / len(trajs)
        )
        self._metrics[mode]["env/action_errors"].append(
            sum(sum(e is not None for e in t.action_errors) for t in trajs) / len(trajs)
        )
        for key, value in group_signal_metrics(trajs, self.num_generations).items():
            self._metrics[mode][key].append(value)
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            # the action mask (Agent-R1); all ones for the no-mask ablation
            "env_mask": [t.action_mask if args.action_mask else [1] * len(t.action_mask) for t in trajs],
            "episode_return": [signal_return(t, args.reward_signal) for t in trajs],
        }

    def _dynamic_sampling(self, trajs: list[Trajectory], rollout: Any) -> list[Trajectory]:
        """Replace groups whose outcome does not vary by fresh groups (new training seeds) whose outcome does."""
        args: AgentGRPOConfig = self.args
        size = self.num_generations
        rng = random.Random(args.seed * 1_000_003 + self.state.global_step)
        mode = "train"

        def flat(group: list[Trajectory]) -> bool:
            outcomes = [outcome_reward(t) for t in group]
            return max(outcomes) - min(outcomes) <= 1e-9

        rounds = replaced = 0
        for _ in range(args.max_resample_rounds):
            todo = [g for g in range(len(trajs) // size) if flat(trajs[g * size : (g + 1) * size])]
            if not todo:
                break
            rounds += 1
            seeds = [args.seed_offset + rng.randrange(args.num_tasks) for _ in todo]
            fresh = rollout([s for s in seeds for _ in range(size)])
            for j, g in enumerate(todo):
                group = fresh[j * size : (j + 1) * size]
                if not flat(group):
                    trajs[g * size : (g + 1) * size] = group
                    replaced += 1
        groups = max(len(trajs) // size, 1)
        self._metrics[mode]["signal/resample_rounds"].append(float(rounds))
        self._metrics[mode]["signal/resampled_groups"].append(replaced / groups)
        return trajs

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._pending_inputs = inputs
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._pending_inputs = None
        args: AgentGRPOConfig = self.args
        if args.advantage_estimator == "grpo":
            return output
        trajs = self.last_trajectories
        device = output["completion_ids"].device
        if args.advantage_estimator == "rloo":
            returns = torch.tensor([signal_return(t, args.reward_signal) for t in trajs], dtype=torch.float32)
            output["advantages"] = rloo_advantages(returns, self.num_generations).to(device)
        else:
            width = output["completion_ids"].shape[1]
            rewards = torch.zeros((len(trajs), width))
            for i, t in enumerate(trajs):
                tr = signal_token_rewards(t, args.reward_signal)[:width]
                rewards[i, : len(tr)] = torch.tensor(tr)
            mask = advantage_mask_of(output, args.advantage_mask).cpu()
            output["advantages"] = reinforce_pp_advantages(rewards, mask, gamma=args.gamma).to(device)
        return output

    # ---- loss -------------------------------------------------------------------------------------------
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        rows = inputs["completion_ids"].size(0)
        denominators = None
        if self.args.skip_zero_advantage and self.beta == 0.0:
            adv = inputs["advantages"]
            keep = (adv.reshape(rows, -1) != 0).any(dim=1)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["signal/skipped_rows"].append(1.0 - keep.float().mean().item())
            if not bool(keep.all()):
                mask = advantage_mask_of(inputs, True)  # the loss mask: action tokens
                # the loss's denominators over the whole micro-batch, so that the gradient is unchanged
                denominators = (rows, float(mask.sum().clamp(min=1)), inputs["completion_ids"].size(1))
                if not bool(keep.any()):
                    # nothing to learn here: a zero loss that still touches the graph (DDP needs every parameter)
                    return sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
                inputs = {k: (v[keep] if torch.is_tensor(v) and v.dim() > 0 and v.size(0) == rows else v)
                          for k, v in inputs.items()}  # fmt: skip
        return self._policy_loss(model, inputs, denominators)

    def _policy_loss(
        self, model: Any, inputs: dict[str, Any], denominators: tuple[int, float, int] | None = None
    ) -> torch.Tensor:
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        mask = advantage_mask_of(inputs, True)  # the loss mask: action tokens
        logps = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1)
        )[0]
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        per_token = clipped_policy_loss(
            logps, old, inputs["advantages"], mask, eps_low=self.epsilon_low, eps_high=self.epsilon_high
        )
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0:
            kl = kl_penalty(logps, inputs["ref_per_token_logps"], self.args.kl_estimator) * mask
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append((kl.sum() / mask.sum().clamp(min=1)).item())
        mask_f = mask.to(per_token.dtype)
        n_rows, n_tokens, width = denominators or (
            per_token.size(0),
            float(mask_f.sum().clamp(min=1.0)),
            completion_ids.size(1),
        )
        if self.loss_type == "grpo":  # mean over sequences of each sequence's mean over its action tokens
            loss = (per_token.sum(-1) / mask_f.sum(-1).clamp(min=1.0)).sum() / n_rows
        elif self.loss_type == "dr_grpo":
            loss = per_token.sum() / (n_rows * max(width, 1))
        else:  # bnpo / dapo: mean over all action tokens of the micro-batch
            loss = per_token.sum() / n_tokens
        with torch.no_grad():
            ratio = torch.exp(logps - old)
            clipped = ((ratio < 1 - self.epsilon_low) | (ratio > 1 + self.epsilon_high)).to(
                mask_f.dtype
            ) * mask_f
            self._metrics[mode]["clip_ratio/region_mean"].append(
                (clipped.sum() / mask_f.sum().clamp(min=1)).item()
            )
        if mode == "train":
            loss = loss / self.current_gradient_accumulation_steps
        return loss
