"""One door to a database, whatever it runs on: ``load_backend("sqlite" | "mongodb", db_or_uri)``.

A :class:`Backend` introspects its schema (the same :class:`~core.schema.Schema` either
way, hence the same graph, legal paths and router inputs), runs one read-only query under a time
limit (SQL text on SQLite, an aggregation as JSON on MongoDB; see
:mod:`data_pipeline.backends.mongo_pipeline`), and writes a sample's gold query in its own
language. Results are :class:`~data_pipeline.backends.sqlite.ExecutionResult` rows on both, so
``rewards.sql_execution.results_match`` / ``rows_f1`` compare them unchanged.

The question generator (:func:`~data_pipeline.pipeline.build_dataset`) reads the data through
four more methods, so it runs unchanged on either backend: :meth:`~Backend.has_rows` (does a
path's join match anything), :meth:`~Backend.column_stats` (per-column counts that sort columns
into roles), :meth:`~Backend.distinct_values` (values reaching the target through a path, sorted
as SQLite's ``ORDER BY``: numbers, then text by code point) and :meth:`~Backend.column_values`.
On SQLite they are SQL on one read-only connection; on MongoDB aggregations built from the same
:class:`~data_pipeline.backends.mongo_pipeline.PathQuery` as the gold pipelines, run through the
read-only gate (:func:`~data_pipeline.backends.mongo_pipeline.execute_pipeline`).

Command lines take ``--backend`` (``sqlite`` or ``mongodb``), ``--db`` and ``--uri``;
:func:`check_backend_options` checks the combination and :func:`open_backend` opens it.

>>> import sqlite3, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
>>> sqlite3.connect(path).executescript(
...     "CREATE TABLE a (id INTEGER PRIMARY KEY); CREATE TABLE b (id INTEGER PRIMARY KEY, a_id REFERENCES a(id));"
...     "INSERT INTO a VALUES (1), (2); INSERT INTO b VALUES (10, 1), (11, 1), (12, 2);").close()
>>> with load_backend("sqlite", path) as b:
...     b.introspect().table_names, b.execute("SELECT a.id, count(*) FROM a JOIN b ON b.a_id = a.id GROUP BY a.id").rows
(('a', 'b'), [(1, 2), (2, 1)])
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pymongo
from pymongo.database import Database

from data_pipeline.backends.mongo_pipeline import (
    OPS,
    Condition,
    MongoQuery,
    Output,
    PathQuery,
    build_pipeline,
    column_stats_pipeline,
    execute_pipeline,
    gold_pipeline,
    path_joins,
)
from data_pipeline.backends.mongodb import DEFAULT_SAMPLE_SIZE, connect, database_name, introspect_mongodb, redact_uri
from data_pipeline.backends.sqlite import ExecutionResult, SQLiteExecutor, connect_readonly
from data_pipeline.entities import ColumnStats, column_stats
from core.errors import ConfigError, DataError, QueryTimeout
from data_pipeline.gold import col
from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import Schema, Table, decode_text, introspect, quote_ident

BACKENDS = ("sqlite", "mongodb")
"""Names accepted by :func:`load_backend` (``--backend``)."""

DATA_QUERY_TIMEOUT_S = 120.0
"""Time limit, seconds, of one MongoDB query the generator reads data with (not a gold query;
those get ``--timeout-s``). A Northwind 3-hop walk takes about a second on the Python test server."""

SCALAR_TYPES = (int, float, str)
"""Value kinds :meth:`Backend.distinct_values` keeps (SQLite's ``typeof`` integer, real, text)."""


@runtime_checkable
class Backend(Protocol):
    """What every stage needs from a database.

    ``kind`` is ``"sqlite"`` or ``"mongodb"``; ``location`` the file or URI (password hidden).
    """

    kind: str
    location: str

    def introspect(self) -> Schema:
        """The schema (cached after the first call)."""
        ...

    def execute(self, query: str | dict[str, Any], timeout_s: float = 5.0, max_rows: int = 10_000) -> ExecutionResult:
        """Run one read-only query; a rejected, failing or timed-out query gives ``ok=False``."""
        ...

    def gold_query(self, sample: Sample, graph: SchemaGraph) -> str:
        """The sample's gold answer as this backend's query text."""
        ...

    def has_rows(self, graph: SchemaGraph, path: JoinPath) -> bool:
        """Whether the joins of ``path`` match at least one row."""
        ...

    def column_stats(self, schema: Schema, table: Table) -> list[ColumnStats]:
        """Non-null count, distinct count and mean text length of every non-BLOB column of ``table``."""
        ...

    def distinct_values(
        self, graph: SchemaGraph, path: JoinPath, column: tuple[int, str], where: Sequence[Condition] = ()
    ) -> list[Any]:
        """Distinct integer, real and text values of ``column`` (``(index into path.tables, name)``)
        over the joined rows of ``path`` that satisfy every condition of ``where``; numbers first
        (ascending), then text (by code point)."""
        ...

    def column_values(self, table: str, column: str) -> list[str]:
        """Distinct non-null values of ``table.column`` as text, in no particular order."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


def _sorted_scalars(values: Sequence[Any]) -> list[Any]:
    """SQLite's ``ORDER BY`` of integers, reals and text: numbers ascending, then text by code point.

    >>> _sorted_scalars(["b", 2.5, "a", 1, True, None, b"x"])
    [1, 2.5, 'a', 'b']
    """
    kept = [v for v in values if isinstance(v, SCALAR_TYPES) and not isinstance(v, bool)]
    return sorted(kept, key=lambda v: (isinstance(v, str), v))


class SQLiteBackend:
    """A SQLite file (or a sample name such as ``northwind``), read-only.

    Args:
        db: sample name or file path; a bare sample name is always the sample, a file of that
            name in the working directory is ``./name`` (see
            :func:`~data_pipeline.sample_databases.is_sample_name`).
        descriptions: sidecar JSON; samples use their packaged one.
        name: schema name (default: the sample name or the file stem).

    Raises:
        SchemaError: unknown sample, missing file, not SQLite.
    """

    kind = "sqlite"

    def __init__(self, db: str | Path, *, descriptions: str | Path | None = None, name: str | None = None) -> None:
        from data_pipeline.sample_databases import description_file, is_sample_name, resolve_database, sample_of

        self.path = resolve_database(db)
        # a bare sample name is the sample (whatever the working directory holds), and so is its cached file
        sample = str(db) if is_sample_name(db) else sample_of(self.path)
        self.name = name or (sample or self.path.stem)
        self.descriptions = descriptions if descriptions is not None else (description_file(sample) if sample else None)
        self.location = str(self.path)
        self._executor = SQLiteExecutor()
        self._schema: Schema | None = None
        self._conn: sqlite3.Connection | None = None

    @property
    def conn(self) -> sqlite3.Connection:
        """A read-only connection for the data reads (opened on first use, closed by :meth:`close`)."""
        if self._conn is None:
            self._conn = connect_readonly(self.path)
            self._conn.text_factory = decode_text  # a value that is not UTF-8 must not stop a build
        return self._conn

    def introspect(self) -> Schema:
        if self._schema is None:
            self._schema = introspect(self.path, descriptions=self.descriptions, name=self.name)
        return self._schema

    def execute(self, query: str | dict[str, Any], timeout_s: float = 5.0, max_rows: int = 10_000) -> ExecutionResult:
        if not isinstance(query, str):
            raise ConfigError(f"a SQLite query is SQL text, got {type(query).__name__}", where="query")
        return self._executor.execute(self.path, query, timeout_s=timeout_s, max_rows=max_rows)

    def gold_query(self, sample: Sample, graph: SchemaGraph) -> str:
        return sample.sql

    def has_rows(self, graph: SchemaGraph, path: JoinPath) -> bool:
        return self.conn.execute(f"SELECT 1 {graph.from_clause(path)} LIMIT 1").fetchone() is not None

    def column_stats(self, schema: Schema, table: Table) -> list[ColumnStats]:
        return column_stats(self.conn, schema, table)

    def distinct_values(
        self, graph: SchemaGraph, path: JoinPath, column: tuple[int, str], where: Sequence[Condition] = ()
    ) -> list[Any]:
        tables = path.tables
        what = col(tables[column[0]], column[1])
        conds: list[str] = []
        params: list[Any] = []
        for c in where:
            ref = col(tables[c.table], c.column)
            if c.op in ("IS NULL", "IS NOT NULL"):
                conds.append(f"{ref} {c.op}")
            elif c.op in OPS:
                conds.append(f"{ref} {c.op} ?")
                params.append(c.value)
            else:
                raise DataError(f"condition operator must be one of {', '.join(OPS)}, IS NULL or IS NOT NULL, got {c.op!r}")
        conds.append(f"typeof({what}) IN ('text', 'integer', 'real')")
        sql = f"SELECT DISTINCT {what} {graph.from_clause(path)} WHERE {' AND '.join(conds)} ORDER BY 1"
        return [r[0] for r in self.conn.execute(sql, params)]

    def column_values(self, table: str, column: str) -> list[str]:
        q = quote_ident(column)
        rows = self.conn.execute(f"SELECT DISTINCT {q} FROM {quote_ident(table)} WHERE {q} IS NOT NULL")
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        self._executor.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> SQLiteBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MongoBackend:
    """A MongoDB database reached with pymongo.

    Args:
        uri: ``mongodb://host:port/<database>`` (or a pymongo ``Database``, which stays the
            caller's to close).
        descriptions: sidecar JSON replacing the declared descriptions.
        name: schema name (default: declared, else the database name).
        references: ``auto``, ``declared`` or ``inferred`` (see
            :func:`~data_pipeline.backends.mongodb.introspect_mongodb`).
        sample_size: documents sampled per collection.
        database: the database name when the URI names none (``--db``); a different name from
            the URI's is refused.

    Raises:
        ConfigError: a malformed URI or one without a database.
        SchemaError: the server cannot be reached.
    """

    kind = "mongodb"

    def __init__(
        self,
        uri: str | Database,
        *,
        descriptions: str | Path | None = None,
        name: str | None = None,
        references: str = "auto",
        sample_size: int = DEFAULT_SAMPLE_SIZE,
        database: str | None = None,
    ) -> None:
        self._client: pymongo.MongoClient | None = None
        if isinstance(uri, Database):
            self.db = uri
        else:
            named = database_name(uri)
            if database and named and database != named:
                raise ConfigError(f"the URI names database {named!r} but --db says {database!r}; give one", where="--db")
            self._client, self.db = connect(uri, database=database or named)
        host, port = self.db.client.address or ("?", 0)
        self.location = f"mongodb://{host}:{port}/{self.db.name}"
        self.descriptions = descriptions
        self.name = name
        self.references = references
        self.sample_size = sample_size
        self._schema: Schema | None = None
        self._collections: set[str] | None = None

    def introspect(self) -> Schema:
        if self._schema is None:
            self._schema = introspect_mongodb(
                self.db,
                references=self.references,
                sample_size=self.sample_size,
                descriptions=self.descriptions,
                name=self.name,
            )
        return self._schema

    def execute(self, query: str | dict[str, Any], timeout_s: float = 5.0, max_rows: int = 10_000) -> ExecutionResult:
        if self._collections is None:
            self._collections = set(self.db.list_collection_names())
        return execute_pipeline(self.db, query, timeout_s=timeout_s, max_rows=max_rows, collections=self._collections)

    def gold_query(self, sample: Sample, graph: SchemaGraph) -> str:
        """The sample's gold aggregation as JSON (:func:`~data_pipeline.backends.mongo_pipeline.gold_pipeline`)."""
        return gold_pipeline(sample, graph).to_json()

    def _read(self, query: MongoQuery, what: str) -> ExecutionResult:
        """Run one data read; a failure is a DataError naming ``what``, a read past its time limit a
        QueryTimeout (these queries are ours, not a user's)."""
        res = self.execute(query, timeout_s=DATA_QUERY_TIMEOUT_S, max_rows=10_000_000)
        if res.timed_out:
            raise QueryTimeout(f"reading {what} ran past {DATA_QUERY_TIMEOUT_S:g} s", where=self.location)
        if not res.ok:
            raise DataError(f"reading {what} failed: {res.error}", where=self.location)
        return res

    def has_rows(self, graph: SchemaGraph, path: JoinPath) -> bool:
        first = graph.schema.table(path.anchor).columns[0].name
        q = PathQuery(path.tables, path_joins(graph, path), (), (Output(0, first),))
        return bool(self._read(MongoQuery(q.tables[0], [*build_pipeline(q).pipeline, {"$limit": 1}]), f"path {path}").rows)

    def column_stats(self, schema: Schema, table: Table) -> list[ColumnStats]:
        query, cols, keys = column_stats_pipeline(schema, table)
        if not cols:
            return []
        res = self._read(query, f"column statistics of {table.name}")
        row = dict(zip(res.columns or [], res.rows[0])) if res.rows else {}  # no row: an empty collection
        return [
            ColumnStats(c, int(row.get(f"n{i}") or 0), int(row.get(f"d{i}") or 0), float(row.get(f"l{i}") or 0.0), c.name in keys)
            for i, c in enumerate(cols)
        ]

    def distinct_values(
        self, graph: SchemaGraph, path: JoinPath, column: tuple[int, str], where: Sequence[Condition] = ()
    ) -> list[Any]:
        q = PathQuery(path.tables, path_joins(graph, path), tuple(where), (Output(column[0], column[1]),), distinct=True)
        rows = self._read(build_pipeline(q), f"values of {path.tables[column[0]]}.{column[1]} along {path}").rows or []
        return _sorted_scalars([r[0] for r in rows])

    def column_values(self, table: str, column: str) -> list[str]:
        q = PathQuery((table,), (), (Condition(0, column, "IS NOT NULL"),), (Output(0, column),), distinct=True)
        rows = self._read(build_pipeline(q), f"values of {table}.{column}").rows or []
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> MongoBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_backend(backend: str, db_or_uri: str | Path, **options: Any) -> SQLiteBackend | MongoBackend:
    """The backend ``backend`` (``--backend``) on ``db_or_uri`` (``--db`` / ``--uri``).

    Args:
        backend: ``"sqlite"`` or ``"mongodb"``.
        db_or_uri: a SQLite sample name or file, or a MongoDB URI naming the database.
        **options: passed to :class:`SQLiteBackend` (``descriptions``, ``name``) or
            :class:`MongoBackend` (also ``references``, ``sample_size``).

    Raises:
        ConfigError: unknown backend (``where="--backend"``), or a MongoDB URI given to
            ``sqlite`` / a file given to ``mongodb``.
        SchemaError: the database cannot be opened or reached.
    """
    text = str(db_or_uri)
    if backend == "sqlite":
        if text.startswith(("mongodb://", "mongodb+srv://")):
            raise ConfigError(f"{redact_uri(text)} is a MongoDB URI; use --backend mongodb", where="--backend")
        return SQLiteBackend(db_or_uri, **options)
    if backend == "mongodb":
        if not text.startswith(("mongodb://", "mongodb+srv://")):
            raise ConfigError(f"expected a mongodb:// URI naming the database, got {text!r}", where="--uri")
        return MongoBackend(text, **options)
    raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}", where="--backend")


def check_backend_options(backend: str, db: str | Path | None, uri: str | None, *, db_required: bool = True) -> None:
    """Check a command line's ``--backend`` / ``--db`` / ``--uri`` before anything is opened.

    ``sqlite`` takes ``--db`` (a sample name or file; required unless ``db_required`` is False)
    and no ``--uri``; ``mongodb`` takes ``--uri`` (``mongodb://host:port[/database]``) and
    optionally ``--db`` as the database name when the URI names none.

    Raises:
        ConfigError: naming the flag: an unknown backend, ``--uri`` with ``sqlite``, no ``--db``
            for ``sqlite``, no ``--uri`` for ``mongodb``, or neither naming the MongoDB database.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}", where="--backend")
    if backend == "sqlite":
        if uri is not None:
            raise ConfigError(f"{redact_uri(uri)} needs --backend mongodb", where="--uri")
        if db is None and db_required:
            raise ConfigError("give the SQLite database (a sample name or a file)", where="--db")
        return
    if uri is None:
        raise ConfigError("--backend mongodb needs --uri mongodb://HOST:PORT/DATABASE", where="--uri")
    if not uri.startswith(("mongodb://", "mongodb+srv://")):
        raise ConfigError(f"expected a mongodb:// URI, got {redact_uri(uri)!r}", where="--uri")
    if not database_name(uri) and not db:
        raise ConfigError(f"name the database: in the URI path ({redact_uri(uri)}/NAME) or with --db NAME", where="--uri")


def open_backend(backend: str, db: str | Path | None, uri: str | None, **options: Any) -> SQLiteBackend | MongoBackend:
    """The backend a command line names (:func:`check_backend_options`, then :func:`load_backend`).

    ``options`` as for :func:`load_backend`; with ``mongodb``, ``db`` is the database name.

    Raises:
        ConfigError, SchemaError: as :func:`check_backend_options` and :func:`load_backend`.
    """
    check_backend_options(backend, db, uri)
    if backend == "mongodb":
        return load_backend("mongodb", str(uri), database=str(db) if db else None, **options)
    return load_backend("sqlite", str(db), **options)

