"""Derive a gold route ``anchor -> via -> target`` from a human-written gold SQL (Spider dev).

Spider labels no paths, so the route is read off the gold query by a fixed rule:

1. **Tables**: every table named in the query, nested queries included (this set is what
   *table-set match* compares).
2. **Target**: the table of the columns the outermost ``SELECT`` returns (aliases resolved;
   an unqualified column belongs to the one FROM table that has it). ``COUNT(*)``/``*`` over a
   single table targets that table.
3. **Anchor**: the table of the outermost ``WHERE``/``HAVING`` columns; with no filter on a
   one-table query the anchor is the target; with no filter over a join it is the other end of
   the join chain.
4. **Via**: the tables between anchor and target, in the order of the unique simple path through
   the outermost FROM tables in the schema's FK graph.

Whenever the rule has to choose, the reason is recorded in :attr:`SpiderGold.ambiguous`:
``set_operation``, ``nested_query``, ``star_over_join``, ``select_spans_tables``,
``filters_span_tables``, ``no_filter_over_join``, ``not_a_path``, ``unresolved_column``,
``parse_error``. Reports count questions per reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import sqlglot
from sqlglot import exp

from core.graph import JoinPath, SchemaGraph


@dataclass(frozen=True)
class SpiderGold:
    """The derived route of one question. ``path`` is None only when the SQL does not parse."""

    tables: frozenset[str]
    path: JoinPath | None
    ambiguous: tuple[str, ...] = ()


def _canon(graph: SchemaGraph) -> dict[str, str]:
    return {t.lower(): t for t in graph.schema.table_names}


def _outer_select(tree: exp.Expression) -> exp.Select | None:
    node = tree
    while isinstance(node, exp.SetOperation):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _own(node: exp.Expression, select: exp.Select) -> bool:
    """True when ``node`` belongs to ``select`` itself, not to a nested query inside it."""
    return node.find_ancestor(exp.Select) is select


def derive_gold_path(sql: str, graph: SchemaGraph) -> SpiderGold:
    """Apply the module's rule to ``sql`` over ``graph``'s schema.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("concert", (Table("singer", (Column("singer_id"), Column("name"))),
    ...     Table("concert", (Column("concert_id"), Column("year"))),
    ...     Table("singer_in_concert", (Column("singer_id"), Column("concert_id")))),
    ...     (ForeignKey("singer_in_concert", "singer_id", "singer", "singer_id"),
    ...      ForeignKey("singer_in_concert", "concert_id", "concert", "concert_id")))
    >>> g = derive_gold_path("SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = "
    ...     "T2.singer_id JOIN concert AS T3 ON T1.concert_id = T3.concert_id WHERE T3.year = 2014", SchemaGraph(s))
    >>> str(g.path), g.ambiguous
    ('concert -> singer_in_concert -> singer', ())
    """
    canon = _canon(graph)
    reasons: list[str] = []
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return SpiderGold(frozenset(), None, ("parse_error",))
    all_tables = frozenset(canon[t.name.lower()] for t in tree.find_all(exp.Table) if t.name.lower() in canon)
    if isinstance(tree, exp.SetOperation):
        reasons.append("set_operation")
    select = _outer_select(tree)
    if select is None:
        return SpiderGold(all_tables, None, (*reasons, "parse_error"))
    if any(s is not select for s in select.find_all(exp.Select)):
        reasons.append("nested_query")

    alias: dict[str, str] = {}
    from_tables: list[str] = []
    for t in select.find_all(exp.Table):
        if not _own(t, select) or t.name.lower() not in canon:
            continue
        name = canon[t.name.lower()]
        if name not in from_tables:
            from_tables.append(name)
        alias[(t.alias or t.name).lower()] = name
        alias[t.name.lower()] = name
    if not from_tables:
        return SpiderGold(all_tables, None, (*reasons, "parse_error"))

    columns_of = {t: {c.name.lower() for c in graph.schema.table(t).columns} for t in from_tables}

    def table_of(col: exp.Column) -> str | None:
        if col.table:
            return alias.get(col.table.lower())
        owners = [t for t in from_tables if col.name.lower() in columns_of[t]]
        return owners[0] if len(owners) == 1 else None

    def tables_in(nodes: list[exp.Expression]) -> list[str]:
        out: list[str] = []
        for node in nodes:
            for col in node.find_all(exp.Column):
                if not _own(col, select):
                    continue
                if not col.table and col.this.args.get("quoted") and table_of(col) is None:
                    continue  # Spider writes string literals in double quotes: "JetBlue Airways"
                t = table_of(col)
                if t is None:
                    if "unresolved_column" not in reasons:
                        reasons.append("unresolved_column")
                elif t not in out:
                    out.append(t)
        return out

    selected = tables_in(list(select.expressions))
    if selected:
        target = selected[0]
        if len(selected) > 1:
            reasons.append("select_spans_tables")
    else:
        target = from_tables[0]
        if len(from_tables) > 1:
            reasons.append("star_over_join")

    filters = [select.args[k] for k in ("where", "having") if select.args.get(k) is not None]
    filtered = tables_in(filters)
    if filtered:
        anchor = filtered[0]
        if len(filtered) > 1:
            reasons.append("filters_span_tables")
    elif len(from_tables) == 1:
        anchor = target
    else:
        reasons.append("no_filter_over_join")
        anchor = next(t for t in from_tables if t != target)

    path = _route(graph, anchor, target, from_tables, reasons)
    return SpiderGold(all_tables, path, tuple(reasons))


def _route(graph: SchemaGraph, anchor: str, target: str, tables: list[str], reasons: list[str]) -> JoinPath:
    if anchor == target:
        if len(tables) > 1:
            # the filter and the answer sit on one table; the join chain runs elsewhere
            reasons.append("not_a_path")
        return JoinPath(anchor, (), target)
    sub = graph.graph.subgraph(tables)
    if anchor in sub and target in sub:
        for nodes in nx.all_simple_paths(sub, anchor, target):
            if len(nodes) == len(tables):
                return JoinPath(anchor, tuple(nodes[1:-1]), target)
    reasons.append("not_a_path")
    try:
        nodes = nx.shortest_path(graph.graph, anchor, target)
    except nx.NetworkXNoPath:
        return JoinPath(anchor, (), target)
    return JoinPath(anchor, tuple(nodes[1:-1]), target)
