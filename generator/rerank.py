"""Rerank the router's candidate routes with a pretrained causal language model.

The router reads a question with a small encoder trained on generated questions. On questions
people write its top route is often wrong while the right one is still among its few best (the
demo's Northwind router: right first on 58 of 90 human-written questions, among its five best on
82). A causal LM that has read far more language than the templates scores each of the router's
``top_k`` candidates in two directions, in a prompt that lists the schema and the values the
question mentions (value linking):

- forward, ``log p(route | question)``: the route written as ``A -> B -> C`` after the question;
- channel, ``log p(question | route)``: the question after the route, which penalises a route
  that leaves the question's words unexplained (the noisy channel).

The candidates are ranked by (Yee, Ng and Auli, "Simple and Effective Noisy Channel Modeling for
Neural Machine Translation", EMNLP 2019, eq. 2, with the router as the direct model)::

    score(route) = log p_router(route) + forward_weight * forward + channel_weight * channel

Both log-probs are sums over tokens, read off one forward pass per direction: the schema part of
the prompt is encoded once (its KV cache is shared by every question) and the candidates of one
question go through as one batch.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from core.errors import ConfigError
from core.graph import JoinPath
from core.samples import Sample
from core.schema import Schema
from core.sqlite import sql_ident
from generator.logprobs import selective_log_softmax
from generator.models import QWEN_CODER_GENERATOR, ModelConfig, load_generator
from generator.prompt import render_compact_schema
from generator.sampling import cache_kwarg

INSTRUCTION = (
    "-- Each question with the route of the SQL query that answers it. The route starts at the table "
    "that holds the value the question names (or, when it names none, the table it is about), "
    "follows foreign keys, and ends at the table whose rows or columns answer the question."
)


@dataclass
class RerankConfig:
    """How the candidate routes are rescored (defaults chosen on the development questions)."""

    model: str = QWEN_CODER_GENERATOR
    """Causal LM that scores the routes: Qwen2.5-Coder-1.5B-Instruct, SmolLM2-135M-Instruct or a local HF model directory."""
    top_k: int = 10
    """How many of the router's best routes are rescored (the time per question grows with it)."""
    forward_weight: float = 0.5
    """Weight of log p(route | question) (summed over the route's tokens)."""
    channel_weight: float = 2.0
    """Weight of log p(question | route) (summed over the question's tokens)."""
    n_examples: int = 6
    """Example questions with their routes shown in the prompt (taken from the training questions when given; 0: none)."""
    max_values: int = 3
    """Linked values shown with each question."""
    describe: bool = True
    """Show the table and column descriptions of the data set's sidecar in the prompt's schema (helps where names are abbreviations; a schema without descriptions is listed by its names alone)."""
    temperature: float = 2.7
    """The reranked route's confidence is softmax(combined score / temperature) over the rescored candidates (python -m evaluation.rerank --grid fits it on questions with gold routes)."""
    dtype: str = "float32"
    """Weight dtype of the scoring model (float32 is the fastest on most CPUs)."""

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ConfigError(f"must be at least 1, got {self.top_k}", where="--rerank.top-k")
        for name in ("forward_weight", "channel_weight"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ConfigError(f"must be a finite number >= 0, got {v}", where=f"--rerank.{name.replace('_', '-')}")
        if not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ConfigError(f"must be a finite number > 0, got {self.temperature}", where="--rerank.temperature")
        if self.n_examples < 0:
            raise ConfigError(f"must be >= 0, got {self.n_examples}", where="--rerank.n-examples")
        if self.max_values < 0:
            raise ConfigError(f"must be >= 0, got {self.max_values}", where="--rerank.max-values")


@dataclass(frozen=True)
class CandidateScore:
    """One candidate route of one question, with its three log-probs (nats)."""

    path: JoinPath
    router_logp: float
    forward_logp: float
    channel_logp: float

    def total(self, forward_weight: float, channel_weight: float) -> float:
        """``router_logp + forward_weight * forward_logp + channel_weight * channel_logp``."""
        return self.router_logp + forward_weight * self.forward_logp + channel_weight * self.channel_logp


@dataclass(frozen=True)
class Reranked:
    """The reranked answer for one question.

    Attributes:
        route: the router's :class:`router.route.RoutedPath` with ``path``, ``skeleton`` and
            ``top_k`` (best first by the combined score) replaced; ``confidence``,
            ``top_k_confidence`` and ``uncertain`` are the reranked confidences
            (:func:`confidences`, ``RerankConfig.temperature``), ``prob`` is the router's own
            probability of the chosen path.
        candidates: every rescored candidate, in the router's order.
        changed: the chosen path is not the router's first.
    """

    route: Any
    candidates: tuple[CandidateScore, ...]
    changed: bool


def rank(scores: Sequence[CandidateScore], forward_weight: float, channel_weight: float) -> list[int]:
    """Indices of ``scores`` from the highest combined score down; ties keep the router's order."""
    return sorted(range(len(scores)), key=lambda j: -scores[j].total(forward_weight, channel_weight))


def confidences(scores: Sequence[CandidateScore], forward_weight: float, channel_weight: float,
                temperature: float) -> list[float]:
    """``softmax(total / temperature)`` over ``scores`` (same order; sums to 1): the reranked
    confidence of each candidate. The temperature is fitted like the router's own (Guo et al.,
    ICML 2017), by :func:`router.calibration.fit_confidence_temperature`."""
    totals = torch.tensor([c.total(forward_weight, channel_weight) for c in scores], dtype=torch.float64)
    return torch.softmax(totals / temperature, dim=0).tolist()


def route_text(path: JoinPath) -> str:
    """The route as the prompt writes it: ``"Products -> Order Details -> Orders"``."""
    return " -> ".join(path.tables)


def render_described_schema(schema: Schema) -> str:
    """:func:`generator.prompt.render_compact_schema` with each table's description on a comment
    line above it and each column's description in brackets after its name.

    >>> from core.schema import Column, ForeignKey, Schema, Table
    >>> s = Schema("s", (Table("hz", (Column("hz_id"), Column("hzxm", description="patient name")), description="patients"),
    ...                  Table("gh", (Column("gh_id"), Column("hz_id")))), (ForeignKey("gh", "hz_id", "hz", "hz_id"),))
    >>> print(render_described_schema(s))
    -- hz: patients
    hz(hz_id, hzxm [patient name])
    gh(gh_id, hz_id)
    Foreign keys: gh.hz_id -> hz.hz_id
    """
    lines = []
    for t in schema.tables:
        if t.description:
            lines.append(f"-- {t.name}: {t.description}")
        cols = ", ".join(sql_ident(c.name) + (f" [{c.description}]" if c.description else "") for c in t.columns)
        lines.append(f"{sql_ident(t.name)}({cols})")
    compact = render_compact_schema(schema).splitlines()
    if compact and compact[-1].startswith("Foreign keys:"):
        lines.append(compact[-1])
    return "\n".join(lines)


def pick_examples(samples: Sequence[Sample], n: int, seed: int = 0) -> list[Sample]:
    """Up to ``n`` training questions for the prompt, chosen to show different routes.

    Walks hop counts 0, 1, 2, 3 (then again) alternating English and Chinese, and takes the first
    question of that kind, in an order shuffled with ``seed``, whose anchor no earlier example had.
    """
    if n <= 0:
        return []
    samples = list(samples)
    random.Random(seed).shuffle(samples)
    kinds = [(0, "en"), (1, "zh"), (2, "en"), (3, "zh"), (1, "en"), (2, "zh")]
    out: list[Sample] = []
    anchors: set[str] = set()
    for hops, lang in (kinds * ((n + len(kinds) - 1) // len(kinds)))[:n]:
        for s in samples:
            if s.path.hops == hops and s.language == lang and s.path.anchor not in anchors and s not in out:
                out.append(s)
                anchors.add(s.path.anchor)
                break
    return out


class RouteReranker:
    """Rescores a router's candidate routes with a causal LM (see the module docstring).

    Args:
        router: a :class:`router.route.Router` (its schema, value index and ``route_batch``).
        model: a causal LM in eval mode; tokenizer: its tokenizer.
        config: weights and prompt sizes.
        examples: training questions with routes to show in the prompt (:func:`pick_examples`
            chooses ``config.n_examples`` of them); never pass evaluation questions.
    """

    def __init__(self, router: Any, model: torch.nn.Module, tokenizer: Any, config: RerankConfig | None = None,
                 examples: Sequence[Sample] = ()):
        self.router = router
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or RerankConfig()
        self.examples = pick_examples(examples, self.config.n_examples)
        self._kw = cache_kwarg(model)
        self._newline = tokenizer("\n", add_special_tokens=False).input_ids
        schema = render_described_schema(router.schema) if self.config.describe else render_compact_schema(router.schema)
        head = "-- SQLite database\n" + schema + "\n\n" + INSTRUCTION + "\n\n"
        forward = head + "".join(self._forward_query(s.question) + f" {route_text(s.path)}\n\n" for s in self.examples)
        channel = head + "".join(f"-- Route: {route_text(s.path)}\n-- Question: {s.question}\n\n" for s in self.examples)
        self._forward_prefix = self._encode_prefix(forward)
        self._channel_prefix = self._encode_prefix(channel)

    @classmethod
    def from_pretrained(cls, router: Any, config: RerankConfig | None = None, examples: Sequence[Sample] = ()) -> RouteReranker:
        """Load ``config.model`` (a built-in name or a local directory) for ``router``.

        Raises:
            ConfigError: the model is neither a built-in name nor a causal-LM directory
                (``where="--rerank.model"``).
            DownloadError: the built-in model must be fetched and converted and cannot be.
        """
        config = config or RerankConfig()
        try:
            model, tokenizer = load_generator(ModelConfig(model=config.model, use_lora=False, dtype=config.dtype))
        except ConfigError as exc:
            if exc.where != "--model":
                raise
            raise ConfigError(exc.message, where="--rerank.model") from exc
        model.eval()
        return cls(router, model, tokenizer, config, examples)

    @property
    def prefix_tokens(self) -> tuple[int, int]:
        """Tokens of the shared forward and channel prompt prefixes (schema, instruction, examples)."""
        return self._forward_prefix[0].get_seq_length(), self._channel_prefix[0].get_seq_length()

    def _values(self, question: str) -> str:
        values = self.router.policy.space.values
        matches = values.lookup(question)[: self.config.max_values] if values is not None else []
        return "; ".join(f"{m.table}.{m.column} = '{m.value}'" for m in matches) or "none"

    def _forward_query(self, question: str) -> str:
        return f"-- Question: {question}\n-- Values: {self._values(question)}\n-- Route:"

    def _encode_prefix(self, text: str) -> tuple[Any, torch.Tensor]:
        ids = self.tokenizer(text, return_tensors="pt").input_ids
        cache = DynamicCache(config=self.model.config)
        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=True, **{self._kw: cache})
        return cache, out.logits[:, -1:, :].float()

    def _extend(self, prefix: tuple[Any, torch.Tensor], tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """A copy of ``prefix`` (``(kv_cache, last_logits)``) extended by ``tokens``; ``prefix`` is unchanged."""
        cache = copy.deepcopy(prefix[0])
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(tokens)], dtype=torch.long), use_cache=True, **{self._kw: cache})
        return cache, out.logits[:, -1:, :].float()

    def _tokens(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def continuation_logprobs(self, prefix: tuple[Any, torch.Tensor], sequences: Sequence[Sequence[int]],
                              starts: Sequence[int]) -> list[float]:
        """``sum(log p(seq[t] | prefix, seq[:t]))`` for ``t >= start``, one value per sequence.

        Args:
            prefix: ``(kv_cache, last_logits)`` of a shared prompt prefix (``last_logits``:
                ``(1, 1, vocab)``); the cache is copied, never changed.
            sequences: ``n`` token lists that continue the prefix (right-padded into ``(n, T)``).
            starts: per sequence, the first position that is scored.

        Returns:
            ``n`` log-probs in nats.
        """
        cache0, last = prefix
        n, t = len(sequences), max(len(s) for s in sequences)
        ids = torch.zeros((n, t), dtype=torch.long)
        mask = torch.zeros((n, t))
        for j, (seq, start) in enumerate(zip(sequences, starts, strict=True)):
            ids[j, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[j, start : len(seq)] = 1.0
        cache = copy.deepcopy(cache0)
        cache.batch_repeat_interleave(n)
        with torch.no_grad():
            logits = last.expand(n, 1, -1)
            if t > 1:
                rest = self.model(input_ids=ids[:, :-1], use_cache=True, **{self._kw: cache}).logits.float()
                logits = torch.cat([logits, rest], dim=1)
            logp = selective_log_softmax(logits, ids) * mask
        return logp.sum(dim=1).tolist()

    def score(self, question: str, paths: Sequence[JoinPath], router_probs: Sequence[float]) -> list[CandidateScore]:
        """The three log-probs of each candidate path for ``question``.

        The forward direction reads the question once (the prefix extended by it) and then the
        candidates' routes as one batch; the channel direction reads each route, then the question.
        """
        query = self._extend(self._forward_prefix, self._tokens(self._forward_query(question)))
        routes = [self._tokens(" " + route_text(p)) + self._newline for p in paths]
        forward = self.continuation_logprobs(query, routes, [0] * len(routes))
        asked = self._tokens(" " + question) + self._newline
        contexts = [self._tokens(f"-- Route: {route_text(p)}\n-- Question:") for p in paths]
        channel = self.continuation_logprobs(self._channel_prefix, [c + asked for c in contexts], [len(c) for c in contexts])
        return [
            CandidateScore(p, math.log(max(q, 1e-12)), f, c)
            for p, q, f, c in zip(paths, router_probs, forward, channel, strict=True)
        ]

    def rerank(self, routes: Sequence[Any]) -> list[Reranked]:
        """Rerank each of the router's answers (``Router.route_batch(..., top_k >= config.top_k)``;
        its ``top_k`` is never empty).

        Returns:
            one :class:`Reranked` per route, same order.
        """
        cfg = self.config
        out = []
        for routed in routes:
            top = routed.top_k[: cfg.top_k]
            scores = self.score(routed.question, [p for p, _ in top], [q for _, q in top])
            out.append(self._choose(routed, scores, cfg.forward_weight, cfg.channel_weight))
        return out

    def _choose(self, routed: Any, scores: list[CandidateScore], forward_weight: float, channel_weight: float) -> Reranked:
        order = rank(scores, forward_weight, channel_weight)
        best = scores[order[0]].path
        # the rescored candidates get the reranked confidence; any the router ranked below them keep its own
        router_conf = routed.top_k_confidence or tuple(q for _, q in routed.top_k)
        conf = confidences(scores, forward_weight, channel_weight, self.config.temperature) + list(router_conf[len(scores):])
        # scores are routed.top_k[:len(scores)]: reorder those, keep the rest as the router ranked them
        order += list(range(len(scores), len(routed.top_k)))
        route = dataclasses.replace(
            routed,
            path=best,
            prob=routed.top_k[order[0]][1],
            skeleton=self.router.graph.skeleton(best),
            top_k=tuple(routed.top_k[j] for j in order),
            top_k_confidence=tuple(conf[j] for j in order),
            confidence=conf[order[0]],
            uncertain=conf[order[0]] < self.router.min_confidence,
        )
        return Reranked(route, tuple(scores), best != routed.path)


def training_examples(router: Any) -> list[Sample]:
    """The training questions of the data set ``router`` was trained on, read from the folder its
    ``config.json`` records (``training.data``), or ``[]`` when that folder is gone or unreadable
    (the prompt then shows no examples)."""
    from core.samples import load_samples

    data = (router.meta.get("training") or {}).get("data")
    if not data:
        return []
    try:
        return load_samples(Path(data) / "samples.jsonl", split="train")
    except Exception:  # noqa: BLE001 - any unreadable folder only costs the examples
        return []


def route_and_rerank(router: Any, reranker: RouteReranker, questions: Sequence[str],
                     progress: Any = None) -> tuple[list[Any], list[Reranked], float]:
    """Route ``questions`` and rerank each; returns ``(routes, reranked, seconds_per_question)``.

    ``progress``, when given, is called with the number of questions done after each one.
    """
    routes = router.route_batch(list(questions), top_k=max(3, reranker.config.top_k))
    t0 = time.perf_counter()
    out = []
    for i, r in enumerate(routes, 1):
        out.extend(reranker.rerank([r]))
        if progress is not None:
            progress(i)
    per = (time.perf_counter() - t0) / max(1, len(questions))
    return routes, out, per


class RerankedRouter:
    """A router whose answers are reranked: the ``predict_paths`` protocol of
    :class:`router.evaluate.PathPredictor`, so the A/B evaluation can route with it."""

    def __init__(self, reranker: RouteReranker):
        self.reranker = reranker

    def predict_paths(self, questions: Sequence[str]) -> list[JoinPath]:
        """The reranked path of each question, ``len(result) == len(questions)``."""
        _, reranked, _ = route_and_rerank(self.reranker.router, self.reranker, questions)
        return [r.route.path for r in reranked]


def save_scores(path: str | Path, questions: Sequence[Sample], reranked: Sequence[Reranked]) -> int:
    """Write one JSON object per question (atomically) with its gold path and its candidates'
    log-probs, to tune the weights later (``python -m evaluation.rerank --grid``); returns the count."""
    from core.io import write_jsonl

    return write_jsonl(path, ({
        "question": s.question,
        "gold": s.path.to_dict(),
        "candidates": [{"path": c.path.to_dict(), "router_logp": c.router_logp, "forward_logp": c.forward_logp,
                        "channel_logp": c.channel_logp} for c in r.candidates],
    } for s, r in zip(questions, reranked, strict=True)))
