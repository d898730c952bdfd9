"""PPO fine-tuning of the router from its SFT checkpoint (the second training phase).

    python -m router.train_ppo --init runs/sft/northwind --data runs/data/northwind --out runs/ppo/northwind
    python -m router.train_ppo ... --unlabelled data_pipeline/unlabelled/northwind.jsonl --unlabelled-ratio 0.5
    python -m router.train_ppo ... --unlabelled judged.jsonl    # a log judged by python -m generator.judge

The loop reads top to bottom like ``cleanrl/ppo.py``: roll out the policy in the registered
schema-routing env (:mod:`envs.schema_routing`, ``n_envs`` copies, one question per episode),
compute GAE advantages (:mod:`router.buffer`), then ``n_epochs`` of shuffled minibatches of the
clipped PPO loss, stopping the update's epochs as soon as a minibatch's ``approx_kl`` exceeds
``target_kl`` (its optimizer step is skipped, as SB3 does). Then log, validate, checkpoint.

Actor and critic both start from the SFT checkpoint (seed 002: a randomly initialised critic on
a shared backbone took the actor from 97% to 8%). The SFT value head was already fitted to the
SFT policy's expected reward (:func:`router.train_sft.calibrate_value`). The critic reads
*detached* encoder features (:meth:`router.model.RouterModel.value`), so the value loss cannot
reach the actor's encoder or heads; the actor and critic parameter sets are disjoint and get
their own optimizers and learning rates. The policy runs with dropout off (eval mode) in both the
rollout and the update, so the probability ratio is exactly 1 before the first step.

Presets (``--preset``; a value given on the command line or to :class:`PPOConfig` wins over the
preset, even one equal to another preset's):

=================  ===========  ===========  ======================================================
field              fast         golden       why
=================  ===========  ===========  ======================================================
actor_lr           5e-6         1e-6         golden = seed 002. With Adam every step moves each
                                             weight by about the learning rate whatever the
                                             gradient's size, and an SFT router right on ~97% of
                                             its rollouts gives mostly noise: 3e-5 with 4 epochs
                                             of 64-answer minibatches cost Northwind 4 validation
                                             points in one update. 5e-6 with one 128-answer step
                                             per epoch moves measurably without that drop.
critic_lr          1e-4         5e-6         critic faster than the actor (seed 002); it cannot
                                             hurt the actor (detached features)
clip_range         0.1          0.1          small clip range (seed 002)
total_updates      30           30           ~2-3 min on 2 idle cores (Northwind)
=================  ===========  ===========  ======================================================

Both: ``n_epochs`` 2 over a rollout of ``n_envs x n_steps`` = 16 x 8 = 128 answers, one
optimizer step per epoch (``minibatch_size`` 128 accumulated from 4 micro-batches of 32), cosine
decay of both learning rates over ``total_updates``, per-minibatch advantage normalisation,
``target_kl`` 0.1. The env pays :func:`rewards.router.path_reward_components`' total, already
clipped to ``[-clip, clip]`` = [-2, 2] by the one knob ``--reward.clip``.

Several schemas: when ``--data`` is a folder of data set folders (as for ``python -m
router.train_sft``, which must have trained the ``--init`` router on all of them), each schema
gets its own policy over the one network, its own envs and rollout buffer. Each update rolls out
one schema's envs, drawn in proportion to its training questions (so each question is as likely
as in a one-schema run; :func:`schema_for_update`), and optimises on that rollout, as SFT's
minibatches each come from one schema. Validation, the final tables and the calibration pool all
schemas (``by_schema`` in ``eval.json``), and the router records every schema like a
multi-schema SFT checkpoint. ``--unlabelled`` is then a folder of ``<data set folder
name>.jsonl`` logs.

Outputs:

- ``--out``: the final router (``RouterModel.save_pretrained`` layout, loadable like the SFT
  checkpoint) plus ``eval.json`` (SFT and PPO on each evaluation split) and ``metrics.jsonl``;
- ``--log-dir`` (default ``OUT.logs``): ``metrics.jsonl`` (one row per update), TensorBoard
  events, ``training_curve.png``;
- ``--checkpoint-dir`` (default ``OUT.ckpt``): the resumable state (:mod:`router.ppo_checkpoint`),
  replaced atomically every ``checkpoint_every`` updates. ``--resume`` continues from it.

Metrics (one row per update, TensorBoard and ``metrics.jsonl``):

- ``rollout/reward_mean``: mean reward of the rollout's answers (clipped by ``--reward.clip``);
- ``rollout/reward/<component>``: mean of each reward component of ``route2sql/SchemaRouting-v1``
  (anchor, via, target, legal, raw_total; ``label_free/<name>`` for the label-free ones, computed on
  every answer; ``labelled``: the share of answers to labelled questions);
- ``rollout/kl_to_reference`` (with ``--kl-coef``): mean over the rollout of ``log pi(a|q) -
  log pi_SFT(a|q)``, an estimate of KL(pi || pi_SFT) in nats; ``rollout/objective``: the reward
  the advantages are computed from, ``reward_mean - kl_coef * kl_to_reference`` (InstructGPT's
  KL-penalised reward, Ouyang et al. 2022, eq. 2);
- ``rollout/success_rate``: share of rollout answers to labelled questions equal to the gold path (sampled, not greedy);
- ``train/approx_kl``: mean over the update's minibatches of ``E[(ratio - 1) - log ratio]``,
  an estimate of KL(old || new) (http://joschu.net/blog/kl-approx.html);
- ``train/clip_fraction``: share of samples whose ratio left ``[1 - clip, 1 + clip]``;
- ``train/entropy_loss``: minus the mean entropy of the policy over legal paths (nats);
- ``train/policy_gradient_loss``: the clipped surrogate loss;
- ``train/value_loss``: MSE of the value head against the returns;
- ``train/explained_variance``: ``1 - Var(returns - values) / Var(returns)`` over the rollout
  (1 = perfect critic, 0 = no better than a constant; NaN when the returns barely vary);
- ``train/epochs``: epochs completed in the update (fewer than ``n_epochs`` after a KL stop);
  ``train/kl_stop``: 1 when the update was stopped by ``target_kl``;
- ``train/actor_lr``, ``train/critic_lr``: learning rates after the update;
- ``route/full_path_acc``, ``route/anchor_acc``, ``route/via_acc``, ``route/target_acc``,
  ``route/nonnull_via_acc``, ``route/mean_reward``: greedy decoding on the validation split
  (row ``update = 0`` is the SFT start);
- ``time/update_s``, ``time/fps``: wall time of the update and env steps per second.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import CheckpointError, ConfigError, DataError
from core.io import refuse_overlap, remove_stale_temporaries, write_json, write_jsonl
from envs.schema_routing_v1 import read_judges, read_question_log
from rewards.label_free import LabelFreeConfig
from rewards.router import RewardConfig
from router.buffer import RolloutBuffer
from router.curves import plot_ppo_curve
from router.evaluate import format_table, path_metrics
from router.checkpoint import RouterCheckpointConfig, SchemaRecord
from router.model import PathSpace, RouterModel, check_question_lengths
from router.multi_schema import data_set_folders, fit_temperature_pooled, pooled_metrics, question_logs, require_distinct_names
from router.policy import RouterPolicy
from router.route import Router
from router.ppo_checkpoint import STATE_FILE, TrainerState, load_checkpoint, save_checkpoint
from router.rollout import OBS_KEYS, env_rng_states, make_routing_envs, policy_batch, restore_envs, routing_features, unlabelled_samples
from router.sft_data import EncodedSplit, RewardTable, encode_split, lr_lambda, predict_split, split_log_probs

PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"actor_lr": 5e-6, "critic_lr": 1e-4, "clip_range": 0.1, "total_updates": 30},
    "golden": {"actor_lr": 1e-6, "critic_lr": 5e-6, "clip_range": 0.1, "total_updates": 30},
}
"""Named settings (table in the module docstring); a field left unset (None) takes its preset's value."""

# fields that may differ between a run and its resumption
RESUME_FREE = ("resume", "stop_after", "threads", "progress", "tensorboard")


@dataclass
class PPOConfig:
    """Options of ``python -m router.train_ppo`` (see the module docstring for presets and metrics)."""

    data: Path
    """Data set folder written by python -m data_pipeline.build (schema.json + samples.jsonl), or a folder of such folders (one router on all their schemas, as python -m router.train_sft trained it)."""
    init: Path
    """SFT checkpoint (python -m router.train_sft --out): actor and critic both start from it."""
    out: Path
    """Folder for the final router (replaced atomically at the end)."""
    preset: Literal["fast", "golden"] = "fast"
    """Named settings: fast (measurable within minutes on 2 cores) or golden (the conservative settings that kept PPO from collapsing)."""
    actor_lr: float | None = None
    """Peak learning rate of the actor (trainable encoder layers and the three heads); unset: the preset's (fast 5e-6, golden 1e-6)."""
    critic_lr: float | None = None
    """Peak learning rate of the critic (value head), higher than the actor's; unset: the preset's (fast 1e-4, golden 5e-6)."""
    clip_range: float | None = None
    """PPO clip range epsilon: the ratio is clipped to [1 - eps, 1 + eps]; unset: the preset's (0.1)."""
    target_kl: float = 0.1
    """Stop an update's epochs when a minibatch's approx_kl exceeds this (0.1 by default)."""
    anneal_lr: bool = True
    """Decay both learning rates to 0 over the run (cosine); False keeps them constant."""
    total_updates: int | None = None
    """PPO updates (rollout + optimisation) in the whole run; unset: the preset's (30)."""
    n_envs: int = 16
    """Parallel routing envs (questions answered per rollout step)."""
    n_steps: int = 8
    """Rollout steps per env per update; an update sees n_envs * n_steps answers."""
    n_epochs: int = 2
    """Passes over the rollout per update (fewer after a KL stop)."""
    minibatch_size: int = 128
    """Answers per optimizer step (default: the whole rollout, so one step per epoch)."""
    micro_batch_size: int = 32
    """Answers per forward/backward; gradients of minibatch_size / micro_batch_size micro-batches accumulate."""
    gamma: float = 1.0
    """Discount (irrelevant for one-step episodes; kept for the general GAE)."""
    gae_lambda: float = 1.0
    """GAE lambda (irrelevant for one-step episodes)."""
    normalize_advantage: bool = True
    """Normalise advantages to mean 0, std 1 within each minibatch."""
    ent_coef: float = 0.0
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight (only the critic's parameters receive it)."""
    kl_coef: float = 0.0
    """Weight of a penalty for moving away from the starting (SFT) router: each answer's reward loses kl_coef times the log-probability ratio of the path under the current and the starting router (0: off)."""
    max_grad_norm: float = 1.0
    """Gradient norm clip, applied to actor and critic separately."""
    eval_every: int = 1
    """Validate (greedy full-path accuracy) every this many updates."""
    checkpoint_every: int = 10
    """Write the resumable checkpoint every this many updates (and at the end)."""
    keep: Literal["last", "best"] = "last"
    """Final router: the last update's, or the one with the best validation accuracy (SFT start included)."""
    resume: bool = False
    """Continue the run saved in --checkpoint-dir (same options); without one, start from --init."""
    stop_after: int = 0
    """Exit after this many updates of this invocation, leaving a resumable checkpoint (0: run to the end)."""
    seed: int = 0
    """Seed of env sampling, action sampling and minibatch shuffling."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    max_train_samples: int = 0
    """Use only the first N training samples (0: all); for quick runs."""
    log_dir: Path | None = None
    """metrics.jsonl, TensorBoard events and training_curve.png (default: OUT.logs)."""
    checkpoint_dir: Path | None = None
    """Resumable state (default: OUT.ckpt)."""
    tensorboard: bool = True
    """Write TensorBoard events."""
    progress: bool = True
    """Print one line per update."""
    eval_splits: tuple[str, ...] = ("validation", "test", "test_heldout")
    """Splits on which the SFT start and the final PPO router are compared (those present)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Router reward (rewards.router) paid by the env on labelled questions."""
    unlabelled: Path | None = None
    """Questions without labels (a question log: JSONL, one {"question": ...} a line) mixed into the rollouts and paid by the label-free reward; a log judged by python -m generator.judge pays the language model's preference over routes instead. With several data sets: a folder holding one log per data set, named after its folder (e.g. concert_singer.jsonl)."""
    unlabelled_ratio: float = 0.5
    """Share of rollout episodes that draw an unlabelled question (with --unlabelled)."""
    label_free_weight: float = 0.0
    """Weight of the label-free reward added to the labelled reward on labelled questions (0: labelled reward only)."""
    label_free: LabelFreeConfig = field(default_factory=LabelFreeConfig)
    """Label-free reward weights (rewards.label_free)."""

    def __post_init__(self) -> None:
        for name, value in PRESETS[self.preset].items():  # a value given explicitly wins, even the preset's own
            if getattr(self, name) is None:
                setattr(self, name, value)
        for where, value in _float_options(self):
            if not math.isfinite(value):
                raise ConfigError(f"must be a finite number, got {value}", where=where)
        for name in ("max_grad_norm", "vf_coef", "ent_coef", "kl_coef", "threads", "seed", "stop_after", "max_train_samples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", where=f"--{name.replace('_', '-')}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"must be in [0, 1], got {getattr(self, name)}", where=f"--{name.replace('_', '-')}")
        for name in ("actor_lr", "critic_lr", "clip_range", "target_kl"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"must be > 0, got {getattr(self, name)}", where=f"--{name.replace('_', '-')}")
        for name in ("total_updates", "n_envs", "n_steps", "n_epochs", "minibatch_size", "micro_batch_size", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", where=f"--{name.replace('_', '-')}")
        if not 0.0 <= self.unlabelled_ratio <= 1.0:
            raise ConfigError(f"must be in [0, 1], got {self.unlabelled_ratio}", where="--unlabelled-ratio")
        if not self.label_free_weight >= 0:
            raise ConfigError(f"must be >= 0, got {self.label_free_weight}", where="--label-free-weight")
        if self.micro_batch_size > self.minibatch_size:
            raise ConfigError(
                f"--micro-batch-size {self.micro_batch_size} is larger than --minibatch-size {self.minibatch_size}",
                where="--micro-batch-size",
            )
        rollout = self.n_envs * self.n_steps
        if self.minibatch_size > rollout:
            raise ConfigError(
                f"--minibatch-size {self.minibatch_size} is larger than a rollout (n_envs {self.n_envs} x n_steps {self.n_steps} = {rollout})",
                where="--minibatch-size",
            )
        if rollout % self.minibatch_size:
            warnings.warn(
                f"a rollout of {rollout} answers is not a multiple of --minibatch-size {self.minibatch_size}: "
                f"the last minibatch of each epoch has {rollout % self.minibatch_size}",
                stacklevel=2,
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        d["eval_splits"] = list(self.eval_splits)
        return d

    @property
    def log_path(self) -> Path:
        return Path(self.log_dir) if self.log_dir is not None else Path(str(self.out) + ".logs")

    @property
    def checkpoint_path(self) -> Path:
        return Path(self.checkpoint_dir) if self.checkpoint_dir is not None else Path(str(self.out) + ".ckpt")


def _float_options(cfg: Any, prefix: str = "--") -> list[tuple[str, float]]:
    """``(flag, value)`` of every float option of a config dataclass, nested ones (``--reward.x``) included."""
    out: list[tuple[str, float]] = []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        flag = prefix + f.name.replace("_", "-")
        if isinstance(value, float):
            out.append((flag, value))
        elif is_dataclass(value):
            out.extend(_float_options(value, flag + "."))
    return out


@dataclass
class PPOResult:
    """What :func:`train` returns: the final router folder, SFT vs PPO metrics per split, the history."""

    out: Path | None
    metrics: dict[str, dict[str, Any]]
    history: list[dict[str, float]]
    updates_done: int
    wall_s: float


def evaluate_split(policy: RouterPolicy, split: EncodedSplit, reward: RewardConfig) -> dict[str, Any]:
    """Greedy routing metrics (:func:`router.evaluate.path_metrics`) of a cached split."""
    preds, _ = predict_split(policy, split)
    return path_metrics([policy.space.paths[i] for i in preds], split.samples, policy.space.graph, reward)


def explained_variance(values: np.ndarray, returns: np.ndarray, eps: float = 1e-8) -> float:
    """``1 - Var(returns - values) / Var(returns)`` of ``(n,)`` arrays (CleanRL, SB3), NaN when
    the returns barely vary (``Var < eps``): a rollout paid the same reward throughout has nothing
    to explain, and float noise in the denominator would print a huge negative number.

    >>> explained_variance(np.array([1.0, 2.0]), np.array([1.0, 2.0])), explained_variance(np.zeros(2), np.array([1.0, 1.0 + 1e-7]))
    (1.0, nan)
    """
    var = float(np.var(returns))
    return 1.0 - float(np.var(returns - values)) / var if var >= eps else float("nan")


def route_row(m: dict[str, Any]) -> dict[str, float]:
    keys = ("full_path_acc", "anchor_acc", "via_acc", "target_acc", "nonnull_via_acc", "mean_reward")
    return {f"route/{k}": float(m[k]) for k in keys if k in m}


def _check_resumable(saved: dict[str, Any], cfg: PPOConfig, where: Path) -> None:
    """Raise CheckpointError naming every option that differs from the saved run's; an option the
    saved run did not have yet (added since) counts as its default."""
    now = cfg.to_dict()
    defaults = {f.name: f.default for f in fields(PPOConfig)}
    diff = [k for k in now if k not in RESUME_FREE and saved.get(k, defaults.get(k)) != now[k]]
    if diff:
        pairs = ", ".join(f"{k}: saved {saved.get(k)!r} vs now {now[k]!r}" for k in diff)
        raise CheckpointError(f"cannot resume with different options ({pairs})", where=where)


@dataclass
class PPOPart:
    """One data set's share of a PPO run (one part, or one per schema with a folder of data sets).

    Attributes:
        folder: the data set folder; ``ds``: the data set; ``samples_file``: its ``samples.jsonl``
            (named in errors).
        policy: a :class:`RouterPolicy` over its schema; every part's policy shares one network.
        rewards_table: rewards of its legal paths against its gold paths.
        train_set: its labelled training questions, then its unlabelled ones (encoded once).
        val_set: its validation questions (encoded once).
        envs: its ``n_envs`` copies of ``route2sql/SchemaRouting-v1``.
        buffer: its rollout buffer (observation widths differ between schemas).
        obs, info: what its envs show now; its next rollout starts there.
    """

    folder: Path
    ds: BuiltDataset
    samples_file: str
    policy: RouterPolicy
    rewards_table: RewardTable
    train_set: EncodedSplit
    val_set: EncodedSplit
    envs: gym.vector.SyncVectorEnv
    buffer: RolloutBuffer
    obs: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    encoded: dict[str, EncodedSplit] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.ds.schema.name

    def split(self, name: str) -> EncodedSplit | None:
        """The encoded split ``name`` (None when the data set has none), encoded once."""
        if name == "validation":
            return self.val_set
        if name not in self.encoded:
            samples = self.ds.split(name)
            if not samples:
                return None
            self.encoded[name] = encode_split(self.policy, samples, self.rewards_table, self.samples_file)
        return self.encoded[name]


def schema_for_update(sizes: Sequence[int], update: int, seed: int) -> int:
    """Which part rolls out update ``update`` (1-based): drawn in proportion to ``sizes`` (each
    part's training questions, labelled and unlabelled), so every training question is as likely
    as in a one-schema run, from an RNG seeded by ``(seed, update)`` so a resumed run draws the same.

    >>> schema_for_update([40], 3, 0)
    0
    >>> sorted({schema_for_update([1, 0, 1], u, 0) for u in range(1, 40)})
    [0, 2]
    """
    if len(sizes) == 1:
        return 0
    p = np.asarray(sizes, dtype=np.float64)
    return int(np.random.default_rng([seed, update]).choice(len(sizes), p=p / p.sum()))


def _load_part(cfg: PPOConfig, folder: Path, model: RouterModel, init_ckpt: RouterCheckpointConfig, log_file: Path | None) -> PPOPart:
    """Load one data set, bind the router to its schema, encode its questions and make its envs.

    Raises:
        DataError: no training or validation samples (or as :func:`core.dataset.load_dataset`).
        CheckpointError: the router was not trained on this schema.
    """
    ds = load_dataset(folder)
    samples_file = str(Path(folder) / "samples.jsonl")
    train_samples = ds.split("train")
    if cfg.max_train_samples > 0:
        train_samples = train_samples[: cfg.max_train_samples]
    val_samples = ds.split("validation")
    for name, s in (("train", train_samples), ("validation", val_samples)):
        if not s:
            raise DataError(f"no samples in split {name!r}", where=samples_file)
    init_ckpt.bind(ds.graph, where=cfg.init, hint="PPO starts from a router trained on this schema (python -m router.train_sft)")
    policy = RouterPolicy(model, PathSpace(ds.graph, ds.values))
    policy.eval()  # dropout off in rollout and update alike: ratio == 1 before the first step
    rewards_table = RewardTable(policy.space, cfg.reward)
    log = read_question_log(log_file) if log_file else []
    questions = [q for _, q in log]
    judges = read_judges(log_file, ds.graph) if log_file else None
    if log_file:
        check_question_lengths(model, questions, log_file, [line for line, _ in log])
    unlabelled = unlabelled_samples(questions, ds.graph, ds.schema.name)
    train_set = encode_split(policy, train_samples + unlabelled, rewards_table, samples_file)  # unlabelled rows last
    val_set = encode_split(policy, val_samples, rewards_table, samples_file)
    features = routing_features(train_set, vocab_size=len(model.tokenizer))
    envs = make_routing_envs(ds.graph, train_set, features, cfg.reward, cfg.n_envs, n_labelled=len(train_samples),
                             unlabelled_ratio=cfg.unlabelled_ratio if unlabelled else 0.0, label_free=cfg.label_free,
                             label_free_weight=cfg.label_free_weight, values=ds.values, db_path=str(ds.db_path),
                             judges=judges)  # fmt: skip
    obs_shapes = {k: (s.shape, s.dtype) for k, s in features.spaces.items()} | {"sample_index": ((), np.int64)}
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, obs_shapes, cfg.gamma, cfg.gae_lambda)
    return PPOPart(Path(folder), ds, samples_file, policy, rewards_table, train_set, val_set, envs, buffer)


def reference_policies(init: Path, parts: Sequence[PPOPart]) -> list[RouterPolicy]:
    """Frozen copies of the starting router ``init`` over each part's schema: pi_ref of the KL
    penalty (``--kl-coef``). Loaded from ``init`` even on ``--resume``, so the penalty keeps
    measuring the distance from the SFT router, not from the last checkpoint."""
    ref_model, _ = RouterModel.from_pretrained(init)
    ref_model.requires_grad_(False)
    refs = []
    for p in parts:
        ref = RouterPolicy(ref_model, p.policy.space)
        ref.eval()
        refs.append(ref)
    return refs


def evaluate_parts(parts: Sequence[PPOPart], name: str, reward: RewardConfig) -> dict[str, Any] | None:
    """Greedy routing metrics of split ``name``: :func:`evaluate_split` for one part; for several,
    the parts pooled with ``by_schema`` (:func:`router.multi_schema.pooled_metrics`). None when no
    part has the split."""
    per_part = []
    for p in parts:
        split = p.split(name)
        if split is None:
            continue
        preds, _ = predict_split(p.policy, split)
        per_part.append(([p.policy.space.paths[i] for i in preds], split.samples, p.ds.graph))
    if not per_part:
        return None
    return pooled_metrics(per_part, reward) if len(parts) > 1 else path_metrics(*per_part[0], reward)


def router_metadata(init_ckpt: RouterCheckpointConfig, parts: Sequence[PPOPart]) -> RouterCheckpointConfig:
    """The PPO router's metadata: bound to the one schema, or recording every part's schema."""
    if len(parts) == 1:
        return init_ckpt.bound_to(parts[0].ds.graph, parts[0].ds.values)
    graphs = tuple(p.ds.graph for p in parts)
    records = tuple(SchemaRecord.of(p.ds.graph, p.folder) for p in parts)
    return replace(init_ckpt, schemas=records, multi=True, graphs=graphs, values=None)


def train(cfg: PPOConfig) -> PPOResult:
    """Run PPO as ``cfg`` says; returns the result (``out`` is None when ``stop_after`` ended the run early).

    Raises:
        DataError: the data set is missing or has no training or validation samples.
        CheckpointError: ``--init`` is not a router checkpoint or was trained on another schema;
            a checkpoint to resume is unreadable, was made with other options, or its data sets
            changed since (folder names, schema fingerprints or numbers of training questions).
        ConfigError: ``--out``, ``--checkpoint-dir`` or ``--log-dir`` is, holds or lies inside an
            input or another output; a checkpoint exists but ``--resume`` was not given;
            several data sets and ``--unlabelled`` is not a folder of their logs.
    """
    t0 = time.perf_counter()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    # ---- policy (actor and critic from SFT, or from the checkpoint being resumed), then per data set:
    #      its schema's policy over the one network, encoded questions, envs and rollout buffer
    folders = data_set_folders(cfg.data)
    logs = question_logs(cfg.unlabelled, folders, option="--unlabelled")
    ckpt_dir, log_dir = cfg.checkpoint_path, cfg.log_path
    refuse_overlap(
        {"--out": cfg.out, "--checkpoint-dir": ckpt_dir, "--log-dir": log_dir},
        {"--data": cfg.data, "--init": cfg.init, "--unlabelled": cfg.unlabelled},
    )
    remove_stale_temporaries(ckpt_dir.parent)  # a run killed between a save's two renames left the last checkpoint aside
    state: TrainerState | None = None
    if (ckpt_dir / STATE_FILE).exists():
        if not cfg.resume:
            raise ConfigError(f"a checkpoint exists in {ckpt_dir}; pass --resume to continue it or remove it", where="--resume")
        model, state, saved_cfg, init_ckpt = load_checkpoint(ckpt_dir)
        _check_resumable(saved_cfg, cfg, ckpt_dir)
        if len(state.pending) != len(folders):
            raise CheckpointError(f"saved for {len(state.pending)} data sets, --data has {len(folders)}", where=ckpt_dir)
    else:
        if cfg.resume:
            warnings.warn(f"--resume: no checkpoint in {ckpt_dir}, starting from --init {cfg.init}", stacklevel=2)
        model, init_ckpt = RouterModel.from_pretrained(cfg.init)
    parts = [_load_part(cfg, folder, model, init_ckpt, log) for folder, log in zip(folders, logs, strict=True)]
    require_distinct_names([p.name for p in parts], folders, cfg.data)
    multi = len(parts) > 1
    sizes = [len(p.train_set) for p in parts]
    identity = [{"folder": p.folder.name, "schema": p.ds.schema.fingerprint(), "train_questions": len(p.train_set)} for p in parts]
    if state is not None and state.extra.get("parts", identity) != identity:
        changed = [f"{now['folder']}: saved {saved} vs now {now}" for saved, now in zip(state.extra["parts"], identity) if saved != now]
        raise CheckpointError(f"--data changed since this checkpoint was saved ({'; '.join(changed)})", where=ckpt_dir)
    metadata = router_metadata(init_ckpt, parts)
    references = reference_policies(cfg.init, parts) if cfg.kl_coef > 0 else None

    # ---- optimizers (separate: actor and critic parameters are disjoint)
    actor_params, critic_params = parts[0].policy.actor_parameters(), parts[0].policy.critic_parameters()
    actor_opt = torch.optim.AdamW(actor_params, lr=cfg.actor_lr, weight_decay=0.0)
    critic_opt = torch.optim.Adam(critic_params, lr=cfg.critic_lr)
    schedule = lr_lambda(cfg.total_updates, 0.0) if cfg.anneal_lr else (lambda step: 1.0)
    actor_sched = torch.optim.lr_scheduler.LambdaLR(actor_opt, schedule)
    critic_sched = torch.optim.lr_scheduler.LambdaLR(critic_opt, schedule)
    shuffle_gen = torch.Generator().manual_seed(cfg.seed)

    if state is not None:
        actor_opt.load_state_dict(state.actor_optimizer)
        critic_opt.load_state_dict(state.critic_optimizer)
        actor_sched.load_state_dict(state.actor_scheduler)
        critic_sched.load_state_dict(state.critic_scheduler)
        shuffle_gen.set_state(state.shuffle_rng)
        for part, rng, pending in zip(parts, state.env_rng, state.pending, strict=True):
            part.obs, part.info = restore_envs(part.envs, rng, pending)
        state.restore_global_rngs()
        history, start_update, global_step, extra = state.history, state.update, state.global_step, state.extra
    else:
        for k, part in enumerate(parts):
            part.obs, part.info = part.envs.reset(seed=cfg.seed + k * cfg.n_envs)
        start = evaluate_parts(parts, "validation", cfg.reward)
        assert start is not None  # every part has validation questions (_load_part)
        sft_eval = {"validation": start}
        for name in cfg.eval_splits:
            if name != "validation" and (m := evaluate_parts(parts, name, cfg.reward)) is not None:
                sft_eval[name] = m
        history = [{"update": 0, "global_step": 0} | route_row(start)]
        start_update, global_step = 0, 0
        extra = {"start_val_acc": start["full_path_acc"], "best_val_acc": start["full_path_acc"], "best_update": 0, "sft_eval": sft_eval,
                 "parts": identity}
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()} if cfg.keep == "best" and start_update == 0 else None

    log_dir.mkdir(parents=True, exist_ok=True)
    writer = None
    if cfg.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(log_dir / "tensorboard"))

    def checkpoint(update: int) -> None:
        st = TrainerState(
            update=update, global_step=global_step,
            actor_optimizer=actor_opt.state_dict(), critic_optimizer=critic_opt.state_dict(),
            actor_scheduler=actor_sched.state_dict(), critic_scheduler=critic_sched.state_dict(),
            shuffle_rng=shuffle_gen.get_state(), env_rng=[env_rng_states(p.envs) for p in parts],
            pending=[[int(i) for i in p.info["sample_index"]] for p in parts], history=history, extra=extra,
        )  # fmt: skip
        save_checkpoint(ckpt_dir, model, metadata.updated({"ppo_update": update}), st, cfg.to_dict())

    updates_this_run, t_loop = 0, time.perf_counter()
    for update in range(start_update + 1, cfg.total_updates + 1):
        t_update = time.perf_counter()
        part_index = schema_for_update(sizes, update, cfg.seed)
        part = parts[part_index]  # with several schemas, one schema's envs roll out this update
        policy, buffer, train_set, obs, info = part.policy, part.buffer, part.train_set, part.obs, part.info

        # ---- 1. rollout: n_steps x n_envs one-question episodes
        buffer.reset()
        comp_sum: Counter[str] = Counter()
        successes, n_labelled, kl_sum = 0, 0, 0.0
        for _ in range(cfg.n_steps):
            index = np.asarray(info["sample_index"])
            with torch.no_grad():
                batch = policy_batch(obs, index, train_set)
                actions, values, log_probs = policy(batch)
                # k1 estimate of KL(pi || pi_ref) per answer: log pi(a|q) - log pi_ref(a|q)
                kl = None if references is None else log_probs - references[part_index].distribution(batch).log_prob_of(actions)
            next_obs, rewards, terminated, truncated, next_info = part.envs.step(actions.numpy())
            comp_sum["reward"] += float(np.sum(rewards))
            if kl is not None:  # r - beta * KL: InstructGPT (Ouyang et al. 2022, eq. 2), TRL's PPO kl_coef
                kl_sum += float(kl.sum())
                rewards = rewards - cfg.kl_coef * kl.numpy()
            buffer.add({**{k: obs[k] for k in OBS_KEYS}, "sample_index": index}, actions.numpy(), rewards,
                       terminated | truncated, values.numpy(), log_probs.numpy())  # fmt: skip
            final = next_info["final_info"]
            for k, v in final["reward_components"].items():
                if not k.startswith("_"):
                    comp_sum[k] += float(np.sum(v))
            successes += int(np.sum(final["is_success"]))
            n_labelled += int(np.sum(final["labelled"]))
            obs, info = next_obs, next_info
        part.obs, part.info = obs, info
        n_rollout = cfg.n_steps * cfg.n_envs
        global_step += n_rollout

        # ---- 2. advantages (GAE; every episode is one step, so A = r - V)
        last_done = buffer.dones[-1].astype(bool)
        last_values = np.zeros(cfg.n_envs, dtype=np.float32)
        if not last_done.all():
            with torch.no_grad():
                last_values = policy.predict_values(policy_batch(obs, info["sample_index"], train_set)).numpy()
        buffer.compute_returns_and_advantage(last_values)

        # ---- 3. optimise: clipped surrogate, gradient accumulation, stop on approx_kl > target_kl
        stats: Counter[str] = Counter()
        n_mb, epochs_done, kl_stop = 0, 0, False
        for _epoch in range(cfg.n_epochs):
            for mb in buffer.minibatches(cfg.minibatch_size, shuffle_gen):
                adv = mb.advantages
                if cfg.normalize_advantage and len(mb) > 1:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                actor_opt.zero_grad(set_to_none=True)
                critic_opt.zero_grad(set_to_none=True)
                mb_stats: Counter[str] = Counter()
                for lo in range(0, len(mb), cfg.micro_batch_size):
                    sl = slice(lo, lo + cfg.micro_batch_size)
                    weight = len(mb.actions[sl]) / len(mb)
                    batch = policy_batch({k: mb.observations[k][sl] for k in OBS_KEYS}, mb.observations["sample_index"][sl], train_set)
                    values, log_prob, entropy = policy.evaluate_actions(batch, mb.actions[sl])
                    log_ratio = log_prob - mb.old_log_prob[sl]
                    ratio = log_ratio.exp()
                    pg_loss = torch.max(-adv[sl] * ratio, -adv[sl] * ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)).mean()
                    value_loss = torch.nn.functional.mse_loss(values, mb.returns[sl])
                    entropy_loss = -entropy.mean()
                    loss = pg_loss + cfg.ent_coef * entropy_loss + cfg.vf_coef * value_loss
                    (loss * weight).backward()
                    with torch.no_grad():
                        mb_stats["approx_kl"] += float(((ratio - 1) - log_ratio).mean()) * weight
                        mb_stats["clip_fraction"] += float(((ratio - 1).abs() > cfg.clip_range).float().mean()) * weight
                        mb_stats["policy_gradient_loss"] += float(pg_loss) * weight
                        mb_stats["value_loss"] += float(value_loss) * weight
                        mb_stats["entropy_loss"] += float(entropy_loss) * weight
                if mb_stats["approx_kl"] > cfg.target_kl:
                    kl_stop = True  # this minibatch's step is skipped (SB3); later epochs do not run
                    break
                torch.nn.utils.clip_grad_norm_(actor_params, cfg.max_grad_norm)
                torch.nn.utils.clip_grad_norm_(critic_params, cfg.max_grad_norm)
                actor_opt.step()
                critic_opt.step()
                stats.update(mb_stats)
                n_mb += 1
            if kl_stop:
                break
            epochs_done += 1
        actor_sched.step()
        critic_sched.step()

        # ---- 4. log, validate, checkpoint
        values_flat, returns_flat = buffer.values.ravel(), buffer.returns.ravel()
        row: dict[str, float] = {"update": update, "global_step": global_step}
        row["rollout/reward_mean"] = comp_sum["reward"] / n_rollout
        for k in sorted(comp_sum):
            if k != "reward":
                row[f"rollout/reward/{k}"] = comp_sum[k] / n_rollout
        row["rollout/success_rate"] = successes / n_labelled if n_labelled else float("nan")
        if references is not None:
            row["rollout/kl_to_reference"] = kl_sum / n_rollout
            row["rollout/objective"] = row["rollout/reward_mean"] - cfg.kl_coef * row["rollout/kl_to_reference"]
        for k in ("approx_kl", "clip_fraction", "policy_gradient_loss", "value_loss", "entropy_loss"):
            row[f"train/{k}"] = stats[k] / n_mb if n_mb else float("nan")
        if kl_stop and n_mb == 0:
            row["train/approx_kl"] = mb_stats["approx_kl"]
        row["train/explained_variance"] = explained_variance(values_flat, returns_flat)
        row["train/epochs"] = epochs_done
        row["train/kl_stop"] = float(kl_stop)
        row["train/actor_lr"] = actor_sched.get_last_lr()[0]
        row["train/critic_lr"] = critic_sched.get_last_lr()[0]
        if multi:
            row["rollout/schema_index"] = part_index  # into the data set folders, sorted by name
        if update % cfg.eval_every == 0 or update == cfg.total_updates:
            m = evaluate_parts(parts, "validation", cfg.reward)
            assert m is not None
            row |= route_row(m)
            if m["full_path_acc"] > extra["best_val_acc"]:
                extra["best_val_acc"], extra["best_update"] = m["full_path_acc"], update
                if cfg.keep == "best":
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        row["time/update_s"] = time.perf_counter() - t_update
        row["time/fps"] = n_rollout / row["time/update_s"]
        history.append(row)
        write_jsonl(log_dir / "metrics.jsonl", history)
        if writer is not None:
            for k, v in row.items():
                if k not in ("update", "global_step") and math.isfinite(v):
                    writer.add_scalar(k, v, global_step)
        if cfg.progress:
            acc = f" val_acc {row['route/full_path_acc']:.3f}" if "route/full_path_acc" in row else ""
            on = f" [{part.name}]" if multi else ""
            print(
                f"update {update}/{cfg.total_updates}{on} reward {row['rollout/reward_mean']:.3f} "
                f"kl {row['train/approx_kl']:.4f} clip {row['train/clip_fraction']:.3f} "
                f"ev {row['train/explained_variance']:.2f} epochs {epochs_done}{acc} ({row['time/update_s']:.1f} s, "
                f"ETA {(time.perf_counter() - t_loop) / (updates_this_run + 1) * (cfg.total_updates - update):.0f} s)",
                file=sys.stderr,
            )
        updates_this_run += 1
        stopping = cfg.stop_after > 0 and updates_this_run >= cfg.stop_after and update < cfg.total_updates
        if update % cfg.checkpoint_every == 0 or update == cfg.total_updates or stopping:
            checkpoint(update)
        if stopping:
            if writer is not None:
                writer.close()
            return PPOResult(None, {}, history, update, time.perf_counter() - t0)
    if writer is not None:
        writer.close()

    # ---- final router: evaluate SFT start vs PPO on each split, save, plot
    if cfg.keep == "best" and best_state is not None:
        model.load_state_dict(best_state)
    elif cfg.keep == "best" and extra["best_update"] != cfg.total_updates:
        warnings.warn("--keep best after --resume keeps the last router (the best weights were not checkpointed)", stacklevel=2)
    metrics: dict[str, dict[str, Any]] = {}
    for name in cfg.eval_splits:
        m = evaluate_parts(parts, name, cfg.reward)
        if m is not None:
            metrics[name] = {"sft": extra["sft_eval"][name], "ppo": m}
    summary = {
        "start_val_acc": extra["start_val_acc"],
        "min_val_acc": min(r["route/full_path_acc"] for r in history if "route/full_path_acc" in r),
        "best_val_acc": extra["best_val_acc"],
        "best_update": extra["best_update"],
        "kept": cfg.keep,
    }
    # PPO moved the policy: calibrate its probabilities again on the validation questions (all schemas pooled)
    temperature = fit_temperature_pooled([split_log_probs(p.policy, p.val_set) for p in parts], [p.val_set.path for p in parts])
    final_meta = {
        "ppo_update": cfg.total_updates,
        "temperature": round(temperature, 4),
        "training": cfg.to_dict() | {"phase": "ppo"},
        "metrics": {k: {p: {m: v[p][m] for m in ("n", "anchor_acc", "via_acc", "target_acc", "full_path_acc") if m in v[p]}
                        for p in ("sft", "ppo")} for k, v in metrics.items()} | {"summary": summary},  # fmt: skip
    }
    files = {"eval.json": metrics | {"summary": summary}}
    if multi:
        out = model.save_pretrained(cfg.out, metadata.updated(final_meta), files=files)
    else:
        out = Router(parts[0].policy, metadata).save_pretrained(cfg.out, final_meta, files=files)
    write_jsonl(out / "metrics.jsonl", history)
    write_json(log_dir / "eval.json", metrics | {"summary": summary})
    n_val = sum(len(p.val_set) for p in parts)
    on = f"{len(parts)} schemas" if multi else parts[0].name
    plot_ppo_curve(history, log_dir / "training_curve.png", cfg.target_kl, title=f"router PPO on {on} ({cfg.preset}; validation n={n_val})")
    return PPOResult(out, metrics | {"summary": summary}, history, cfg.total_updates, time.perf_counter() - t0)


def main(args: Sequence[str] | None = None) -> PPOResult:
    """Command-line entry point: parse :class:`PPOConfig`, train, print SFT vs PPO tables."""
    cfg = parse(PPOConfig, args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    result = train(cfg)
    if result.out is None:
        print(f"stopped after update {result.updates_done}; continue with --resume ({cfg.checkpoint_path})")
        return result
    for name, m in result.metrics.items():
        if name == "summary":
            continue
        print(format_table(m["sft"], title=f"== {name}: SFT =="))
        print(format_table(m["ppo"], title=f"== {name}: PPO =="))
    print(json.dumps(result.metrics["summary"]))
    print(f"saved {result.out} ({result.wall_s:.1f} s); curve {cfg.log_path / 'training_curve.png'}")
    return result


if __name__ == "__main__":
    run_main(main)
