"""The router network: a pretrained encoder, candidate-scoring anchor / via / target heads, a value head.

The heads have no fixed output units. Each scores the *candidates of a schema*, encoded from
their own text (:func:`router.text.table_text`), so a router trained on one schema loads with
another and routes there. :class:`PathSpace` indexes a schema graph's legal paths; for a batch
of questions the model computes three potentials (unnormalised scores):

- ``anchor`` ``(batch, n_tables)`` and the table part of ``target``: *late interaction* between
  role-specific projections of every question token and each table's key (a soft maximum over
  tokens), so "orders of **customer** X" can mark Customers as the anchor and Orders as the
  target; plus learned weights on lexical link features (:func:`router.text.link_features`);
- ``via`` ``(batch, n_pairs)``, one per legal (anchor, via) pair: a via option is a tuple of
  tables, encoded as a learned null vector or the mean of its tables' vectors plus a learned
  position vector each, scored against a pooled question query and its members' token
  interactions, plus a question-independent term conditioned on the pair's anchor;
- ``target`` ``(batch, n_paths)``, one per legal path: the table part plus a
  question-independent term conditioned on the path's anchor and via and a hop-count bias.

:mod:`router.policy` sums the three per legal path and normalises over legal paths.

Encoder layers are split in two: the lower ``n_layers - trainable_layers`` layers (and the
embeddings) are frozen, so their output can be computed once and cached
(:meth:`RouterModel.encode_lower`) while the upper layers train (:meth:`RouterModel.encode_upper`).
That is what makes SFT fit in a few minutes on two CPU cores.

Checkpoint layout (:meth:`RouterModel.save_pretrained`)::

    DIR/model.safetensors   what training changed (heads, value head, link weights, the top
                            trainable_layers encoder layers), fp32; every tensor in a full folder
    DIR/config.json         router.checkpoint.RouterCheckpointConfig: model shape, schemas,
                            base_encoder {"name", "sha256"} (null in a full folder), temperature...
    DIR/encoder/            the encoder's Hugging Face config and tokenizer files (no weights)

A slim folder (the default) takes the frozen encoder weights from its base encoder, named by
the sha256 of its weights files (:func:`data_pipeline.encoders.weights_sha256`) and refused when that
differs; ``python -m router.export`` writes a full standalone folder. Version-3 folders hold
every weight and still load.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from core.errors import CheckpointError, ConfigError, DataError, Route2SQLError, first_line
from core.graph import JoinPath, SchemaGraph
from core.io import atomic_directory, write_json
from core.schema import Table
from core.values import ValueIndex
from data_pipeline.encoders import DEFAULT_ENCODER, load_encoder, load_encoder_model, pool, weights_sha256
from router.checkpoint import (
    CHECKPOINT_VERSION,
    CONFIG_FILE,
    ENCODER_DIR,
    WEIGHTS_FILE,
    BaseEncoder,
    RouterCheckpointConfig,
    RouterModelConfig,
)
from data_pipeline.mentions import mention_spans
from router.text import LINK_FEATURES, link_features, table_text

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

HEADS = ("anchor", "via", "target")
MAX_HOP_BIAS = 8
"""Paths with more joins share the last learned hop-count bias."""


class PathSpace:
    """The legal paths of a schema graph as index arrays the heads score.

    Args:
        graph: the schema graph.
        values: the database's value index (:mod:`core.values`), or None to route on
            table and column words alone.

    Attributes:
        graph: the schema graph.
        values: the value index (or None).
        tables: the schema's tables (``T`` of them), in schema order.
        vias: ``graph.via_options`` (``V``), null first.
        paths: ``graph.legal_paths`` (``N``); a path's index is its action id.
        pairs: the distinct legal (anchor index, via index) prefixes (``P``).
        path_anchor, path_via, path_target, path_pair: ``(N,)`` long tensors.
        pair_anchor, pair_via: ``(P,)`` long tensors.
        via_tables: ``(V, max_len)`` long, table indices of each via, padded with -1.
        anchor_mask: ``(T,)`` bool, tables that start a legal path.
        texts: ``table_text`` of each table.
    """

    def __init__(self, graph: SchemaGraph, values: ValueIndex | None = None):
        self.graph = graph
        self.values = values
        self.schema = graph.schema
        self.tables: tuple[Table, ...] = graph.schema.tables
        self.table_index = {t.name: i for i, t in enumerate(self.tables)}
        self.vias = graph.via_options
        self.via_index = {v: i for i, v in enumerate(self.vias)}
        self.paths = graph.legal_paths
        pairs: dict[tuple[int, int], int] = {}
        pa, pv, pt, pp = [], [], [], []
        for p in self.paths:
            a, v, t = self.table_index[p.anchor], self.via_index[p.via], self.table_index[p.target]
            pp.append(pairs.setdefault((a, v), len(pairs)))
            pa.append(a)
            pv.append(v)
            pt.append(t)
        self.pairs = tuple(pairs)
        self.path_anchor = torch.tensor(pa, dtype=torch.long)
        self.path_via = torch.tensor(pv, dtype=torch.long)
        self.path_target = torch.tensor(pt, dtype=torch.long)
        self.path_pair = torch.tensor(pp, dtype=torch.long)
        self.pair_anchor = torch.tensor([a for a, _ in self.pairs], dtype=torch.long)
        self.pair_via = torch.tensor([v for _, v in self.pairs], dtype=torch.long)
        width = max((len(v) for v in self.vias), default=0) or 1
        vt = torch.full((len(self.vias), width), -1, dtype=torch.long)
        for i, v in enumerate(self.vias):
            for j, name in enumerate(v):
                vt[i, j] = self.table_index[name]
        self.via_tables = vt
        self.anchor_mask = torch.zeros(len(self.tables), dtype=torch.bool)
        self.anchor_mask[self.path_anchor] = True
        self.texts = tuple(table_text(t) for t in self.tables)

    @property
    def n_tables(self) -> int:
        return len(self.tables)

    @property
    def n_paths(self) -> int:
        return len(self.paths)

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    @property
    def fingerprint(self) -> str:
        """The schema's fingerprint (:meth:`core.schema.Schema.fingerprint`)."""
        return self.schema.fingerprint()

    def index(self, path: JoinPath, *, where: str | None = None, line: int | None = None) -> int:
        """Action id of ``path``. Raises DataError (unknown table or illegal path) naming ``where``/``line``."""
        self.graph.check_path(path, where=where, line=line)
        return self.graph.path_index[path]

    def question_features(
        self, questions: Sequence[str], offsets: torch.Tensor | None = None, prefix_len: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Lexical links of each question to this schema's tables.

        Args:
            questions: the questions.
            offsets: ``(batch, seq, 2)`` character spans of their tokens in ``prefix + question``
                (a fast tokenizer's ``offset_mapping``); None skips ``mentions``.
            prefix_len: length of the prefix put before each question.

        Returns:
            ``links`` ``(batch, T, n_link_features)`` (:func:`router.text.link_features`) and
            ``mentions`` ``(batch, seq, T)``: 1 where a token lies in a span that names the table
            (:func:`data_pipeline.mentions.mention_spans`), else 0; None without ``offsets``.
        """
        n = len(questions)
        links = np.zeros((n, self.n_tables, len(LINK_FEATURES)), dtype=np.float32)
        mentions = None if offsets is None else torch.zeros(n, offsets.shape[1], self.n_tables)
        for b, q in enumerate(questions):
            spans = mention_spans(q, self.tables)
            links[b] = link_features(q, self.tables, spans, self.values)
            if mentions is None or offsets is None:
                continue
            start = (offsets[b, :, 0] - prefix_len).tolist()
            end = (offsets[b, :, 1] - prefix_len).tolist()
            for t, table_spans in enumerate(spans):
                for a, z in table_spans:
                    for i, (s0, e0) in enumerate(zip(start, end, strict=True)):
                        if e0 > s0 and e0 > 0 and s0 < z and e0 > a:
                            mentions[b, i, t] = 1.0
        return torch.from_numpy(links), mentions


@dataclass
class CandidateEncoding:
    """Per-head candidate vectors of one schema (recomputed whenever the encoder changes).

    Attributes:
        anchor: ``(T, d)`` anchor keys.
        target: ``(T, d)`` target keys.
        via: ``(V, d)`` via option vectors (row 0 is the null via).
        via_prior: ``(P,)`` question-independent score of each (anchor, via) pair.
        target_prior: ``(N,)`` question-independent score of each path's target given its
            prefix, plus a learned bias per hop count.
        via_members: ``(T, d)`` keys of tables as members of a via.
    """

    anchor: torch.Tensor
    target: torch.Tensor
    via: torch.Tensor
    via_prior: torch.Tensor
    target_prior: torch.Tensor
    via_members: torch.Tensor


@dataclass
class HeadScores:
    """Unnormalised head scores (potentials) for a batch; the policy sums them per legal path.

    Attributes:
        anchor: ``(batch, T)``.
        via: ``(batch, P)``, one per legal (anchor, via) pair.
        target: ``(batch, N)``, one per legal path.
        features: ``(batch, hidden)`` pooled question vector (what the value head reads, detached).
    """

    anchor: torch.Tensor
    via: torch.Tensor
    target: torch.Tensor
    features: torch.Tensor


def _mlp(n_in: int, n_out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, n_out), nn.GELU(), nn.Dropout(dropout), nn.Linear(n_out, n_out))


def _encoder_layers(model: nn.Module) -> nn.ModuleList | None:
    """The transformer layer list of a BERT-like encoder (``model.encoder.layer``), else None."""
    enc = getattr(model, "encoder", None)
    layers = getattr(enc, "layer", None)
    if isinstance(layers, nn.ModuleList) and hasattr(model, "embeddings"):
        return layers
    return None


class RouterModel(nn.Module):
    """Encoder + anchor / via / target candidate-scoring heads + value head.

    Args:
        config: shapes; ``hidden_size``/``num_layers`` must match ``encoder``.
        encoder: a Hugging Face encoder (``BertModel``-like for partial freezing).
        tokenizer: its tokenizer.

    Raises:
        ConfigError: ``trainable_layers > 0`` with an encoder whose layers cannot be split
            (one without ``model.embeddings`` and ``model.encoder.layer``).
    """

    def __init__(self, config: RouterModelConfig, encoder: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        super().__init__()
        self.config = config
        self.encoder = encoder
        self.tokenizer = tokenizer
        self._layers = _encoder_layers(encoder)
        n_layers = config.num_layers
        if self._layers is None and config.trainable_layers != 0:
            raise ConfigError(
                f"encoder {type(encoder).__name__} has no encoder.layer list to split; use trainable_layers 0",
                where="trainable_layers",
            )
        self.split = n_layers - config.trainable_layers
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        if self._layers is not None:
            for layer in self._layers[self.split :]:
                for p in layer.parameters():
                    p.requires_grad_(True)

        h, d, drop = config.hidden_size, config.head_dim, config.dropout
        self.token_norm = nn.LayerNorm(h)
        self.token_query = nn.ModuleDict({name: nn.Linear(h, d) for name in HEADS})
        self.mention_role = nn.ModuleDict({name: nn.Linear(h, 1) for name in HEADS})
        self.mention_weight = nn.Parameter(torch.full((len(HEADS),), 2.0))
        self.token_dropout = nn.Dropout(drop)
        self.via_pool = nn.Parameter(torch.zeros(h))
        self.via_query = _mlp(2 * h, d, drop)
        self.key_norm = nn.LayerNorm(h)
        self.key = nn.ModuleDict({name: nn.Linear(h, d) for name in HEADS})
        self.null_via = nn.Parameter(torch.randn(d) * 0.02)
        self.via_position = nn.Parameter(torch.randn(config.max_via_len, d) * 0.02)
        self.via_cond = nn.Linear(d, d, bias=False)
        self.target_cond_anchor = nn.Linear(d, d, bias=False)
        self.target_cond_via = nn.Linear(d, d, bias=False)
        self.hop_bias = nn.Parameter(torch.zeros(MAX_HOP_BIAS + 1))
        self.link = nn.ModuleDict({name: nn.Linear(config.n_link_features, 1) for name in HEADS})
        for lin in self.link.values():  # no prior on which link decides which head: learnt from 0
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.null_via_bias = nn.Parameter(torch.zeros(()))
        self.value_head = nn.Sequential(nn.Linear(h + 2, 256), nn.GELU(), nn.Linear(256, 1))
        self._base: BaseEncoder | None = None
        self.train(False)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_encoder(cls, encoder: str = DEFAULT_ENCODER, **overrides: Any) -> RouterModel:
        """A fresh router on the pretrained ``encoder`` (heads randomly initialised).

        ``overrides`` set :class:`RouterModelConfig` fields (``trainable_layers``, ``head_dim``...).

        Raises:
            ConfigError, DownloadError, CheckpointError: as :func:`data_pipeline.encoders.load_encoder`.
        """
        model, tokenizer, spec = load_encoder(encoder)
        cfg = RouterModelConfig(
            encoder=encoder,
            hidden_size=int(model.config.hidden_size),
            num_layers=int(model.config.num_hidden_layers),
            query_prefix=spec.query_prefix,
            passage_prefix=spec.passage_prefix,
            pooling=spec.pooling,
            **overrides,
        )
        router = cls(cfg, model, tokenizer)
        router._base = BaseEncoder(encoder, weights_sha256(str(spec.path))[1])
        return router

    def train(self, mode: bool = True) -> RouterModel:
        """Like ``nn.Module.train``, but frozen encoder parts always stay in eval mode (no dropout)."""
        super().train(mode)
        if self._layers is not None:
            self.encoder.embeddings.eval()
            for layer in self._layers[: self.split]:
                layer.eval()
        else:
            self.encoder.eval()
        return self

    def actor_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters of the encoder and the three heads (not the value head)."""
        critic = {id(p) for p in self.value_head.parameters()}
        return [p for p in self.parameters() if p.requires_grad and id(p) not in critic]

    def critic_parameters(self) -> list[nn.Parameter]:
        """Parameters of the value head (it reads detached features, so these are all the critic has)."""
        return list(self.value_head.parameters())

    # ------------------------------------------------------------------ encoding

    @property
    def device(self) -> torch.device:
        return self.null_via.device

    def tokenize(self, texts: Sequence[str], kind: str = "question") -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and attention mask ``(n, seq)`` for questions or table texts (with the encoder's prefix).

        Questions are never cut: one longer than ``max_question_tokens`` raises DataError
        (``where="question"``, ``line`` = its 1-based position). Table texts are cut at
        ``max_table_tokens``.
        """
        if kind == "question":
            prefix, limit = self.config.query_prefix, self.config.max_question_tokens
        elif kind == "table":
            prefix, limit = self.config.passage_prefix, self.config.max_table_tokens
        else:
            raise ValueError(f"kind must be 'question' or 'table', got {kind!r}")
        batch = self.tokenizer(
            [prefix + t for t in texts], padding=True, truncation=kind == "table",
            max_length=limit if kind == "table" else None,
            return_tensors="pt", return_token_type_ids=False,
        )  # fmt: skip
        ids, mask = batch["input_ids"], batch["attention_mask"]
        if kind == "question" and ids.shape[1] > limit:
            lengths = mask.sum(1)
            i = int(torch.nonzero(lengths > limit)[0, 0])
            raise DataError(
                f"question has {int(lengths[i])} tokens, more than the router's limit of {limit}; shorten it",
                where="question",
                line=i + 1,
            )
        return ids.to(self.device), mask.to(self.device)

    def tokenize_questions(self, questions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:meth:`tokenize` for questions plus each token's character span ``(n, seq, 2)``
        in ``query_prefix + question`` (None for a tokenizer without offsets)."""
        ids, mask = self.tokenize(questions, kind="question")
        if not getattr(self.tokenizer, "is_fast", False):
            return ids, mask, None
        enc = self.tokenizer(
            [self.config.query_prefix + q for q in questions], padding=True, return_offsets_mapping=True,
            return_tensors="pt", return_token_type_ids=False,
        )  # fmt: skip
        return ids, mask, enc["offset_mapping"]

    def encode_lower(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Token states after the frozen part, ``(batch, seq, hidden)``, no gradient (cacheable).

        With ``trainable_layers == 0`` this is the encoder's final output.
        """
        with torch.no_grad():
            if self._layers is None:
                return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            h = self.encoder.embeddings(input_ids=input_ids)
            mask4 = self._mask(h, attention_mask)
            for layer in self._layers[: self.split]:
                h = layer(h, mask4)
            return h

    def encode_upper(self, lower: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final token states ``(batch, seq, hidden)`` from :meth:`encode_lower`'s output (differentiable)."""
        if self._layers is None:
            return lower
        h = lower
        mask4 = self._mask(h, attention_mask)
        for layer in self._layers[self.split :]:
            h = layer(h, mask4)
        return h

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final token states ``(batch, seq, hidden)``: :meth:`encode_upper` of :meth:`encode_lower`."""
        return self.encode_upper(self.encode_lower(input_ids, attention_mask), attention_mask)

    def _mask(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor | None:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=self.encoder.config, inputs_embeds=h, attention_mask=attention_mask)

    # ------------------------------------------------------------------ heads

    def encode_candidates(
        self, space: PathSpace, table_states: torch.Tensor, table_mask: torch.Tensor
    ) -> CandidateEncoding:
        """Candidate vectors of ``space`` from its tables' final token states ``(T, seq, hidden)``."""
        dev = table_states.device
        e = self.key_norm(pool(table_states, table_mask, self.config.pooling))  # (T, H)
        k_anchor = self.key["anchor"](e)
        k_target = self.key["target"](e)
        k_via = self.key["via"](e)
        via_tables = space.via_tables.to(dev)
        valid = via_tables >= 0  # (V, L)
        pos = self.via_position[torch.arange(via_tables.shape[1], device=dev).clamp(max=self.config.max_via_len - 1)]
        members = k_via[via_tables.clamp(min=0)] + pos  # (V, L, d)
        members = members * valid.unsqueeze(-1)
        count = valid.sum(1, keepdim=True)
        via = torch.where(count > 0, members.sum(1) / count.clamp(min=1), self.null_via.expand(len(space.vias), -1))
        scale = 1.0 / math.sqrt(self.config.head_dim)
        pair_anchor, pair_via = space.pair_anchor.to(dev), space.pair_via.to(dev)
        via_prior = (self.via_cond(k_anchor[pair_anchor]) * via[pair_via]).sum(-1) * scale
        path_anchor, path_via = space.path_anchor.to(dev), space.path_via.to(dev)
        path_target = space.path_target.to(dev)
        cond = self.target_cond_anchor(k_anchor[path_anchor]) + self.target_cond_via(via[path_via])
        hops = (via_tables[path_via] >= 0).sum(1) + (path_anchor != path_target).long()
        target_prior = (cond * k_target[path_target]).sum(-1) * scale + self.hop_bias[hops.clamp(max=MAX_HOP_BIAS)]
        return CandidateEncoding(k_anchor, k_target, via, via_prior, target_prior, k_via)

    def head_scores(
        self,
        space: PathSpace,
        question_states: torch.Tensor,
        question_mask: torch.Tensor,
        links: torch.Tensor,
        candidates: CandidateEncoding,
        mentions: torch.Tensor | None = None,
    ) -> HeadScores:
        """Anchor / via / target scores for a batch of questions.

        Args:
            space: the schema's legal paths.
            question_states: ``(batch, seq, hidden)`` final token states.
            question_mask: ``(batch, seq)``.
            links: ``(batch, T, n_link_features)`` from :meth:`PathSpace.question_features`.
            candidates: :meth:`encode_candidates` of the same ``space``.
            mentions: ``(batch, seq, T)`` token-names-table indicators (None: no token names a table).

        Returns:
            :class:`HeadScores` with ``anchor (batch, T)``, ``via (batch, P)``, ``target (batch, N)``.
        """
        dev = question_states.device
        links = links.to(dev)
        mask = question_mask.unsqueeze(-1).to(question_states.dtype)
        mean = (question_states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, H)
        scale = 1.0 / math.sqrt(self.config.head_dim)
        tokens = self.token_dropout(self.token_norm(question_states))
        pad = question_mask.unsqueeze(-1) == 0  # (B, S, 1)

        ment = mentions.to(dev, question_states.dtype) if mentions is not None else None

        def interact(head: str, keys: torch.Tensor) -> torch.Tensor:
            # late interaction: soft maximum over question tokens of token-query . candidate-key,
            # plus, where a token names the table, a weight and the token's contextual role score
            sim = self.token_query[head](tokens) @ keys.T * scale  # (B, S, T)
            if ment is not None:
                i = HEADS.index(head)
                sim = sim + ment * (self.mention_weight[i] + self.mention_role[head](tokens))
            return sim.masked_fill(pad, float("-inf")).logsumexp(1)

        anchor = interact("anchor", candidates.anchor) + self.link["anchor"](links).squeeze(-1)
        target_all = interact("target", candidates.target) + self.link["target"](links).squeeze(-1)
        target = target_all[:, space.path_target.to(dev)] + candidates.target_prior

        via_tables = space.via_tables.to(dev)
        valid = (via_tables >= 0).to(links.dtype)  # (V, L)
        count = valid.sum(1).clamp(min=1)
        is_null = (valid.sum(1) == 0).to(links.dtype)  # (V,)
        member_links = links[:, via_tables.clamp(min=0)]  # (B, V, L, F)
        via_feat = (member_links * valid[None, :, :, None]).sum(2) / count[None, :, None]  # (B, V, F)
        member_sim = interact("via", candidates.via_members)[:, via_tables.clamp(min=0)]  # (B, V, L)
        member_sim = (member_sim * valid).sum(2) / count
        att = (question_states @ self.via_pool).masked_fill(question_mask == 0, float("-inf")).softmax(-1)
        pooled = torch.einsum("bs,bsh->bh", att, question_states)
        q_via = self.via_query(torch.cat([pooled, mean], -1))
        member = member_sim + self.link["via"](via_feat).squeeze(-1)
        via_all = q_via @ candidates.via.T * scale + member * (1 - is_null)
        via_all = via_all + self.null_via_bias * is_null
        via = via_all[:, space.pair_via.to(dev)] + candidates.via_prior
        return HeadScores(anchor=anchor, via=via, target=target, features=mean)

    def value(self, features: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
        """Value estimate ``(batch,)`` from pooled question features ``(batch, hidden)`` and
        distribution statistics ``(batch, 2)``; both are detached here, so the critic's loss
        never reaches the encoder or the heads."""
        return self.value_head(torch.cat([features.detach(), stats.detach()], -1)).squeeze(-1)

    # ------------------------------------------------------------------ persistence

    def trained_keys(self) -> list[str]:
        """``state_dict`` keys training can change: every head, the value head, the link weights and
        the top ``trainable_layers`` encoder layers (the rest is the frozen pretrained encoder)."""
        encoder = {id(t) for t in (*self.encoder.parameters(), *self.encoder.buffers())}
        trained = set()
        if self._layers is not None:
            for layer in self._layers[self.split :]:
                trained |= {id(t) for t in (*layer.parameters(), *layer.buffers())}
        keep_vars = self.state_dict(keep_vars=True)
        # ``_layers.*`` are second names of the encoder's own layers (the list is a submodule too)
        return [k for k, v in keep_vars.items()
                if not k.startswith("_layers.") and (id(v) not in encoder or id(v) in trained)]  # fmt: skip

    def base_encoder(self) -> BaseEncoder | None:
        """The pretrained encoder this network's frozen part equals, named by its weights' sha256;
        None when that cannot be shown (the encoder is gone, or its weights differ from the frozen part).

        A network built by :meth:`from_encoder` or loaded from a slim checkpoint knows it; for one
        loaded from a full checkpoint the encoder's weights are read once and compared.
        """
        if self._base is not None:
            return self._base
        try:
            path, digest = weights_sha256(self.config.encoder)
            base = load_encoder_model(path).state_dict()
        except Route2SQLError:
            return None
        own = self.encoder.state_dict()
        trained = set(self.trained_keys())
        frozen = [k for k in own if f"encoder.{k}" not in trained]
        for k in frozen:
            if k not in base or base[k].shape != own[k].shape or not torch.equal(base[k], own[k]):
                return None
        self._base = BaseEncoder(self.config.encoder, digest)
        return self._base

    def save_pretrained(
        self,
        out_dir: str | Path,
        checkpoint: RouterCheckpointConfig,
        files: dict[str, Any] | None = None,
        *,
        full: bool = False,
        copies: Sequence[Path] = (),
    ) -> Path:
        """Write the checkpoint (layout in the module docstring) atomically; returns ``out_dir``.

        Args:
            out_dir: the folder (replaced in one rename).
            checkpoint: the metadata (:class:`router.checkpoint.RouterCheckpointConfig`); its
                ``model`` becomes this network's config, ``version`` the current one, and it writes
                the schema snapshots and value index.
            files: extra file names mapped to JSON objects written beside it.
            copies: other files copied into the folder as they are (before the rename, so a
                failed copy leaves the old folder in place).
            full: write every weight (a standalone folder) instead of only :meth:`trained_keys`
                on the base encoder; a network whose base encoder cannot be shown
                (:meth:`base_encoder` is None) is always written full.
        """
        from safetensors.torch import save_file

        base = None if full else self.base_encoder()
        keys = set(self.trained_keys()) if base is not None else None
        with atomic_directory(out_dir) as tmp:
            state = {k: v.detach().contiguous().clone() for k, v in self.state_dict().items() if keys is None or k in keys}
            save_file(state, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
            enc_dir = tmp / ENCODER_DIR
            enc_dir.mkdir()
            self.encoder.config.save_pretrained(enc_dir)
            self.tokenizer.save_pretrained(enc_dir)
            for name, obj in (files or {}).items():
                write_json(tmp / name, obj)
            for src in copies:
                shutil.copy2(src, tmp / Path(src).name)
            replace(checkpoint, model=self.config, version=CHECKPOINT_VERSION, base_encoder=base).save(tmp)
        return Path(out_dir)

    @classmethod
    def from_pretrained(cls, ckpt_dir: str | Path) -> tuple[RouterModel, RouterCheckpointConfig]:
        """Load a checkpoint written by :meth:`save_pretrained` (or a version-3 full one), offline.

        A slim checkpoint takes its frozen weights from its base encoder (built in the cache like
        any built-in encoder), after checking that encoder's weights sha256.

        Returns:
            ``(model, checkpoint)``: the model in eval mode and its metadata (``config.json``).

        Raises:
            CheckpointError: the folder, ``config.json``, the weights or the encoder files are
                missing or do not fit together, or the base encoder is missing or its weights
                hash differently (one line naming the file or the encoder).
        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        d = Path(ckpt_dir)
        checkpoint = RouterCheckpointConfig.load(d)
        config = checkpoint.model
        base = checkpoint.base_encoder
        weights = d / WEIGHTS_FILE
        if not weights.is_file():
            raise CheckpointError(f"missing {WEIGHTS_FILE}", where=d)
        try:
            state = load_file(str(weights))
        except (OSError, SafetensorError) as exc:  # a truncated or empty file fails on its header
            raise CheckpointError(f"not a readable safetensors file ({exc}); retrain or copy it again", where=weights) from exc
        bad = next((k for k, t in state.items() if t.is_floating_point() and not torch.isfinite(t).all()), None)
        if bad is not None:  # a router with NaN weights routed every question with confidence nan
            raise CheckpointError(f"weight {bad} holds NaN or infinite values; retrain or copy it again", where=weights)
        if not (d / ENCODER_DIR).is_dir():
            raise CheckpointError(f"missing the {ENCODER_DIR}/ folder (the encoder's config and tokenizer)", where=d)
        try:
            if base is not None:
                encoder = _base_encoder_model(base, d)
            else:
                enc_config = AutoConfig.from_pretrained(d / ENCODER_DIR)
                kwargs = {"add_pooling_layer": False} if "add_pooling_layer" in _init_params(enc_config) else {}
                with _skip_init():  # every weight comes from the checkpoint: random init is wasted time
                    encoder = AutoModel.from_config(enc_config, **kwargs)
                if getattr(encoder, "pooler", None) is not None:
                    encoder.pooler = None
            tokenizer = _load_tokenizer(d / ENCODER_DIR, AutoTokenizer)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on a broken tokenizer.json
            raise CheckpointError(f"cannot rebuild the encoder ({first_line(exc)})", where=d / ENCODER_DIR) from exc
        model = cls(config, encoder, tokenizer)
        try:
            missing, unexpected = model.load_state_dict(state, strict=base is None)
        except (OSError, RuntimeError) as exc:  # torch lists every mismatch, one per line: the first two
            first = "; ".join(ln.strip() for ln in str(exc).splitlines()[1:3] if ln.strip()) or str(exc)
            raise CheckpointError(f"weights do not fit the model ({first[:300]})", where=weights) from exc
        lacking = sorted(set(missing) & set(model.trained_keys()))
        if unexpected or lacking:
            bad = ", ".join((unexpected or lacking)[:3])
            raise CheckpointError(f"weights do not fit the model ({'unexpected' if unexpected else 'missing'} {bad})", where=weights)
        model._base = base
        model.train(False)
        return model, checkpoint


_TOKENIZER_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
                   "model_max_length", "padding_side", "truncation_side")


def check_question_lengths(model: RouterModel, questions: Sequence[str], where: str | Path,
                           lines: Sequence[int], batch_size: int = 64) -> None:
    """Refuse a question the router cannot read whole before any work starts, naming its file and line.

    Args:
        model: the router (its tokenizer and ``max_question_tokens``).
        questions: the questions, in file order.
        where: the file they were read from.
        lines: the 1-based line of each question in ``where`` (``len(lines) == len(questions)``).

    Raises:
        DataError: a question longer than ``model.config.max_question_tokens`` tokens.
    """
    for start in range(0, len(questions), batch_size):
        try:
            model.tokenize(list(questions[start : start + batch_size]), kind="question")
        except DataError as exc:
            k = start + (exc.line or 1) - 1
            raise DataError(exc.message, where=where, line=lines[k] if k < len(lines) else None) from exc


def _load_tokenizer(folder: Path, auto: Any) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer: straight from ``tokenizer.json`` when there is one (0.5 s for
    multilingual-e5-small's 17 MB file, where ``AutoTokenizer`` first parses it in Python: 2.1 s),
    with the special tokens and limits of ``tokenizer_config.json``; else ``auto.from_pretrained``."""
    from transformers import PreTrainedTokenizerFast

    file, config = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not (file.is_file() and config.is_file()):
        return auto.from_pretrained(folder)
    settings = json.loads(config.read_text(encoding="utf-8"))
    if settings.get("added_tokens_decoder") or settings.get("extra_special_tokens"):
        return auto.from_pretrained(folder)  # extra special tokens: let transformers restore them
    return PreTrainedTokenizerFast(tokenizer_file=str(file), **{k: settings[k] for k in _TOKENIZER_KEYS if k in settings})


def _base_encoder_model(base: BaseEncoder, ckpt_dir: Path) -> PreTrainedModel:
    """The pretrained encoder of a slim checkpoint, its weights' sha256 checked.

    Raises:
        CheckpointError: one line naming the encoder when it cannot be had or hashes differently.
    """
    try:
        path, digest = weights_sha256(base.name)
    except Route2SQLError as exc:
        raise CheckpointError(f"the router's base encoder {base.name!r} is not available ({exc})", where=ckpt_dir) from exc
    if digest != base.sha256:
        raise CheckpointError(
            f"base encoder {base.name!r} ({path}) has weights sha256 {digest[:16]}..., the router was trained on "
            f"{base.sha256[:16]}...; use that encoder, or a full folder from python -m router.export",
            where=ckpt_dir / CONFIG_FILE,
        )
    return load_encoder_model(path)


def _skip_init() -> Any:
    """A context in which Hugging Face models skip weight initialisation (a no-op where unsupported)."""
    import contextlib

    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        return contextlib.nullcontext()
    return no_init_weights()


def _init_params(enc_config: Any) -> set[str]:
    import inspect

    from transformers import MODEL_MAPPING

    try:
        return set(inspect.signature(MODEL_MAPPING[type(enc_config)].__init__).parameters)
    except KeyError:
        return set()
