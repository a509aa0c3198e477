"""The only module that touches TRL's (and ``transformers.Trainer``'s) internals.

Written against **trl 1.16.0** and transformers 5.19-5.23; :data:`TRL_TESTED` is checked at import and a
different TRL minor version gets a warning naming this module. Everything TRL-specific that our trainers need sits
behind :class:`TRLAgentTrainer`:

* TRL's ``rollout_func`` hook runs our multi-turn rollouts. The task seed of each row travels *in the row's
  prompt* (:func:`seed_prompt`), and each episode's :class:`~agentr1_gym.rollout.Trajectory` travels back as an
  extra rollout field, which TRL merges into the batch's rows; nothing is staged on the trainer between calls.
* An episode whose chat template is not prefix-stable becomes one row per turn after its advantages are
  computed (:mod:`agentr1_trl.turn_rows`), with the old and reference log-probs recomputed in each turn's context.
* The action mask has one name, ``action_mask``, everywhere in this package; it becomes TRL's ``env_mask`` on the
  way in and TRL's ``tool_mask`` is renamed back on the way out, here and nowhere else.
* TRL's private methods overridden here: ``_generate_and_score_completions`` (then :meth:`score_batch`, the
  subclass's advantages), ``_compute_loss`` (then :meth:`loss`), ``_metrics`` (wrapped by :meth:`log_metric`), ``Trainer._save`` /
  ``_load_from_checkpoint`` (then :meth:`save_extra` / :meth:`load_extra`) and ``Trainer._save_checkpoint``
  (durable checkpoints, :class:`DurableCheckpointsMixin`).
"""

from __future__ import annotations

import copy
import os
import re
import time
import warnings
from typing import Any

import torch
import trl
from datasets import Dataset
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model, use_adapter

from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import GenerationError
from agentr1_gym.rollout import Trajectory
from agentr1_trl.forward import completion_logps, pad_width, regroup_micro_batches, select_rows, update_passes
from agentr1_trl.hardware import DeviceDefaults
from agentr1_trl.models import bf16_frozen_base, fuse_lora_forward, train_top_layers
from agentr1_trl.run_dir import mark_complete, resolve_resume
from agentr1_trl.signals import advantage_mask, check_rewards, env_return
from agentr1_trl.turn_rows import CONTEXT_DEPENDENT, expand_turn_rows

__all__ = [
    "TRL_TESTED",
    "DurableCheckpointsMixin",
    "TRLAgentTrainer",
    "seed_dataset",
    "seed_of_prompt",
    "seed_prompt",
]

#: the TRL minor version this module was written and tested against
TRL_TESTED = "1.16"

if not trl.__version__.startswith(TRL_TESTED + "."):
    warnings.warn(
        f"agentr1_trl.trl_trainer was written against trl {TRL_TESTED}.x; trl {trl.__version__} is installed. "
        "If training fails inside TRL, install trl~=1.16.0.",
        stacklevel=2,
    )

_SEED_PROMPT = re.compile(r"^agentr1 task seed (-?\d+)$")


def seed_prompt(seed: int) -> list[dict[str, str]]:
    """The placeholder prompt of a training row: the env owns the task, the row names its seed."""
    return [{"role": "user", "content": f"agentr1 task seed {int(seed)}"}]


def seed_of_prompt(prompt: Any) -> int:
    """The task seed a row's prompt names (see :func:`seed_prompt`)."""
    content = prompt[-1]["content"] if isinstance(prompt, list) and prompt else prompt
    m = _SEED_PROMPT.match(str(content))
    if m is None:
        raise ConfigError(
            f"a training row's prompt must name its task seed (agentr1_trl.trl_trainer.seed_prompt), got {content!r:.80}"
        )
    return int(m.group(1))


def seed_dataset(num_tasks: int, seed_offset: int = 0) -> Dataset:
    """A training "dataset" of task seeds ``seed_offset + [0, num_tasks)`` (the env owns the tasks)."""
    seeds = list(range(seed_offset, seed_offset + num_tasks))
    return Dataset.from_dict({"prompt": [seed_prompt(s) for s in seeds], "seed": seeds})


def _is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def _with_seed_prompts(dataset: Any) -> Any:
    """A user's dataset with a ``seed`` column gets the matching prompts."""
    if "seed" not in dataset.column_names:
        raise ConfigError("train_dataset needs a 'seed' column (one task seed per row)")
    return dataset.map(lambda row: {"prompt": seed_prompt(row["seed"])})


class DurableCheckpointsMixin:
    """Mix into a transformers ``Trainer`` subclass (before it in the bases) for complete-or-ignored checkpoints
    (see :mod:`agentr1_trl.run_dir`): rotation waits until the new checkpoint is marked complete, and
    ``train(resume_from_checkpoint=...)`` resolves to the newest complete checkpoint."""

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

        args: Any = self.args  # type: ignore[attr-defined]
        limit = args.save_total_limit
        args.save_total_limit = None  # no rotation until the new checkpoint is complete
        try:
            super()._save_checkpoint(model, trial)  # type: ignore[misc]
        finally:
            args.save_total_limit = limit
        run_dir = self._get_output_dir(trial=trial)  # type: ignore[attr-defined]
        step = self.state.global_step  # type: ignore[attr-defined]
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        if args.should_save:
            mark_complete(folder, step)
            if limit is not None:
                rotate_checkpoints(
                    output_dir=run_dir,
                    save_total_limit=limit,
                    best_model_checkpoint=self.state.best_model_checkpoint,  # type: ignore[attr-defined]
                    use_mtime=False,
                )

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        resume = resolve_resume(resume_from_checkpoint, self.args.output_dir)  # type: ignore[attr-defined]
        finished = self._finished_state(resume) if resume else None
        if finished is not None:
            # transformers' loop skips the checkpoint's batches and then trains one step before it checks
            # max_steps: a finished run resumed (to evaluate or save it) would train a step past its end
            from transformers.trainer_utils import TrainOutput

            self._load_from_checkpoint(resume)  # type: ignore[attr-defined]
            self.state = finished
            return TrainOutput(finished.global_step, 0.0, {})
        return super().train(resume, *args, **kwargs)  # type: ignore[misc]

    def _finished_state(self, checkpoint: str) -> Any:
        """The trainer state of ``checkpoint`` if it is at or past ``max_steps`` (a run that has used up its step
        budget), else None."""
        from transformers import TrainerState
        from transformers.trainer import TRAINER_STATE_NAME

        max_steps = int(getattr(self.args, "max_steps", -1) or -1)  # type: ignore[attr-defined]
        state_file = os.path.join(checkpoint, TRAINER_STATE_NAME)
        if max_steps <= 0 or not os.path.isfile(state_file):
            return None
        state = TrainerState.load_from_json(state_file)
        return state if state.global_step >= max_steps else None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """Load the checkpoint's optimizer and schedule, then apply the configured ``learning_rate`` where it
        differs from the checkpoint's: a resumed run trains at the rate it is given (the schedule keeps its
        shape and position), not silently at the stored one."""
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        if checkpoint is None:
            return
        from torch.optim.lr_scheduler import LambdaLR

        lr = float(self.args.learning_rate)  # type: ignore[attr-defined]
        scheduler = self.lr_scheduler  # type: ignore[attr-defined]
        stored = list(getattr(scheduler, "base_lrs", []) or [])
        if not stored or all(abs(b - lr) <= 1e-12 * max(abs(lr), 1e-30) for b in stored):
            return
        if not isinstance(scheduler, LambdaLR):
            raise ConfigError(
                f"{checkpoint} trains at learning_rate {stored[0]:g}; changing it on resume needs a LambdaLR "
                f"schedule (every transformers lr_scheduler_type but reduce_lr_on_plateau), not "
                f"{type(scheduler).__name__}"
            )
        optimizer = self.optimizer  # type: ignore[attr-defined]
        scheduler.base_lrs = [lr] * len(stored)
        for group, factor in zip(optimizer.param_groups, scheduler.lr_lambdas):
            group["initial_lr"] = lr
            group["lr"] = lr * factor(scheduler.last_epoch)
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
        print(
            f"learning rate {stored[0]:g} -> {lr:g} from step {self.state.global_step + 1}",  # type: ignore[attr-defined]
            flush=True,
        )


class TRLAgentTrainer(DurableCheckpointsMixin, GRPOTrainer):
    """TRL's training loop (buffering, old/reference log-probs with the LoRA adapter disabled, peft, logging,
    checkpoints) driven by multi-turn episodes. Subclasses implement :meth:`rollout` (seeds -> trajectories),
    :meth:`score_batch` (advantages) and :meth:`loss`; the batch they see is a dict of tensors with
    ``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask``, ``action_mask``, ``advantages``,
    ``old_per_token_logps``/``ref_per_token_logps`` (when TRL computed them) and whatever :meth:`score_batch`
    adds (one row per episode, so per-episode tensors travel with their rows through TRL's shuffling)."""

    #: writes the run directory's README.md at each checkpoint in place of TRL's generic card (``agentr1 train``
    #: sets it; None: TRL's own)
    card_writer: Any = None

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        if self.card_writer is not None:
            self.card_writer()
            return
        super().create_model_card(*args, **kwargs)

    def __init__(
        self,
        model: Any,
        args: Any,
        processing_class: Any,
        *,
        peft_config: Any = None,
        train_dataset: Any = None,
        callbacks: Any = None,
    ) -> None:
        # seconds of the current step: rollout, rollout + scoring, forward + backward (logged as time/*)
        self._rollout_s = self._generation_s = self._update_s = 0.0
        dataset = (
            seed_dataset(args.num_tasks, args.seed_offset)
            if train_dataset is None
            else _with_seed_prompts(train_dataset)
        )
        # full fine-tuning of a model passed as an object with a KL term: TRL would reload the reference from the
        # model's config path (empty for a model built in memory, or a directory the object has since departed
        # from); the reference is a frozen copy of the object as given instead
        reference, beta = None, args.beta
        if beta != 0.0 and peft_config is None and isinstance(model, torch.nn.Module) and not _is_peft(model):
            reference = copy.deepcopy(model).eval().requires_grad_(False)
            args.beta = 0.0
        try:
            super().__init__(
                model=model,
                reward_funcs=[env_return],
                args=args,
                train_dataset=dataset,
                processing_class=processing_class,
                peft_config=peft_config,
                callbacks=callbacks,
                rollout_func=self._trl_rollout,
            )
        finally:
            args.beta = beta
        if reference is not None:
            self.beta = beta
            if self.is_deepspeed_enabled or self.is_fsdp_enabled:
                raise ConfigError(
                    "full fine-tuning with beta > 0 under DeepSpeed or FSDP needs the model as a path (its "
                    "reference is loaded and sharded from there), not as an object"
                )
            if args.disable_dropout:
                disable_dropout_in_model(reference)
            # as TRL prepares the reference it loads: log-probs from a chunked head, never the full logits
            add_fused_lm_head(
                reference, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32
            )
            self.ref_model = self.accelerator.prepare_model(reference, evaluation_mode=True)
        unwrapped = self.accelerator.unwrap_model(self.model)
        #: what this device and process count decide for the run (precision, frozen base, update passes, shared
        #: prompts), resolved once here
        self.device_defaults = DeviceDefaults.resolve(
            args,
            device=self.accelerator.device.type,
            processes=self.accelerator.num_processes,
            deepspeed=bool(self.is_deepspeed_enabled),
            checkpointing=bool(getattr(unwrapped, "is_gradient_checkpointing", False)),
        )
        if getattr(
            args, "train_top_layers", 0
        ):  # before the frozen base goes to bf16 and the optimizer exists
            train_top_layers(self.model, args.train_top_layers)
        if self.device_defaults.bf16_base:
            bf16_frozen_base(self.model)
        if self.device_defaults.fuse_lora:
            fuse_lora_forward(self.model)
        if self.accelerator.num_processes > 1 and not self.supports_multi_process():
            raise ConfigError(
                f"{type(self).__name__} with these settings runs on one process only: "
                f"{self.multi_process_blocker()}"
            )

    # ---- what subclasses implement ---------------------------------------------------------------------
    def rollout(self, seeds: list[int]) -> list[Trajectory]:
        """One episode per seed (consecutive groups of ``num_generations`` share a seed)."""
        raise NotImplementedError

    def episode_return(self, traj: Trajectory) -> float:
        """The scalar TRL's group normalisation sees for an episode."""
        return traj.episode_return

    def loss_mask(self, traj: Trajectory) -> list[int]:
        """The mask the loss uses for an episode (the batch's ``action_mask``)."""
        return traj.action_mask

    def score_batch(self, batch: dict[str, Any], trajectories: list[Trajectory]) -> dict[str, Any]:
        """Add or replace advantages (and anything the loss needs) in ``batch``; TRL's group-normalised
        advantages are already there."""
        return batch

    def loss(self, model: Any, batch: dict[str, Any], whole: dict[str, Any] | None = None) -> torch.Tensor:
        """The loss of one micro-batch (before gradient-accumulation scaling, see :meth:`scale_for_accumulation`);
        ``whole``: the micro-batch ``batch`` is one pass of, whose denominators it takes (see
        :meth:`loss_denominators`)."""
        raise NotImplementedError

    def multi_process_blocker(self) -> str | None:
        """Why these settings cannot train multi-process (None: they can)."""
        return None

    def supports_multi_process(self) -> bool:
        return self.multi_process_blocker() is None

    def save_extra(self, output_dir: str) -> None:
        """Save what the model's own save does not hold (e.g. a value head)."""

    def load_extra(self, checkpoint: str) -> None:
        """Load what :meth:`save_extra` saved."""

    def on_scored(self, batch: dict[str, Any], trajectories: list[Trajectory], seeds: list[int]) -> None:
        """Called with each scored batch (advantages in place, one row per episode, before any per-turn rows)."""

    # ---- services for subclasses -------------------------------------------------------------------------
    @property
    def bf16_base(self) -> bool:
        """Whether the frozen base model's weights are stored in bf16 (:attr:`device_defaults`)."""
        return self.device_defaults.bf16_base

    @property
    def mode(self) -> str:
        return "train" if self.model.training else "eval"

    def log_metric(self, key: str, value: float) -> None:
        """Log a scalar with TRL's metrics (averaged over the logging interval, written by ``report_to``)."""
        self._metrics[self.mode][key].append(float(value))

    def token_logps(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        n: int,
        needed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-probs (at the sampling temperature) of the last ``n`` tokens of each row: :meth:`forward_logps`
        (only the ``needed`` positions of the completion are scored, the others are 0)."""
        return self.forward_logps(model, input_ids, attention_mask, n, needed=needed)[0]

    def forward_logps(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        n: int,
        hidden: bool = False,
        needed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The package's one log-prob forward, :func:`~agentr1_trl.forward.completion_logps`, on a row batch whose
        last ``n`` tokens are the completions, under the accelerator's autocast: each shared prompt run once where
        :meth:`shares_prompts` allows, the full forward elsewhere. Returns the log-probs (0 where not ``needed``;
        default: the completion's real tokens) and, with ``hidden``, the state before each completion token."""
        head = self.accelerator.unwrap_model(model).get_output_embeddings()
        with self.accelerator.autocast():
            return completion_logps(
                model,
                input_ids[:, :-n],
                attention_mask[:, :-n],
                input_ids[:, -n:],
                attention_mask[:, -n:],
                temperature=self.temperature,
                hidden=hidden,
                needed=needed,
                share_prompts=self.shares_prompts(model),
                head=head,
                unmasked_causal_rows=getattr(self.args, "unmasked_causal_rows", True),
                attention_kernel=getattr(self.args, "attention_kernel", "auto"),
            )

    def shares_prompts(self, model: Any) -> bool:
        """Whether the forward pass over ``model`` may run each shared prompt once: as :attr:`device_defaults`
        decided, unless gradient checkpointing was turned on since (it turns the KV cache off)."""
        unwrapped = self.accelerator.unwrap_model(model)
        return self.device_defaults.share_prompts and not getattr(
            unwrapped, "is_gradient_checkpointing", False
        )

    def loss_denominators(
        self,
        batch: dict[str, Any],
        mask: torch.Tensor,
        loss_type: str | None = None,
        whole: dict[str, Any] | None = None,
    ) -> tuple[int, float, int]:
        """``(rows, action tokens, width)`` for :func:`~agentr1_trl.losses.aggregate` on this micro-batch, chosen
        so that a step's micro-batches add up to the loss of the whole batch, as TRL's do: ``dapo`` divides by
        this micro-batch's share of the whole generation batch's action tokens (a token mean over the batch, not
        over each micro-batch), ``dr_grpo`` by the constant ``max_episode_tokens`` (not the micro-batch's
        padded width), ``bnpo`` by this micro-batch's tokens. ``loss_type`` defaults to the config's. ``whole``:
        when ``batch`` is one of several passes over a micro-batch, that micro-batch (its rows and tokens count)."""
        if whole is not None:  # one pass of several over a micro-batch: the micro-batch's rows and tokens
            batch, mask = whole, advantage_mask(whole, True)
        tokens = float(mask.sum().clamp(min=1))
        total = batch.get("num_items_in_batch")
        if (loss_type or self.loss_type) == "dapo" and total is not None:
            per_step = self.args.steps_per_generation if self.mode == "train" else 1
            tokens = max(float(total) / (self.accelerator.num_processes * per_step), 1.0)
        return mask.size(0), tokens, int(self.args.max_episode_tokens)

    def global_batch(
        self, tensors: dict[str, torch.Tensor], trajectories: list[Trajectory], width: int
    ) -> tuple[dict[str, torch.Tensor], list[Trajectory], Any]:
        """The generation batch of every process, for advantages that need a group's or the whole batch's
        episodes together (RLOO, GiGPO and per-turn RLOO groups, REINFORCE++'s and PPO's whitening).

        ``tensors`` are this process's per-row tensors (``(rows,)`` or ``(rows, width)``); returns them gathered
        in TRL's order (process 0's rows first: a group's episodes are consecutive there, whichever processes
        generated them), padded on the right to the widest process's width, every process's trajectories in
        the same order, and ``local(t)``: this process's rows (and its ``width``) of a tensor computed over the
        gathered batch. In one process everything is returned as it is."""
        accelerator = self.accelerator
        if accelerator.num_processes == 1:
            return tensors, trajectories, lambda t: t
        from accelerate.utils import gather_object

        rows = len(trajectories)
        counts = gather_object([rows])
        if len(set(counts)) != 1:
            raise ConfigError(
                f"processes hold different numbers of episodes ({counts}); TRL gives each the same"
            )
        gathered = {
            key: accelerator.gather(accelerator.pad_across_processes(t, dim=1) if t.dim() > 1 else t)
            for key, t in tensors.items()
        }
        start = rows * accelerator.process_index

        def local(t: torch.Tensor) -> torch.Tensor:
            t = t[start : start + rows]
            return t[:, :width] if t.dim() > 1 else t

        return gathered, gather_object(list(trajectories)), local

    def scale_for_accumulation(self, loss: torch.Tensor) -> torch.Tensor:
        return loss / self.current_gradient_accumulation_steps if self.mode == "train" else loss

    # ---- TRL hooks -------------------------------------------------------------------------------------
    def _trl_rollout(self, prompts: list, trainer: Any) -> dict[str, list]:
        start = time.perf_counter()
        seeds = [seed_of_prompt(p) for p in prompts]
        trajs = self.rollout(seeds)  # may play other seeds for some groups (updated in place)
        self._rollout_s = time.perf_counter() - start
        for t in trajs:
            if not t.completion_ids:  # TRL cannot train on an empty completion (it fails with an IndexError)
                budget = self.args.max_episode_tokens  # type: ignore[attr-defined]
                if len(t.prompt_ids) >= budget:
                    raise ConfigError(
                        f"the env's first prompt is {len(t.prompt_ids)} tokens, at or over max_episode_tokens="
                        f"{budget}: nothing is left to generate; raise max_episode_tokens"
                    )
                raise GenerationError(f"an episode generated no tokens ({t.truncated_reason or 'no reason'})")
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            "env_mask": [self.loss_mask(t) for t in trajs],  # TRL's name for the action mask
            "episode_return": [self.episode_return(t) for t in trajs],
            "trajectory": trajs,  # merged into the rows by TRL: travels with the batch
            "task_seed": seeds,  # the seeds played
        }

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        """TRL's buffering, with each optimizer step's micro-batches regrouped (``regroup_micro_batches``:
        :func:`~agentr1_trl.forward.regroup_micro_batches`) when a generation batch has just been buffered."""
        steps = self.args.steps_per_generation
        fresh = self._buffered_inputs is None or self._step % (steps * self.num_iterations) == 0
        inputs = super()._prepare_inputs(generation_batch)
        if not (self.model.training and fresh and getattr(self.args, "regroup_micro_batches", False)):
            return inputs
        per_update = self.args.gradient_accumulation_steps
        if steps % per_update != 0:  # an optimizer step would straddle two blocks: leave TRL's order
            return inputs
        buffered = self._buffered_inputs
        self._buffered_inputs = [
            chunk
            for start in range(0, steps, per_update)  # rows stay in the optimizer step TRL drew them for
            for chunk in regroup_micro_batches(buffered[start : start + per_update])
        ]
        return self._buffered_inputs[self._step % steps]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        start = time.perf_counter()
        self._rollout_s = 0.0
        output = self._score(inputs)
        self._generation_s = time.perf_counter() - start
        self.log_metric("time/rollout_s", self._rollout_s)  # generation + env steps (+ dynamic sampling)
        # TRL's old/reference log-probs, the advantages, per-turn rows
        self.log_metric("time/score_s", self._generation_s - self._rollout_s)
        return output

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's step, timed: ``time/update_s`` is the forward and backward passes of an optimizer step (summed
        over its micro-batches), without the rollout and scoring that TRL runs inside the first one."""
        self._generation_s = 0.0
        start = time.perf_counter()
        out = super().training_step(model, inputs, num_items_in_batch)
        self._update_s += time.perf_counter() - start - self._generation_s
        if self._step % self.current_gradient_accumulation_steps == 0:
            self.log_metric("time/update_s", self._update_s)
            self._update_s = 0.0
        return out

    def _score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        trajectories = [row.pop("trajectory") for row in inputs]
        seeds = [row.pop("task_seed", None) for row in inputs]
        check_rewards(trajectories)
        output["action_mask"] = output.pop("tool_mask")
        output = self.score_batch(output, trajectories)
        played = [seed_of_prompt(row["prompt"]) if s is None else s for s, row in zip(seeds, inputs)]
        self.on_scored(output, trajectories, played)
        if not all(t.one_sequence for t in trajectories):
            output = self._per_turn_rows(output, trajectories)
        return output

    def _per_turn_rows(self, batch: dict[str, Any], trajectories: list[Trajectory]) -> dict[str, Any]:
        """Episodes whose chat template is not prefix-stable train as one row per turn (see
        :mod:`agentr1_trl.turn_rows`); the old policy's and the reference's log-probs are recomputed for those rows in
        their own contexts, as TRL computed them for the others."""
        tok = self.processing_class
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        multiple = self.args.steps_per_generation if self.model.training else 1
        out, turn_rows = expand_turn_rows(batch, trajectories, pad_id=pad_id, multiple=multiple)
        self.log_metric("signal/per_turn_rows", len(turn_rows) / max(len(out["completion_ids"]), 1))
        needed = [key for key in CONTEXT_DEPENDENT if out.get(key) is not None]
        if turn_rows and needed:
            idx = torch.tensor(turn_rows, device=out["completion_ids"].device)
            input_ids = torch.cat([out["prompt_ids"][idx], out["completion_ids"][idx]], dim=1)
            attention = torch.cat([out["prompt_mask"][idx], out["completion_mask"][idx]], dim=1)
            width = out["completion_ids"].size(1)
            with torch.no_grad():
                if "old_per_token_logps" in needed:
                    out["old_per_token_logps"][idx] = self.token_logps(
                        self.model, input_ids, attention, width
                    )
                if "ref_per_token_logps" in needed:
                    if self.ref_model is not None:
                        ref = self.token_logps(self.ref_model, input_ids, attention, width)
                    else:  # as TRL does for a LoRA policy: the adapter disabled (or the "ref" adapter)
                        model = self.accelerator.unwrap_model(self.model)
                        with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                            ref = self.token_logps(self.model, input_ids, attention, width)
                    out["ref_per_token_logps"][idx] = ref
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        if (
            self.model.training
        ):  # what the forward pass costs: tokens in the micro-batch, and how many are padding
            width = inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1)
            padded = inputs["prompt_ids"].size(0) * width
            real = float(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
            self.log_metric("update/tokens", real)
            self.log_metric("update/padding_fraction", 1.0 - real / max(padded, 1))
        passes = update_passes(inputs, self.update_token_budget(), shared=self.shares_prompts(model))
        if self.model.training:
            self.log_metric("update/passes", len(passes))
        multiple = self.device_defaults.width_multiple
        if len(passes) == 1:
            return self.loss(model, pad_width(inputs, multiple))
        # several forward/backward passes, each with the whole micro-batch's denominators: their gradients add up
        # to the micro-batch's. All but the last are backpropagated here; the last goes back to TRL's
        # training_step, plus the others' (constant) values, so that the loss it logs is the micro-batch's.
        done = None
        for idx in passes[:-1]:
            part = self.loss(model, pad_width(select_rows(inputs, idx), multiple), whole=inputs)
            if part.requires_grad:  # not under TRL's evaluation (no_grad): there the passes only add up
                self.accelerator.backward(part)
            done = part.detach() if done is None else done + part.detach()
        last = self.loss(model, pad_width(select_rows(inputs, passes[-1]), multiple), whole=inputs)
        return last + done

    def update_token_budget(self) -> int:
        """The most tokens one forward/backward pass holds; 0: the micro-batch runs as one pass
        (:attr:`device_defaults`)."""
        return self.device_defaults.update_tokens

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        self.save_extra(output_dir or self.args.output_dir)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.load_extra(resume_from_checkpoint)
