"""The untrained routing baseline: embedding similarity of the question and each table's text.

No training: a retrieval router encodes the question (e5 ``query:`` prefix) and every table's
text (:func:`router.text.table_text`: name, description, Chinese name; e5 ``passage:`` prefix)
with the same pretrained encoder the trained routers start from, ranks the tables by cosine
similarity, and links the two best, as retrieval-based schema linking does:

- when the best table beats the second by more than ``margin``, the question is taken to be
  about that table alone (a single-table path);
- otherwise the path is the shortest FK path (at most ``graph.max_hops`` joins) from the
  second-ranked table (anchor) to the best one (target); unreachable pairs fall back to the
  single table.

Similarity has no direction, so the anchor/target order is a guess: table-set match is the fair
metric for this baseline. ``margin=0.02`` was the best of {0, 0.01, 0.02, 0.04} on Northwind's
validation split (full path 21.4%, table set 29.6%); nothing else is tuned.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import torch

from core.graph import JoinPath, SchemaGraph
from data_pipeline.encoders import DEFAULT_ENCODER, TextEncoder
from router.text import table_text


class RetrievalRouter:
    """Route by embedding similarity alone (see the module docstring).

    Args:
        graph: the schema graph whose legal paths are the candidates.
        encoder: an encoder name or directory (:func:`data_pipeline.encoders.resolve_encoder`), or a
            loaded :class:`TextEncoder` to share one between baselines.
        margin: cosine margin above which the best table is routed alone.
    """

    def __init__(self, graph: SchemaGraph, encoder: str | TextEncoder = DEFAULT_ENCODER, margin: float = 0.02):
        self.graph = graph
        self.margin = margin
        self.encoder = encoder if isinstance(encoder, TextEncoder) else TextEncoder.from_pretrained(encoder)
        self.names = graph.schema.table_names
        texts = [table_text(graph.schema.table(t)) for t in self.names]
        self._table_emb = self.encoder.encode(texts, prefix=self.encoder.spec.passage_prefix)  # (n_tables, hidden)

    @torch.no_grad()
    def table_scores(self, questions: Sequence[str]) -> torch.Tensor:
        """Cosine similarity of every question to every table, shape ``(batch, n_tables)``."""
        q = self.encoder.encode(list(questions), prefix=self.encoder.spec.query_prefix)  # (batch, hidden)
        return q @ self._table_emb.T

    def _link(self, best: str, second: str) -> JoinPath:
        try:
            nodes = nx.shortest_path(self.graph.graph, second, best)
        except nx.NetworkXNoPath:
            return JoinPath(best, (), best)
        if len(nodes) - 1 > self.graph.max_hops:
            return JoinPath(best, (), best)
        return JoinPath(nodes[0], tuple(nodes[1:-1]), nodes[-1])

    def predict_paths(self, questions: Sequence[str]) -> list[JoinPath]:
        """One legal path per question (:class:`router.evaluate.PathPredictor`)."""
        if not questions:
            return []
        out = []
        for row in self.table_scores(questions):
            if len(self.names) == 1:
                out.append(JoinPath(self.names[0], (), self.names[0]))
                continue
            top = torch.topk(row, 2)
            (s1, s2), (i1, i2) = top.values.tolist(), top.indices.tolist()
            best, second = self.names[i1], self.names[i2]
            out.append(JoinPath(best, (), best) if s1 - s2 > self.margin else self._link(best, second))
        return out
