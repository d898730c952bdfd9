"""The untrained routing baseline: embedding similarity of the question and each table's text.

No training and no labels: a retrieval router encodes the question (e5 ``query:`` prefix) and
every table's text (:func:`router.text.table_text`: name, description, Chinese name; e5
``passage:`` prefix) with the same pretrained encoder the trained routers start from, then
returns the legal path whose tables best match the question:

    score(path) = mean over the path's tables of (cos(q, table) - median over all tables of cos(q, .))

so a path gains from tables the question is about and loses for each unrelated table it
crosses. Ties (a path and its reverse always tie: similarity has no direction) go to fewer
hops, then to the order of :attr:`SchemaGraph.legal_paths`. Its anchor/target direction is
therefore a guess; table-set match is the fair metric for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from data_pipeline.graph import JoinPath, SchemaGraph
from router.backbones import DEFAULT_ENCODER, TextEncoder
from router.text import table_text


class RetrievalRouter:
    """Route by embedding similarity alone (see the module docstring).

    Args:
        graph: the schema graph whose legal paths are the candidates.
        encoder: an encoder name or directory (:func:`router.backbones.resolve_encoder`), or a
            loaded :class:`TextEncoder` to share one between baselines.
    """

    def __init__(self, graph: SchemaGraph, encoder: str | TextEncoder = DEFAULT_ENCODER):
        self.graph = graph
        self.encoder = encoder if isinstance(encoder, TextEncoder) else TextEncoder.from_pretrained(encoder)
        names = graph.schema.table_names
        texts = [table_text(graph.schema.table(t)) for t in names]
        self._table_emb = self.encoder.encode(texts, prefix=self.encoder.spec.passage_prefix)  # (n_tables, hidden)
        col = {t: i for i, t in enumerate(names)}
        paths = graph.legal_paths
        # (n_paths, n_tables) averaging matrix: row p has 1/len(tables) on the tables of path p
        member = np.zeros((len(paths), len(names)), dtype=np.float32)
        for p, path in enumerate(paths):
            for t in path.tables:
                member[p, col[t]] = 1.0 / len(path.tables)
        self._member = torch.from_numpy(member)
        self._hops = torch.tensor([p.hops for p in paths], dtype=torch.float32)

    @torch.no_grad()
    def path_scores(self, questions: Sequence[str]) -> torch.Tensor:
        """Score of every legal path for every question, shape ``(batch, n_legal_paths)``."""
        q = self.encoder.encode(list(questions), prefix=self.encoder.spec.query_prefix)  # (batch, hidden)
        sims = q @ self._table_emb.T  # (batch, n_tables)
        sims = sims - sims.median(dim=1, keepdim=True).values
        return sims @ self._member.T - 1e-4 * self._hops  # fewer hops win ties

    def predict_paths(self, questions: Sequence[str]) -> list[JoinPath]:
        """The best-scoring legal path per question (:class:`router.evaluate.PathPredictor`)."""
        if not questions:
            return []
        best = self.path_scores(questions).argmax(dim=1).tolist()
        return [self.graph.legal_paths[i] for i in best]
