"""Schema-aware repair of a generated query's column references, before it is executed.

A small generator often writes the right column under the wrong table of its own join
(``Orders.UnitPrice`` where the query joins ``"Order Details"``, which holds ``UnitPrice``), a
near-miss of a column name, or filters a linked value on the wrong column of the right table
(``Categories.CategoryID = 'Produce'`` where the value is a ``CategoryName``). Each of these is a
query that fails or returns nothing, and each can be fixed from the schema and the question's
value linking alone, without another model call. This is the rule-based analogue of the
correction step of text-to-SQL pipelines (DIN-SQL's self-correction, CHESS's revision agent),
in the spirit of PICARD's rejection of references to columns a table lacks (Scholak et al.,
2021); it runs on finished queries, so it works with any decoding.

Four rules, each applied only when its answer is unique:

1. **Requalify**: ``T.c`` where the table ``T`` of the query has no column ``c`` but exactly one
   other table of the query does: ``c`` is qualified with that table.
2. **Closest name**: ``T.c`` where no table of the query has ``c``: the column of ``T`` whose name
   is closest to ``c`` (rapidfuzz ratio >= 85, no tie) replaces it.
3. **Linked value's column**: ``T.c = 'v'`` where the question's value linking found ``v`` in
   another column ``T2.c2`` of a table of the query, and neither in ``T.c`` nor in the column
   ``T.c`` references by a foreign key: the comparison becomes ``T2.c2 = 'v'``.
4. **Whole name**: a query that returns one column, one half of a person's name split over two
   columns (``Employees.FirstName``), when the question does not name that half ("last name",
   its Chinese name): both halves are returned, first name first. "Who handles Boston?" asks for
   people, and a person is named by the whole name, as the data's answer columns do
   (:func:`core.values.name_halves`).

A query that parses and references only existing columns is returned unchanged, character for
character; so is one sqlglot cannot parse.

>>> from core.schema import Column, Schema, Table
>>> s = Schema("shop", (Table("Orders", (Column("OrderID"), Column("ShipCity"))),
...                     Table("Order Details", (Column("OrderID"), Column("UnitPrice")))), ())
>>> r = repair_sql('SELECT Orders.UnitPrice FROM Orders JOIN "Order Details" '
...                'ON "Order Details".OrderID = Orders.OrderID', s)
>>> r.sql
'SELECT "Order Details".UnitPrice FROM Orders JOIN "Order Details" ON "Order Details".OrderID = Orders.OrderID'
>>> [str(x) for x in r.repairs]
['Orders.UnitPrice -> "Order Details".UnitPrice (requalified)']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.schema import Schema, humanize
from core.sqlite import sql_ident
from core.values import ValueMatch, name_halves

MIN_NAME_SIMILARITY = 85.0
"""Rule 2's least rapidfuzz ``fuzz.ratio`` (0-100) between a written and a real column name."""


@dataclass(frozen=True)
class ColumnRepair:
    """One changed column reference: ``before`` and ``after`` as the query writes them, and the rule."""

    before: str
    after: str
    rule: str  # "requalified", "closest name" or "linked value"

    def __str__(self) -> str:
        return f"{self.before} -> {self.after} ({self.rule})"


@dataclass(frozen=True)
class RepairedSQL:
    """A query after :func:`repair_sql`: ``sql`` (the input itself when ``repairs`` is empty)."""

    sql: str
    repairs: tuple[ColumnRepair, ...] = ()


def repair_sql(sql: str | None, schema: Schema, values: Sequence[ValueMatch] = (), question: str = "") -> RepairedSQL:
    """``sql`` with its column references repaired against ``schema`` by the module's four rules.

    Args:
        sql: one SQLite query (``None`` or empty is returned as ``""``).
        schema: the database's schema; table and column names compare case-insensitively, as
            SQLite's do.
        values: the question's value matches (``core.values.ValueIndex.lookup``), for rule 3;
            every match counts, not only the one a prompt lists.
        question: the question, for rule 4 (a half of a name the question asks for is kept).

    Returns:
        The repaired query and what changed. Never raises: a query sqlglot cannot read, or one
        that names a table the schema lacks, is returned unchanged.
    """
    if not sql:
        return RepairedSQL(sql or "")
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError, ValueError):
        return RepairedSQL(sql)
    if tree is None:
        return RepairedSQL(sql)
    columns_of = {t.name.lower(): {c.name.lower(): c.name for c in t.columns} for t in schema.tables}
    # qualifier (alias or table name, lower case) -> the schema's table name, lower case
    qualifiers: dict[str, str] = {}
    spelled: dict[str, str] = {}  # qualifier -> as the query writes it
    for t in tree.find_all(exp.Table):
        if t.name.lower() not in columns_of:
            return RepairedSQL(sql)  # a table the schema lacks (or a CTE): not ours to second-guess
        qualifiers[t.alias_or_name.lower()] = t.name.lower()
        spelled[t.alias_or_name.lower()] = t.alias_or_name
    if not qualifiers:
        return RepairedSQL(sql)

    def qualifier_for(table: str) -> str | None:
        found = [q for q, t in qualifiers.items() if t == table]
        return found[0] if len(found) == 1 else None

    def ident(name: str) -> exp.Identifier:
        return exp.to_identifier(name, quoted=sql_ident(name) != name)

    def written(col: exp.Column) -> str:
        return col.sql(dialect="sqlite")

    repairs: list[ColumnRepair] = []
    for col in list(tree.find_all(exp.Column)):
        q = col.table.lower()
        if not q or col.args.get("db") is not None or q not in qualifiers:
            continue
        table, name = qualifiers[q], col.name.lower()
        if name in columns_of[table]:
            continue
        before = written(col)
        owners = {t for t in set(qualifiers.values()) if name in columns_of[t]}
        if len(owners) == 1:
            owner = owners.pop()
            new_q = qualifier_for(owner)
            if new_q is None:
                continue
            col.set("table", ident(spelled[new_q]))
            col.set("this", ident(columns_of[owner][name]))
            repairs.append(ColumnRepair(before, written(col), "requalified"))
            continue
        if owners:
            continue  # several joined tables hold it: ambiguous
        best = _closest(name, list(columns_of[table]))
        if best is not None:
            col.set("this", ident(columns_of[table][best]))
            repairs.append(ColumnRepair(before, written(col), "closest name"))

    references = {(fk.table.lower(), c.lower()): (fk.ref_table.lower(), rc.lower())
                  for fk in schema.foreign_keys for c, rc in fk.pairs}
    by_value: dict[str, set[tuple[str, str]]] = {}
    for m in values:
        by_value.setdefault(str(m.value).casefold(), set()).add((m.table.lower(), m.column.lower()))
    if by_value:
        for eq in list(tree.find_all(exp.EQ)):
            col, lit = eq.this, eq.expression
            if isinstance(lit, exp.Column) and isinstance(col, exp.Literal):
                col, lit = lit, col
            if not (isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and lit.is_string):
                continue
            q = col.table.lower()
            if q not in qualifiers or col.args.get("db") is not None:
                continue
            homes = by_value.get(lit.this.casefold(), set())
            here = (qualifiers[q], col.name.lower())
            if not homes or here in homes or references.get(here) in homes:
                continue  # the value is this column's, or the one its foreign key references
            joined = [(t, c, q) for t, c in sorted(homes) if (q := qualifier_for(t)) is not None]
            if len(joined) != 1:
                continue
            t, c, new_q = joined[0]
            before = written(col)
            col.set("table", ident(spelled[new_q]))
            col.set("this", ident(columns_of[t].get(c, c)))
            repairs.append(ColumnRepair(before, written(col), "linked value"))
    whole = _whole_name(tree, schema, question)
    if whole is not None:
        repairs.append(whole)
    if not repairs:
        return RepairedSQL(sql)
    return RepairedSQL(tree.sql(dialect="sqlite"), tuple(repairs))


_FIRST_WORDS = re.compile(r"first ?names?|given names?|forenames?|名字叫")
_LAST_WORDS = re.compile(r"last ?names?|surnames?|family names?|姓氏|姓什么")


def _whole_name(tree: Any, schema: Schema, question: str | None) -> ColumnRepair | None:
    """Rule 4 on ``tree`` (changed in place): a lone half of a split name becomes both halves."""
    from sqlglot import exp

    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or tree.args.get("group"):
        return None
    col = tree.expressions[0]
    if not isinstance(col, exp.Column) or col.args.get("db") is not None:
        return None
    from_ = tree.args.get("from_") or tree.args.get("from")  # the key's name depends on sqlglot's version
    sources = [from_.this if from_ is not None else None, *(j.this for j in tree.args.get("joins") or [])]
    if not all(isinstance(x, exp.Table) for x in sources):
        return None  # a subquery's columns are its own SELECT list's: LastName may not be there
    outer = {x.alias_or_name.lower(): x.name.lower() for x in sources}
    q = col.table.lower()
    tables = set(outer.values())
    table = outer.get(q) if q else (next(iter(tables)) if len(tables) == 1 else None)
    if table is None:
        return None
    t = next(t for t in schema.tables if t.name.lower() == table)
    halves = name_halves([c.name for c in t.columns if c.is_text])
    if halves is None or col.name.lower() not in {h.lower() for h in halves}:
        return None
    asked = t.column(next(h for h in halves if h.lower() == col.name.lower()))
    said = (question or "").casefold()
    words = _FIRST_WORDS if asked.name == halves[0] else _LAST_WORDS
    if humanize(asked.name) in said or (len(asked.zh) >= 2 and asked.zh in said) or words.search(said):
        return None  # "What is Davolio's first name?", "Nancy's surname" ask for the half
    before = col.sql(dialect="sqlite")
    both = []
    for h in halves:
        c = col.copy()
        c.set("this", exp.to_identifier(h, quoted=sql_ident(h) != h))
        both.append(c)
    tree.set("expressions", both)
    return ColumnRepair(before, ", ".join(c.sql(dialect="sqlite") for c in both), "whole name")


def _closest(name: str, candidates: list[str]) -> str | None:
    """The one candidate whose rapidfuzz ratio to ``name`` is highest and >= MIN_NAME_SIMILARITY, else None."""
    from rapidfuzz import fuzz, process

    scored = process.extract(name, candidates, scorer=fuzz.ratio, limit=2)
    if not scored or scored[0][1] < MIN_NAME_SIMILARITY:
        return None
    if len(scored) > 1 and scored[1][1] == scored[0][1]:
        return None
    return scored[0][0]
