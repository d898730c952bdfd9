"""Rule-based repair of a generated query from the schema and the question, before it is executed.

A small generator often writes the right column under the wrong table of its own join
(``Orders.UnitPrice`` where the query joins ``"Order Details"``, which holds ``UnitPrice``), a
near-miss of a column name, or filters a linked value on the wrong column of the right table
(``Categories.CategoryID = 'Produce'`` where the value is a ``CategoryName``). Each of these is a
query that fails or returns nothing, and each can be fixed from the schema and the question's
value linking alone, without another model call. Rules 5-7 also read the question's words where
a small model ignores them: a bound's strictness, "who", "how many units". This is the
rule-based analogue of the correction step of text-to-SQL pipelines (DIN-SQL's self-correction,
CHESS's revision agent), in the spirit of PICARD's rejection of references to columns a table
lacks (Scholak et al., 2021); it runs on finished queries, so it works with any decoding.

Eight rules, each applied only when its answer is unique:

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

5. **Strictness from the question**: ``c >= 80`` where the question says "above 80" (more than,
   over, exceeding, 超过, 大于 ...) becomes ``c > 80``, and ``c > 80`` where it says "at least 80"
   (no less than, 80 or more, 至少, 不少于 ...) becomes ``c >= 80``; the same for ``<`` and
   ``<=``. Only a number the question writes is touched, and only its strictness, never the
   direction. 以上 and 以下 are left alone: Chinese uses them both ways.
6. **"Who" asks for a name**: a question that asks who (who, whom, whose, 谁) answered by one
   plain column that no person is named by, a key or a contact detail or role
   (``Customers.ContactTitle``, ``Customers.CustomerID``, ``Employee.Email``), gets the table's
   name column instead: the one whose other words the question uses ("the contact" ->
   ``ContactName``), else the first in the table's order. Other columns are left: ``Track.Composer``
   answers "Who wrote Stairway to Heaven?". Split person names are rule 4's.
7. **Units are summed**: "how many units", "多少件" answered by a lone ``COUNT(...)`` over tables
   of which exactly one has a numeric quantity column (``"Order Details".Quantity``) becomes
   ``SUM`` of that column: counting order lines is not counting the units on them.
8. **The answer is on the route's target**: given the routed path's ``target``, a query over two
   or more tables that returns one plain column of another of them (``Products.ProductName`` for
   "What kinds of products does Leka Trading supply?" routed to ``Categories``) returns the
   target's column of that name when it has one, else the target's name column (as rule 6
   chooses it). A router's target is the table the answer comes from.

A query that parses and references only existing columns, and that no rule changes, is returned
unchanged, character for character; so is one sqlglot cannot parse.

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

from core.schema import Column, Schema, Table, humanize
from core.sqlite import sql_ident
from core.values import ValueMatch, name_halves
from data_pipeline.entities import key_columns

MIN_NAME_SIMILARITY = 85.0
"""Rule 2's least rapidfuzz ``fuzz.ratio`` (0-100) between a written and a real column name."""


@dataclass(frozen=True)
class ColumnRepair:
    """One changed column reference: ``before`` and ``after`` as the query writes them, and the rule."""

    before: str
    after: str
    rule: str  # requalified, closest name, linked value, whole name, strictness, who, units, route target

    def __str__(self) -> str:
        return f"{self.before} -> {self.after} ({self.rule})"


@dataclass(frozen=True)
class RepairedSQL:
    """A query after :func:`repair_sql`: ``sql`` (the input itself when ``repairs`` is empty)."""

    sql: str
    repairs: tuple[ColumnRepair, ...] = ()


def repair_sql(sql: str | None, schema: Schema, values: Sequence[ValueMatch] = (), question: str = "",
               target: str | None = None) -> RepairedSQL:  # fmt: skip
    """``sql`` with its column references repaired against ``schema`` by the module's eight rules.

    Args:
        sql: one SQLite query (``None`` or empty is returned as ``""``).
        schema: the database's schema; table and column names compare case-insensitively, as
            SQLite's do.
        values: the question's value matches (``core.values.ValueIndex.lookup``), for rule 3;
            every match counts, not only the one a prompt lists.
        question: the question, for rules 4-7 (a half of a name the question asks for is kept;
            its comparison words, "who", "units").
        target: the routed path's target table, for rule 8 (None: rule 8 is off).

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
            col.set("table", _ident(spelled[new_q]))
            col.set("this", _ident(columns_of[owner][name]))
            repairs.append(ColumnRepair(before, written(col), "requalified"))
            continue
        if owners:
            continue  # several joined tables hold it: ambiguous
        best = _closest(name, list(columns_of[table]))
        if best is not None:
            col.set("this", _ident(columns_of[table][best]))
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
            col.set("table", _ident(spelled[new_q]))
            col.set("this", _ident(columns_of[t].get(c, c)))
            repairs.append(ColumnRepair(before, written(col), "linked value"))
    for rule in (_on_target, _whole_name, _who_name, _summed_units):
        change = rule(tree, schema, question, target)
        if change is not None:
            repairs.append(change)
    repairs.extend(_strictness(tree, question))
    if not repairs:
        return RepairedSQL(sql)
    return RepairedSQL(tree.sql(dialect="sqlite"), tuple(repairs))


_FIRST_WORDS = re.compile(r"first ?names?|given names?|forenames?|名字叫")
_LAST_WORDS = re.compile(r"last ?names?|surnames?|family names?|姓氏|姓什么")


def _lone_column(tree: Any, schema: Schema) -> tuple[Any, Table] | None:
    """The one plain column a SELECT without GROUP BY returns, and its schema table; else None."""
    from sqlglot import exp

    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or tree.args.get("group"):
        return None
    col = tree.expressions[0]
    if not isinstance(col, exp.Column) or col.args.get("db") is not None:
        return None
    outer = _outer_tables(tree)
    if outer is None:
        return None
    q = col.table.lower()
    tables = set(outer.values())
    table = outer.get(q) if q else (next(iter(tables)) if len(tables) == 1 else None)
    if table is None:
        return None
    return col, _table(schema, table)


def _table(schema: Schema, name: str) -> Table:
    """The schema's table called ``name``, compared case-insensitively as SQLite does (it exists)."""
    return next(t for t in schema.tables if t.name.lower() == name.lower())


def _outer_tables(tree: Any) -> dict[str, str] | None:
    """Qualifier -> table name (both lower case) of a SELECT's FROM and JOINs; None when one is
    a subquery (its columns are its own SELECT list's)."""
    from sqlglot import exp

    from_ = tree.args.get("from_") or tree.args.get("from")  # the key's name depends on sqlglot's version
    sources = [from_.this if from_ is not None else None, *(j.this for j in tree.args.get("joins") or [])]
    if not all(isinstance(x, exp.Table) for x in sources):
        return None
    return {x.alias_or_name.lower(): x.name.lower() for x in sources}


def _ident(name: str) -> Any:
    """``name`` as a sqlglot identifier, double-quoted where SQLite needs it (``"Order Details"``)."""
    from sqlglot import exp

    return exp.to_identifier(name, quoted=sql_ident(name) != name)


def _spelled(tree: Any, qualifier: str) -> str:
    """How the query writes the table or alias whose lower-case form is ``qualifier``."""
    from sqlglot import exp

    return next(x.alias_or_name for x in tree.find_all(exp.Table) if x.alias_or_name.lower() == qualifier)


def _set_columns(col: Any, names: Sequence[str], qualifier: str | None = None) -> list[Any]:
    """Copies of the column ``col`` naming each of ``names``, under ``qualifier`` if given (else
    ``col``'s own)."""
    out = []
    for n in names:
        c = col.copy()
        c.set("this", _ident(n))
        if qualifier is not None:
            c.set("table", _ident(qualifier))
        out.append(c)
    return out


def _whole_name(tree: Any, schema: Schema, question: str | None, target: str | None = None) -> ColumnRepair | None:
    """Rule 4 on ``tree`` (changed in place): a lone half of a split name becomes both halves."""
    found = _lone_column(tree, schema)
    if found is None:
        return None
    col, t = found
    halves = name_halves([c.name for c in t.columns if c.is_text])
    if halves is None or col.name.lower() not in {h.lower() for h in halves}:
        return None
    asked = t.column(next(h for h in halves if h.lower() == col.name.lower()))
    said = (question or "").casefold()
    words = _FIRST_WORDS if asked.name == halves[0] else _LAST_WORDS
    if humanize(asked.name) in said or (len(asked.zh) >= 2 and asked.zh in said) or words.search(said):
        return None  # "What is Davolio's first name?", "Nancy's surname" ask for the half
    before = col.sql(dialect="sqlite")
    both = _set_columns(col, halves)
    tree.set("expressions", both)
    return ColumnRepair(before, ", ".join(c.sql(dialect="sqlite") for c in both), "whole name")


_NOT_A_PERSON = frozenset(("title", "email", "mail", "phone", "fax", "address", "postal", "zip", "city", "country",
                           "region", "state"))  # fmt: skip
"""Words of a column name that mark a contact detail or a role: no answer to "who" (rule 6)."""
_WHO = re.compile(r"\b(?:who|whom|whose)\b|谁")
_ZH_NAME = ("名称", "姓名", "名字")


def _is_name_column(column: Column) -> bool:
    """A text column that names its row: ``CompanyName``, ``first_name``, a sidecar's 药品名称."""
    return column.is_text and (
        "name" in humanize(column.name).split()
        or any(w in column.zh for w in _ZH_NAME)
        or bool(re.search(r"\bname\b", column.description.lower()))
    )


def _name_columns(t: Table, schema: Schema, question: str | None) -> list[str]:
    """The column(s) that name a row of ``t``: both halves of a split person name, else the name
    column whose other words the question uses ("contact" -> ``ContactName``), else the first
    name column in the table's order; [] when ``t`` has no non-key name column."""
    keys = key_columns(schema, t)
    names = [c for c in t.columns if c.name not in keys and _is_name_column(c)]
    if not names:
        return []
    halves = name_halves([c.name for c in t.columns if c.is_text])
    if halves is not None:
        return list(halves)
    said = set(re.findall(r"\w+", (question or "").casefold()))
    spoken = [c for c in names if {w for w in humanize(c.name).split() if w != "name"} & said]
    return [(spoken if len(spoken) == 1 else names)[0].name]


def _on_target(tree: Any, schema: Schema, question: str | None, target: str | None = None) -> ColumnRepair | None:
    """Rule 8 on ``tree`` (changed in place): the lone answer column moved onto the route's target."""
    if not target:
        return None
    found = _lone_column(tree, schema)
    outer = _outer_tables(tree) if found is not None else None
    if found is None or outer is None or len(outer) < 2:
        return None
    col, t = found
    if t.name.lower() == target.lower():
        return None
    on_target = [q for q, name in outer.items() if name == target.lower()]
    if len(on_target) != 1:
        return None  # the target is not joined, or joined twice (which one?)
    goal = _table(schema, target)
    same = [c.name for c in goal.columns if c.name.lower() == col.name.lower()]
    chosen = same or _name_columns(goal, schema, question)
    if not chosen:
        return None
    before = col.sql(dialect="sqlite")
    new = _set_columns(col, chosen, _spelled(tree, on_target[0]))
    tree.set("expressions", new)
    return ColumnRepair(before, ", ".join(c.sql(dialect="sqlite") for c in new), "route target")


def _who_name(tree: Any, schema: Schema, question: str | None, target: str | None = None) -> ColumnRepair | None:
    """Rule 6 on ``tree`` (changed in place): "who" answered by a column that is not a name."""
    if not _WHO.search((question or "").casefold()):
        return None
    found = _lone_column(tree, schema)
    if found is None:
        return None
    col, t = found
    asked = next((c for c in t.columns if c.name.lower() == col.name.lower()), None)
    if asked is None or _is_name_column(asked):
        return None
    keys = key_columns(schema, t)
    if asked.name not in keys and not set(humanize(asked.name).split()) & _NOT_A_PERSON:
        return None  # Track.Composer, Album.Artist: people may be named there
    chosen = _name_columns(t, schema, question)
    if not chosen:
        return None
    before = col.sql(dialect="sqlite")
    new = _set_columns(col, chosen)
    tree.set("expressions", new)
    return ColumnRepair(before, ", ".join(c.sql(dialect="sqlite") for c in new), "who")


_UNITS = re.compile(r"\b(?:units?|pieces?)\b|多少件|几件|件数")
_QUANTITY = re.compile(r"quantity|qty", re.IGNORECASE)


def _summed_units(tree: Any, schema: Schema, question: str | None, target: str | None = None) -> ColumnRepair | None:
    """Rule 7 on ``tree`` (changed in place): units asked for, order lines counted."""
    from sqlglot import exp

    if not _UNITS.search((question or "").casefold()):
        return None
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or tree.args.get("group"):
        return None
    count = tree.expressions[0]
    if not isinstance(count, exp.Count):
        return None
    outer = _outer_tables(tree)
    if outer is None:
        return None
    if any("units" in humanize(c.name).split() for c in tree.find_all(exp.Column)):
        return None  # "more than 10 units in stock": the units are a column the query already uses
    quantities = [(q, c) for q, table in outer.items() for c in _table(schema, table).columns
                  if c.is_numeric and _QUANTITY.search(c.name)]  # fmt: skip
    if len(quantities) != 1:
        return None
    q, c = quantities[0]
    total = exp.Sum(this=exp.column(_ident(c.name), table=_ident(_spelled(tree, q))))
    before = count.sql(dialect="sqlite")
    tree.set("expressions", [total])
    return ColumnRepair(before, total.sql(dialect="sqlite"), "units")


# words just before a number (or just after it) that bound it: (direction, strict), inclusive first
# since "no more than" ends in "more than" and 不超过 in 超过
_BOUND_BEFORE = (
    (re.compile(r"(?:at least|no less than|not less than|no fewer than|至少|不少于|不低于|不小于|最少)\W{0,3}$"), (">", False)),
    (re.compile(r"(?:at most|no more than|not more than|不超过|至多|不高于|不大于|最多)\W{0,3}$"), ("<", False)),
    (re.compile(r"(?:above|over|more than|greater than|higher than|larger than|exceed(?:s|ing|ed)?|"
                r"超过|大于|高于|多于)\W{0,3}$"), (">", True)),
    (re.compile(r"(?:below|under|less than|fewer than|lower than|smaller than|低于|小于|少于)\W{0,3}$"), ("<", True)),
)  # fmt: skip
_BOUND_AFTER = (
    (re.compile(r"^\W{0,3}or (?:more|above|over|higher|greater)\b"), (">", False)),
    (re.compile(r"^\W{0,3}or (?:less|fewer|below|under|lower)\b"), ("<", False)),
)
_BOUNDS = {"GT": (">", True), "GTE": (">", False), "LT": ("<", True), "LTE": ("<", False)}
_BOUND_NODE = {v: k for k, v in _BOUNDS.items()}


def _said_bound(before: str, after: str) -> tuple[str, bool] | None:
    """(direction, strict) the words around a number say, or None."""
    for pattern, bound in _BOUND_AFTER:
        if pattern.search(after):
            return bound
    for pattern, bound in _BOUND_BEFORE:
        if pattern.search(before):
            return bound
    return None


def _strictness(tree: Any, question: str | None) -> list[ColumnRepair]:
    """Rule 5 on ``tree`` (changed in place): a bound's strictness as the question words it."""
    from sqlglot import exp

    said = (question or "").casefold()
    out: list[ColumnRepair] = []
    for cmp in list(tree.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE)):
        lit = cmp.expression
        if not (isinstance(cmp.this, exp.Column) and isinstance(lit, exp.Literal) and not lit.is_string):
            continue
        direction, strict = _BOUNDS[type(cmp).__name__]
        bounds = set()
        for m in re.finditer(rf"(?<![\d.]){re.escape(lit.this)}(?![\d.])", said):
            before = said[max(0, m.start() - 20) : m.start()].rstrip("$¥€£ ")
            bounds.add(_said_bound(before, said[m.end() : m.end() + 12]))
        if len(bounds) != 1:
            continue
        bound = bounds.pop()
        if bound is None or bound[0] != direction or bound[1] == strict:
            continue
        flipped = getattr(exp, _BOUND_NODE[bound])(this=cmp.this, expression=cmp.expression)
        before_sql = cmp.sql(dialect="sqlite")
        cmp.replace(flipped)
        out.append(ColumnRepair(before_sql, flipped.sql(dialect="sqlite"), "strictness"))
    return out


def _closest(name: str, candidates: list[str]) -> str | None:
    """The one candidate whose rapidfuzz ratio to ``name`` is highest and >= MIN_NAME_SIMILARITY, else None."""
    from rapidfuzz import fuzz, process

    scored = process.extract(name, candidates, scorer=fuzz.ratio, limit=2)
    if not scored or scored[0][1] < MIN_NAME_SIMILARITY:
        return None
    if len(scored) > 1 and scored[1][1] == scored[0][1]:
        return None
    return scored[0][0]
