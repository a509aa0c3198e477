"""The recipe of one run: settings -> trainer (the warm start included) -> held-out evaluations -> outputs. It
orchestrates only: the warm start is :func:`agentr1_trl.sft.oracle_warm_start`, the held-out evaluation the
trainer's own (``held_out``: our rollout through :func:`agentr1_trl.model_eval.held_out_eval`, a user's agent
through its loop), the curve :func:`agentr1_trl.run_report.plot_reward_curve`; the trainer class (from
:mod:`agentr1_trl.algorithms`) says what the run trains on (``plan_tasks``), so the recipe never asks whether
the agent is ours or the user's.

``agentr1 train`` (:mod:`agentr1_trl.cli`) turns flags, a YAML config and ``--set`` into a :class:`RunPlan`
and calls :func:`run_training`; ``benchmarks/learning.py`` (and ``benchmarks/table3.py`` through it) build their
adapters with the same pieces: :func:`lora_config`, :func:`~agentr1_trl.sft.oracle_warm_start` and
:func:`~agentr1_trl.model_eval.held_out_eval`.
Writes ``OUTPUT_DIR/adapter`` (the LoRA adapter, the tokenizer and, for PPO, the value head), ``metrics.jsonl``
(the trainer's log history), ``reward_curve.png``, ``eval_before_rl.json``/``eval_after_rl.json`` and the run
record ``--resume`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentr1_gym.episodes import EPISODES_FILE, RunFiles
from agentr1_gym.errors import ConfigError
from agentr1_trl.algorithms import trainer_classes
from agentr1_trl.model_eval import EVAL_EPISODES, EVAL_SEED
from agentr1_trl.presets import build_config, check_field_types
from agentr1_trl.run_dir import (
    OUTPUTS,
    RUN_FILE,
    check_checkpoint_matches,
    check_writable,
    clear_or_refuse,
    resolve_resume,
    write_run_file,
)
from agentr1_trl.run_report import (
    closing_lines,
    describe_hardware,
    model_card,
    plot_reward_curve,
    quiet_progress,
    step_clock,
)
from agentr1_trl.sft import oracle_warm_start

__all__ = ["LORA_TARGETS", "RunPlan", "lora_config", "run_training"]

#: the modules the LoRA adapter trains
LORA_TARGETS = ("q_proj", "v_proj")


def lora_config(r: int, layers: int = 0, model: Any = None) -> Any:
    """The adapter every run trains: rank ``r`` (alpha ``2r``) on :data:`LORA_TARGETS`, in every decoder layer of
    ``model``, or with ``layers`` > 0 in its top ``layers`` only (PEFT's ``layers_to_transform``): nothing below the
    lowest adapted layer then needs a gradient, so the backward pass stops there."""
    from peft import LoraConfig

    config = LoraConfig(r=r, lora_alpha=2 * r, target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
    if layers:
        total = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        if not isinstance(total, int):
            raise ConfigError(
                "lora_layers needs the model, to know its layer count: lora_config(r, layers, model)"
            )
        if layers > total:
            raise ConfigError(f"lora_layers={layers}, but the model has {total} decoder layers")
        if layers < total:
            config.layers_to_transform = list(range(total - layers, total))
    return config


@dataclass
class RunPlan:
    """What one ``agentr1 train`` run does: the algorithm, the policy, the adapter's rank, the warm start, the
    trainer config's fields (``settings``), what it resumes (None: a new run; True: the newest complete
    checkpoint of ``output_dir``; or a checkpoint path), the record a resumed run continues (``run_file``), the
    changes a resume applies (printed), the held-out episodes evaluated before and after RL, and whether a new run
    may replace another in its output dir."""

    algo: str
    model: str
    lora_r: int
    warm_start: int
    settings: dict[str, Any]
    #: LoRA on the top K decoder layers only (0: every layer)
    lora_layers: int = 0
    resume: Any = None
    run_file: Path | None = None
    changes: list[str] = field(default_factory=list)
    eval_episodes: int = EVAL_EPISODES
    #: a new run into a directory that holds another: replace it (else refused)
    overwrite: bool = False
    #: where to write the run's result as JSON (``--json FILE``), besides the run dir
    json_path: str | None = None

    @property
    def output_dir(self) -> Path:
        return Path(self.settings["output_dir"])

    def trainer_classes(self) -> tuple[Any, Any]:
        """The config and trainer classes of ``algo``, after checking the plan's own fields."""
        where = f"{self.run_file}: " if self.run_file is not None else ""
        for key, value in (
            ("lora_r", self.lora_r),
            ("warm_start", self.warm_start),
            ("lora_layers", self.lora_layers),
        ):
            low = 1 if key == "lora_r" else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{where}{key} must be a whole number >= {low}, got {value!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"{where}model must be 'smollm2' or a model directory, got {self.model!r}")
        try:
            classes = trainer_classes(self.algo, agent=bool(self.settings.get("agent")))
            check_field_types(classes[0], self.settings)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None
        return classes


def _resume_point(plan: RunPlan) -> tuple[str | None, bool]:
    """The checkpoint to resume from (None: from the start) and whether the run already reached max_steps."""
    output_dir = plan.output_dir
    resume_from = resolve_resume(plan.resume, output_dir)
    if plan.resume is not None and resume_from is None:
        print(f"no complete checkpoint in {output_dir} yet: starting from the beginning")
    if not resume_from:
        return None, False
    check_checkpoint_matches(resume_from, plan.algo, plan.lora_r, plan.lora_layers)
    state = json.loads((Path(resume_from) / "trainer_state.json").read_text(encoding="utf-8"))
    if state["global_step"] >= int(plan.settings["max_steps"]):
        # transformers would run one more step past max_steps; the run's outputs stay as they are
        print(
            f"{output_dir} already reached max_steps={plan.settings['max_steps']} ({resume_from}); nothing to "
            "train. Extend it with --set max_steps=N."
        )
        return resume_from, True
    return resume_from, False


def _make_trainer(
    plan: RunPlan, trainer_cls: Any, config: Any, resume_from: str | None
) -> tuple[Any, dict[str, Any]]:
    """Load the policy, record the run, warm-start a new run's adapter, and build the trainer."""
    from agentr1_trl.models import load_policy

    model, tokenizer, _ = load_policy(plan.model)  # after every check: a bad flag fails in a second
    model.train()
    adapter = lora_config(plan.lora_r, plan.lora_layers, model)  # refuses more layers than the model has
    if not plan.resume:
        clear_or_refuse(plan.output_dir, overwrite=plan.overwrite, remove=True)
    # written only now that the model loaded: a failed invocation never overwrites an earlier run's config,
    # which `--resume` reads
    run = {"algo": plan.algo, "model": plan.model, "lora_r": plan.lora_r, "warm_start": plan.warm_start,
           "lora_layers": plan.lora_layers}  # fmt: skip
    run["eval_episodes"] = plan.eval_episodes  # a resume evaluates as many as the run started with
    run["settings"] = plan.settings
    if plan.run_file is not None:  # a resumed run keeps what it recorded about itself (its engine, ...)
        run = {**json.loads(plan.run_file.read_text(encoding="utf-8")), **run}
    write_run_file(plan.output_dir / RUN_FILE, run)
    if resume_from:
        print(f"resuming from {resume_from} (the warm start is in its adapter)")
    if plan.warm_start == 0 or resume_from:
        return trainer_cls(model, config, tokenizer, peft_config=adapter), run
    from peft import get_peft_model

    model = get_peft_model(model, adapter)
    # in the update's precision (bf16 where the hardware computes it faster, the frozen base then bf16 on a CPU)
    losses = oracle_warm_start(model, tokenizer, config.env_id, config.env_kwargs, plan.warm_start,
                               max_new_tokens=config.max_new_tokens_per_turn, bf16=bool(config.bf16),
                               bf16_base=config.bf16_base)  # fmt: skip
    print(
        f"warm start on {plan.warm_start} oracle transcripts: loss per epoch {[round(x, 3) for x in losses]}"
    )
    model.train()
    return trainer_cls(model, config, tokenizer), run


def run_training(plan: RunPlan) -> int:
    """Run a plan: check it (the env and its kwargs included) before any model loads, then train it with its
    held-out evaluations and write its outputs. 0 when done (or already done)."""
    config_cls, trainer_cls = plan.trainer_classes()
    # our rollout or the user's agent: the trainer class knows what it trains on (checked before any model loads)
    train_kwargs, eval_kwargs, imitable = trainer_cls.plan_tasks(plan.settings, plan.eval_episodes > 0)
    if plan.warm_start and not imitable:
        print(f"no warm start: a task file has no oracle to imitate (warm_start {plan.warm_start} -> 0)")
        plan.warm_start = 0
    config = build_config(config_cls, plan.settings)
    config.env_kwargs = train_kwargs  # a fixed task list trains on its training part, evaluates on the rest
    resume_from, finished = _resume_point(plan)
    if finished:
        return 0
    if not plan.resume:
        clear_or_refuse(plan.output_dir, overwrite=plan.overwrite, remove=False)
    check_writable(plan.output_dir)
    if not resume_from:  # a new run's saved episodes start empty (a resumed run appends to its own)
        (plan.output_dir / EPISODES_FILE).unlink(missing_ok=True)
    for change in plan.changes:
        print(f"resume: {change}", flush=True)
    print(describe_hardware(bool(config.bf16), config.stores_base_in_bf16()), flush=True)
    trainer, run = _make_trainer(plan, trainer_cls, config, resume_from)
    trainer.add_callback(step_clock())
    quiet_progress(trainer)
    try:
        _train_and_report(trainer, config, run, plan, resume_from, eval_kwargs)
    finally:
        trainer.close_generation()  # a vLLM engine and its temporary weights go now, on errors too
    return 0


def _evaluate(trainer: Any, plan: RunPlan, label: str, env_kwargs: Any, step: int) -> Any:
    return trainer.held_out(
        label, plan.eval_episodes, env_kwargs, save_episodes=str(plan.output_dir / EPISODES_FILE), step=step
    )


def _train_and_report(
    trainer: Any, config: Any, run: dict[str, Any], plan: RunPlan, resume_from: str | None, eval_kwargs: Any
) -> None:
    """Evaluate before RL (once per run), train, evaluate after, and write the adapter, metrics and curve."""
    output_dir = plan.output_dir
    engine = trainer.describe_generation()
    print(f"rollouts and evaluations generate with {engine}", flush=True)
    run["engine"] = engine
    write_run_file(output_dir / RUN_FILE, run)
    before_file = output_dir / RunFiles.eval_before
    if resume_from and before_file.is_file():
        before = json.loads(before_file.read_text(encoding="utf-8"))
    elif resume_from:
        # the policy loads its checkpoint only when training resumes: evaluated now, it would be neither the
        # RL start nor the checkpoint (a fresh adapter), so the run has no before-RL figure
        before = None
        if plan.eval_episodes > 0:
            print(f"no {before_file.name} in {output_dir}: the RL start cannot be measured after training began; "
                  "the run reports no before-RL figure")  # fmt: skip
    else:
        before = _evaluate(trainer, plan, "before RL", eval_kwargs, 0)
        if before is not None:
            before_file.write_text(json.dumps(before, indent=1), encoding="utf-8")
    trainer.card_writer = lambda: _write_card(trainer, plan, (before, None), finished=False)
    trainer.card_writer()
    trainer.train(resume_from_checkpoint=resume_from)
    trainer.card_writer = None
    _save_model_and_metrics(
        trainer, output_dir
    )  # first: an evaluation that fails cannot lose the trained model
    after = _evaluate(trainer, plan, "after RL", eval_kwargs, trainer.state.global_step)
    if after is not None:
        (output_dir / RunFiles.eval_after).write_text(json.dumps(after, indent=1), encoding="utf-8")
        if before is not None:
            if before["success"] > 0:
                change = f"{after['success'] / before['success']:.2f}x the RL start"
            else:
                change = "the RL start had none" if after["success"] == 0 else "up from none at the RL start"
            print(f"held-out success {before['success']:.3f} -> {after['success']:.3f} ({change})")
    _write_outputs(trainer, config, plan, (before, after))


def _save_model_and_metrics(trainer: Any, output_dir: Path) -> None:
    """The trained adapter (with its tokenizer) and the metrics log."""
    adapter = output_dir / RunFiles.adapter
    trainer.save_model(str(adapter))
    trainer.processing_class.save_pretrained(str(adapter))
    with (output_dir / RunFiles.metrics).open("w", encoding="utf-8") as f:
        for row in trainer.state.log_history:
            f.write(json.dumps(row) + "\n")


def _write_outputs(trainer: Any, config: Any, plan: RunPlan, evals: Sequence[Any]) -> None:
    output_dir = plan.output_dir
    plot_reward_curve(
        trainer.state.log_history,
        output_dir / RunFiles.curve,
        f"{plan.algo.upper()} on {config.env_id} ({plan.model})",
        held_out={"before": (0, evals[0]), "after": (trainer.state.global_step, evals[1])},
    )
    _write_card(trainer, plan, (evals[0], evals[1]), finished=True)
    if plan.json_path:
        result = {
            "run_dir": str(output_dir), "algo": plan.algo, "env_id": config.env_id, "model": plan.model,
            "steps": trainer.state.global_step, "held_out_before_rl": evals[0], "held_out_after_rl": evals[1],
            "outputs": sorted(name for name in OUTPUTS if (output_dir / name).exists()),
        }  # fmt: skip
        Path(plan.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("\n".join(closing_lines(output_dir, config.env_id, plan.model, plan.eval_episodes, EVAL_SEED,
                                   agent=plan.settings.get("agent") or "")))  # fmt: skip


def _write_card(trainer: Any, plan: RunPlan, evals: tuple[Any, Any], *, finished: bool) -> None:
    """The run directory's README.md: ours, never TRL's generic card (which names no base model and no
    result); written when training starts, at each checkpoint (the trainer's ``card_writer``) and at the end."""
    card = model_card(
        plan.output_dir,
        algo=plan.algo,
        model=plan.model,
        settings=plan.settings,
        evals=evals,
        episodes=plan.eval_episodes,
        seed=EVAL_SEED,
        steps=trainer.state.global_step,
        finished=finished,
    )
    (plan.output_dir / RunFiles.card).write_text(card, encoding="utf-8")
