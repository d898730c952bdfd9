"""What both router trainers share: questions with their frozen encoder states cached, the reward
table of every legal path, the learning-rate schedule, and greedy decoding of a cached split.

:func:`encode_split` tokenizes a split's questions, runs the frozen lower encoder layers once
(:meth:`router.model.RouterModel.encode_lower`) and keeps each question's states unpadded; an
:class:`EncodedSplit` pads the rows a minibatch needs (:meth:`EncodedSplit.batch`), so an SFT
epoch or a PPO rollout only runs the trainable top layers. :class:`RewardTable` holds
``reward(path, gold)`` (:func:`rewards.router.path_reward_components`) of every legal path
against each gold path seen, the target the value head regresses in SFT.

Used by :mod:`router.train_sft`, :mod:`router.train_ppo` and :mod:`router.rollout`; it imports
neither trainer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from core.errors import DataError
from core.samples import Sample
from rewards.router import RewardConfig, path_reward_components
from router.model import PathSpace
from router.policy import RouterBatch, RouterPolicy


@dataclass
class EncodedSplit:
    """One split's questions with their frozen-layer states cached, and their labels.

    Attributes:
        samples: the samples.
        ids, lower: per-sample ``(len_i,)`` token ids and ``(len_i, hidden)`` frozen-part states.
        mentions: per-sample ``(len_i, T)`` token-names-table indicators (None: tokenizer without offsets).
        links: ``(n, T, F)`` lexical link features.
        anchor, pair, path: ``(n,)`` gold anchor table, (anchor, via) pair and path indices.
        reward_row: ``(n,)`` row of the gold path in the reward table.
    """

    samples: list[Sample]
    ids: list[torch.Tensor]
    lower: list[torch.Tensor]
    mentions: list[torch.Tensor] | None
    links: torch.Tensor
    anchor: torch.Tensor
    pair: torch.Tensor
    path: torch.Tensor
    reward_row: torch.Tensor

    def __len__(self) -> int:
        return len(self.samples)

    def frozen_states(self, idx: Sequence[int], width: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The cached frozen-layer states ``(len(idx), width, hidden)`` and token-names-table
        indicators ``(len(idx), width, T)`` (None without offsets) of the samples at ``idx``,
        right-padded with zeros to ``width`` tokens (at least each sample's own length)."""
        hidden = self.lower[idx[0]].shape[-1]
        lower = torch.zeros(len(idx), width, hidden)
        mentions = None if self.mentions is None else torch.zeros(len(idx), width, self.links.shape[1])
        for row, i in enumerate(idx):
            n = len(self.lower[i])
            lower[row, :n] = self.lower[i]
            if mentions is not None and self.mentions is not None:
                mentions[row, :n] = self.mentions[i]
        return lower, mentions

    def batch(self, idx: Sequence[int]) -> RouterBatch:
        """A :class:`RouterBatch` (``lower`` set) of the samples at ``idx``, right-padded to the
        longest of them: ``input_ids``/``attention_mask`` ``(b, seq)``, ``links`` ``(b, T, F)``."""
        idx = list(idx)
        width = max(len(self.ids[i]) for i in idx)
        ids = torch.zeros(len(idx), width, dtype=torch.long)
        mask = torch.zeros(len(idx), width, dtype=torch.long)
        for row, i in enumerate(idx):
            n = len(self.ids[i])
            ids[row, :n] = self.ids[i]
            mask[row, :n] = 1
        lower, mentions = self.frozen_states(idx, width)
        return RouterBatch(ids, mask, self.links[idx], mentions, lower)


class RewardTable:
    """Reward of every legal path against each gold path seen: ``table[row(gold), path]``.

    Args:
        space: the schema's legal paths (``N`` of them).
        config: the router reward (its ``clip`` bounds every entry).
    """

    def __init__(self, space: PathSpace, config: RewardConfig):
        self.space = space
        self.config = config
        self.rows: dict[int, int] = {}
        self._rows: list[list[float]] = []

    def row(self, gold: int) -> int:
        """The table row of gold path index ``gold`` (computed on first use)."""
        if gold not in self.rows:
            g = self.space.paths[gold]
            self.rows[gold] = len(self._rows)
            self._rows.append(
                [path_reward_components(p, g, self.space.graph, self.config)["total"] for p in self.space.paths]
            )
        return self.rows[gold]

    @property
    def table(self) -> torch.Tensor:
        """``(n_gold_rows, N)`` float tensor."""
        return torch.tensor(self._rows, dtype=torch.float32)


def encode_split(
    policy: RouterPolicy, samples: list[Sample], rewards: RewardTable, where: str, batch_size: int = 64
) -> EncodedSplit:
    """Tokenize ``samples``, run the frozen encoder part once, and index their gold paths.

    Raises:
        DataError: a question is empty or too long, or a gold path is not legal (naming ``where``
            and the sample id).
    """
    space = policy.space
    model = policy.model
    n = len(samples)
    order = sorted(range(n), key=lambda i: len(samples[i].question))
    ids: list[torch.Tensor] = [torch.zeros(0)] * n
    lower: list[torch.Tensor] = [torch.zeros(0)] * n
    mentions: list[torch.Tensor] | None = [torch.zeros(0)] * n
    links = torch.zeros(n, space.n_tables, model.config.n_link_features)
    for start in range(0, n, batch_size):
        chunk = order[start : start + batch_size]
        try:
            batch = policy.make_batch([samples[i].question for i in chunk], with_lower=True)
        except DataError as exc:
            bad = samples[chunk[(exc.line or 1) - 1]]
            raise DataError(f"sample {bad.id}: {exc.message}", where=where) from exc
        assert batch.lower is not None
        for row, i in enumerate(chunk):
            m = int(batch.attention_mask[row].sum())
            ids[i] = batch.input_ids[row, :m].clone()
            lower[i] = batch.lower[row, :m].clone()
            links[i] = batch.links[row]
            if batch.mentions is None:
                mentions = None
            elif mentions is not None:
                mentions[i] = batch.mentions[row, :m].clone()
    paths = [space.index(s.path, where=f"{where} (sample {s.id})") for s in samples]
    path_t = torch.tensor(paths, dtype=torch.long)
    return EncodedSplit(
        samples=samples,
        ids=ids,
        lower=lower,
        mentions=mentions,
        links=links,
        anchor=space.path_anchor[path_t] if n else path_t,
        pair=space.path_pair[path_t] if n else path_t,
        path=path_t,
        reward_row=torch.tensor([rewards.row(p) for p in paths], dtype=torch.long),
    )


def lr_lambda(total_steps: int, warmup_ratio: float) -> Any:
    """Linear warm-up then cosine decay to 0, as a ``LambdaLR`` factor of the step."""
    warmup = max(1, int(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


@torch.no_grad()
def predict_split(policy: RouterPolicy, split: EncodedSplit, batch_size: int = 128) -> tuple[list[int], float]:
    """Joint-decoded path indices of a cached split and its mean gold-path NLL (eval mode, with the
    anchor prior: as :class:`router.route.Router` routes)."""
    was = policy.training
    policy.eval()
    try:
        cand = policy.candidates()
        preds: list[int] = []
        nll = 0.0
        for start in range(0, len(split), batch_size):
            idx = list(range(start, min(start + batch_size, len(split))))
            dist = policy.distribution(split.batch(idx), candidates=cand, with_anchor_prior=True)
            preds.extend(dist.mode().tolist())
            nll -= float(dist.log_prob_of(split.path[idx]).sum())
    finally:
        policy.train(was)
    return preds, nll / max(1, len(split))


@torch.no_grad()
def split_log_probs(policy: RouterPolicy, split: EncodedSplit, batch_size: int = 128) -> torch.Tensor:
    """Joint log-probabilities ``(n, N)`` of every legal path for each question of a cached split (eval
    mode, with the anchor prior: the distribution a temperature is fitted to)."""
    was = policy.training
    policy.eval()
    try:
        cand = policy.candidates()
        rows = [
            policy.distribution(
                split.batch(list(range(s, min(s + batch_size, len(split))))), candidates=cand, with_anchor_prior=True
            ).log_prob
            for s in range(0, len(split), batch_size)
        ]
    finally:
        policy.train(was)
    return torch.cat(rows) if rows else torch.zeros(0, policy.space.n_paths)
