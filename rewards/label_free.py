"""Label-free router rewards: what the schema, the database and the question's own words say about
a route, with no gold path (issue 17 A; seed 002's case for PPO: legal paths, execution success,
a low empty-result rate).

Every function here is pure given its inputs. What needs the outside world is passed in:

- the question's **value matches** (``core.values.ValueMatch``: table, column, value, score),
  looked up by the caller in the data set's value index (:meth:`core.values.ValueIndex.lookup`);
- the **row counter** ``count_rows(sql) -> int | None``: runs the ``SELECT COUNT(*)`` text of
  :func:`filtered_skeleton_sql` on a read-only connection (the env uses
  ``data_pipeline.backends.sqlite.SQLiteExecutor``) and returns None when it cannot run;
- the **target evidence** ``{table: score in [0, 1]}``: where the question's words point at a
  table, scored by :func:`target_evidence` from spans the caller found (table names and synonyms,
  column names: ``data_pipeline.mentions.mention_spans``, which the router reads too).

Components (:func:`label_free_components`), with the default :class:`LabelFreeConfig`:

- ``legal``: ``illegal_penalty`` (-1.0) when the route is not a legal path of the schema graph;
- ``value_anchor``: ``anchor_weight`` (0.5) x the score of the best mentioned value stored in the
  anchor table whose filter (``anchor.column = value``) on the route's join skeleton returns at
  least one row. A question that mentions no value: ``anchor_weight`` x the anchor's evidence
  (the question names the table it starts from). The anchor is **right** when this is > 0;
- ``rows``: **conditional** on a right anchor: ``rows_weight`` (0.5) when the skeleton with the
  linked filter (no filter when no value is mentioned) returns 1 to ``row_budget`` rows; 0 for an
  empty result (seed 002's empty-result rate), for more than ``row_budget`` rows and when it
  cannot run. This is the label-free via credit: it is the only credit that reads the via's
  joins, and it is not paid when the anchor is wrong (seed 002, pitfall 2);
- ``detour``: ``-detour_penalty`` (-0.1) per hop beyond the shortest legal route between the same
  anchor and target (the "longest legal path" hack);
- ``target_evidence``: ``target_weight`` (0.5) x the target's evidence (1.0 for the table the
  question word asks for, 0.5 for a table named elsewhere, ...: :func:`target_evidence`);
- ``total``: the sum, clipped to ``[-clip, clip]``. The intended route of a question whose value
  and asked-for table are both found pays 1.5.

**The default combination is all five**, because each closes a hack the others leave open
(tests/test_label_free_rewards.py, the hack table): value and rows alone pay "always route to
the linked value's table" (the 0-hop lookup of the value) as much as the intended route, which
only the target evidence tells apart; target evidence alone pays any route that ends on the
named table, whatever it starts from, which the value anchor tells apart; both together still pay
a long detour to the right tables, which the detour penalty removes; and an empty join is paid
nothing by ``rows``. Where a gold label exists, the env adds the labelled conditional reward of
:mod:`rewards.router` (10x weight on a non-null via), which stays the only one that knows the
exact via.

**The judge.** A question of a judged question log (``python -m generator.judge``) also carries
a language model's preference over the router's best routes, ``{route: p}`` with the p summing to
1 (the reranked confidence of :mod:`generator.rerank`). It pays ``judge``: ``judge_weight`` (1.0)
x the route's p, 0 for a route the judge did not score. On such a question the heuristic
components above (all but ``legal``) are scaled by ``heuristics_with_judge`` (default 0): on the
120 development questions of ``evaluation/dev_sets`` the judge alone makes the gold route the
single best of all legal routes for 94, the judge plus the heuristics at weight 0.1 / 0.5 / 1 for
93 / 91 / 90, the heuristics alone for 49 (the judge at the router's five best routes, weights
0.5 / 2, temperature 2.7).

>>> from core.values import ValueMatch
>>> from core.graph import JoinPath, SchemaGraph
>>> from core.schema import Schema, Table, Column, ForeignKey
>>> g = SchemaGraph(Schema("shop", (Table("customers", (Column("id", primary_key=True), Column("name", "TEXT"))),
...     Table("orders", (Column("id", primary_key=True), Column("customer_id"))),),
...     (ForeignKey("orders", "customer_id", "customers", "id"),)))
>>> alice = ValueMatch("customers", "name", "Alice", 1.0, 20, 25, True)
>>> ev = {"orders": 1.0, "customers": 0.0}
>>> c = label_free_components(JoinPath("customers", (), "orders"), g, [alice], ev, lambda sql: 2)
>>> c["value_anchor"], c["rows"], c["target_evidence"], c["total"]
(0.5, 0.5, 0.5, 1.5)
>>> label_free_components(JoinPath("customers", (), "customers"), g, [alice], ev, lambda sql: 1)["total"]
1.0
>>> label_free_components(JoinPath("customers", (), "orders"), g, [alice], ev, lambda sql: 0)["total"]  # no rows
0.5
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import networkx as nx

from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph
from core.sqlite import sql_ident
from core.values import ValueMatch

COMPONENTS = ("legal", "value_anchor", "rows", "detour", "target_evidence", "judge")
"""Names of the label-free components, in the order they are reported."""

RowCounter = Callable[[str], "int | None"]
"""``count_rows(sql)``: the single integer a ``SELECT COUNT(*) ...`` returns, None when it cannot run."""

Span = tuple[int, int]

QUESTION_WORDS_EN = re.compile(
    r"\b(which|what|who|whom|whose|how many|how much|list|show|name|give|find|count|number of)\b", re.IGNORECASE
)
"""English words that ask for something: the table named right after one is what is asked for."""

QUESTION_WORDS_ZH = re.compile(r"哪些|哪个|哪家|哪位|哪一|多少|几个|几位|几家|什么|谁|列出|统计|查询")
"""Chinese words that ask for something (the asked-for table is the nearest name after, else before)."""

FOCUS_SCORE = 1.0
"""Evidence of the table named nearest to a question word."""
NAMED_SCORE = 0.5
"""Evidence of a table named elsewhere in the question (outside every value mention)."""
COLUMN_SCORE = 0.3
"""Evidence of a table only one of whose columns is named (outside the focus position)."""


@dataclass(frozen=True)
class LabelFreeConfig:
    """Weights of the label-free router reward (module docstring: what each pays and why)."""

    anchor_weight: float = 0.5
    """Paid (times the value's match score) when the anchor holds a mentioned value whose filter on the route returns rows."""
    rows_weight: float = 0.5
    """Paid when the route's skeleton with the linked filter returns 1..row_budget rows; only when the anchor is right."""
    target_weight: float = 0.5
    """Paid times the target table's evidence in [0, 1] (what the question's words ask for)."""
    detour_penalty: float = 0.1
    """Subtracted per hop beyond the shortest legal route between the route's anchor and target (must be >= 0)."""
    illegal_penalty: float = -1.0
    """Added when the route is not a legal path of the schema graph (must be <= 0)."""
    row_budget: int = 10_000
    """Most rows the filtered skeleton may return and still count as a useful, non-empty result."""
    conditional_rows: bool = True
    """No rows credit when the anchor is wrong (the label-free via credit; off only for ablations)."""
    clip: float = 2.0
    """The total is clipped to [-clip, clip]."""
    judge_weight: float = 1.0
    """Paid times the language-model judge's p of the route, on questions of a judged question log (python -m generator.judge)."""
    heuristics_with_judge: float = 0.0
    """On a judged question, the value, rows, detour and target components are scaled by this (0: the judge alone, plus the illegal-route penalty)."""

    def __post_init__(self) -> None:
        for name in ("anchor_weight", "rows_weight", "target_weight", "detour_penalty", "clip", "judge_weight",
                     "heuristics_with_judge"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", where=name)
        if self.illegal_penalty > 0:
            raise ConfigError(f"must be <= 0, got {self.illegal_penalty}", where="illegal_penalty")
        if self.row_budget < 1:
            raise ConfigError(f"must be >= 1, got {self.row_budget}", where="row_budget")

    @property
    def max_reward(self) -> float:
        """Reward of a legal shortest route with a right anchor, rows and a focused target, after clipping."""
        return min(self.anchor_weight + self.rows_weight + self.target_weight, self.clip)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sql_literal(value: Any) -> str:
    """A SQL literal for a value from the value index: strings single-quoted (quotes doubled), numbers as is.

    >>> sql_literal("Around the Horn"), sql_literal("O'Brien"), sql_literal(3)
    ("'Around the Horn'", "'O''Brien'", '3')
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "'" + str(value).replace("'", "''") + "'"
    return repr(value)


def filtered_skeleton_sql(graph: SchemaGraph, path: JoinPath, match: ValueMatch | None = None) -> str:
    """``SELECT COUNT(*)`` over the route's joins, filtered on the matched value when given.

    Raises:
        ValueError: ``match`` is stored in another table than the route's anchor.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> g = SchemaGraph(Schema("s", (Table("a", (Column("id", primary_key=True), Column("n", "TEXT"))),
    ...     Table("b", (Column("id"), Column("a_id")))), (ForeignKey("b", "a_id", "a", "id"),)))
    >>> filtered_skeleton_sql(g, JoinPath("a", (), "b"), ValueMatch("a", "n", "x", 1.0, 0, 1, True))
    "SELECT COUNT(*) FROM a JOIN b ON b.a_id = a.id WHERE a.n = 'x'"
    """
    sql = graph.skeleton(path)
    if match is None:
        return sql
    if match.table != path.anchor:
        raise ValueError(f"value {match.value!r} is in table {match.table!r}, not in the anchor {path.anchor!r}")
    return f"{sql} WHERE {sql_ident(match.table)}.{sql_ident(match.column)} = {sql_literal(match.value)}"


def detour_hops(graph: SchemaGraph, path: JoinPath) -> int:
    """Hops of ``path`` beyond the shortest route between its anchor and target (0 when none is shorter).

    A route whose anchor and target are not connected in the graph has no detour (0).
    """
    if path.anchor == path.target:
        return path.hops
    try:
        shortest = nx.shortest_path_length(graph.graph, path.anchor, path.target)
    except (nx.NetworkXNoPath, nx.NodeNotFound):
        return 0
    return max(path.hops - int(shortest), 0)


def _inside(span: Span, others: Sequence[Span]) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b in others)


def target_evidence(
    question: str,
    table_spans: Mapping[str, Sequence[Span]],
    value_spans: Sequence[Span] = (),
    column_spans: Mapping[str, Sequence[Span]] | None = None,
    value_tables: Sequence[str] = (),
) -> dict[str, float]:
    """How strongly the question's words ask for each table, ``{table: score in [0, 1]}``.

    Args:
        question: the question text (only used to find the question words).
        table_spans: character spans ``[start, end)`` where the question names each table (its name,
            a synonym, its Chinese name).
        value_spans: spans of the database values the question mentions; a name inside one is part
            of the value ("Bottom-Dollar Markets" is not a mention of a Markets table) and counts 0.
        column_spans: spans where the question names one of a table's (non-key) columns.
        value_tables: tables that hold a mentioned value.

    Returns:
        Every table of ``table_spans``, ``column_spans`` and ``value_tables``: ``FOCUS_SCORE`` (1.0)
        for the table named nearest to a question word (after it; in Chinese, before it when nothing
        follows: "...的产品有哪些"), ``NAMED_SCORE`` (0.5) for another named table,
        ``COLUMN_SCORE`` (0.3) for a table of which only a column is named. When no table or
        column is named outside the values, the question asks about the value's own row
        ("Where is Around the Horn based?"): the value tables get ``FOCUS_SCORE``.

    >>> target_evidence("Which customers ordered Tunnbrod?", {"Customers": [(6, 15)], "Products": []},
    ...                 [(24, 32)], value_tables=["Products"])
    {'Customers': 1.0, 'Products': 0.0}
    >>> target_evidence("Where is Around the Horn based?", {"Customers": []}, [(9, 24)], value_tables=["Customers"])
    {'Customers': 1.0}
    >>> target_evidence("员工 King 负责的销售区域有哪些？", {"Employees": [(0, 2)], "Territories": [(11, 15)]}, [(3, 7)])
    {'Employees': 0.5, 'Territories': 1.0}
    """
    column_spans = column_spans or {}
    tables = list(dict.fromkeys([*table_spans, *column_spans, *value_tables]))
    named = {t: [s for s in table_spans.get(t, ()) if not _inside(s, value_spans)] for t in tables}
    cols = {t: [s for s in column_spans.get(t, ()) if not _inside(s, value_spans)] for t in tables}
    out = {t: NAMED_SCORE if named[t] else (COLUMN_SCORE if cols[t] else 0.0) for t in tables}
    if not any(named.values()) and not any(cols.values()):
        for t in value_tables:
            out[t] = FOCUS_SCORE
        return out
    candidates = [(s, t) for t in tables for s in (*named[t], *cols[t])]
    focus: set[str] = set()
    for m in (*QUESTION_WORDS_EN.finditer(question), *QUESTION_WORDS_ZH.finditer(question)):
        after = [(s[0], t) for s, t in candidates if s[0] >= m.end()]
        before = [(-s[1], t) for s, t in candidates if s[1] <= m.start()]
        pick = min(after) if after else (min(before) if before and QUESTION_WORDS_ZH.fullmatch(m.group()) else None)
        if pick is not None:
            focus.add(pick[1])
    for t in focus:
        out[t] = FOCUS_SCORE
    return out


def judge_reward(path: JoinPath, judge: Mapping[JoinPath, float], weight: float = 1.0) -> float:
    """``weight`` x the judge's p of ``path`` (0 when the judge did not score it).

    >>> judge_reward(JoinPath("a", (), "b"), {JoinPath("a", (), "b"): 0.75, JoinPath("a", (), "a"): 0.25}, 2.0)
    1.5
    >>> judge_reward(JoinPath("b", (), "b"), {JoinPath("a", (), "b"): 1.0})
    0.0
    """
    return weight * float(judge.get(path, 0.0))


def label_free_components(
    path: JoinPath,
    graph: SchemaGraph,
    matches: Sequence[ValueMatch],
    evidence: Mapping[str, float],
    count_rows: RowCounter,
    config: LabelFreeConfig | None = None,
    judge: Mapping[JoinPath, float] | None = None,
) -> dict[str, float]:
    """Every label-free component of one route, by name (:data:`COMPONENTS`), plus ``anchor_ok``,
    ``n_rows``, ``raw_total`` and ``total``.

    Args:
        path: the route.
        graph: the schema graph (legality, join skeleton, shortest routes).
        matches: the values the question mentions (any table; only the anchor's count).
        evidence: ``{table: score in [0, 1]}`` from :func:`target_evidence`; a missing table is 0.
        count_rows: runs a ``SELECT COUNT(*)`` text; None when it could not run.
        config: weights; ``LabelFreeConfig()`` when None.
        judge: the language-model judge's ``{route: p}`` for this question (a judged question
            log's line), or None. When given, ``judge`` is paid and the other components but
            ``legal`` are scaled by ``config.heuristics_with_judge`` (module docstring).

    Returns:
        Floats. ``anchor_ok`` is 1.0 when the anchor is right (module docstring), ``n_rows`` the
        count of the filtered skeleton (-1 when it was not run or could not run).

    An illegal route gets only ``legal``: its skeleton is not run.
    """
    cfg = config or LabelFreeConfig()
    comp = {k: 0.0 for k in COMPONENTS}
    comp["anchor_ok"], comp["n_rows"] = 0.0, -1.0
    if not graph.is_legal(path):
        comp["legal"] = cfg.illegal_penalty
    else:
        comp["detour"] = -cfg.detour_penalty * detour_hops(graph, path)
        comp["target_evidence"] = cfg.target_weight * float(evidence.get(path.target, 0.0))
        mine = sorted((m for m in matches if m.table == path.anchor), key=lambda m: (-m.score, m.column, str(m.value)))
        n_rows: int | None = None
        if matches:
            for m in mine:  # the best value of the anchor whose filter finds rows on this route
                n = count_rows(filtered_skeleton_sql(graph, path, m))
                if n is not None and n > 0:
                    comp["value_anchor"] = cfg.anchor_weight * min(float(m.score), 1.0)
                    n_rows = n
                    break
                if n_rows is None and n is not None:
                    n_rows = n
        else:
            comp["value_anchor"] = cfg.anchor_weight * float(evidence.get(path.anchor, 0.0) > 0)
        if n_rows is None and not mine and (comp["value_anchor"] > 0 or not cfg.conditional_rows):
            n_rows = count_rows(filtered_skeleton_sql(graph, path))  # no value of the anchor to filter on
        comp["anchor_ok"] = float(comp["value_anchor"] > 0)
        comp["n_rows"] = float(n_rows) if n_rows is not None else -1.0
        if n_rows is not None and 1 <= n_rows <= cfg.row_budget and (comp["anchor_ok"] or not cfg.conditional_rows):
            comp["rows"] = cfg.rows_weight
    if judge is not None and comp["legal"] == 0.0:  # an illegal route gets only the penalty
        comp["judge"] = judge_reward(path, judge, cfg.judge_weight)
        for k in ("value_anchor", "rows", "detour", "target_evidence"):
            comp[k] *= cfg.heuristics_with_judge
    raw = sum(comp[k] for k in COMPONENTS)
    comp["raw_total"] = raw
    comp["total"] = max(-cfg.clip, min(cfg.clip, raw))
    return comp


def label_free_rewards(
    paths: Sequence[JoinPath],
    graph: SchemaGraph,
    matches: Sequence[Sequence[ValueMatch]],
    evidence: Sequence[Mapping[str, float]],
    count_rows: RowCounter,
    config: LabelFreeConfig | None = None,
    judges: Sequence[Mapping[JoinPath, float] | None] | None = None,
) -> list[float]:
    """Batch form: one clipped total per route, shape ``(batch,)``; ``judges`` one per route or None.

    Raises:
        ValueError: when ``paths``, ``matches`` and ``evidence`` differ in length.
    """
    judges = [None] * len(paths) if judges is None else judges
    if not len(paths) == len(matches) == len(evidence) == len(judges):
        raise ValueError(f"paths ({len(paths)}), matches ({len(matches)}), evidence ({len(evidence)}) "
                         f"and judges ({len(judges)}) differ in length")
    return [
        label_free_components(p, graph, m, e, count_rows, config, j)["total"]
        for p, m, e, j in zip(paths, matches, evidence, judges, strict=True)
    ]
