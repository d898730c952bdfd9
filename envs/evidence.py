"""What the label-free reward needs to know about a question, computed once per question, and the
database row counter it calls.

:func:`question_evidence` gathers, for one question: the values it mentions
(:meth:`core.values.ValueIndex.lookup`), where it names each table and column, and the target
evidence scored from those spans (:func:`rewards.label_free.target_evidence`). Table spans come
from :func:`data_pipeline.mentions.mention_spans` (names, descriptions, synonyms, Chinese names,
pinyin initials), the same finder the router's link features read, and column spans from
:func:`data_pipeline.mentions.column_mention_spans` (a table's non-key column names).

:class:`CachedRowCounter` runs the label-free reward's ``SELECT COUNT(*)`` texts on the data set's
SQLite database through the read-only :class:`~data_pipeline.backends.sqlite.SQLiteExecutor`
(timeout, row cap) and caches each count, so a rollout pays for a query once per route and value.

>>> from core.schema import Table, Column
>>> ts = [Table("Customers", (Column("CompanyName", "TEXT"),), zh="客户"), Table("Orders", (Column("OrderDate"),))]
>>> mentions.mention_spans("Which customers placed orders?", ts)
[[(6, 15)], [(23, 29)]]
>>> mentions.column_mention_spans("What is the order date of 客户 Alfreds?", ts)
[[], [(12, 22)]]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.graph import JoinPath, SchemaGraph
from core.schema import Table
from core.values import ValueIndex, ValueMatch
from data_pipeline.backends.sqlite import SQLiteExecutor
from data_pipeline import mentions
from rewards.label_free import target_evidence

logger = logging.getLogger(__name__)

SpanFinder = Callable[[str, Sequence[Table]], list[list[tuple[int, int]]]]
"""``mention_spans(question, tables)``: per table, the ``[start, end)`` spans where the question names it."""

@dataclass(frozen=True)
class QuestionEvidence:
    """What the label-free reward reads about one question.

    Attributes:
        matches: the values it mentions, best first (restricted to the schema's tables).
        evidence: ``{table: score in [0, 1]}`` for every table, from
            :func:`rewards.label_free.target_evidence`.
        judge: a language-model judge's ``{route: p}`` (:func:`read_judge`), or None.
    """

    matches: tuple[ValueMatch, ...]
    evidence: dict[str, float] = field(default_factory=dict)
    judge: dict[JoinPath, float] | None = None


def read_judge(record: dict[str, Any], graph: SchemaGraph | None, where: str | Path,
               line: int | None = None) -> dict[JoinPath, float] | None:
    """The ``judge`` field of one line of a judged question log (``python -m generator.judge``) as
    ``{route: p}``; None when the line has none (or ``"judge": null``).

    Args:
        record: the line's object.
        graph: the schema whose tables the routes must name; None: only the field's shape is checked.
        where, line: the file and 1-based line, for errors.

    Raises:
        DataError: the field is not ``{"routes": [{"path": {"anchor": str, "via": [str, ...] or
            null, "target": str}, "p": number in [0, 1]}, ...]}`` with distinct paths (of
            ``graph``'s schema when given); ``where`` and ``line`` named.
    """
    judge = record.get("judge")
    if judge is None:
        return None
    routes = judge.get("routes") if isinstance(judge, dict) else None
    if not isinstance(routes, list) or not routes:
        raise DataError("field 'judge' must hold a non-empty list 'routes'", where=where, line=line)
    out: dict[JoinPath, float] = {}
    for k, r in enumerate(routes, 1):
        if not isinstance(r, dict):
            raise DataError(f"judge route {k} must be an object, got {_short(r)}", where=where, line=line)
        p = r.get("p")
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise DataError(f"judge route {k}: p must be a number in [0, 1], got {_short(p)}", where=where, line=line)
        path = _judged_path(r.get("path"), k, where, line)
        if path in out:
            raise DataError(f"judge route {k} repeats the path {path}", where=where, line=line)
        if graph is not None:
            unknown = [t for t in dict.fromkeys((path.anchor, *path.via, path.target)) if t not in graph.schema.table_names]
            if unknown:
                raise DataError(f"judge route {k} names table(s) {unknown} that the schema lacks", where=where, line=line)
        out[path] = float(p)
    return out


def _judged_path(d: Any, k: int, where: str | Path, line: int | None) -> JoinPath:
    """A judge route's ``path`` object, its fields' types checked (DataError naming route ``k``)."""
    if not isinstance(d, dict):
        raise DataError(f"judge route {k}: path must be an object, got {_short(d)}", where=where, line=line)
    for name in ("anchor", "target"):
        if not isinstance(d.get(name), str) or not d[name]:
            raise DataError(f"judge route {k}: path field {name!r} must be a table name, got {_short(d.get(name))}",
                            where=where, line=line)
    via = d.get("via")
    if via is not None and not (isinstance(via, list) and all(isinstance(v, str) and v for v in via)):
        raise DataError(f"judge route {k}: path field 'via' must be a list of table names or null, got {_short(via)}",
                        where=where, line=line)
    return JoinPath(d["anchor"], tuple(via or ()), d["target"])


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line errors."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def question_evidence(
    question: str,
    graph: SchemaGraph,
    values: ValueIndex | None,
    mention_spans: SpanFinder | None = None,
) -> QuestionEvidence:
    """The value matches and target evidence of ``question`` over ``graph``'s schema.

    Args:
        question: the question.
        graph: the schema graph.
        values: the database's value index; None: no value is linked (``value_anchor`` then reads
            the question's table names only).
        mention_spans: the table span finder (:data:`SpanFinder`); :func:`data_pipeline.mentions.mention_spans` when None.
    """
    tables = list(graph.schema.tables)
    names = {t.name for t in tables}
    matches = tuple(m for m in (values.lookup(question) if values is not None else ()) if m.table in names)
    t_spans = (mention_spans or mentions.mention_spans)(question, tables)
    c_spans = mentions.column_mention_spans(question, tables)
    ev = target_evidence(
        question,
        {t.name: s for t, s in zip(tables, t_spans, strict=True)},
        [(m.start, m.end) for m in matches],
        {t.name: s for t, s in zip(tables, c_spans, strict=True)},
        list(dict.fromkeys(m.table for m in matches)),
    )
    return QuestionEvidence(matches, {t.name: float(ev.get(t.name, 0.0)) for t in tables})


class CachedRowCounter:
    """``count_rows(sql) -> int | None`` on one SQLite database, read-only, each text run once.

    Args:
        db_path: the SQLite file (the data set's ``db_path``).
        timeout_s: per query, enforced inside SQLite.
        max_cache: texts kept at most (the oldest half is dropped when full).

    A query that fails or times out counts None (logged at DEBUG / WARNING); the reward then pays
    nothing for it, so a bad query never stops a training run.
    """

    def __init__(self, db_path: str | Path, timeout_s: float = 2.0, max_cache: int = 200_000):
        self.db_path = Path(db_path)
        self._executor = SQLiteExecutor(timeout_s=timeout_s, max_rows=2)
        self._cache: dict[str, int | None] = {}
        self.max_cache = max_cache
        self.queries = 0

    def __call__(self, sql: str) -> int | None:
        if sql in self._cache:
            return self._cache[sql]
        self.queries += 1
        res = self._executor.execute(self.db_path, sql)
        n: int | None = None
        if res.ok and res.rows and isinstance(res.rows[0][0], int):
            n = int(res.rows[0][0])
        else:
            logger.log(logging.WARNING if res.timed_out else logging.DEBUG, "row count failed (%s): %s", res.error, sql[:200])
        if len(self._cache) >= self.max_cache:
            self._cache = dict(list(self._cache.items())[self.max_cache // 2 :])
        self._cache[sql] = n
        return n

    def close(self) -> None:
        """Close the database connection."""
        self._executor.close()
