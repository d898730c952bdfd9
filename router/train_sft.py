"""Supervised fine-tuning of the router (the first training phase; PPO is the second): ``python -m router.train_sft --data DIR --out DIR``.

Loss per batch, with each head's cross-entropy taken under its legality mask and the gold
prefix (teacher forcing; the three terms sum to the path's negative log-likelihood, see
:mod:`router.policy`)::

    loss = sum_h  sum_i w_h,i * CE_h,i / sum_i w_h,i          h in (anchor, via, target)
         + value_weight * MSE(value_i, E_path~policy[reward(path, gold_i)])

``w_h,i`` is a class-balancing weight, ``(n / (K * count(class)))^class_balance`` over the
training labels of head ``h``; a sample whose gold via is not null has its via weight
multiplied by ``via_nonnull_weight`` (10x, SPEC section 4), and a pseudo-labelled question from
``--pseudo-labels`` (:mod:`router.pseudo_labels`) has all three multiplied by ``pseudo_weight``. The value head regresses the exact
expected reward (:func:`rewards.router.path_reward_components`) of the current policy, on
detached features, and is calibrated again on the final policy after early stopping, so PPO's
critic starts from SFT (seed 002: a random critic destroyed the actor).

Speed: the embeddings and lower encoder layers are frozen and their outputs for every question
are computed once (:func:`router.sft_data.encode_split`, shared with PPO); only the top
``trainable_layers`` layers and the heads train.
Early stopping keeps the epoch with the best validation full-path accuracy.

Several schemas: when ``--data`` is not a data set folder but a folder of them (as
``python -m evaluation.spider_data --out`` writes: ``DIR/<db>/schema.json``...), one router
trains on all of them together. Each minibatch comes from one schema (the candidates the heads
score are that schema's tables and via options; one :class:`RouterPolicy` per schema shares the
one network), minibatches of all schemas are shuffled together, early stopping and the final
tables use every schema's samples pooled (``eval.json`` adds ``by_schema``). Class balancing is
computed per schema. The checkpoint then records every schema (``schemas`` in ``config.json``:
name, fingerprint, max_hops, data folder; snapshots in ``schemas.json``) and no single
``schema_fingerprint``: :meth:`router.route.Router.from_pretrained` needs the schema to route over
and binds to it without ``retarget`` when its fingerprint is one of those recorded.

Outputs: the checkpoint folder ``--out`` (written atomically; :mod:`router.model` layout plus
``schema.json`` (``schemas.json`` with several schemas), ``eval.json`` and ``metrics.jsonl``),
and live logs in ``--log-dir`` (default ``OUT.logs``): ``metrics.jsonl`` (one line per epoch)
and TensorBoard events. After every epoch ``OUT.logs/resume`` is replaced in one rename with
the state the next epoch needs (weights, optimizer, schedule, random states, early stopping:
:mod:`router.sft_resume`); a killed run started again with ``--resume`` ends exactly as an
uninterrupted one would. A log folder that cannot be written is one error line naming it.

Metrics (per epoch): ``train/loss``, ``train/anchor_ce``, ``train/via_ce``, ``train/target_ce``
(weighted mean cross-entropies), ``train/value_loss`` (MSE of the value head), ``train/lr``;
``route/full_path_acc``, ``route/anchor_acc``, ``route/via_acc``, ``route/target_acc`` and
``route/nll`` on the validation split.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import ConfigError, DataError
from core.graph import JoinPath
from core.io import refuse_overlap, write_json, write_jsonl
from core.samples import Sample
from router.calibration import expected_calibration_error
from rewards.router import RewardConfig
from data_pipeline.encoders import DEFAULT_ENCODER
from router.evaluate import format_table, path_metrics
from router.model import PathSpace, RouterModel
from router.policy import PathDistribution, RouterPolicy
from router.checkpoint import RouterCheckpointConfig
from router import sft_resume
from router.multi_schema import data_set_folders, fit_temperature_pooled, pooled_metrics, question_logs, require_distinct_names
from router.pseudo_labels import PSEUDO_TEMPLATE_ID, pseudo_labelled_samples
from router.sft_data import EncodedSplit, RewardTable, encode_split, lr_lambda, predict_split, split_log_probs


@dataclass
class SFTConfig:
    """Options of ``python -m router.train_sft`` (defaults fit Northwind in a few minutes on 2 CPU cores)."""

    data: Path
    """Data set folder written by python -m data_pipeline.build (schema.json + samples.jsonl), or a folder of such folders (one router on all their schemas, e.g. the --out of python -m evaluation.spider_data)."""
    out: Path
    """Checkpoint folder to write (replaced atomically at the end)."""
    encoder: str = DEFAULT_ENCODER
    """Encoder: multilingual-e5-small, all-MiniLM-L6-v2 or a Hugging Face directory."""
    init: Path | None = None
    """Start from this router checkpoint instead of a fresh one (its schema may differ)."""
    trainable_layers: int = 3
    """Top encoder layers that train; the rest is frozen and its outputs are cached."""
    head_dim: int = 256
    """Width of the heads' query and candidate vectors."""
    anchor_prior: float = 4.0
    """Fixed bonus (in nats) for routes that start from a table the question supports, by a value it mentions or, with no value, by naming it; 0 turns it off. Saved with the router and used whenever it routes."""
    who_prior: float = 4.0
    """Fixed bonus (in nats) for routes that end at the table whose verb a who-question uses ("Who supplies Chai?" ends at the suppliers); 0 turns it off. Saved with the router and used whenever it routes."""
    epochs: int = 8
    """Most epochs (the cosine schedule spans them); early stopping may end sooner."""
    patience: int = 3
    """Stop after this many epochs without a better validation full-path accuracy."""
    batch_size: int = 32
    """Questions per optimizer step."""
    lr: float = 1e-3
    """Peak learning rate of the heads (and of the value head)."""
    encoder_lr: float = 1e-4
    """Peak learning rate of the trainable encoder layers."""
    link_lr: float = 3e-2
    """Peak learning rate of the few weights on the lexical and value-link features (one per feature and head): they start at 0 and need to reach a few units within a few hundred steps."""
    weight_decay: float = 0.01
    """AdamW weight decay (not applied to biases and norms)."""
    warmup_ratio: float = 0.1
    """Share of the steps with a linear warm-up before the cosine decay."""
    max_grad_norm: float = 1.0
    """Gradient norm clip."""
    via_nonnull_weight: float = 10.0
    """Via loss weight of a sample whose gold via is not null (10x: most via labels are null)."""
    class_balance: float = 0.5
    """Power of the inverse class frequency in each head's sample weights (0: no balancing)."""
    value_weight: float = 1.0
    """Weight of the value head's regression loss (it reads detached features)."""
    value_calibration_epochs: int = 40
    """Epochs fitting the value head to the final policy's expected reward (0: skip)."""
    max_question_tokens: int = 64
    """Longest question in tokens; a longer training question is an error."""
    seed: int = 0
    """Seed of every random draw (initialisation, shuffling, dropout)."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    max_train_samples: int = 0
    """Use only the first N training samples of each data set (0: all); for quick runs."""
    resume: bool = False
    """Continue a killed run from its last finished epoch (LOG_DIR/resume, saved after every epoch); the result equals an uninterrupted run."""
    log_dir: Path | None = None
    """Live metrics.jsonl and TensorBoard events (default: OUT.logs next to the checkpoint)."""
    tensorboard: bool = True
    """Write TensorBoard events."""
    progress: bool = True
    """Show progress: a bar on a terminal, a line a minute with the rate and time left in a log file."""
    pseudo_labels: Path | None = None
    """A question log judged by python -m generator.judge (with several data sets: a folder of <data set folder name>.jsonl logs). Each question whose best judged route has p >= --pseudo-min-p is added to the training questions, labelled with that route."""
    pseudo_min_p: float = 0.6
    """Least judge probability of a question's best route for it to be trained on (with --pseudo-labels)."""
    pseudo_weight: float = 1.0
    """Loss weight of each judged question relative to a generated one (with --pseudo-labels). 1 won more development questions than 3 (138 against 135 of 180) and lost less on generated test questions."""
    eval_splits: tuple[str, ...] = ("validation", "test", "test_heldout", "human")
    """Splits evaluated with the final model (those present in the data); human-written questions are evaluated, never trained on."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward whose expectation the value head learns (the one PPO will use)."""

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "patience"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", where=name)
        for name in ("lr", "encoder_lr", "link_lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"must be > 0, got {getattr(self, name)}", where=name)
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"must be in [0, 1), got {self.warmup_ratio}", where="warmup_ratio")
        for name in ("anchor_prior", "who_prior"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"must be a finite number >= 0, got {getattr(self, name)}", where=name)
        if self.via_nonnull_weight < 1:
            raise ConfigError(f"must be >= 1, got {self.via_nonnull_weight}", where="via_nonnull_weight")
        if not 0.0 <= self.pseudo_min_p <= 1.0:
            raise ConfigError(f"must be in [0, 1], got {self.pseudo_min_p}", where="pseudo_min_p")
        if not (math.isfinite(self.pseudo_weight) and self.pseudo_weight > 0):
            raise ConfigError(f"must be a finite number > 0, got {self.pseudo_weight}", where="pseudo_weight")
        if self.class_balance < 0:
            raise ConfigError(f"must be >= 0, got {self.class_balance}", where="class_balance")
        if self.init is not None and self.encoder != DEFAULT_ENCODER:
            raise ConfigError(
                f"--init {self.init} brings its own encoder; do not also give --encoder {self.encoder}", where="encoder"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        d["eval_splits"] = list(self.eval_splits)
        return d


# --------------------------------------------------------------------------- loss weights and value calibration


def class_weights(labels: Sequence[Any], power: float) -> torch.Tensor:
    """Per-sample weights ``(n / (K * count(label)))^power``, ``(n,)``, mean 1.

    >>> [round(w, 3) for w in class_weights(["a", "a", "a", "b"], 1.0).tolist()]  # 4/(2*3), 4/(2*1)
    [0.667, 0.667, 0.667, 2.0]
    >>> class_weights(["a", "a", "a", "b"], 0.0).tolist()  # power 0: no balancing
    [1.0, 1.0, 1.0, 1.0]
    """
    counts = Counter(labels)
    n, k = len(labels), len(counts)
    w = torch.tensor([(n / (k * counts[x])) ** power for x in labels], dtype=torch.float32)
    return w / w.mean()


def head_losses(
    dist: PathDistribution, split: EncodedSplit, idx: Sequence[int], weights: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Weighted cross-entropy of each head at the gold labels of samples ``idx`` (scalars)."""
    rows = list(idx)
    ce = {
        "anchor": -dist.anchor_log_prob.gather(1, split.anchor[rows].view(-1, 1)).squeeze(1),
        "via": -dist.via_log_prob.gather(1, split.pair[rows].view(-1, 1)).squeeze(1),
        "target": -dist.target_log_prob.gather(1, split.path[rows].view(-1, 1)).squeeze(1),
    }
    out = {}
    for head, values in ce.items():
        w = weights[head][rows]
        out[head] = (w * values).sum() / w.sum()
    return out


@torch.no_grad()
def value_inputs(
    policy: RouterPolicy, split: EncodedSplit, rewards: torch.Tensor, batch_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Value-head inputs (features ``(n, H)``, stats ``(n, 2)``) and expected rewards ``(n,)`` under the policy."""
    policy.eval()
    cand = policy.candidates()
    feats, stats, targets = [], [], []
    for start in range(0, len(split), batch_size):
        idx = list(range(start, min(start + batch_size, len(split))))
        dist = policy.distribution(split.batch(idx), candidates=cand)
        feats.append(dist.features)
        stats.append(dist.stats())
        targets.append((dist.log_prob.exp() * rewards[split.reward_row[idx]]).sum(-1))
    return torch.cat(feats), torch.cat(stats), torch.cat(targets)


def calibrate_value(
    policy: RouterPolicy,
    train: EncodedSplit,
    val: EncodedSplit,
    rewards: torch.Tensor,
    epochs: int,
    lr: float,
    seed: int,
) -> dict[str, float]:
    """Fit the value head to the final policy's expected reward on ``train``; report it on ``val``.

    Returns:
        ``value/train_mse``, ``value/val_mse`` and ``value/explained_variance`` (on validation).
    """
    return calibrate_value_parts([(policy, train, val, rewards)], epochs, lr, seed)


def calibrate_value_parts(
    parts: Sequence[tuple[RouterPolicy, EncodedSplit, EncodedSplit, torch.Tensor]], epochs: int, lr: float, seed: int
) -> dict[str, float]:
    """:func:`calibrate_value` over several schemas at once: ``parts`` holds, per schema, its policy
    (all sharing one network), train and validation splits and reward table; the value head is fitted
    on every schema's training questions pooled."""
    model = parts[0][0].model
    tr_in = [value_inputs(pol, t, r) for pol, t, _, r in parts]
    va_in = [value_inputs(pol, v, r) for pol, _, v, r in parts]
    f_tr, s_tr, y_tr = (torch.cat(x) for x in zip(*tr_in, strict=True))
    f_va, s_va, y_va = (torch.cat(x) for x in zip(*va_in, strict=True))
    if epochs > 0:
        opt = torch.optim.Adam(model.critic_parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        model.value_head.train()
        for _ in range(epochs):
            for idx in torch.randperm(len(y_tr), generator=gen).split(64):
                loss = torch.nn.functional.mse_loss(model.value(f_tr[idx], s_tr[idx]), y_tr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        model.value_head.eval()
    with torch.no_grad():
        tr = float(torch.nn.functional.mse_loss(model.value(f_tr, s_tr), y_tr))
        pred = model.value(f_va, s_va)
        va = float(torch.nn.functional.mse_loss(pred, y_va)) if len(y_va) else float("nan")
        var = float(y_va.var()) if len(y_va) > 1 else float("nan")
        ev = 1.0 - float((y_va - pred).var()) / var if var and var > 0 else float("nan")
    return {"value/train_mse": tr, "value/val_mse": va, "value/explained_variance": ev}


# --------------------------------------------------------------------------- training


@dataclass
class SFTResult:
    """What :func:`train` returns.

    Attributes:
        out: the checkpoint folder.
        metrics: final :func:`router.evaluate.path_metrics` per evaluated split, and ``value``.
        history: the per-epoch metric rows (as in ``metrics.jsonl``).
        best_epoch: the epoch whose weights were kept.
        wall_s: seconds from start to saved checkpoint.
        policy: the trained policy (its ``model`` is what was saved), in eval mode.
    """

    out: Path
    metrics: dict[str, Any]
    history: list[dict[str, float]]
    best_epoch: int
    wall_s: float
    policy: RouterPolicy

    @property
    def model(self) -> RouterModel:
        return self.policy.model


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _param_groups(model: RouterModel, cfg: SFTConfig) -> list[dict[str, Any]]:
    critic = {id(p) for p in model.critic_parameters()}
    enc = {id(p) for p in model.encoder.parameters()}
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    links: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in critic:
            continue
        if name.startswith("link."):
            links.append(p)
            continue
        no_decay = p.dim() < 2 or "norm" in name.lower()
        groups.setdefault((id(p) in enc, no_decay), []).append(p)
    out = [
        {"params": ps, "lr": cfg.encoder_lr if is_enc else cfg.lr, "weight_decay": 0.0 if nd else cfg.weight_decay}
        for (is_enc, nd), ps in groups.items()
    ]
    if links:
        out.append({"params": links, "lr": cfg.link_lr, "weight_decay": 0.0})
    out.append({"params": model.critic_parameters(), "lr": cfg.lr, "weight_decay": 0.0})
    return out


def build_policy(cfg: SFTConfig, ds: BuiltDataset) -> RouterPolicy:
    """A fresh router on ``cfg.encoder`` (or ``cfg.init``) bound to the data set's schema."""
    if cfg.init is not None:
        model, _ = RouterModel.from_pretrained(cfg.init)
        model.config.max_question_tokens = cfg.max_question_tokens
        model.config.anchor_prior = cfg.anchor_prior
        model.config.who_prior = cfg.who_prior
    else:
        model = RouterModel.from_encoder(
            cfg.encoder,
            trainable_layers=cfg.trainable_layers,
            head_dim=cfg.head_dim,
            max_question_tokens=cfg.max_question_tokens,
            anchor_prior=cfg.anchor_prior,
            who_prior=cfg.who_prior,
        )
    return RouterPolicy(model, PathSpace(ds.graph, ds.values))


@dataclass
class SchemaPart:
    """One data set's share of (possibly multi-schema) training.

    Attributes:
        ds: the data set.
        samples_file: its ``samples.jsonl`` (named in errors).
        policy: a :class:`RouterPolicy` over its schema; every part's policy shares one network.
        reward_table: rewards of its legal paths against its gold paths.
        train, val: its encoded training and validation splits.
        weights: per-head ``(n_train,)`` loss weights (class balance within this schema, via 10x).
        n_pseudo: pseudo-labelled questions among ``train`` (``--pseudo-labels``; they come last).
    """

    ds: BuiltDataset
    samples_file: str
    policy: RouterPolicy
    reward_table: RewardTable
    train: EncodedSplit
    val: EncodedSplit
    weights: dict[str, torch.Tensor]
    n_pseudo: int = 0

    @property
    def name(self) -> str:
        return self.ds.schema.name


def _load_part(cfg: SFTConfig, folder: Path, model: RouterModel | None, pseudo_log: Path | None = None) -> SchemaPart:
    """Load and encode one data set; a fresh network (``cfg``) when ``model`` is None, else that one shared.
    ``pseudo_log``: its judged question log, whose pseudo-labelled questions join the training split."""
    ds = load_dataset(folder)
    samples_file = str(folder / "samples.jsonl")
    train_samples = ds.split("train")
    if cfg.max_train_samples > 0:
        train_samples = train_samples[: cfg.max_train_samples]
    pseudo = [] if pseudo_log is None else pseudo_labelled_samples(pseudo_log, ds.graph, ds.schema.name, cfg.pseudo_min_p)
    train_samples = train_samples + pseudo
    val_samples = ds.split("validation")
    if not train_samples:
        raise DataError("no samples in split 'train'", where=samples_file)
    if not val_samples:
        raise DataError("no samples in split 'validation' (needed for early stopping)", where=samples_file)
    policy = build_policy(cfg, ds) if model is None else RouterPolicy(model, PathSpace(ds.graph, ds.values))
    reward_table = RewardTable(policy.space, cfg.reward)
    train_set = encode_split(policy, train_samples, reward_table, samples_file)
    val_set = encode_split(policy, val_samples, reward_table, samples_file)
    weights = {
        "anchor": class_weights([s.path.anchor for s in train_samples], cfg.class_balance),
        "via": class_weights([s.path.via for s in train_samples], cfg.class_balance),
        "target": class_weights([s.path.target for s in train_samples], cfg.class_balance),
    }
    weights["via"] = weights["via"] * torch.tensor(
        [cfg.via_nonnull_weight if s.path.via else 1.0 for s in train_samples]
    )
    if pseudo:
        judged = torch.tensor([cfg.pseudo_weight if s.template_id == PSEUDO_TEMPLATE_ID else 1.0 for s in train_samples])
        weights = {head: w * judged for head, w in weights.items()}
    return SchemaPart(ds, samples_file, policy, reward_table, train_set, val_set, weights, len(pseudo))


def epoch_batches(sizes: Sequence[int], batch_size: int, gen: torch.Generator) -> list[tuple[int, list[int]]]:
    """One epoch's minibatches as ``(part, sample indices)``: each part's samples shuffled and cut
    into batches of ``batch_size``, then (with several parts) the batches of all parts shuffled.

    >>> g = torch.Generator().manual_seed(0)
    >>> sorted(len(i) for _, i in epoch_batches([5, 3], 2, g))
    [1, 1, 2, 2, 2]
    >>> {p for p, i in epoch_batches([5, 3], 2, g) if len(i) == 1} == {0, 1}  # no batch mixes schemas
    True
    """
    batches = [
        (part, idx.tolist())
        for part, n in enumerate(sizes)
        for idx in torch.randperm(n, generator=gen).split(batch_size)
    ]
    if len(sizes) > 1:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


def train(cfg: SFTConfig) -> SFTResult:
    """Run SFT as ``cfg`` says and write the checkpoint; returns the result.

    With a folder of data sets as ``cfg.data`` one router trains on all their schemas (module
    docstring); ``SFTResult.policy`` is then bound to the first schema.

    Raises:
        DataError: a data set is missing or malformed, or has no training or validation samples.
        ConfigError, CheckpointError, DownloadError: bad options, ``--init`` or encoder.
    """
    from core.progress import progress_bar

    t0, c0 = time.perf_counter(), time.process_time()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    _seed_everything(cfg.seed)
    folders = data_set_folders(cfg.data)
    multi = len(folders) > 1 or folders[0] != Path(cfg.data)
    log_path = Path(cfg.log_dir) if cfg.log_dir is not None else Path(str(cfg.out) + ".logs")
    refuse_overlap({"--out": cfg.out, "--log-dir": log_path}, {"--data": cfg.data, "--init": cfg.init})
    log_dir = sft_resume.prepare_log_dir(log_path)
    resume_from = sft_resume.find_epoch_state(log_dir, cfg.to_dict(), cfg.resume)

    parts: list[SchemaPart] = []
    for folder, log in zip(folders, question_logs(cfg.pseudo_labels, folders, option="--pseudo-labels"), strict=True):
        parts.append(_load_part(cfg, folder, parts[0].policy.model if parts else None, log))
    require_distinct_names([p.name for p in parts], folders, cfg.data)
    policy = parts[0].policy
    model = policy.model
    rewards = [p.reward_table.table for p in parts]
    t_encoded = time.perf_counter() - t0

    steps_per_epoch = sum(math.ceil(len(p.train) / cfg.batch_size) for p in parts)
    total_steps = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(_param_groups(model, cfg))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(total_steps, cfg.warmup_ratio))
    trainable = [p for p in model.parameters() if p.requires_grad]
    writer = None
    if cfg.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(log_dir / "tensorboard"))
    gen = torch.Generator().manual_seed(cfg.seed)
    history: list[dict[str, float]] = []
    best: tuple[float, float] = (-1.0, float("inf"))
    best_state: dict[str, torch.Tensor] = {}
    best_epoch = 0
    bad_epochs = 0
    keep = {k for k, p in model.named_parameters() if p.requires_grad or k.startswith("value_head.")}
    start_epoch, stopped = 1, False
    if resume_from is not None:  # --resume: the last finished epoch's weights, optimizer, schedule, RNGs, early stopping
        st = sft_resume.load_epoch_state(resume_from)
        model.load_state_dict(st.model, strict=False)
        opt.load_state_dict(st.optimizer)
        sched.load_state_dict(st.scheduler)
        sft_resume.restore_rngs(st, gen)
        history, best, best_epoch, bad_epochs, stopped = st.history, st.best, st.best_epoch, st.bad_epochs, st.stopped
        best_state = st.best_state if st.best_state is not None else {k_: v.clone() for k_, v in st.model.items()}
        start_epoch = st.epoch + 1
        if writer is not None:
            writer.close()
            writer = SummaryWriter(str(log_dir / "tensorboard"), purge_step=start_epoch)
    bar = progress_bar(total=total_steps, desc="router SFT", enabled=cfg.progress,
                       initial=steps_per_epoch * (start_epoch - 1))  # fmt: skip
    try:
        for epoch in range(start_epoch, cfg.epochs + 1):
            if stopped:
                break
            for part in parts:
                part.policy.train()
            sums: Counter[str] = Counter()
            for k, idx in epoch_batches([len(p.train) for p in parts], cfg.batch_size, gen):
                part = parts[k]
                dist = part.policy.distribution(part.train.batch(idx))
                losses = head_losses(dist, part.train, idx, part.weights)
                expected = (dist.log_prob.exp() * rewards[k][part.train.reward_row[idx]]).sum(-1).detach()
                value_loss = torch.nn.functional.mse_loss(model.value(dist.features, dist.stats()), expected)
                loss = losses["anchor"] + losses["via"] + losses["target"] + cfg.value_weight * value_loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
                opt.step()
                sched.step()
                n = len(idx)
                sums["n"] += n
                sums["loss"] += float(loss.detach()) * n
                sums["value_loss"] += float(value_loss.detach()) * n
                for head, v in losses.items():
                    sums[f"{head}_ce"] += float(v.detach()) * n
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{float(loss.detach()):.3f}")
            preds: list[JoinPath] = []
            val_samples: list[Sample] = []
            nll_sum = 0.0
            for part in parts:
                idx_pred, nll = predict_split(part.policy, part.val)
                preds += [part.policy.space.paths[i] for i in idx_pred]
                val_samples += part.val.samples
                nll_sum += nll * len(part.val)
            nll = nll_sum / max(1, len(val_samples))
            m = path_metrics(preds, val_samples)
            row = {
                "epoch": epoch,
                "train/loss": sums["loss"] / sums["n"],
                "train/anchor_ce": sums["anchor_ce"] / sums["n"],
                "train/via_ce": sums["via_ce"] / sums["n"],
                "train/target_ce": sums["target_ce"] / sums["n"],
                "train/value_loss": sums["value_loss"] / sums["n"],
                "train/lr": sched.get_last_lr()[0],
                "route/full_path_acc": m["full_path_acc"],
                "route/anchor_acc": m["anchor_acc"],
                "route/via_acc": m["via_acc"],
                "route/target_acc": m["target_acc"],
                "route/nll": nll,
                "time/elapsed_s": time.perf_counter() - t0,
            }
            history.append(row)
            write_jsonl(log_dir / "metrics.jsonl", history)
            if writer is not None:
                for k_, v in row.items():
                    if k_ != "epoch":
                        writer.add_scalar(k_, v, epoch)
            bar.set_postfix(epoch=epoch, loss=f"{row['train/loss']:.3f}", val_path=f"{m['full_path_acc']:.3f}")
            key = (m["full_path_acc"], nll)
            if key[0] > best[0] or (key[0] == best[0] and key[1] < best[1]):
                best, best_epoch, bad_epochs = key, epoch, 0
                best_state = {k_: v.detach().clone() for k_, v in model.state_dict().items() if k_ in keep}
            else:
                bad_epochs += 1
            stopped = bad_epochs >= cfg.patience
            weights = {k_: v.detach().clone() for k_, v in model.state_dict().items() if k_ in keep}
            sft_resume.save_epoch_state(log_dir, cfg.to_dict(), sft_resume.EpochState(
                epoch, weights, opt.state_dict(), sched.state_dict(), **sft_resume.capture_rngs(gen), best=best,
                best_epoch=best_epoch, best_state=None if best_epoch == epoch else best_state, bad_epochs=bad_epochs,
                stopped=stopped, history=history))  # fmt: skip
            if stopped:
                break
    finally:
        bar.close()
        if writer is not None:
            writer.flush()
    model.load_state_dict(best_state, strict=False)
    value_report = calibrate_value_parts(
        [(p.policy, p.train, p.val, r) for p, r in zip(parts, rewards, strict=True)],
        cfg.value_calibration_epochs, cfg.lr, cfg.seed,
    )  # fmt: skip
    if writer is not None:
        for k_, v in value_report.items():
            writer.add_scalar(k_, v, best_epoch)
        writer.close()
    # temperature scaling (Guo et al., 2017) on the validation questions: the route stays, its probability is calibrated
    val_lp = [split_log_probs(p.policy, p.val) for p in parts]
    temperature = fit_temperature_pooled(val_lp, [p.val.path for p in parts])
    t_train = time.perf_counter() - t0 - t_encoded

    final: dict[str, Any] = {}
    for name in cfg.eval_splits:
        per_part = []
        conf, correct = [], []
        for part in parts:
            samples = part.ds.split(name)
            if not samples:
                continue
            enc = {"train": part.train, "validation": part.val}.get(name) or encode_split(
                part.policy, samples, part.reward_table, part.samples_file
            )
            lp = split_log_probs(part.policy, enc)
            idx_pred = lp.argmax(-1)
            conf.append(torch.softmax(lp / temperature, -1).max(-1).values)
            correct.append(idx_pred == enc.path)
            per_part.append(([part.policy.space.paths[i] for i in idx_pred.tolist()], enc.samples, part.ds.graph))
        if not per_part:
            continue
        if multi:
            final[name] = pooled_metrics(per_part, cfg.reward)
        else:
            final[name] = path_metrics(per_part[0][0], per_part[0][1], per_part[0][2], cfg.reward)
        final[name]["ece"] = expected_calibration_error(torch.cat(conf), torch.cat(correct))
    for part in parts:
        part.policy.eval()
    eval_doc = final | {"value": value_report}
    n_pseudo = {p.name: p.n_pseudo for p in parts} if cfg.pseudo_labels is not None else None
    if n_pseudo is not None:
        eval_doc["pseudo_labelled"] = n_pseudo
    checkpoint = RouterCheckpointConfig.for_graphs(
        model.config, [p.ds.graph for p in parts], multi=multi, data=[str(f) for f in folders] if multi else (),
        values=None if multi else parts[0].ds.values, temperature=round(temperature, 4), training=cfg.to_dict(),
        metrics={k: {m: v[m] for m in ("n", "anchor_acc", "via_acc", "target_acc", "full_path_acc", "ece") if m in v}
                 for k, v in final.items()} | {"value": value_report},
        extra={"best_epoch": best_epoch, "timing_s": {"encode": round(t_encoded, 2), "train": round(t_train, 2),
               "cpu": round(time.process_time() - c0, 2), "threads": torch.get_num_threads()},
               "pseudo_labelled": n_pseudo},
    )  # fmt: skip
    out = model.save_pretrained(cfg.out, checkpoint, files={"eval.json": eval_doc})
    write_jsonl(out / "metrics.jsonl", history)
    write_json(log_dir / "eval.json", eval_doc)
    wall = time.perf_counter() - t0
    sft_resume.finish(log_dir)
    return SFTResult(out, eval_doc, history, best_epoch, wall, policy)


def main(args: Sequence[str] | None = None) -> SFTResult:
    """Command-line entry point: parse :class:`SFTConfig`, train, print the evaluation tables."""
    cfg = parse(SFTConfig, args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    result = train(cfg)
    for name, m in result.metrics.items():
        if name == "pseudo_labelled":
            print("pseudo-labelled training questions: " + ", ".join(f"{k} {v}" for k, v in m.items()))
        elif name != "value":
            print(format_table(m, title=f"== {name} =="))
    print(json.dumps(result.metrics["value"]))
    print(f"saved {result.out} (best epoch {result.best_epoch}, {result.wall_s:.1f} s)")
    return result


if __name__ == "__main__":
    run_main(main)
