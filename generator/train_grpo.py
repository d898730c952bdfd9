"""``python -m generator.train_grpo --data DIR --out DIR [--init SFT_DIR] [--router DIR]``

GRPO on execution rewards (DAPO variant by default), one loop you can read top to bottom in
:func:`main`. Each step, on every process:

1. **Collect** (:func:`collect_groups`): take ``prompts_per_step`` prompts from this process's
   share of the training split (question + routed or gold path + schema + retrieved examples),
   sample ``num_generations`` completions of each with the KV cache (prompt prefilled once), and
   score them with the SQL reward (execution F1 plus format, syntax, schema and n-gram proxies;
   every query under the executor's hard timeout). Groups whose rewards are all equal are
   redrawn (dynamic sampling: a new prompt, or more completions of the same one) within
   ``max_resamples`` per step.
2. **Reference** (:func:`score_reference`): per-token log-probs of the same completions under
   the frozen reference: the same network with its LoRA adapters switched off (no second
   copy), the prompt computed once per group, ``micro_batch`` completions at a time, no graph.
3. **Advantages** (:func:`generator.grpo.group_advantages`): ``(r - mean) / std`` per group,
   optionally with the virtual full score in mean and std.
4. **Optimise** (:func:`optimise`): per group, the clipped loss with k3 KL (``grpo``, ``dapo``
   or ``dr_grpo`` normalisation over the whole batch) is computed and back-propagated
   ``micro_batch`` completions at a time against the prompt's shared KV cache, then the prompt's
   backward runs ``prompt_chunk`` tokens at a time (:func:`generator.grpo_logprobs.group_logprobs`:
   the gradient of the whole batch, in memory that grows with the micro-batch, not with G or the
   prompt); gradients are all-reduced once over the processes, clipped, AdamW, cosine learning
   rate. With ``num_iterations == 1`` the sampling log-probs are the detached log-probs of this
   pass, so no extra forward is spent on them.
5. **Log** every metric (``docs/metrics.md``) to TensorBoard and ``metrics.jsonl``; checkpoint
   adapter + optimizer + scheduler + RNG + step every ``save_steps`` (atomically); at the end
   save ``OUT/final`` and plot ``OUT/reward_curves.png``.

Before step 1 a smoke test (:mod:`generator.smoke`) generates for ~10 random training samples
and refuses to start when none earns execution reward (GRPO cannot learn from groups that all score 0).

Several processes: ``accelerate launch --multi_gpu --num_processes 2 -m generator.train_grpo ...``
(on CPU-only machines accelerate needs ``--multi_gpu`` to start more than one process; the
trainer then uses gloo). Prompts are sharded by rank, rewards and metrics gathered; a runaway
query costs its rank at most the SQL timeout, because the executor aborts it inside SQLite.
"""

from __future__ import annotations

import random
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, gather_object
from transformers import PreTrainedTokenizerBase, get_cosine_schedule_with_warmup

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import CheckpointError, DataError, Route2SQLError
from core.graph import JoinPath
from core.io import atomic_directory, atomic_write_bytes, ensure_writable_dir, read_jsonl, refuse_overlap, write_json, write_jsonl
from core.progress import progress_bar
from core.samples import Sample
from core.torch_state import load_state
from generator.config import GRPOConfig, config_to_dict
from generator.folders import load_policy, prompt_settings_for, write_generator
from generator.prompt import PromptSettings, prompt_token_ids, route_paths, sample_messages
from generator.sampling import Completions, model_device, sample_group
from generator.grpo import group_advantages, group_mean_std, grpo_loss, plan_dynamic_sampling, zero_std_groups
from generator.grpo_logprobs import group_logprobs
from generator.models import make_reference_model, reference_logits_context
from generator.retrieval import ExampleRetriever
from generator.smoke import require_execution_signal, run_smoke_test
from rewards.sql import COMPONENTS, SQLRewardConfig, sql_reward_components
from rewards.sql_execution import ExecutionScorer

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


# --------------------------------------------------------------------------- prompts


@dataclass(frozen=True)
class Prompt:
    """One training prompt: the sample, the path it is conditioned on, its token ids."""

    sample: Sample
    path: JoinPath
    ids: list[int]


def build_prompts(
    ds: BuiltDataset,
    samples: Sequence[Sample],
    paths: Sequence[JoinPath],
    tokenizer: PreTrainedTokenizerBase,
    *,
    prompt: PromptSettings,
    max_tokens: int,
) -> tuple[list[Prompt], int]:
    """Tokenised prompts of ``samples``, built as ``prompt`` says (examples retrieved from the
    training split, never the sample itself); prompts over ``max_tokens`` are left out.

    Returns:
        ``(prompts, n_too_long)``.
    """
    retriever = ExampleRetriever(ds.split("train")) if prompt.k_examples > 0 else None
    out, skipped = [], 0
    for s, p in zip(samples, paths, strict=True):
        ids = prompt_token_ids(tokenizer, sample_messages(s, ds, retriever, path=p, prompt=prompt))
        if len(ids) > max_tokens:
            skipped += 1
            continue
        out.append(Prompt(s, p, ids))
    return out, skipped


class PromptStream:
    """This process's endless, disjoint share of the prompts, reshuffled every epoch.

    Every process draws the same permutation of ``range(n)`` for an epoch (seeded by ``seed``
    and the epoch) and takes the positions ``rank, rank + world, ...``; so processes never share
    a prompt within an epoch. The state is two integers, saved in checkpoints.

    >>> a, b = PromptStream(6, rank=0, world=2, seed=1), PromptStream(6, rank=1, world=2, seed=1)
    >>> sa, sb = {a.next() for _ in range(3)}, {b.next() for _ in range(3)}
    >>> sorted(sa | sb), sa & sb
    ([0, 1, 2, 3, 4, 5], set())
    """

    def __init__(self, n: int, *, rank: int = 0, world: int = 1, seed: int = 0) -> None:
        if n < world:
            raise DataError(f"{n} training prompts cannot be shared by {world} processes", where="--data")
        self.n, self.rank, self.world, self.seed = n, rank, world, seed
        self.epoch, self.pos = 0, 0
        self._order = self._shard(0)

    def _shard(self, epoch: int) -> list[int]:
        perm = list(range(self.n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(perm)
        usable = (self.n // self.world) * self.world  # equal shares: every rank has as many steps per epoch
        return perm[:usable][self.rank :: self.world]

    def next(self) -> int:
        """The next prompt index."""
        if self.pos >= len(self._order):
            self.epoch, self.pos = self.epoch + 1, 0
            self._order = self._shard(self.epoch)
        idx = self._order[self.pos]
        self.pos += 1
        return idx

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self._shard(self.epoch)


# --------------------------------------------------------------------------- rollouts


@dataclass
class Group:
    """One prompt's completions and what was computed about them.

    Attributes:
        prompt: the prompt.
        completions: ``n`` completions (``n = G``, or more after "more" dynamic sampling).
        components: the reward components of each completion (``rewards.sql``).
        rewards: ``(n,)`` total rewards.
        ref_logp: ``(n, T)`` reference log-probs, once :func:`score_reference` ran.
        old_logp: ``(n, T)`` sampling-policy log-probs (set on the first optimisation pass).
        advantages: ``(n,)``, once computed.
    """

    prompt: Prompt
    completions: Completions
    components: list[dict[str, Any]]
    rewards: torch.Tensor
    ref_logp: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    advantages: torch.Tensor | None = None

    @property
    def zero_std(self) -> bool:
        """All rewards equal."""
        return bool(zero_std_groups(self.rewards[None])[0])

    def flat(self, signal: str = "total") -> bool:
        """Whether dynamic sampling should redraw this group: all total rewards equal
        (``signal="total"``), or all execution rewards equal (``signal="execution"``: a group whose
        completions differ only in proxy rewards, e.g. none runs, teaches proxies only; seed 000,
        pitfall 1, at the level of one group)."""
        if signal == "execution":
            execution = torch.tensor([float(c["execution"]) for c in self.components])
            return bool(zero_std_groups(execution[None])[0])
        return self.zero_std


def score_completions(
    texts: Sequence[str], gold_sql: str, db_path: str | Path, reward: SQLRewardConfig, scorer: ExecutionScorer
) -> tuple[list[dict[str, Any]], torch.Tensor]:
    """Reward components and totals of one group's completions against its gold SQL.

    With ``scorer`` from ``reward.make_scorer()`` the completions are scored in parallel in
    ``reward.score_workers`` worker processes; a runaway query (cartesian product, a function
    SQLite cannot interrupt) is stopped at ``reward.timeout_s`` (its worker is killed 0.3 s
    later at worst) and scores 0, so one slow query does not hold up the others. Never raises
    for any completion text (deep nesting, megabytes: see :mod:`rewards.sql`).

    Returns:
        ``(components, totals)`` with totals of shape ``(len(texts),)``.
    """
    comps = sql_reward_components(list(texts), [gold_sql] * len(texts), db_path, reward, scorer)
    return comps, torch.tensor([c["total"] for c in comps], dtype=torch.float32)


def _concat(a: Completions, b: Completions, pad_id: int) -> Completions:
    width = max(a.completion_ids.shape[1], b.completion_ids.shape[1])

    def pad(x: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    return Completions(
        a.prompt_ids,
        torch.cat([pad(a.completion_ids, pad_id), pad(b.completion_ids, pad_id)]),
        torch.cat([pad(a.mask, 0), pad(b.mask, 0)]),
        a.texts + b.texts,
        a.seconds + b.seconds,
    )


@dataclass
class CollectStats:
    """Bookkeeping of one :func:`collect_groups` call (seconds are wall time)."""

    generation_s: float = 0.0
    reward_s: float = 0.0
    resamples: int = 0
    zero_std_before: int = 0
    groups_before: int = 0


@dataclass
class Rollout:
    """The model pieces :func:`collect_groups` needs (kept together so tests can build one)."""

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    prompts: list[Prompt]
    stream: PromptStream
    scorer: ExecutionScorer
    db_path: Path
    stats: CollectStats = field(default_factory=CollectStats)


def _new_group(ro: Rollout, cfg: GRPOConfig, prompt: Prompt, n: int, min_new_tokens: int = 0) -> Group:
    comp = sample_group(ro.model, ro.tokenizer, prompt.ids, n, max_new_tokens=cfg.max_completion_length,
                        temperature=cfg.temperature, top_p=cfg.top_p, min_new_tokens=min_new_tokens)  # fmt: skip
    ro.stats.generation_s += comp.seconds
    t0 = time.perf_counter()
    comps, rewards = score_completions(comp.texts, prompt.sample.sql, ro.db_path, cfg.reward, ro.scorer)
    ro.stats.reward_s += time.perf_counter() - t0
    return Group(prompt, comp, comps, rewards)


def collect_groups(ro: Rollout, cfg: GRPOConfig, min_new_tokens: int = 0) -> list[Group]:
    """Sample and score ``cfg.prompts_per_step`` groups, redrawing zero-std ones (dynamic sampling).

    A group is zero-std by ``cfg.dynamic_sampling_signal`` (:meth:`Group.flat`): its total
    rewards, or its execution rewards, are all equal.
    ``cfg.dynamic_sampling``: ``"resample"`` replaces a zero-std group by a fresh prompt;
    ``"more"`` adds ``num_generations`` more completions to it (the group grows); ``"off"``
    keeps it. At most ``cfg.max_resamples`` redraws per call; counts go to ``ro.stats``.
    """
    groups = [_new_group(ro, cfg, ro.prompts[ro.stream.next()], cfg.num_generations, min_new_tokens)
              for _ in range(cfg.prompts_per_step)]  # fmt: skip
    ro.stats.groups_before += len(groups)
    signal = cfg.dynamic_sampling_signal
    ro.stats.zero_std_before += sum(g.flat(signal) for g in groups)
    if cfg.dynamic_sampling == "off":
        return groups
    used = 0
    while True:
        redo = plan_dynamic_sampling([g.flat(signal) for g in groups], used, cfg.max_resamples)
        if not redo:
            return groups
        for i in redo:
            used += 1
            ro.stats.resamples += 1
            if cfg.dynamic_sampling == "resample":
                groups[i] = _new_group(ro, cfg, ro.prompts[ro.stream.next()], cfg.num_generations, min_new_tokens)
            else:
                more = _new_group(ro, cfg, groups[i].prompt, cfg.num_generations, min_new_tokens)
                g = groups[i]
                groups[i] = Group(g.prompt, _concat(g.completions, more.completions, ro.tokenizer.pad_token_id),
                                  g.components + more.components, torch.cat([g.rewards, more.rewards]))  # fmt: skip


def score_reference(model: torch.nn.Module, groups: Sequence[Group], temperature: float,
                    ref_model: torch.nn.Module | None = None, *, micro_batch: int | None = None,
                    prompt_chunk: int | None = None) -> float:  # fmt: skip
    """Fill ``group.ref_logp`` (``(n, T)``) for every group: the base model (adapters off) or
    ``ref_model``, without a graph, ``micro_batch`` completions at a time (None: the whole group)
    and the prompt ``prompt_chunk`` tokens at a time (None: at once).

    Returns:
        Seconds spent.
    """
    t0 = time.perf_counter()
    device = model_device(model)
    for g in groups:
        prompt, comp = g.completions.prompt_ids.to(device), g.completions.completion_ids.to(device)
        kw = {"temperature": temperature, "micro_batch": micro_batch, "prompt_chunk": prompt_chunk}
        if ref_model is not None:
            with torch.no_grad():
                g.ref_logp = group_logprobs(ref_model, prompt, comp, **kw).logp
        else:
            with reference_logits_context(model):
                g.ref_logp = group_logprobs(model, prompt, comp, **kw).logp
    return time.perf_counter() - t0


def assign_advantages(groups: Sequence[Group], cfg: GRPOConfig) -> None:
    """Set ``group.advantages`` (:func:`generator.grpo.group_advantages` with the config's
    scaling and virtual full score)."""
    anchor = cfg.anchor_score if cfg.virtual_full_score else None
    for g in groups:
        g.advantages = group_advantages(g.rewards, scale_rewards=cfg.scale, virtual_full_score=anchor)


@dataclass
class OptimiseStats:
    """Sums over one optimisation pass (divide by ``n_tokens``), and its timings."""

    loss: float = 0.0
    kl_sum: float = 0.0
    clip_low_sum: float = 0.0
    clip_high_sum: float = 0.0
    n_tokens: int = 0
    grad_norm: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0


def sync_gradients(accelerator: Accelerator, params: Sequence[torch.nn.Parameter]) -> None:
    """Average the parameters' ``.grad`` over the processes in one all-reduce (no-op for one
    process); a parameter without a gradient counts as zeros."""
    if accelerator.num_processes == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    flat /= accelerator.num_processes
    offset = 0
    for p, g in zip(params, grads, strict=True):
        p.grad = flat[offset : offset + g.numel()].view_as(p).clone()
        offset += g.numel()


def broadcast_parameters(accelerator: Accelerator, params: Sequence[torch.nn.Parameter]) -> None:
    """Copy the main process's values of ``params`` to every process (no-op for one process): the
    processes seed by rank, so freshly initialised LoRA matrices differ until this runs."""
    if accelerator.num_processes == 1:
        return
    with torch.no_grad():
        for p in params:
            torch.distributed.broadcast(p.data, src=0)


def optimise(
    accelerator: Accelerator,
    model: torch.nn.Module,
    groups: Sequence[Group],
    cfg: GRPOConfig,
    optimizer: torch.optim.Optimizer,
    params: Sequence[torch.nn.Parameter],
    first_pass: bool = True,
) -> OptimiseStats:
    """One optimizer step over a batch of groups: loss per micro-batch, gradients accumulated, one all-reduce.

    Each group goes through :func:`generator.grpo_logprobs.group_logprobs` with
    ``cfg.micro_batch`` and ``cfg.prompt_chunk``: every micro-batch's share of the batch loss
    (normalised by the whole batch's completion and token counts) is back-propagated as soon as
    it is computed, so the accumulated gradient is that of the whole batch's loss.

    Args:
        accelerator: the run's accelerator (the processes' gradients are averaged before clipping).
        model: the policy (peft-wrapped or not), in train mode.
        groups: groups with ``advantages`` (and ``ref_logp`` when ``cfg.beta > 0``).
        cfg: loss type, clip ranges, beta, gradient clipping, micro-batch and prompt chunk.
        optimizer: stepped once.
        params: the trainable parameters (for clipping and the all-reduce).
        first_pass: True on the first pass over this batch: the sampling log-probs are this
            pass's detached log-probs (stored on the groups for later passes).

    Returns:
        :class:`OptimiseStats`.
    """
    stats = OptimiseStats()
    device = accelerator.device
    total_seq = sum(g.completions.completion_ids.shape[0] for g in groups)
    total_tok = int(sum(int(g.completions.mask.sum()) for g in groups))
    for g in groups:
        assert g.advantages is not None
        adv, mask = g.advantages.to(device), g.completions.mask.to(device)
        old = None if first_pass or g.old_logp is None else g.old_logp.to(device)
        ref = g.ref_logp.to(device) if g.ref_logp is not None else None

        def loss_fn(rows: slice, logp: torch.Tensor) -> torch.Tensor:
            out = grpo_loss(
                logp, logp.detach() if old is None else old[rows], None if ref is None else ref[rows], adv[rows],
                mask[rows], loss_type=cfg.loss_type, epsilon_low=cfg.epsilon, epsilon_high=cfg.clip_high,
                beta=cfg.beta, max_completion_length=cfg.max_completion_length,
                total_sequences=total_seq, total_tokens=total_tok,
            )  # fmt: skip
            stats.loss += float(out.loss.detach())
            stats.kl_sum += out.kl_sum
            stats.clip_low_sum += out.clip_low_sum
            stats.clip_high_sum += out.clip_high_sum
            stats.n_tokens += out.n_tokens
            return out.loss

        res = group_logprobs(model, g.completions.prompt_ids.to(device), g.completions.completion_ids.to(device),
                             temperature=cfg.temperature, micro_batch=cfg.micro_batch, prompt_chunk=cfg.prompt_chunk,
                             loss_fn=loss_fn, backward=accelerator.backward)  # fmt: skip
        if old is None:
            g.old_logp = res.logp
        stats.forward_s += res.forward_s
        stats.backward_s += res.backward_s
    t0 = time.perf_counter()
    sync_gradients(accelerator, params)
    stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats.backward_s += time.perf_counter() - t0
    return stats


# --------------------------------------------------------------------------- metrics


def step_metrics(
    accelerator: Accelerator, groups: Sequence[Group], collect: CollectStats, opt: Sequence[OptimiseStats],
    cfg: GRPOConfig, learning_rate: float, ref_s: float,
) -> dict[str, float]:  # fmt: skip
    """The step's metrics over every process (names as in ``docs/metrics.md``)."""
    local = {
        "rewards": [float(r) for g in groups for r in g.rewards],
        "group_std": [float(group_mean_std(g.rewards)[1]) for g in groups],
        "zero_std": [float(g.zero_std) for g in groups],
        "components": [c for g in groups for c in g.components],
        "lengths": [int(x) for g in groups for x in g.completions.lengths],
        "clipped": [int(x) >= cfg.max_completion_length for g in groups for x in g.completions.lengths],
        "collect": collect,
        "opt": list(opt),
        "ref_s": ref_s,
    }
    parts = gather_object([local]) if accelerator.num_processes > 1 else [local]
    rewards = [r for p in parts for r in p["rewards"]]
    comps = [c for p in parts for c in p["components"]]
    lengths = [n for p in parts for n in p["lengths"]]
    first_opt = [p["opt"][0] for p in parts]
    n_tok = max(sum(o.n_tokens for o in first_opt), 1)
    m: dict[str, float] = {
        "reward": float(np.mean(rewards)),
        "reward_std": float(np.mean([s for p in parts for s in p["group_std"]])),
        "frac_reward_zero_std": float(np.mean([z for p in parts for z in p["zero_std"]])),
        "kl": sum(o.kl_sum for o in first_opt) / n_tok,
        "clip_ratio/low": sum(o.clip_low_sum for p in parts for o in p["opt"]) / max(sum(o.n_tokens for p in parts for o in p["opt"]), 1),
        "clip_ratio/high": sum(o.clip_high_sum for p in parts for o in p["opt"]) / max(sum(o.n_tokens for p in parts for o in p["opt"]), 1),
        "loss": float(np.mean([o.loss for p in parts for o in p["opt"]])),
        "grad_norm": float(np.mean([o.grad_norm for o in first_opt])),
        "completions/mean_length": float(np.mean(lengths)),
        "completions/min_length": float(np.min(lengths)),
        "completions/max_length": float(np.max(lengths)),
        "completions/clipped_ratio": float(np.mean([c for p in parts for c in p["clipped"]])),
        "dynamic_sampling/resamples": float(sum(p["collect"].resamples for p in parts)),
        "dynamic_sampling/frac_zero_std_before": sum(p["collect"].zero_std_before for p in parts)
        / max(sum(p["collect"].groups_before for p in parts), 1),
        "learning_rate": learning_rate,
        "num_completions": float(len(rewards)),
        "timing/generation_s": max(p["collect"].generation_s for p in parts),
        "timing/reward_s": max(p["collect"].reward_s for p in parts),
        "timing/reference_s": max(p["ref_s"] for p in parts),
        "timing/policy_forward_s": max(sum(o.forward_s for o in p["opt"]) for p in parts),
        "timing/backward_s": max(sum(o.backward_s for o in p["opt"]) for p in parts),
    }
    m["clip_ratio"] = m["clip_ratio/low"] + m["clip_ratio/high"]
    for name in COMPONENTS:
        vals = [float(c[name]) for c in comps if c[name] is not None]
        m[f"rewards/{name}/mean"] = float(np.mean(vals)) if vals else 0.0
    m["rewards/execution/nonzero_frac"] = float(np.mean([(c["execution"] or 0.0) > 0 for c in comps]))
    m["rewards/exact/mean"] = float(np.mean([c["exact"] for c in comps]))
    return m


def plot_reward_curves(history: Sequence[dict[str, float]], out_file: Path) -> Path:
    """Reward, each component's mean, zero-std fraction and KL against the step, as one PNG (atomic)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    ax.plot(steps, [h["reward"] for h in history], label="reward (total)")
    lo = [h["reward"] - h["reward_std"] for h in history]
    hi = [h["reward"] + h["reward_std"] for h in history]
    ax.fill_between(steps, lo, hi, alpha=0.2)
    ax.set_xlabel("step")
    ax.set_title("total reward (mean +- within-group std)")
    ax.legend()
    ax = axes[1]
    for name in COMPONENTS:
        ax.plot(steps, [h[f"rewards/{name}/mean"] for h in history], label=name)
    ax.plot(steps, [h["rewards/exact/mean"] for h in history], "k--", label="exact match")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_title("reward components (unweighted means)")
    ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(steps, [h["frac_reward_zero_std"] for h in history], label="frac_reward_zero_std")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax2 = ax.twinx()
    ax2.plot(steps, [h["kl"] for h in history], color="tab:red", label="kl")
    ax.set_title("zero-std groups and KL (red, right axis)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out_file, buf.getvalue())
    return out_file


# --------------------------------------------------------------------------- checkpoints


def latest_checkpoint(out: Path) -> Path | None:
    """The ``checkpoint-<step>`` folder in ``out`` with the largest step, or None."""
    found = [(int(m.group(1)), p) for p in out.glob("checkpoint-*") if (m := CHECKPOINT_RE.match(p.name)) and p.is_dir()]
    return max(found)[1] if found else None


def _rng_state(stream: PromptStream) -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "stream": stream.state_dict()}  # fmt: skip


def save_checkpoint(
    accelerator: Accelerator, out: Path, step: int, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer, scheduler: Any, stream: PromptStream, meta: dict[str, Any], keep: int,
) -> Path:  # fmt: skip
    """Write ``out/checkpoint-<step>`` in one rename: adapter + tokenizer + meta, optimizer,
    scheduler, every process's RNG and prompt-stream state, the step. Collective: every process
    must call it. Old checkpoints beyond ``keep`` are removed."""
    states = gather_object([_rng_state(stream)]) if accelerator.num_processes > 1 else [_rng_state(stream)]
    path = out / f"checkpoint-{step}"
    if accelerator.is_main_process:
        with atomic_directory(path) as tmp:
            write_generator(tmp, model, tokenizer, meta)
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
            torch.save(states, tmp / "rng_state.pt")
            write_json(tmp / "trainer_state.json", {"step": step, "world_size": accelerator.num_processes})
        ckpts = sorted((int(m.group(1)), p) for p in out.glob("checkpoint-*") if (m := CHECKPOINT_RE.match(p.name)))
        for _, old in ckpts[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return path


def load_training_state(ckpt: Path, rank: int, world: int) -> tuple[int, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Read a checkpoint's step, optimizer state, scheduler state and this process's RNG state.

    Raises:
        CheckpointError: a file is missing, unreadable or holds anything but tensors, plain
            containers and numpy RNG states; or the checkpoint was made with another process count.
    """
    try:
        import json

        state = json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))
        opt = load_state(ckpt / "optimizer.pt")  # never unpickles code planted in a checkpoint
        sched = load_state(ckpt / "scheduler.pt")
        rngs = load_state(ckpt / "rng_state.pt")
        if not (isinstance(state, dict) and isinstance(opt, dict) and isinstance(sched, dict) and isinstance(rngs, list)):
            raise TypeError("a file holds the wrong kind of object")
        step, rng = int(state["step"]), rngs[rank]
    except Exception as exc:  # missing, truncated, foreign or hostile files are all one error
        raise CheckpointError(f"incomplete or unreadable checkpoint ({type(exc).__name__}: {exc})".splitlines()[0], where=ckpt) from exc
    if int(state.get("world_size", 1)) != world:
        raise CheckpointError(f"made with {state.get('world_size')} processes, resumed with {world}", where=ckpt)
    return step, opt, sched, rng


def _restore_rng(state: dict[str, Any], stream: PromptStream) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    stream.load_state_dict(state["stream"])


# --------------------------------------------------------------------------- main


@dataclass
class GRPOResult:
    """What :func:`train` returns: the metrics per step (as in ``metrics.jsonl``) and the policy."""

    history: list[dict[str, float]]
    model: torch.nn.Module
    out: Path


def train(cfg: GRPOConfig) -> GRPOResult:
    """The whole run (module docstring); every process of an ``accelerate launch`` calls it.

    Raises:
        Route2SQLError: the smoke test saw no execution reward, or the database is missing or
            is not the one the data set was built from.
        DataError, CheckpointError, ConfigError: bad data folder, checkpoint or settings.
    """
    refuse_overlap({"--out": cfg.out}, {"--data": cfg.data, "--db": cfg.db, "--init": cfg.init, "--router": cfg.router})
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    rank, world = accelerator.process_index, accelerator.num_processes
    out = ensure_writable_dir(cfg.out)
    random.seed(cfg.seed + rank)
    np.random.seed(cfg.seed + rank)
    torch.manual_seed(cfg.seed + rank)

    # ---- data, prompts, model
    ds = load_dataset(cfg.data, db_path=cfg.db, sql_user="generator.train_grpo")
    train = ds.split("train")
    if not train:
        raise DataError("the data set has no training samples", where=cfg.data)
    resume_from = latest_checkpoint(out) if cfg.resume else None
    if cfg.resume and resume_from is None:
        raise CheckpointError("--resume given but no checkpoint-* folder here", where=out)
    model, tokenizer, model_cfg = load_policy(cfg.model, resume_from or cfg.init)
    prompt = prompt_settings_for(cfg.init, cfg.prompt)  # as --init was trained, unless told otherwise
    if not prompt.with_reasoning:  # answers without a reasoning block are the asked-for format
        cfg = replace(cfg, reward=replace(cfg.reward, require_reasoning=False))
    model.to(accelerator.device)
    ref_model = None
    if cfg.beta > 0 and not model_cfg.use_lora:
        ref_model = make_reference_model(model_cfg).to(accelerator.device)
    prompts, too_long = build_prompts(ds, train, route_paths(train, cfg.router, ds), tokenizer, prompt=prompt,
                                      max_tokens=cfg.max_prompt_tokens)  # fmt: skip
    if not prompts:
        raise DataError(f"every training prompt is longer than --max-prompt-tokens {cfg.max_prompt_tokens}", where=cfg.data)
    scorer = cfg.reward.make_scorer().start()  # the scoring workers start while the model loads
    stream = PromptStream(len(prompts), rank=rank, world=world, seed=cfg.seed)
    ro = Rollout(model, tokenizer, prompts, stream, scorer, ds.db_path)
    if accelerator.is_main_process:
        print(f"{len(prompts)} training prompts ({too_long} longer than {cfg.max_prompt_tokens} tokens left out), "
              f"{world} process(es), database {ds.db_path}")  # fmt: skip

    # ---- smoke test (seed 000, pitfall 1): the main process checks, every process stops on failure
    if not cfg.skip_smoke_test and resume_from is None:
        box: list[Any] = [None]
        if accelerator.is_main_process:
            picked = random.Random(cfg.seed).sample(prompts, min(cfg.smoke_samples, len(prompts)))
            try:
                report = run_smoke_test(model, tokenizer, [p.ids for p in picked], [p.sample.sql for p in picked],
                                        ds.db_path, cfg.reward, generations=cfg.smoke_generations,
                                        max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                        top_p=cfg.top_p, scorer=scorer)  # fmt: skip
                box = [report.to_dict()]
                write_json(out / "smoke_test.json", box[0])
                require_execution_signal(report)
                print(f"smoke test passed: {report.describe()} ({report.seconds:.0f} s)")
            except Route2SQLError as exc:
                box = [{"ok": False, "error": str(exc)}]
                if world == 1:
                    raise
        if world > 1:
            broadcast_object_list(box, from_process=0)
            if not box[0].get("ok"):
                raise Route2SQLError(box[0].get("error") or "smoke test failed on the main process")
        if cfg.smoke_only:
            scorer.close()
            return GRPOResult([], model, out)

    # ---- optimiser, schedule, DDP
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    total_updates = cfg.max_steps * cfg.num_iterations
    scheduler = get_cosine_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_updates), total_updates)
    start_step = 0
    history: list[dict[str, float]] = []
    if resume_from is not None:
        start_step, opt_state, sched_state, rng_state = load_training_state(resume_from, rank, world)
        optimizer.load_state_dict(opt_state)
        scheduler.load_state_dict(sched_state)
        _restore_rng(rng_state, stream)
        if (out / "metrics.jsonl").is_file():
            history = [h for h in read_jsonl(out / "metrics.jsonl") if h["step"] <= start_step]
    broadcast_parameters(accelerator, params)
    writer = None
    if accelerator.is_main_process:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "runs"), purge_step=start_step + 1 if start_step else None)
    meta = {"trained_by": "generator.train_grpo", "base_model": model_cfg.model,
            "init": str(cfg.init) if cfg.init else None, "config": config_to_dict(cfg),
            "prompt": prompt.to_dict() | {"path": "router" if cfg.router else "gold"}}

    # ---- the loop
    model.train()
    bar = progress_bar(range(start_step, cfg.max_steps), desc="grpo", enabled=cfg.progress and accelerator.is_main_process,
                       initial=start_step, total=cfg.max_steps, unit="step")  # fmt: skip
    for step in bar:
        t_step = time.perf_counter()
        ro.stats = CollectStats()
        groups = collect_groups(ro, cfg)
        ref_s = (score_reference(model, groups, cfg.temperature, ref_model, micro_batch=cfg.micro_batch,
                                 prompt_chunk=cfg.prompt_chunk) if cfg.beta > 0 else 0.0)  # fmt: skip
        assign_advantages(groups, cfg)
        passes = []
        for it in range(cfg.num_iterations):
            passes.append(optimise(accelerator, model, groups, cfg, optimizer, params, first_pass=it == 0))
            scheduler.step()
        m = step_metrics(accelerator, groups, ro.stats, passes, cfg, scheduler.get_last_lr()[0], ref_s)
        m["timing/step_s"] = time.perf_counter() - t_step
        m = {"step": step + 1, **m}
        history.append(m)
        if accelerator.is_main_process:
            assert writer is not None
            for k, v in m.items():
                if k != "step":
                    writer.add_scalar(k, v, step + 1)
            write_jsonl(out / "metrics.jsonl", history)
            bar.set_postfix(reward=f"{m['reward']:.2f}", exe=f"{m['rewards/execution/mean']:.2f}",
                            zstd=f"{m['frac_reward_zero_std']:.2f}", kl=f"{m['kl']:.4f}")  # fmt: skip
        if (step + 1) % cfg.save_steps == 0 or step + 1 == cfg.max_steps:
            save_checkpoint(accelerator, out, step + 1, model, tokenizer, optimizer, scheduler, stream,
                            meta | {"step": step + 1}, cfg.save_total_limit)  # fmt: skip

    # ---- final model and curves
    if accelerator.is_main_process:
        assert writer is not None
        writer.close()
        with atomic_directory(out / "final") as tmp:
            write_generator(tmp, model, tokenizer, meta | {"steps": cfg.max_steps, "last_metrics": history[-1] if history else {}})
        if history:
            plot_reward_curves(history, out / "reward_curves.png")
        print(f"saved {out / 'final'}; metrics in {out / 'metrics.jsonl'}, curves in {out / 'reward_curves.png'}")
    scorer.close()  # stops the scoring worker processes
    accelerator.wait_for_everyone()
    return GRPOResult(history, model, out)


def main(argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    """``python -m generator.train_grpo``: parse the flags and :func:`train`; returns the history."""
    return train(parse(GRPOConfig, argv, description=__doc__)).history


if __name__ == "__main__":
    run_main(main)
