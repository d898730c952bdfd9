"""Configs of the generator's entry points: SFT warm start, GRPO, and batch inference.

Each is a dataclass whose fields carry a one-line docstring (the ``--help`` text, through
:func:`core.cli.parse`), grouped by topic as TRL's ``GRPOConfig`` is, and checked in
``__post_init__``: a bad value raises :class:`~core.errors.ConfigError` naming the
flag, and a conflict names both values. The model (:class:`generator.models.ModelConfig`) and
reward (:class:`rewards.sql.SQLRewardConfig`) settings are embedded without a prefix, so their
flags read ``--lora-r``, ``--load-in-4bit``, ``--execution-weight``, ``--timeout-s``.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from core.errors import ConfigError
from generator.grpo import LOSS_TYPES
from generator.models import ModelConfig
from generator.prompt import PromptOverrides, PromptSettings
from rewards.sql import SQLRewardConfig

SPLIT_NAMES = ("train", "validation", "test", "test_heldout")
DYNAMIC_SAMPLING = ("resample", "more", "off")
DAPO_EPSILON_HIGH = 0.28
"""DAPO's clip-higher upper bound, used when ``--epsilon-high`` is not given and the loss is dapo."""


def _positive(value: float, flag: str) -> None:
    if not value > 0:  # also refuses NaN
        raise ConfigError(f"must be positive, got {value}", where=flag)


@dataclass
class GeneratorSFTConfig:
    """``python -m generator.train_sft``: supervised warm start on the gold SQL of the training split."""

    # ---- data and output
    data: Path
    """Data set folder written by `python -m data_pipeline.build` (schema.json, samples.jsonl)."""
    out: Path
    """Output folder: the adapter (or full model), tokenizer and route2sql_generator.json, replaced atomically."""
    db: Path | None = None
    """SQLite file the gold SQL runs on; default: the one recorded in the data set."""
    model: Annotated[ModelConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelConfig)
    """Base model, precision and LoRA settings."""

    # ---- prompt
    prompt: Annotated[PromptSettings, tyro.conf.OmitArgPrefixes] = field(default_factory=PromptSettings)
    """How each training prompt is built; recorded in the output folder, so later commands prompt the same way."""
    max_prompt_tokens: int = 2048
    """Samples whose prompt + answer is longer are skipped (and counted)."""

    # ---- optimisation
    learning_rate: float = 2e-4
    """Peak learning rate of AdamW (cosine decay to 0 after a linear warm-up)."""
    warmup_ratio: float = 0.05
    """Share of the optimizer steps spent warming the learning rate up from 0."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradients are clipped to this global L2 norm."""
    batch_size: int = 4
    """Samples per optimizer step."""
    pack: bool = False
    """Run a step's samples as left-padded batches instead of one at a time; on 2 CPU cores it did not pay (Northwind, batch 8: 19 s per step and 9.3 GB RSS packed, 16 s and 3.4 GB one at a time), it may on a GPU."""
    pack_tokens: int = 2048
    """Most padded tokens (rows x longest chat) in one packed forward pass: bounds the memory of a step."""
    num_epochs: float = 1.0
    """Passes over the training split (fractions allowed)."""
    max_steps: int | None = None
    """Train for exactly this many optimizer steps (replaces --num-epochs; the data repeats as needed)."""
    max_train_samples: int | None = None
    """Use only this many training samples (a random, seeded subset), for short budgets."""

    # ---- run
    seed: int = 0
    """Random seed (sample order, subset, LoRA dropout)."""
    threads: int | None = None
    """torch CPU threads; default: torch's choice."""
    progress: bool = True
    """Show progress: a bar on a terminal, a line a minute with the rate and time left in a log file."""

    def __post_init__(self) -> None:
        _positive(self.max_prompt_tokens, "--max-prompt-tokens")
        _positive(self.learning_rate, "--learning-rate")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"must be in [0, 1), got {self.warmup_ratio}", where="--warmup-ratio")
        _positive(self.max_grad_norm, "--max-grad-norm")
        _positive(self.batch_size, "--batch-size")
        _positive(self.pack_tokens, "--pack-tokens")
        _positive(self.num_epochs, "--num-epochs")
        if self.max_steps is not None:
            _positive(self.max_steps, "--max-steps")
        if self.max_train_samples is not None:
            _positive(self.max_train_samples, "--max-train-samples")


@dataclass
class GRPOConfig:
    """``python -m generator.train_grpo``: GRPO (DAPO variant by default) on execution rewards."""

    # ---- data and output
    data: Path
    """Data set folder written by `python -m data_pipeline.build`."""
    out: Path
    """Output folder: checkpoints, metrics.jsonl, TensorBoard runs/, reward_curves.png, the final adapter."""
    db: Path | None = None
    """SQLite file the SQL runs on; default: the one recorded in the data set (the smoke test checks it)."""
    init: Path | None = None
    """Start from this generator folder (e.g. the output of generator.train_sft); default: the base --model."""
    router: Path | None = None
    """Router checkpoint folder: prompts use its predicted path; default: the gold path of each sample."""
    resume: bool = False
    """Continue from the latest checkpoint-* in --out (adapter, optimizer, scheduler, RNG, step)."""
    model: Annotated[ModelConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelConfig)
    """Base model, precision and LoRA settings (LoRA settings come from --init when it has an adapter)."""
    reward: Annotated[SQLRewardConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=SQLRewardConfig)
    """Reward weights and SQL execution limits (the weights of the GRPO text-to-SQL write-up by default)."""

    # ---- prompt
    prompt: Annotated[PromptOverrides, tyro.conf.OmitArgPrefixes] = field(default_factory=PromptOverrides)
    """Prompt settings; each one not given is what --init was trained with (a base model: 2 examples, reasoning, full schema, linked values)."""
    max_prompt_tokens: int = 2048
    """Training samples whose prompt is longer are left out (and counted)."""

    # ---- generation
    num_generations: int = 8
    """G: completions sampled per prompt (one group)."""
    max_completion_length: int = 192
    """New tokens per completion at most; also dr_grpo's constant normaliser (Northwind's gold answers: median 124, max 180)."""
    temperature: float = 0.9
    """Sampling temperature; log-probs are computed at the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0: off)."""

    # ---- GRPO loss
    loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo"
    """grpo: per-sequence mean; dapo: token-level mean + clip-higher; dr_grpo: constant normaliser, no std scaling."""
    beta: float = 0.01
    """KL coefficient to the reference (the base model, adapters off); k3 estimator. 0 disables."""
    epsilon: float = 0.2
    """Lower clip range: the ratio is clipped below at 1 - epsilon."""
    epsilon_high: float | None = None
    """Upper clip range (1 + epsilon_high); default 0.28 for dapo (clip-higher), else --epsilon."""
    scale_rewards: bool | None = None
    """Divide advantages by the group std; default: on, except for dr_grpo."""
    num_iterations: int = 1
    """Policy updates per generated batch (mu); above 1 the clip starts to matter."""

    # ---- memory (the results do not depend on these, only peak memory and speed)
    micro_batch: int = 2
    """Completions per forward and backward pass of the policy and the reference (the loss is the same for any value; smaller: less memory)."""
    prompt_chunk: int = 256
    """Prompt tokens recomputed at once in the prompt's backward pass (the gradient is the same for any value; smaller: less memory)."""

    # ---- zero-std groups
    dynamic_sampling: Literal["resample", "more", "off"] = "resample"
    """What to do with a group whose rewards are all equal: draw a new prompt, sample G more for it, or nothing."""
    dynamic_sampling_signal: Literal["total", "execution"] = "total"
    """Which reward's spread marks a group for a redraw: total (all components), or execution (a group where no completion differs in execution reward is redrawn even when proxy rewards differ)."""
    max_resamples: int = 2
    """Dynamic-sampling redraws allowed per step and process (each costs one group's generation)."""
    virtual_full_score: bool = False
    """Append a reward of --full-score to every group's mean/std (not the loss), so equal groups still move."""
    full_score: float | None = None
    """The virtual anchor's reward; default: the largest possible total (3.8 with default weights)."""

    # ---- optimisation
    learning_rate: float = 2e-5
    """Peak AdamW learning rate (cosine decay to 0 after warm-up)."""
    warmup_ratio: float = 0.0
    """Share of the steps spent warming the learning rate up."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm)."""
    max_steps: int = 50
    """Optimizer steps (each: prompts_per_step x num_generations completions per process)."""
    prompts_per_step: int = 1
    """Prompts (groups) per step and process; processes draw disjoint prompts."""

    # ---- smoke test (seed 000, pitfall 1)
    smoke_samples: int = 10
    """Random training samples the smoke test generates for before training starts."""
    smoke_generations: int = 2
    """Completions per smoke-test sample."""
    skip_smoke_test: bool = False
    """Start without the smoke test (not recommended: a dead execution reward trains on proxies only)."""
    smoke_only: bool = False
    """Run the smoke test, write OUT/smoke_test.json and stop (check a setup before a long run)."""

    # ---- logging and checkpoints
    save_steps: int = 25
    """Write out/checkpoint-<step> every this many steps (and at the end)."""
    save_total_limit: int = 2
    """Checkpoints kept (oldest removed first)."""
    seed: int = 0
    """Random seed (prompt order, sampling); each process adds its rank."""
    threads: int | None = None
    """torch CPU threads per process; default: torch's choice."""
    progress: bool = True
    """Show progress on the main process: a bar on a terminal, a line a minute with the rate and time left in a log file."""

    def __post_init__(self) -> None:
        _positive(self.max_prompt_tokens, "--max-prompt-tokens")
        if self.prompt.with_reasoning is False:  # answers without a reasoning block are the asked-for format
            self.reward = replace(self.reward, require_reasoning=False)
        if self.num_generations < 2:
            raise ConfigError(f"must be >= 2 (advantages compare completions of a group), got {self.num_generations}",
                              where="--num-generations")  # fmt: skip
        _positive(self.max_completion_length, "--max-completion-length")
        _positive(self.temperature, "--temperature")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"must be in (0, 1], got {self.top_p}", where="--top-p")
        if self.loss_type not in LOSS_TYPES:
            raise ConfigError(f"must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}", where="--loss-type")
        if self.beta < 0:
            raise ConfigError(f"must be >= 0, got {self.beta}", where="--beta")
        if not 0.0 < self.epsilon < 1.0:
            raise ConfigError(f"must be in (0, 1), got {self.epsilon}", where="--epsilon")
        if self.clip_high < self.epsilon:
            raise ConfigError(
                f"--epsilon-high ({self.epsilon_high}) must be >= --epsilon ({self.epsilon}): clip-higher only widens "
                "the upper side", where="--epsilon-high")  # fmt: skip
        if self.scale_rewards and self.loss_type == "dr_grpo":
            raise ConfigError(
                "--scale-rewards True conflicts with --loss-type dr_grpo (Dr. GRPO removes the std scaling)",
                where="--scale-rewards",
            )
        _positive(self.num_iterations, "--num-iterations")
        _positive(self.micro_batch, "--micro-batch")
        _positive(self.prompt_chunk, "--prompt-chunk")
        if self.dynamic_sampling not in DYNAMIC_SAMPLING:
            raise ConfigError(f"must be one of {', '.join(DYNAMIC_SAMPLING)}, got {self.dynamic_sampling!r}",
                              where="--dynamic-sampling")  # fmt: skip
        if self.dynamic_sampling_signal not in ("total", "execution"):
            raise ConfigError(f"must be total or execution, got {self.dynamic_sampling_signal!r}",
                              where="--dynamic-sampling-signal")  # fmt: skip
        if self.max_resamples < 0:
            raise ConfigError(f"must be >= 0, got {self.max_resamples}", where="--max-resamples")
        if self.full_score is not None and not self.virtual_full_score:
            raise ConfigError(f"--full-score {self.full_score} is set but --virtual-full-score is False",
                              where="--full-score")  # fmt: skip
        if self.virtual_full_score and self.anchor_score < self.reward.max_total:
            warnings.warn(
                f"--full-score {self.anchor_score} is below the largest reward ({self.reward.max_total}): groups "
                "scoring above it get negative advantages for being better than the anchor",
                stacklevel=2,
            )
        _positive(self.learning_rate, "--learning-rate")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"must be in [0, 1), got {self.warmup_ratio}", where="--warmup-ratio")
        _positive(self.max_grad_norm, "--max-grad-norm")
        _positive(self.max_steps, "--max-steps")
        _positive(self.prompts_per_step, "--prompts-per-step")
        if self.smoke_only and self.skip_smoke_test:
            raise ConfigError("--smoke-only True conflicts with --skip-smoke-test True", where="--smoke-only")
        if not self.skip_smoke_test:
            _positive(self.smoke_samples, "--smoke-samples")
            _positive(self.smoke_generations, "--smoke-generations")
        _positive(self.save_steps, "--save-steps")
        _positive(self.save_total_limit, "--save-total-limit")
        if self.beta > 0 and not self.model.use_lora:
            warnings.warn(
                "--beta > 0 without LoRA keeps a second, frozen copy of the model as the KL reference "
                "(twice the weight memory); with LoRA the reference is the same model with adapters off",
                stacklevel=2,
            )


    @property
    def clip_high(self) -> float:
        """The upper clip range in use: --epsilon-high, else 0.28 for dapo, else --epsilon."""
        if self.epsilon_high is not None:
            return self.epsilon_high
        return DAPO_EPSILON_HIGH if self.loss_type == "dapo" else self.epsilon

    @property
    def scale(self) -> bool:
        """Whether advantages are divided by the group std: --scale-rewards, else not for dr_grpo."""
        return self.scale_rewards if self.scale_rewards is not None else self.loss_type != "dr_grpo"

    @property
    def anchor_score(self) -> float:
        """The virtual full score's reward: --full-score, else the largest possible total."""
        return self.full_score if self.full_score is not None else self.reward.max_total


@dataclass
class GenerateConfig:
    """``python -m generator.generate``: write the SQL for every question of a data split and score it."""

    data: Path
    """Data set folder written by `python -m data_pipeline.build`."""
    out: Path
    """JSONL file of predictions (one per sample, with its reward components); a summary JSON goes next to it."""
    generator: Path | None = None
    """Trained generator folder (generator.train_sft / train_grpo output); default: the base --model."""
    split: str = "test"
    """Which split to answer: train, validation, test or test_heldout."""
    db: Path | None = None
    """SQLite file to execute on; default: the one recorded in the data set."""
    router: Path | None = None
    """Router checkpoint folder for the path; default: the gold path."""
    no_path: bool = False
    """Prompt with the whole schema and no path (the no-router condition)."""
    model: Annotated[ModelConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=ModelConfig)
    """Base model and precision (LoRA settings come from --generator)."""
    reward: Annotated[SQLRewardConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=SQLRewardConfig)
    """Execution limits and weights used to score each answer."""
    prompt: Annotated[PromptOverrides, tyro.conf.OmitArgPrefixes] = field(default_factory=PromptOverrides)
    """Prompt settings; each one not given is what --generator was trained with (a base model: 2 examples, reasoning, full schema, linked values)."""
    max_prompt_tokens: int = 4096
    """Prompts longer than this are cut from the left (the question stays)."""
    max_new_tokens: int = 192
    """New tokens per answer at most (Northwind's gold answers: median 124, max 180; 128 cuts 47% of them)."""
    batch_size: int = 4
    """Prompts generated together (left-padded, similar lengths grouped)."""
    temperature: float = 0.0
    """0: greedy decoding; above 0: sampling at this temperature."""
    limit: int | None = None
    """Answer only N samples of the split, a random subset drawn with --seed (kept in split order)."""
    seed: int = 0
    """Random seed (sampling only)."""
    threads: int | None = None
    """torch CPU threads; default: torch's choice."""
    progress: bool = True
    """Show progress: a bar on a terminal, a line a minute with the rate and time left in a log file."""

    def __post_init__(self) -> None:
        if self.split not in SPLIT_NAMES:
            raise ConfigError(f"must be one of {', '.join(SPLIT_NAMES)}, got {self.split!r}", where="--split")
        if self.no_path and self.router is not None:
            raise ConfigError(f"--no-path conflicts with --router {self.router}", where="--no-path")
        _positive(self.max_prompt_tokens, "--max-prompt-tokens")
        if self.prompt.with_reasoning is False:
            self.reward = replace(self.reward, require_reasoning=False)
        _positive(self.max_new_tokens, "--max-new-tokens")
        _positive(self.batch_size, "--batch-size")
        if self.temperature < 0:
            raise ConfigError(f"must be >= 0, got {self.temperature}", where="--temperature")
        if self.limit is not None:
            _positive(self.limit, "--limit")


def config_to_dict(cfg: object) -> dict[str, Any]:
    """A config dataclass as JSON-able values (paths as strings, tuples as lists), for run metadata.

    >>> config_to_dict(GeneratorSFTConfig(data=Path("d"), out=Path("o")))["data"]
    'd'
    """

    def plain(v: Any) -> Any:
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        return v

    return plain(asdict(cfg))  # type: ignore[call-overload]
