"""The router as an actor-critic policy over legal join paths (in the manner of SB3's ``ActorCriticPolicy``).

An *action* is the index of a path in ``graph.legal_paths`` (``N`` of them). The policy is a
softmax over legal paths of the summed head potentials of :class:`router.model.RouterModel`:

    log p(a, v, t) = log_softmax over legal paths of [ S_anchor(a) + S_via(a, v) + S_target(a, v, t) ]

where a router routes (``with_anchor_prior``: :class:`router.route.Router`, and the evaluations
inside SFT and PPO), the potential also gets ``anchor_prior * support(a)``: ``support(a)`` in
[0, 1] is how much the question's own words support starting from ``a`` (a value it mentions is
stored there or, with no value mentioned, it names the table: :func:`router.text.anchor_support`),
``anchor_prior`` (:class:`router.checkpoint.RouterModelConfig`, 4 nats by default, 0 for none) a
fixed weight; and ``who_prior * who_support(t)`` for the route's target ``t``
(:func:`router.text.who_support`: the question asks "who" with the verb of ``t``, "Who supplies
Chai?"; 4 nats by default). Neither is in what SFT and PPO optimise: generated questions always name their
anchor, so a network trained with the prior leans on it and learns less anchor evidence of its
own (measured: docs/results/routing_human.md), while people ask "Which orders had freight charges
above 80?" and a router without it started from Shippers.

Illegal paths have probability 0 and are never sampled, and decoding is joint (the via
potential only has to tell apart the vias that lead from the anchor to the same target).
The per-head probabilities are the chain-rule factors of that joint, each a distribution
over the choices that are legal given the earlier ones:

    log p(path) = log p_anchor(a) + log p_via(v | a) + log p_target(t | a, v)

with ``p_anchor`` the marginal over tables that start a legal path, ``p_via(. | a)`` over vias
with (a, v) a legal prefix, ``p_target(. | a, v)`` over targets with (a, v, t) legal. So the
three heads' cross-entropies (teacher-forced at the gold prefix) sum to the path's negative
log-likelihood, and :meth:`PathDistribution.entropy` is the exact entropy over legal paths.
:attr:`PathDistribution.log_prob` holds the joint log-probs ``(batch, N)``: use them as the
logits of a categorical over legal paths.

The value head reads the pooled question features and two statistics of the distribution
(its largest log-prob and its entropy), all **detached**: the critic's loss cannot reach the
encoder or the heads. :meth:`RouterPolicy.actor_parameters` and
:meth:`RouterPolicy.critic_parameters` are disjoint, so PPO can give them separate learning rates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from core.errors import DataError
from router.model import CandidateEncoding, PathSpace, RouterModel
from router.text import anchor_support, who_support


@dataclass(frozen=True)
class RouterBatch:
    """A batch of questions ready for the network.

    Attributes:
        input_ids: ``(batch, seq)`` long token ids (encoder prefix included).
        attention_mask: ``(batch, seq)`` 1 for real tokens.
        links: ``(batch, n_tables, n_link_features)`` float lexical links to the schema's tables.
        mentions: ``(batch, seq, n_tables)`` float, 1 where a token names a table (or None).
        lower: optional ``(batch, seq, hidden)`` cached output of the frozen encoder layers
            (:meth:`RouterModel.encode_lower`); when given, ``input_ids`` are not re-encoded.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    links: torch.Tensor
    mentions: torch.Tensor | None = None
    lower: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def select(self, idx: torch.Tensor | Sequence[int]) -> RouterBatch:
        """The rows ``idx`` (a minibatch), every field indexed alike.

        >>> b = RouterBatch(torch.arange(6).view(3, 2), torch.ones(3, 2), torch.zeros(3, 4, 5))
        >>> b.select([2, 0]).input_ids.tolist()
        [[4, 5], [0, 1]]
        """
        i = torch.as_tensor(idx, dtype=torch.long, device=self.input_ids.device)
        return RouterBatch(
            self.input_ids[i],
            self.attention_mask[i],
            self.links[i],
            None if self.mentions is None else self.mentions[i],
            None if self.lower is None else self.lower[i],
        )


def grouped_logsumexp(values: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Log-sum-exp of ``values`` ``(batch, M)`` within groups ``group`` ``(M,)``, ``(batch, n_groups)``.

    A group with no members gets ``-inf``.

    >>> v = torch.tensor([[0.0, 0.0, 5.0]])
    >>> grouped_logsumexp(v, torch.tensor([0, 0, 2]), 3).exp().tolist()
    [[2.0, 0.0, 148.4131622314453]]
    """
    b = values.shape[0]
    idx = group.to(values.device).unsqueeze(0).expand(b, -1)
    top = torch.full((b, n_groups), float("-inf"), device=values.device, dtype=values.dtype)
    top = top.scatter_reduce(1, idx, values, reduce="amax", include_self=True).detach()
    safe_top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.zeros(b, n_groups, device=values.device, dtype=values.dtype)
    total = total.index_add(1, idx[0], (values - safe_top.gather(1, idx)).exp())
    return total.log() + safe_top


@dataclass
class PathDistribution:
    """The policy's distribution over a schema's legal paths for a batch.

    Attributes:
        log_prob: ``(batch, N)`` joint log-probability of every legal path (logits of a
            categorical over legal paths; ``exp`` sums to 1 per row).
        anchor_log_prob: ``(batch, T)`` log p(anchor); ``-inf`` for tables that start no path.
        via_log_prob: ``(batch, P)`` log p(via | anchor) of every legal (anchor, via) pair.
        target_log_prob: ``(batch, N)`` log p(target | anchor, via) of every legal path.
        features: ``(batch, hidden)`` pooled question features (the value head's input).
    """

    log_prob: torch.Tensor
    anchor_log_prob: torch.Tensor
    via_log_prob: torch.Tensor
    target_log_prob: torch.Tensor
    features: torch.Tensor

    def entropy(self) -> torch.Tensor:
        """Exact entropy over legal paths, ``(batch,)``, in nats."""
        return -(self.log_prob.exp() * self.log_prob).sum(-1)

    def mode(self) -> torch.Tensor:
        """Most probable legal path of each row (joint decoding), ``(batch,)`` long."""
        return self.log_prob.argmax(-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One path index per row drawn from the joint, ``(batch,)`` long."""
        return torch.multinomial(self.log_prob.exp(), 1, generator=generator).squeeze(-1)

    def log_prob_of(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint log-probability of ``actions`` ``(batch,)`` (path indices), ``(batch,)``."""
        return self.log_prob.gather(1, actions.long().view(-1, 1).to(self.log_prob.device)).squeeze(-1)

    def stats(self) -> torch.Tensor:
        """``(batch, 2)``: the largest log-prob and the entropy, detached (the value head's extra input)."""
        return torch.stack([self.log_prob.max(-1).values, self.entropy()], -1).detach()


class RouterPolicy(nn.Module):
    """Actor-critic over one schema's legal paths: sample, evaluate, value.

    Args:
        model: the router network (schema-independent).
        space: the schema's legal paths. :meth:`set_space` re-targets the policy to another schema.

    ``forward`` / ``evaluate_actions`` / ``predict_values`` take a :class:`RouterBatch` or a
    mapping with ``input_ids`` and ``attention_mask`` (and optionally ``links`` and
    ``mentions``) such as a gym observation; see :meth:`as_batch`.

    From an SFT checkpoint: ``Router.from_pretrained(ckpt).policy`` (:mod:`router.route`), which
    also saves the trained policy back with its schema (``Router.save_pretrained``).
    """

    def __init__(self, model: RouterModel, space: PathSpace):
        super().__init__()
        self.model = model
        self.set_space(space)

    def set_space(self, space: PathSpace) -> None:
        """Route over ``space`` from now on (table texts are tokenized and their frozen part cached)."""
        self.space = space
        ids, mask = self.model.tokenize(list(space.texts), kind="table")
        self._table_ids, self._table_mask = ids, mask
        self._table_lower = self.model.encode_lower(ids, mask)

    # ------------------------------------------------------------------ batches

    def make_batch(self, questions: Sequence[str], with_lower: bool = False) -> RouterBatch:
        """Tokenize ``questions`` and compute their links to this schema's tables.

        Raises:
            DataError: a question is empty or not valid Unicode (``where="question"``, ``line`` =
                its position) or longer than ``max_question_tokens``.
        """
        for i, q in enumerate(questions, 1):
            if not isinstance(q, str) or not q.strip():
                raise DataError("question is empty", where="question", line=i)
            try:
                q.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800" in JSON): the tokenizer would raise TypeError
                raise DataError(f"question is not valid Unicode text (character {exc.start + 1} is a lone surrogate)",
                                where="question", line=i) from None  # fmt: skip
        ids, mask, offsets = self.model.tokenize_questions(list(questions))
        links, mentions = self.space.question_features(list(questions), offsets, len(self.model.config.query_prefix))
        lower = self.model.encode_lower(ids, mask) if with_lower else None
        dev = ids.device
        return RouterBatch(ids, mask, links.to(dev), None if mentions is None else mentions.to(dev), lower)

    def as_batch(self, batch: RouterBatch | Mapping[str, Any]) -> RouterBatch:
        """A :class:`RouterBatch` from itself or from a mapping (numpy arrays or tensors).

        A mapping with ``input_ids`` and ``attention_mask`` only (a gym observation) is decoded
        back to text and re-tokenized, so that ``links`` and ``mentions`` can be computed (exact
        for SentencePiece vocabularies; an English-only WordPiece vocabulary loses ``[UNK]``
        text). A mapping that also has ``links`` and ``mentions`` is used as it is.
        """
        if isinstance(batch, RouterBatch):
            return batch
        dev = self.model.device
        ids = torch.as_tensor(np.asarray(batch["input_ids"]), dtype=torch.long, device=dev)
        mask = torch.as_tensor(np.asarray(batch["attention_mask"]), dtype=torch.long, device=dev)
        if ids.dim() == 1:
            ids, mask = ids.unsqueeze(0), mask.unsqueeze(0)
        width = max(int(mask.sum(1).max()), 1)
        ids, mask = ids[:, :width], mask[:, :width]
        if batch.get("links") is not None and batch.get("mentions") is not None:
            links = torch.as_tensor(np.asarray(batch["links"]), dtype=torch.float32, device=dev)
            mentions = torch.as_tensor(np.asarray(batch["mentions"]), dtype=torch.float32, device=dev)
            if links.dim() == 2:
                links, mentions = links.unsqueeze(0), mentions.unsqueeze(0)
            return RouterBatch(ids, mask, links, mentions[:, :width])
        prefix = self.model.config.query_prefix
        texts = []
        for row, m in zip(ids, mask, strict=True):
            text = self.model.tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=True)
            texts.append(text[len(prefix) :] if prefix and text.startswith(prefix) else text)
        return self.make_batch(texts)

    # ------------------------------------------------------------------ distribution

    def candidates(self) -> CandidateEncoding:
        """This schema's candidate vectors under the current weights (differentiable)."""
        states = self.model.encode_upper(self._table_lower, self._table_mask)
        return self.model.encode_candidates(self.space, states, self._table_mask)

    def distribution(
        self,
        batch: RouterBatch | Mapping[str, Any],
        candidates: CandidateEncoding | None = None,
        with_anchor_prior: bool = False,
    ) -> PathDistribution:
        """The joint distribution over legal paths for ``batch``.

        Args:
            batch: questions (see :meth:`as_batch`).
            candidates: precomputed :meth:`candidates` (only valid while the weights do not change).
            with_anchor_prior: add the fixed anchor and "who" priors (module docstring): True where a router
                routes or is evaluated (:class:`router.route.Router`, the SFT and PPO evaluations),
                False (the default) for what SFT and PPO optimise, so the network learns its
                own anchor evidence.

        Returns:
            :class:`PathDistribution`; ``log_prob`` is ``(batch, n_legal_paths)``.
        """
        b = self.as_batch(batch)
        space = self.space
        lower = b.lower if b.lower is not None else self.model.encode_lower(b.input_ids, b.attention_mask)
        states = self.model.encode_upper(lower, b.attention_mask)
        cand = candidates if candidates is not None else self.candidates()
        scores = self.model.head_scores(space, states, b.attention_mask, b.links, cand, b.mentions)
        dev = scores.anchor.device
        path_anchor = space.path_anchor.to(dev)
        potential = scores.anchor[:, path_anchor] + scores.via[:, space.path_pair.to(dev)] + scores.target
        cfg = self.model.config
        if with_anchor_prior and (cfg.anchor_prior or cfg.who_prior):
            links = b.links.to(dev)
            potential = potential + cfg.anchor_prior * anchor_support(links)[:, path_anchor]
            potential = potential + cfg.who_prior * who_support(links)[:, space.path_target.to(dev)]
        joint = potential.log_softmax(-1)  # (B, N)
        pair = grouped_logsumexp(joint, space.path_pair, space.n_pairs)  # log p(a, v), (B, P)
        anchor = grouped_logsumexp(pair, space.pair_anchor, space.n_tables)  # log p(a), (B, T)
        via = pair - anchor[:, space.pair_anchor.to(dev)]  # log p(v | a)
        target = joint - pair[:, space.path_pair.to(dev)]  # log p(t | a, v)
        return PathDistribution(joint, anchor, via, target, scores.features)

    # ------------------------------------------------------------------ SB3-style API

    def forward(
        self, batch: RouterBatch | Mapping[str, Any], deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample (or, when ``deterministic``, decode) a legal path per question.

        Returns:
            ``(actions, values, log_prob)``, each ``(batch,)``; actions index ``graph.legal_paths``.
        """
        dist = self.distribution(batch)
        actions = dist.mode() if deterministic else dist.sample()
        values = self.model.value(dist.features, dist.stats())
        return actions, values, dist.log_prob_of(actions)

    def evaluate_actions(
        self, batch: RouterBatch | Mapping[str, Any], actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Value, log-probability and entropy of given ``actions`` ``(batch,)``.

        Returns:
            ``(values, log_prob, entropy)``, each ``(batch,)``.

        Raises:
            IndexError: an action outside ``[0, n_legal_paths)``.
        """
        dist = self.distribution(batch)
        actions = torch.as_tensor(actions, device=dist.log_prob.device).long().view(-1)
        if actions.numel() and (int(actions.min()) < 0 or int(actions.max()) >= self.space.n_paths):
            raise IndexError(f"actions must be in [0, {self.space.n_paths}), got {actions.tolist()}")
        values = self.model.value(dist.features, dist.stats())
        return values, dist.log_prob_of(actions), dist.entropy()

    def predict_values(self, batch: RouterBatch | Mapping[str, Any]) -> torch.Tensor:
        """Value estimates ``(batch,)`` (no sampling)."""
        dist = self.distribution(batch)
        return self.model.value(dist.features, dist.stats())

    def actor_parameters(self) -> list[nn.Parameter]:
        """Trainable encoder layers and the anchor / via / target heads."""
        return self.model.actor_parameters()

    def critic_parameters(self) -> list[nn.Parameter]:
        """The value head (disjoint from :meth:`actor_parameters`)."""
        return self.model.critic_parameters()
