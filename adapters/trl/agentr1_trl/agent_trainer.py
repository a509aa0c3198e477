"""What GRPO and PPO share: :class:`AgentTrainer`, TRL's loop (through :mod:`agentr1_trl.trl_trainer`) driven by
multi-turn episodes of an ``AgentR1/*`` env.

The pipeline is rollout -> samples -> advantages -> loss:

* **rollout** (here): each group is ``num_generations`` episodes of one task seed, run token-exact by
  :func:`~agentr1_gym.rollout.collect_rollouts`; optional dynamic sampling regenerates groups whose outcome does
  not vary; env metrics are logged as ``env/*`` (the evaluators' vocabulary: ``success``, ``score``,
  ``format_ok``, ``turns``, and the env's answer metrics) and signal metrics as ``signal/*``;
* **samples**: one row per episode (prompt, completion, ``action_mask``, sampler log-probs), handed to TRL, which
  computes old and reference log-probs (the reference is the base model with the LoRA adapter disabled);
* **advantages** and the **loss**: the sibling trainers, :class:`~agentr1_trl.grpo.AgentGRPOTrainer` and
  :class:`~agentr1_trl.ppo.AgentPPOTrainer`, with the pure functions of :mod:`agentr1_trl.advantages` and
  :mod:`agentr1_trl.losses`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from typing import Any

import torch

import agentr1_gym
from agentr1_gym.episodes import EPISODES_FILE, append_episodes
from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import GenerationBackend, SamplingConfig, check_backend
from agentr1_gym.rollout import Trajectory, collect_rollouts
from agentr1_trl.backends.factory import GenerationSettings, make_generator, policy_vocab_size
from agentr1_trl.config import AgentTrainerConfig
from agentr1_trl.episodes import advantage_rows, token_stats, trajectory_records
from agentr1_trl.losses import LossTerms, policy_loss, truncated_is_weights
from agentr1_trl.model_eval import held_out_eval, split_env_kwargs
from agentr1_trl.signals import flat_outcome, group_signal_metrics, signal_return
from agentr1_trl.trl_trainer import TRLAgentTrainer

__all__ = ["AgentTrainer", "TrainingEnvs"]

logger = logging.getLogger(__name__)

#: curriculum: a stage's min_success is checked on the mean training success of this many recent steps
CURRICULUM_WINDOW = 3
CURRICULUM_FILE = "curriculum.json"
#: skip_flat_tasks: each task seed's count of consecutive flat groups, kept with each checkpoint
FLAT_TASKS_FILE = "flat_tasks.json"
#: skip_flat_tasks: random draws of a replacement seed before the training seeds are scanned for one
REPLACEMENT_DRAWS = 16
#: episode metrics logged as ``env/<name>`` (the mean over a step's episodes, where the episodes report them);
#: ``repeat_rate`` rising towards 1 is the sign of a policy collapsing into a loop (benchmarks/repeats.py)
ENV_METRICS = ("success", "score", "format_ok", "repeat_rate", "em", "f1", "pass", "correct")


class TrainingEnvs:
    """``agentr1_gym.make(env_id, **env_kwargs)`` on the env's training part: an env with a fixed task list (a
    benchmark, a ``register_task`` dataset, the shop's goals) trains on its train split, as ``agentr1 train`` does,
    unless ``env_kwargs`` chose a split (or the list is too short to hold tasks out: a warning says so); a mixture
    moves each component to its training part; procedural envs are made as given. The first env made decides, by
    the env's own ``kwargs_for_split`` as the CLI's pipeline does; ``kwargs`` then holds what every env is made
    with."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.env_id, self.kwargs, self._decided = env_id, dict(env_kwargs), False

    def __call__(self) -> Any:
        env = agentr1_gym.make(self.env_id, **self.kwargs)
        if not self._decided:
            self._decided = True
            split = getattr(env.unwrapped, "kwargs_for_split", None)  # what agentr1 train's pipeline calls
            train = split(self.kwargs, "train") if callable(split) else self.kwargs
            if train != self.kwargs:
                try:
                    split_env = agentr1_gym.make(self.env_id, **train)
                    split_env.unwrapped.num_tasks  # noqa: B018  (a split is checked when its tasks are counted)
                except ConfigError as exc:  # too few tasks to hold any out: train on them all, and say so
                    logger.warning("training on every task of %s: %s", self.env_id, exc)
                else:
                    env.close()
                    self.kwargs, env = train, split_env
        return env


class AgentTrainer(TRLAgentTrainer):
    """The shared base of the agent trainers.

    Args:
        model: a causal LM or a path (see TRL's ``GRPOTrainer``).
        args: the trainer's config (:class:`~agentr1_trl.grpo.AgentGRPOConfig` or
            :class:`~agentr1_trl.ppo.AgentPPOConfig`).
        processing_class: the tokenizer; it needs a chat template.
        peft_config: a peft ``LoraConfig`` to train a LoRA adapter (recommended).
        env_factory: callable returning a fresh env; default :class:`TrainingEnvs`: ``agentr1_gym.make(args.env_id,
            **args.env_kwargs)`` on the env's training part, as ``agentr1 train`` trains.
        generator: a generation backend; default :class:`~agentr1_trl.backends.HFGenerator` over the policy.
        train_dataset: rows with a ``seed`` column; default: seeds ``seed_offset + [0, num_tasks)``.
    """

    config_class: type[AgentTrainerConfig] = AgentTrainerConfig

    def __init__(
        self,
        model: Any,
        args: AgentTrainerConfig,
        processing_class: Any,
        *,
        peft_config: Any = None,
        env_factory: Any = None,
        generator: GenerationBackend | None = None,
        train_dataset: Any = None,
        callbacks: Any = None,
    ) -> None:
        if not isinstance(args, self.config_class):
            raise ConfigError(f"{type(self).__name__} needs an {self.config_class.__name__}")
        if getattr(processing_class, "chat_template", None) is None:
            raise ConfigError(
                "the tokenizer has no chat_template; set one that renders tools and tool messages"
            )
        self.env_factory = env_factory or TrainingEnvs(args.env_id, args.env_kwargs)
        self._env_pool: list[Any] = []
        self.generator = None if generator is None else check_backend(generator)
        self._engine: GenerationBackend | None = None  # the configured backend, made on first use
        self._synced_step: int | None = None
        #: whether the last rollouts' log-probs are the sampler's (a scripted generator's are placeholders)
        self._sampler_logprobs = True
        #: curriculum position: stage index, the step it started at, recent training success rates
        self._stage, self._stage_start, self._recent_success = 0, 0, []
        #: skip_flat_tasks: task seed -> its consecutive flat groups (the seeds with none are left out)
        self._flat_tasks: dict[int, int] = {}
        self._task_seeds: list[int] | None = None
        super().__init__(
            model,
            args,
            processing_class,
            peft_config=peft_config,
            train_dataset=train_dataset,
            callbacks=callbacks,
        )

    # ---- rollout ------------------------------------------------------------------------------------------
    def _envs(self, n: int) -> list[Any]:
        while len(self._env_pool) < n:
            self._env_pool.append(self.env_factory())
        return self._env_pool[:n]

    def rollout_generator(self) -> GenerationBackend:
        """The generation backend that samples from the policy's current weights: the one passed in, else the
        configured engine (:func:`~agentr1_trl.backends.factory.make_generator`: started once, its weights
        synced here after every optimizer step)."""
        if self.generator is not None:
            return self.generator
        args: AgentTrainerConfig = self.args
        model = self.accelerator.unwrap_model(self.model)
        if self._engine is None:
            settings = GenerationSettings(
                backend=args.generation_backend,
                server_urls=args.vllm_server_urls if args.vllm_mode == "server" else (),
                sync=args.vllm_sync,
                dtype=args.vllm_dtype,
                kv_cache_gb=args.vllm_kv_cache_gb,
                sequences=self._generation_batch(),
                gpu_memory_utilization=args.vllm_gpu_memory_utilization,
                max_model_len=args.max_episode_tokens + args.max_new_tokens_per_turn,
                seed=args.seed,
                timeout_s=args.vllm_timeout_s,
                retries=args.vllm_retries,
                sync_dir=args.vllm_sync_dir,
                enforce_eager=args.vllm_enforce_eager,
                hf_decode=getattr(args, "hf_decode", "auto"),
            )
            self._engine = make_generator(model, self.processing_class, settings, sync=False)
            logger.info("generation: %s", self._engine.describe())  # describe_generation() says it too
        if self._synced_step != self.state.global_step:
            start = time.perf_counter()
            self._engine.sync_weights(model)
            self._synced_step = self.state.global_step
            self.log_metric("generation/sync_s", time.perf_counter() - start)
        return self._engine

    def _generation_batch(self) -> int:
        """Episodes one rollout generates at once: TRL's generation batch (a step's rows, times
        ``steps_per_generation``), at least the group size."""
        args = self.args
        size = getattr(args, "generation_batch_size", None) or (
            args.per_device_train_batch_size * (getattr(args, "steps_per_generation", None) or 1)
        )
        return max(int(size), int(getattr(args, "num_generations", 1) or 1))

    def _vocab_size(self) -> int:
        return policy_vocab_size(self.accelerator.unwrap_model(self.model), self.processing_class)

    def close_generation(self) -> None:
        """Stop the vLLM engine this trainer started (if any) and remove its temporary weights."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._synced_step = None

    def describe_generation(self) -> str:
        """Which engine (and weight sync) generates the rollouts."""
        return self.rollout_generator().describe()

    @classmethod
    def plan_tasks(
        cls, settings: dict[str, Any], evaluates: bool
    ) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """What a run trains and evaluates on, checked before any model loads: the env kwargs to train with and to
        evaluate with (:func:`~agentr1_trl.model_eval.split_env_kwargs`), and whether a warm start can imitate an
        oracle there. Our rollout plays ``settings["env_id"]``; made once now, the env and its kwargs fail here
        (the closest id or keyword named), not after the model has loaded."""
        probe = agentr1_gym.make(settings["env_id"], **settings["env_kwargs"])
        try:
            train, held = split_env_kwargs(probe.unwrapped, settings["env_kwargs"], evaluates)
        finally:
            probe.close()
        return train, held, True

    def held_out(
        self, label: str, episodes: int, env_kwargs: dict[str, Any], *, save_episodes: str | None, step: int
    ) -> dict[str, Any] | None:
        """Greedy evaluation of the policy on the held-out seeds (:func:`~agentr1_trl.model_eval.held_out_eval`),
        through this trainer's generator; None when ``episodes`` is 0."""
        return held_out_eval(
            self.args,
            self.model,
            self.processing_class,
            episodes,
            label,
            self.rollout_generator(),
            env_kwargs,
            save_episodes=save_episodes,
            step=step,
        )

    def _collect(self, seeds: list[int]) -> list[Trajectory]:
        args: AgentTrainerConfig = self.args
        generator = self.rollout_generator()
        self._sampler_logprobs = bool(generator.provides_logprobs)
        sampling = SamplingConfig(
            max_new_tokens=args.max_new_tokens_per_turn,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
            do_sample=True,
        )
        options = self.stage_options()
        return collect_rollouts(
            self._envs(len(seeds)),
            generator,
            self.processing_class,
            sampling=sampling,
            seeds=seeds,
            options=[dict(options) for _ in seeds] if options else None,
            max_episode_tokens=args.max_episode_tokens,
            chat_template_kwargs=args.chat_template_kwargs,
            vocab_size=self._vocab_size(),
            record_state_keys=self.records_state_keys(),
        )

    # ---- saved episodes (the run viewer) -------------------------------------------------------------------
    def on_scored(self, batch: dict[str, Any], trajectories: list[Trajectory], seeds: list[int]) -> None:
        args: AgentTrainerConfig = self.args
        every, step = args.save_episodes_steps, self.state.global_step + 1
        if not (self.model.training and every > 0 and self.accelerator.is_main_process):
            return
        if (step - 1) % every != 0 and step != args.max_steps:
            return
        start = time.perf_counter()
        n = min(args.save_episodes_count, len(trajectories))
        lengths = [len(t.completion_ids) for t in trajectories[:n]]
        advantages = advantage_rows(batch["advantages"][:n], batch["action_mask"][:n], lengths)
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        model.eval()  # no dropout: the probabilities the update sees
        try:
            with self.accelerator.autocast():  # the precision the update runs in (a bf16 base)
                stats = [
                    token_stats(
                        model,
                        t.prompt_ids,
                        t.completion_ids,
                        temperature=self.temperature,
                        mask=t.action_mask,
                    )
                    if t.one_sequence and t.completion_ids
                    else None
                    for t in trajectories[:n]
                ]
        finally:
            model.train(was_training)
        records = trajectory_records(
            trajectories[:n],
            self.processing_class,
            source="train",
            step=step,
            env_id=args.env_id,
            seeds=seeds[:n],
            group_size=self.num_generations,
            advantages=advantages,
            stats=stats,
        )
        append_episodes(os.path.join(args.output_dir, EPISODES_FILE), records)
        self.log_metric("time/save_episodes_s", time.perf_counter() - start)

    def multi_process_blocker(self) -> str | None:
        args = self.args
        if args.skip_flat_tasks > 0:
            return (
                "skip_flat_tasks replaces a group's task seed before its rollout, and a group's episodes may lie "
                "on several processes; train it on one process"
            )
        if args.dynamic_sampling:
            return (
                "dynamic_sampling regenerates the groups whose outcome is flat on each process, and a group's "
                "episodes may lie on several; train it on one process"
            )
        if any("min_success" in stage for stage in args.curriculum):
            return (
                "a curriculum stage ending at min_success reads each process's own training success, so processes "
                "could move on at different steps; end stages by steps for multi-process training"
            )
        return None

    def records_state_keys(self) -> bool:
        """Whether rollouts keep each turn's starting world state (step-level estimators that group by it)."""
        return False

    def rollout(self, seeds: list[int]) -> list[Trajectory]:
        """The episodes of ``seeds`` (a group's ``num_generations`` seeds consecutive). In training,
        ``skip_flat_tasks`` and ``dynamic_sampling`` may play other seeds for some groups: ``seeds`` is updated
        in place to the seeds played."""
        self._advance_curriculum()
        training = self.model.training
        if training and self.args.skip_flat_tasks > 0:
            self._skip_flat_tasks(seeds)
        trajs = self._collect(seeds)
        if self.args.dynamic_sampling and training:
            trajs = self._dynamic_sampling(trajs, seeds)
        if training and self.args.skip_flat_tasks > 0:
            self._record_flat_tasks(seeds, trajs)
        self._log_episode_metrics(trajs)
        if self.args.curriculum and self.model.training:
            self.log_metric("curriculum/stage", float(self._stage))
            self._recent_success.append(
                sum(t.metrics.get("success", 0.0) for t in trajs) / max(len(trajs), 1)
            )
            self._recent_success = self._recent_success[-CURRICULUM_WINDOW:]
        return trajs

    # ---- curriculum ---------------------------------------------------------------------------------------
    def stage_options(self) -> dict[str, Any]:
        """The reset options of the current curriculum stage (none without a curriculum)."""
        stages = self.args.curriculum
        return dict(stages[self._stage].get("options", {})) if stages else {}

    def _advance_curriculum(self) -> None:
        """Move to the next stage once this one has lasted its ``steps`` or reached its ``min_success``."""
        stages = self.args.curriculum
        if not stages or not self.model.training or self._stage >= len(stages) - 1:
            return
        stage = stages[self._stage]
        done_steps = (
            stage.get("steps") is not None and self.state.global_step - self._stage_start >= stage["steps"]
        )
        window = self._recent_success
        done_success = (
            stage.get("min_success") is not None
            and len(window) >= CURRICULUM_WINDOW
            and sum(window) / len(window) >= stage["min_success"]
        )
        if done_steps or done_success:
            self._stage += 1
            self._stage_start = self.state.global_step
            self._recent_success = []

    def save_extra(self, output_dir: str) -> None:
        if self.args.skip_flat_tasks > 0:
            with open(os.path.join(output_dir, FLAT_TASKS_FILE), "w", encoding="utf-8") as f:
                json.dump({str(k): v for k, v in sorted(self._flat_tasks.items())}, f)
        if self.args.curriculum:
            state = {
                "stage": self._stage,
                "stage_start": self._stage_start,
                "recent_success": self._recent_success,
            }
            with open(os.path.join(output_dir, CURRICULUM_FILE), "w", encoding="utf-8") as f:
                json.dump(state, f)

    def load_extra(self, checkpoint: str) -> None:
        flat = os.path.join(checkpoint, FLAT_TASKS_FILE)
        if self.args.skip_flat_tasks > 0 and os.path.exists(flat):
            with open(flat, encoding="utf-8") as f:
                self._flat_tasks = {int(k): int(v) for k, v in json.load(f).items()}
        path = os.path.join(checkpoint, CURRICULUM_FILE)
        if self.args.curriculum and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
            self._stage = min(int(state["stage"]), len(self.args.curriculum) - 1)
            self._stage_start = int(state["stage_start"])
            self._recent_success = [float(x) for x in state["recent_success"]]

    def episode_return(self, traj: Trajectory) -> float:
        return signal_return(traj, self.args.reward_signal)

    def loss_mask(self, traj: Trajectory) -> list[int]:
        """The action mask, or all ones for the paper's no-action-mask ablation (``action_mask=False``)."""
        return traj.action_mask if self.args.action_mask else [1] * len(traj.action_mask)

    # ---- the loss's shared part ----------------------------------------------------------------------------
    def policy_terms(self, logps: torch.Tensor, mask: torch.Tensor, batch: dict[str, Any]) -> LossTerms:
        """The clipped surrogate (+ beta x KL) per action token for this batch under the config, with truncated
        importance sampling against the sampler's log-probs; logs the KL, the clipped fraction and the
        train/inference mismatch."""
        weights = None
        sampler = batch.get("sampling_per_token_logps") if self._sampler_logprobs else None
        if sampler is not None:
            old = batch.get("old_per_token_logps")
            trainer_logps = logps.detach() if old is None else old
            weights, gap_mean, gap_max = truncated_is_weights(trainer_logps, sampler, mask, self.args.tis_cap)
            self.log_metric("mismatch/logp_abs_mean", gap_mean)
            self.log_metric("mismatch/logp_abs_max", gap_max)
            if self.args.importance_correction == "none":
                weights = None
        terms = policy_loss(
            logps,
            batch.get("old_per_token_logps"),
            batch["advantages"],
            mask,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            beta=self.beta,
            ref_logps=batch.get("ref_per_token_logps"),
            kl_estimator=self.args.kl_estimator,
            is_weights=weights,
        )
        if terms.kl is not None:
            self.log_metric("kl", terms.kl)
        self.log_metric("clip_ratio/region_mean", terms.clip_ratio)
        return terms

    def _log_episode_metrics(self, trajs: list[Trajectory]) -> None:
        n = len(trajs)
        for key in ENV_METRICS:
            values = [t.metrics[key] for t in trajs if key in t.metrics]
            if values:
                self.log_metric(f"env/{key}", sum(values) / len(values))
        # a mixture tags each episode's metrics with its env ("<name>/success"): logged per env, over its episodes
        tagged = sorted(
            {k for t in trajs for k in t.metrics if "/" in k and k.rsplit("/", 1)[1] in ENV_METRICS}
        )
        for key in tagged:
            values = [t.metrics[key] for t in trajs if key in t.metrics]
            self.log_metric(f"env/{key}", sum(values) / len(values))
        self.log_metric("env/return", sum(t.episode_return for t in trajs) / n)
        self.log_metric("env/turns", sum(t.num_turns for t in trajs) / n)
        self.log_metric("env/process_reward", sum(sum(t.rewards[:-1]) for t in trajs) / n)
        self.log_metric(
            "env/action_errors", sum(sum(e is not None for e in t.action_errors) for t in trajs) / n
        )
        for key, value in group_signal_metrics(trajs, self.num_generations).items():
            self.log_metric(key, value)

    # ---- selective rollouts (skip_flat_tasks) ------------------------------------------------------------
    def _training_seeds(self) -> list[int]:
        if self._task_seeds is None:
            self._task_seeds = [int(s) for s in self.train_dataset["seed"]]
        return self._task_seeds

    def _skip_flat_tasks(self, seeds: list[int]) -> None:
        """Before the rollout: each group whose task was flat last time is, with probability ``skip_flat_tasks``,
        given a training seed not known to be flat (and not already in this batch) instead; in place."""
        args: AgentTrainerConfig = self.args
        size = self.num_generations
        groups = len(seeds) // size
        rng = random.Random(args.seed * 1_000_033 + self.state.global_step)
        pool, taken = self._training_seeds(), set(seeds)
        skipped = 0
        for g in range(groups):
            if self._flat_tasks.get(seeds[g * size], 0) == 0 or rng.random() >= args.skip_flat_tasks:
                continue
            fresh = self._replacement_seed(pool, taken, rng)
            if fresh is not None:
                seeds[g * size : (g + 1) * size] = [fresh] * size
                taken.add(fresh)
                skipped += 1
        self.log_metric("signal/skipped_flat_groups", skipped / max(groups, 1))

    def _replacement_seed(self, pool: list[int], taken: set[int], rng: random.Random) -> int | None:
        """A training seed not known to be flat and not in ``taken``: a few random draws, then a scan of the pool
        from a random start (None when every seed is flat or taken)."""

        def usable(seed: int) -> bool:
            return seed not in taken and self._flat_tasks.get(seed, 0) == 0

        for _ in range(REPLACEMENT_DRAWS):
            seed = pool[rng.randrange(len(pool))]
            if usable(seed):
                return seed
        start = rng.randrange(len(pool))
        rotated = pool[start:] + pool[:start]
        return next((seed for seed in rotated if usable(seed)), None)

    def _record_flat_tasks(self, seeds: list[int], trajs: list[Trajectory]) -> None:
        """After the rollout: each played task's count of consecutive flat groups."""
        size = self.num_generations
        for g in range(len(trajs) // size):
            seed = seeds[g * size]
            if flat_outcome(trajs[g * size : (g + 1) * size]):
                self._flat_tasks[seed] = self._flat_tasks.get(seed, 0) + 1
            else:
                self._flat_tasks.pop(seed, None)
        self.log_metric("signal/flat_tasks_known", float(len(self._flat_tasks)))

    def _dynamic_sampling(self, trajs: list[Trajectory], played: list[int]) -> list[Trajectory]:
        """Replace groups whose outcome does not vary by fresh groups (new training seeds) whose outcome does;
        ``played`` (the seeds of ``trajs``) is updated in place."""
        args: AgentTrainerConfig = self.args
        size = self.num_generations
        rng = random.Random(args.seed * 1_000_003 + self.state.global_step)

        rounds = replaced = 0
        for _ in range(args.max_resample_rounds):
            todo = [g for g in range(len(trajs) // size) if flat_outcome(trajs[g * size : (g + 1) * size])]
            if not todo:
                break
            rounds += 1
            seeds = [args.seed_offset + rng.randrange(args.num_tasks) for _ in todo]
            fresh = self._collect([s for s in seeds for _ in range(size)])
            for j, g in enumerate(todo):
                group = fresh[j * size : (j + 1) * size]
                if not flat_outcome(group):
                    trajs[g * size : (g + 1) * size] = group
                    played[g * size : (g + 1) * size] = [seeds[j]] * size
                    replaced += 1
        self.log_metric("signal/resample_rounds", float(rounds))
        self.log_metric("signal/resampled_groups", replaced / max(len(trajs) // size, 1))
        return trajs
