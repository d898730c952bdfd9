"""Gold SQL for a question plan: the path's joins, the asked-for column, the entity filters.

A :class:`Plan` is what a seed question means, independent of its wording: the question family
(see :mod:`data_pipeline.templates`), the anchor column its entity comes from, the target
column it asks for, an optional aggregate and an optional second condition. :func:`gold_sql`
turns a plan and the entity values into one SELECT over ``graph.from_clause(path)``; every
identifier is quoted (``"Order Details"``), every value is an SQL literal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from core.graph import JoinPath, SchemaGraph
from core.sqlite import sql_ident

AGGREGATE_FAMILIES = ("count", "agg")
"""Families whose gold SQL aggregates (one row)."""

UNFILTERED_FAMILIES = ("all_count", "all_list", "all_pairs", "all_agg", "top")
"""Families whose gold SQL has no WHERE (see :data:`~data_pipeline.templates.UNFILTERED_FAMILIES_BY_SCOPE`):
``entity_column`` is then only the anchor column that ``all_pairs`` lists beside ``ask_column``."""


@dataclass(frozen=True)
class Plan:
    """The meaning of a seed question.

    Attributes:
        family: ``list``, ``lookup``, ``count``, ``agg`` or ``filter``; without a filter value
            ``all_count``, ``all_list``, ``all_pairs`` or ``all_agg`` (:data:`UNFILTERED_FAMILIES`).
        scope: ``join`` (multi-table path) or ``self`` (single table).
        entity_column: anchor column the filter value ``{E1}`` comes from.
        ask_column: target column returned by ``list``/``lookup``/``filter``.
        num_column: target column aggregated by ``agg`` (a number, or a date for ``MIN``/``MAX``).
        agg: ``COUNT``, ``SUM``, ``AVG``, or ``MIN``/``MAX`` of a date column (None when the family does not aggregate).
        count_column: target column counted distinctly (None: ``COUNT(*)``).
        filter_column: target column of the second condition ``{E2}`` (``filter`` only).
        filter_op: ``>=`` (numbers) or ``=`` (text).
        group_column: target column ``top`` groups by (its key), counting ``count_column`` of the anchor.
        extra_column: a second target column ``list`` returns after ``ask_column`` (a person's
            last name after the first, when the question names no column:
            :func:`data_pipeline.stages.answer_columns`).
    """

    family: str
    scope: str
    entity_column: str
    ask_column: str | None = None
    num_column: str | None = None
    agg: str | None = None
    count_column: str | None = None
    filter_column: str | None = None
    filter_op: str | None = None
    group_column: str | None = None
    extra_column: str | None = None

    @property
    def aggregates(self) -> bool:
        return self.agg is not None

    @property
    def filtered(self) -> bool:
        """False for the families without a filter value (no entity, no WHERE)."""
        return self.family not in UNFILTERED_FAMILIES

    @property
    def extra_filter(self) -> bool:
        return self.filter_column is not None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]


def sql_literal(value: Any) -> str:
    """An SQL literal for a database value.

    >>> sql_literal("Bon app'"), sql_literal(18), sql_literal(9.5), sql_literal(True)
    ("'Bon app'''", '18', '9.5', '1')
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def col(table: str, column: str) -> str:
    """``table.column``, each quoted only where SQLite needs it (:func:`core.sqlite.sql_ident`)."""
    return f"{sql_ident(table)}.{sql_ident(column)}"


def gold_sql(graph: SchemaGraph, path: JoinPath, plan: Plan, value: Any = None, second: Any = None) -> str:
    """The gold query of ``plan`` on ``path`` with the anchor entity ``value`` (and ``second`` for ``filter``).

    A plan without a filter value (``plan.filtered`` False) ignores ``value``/``second`` and has no WHERE.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("s", (Table("a", (Column("id", primary_key=True), Column("name"))),
    ...                  Table("b", (Column("id", primary_key=True), Column("a_id"), Column("qty")))),
    ...            (ForeignKey("b", "a_id", "a", "id"),))
    >>> gold_sql(SchemaGraph(s), JoinPath("a", (), "b"), Plan("agg", "join", "name", num_column="qty", agg="SUM"), "x")
    "SELECT SUM(b.qty) FROM a JOIN b ON b.a_id = a.id WHERE a.name = 'x'"
    """
    a, t = path.anchor, path.target
    if not plan.filtered:
        return _unfiltered_sql(graph, path, plan)
    where = [f"{col(a, plan.entity_column)} = {sql_literal(value)}"]
    if plan.family in ("list", "lookup", "filter"):
        select = f"SELECT DISTINCT {col(t, str(plan.ask_column))}"
        if plan.extra_column is not None:
            select += f", {col(t, plan.extra_column)}"
    elif plan.family == "count":
        select = f"SELECT COUNT(DISTINCT {col(t, plan.count_column)})" if plan.count_column else "SELECT COUNT(*)"
    elif plan.family == "agg":
        select = f"SELECT {plan.agg}({col(t, str(plan.num_column))})"
    else:
        raise ValueError(f"unknown family {plan.family!r}")
    if plan.filter_column is not None:
        where.append(f"{col(t, plan.filter_column)} {plan.filter_op} {sql_literal(second)}")
    return f"{select} {graph.from_clause(path)} WHERE {' AND '.join(where)}"


def _unfiltered_sql(graph: SchemaGraph, path: JoinPath, plan: Plan) -> str:
    """The WHERE-less query of an ``all_*`` plan (table in :mod:`data_pipeline.templates`)."""
    a, t = path.anchor, path.target
    if plan.family == "all_count":
        select = f"SELECT COUNT(DISTINCT {col(t, plan.count_column)})" if plan.count_column else "SELECT COUNT(*)"
    elif plan.family == "all_list":
        select = f"SELECT DISTINCT {col(t, str(plan.ask_column))}"
    elif plan.family == "all_pairs":
        select = f"SELECT DISTINCT {col(t, str(plan.ask_column))}, {col(a, plan.entity_column)}"
    elif plan.family == "all_agg":
        select = f"SELECT {plan.agg}({col(t, str(plan.num_column))})"
    elif plan.family == "top":
        ask, group = col(t, str(plan.ask_column)), col(t, str(plan.group_column))
        count = f"COUNT(DISTINCT {col(a, str(plan.count_column))})"
        return f"SELECT {ask} {graph.from_clause(path)} GROUP BY {group} ORDER BY {count} DESC, {ask} LIMIT 1"
    else:
        raise ValueError(f"unknown family {plan.family!r}")
    return f"{select} {graph.from_clause(path)}"


def top_tie_sql(graph: SchemaGraph, path: JoinPath, plan: Plan) -> str:
    """The two largest counts of a ``top`` plan's groups: equal counts mean the superlative has no single answer."""
    group, count = col(path.target, str(plan.group_column)), f"COUNT(DISTINCT {col(path.anchor, str(plan.count_column))})"
    return f"SELECT {count} AS n {graph.from_clause(path)} GROUP BY {group} ORDER BY n DESC LIMIT 2"
