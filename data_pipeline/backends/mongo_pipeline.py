"""Join paths as MongoDB aggregation pipelines, and their safe read-only execution.

**Queries.** A MongoDB query here is the ``aggregate`` command's own shape, as JSON::

    {"aggregate": "Customers", "pipeline": [{"$match": {...}}, {"$lookup": {...}}, ...]}

:func:`check_query` accepts only that: one ``aggregate`` on a named collection whose stages
(recursively inside ``$lookup``, ``$facet`` and ``$unionWith``) are all in :data:`READ_STAGES`.
``$out`` and ``$merge`` are refused as write stages, write commands (``insert``, ``update``,
``delete``, ``drop``...) as write commands, and server-side JavaScript (``$function``,
``$accumulator``, ``$where``) by name; each with :class:`~core.errors.QueryRejected`.

**Paths as pipelines.** :class:`PathQuery` is what the gold SQL of a routed question says,
independent of the language: the tables of the path and how each joins an earlier one, the
conditions, and the selected output. :func:`build_pipeline` turns it into stages:

1. ``$match`` of the anchor's conditions on the anchor collection (it can use an index);
2. with joins: ``$replaceRoot`` to ``{t0: <anchor document>}``, then per hop a ``$match`` that
   the joining field is not null (SQL never joins on NULL; ``$lookup`` would match null with
   missing), ``$lookup`` (localField/foreignField) ``as: t<i>`` and ``$unwind`` (one document per
   joined pair: the inner join's multiplicity), then the conditions on that table;
3. the output: ``$project`` of the selected fields, after a ``$group`` on them for ``DISTINCT``;
   aggregates as one ``$facet`` branch each (``COUNT(DISTINCT x)`` groups by ``x`` and counts
   the groups; ``SUM`` adds only numbers), each ``$unwind``-ed keeping an empty branch, then a
   ``$project`` with SQL's value for no input (``COUNT`` 0, ``SUM``/``AVG``/``MIN``/``MAX``
   NULL): exactly one row, as SQL gives, also when nothing matches.

Comparisons follow MongoDB's type brackets (``{"$gte": 18}`` never matches a text value, where
SQLite would compare text above every number); SQL NULL is a BSON ``null``.

:func:`plan_query` builds a :class:`PathQuery` from a data set sample's structured fields (path,
entities and ``meta["plan"]``, see :mod:`data_pipeline.gold`); :func:`translate_sql` from the
restricted SQL those plans produce (one SELECT, inner equi-joins, ``AND``-ed ``column op
literal`` conditions, plain columns or ``COUNT``/``SUM``/``AVG``/``MIN``/``MAX``) via sqlglot.

**Execution** (:func:`execute_pipeline`) returns the SQLite backend's
:class:`~data_pipeline.backends.sqlite.ExecutionResult`, with rows as tuples in output-field
order, so the SQL result comparison (``rewards.sql_execution``) applies unchanged. Time is
limited twice, by pymongo's client-side timeout: the server gets ``maxTimeMS`` (the time left
minus the round trip) and stops the pipeline itself (``error`` ``"timed out after 5 s"``); a
server that does not (some check the limit only between stages) is abandoned when the time is
up (``"... client deadline ..."``), though it may keep working until its stage ends.

Every command a query sends carries that ``maxTimeMS``: the whole result (at most
``max_rows + 1`` documents) is asked for in the ``aggregate`` reply itself (``batchSize``), so
no ``getMore`` (which pymongo sends without a time limit) runs the rest of the pipeline with no
limit on the server after the client has given up. Each query is tagged with the ``comment``
:data:`QUERY_COMMENT` so an administrator can find it in ``currentOp``.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pymongo
import sqlglot
from bson import Binary, Decimal128, ObjectId
from bson.errors import BSONError
from pymongo.database import Database
from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
)
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from data_pipeline.backends.sqlite import ExecutionResult
from core.errors import ConfigError, DataError, QueryRejected, SchemaError
from data_pipeline.gold import Plan
from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import Column, Schema, Table

READ_STAGES = frozenset(
    {
        "$match", "$project", "$addFields", "$set", "$unset", "$lookup", "$unwind", "$group", "$sort",
        "$limit", "$skip", "$count", "$replaceRoot", "$replaceWith", "$facet", "$bucket", "$bucketAuto",
        "$sortByCount", "$unionWith", "$sample", "$graphLookup", "$redact", "$densify", "$fill",
        "$setWindowFields",
    }
)  # fmt: skip
"""Stages a query may use; anything else is refused (admin stages such as ``$currentOp`` included)."""

WRITE_STAGES = frozenset({"$out", "$merge"})
"""Stages that write; refused by name."""

WRITE_COMMANDS = frozenset(
    {
        "insert", "update", "delete", "findAndModify", "drop", "dropDatabase", "create", "createIndexes",
        "dropIndexes", "renameCollection", "collMod", "bulkWrite", "mapReduce", "eval", "applyOps",
        "createUser", "dropUser", "shutdown",
    }
)  # fmt: skip
"""Commands refused by name when they appear as a query's command key."""

JAVASCRIPT_OPERATORS = frozenset({"$function", "$accumulator", "$where"})
"""Operators that run JavaScript on the server; refused anywhere in a query."""

OPS = {"=": "$eq", "!=": "$ne", "<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte"}
"""SQL comparison operators and their MongoDB query operators."""

AGGREGATES = ("count", "sum", "avg", "min", "max")

QUERY_COMMENT = "route2sql generated query"
"""``comment`` of every aggregation :func:`execute_pipeline` sends."""


# ---------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class MongoQuery:
    """One aggregation: ``collection`` and its ``pipeline`` (a list of one-key stage documents)."""

    collection: str
    pipeline: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"aggregate": self.collection, "pipeline": self.pipeline}

    def to_json(self) -> str:
        """Compact JSON, non-ASCII kept: ``{"aggregate": ..., "pipeline": [...]}``."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


def check_query(query: str | Mapping[str, Any] | MongoQuery) -> MongoQuery:
    """Accept exactly one read-only aggregation (JSON text, dict or :class:`MongoQuery`).

    >>> check_query('{"aggregate": "Orders", "pipeline": [{"$match": {"ShipVia": 1}}]}').collection
    'Orders'
    >>> check_query({"aggregate": "Orders", "pipeline": [{"$match": {}}, {"$out": "copy"}]})
    Traceback (most recent call last):
    ...
    core.errors.QueryRejected: write stage $out is not allowed (stage 2); only read stages may run
    >>> check_query({"delete": "Orders", "deletes": []})
    Traceback (most recent call last):
    ...
    core.errors.QueryRejected: write command delete is not allowed; only an aggregate may run

    Raises:
        QueryRejected: with a short reason: not JSON, not an object, a command other than
            ``aggregate``, no collection or pipeline, a stage that is not one key, a write stage
            (``$out``, ``$merge``), a stage outside :data:`READ_STAGES`, or JavaScript.
    """
    if isinstance(query, MongoQuery):
        query = query.to_dict()
    if isinstance(query, str):
        if not query.strip():
            raise QueryRejected("empty query")
        try:
            query = json.loads(query)
        except json.JSONDecodeError as exc:
            raise QueryRejected(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(query, Mapping):
        raise QueryRejected(f'expected an object {{"aggregate": ..., "pipeline": [...]}}, got {type(query).__name__}')
    for key in query:
        if key in WRITE_COMMANDS:
            raise QueryRejected(f"write command {key} is not allowed; only an aggregate may run")
    unknown = sorted(set(query) - {"aggregate", "pipeline"})
    if unknown:
        raise QueryRejected(f"unknown field {unknown[0]!r}; a query is {{\"aggregate\": collection, \"pipeline\": [...]}}")
    coll = query.get("aggregate")
    if not isinstance(coll, str) or not coll:
        raise QueryRejected('field "aggregate" must name a collection')
    pipeline = query.get("pipeline")
    if not isinstance(pipeline, list):
        raise QueryRejected('field "pipeline" must be a list of stages')
    check_pipeline(pipeline)
    return MongoQuery(coll, [dict(s) for s in pipeline])


def check_pipeline(pipeline: Sequence[Any], where: str = "") -> None:
    """Refuse any stage (at any depth) that is not a read stage; see :func:`check_query`.

    Raises:
        QueryRejected: naming the stage and its position (``stage 2``, ``stage 1 > $lookup stage 3``).
    """
    for i, stage in enumerate(pipeline, 1):
        at = f"{where}stage {i}"
        if not isinstance(stage, Mapping) or len(stage) != 1:
            raise QueryRejected(f"{at} must be an object with exactly one stage name")
        name, spec = next(iter(stage.items()))
        if name in WRITE_STAGES:
            raise QueryRejected(f"write stage {name} is not allowed ({at}); only read stages may run")
        if name not in READ_STAGES:
            raise QueryRejected(f"stage {name} is not allowed ({at}); allowed: {', '.join(sorted(READ_STAGES))}")
        _check_no_javascript(spec, at)
        for sub in _subpipelines(name, spec):
            check_pipeline(sub, f"{at} > {name} ")


def _subpipelines(name: str, spec: Any) -> list[Sequence[Any]]:
    if name in ("$lookup", "$unionWith") and isinstance(spec, Mapping) and "pipeline" in spec:
        sub = spec["pipeline"]
        if not isinstance(sub, list):
            raise QueryRejected(f"{name}.pipeline must be a list of stages")
        return [sub]
    if name == "$facet" and isinstance(spec, Mapping):
        subs = list(spec.values())
        if not all(isinstance(s, list) for s in subs):
            raise QueryRejected("$facet outputs must be lists of stages")
        return subs
    return []


def _check_no_javascript(value: Any, at: str) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if k in JAVASCRIPT_OPERATORS:
                raise QueryRejected(f"{k} runs JavaScript on the server and is not allowed ({at})")
            _check_no_javascript(v, at)
    elif isinstance(value, list):
        for v in value:
            _check_no_javascript(v, at)


def collections_used(query: MongoQuery) -> set[str]:
    """Every collection the query reads: its own and each ``$lookup``/``$graphLookup``/``$unionWith`` source."""
    found = {query.collection}

    def walk(stages: Iterable[Any]) -> None:
        for stage in stages:
            if not isinstance(stage, Mapping):
                continue
            for name, spec in stage.items():
                if name in ("$lookup", "$graphLookup") and isinstance(spec, Mapping) and isinstance(spec.get("from"), str):
                    found.add(spec["from"])
                if name == "$unionWith":
                    coll = spec if isinstance(spec, str) else spec.get("coll") if isinstance(spec, Mapping) else None
                    if isinstance(coll, str):
                        found.add(coll)
                if isinstance(spec, Mapping) or name == "$facet":
                    for sub in _subpipelines(name, spec):
                        walk(sub)

    walk(query.pipeline)
    return found


# ---------------------------------------------------------------------------- path queries


@dataclass(frozen=True)
class Join:
    """Table ``index`` joins the earlier table ``left`` on ``left.local = index.foreign``."""

    table: str
    left: int
    local: str
    foreign: str


@dataclass(frozen=True)
class Condition:
    """``tables[table].column <op> value`` with ``op`` in :data:`OPS`, or ``IS NULL``/``IS NOT NULL`` (value None)."""

    table: int
    column: str
    op: str
    value: Any = None


@dataclass(frozen=True)
class Output:
    """One selected item: a column (``func`` None) or an aggregate of one (``column`` None: ``COUNT(*)``)."""

    table: int | None
    column: str | None
    func: str | None = None
    distinct: bool = False


@dataclass(frozen=True)
class PathQuery:
    """A query over a join path, independent of SQL or MongoDB.

    ``tables[0]`` is the anchor; ``joins[i]`` brings in ``tables[i + 1]``. ``distinct`` is
    ``SELECT DISTINCT``. Outputs are all columns or all aggregates (no GROUP BY).
    """

    tables: tuple[str, ...]
    joins: tuple[Join, ...]
    where: tuple[Condition, ...]
    select: tuple[Output, ...]
    distinct: bool = False

    def __post_init__(self) -> None:
        if len(self.joins) != len(self.tables) - 1:
            raise ValueError(f"{len(self.tables)} tables need {len(self.tables) - 1} joins, got {len(self.joins)}")
        if not self.select:
            raise ValueError("nothing selected")
        kinds = {o.func is None for o in self.select}
        if len(kinds) > 1:
            raise ValueError("columns and aggregates mixed without GROUP BY")
        for i, j in enumerate(self.joins, 1):
            if not 0 <= j.left < i:
                raise ValueError(f"join {i} refers to table {j.left}, not an earlier one")

    @property
    def aggregates(self) -> bool:
        return self.select[0].func is not None


def path_joins(graph: SchemaGraph, path: JoinPath) -> tuple[Join, ...]:
    """The joins walking ``path`` on its foreign keys (the same keys as ``graph.from_clause``).

    Raises:
        SchemaError: a join on a composite foreign key (a ``$lookup`` here matches one field).
    """
    joins = []
    for i, (left, right, fk) in enumerate(graph.join_conditions(path)):
        if fk.more_pairs:
            raise SchemaError(f"composite foreign key {fk} cannot be joined on MongoDB (one field per join)",
                              where=graph.schema.source or graph.schema.name)
        if fk.table == right and fk.ref_table == left:
            joins.append(Join(right, i, fk.ref_column, fk.column))
        else:
            joins.append(Join(right, i, fk.column, fk.ref_column))
    return tuple(joins)


def plan_query(graph: SchemaGraph, path: JoinPath, plan: Plan, value: Any, second: Any = None) -> PathQuery:
    """The :class:`PathQuery` of :func:`data_pipeline.gold.gold_sql` for the same arguments.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("s", (Table("a", (Column("id", primary_key=True), Column("name"))),
    ...                  Table("b", (Column("id", primary_key=True), Column("a_id"), Column("qty")))),
    ...            (ForeignKey("b", "a_id", "a", "id"),))
    >>> q = plan_query(SchemaGraph(s), JoinPath("a", (), "b"), Plan("agg", "join", "name", num_column="qty", agg="SUM"), "x")
    >>> q.joins, q.where, q.select
    ((Join(table='b', left=0, local='id', foreign='a_id'),), (Condition(table=0, column='name', op='=', value='x'),), (Output(table=1, column='qty', func='sum', distinct=False),))

    Raises:
        DataError: an unknown family, or a ``filter`` plan with no second value.
    """
    tables = path.tables
    t = len(tables) - 1
    where = [Condition(0, plan.entity_column, "=", value)]
    if plan.filter_column is not None:
        if plan.filter_op not in OPS:
            raise DataError(f"plan filter_op must be one of {', '.join(OPS)}, got {plan.filter_op!r}")
        where.append(Condition(t, plan.filter_column, str(plan.filter_op), second))
    if plan.family in ("list", "lookup", "filter"):
        extra = (Output(t, plan.extra_column),) if plan.extra_column is not None else ()
        select, distinct = (Output(t, str(plan.ask_column)), *extra), True
    elif plan.family == "count":
        select, distinct = (Output(t, plan.count_column, "count", distinct=plan.count_column is not None),), False
    elif plan.family == "agg":
        select, distinct = (Output(t, str(plan.num_column), str(plan.agg).lower()),), False
    else:
        raise DataError(f"unknown question family {plan.family!r}")
    return PathQuery(tables, path_joins(graph, path), tuple(where), select, distinct)


def sample_query(sample: Sample, graph: SchemaGraph) -> PathQuery:
    """The :class:`PathQuery` of a data set sample's gold answer.

    From its structured fields when ``meta["plan"]`` is present (entities give the values: the
    anchor entity first, the target condition second), else by :func:`translate_sql` of its SQL.

    Raises:
        DataError: naming the sample when neither route works.
    """
    plan_dict = sample.meta.get("plan") if sample.meta else None
    if plan_dict:
        plan = Plan.from_dict(plan_dict)
        if not sample.entities:
            raise DataError("sample has a plan but no entities", where=sample.id)
        second = sample.entities[1].value if plan.filter_column is not None and len(sample.entities) > 1 else None
        if plan.filter_column is not None and len(sample.entities) < 2:
            raise DataError("filter sample lacks its second entity", where=sample.id)
        return plan_query(graph, sample.path, plan, sample.entities[0].value, second)
    try:
        return translate_sql(sample.sql, graph.schema)
    except DataError as exc:
        raise DataError(exc.message, where=sample.id) from None


def _name(query: PathQuery, table: int, column: str) -> str:
    """``column`` checked to be usable as a field name (no ``.``, no leading ``$``)."""
    if not column or "." in column or column.startswith("$"):
        raise SchemaError(f"field {column!r} of {query.tables[table]} cannot be used in a field path")
    return column


def _field(query: PathQuery, table: int, column: str) -> str:
    """The field path of ``tables[table].column`` after the anchor ``$match``: ``t<i>.<column>`` with joins."""
    name = _name(query, table, column)
    return f"t{table}.{name}" if query.joins else name


def _match_value(cond: Condition) -> Any:
    if cond.op == "IS NULL":
        return None
    if cond.op == "IS NOT NULL":
        return {"$ne": None}
    if cond.op == "=":
        return {"$eq": cond.value}
    return {OPS[cond.op]: cond.value}


def _output_names(query: PathQuery) -> list[str]:
    names: list[str] = []
    for o in query.select:
        base = o.column if o.func is None else f"{o.func}_{o.column or 'all'}"
        name, k = str(base), 2
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def _aggregate_branch(query: PathQuery, o: Output) -> tuple[list[dict[str, Any]], Any]:
    """One ``$facet`` branch computing output ``o`` as ``{v: ...}`` (at most one document), and
    the value SQL gives when the branch is empty (``COUNT``: 0; others: NULL)."""
    if o.distinct and o.func != "count":
        raise DataError(f"{str(o.func).upper()}(DISTINCT ...) is not supported")
    if o.column is None:
        if o.func != "count":
            raise DataError(f"{str(o.func).upper()}(*) is not supported")
        return [{"$count": "v"}], 0
    f = _field(query, int(o.table or 0), o.column)
    nonnull = {"$match": {f: {"$ne": None}}}
    if o.func == "count" and o.distinct:
        return [nonnull, {"$group": {"_id": "$" + f}}, {"$count": "v"}], 0
    if o.func == "count":
        return [nonnull, {"$count": "v"}], 0
    if o.func == "sum":  # SUM over no number is NULL in SQL, 0 in MongoDB: sum only numbers, none -> no row
        return [{"$match": {f: {"$type": "number"}}}, {"$group": {"_id": None, "v": {"$sum": "$" + f}}}], None
    if o.func in ("avg", "min", "max"):
        return [nonnull, {"$group": {"_id": None, "v": {f"${o.func}": "$" + f}}}], None
    raise DataError(f"unsupported aggregate {o.func!r}")


def build_pipeline(query: PathQuery) -> MongoQuery:
    """The aggregation pipeline of ``query`` (stages listed in the module docstring).

    >>> q = PathQuery(("Customers", "Orders"), (Join("Orders", 0, "CustomerID", "CustomerID"),),
    ...               (Condition(0, "City", "=", "Berlin"),), (Output(1, "ShipCity"),), distinct=True)
    >>> [next(iter(s)) for s in build_pipeline(q).pipeline]
    ['$match', '$replaceRoot', '$match', '$lookup', '$unwind', '$group', '$project']
    """
    stages: list[dict[str, Any]] = []
    by_table: dict[int, list[Condition]] = {}
    for c in query.where:
        by_table.setdefault(c.table, []).append(c)
    if by_table.get(0):
        stages.append(_match(by_table[0], lambda c: _name(query, 0, c.column)))
    if query.joins:
        stages.append({"$replaceRoot": {"newRoot": {"t0": "$$ROOT"}}})
        for i, j in enumerate(query.joins, 1):
            local = _field(query, j.left, j.local)
            stages.append({"$match": {local: {"$ne": None}}})
            stages.append(
                {"$lookup": {"from": j.table, "localField": local, "foreignField": _name(query, i, j.foreign), "as": f"t{i}"}}
            )
            stages.append({"$unwind": f"$t{i}"})
            if by_table.get(i):
                stages.append(_match(by_table[i], lambda c, i=i: _field(query, i, c.column)))
    names = _output_names(query)
    if query.aggregates:
        branches = [_aggregate_branch(query, o) for o in query.select]
        stages.append({"$facet": {f"o{k}": b for k, (b, _) in enumerate(branches)}})
        for k in range(len(branches)):
            stages.append({"$unwind": {"path": f"$o{k}", "preserveNullAndEmptyArrays": True}})
        stages.append({"$project": {"_id": 0, **{n: {"$ifNull": [f"$o{k}.v", d]} for k, (n, (_, d)) in enumerate(zip(names, branches))}}})
    else:
        fields = {n: {"$ifNull": ["$" + _field(query, int(o.table or 0), str(o.column)), None]} for n, o in zip(names, query.select)}
        if query.distinct and len(fields) == 1:
            (name, value), = fields.items()
            stages.append({"$group": {"_id": value}})
            stages.append({"$project": {"_id": 0, name: "$_id"}})
        elif query.distinct:
            stages.append({"$group": {"_id": fields}})
            stages.append({"$project": {"_id": 0, **{n: f"$_id.{n}" for n in names}}})
        else:
            stages.append({"$project": {"_id": 0, **fields}})
    return MongoQuery(query.tables[0], stages)


def _match(conds: list[Condition], path_of: Any) -> dict[str, Any]:
    """One ``$match`` with every condition; several on one field go under ``$and``."""
    clauses = [{path_of(c): _match_value(c)} for c in conds]
    return {"$match": clauses[0] if len(clauses) == 1 else {"$and": clauses}}


def skeleton_pipeline(graph: SchemaGraph, path: JoinPath) -> MongoQuery:
    """The join skeleton of ``path`` as a pipeline: the twin of ``graph.skeleton(path)``
    (``SELECT COUNT(*) FROM ... JOIN ...``), one ``$lookup`` + ``$unwind`` per hop, then the count.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("s", (Table("a", (Column("id", primary_key=True),)), Table("b", (Column("id"), Column("a_id")))),
    ...            (ForeignKey("b", "a_id", "a", "id"),))
    >>> [next(iter(st)) for st in skeleton_pipeline(SchemaGraph(s), JoinPath("a", (), "b")).pipeline]
    ['$replaceRoot', '$match', '$lookup', '$unwind', '$facet', '$unwind', '$project']
    """
    return build_pipeline(PathQuery(path.tables, path_joins(graph, path), (), (Output(None, None, "count"),)))


def gold_pipeline(sample: Sample, graph: SchemaGraph) -> MongoQuery:
    """The aggregation pipeline answering ``sample`` (:func:`sample_query` then :func:`build_pipeline`)."""
    return build_pipeline(sample_query(sample, graph))


def column_stats_pipeline(schema: Schema, table: Table) -> tuple[MongoQuery, list[Column], set[str]]:
    """One ``$group`` over ``table`` giving, per non-BLOB column, what
    :func:`data_pipeline.entities.column_stats` asks SQLite for: ``(query, columns, key columns)``.

    The single output document holds, for column ``i``, ``n<i>`` the non-null count, ``d<i>`` the
    distinct non-null count and ``l<i>`` the mean length (code points) of its text values (SQLite's
    ``AVG(LENGTH(x))`` also measures numbers written out; only text columns use it). An empty
    collection gives no row.

    >>> s = Schema("s", (Table("t", (Column("id", "INTEGER", True), Column("name", "TEXT"))),), ())
    >>> q, cols, keys = column_stats_pipeline(s, s.tables[0])
    >>> [c.name for c in cols], sorted(keys), list(q.pipeline[-1]["$project"])
    (['id', 'name'], ['id'], ['_id', 'n0', 'd0', 'l0', 'n1', 'd1', 'l1'])

    Raises:
        SchemaError: a column name that cannot be a field path (``.`` or a leading ``$``).
    """
    from data_pipeline.entities import key_columns

    cols = [c for c in table.columns if "BLOB" not in c.type.upper()]
    group: dict[str, Any] = {"_id": None}
    project: dict[str, Any] = {"_id": 0}
    for i, c in enumerate(cols):
        if not c.name or "." in c.name or c.name.startswith("$"):
            raise SchemaError(f"field {c.name!r} of {table.name} cannot be used in a field path")
        f = "$" + c.name
        group[f"n{i}"] = {"$sum": {"$cond": [{"$in": [{"$type": f}, ["missing", "null"]]}, 0, 1]}}
        group[f"d{i}"] = {"$addToSet": f}
        group[f"l{i}"] = {"$avg": {"$cond": [{"$eq": [{"$type": f}, "string"]}, {"$strLenCP": f}, None]}}
        project |= {f"n{i}": 1, f"d{i}": {"$size": {"$setDifference": [f"$d{i}", [None]]}}, f"l{i}": 1}
    return MongoQuery(table.name, [{"$group": group}, {"$project": project}]), cols, key_columns(schema, table)


# ---------------------------------------------------------------------------- SQL -> PathQuery


def translate_sql(sql: str, schema: Schema | None = None) -> PathQuery:
    """Read the restricted SQL of the question templates into a :class:`PathQuery`.

    Accepted: one ``SELECT [DISTINCT]`` of columns, or of ``COUNT(*)``, ``COUNT([DISTINCT] col)``,
    ``SUM``/``AVG``/``MIN``/``MAX(col)``; ``FROM`` a table with inner ``JOIN ... ON a.x = b.y``
    (each joining an earlier table); ``WHERE`` conditions ``col op literal`` (``op`` in
    :data:`OPS`; the literal may come first), ``col IS [NOT] NULL``, joined by ``AND``.
    Unqualified columns are resolved with ``schema`` when given.

    >>> q = translate_sql('SELECT COUNT(DISTINCT "Orders"."OrderID") FROM "Customers" JOIN "Orders" '
    ...                   'ON "Orders"."CustomerID" = "Customers"."CustomerID" WHERE "Customers"."City" = \\'Berlin\\'')
    >>> q.tables, q.joins[0], q.select[0].func, q.select[0].distinct
    (('Customers', 'Orders'), Join(table='Orders', left=0, local='CustomerID', foreign='CustomerID'), 'count', True)

    Raises:
        DataError: the SQL does not parse or uses anything outside that form (the message names it).
    """
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (ParseError, TokenError) as exc:
        raise DataError(f"SQL does not parse ({str(exc).splitlines()[0]})") from None
    if not isinstance(tree, exp.Select):
        raise DataError(f"only a plain SELECT translates to a pipeline, not {type(tree).__name__}")
    for arg in ("group", "having", "order", "limit", "offset", "with", "windows"):
        if tree.args.get(arg):
            raise DataError(f"{arg.upper()} does not translate to a path pipeline")
    from_ = tree.args.get("from") or tree.args.get("from_")
    if from_ is None or not isinstance(from_.this, exp.Table):
        raise DataError("FROM must name one table")
    tables: list[str] = [from_.this.name]
    aliases = {from_.this.alias_or_name: 0, from_.this.name: 0}
    joins: list[Join] = []
    for j in tree.args.get("joins") or []:
        if not isinstance(j.this, exp.Table) or (j.side or "").upper() or (j.kind or "INNER").upper() != "INNER":
            raise DataError("only inner JOINs of tables translate")
        idx = len(tables)
        tables.append(j.this.name)
        aliases[j.this.alias_or_name] = idx
        aliases.setdefault(j.this.name, idx)
        on = j.args.get("on")
        if not isinstance(on, exp.EQ) or not all(isinstance(x, exp.Column) for x in (on.this, on.expression)):
            raise DataError(f"JOIN {j.this.name} needs ON a.x = b.y")
        sides = [_column_ref(x, aliases, tables, schema) for x in (on.this, on.expression)]
        new = [s for s in sides if s[0] == idx]
        old = [s for s in sides if s[0] < idx]
        if len(new) != 1 or len(old) != 1:
            raise DataError(f"JOIN {j.this.name} must compare one of its columns with an earlier table's")
        joins.append(Join(j.this.name, old[0][0], old[0][1], new[0][1]))
    where: list[Condition] = []
    cond = tree.args.get("where")
    if cond is not None:
        for c in _conjuncts(cond.this):
            where.append(_condition(c, aliases, tables, schema))
    distinct = bool(tree.args.get("distinct"))
    select = tuple(_output(e, aliases, tables, schema) for e in tree.expressions)
    try:
        return PathQuery(tuple(tables), tuple(joins), tuple(where), select, distinct)
    except ValueError as exc:
        raise DataError(str(exc)) from None


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _column_ref(col: exp.Column, aliases: dict[str, int], tables: list[str], schema: Schema | None) -> tuple[int, str]:
    if col.table:
        if col.table not in aliases:
            raise DataError(f"unknown table or alias {col.table!r} in {col.sql()}")
        return aliases[col.table], col.name
    if schema is None:
        raise DataError(f"column {col.name!r} needs a table qualifier (no schema given)")
    owners = [i for i, t in enumerate(tables) if schema.has_table(t) and col.name in {c.name for c in schema.table(t).columns}]
    if len(owners) != 1:
        raise DataError(f"column {col.name!r} is {'ambiguous' if owners else 'in no joined table'}")
    return owners[0], col.name


_SQL_OPS = {exp.EQ: "=", exp.NEQ: "!=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _literal(node: exp.Expression) -> Any:
    if isinstance(node, exp.Neg):
        v = _literal(node.this)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        return int(text) if text.lstrip("-").isdigit() else float(text)
    if isinstance(node, exp.Boolean):
        return 1 if node.this else 0
    raise DataError(f"expected a literal, got {node.sql()}")


def _condition(node: exp.Expression, aliases: dict[str, int], tables: list[str], schema: Schema | None) -> Condition:
    if isinstance(node, exp.Is) and isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Null):
        t, c = _column_ref(node.this, aliases, tables, schema)
        return Condition(t, c, "IS NULL")
    if isinstance(node, exp.Not) and isinstance(node.this, exp.Is):
        inner = _condition(node.this, aliases, tables, schema)
        return Condition(inner.table, inner.column, "IS NOT NULL")
    op = _SQL_OPS.get(type(node))
    if op is None:
        raise DataError(f"condition {node.sql()} does not translate (column op literal, AND only)")
    left, right = node.this, node.expression
    if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
        t, c = _column_ref(left, aliases, tables, schema)
        return Condition(t, c, op, _literal(right))
    if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
        t, c = _column_ref(right, aliases, tables, schema)
        return Condition(t, c, _FLIP[op], _literal(left))
    raise DataError(f"condition {node.sql()} must compare one column with one literal")


def _output(node: exp.Expression, aliases: dict[str, int], tables: list[str], schema: Schema | None) -> Output:
    node = node.this if isinstance(node, exp.Alias) else node
    if isinstance(node, exp.Column):
        t, c = _column_ref(node, aliases, tables, schema)
        return Output(t, c)
    funcs = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}
    func = funcs.get(type(node))
    if func is None:
        raise DataError(f"selected expression {node.sql()} does not translate")
    arg = node.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        if len(arg.expressions) != 1:
            raise DataError(f"{node.sql()}: DISTINCT of one column only")
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star) and func == "count":
        return Output(None, None, "count")
    if not isinstance(arg, exp.Column):
        raise DataError(f"{node.sql()}: the argument must be a column")
    t, c = _column_ref(arg, aliases, tables, schema)
    return Output(t, c, func, distinct)


# ---------------------------------------------------------------------------- execution


def to_cell(value: Any) -> Any:
    """A BSON value as an SQL-comparable cell: ``Int64`` -> int, ``Decimal128`` -> float,
    ``ObjectId`` -> str, datetime -> ISO text, binary -> bytes, documents/arrays -> canonical JSON.

    >>> to_cell({"b": 1, "a": [1, 2]}), to_cell(Decimal128("2.50"))
    ('{"a": [1, 2], "b": 1}', 2.5)
    """
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, Decimal128):
        return float(value.to_decimal())
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, (bytes, Binary)):
        return bytes(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return str(value)


def documents_to_rows(docs: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``(columns, rows)``: fields in first-seen order across ``docs``, a missing field as None.

    >>> documents_to_rows([{"a": 1}, {"a": 2, "b": "x"}])
    (['a', 'b'], [(1, None), (2, 'x')])
    """
    columns: dict[str, None] = {}
    for d in docs:
        columns.update(dict.fromkeys(d))
    names = list(columns)
    return names, [tuple(to_cell(d.get(n)) for n in names) for d in docs]


def _failure(error: str, start: float, *, timed_out: bool = False) -> ExecutionResult:
    return ExecutionResult(False, None, None, error, timed_out, time.perf_counter() - start, False)


def execute_pipeline(
    db: Database,
    query: str | Mapping[str, Any] | MongoQuery,
    *,
    timeout_s: float = 5.0,
    max_rows: int = 10_000,
    collections: set[str] | None = None,
) -> ExecutionResult:
    """Run one aggregation safely and report what happened; query errors never raise.

    Args:
        db: the database.
        query: JSON text, dict or :class:`MongoQuery`; it must pass :func:`check_query`.
        timeout_s: wall-clock limit, seconds: the server's ``maxTimeMS`` and the client's
            deadline (see the module docstring).
        max_rows: keep at most this many rows (a ``$limit`` of ``max_rows + 1`` is appended);
            ``truncated`` says whether more existed.
        collections: known collection names; a query reading another one fails with
            ``unknown collection`` (SQL's "no such table") instead of returning no rows.

    Returns:
        An :class:`~data_pipeline.backends.sqlite.ExecutionResult`: ``rows`` as tuples of cells
        (:func:`to_cell`) in output-field order; ``error`` ``"rejected: ..."``,
        ``"timed out after 5 s"`` or the server's message.

    Raises:
        ConfigError: ``timeout_s <= 0`` or ``max_rows < 0``.
        SchemaError: the server cannot be reached.
    """
    if timeout_s <= 0:
        raise ConfigError(f"must be positive, got {timeout_s}", where="timeout_s")
    if max_rows < 0:
        raise ConfigError(f"must be >= 0, got {max_rows}", where="max_rows")
    start = time.perf_counter()
    try:
        q = check_query(query)
    except QueryRejected as exc:
        return _failure(f"rejected: {exc.message}", start)
    if collections is not None:
        unknown = sorted(collections_used(q) - collections)
        if unknown:
            return _failure(f"unknown collection {unknown[0]!r}", start)
    docs: list[dict[str, Any]] = []
    try:
        # pymongo's client-side timeout sends maxTimeMS = what is left of timeout_s minus the
        # round trip, and also bounds the wait on the socket: a server that does not stop in
        # time is abandoned (its connection closed) when timeout_s is up.
        with pymongo.timeout(timeout_s):
            cursor = db[q.collection].aggregate([*q.pipeline, {"$limit": max_rows + 1}], batchSize=max_rows + 1,
                                                comment=QUERY_COMMENT)  # fmt: skip
            with cursor:
                for doc in cursor:
                    docs.append(doc)
                    if len(docs) > max_rows:
                        break
    except ExecutionTimeout:
        return _failure(f"timed out after {timeout_s:g} s", start, timed_out=True)
    except NetworkTimeout:
        return _failure(f"timed out after {timeout_s:g} s (client deadline: the server had not answered)", start, timed_out=True)
    except (ServerSelectionTimeoutError, ConnectionFailure) as exc:
        raise SchemaError(f"cannot reach the MongoDB server ({str(exc).split(',')[0][:200]})", where=db.name) from None
    except OperationFailure as exc:
        if exc.timeout:
            return _failure(f"timed out after {timeout_s:g} s", start, timed_out=True)
        return _failure(f"OperationFailure: {exc.details.get('errmsg') if exc.details else exc}", start)
    except (PyMongoError, BSONError, OverflowError, TypeError, ValueError) as exc:
        if isinstance(exc, PyMongoError) and exc.timeout:
            return _failure(f"timed out after {timeout_s:g} s", start, timed_out=True)
        return _failure(f"{type(exc).__name__}: {str(exc)[:300]}", start)
    truncated = len(docs) > max_rows
    columns, rows = documents_to_rows(docs[:max_rows])
    return ExecutionResult(True, rows, columns, None, False, time.perf_counter() - start, truncated)
