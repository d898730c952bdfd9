"""One door to a database, whatever it runs on: ``load_backend("sqlite" | "mongodb", db_or_uri)``.

A :class:`Backend` introspects its schema (the same :class:`~data_pipeline.schema.Schema` either
way, hence the same graph, legal paths and router inputs), runs one read-only query under a time
limit (SQL text on SQLite, an aggregation as JSON on MongoDB; see
:mod:`data_pipeline.backends.mongo_pipeline`), and writes a sample's gold query in its own
language. Results are :class:`~data_pipeline.backends.sqlite.ExecutionResult` rows on both, so
``rewards.sql_execution.results_match`` / ``rows_f1`` compare them unchanged.

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

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pymongo
from pymongo.database import Database

from data_pipeline.backends.mongo_pipeline import execute_pipeline, gold_pipeline
from data_pipeline.backends.mongodb import DEFAULT_SAMPLE_SIZE, connect, introspect_mongodb, redact_uri
from data_pipeline.backends.sqlite import ExecutionResult, SQLiteExecutor
from data_pipeline.errors import ConfigError
from data_pipeline.graph import SchemaGraph
from data_pipeline.samples import Sample
from data_pipeline.schema import Schema, introspect

BACKENDS = ("sqlite", "mongodb")
"""Names accepted by :func:`load_backend` (``--backend``)."""


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

    def close(self) -> None:
        """Release connections."""
        ...


class SQLiteBackend:
    """A SQLite file (or a sample name such as ``northwind``), read-only.

    Args:
        db: sample name or file path.
        descriptions: sidecar JSON; samples use their packaged one.
        name: schema name (default: the sample name or the file stem).

    Raises:
        SchemaError: unknown sample, missing file, not SQLite.
    """

    kind = "sqlite"

    def __init__(self, db: str | Path, *, descriptions: str | Path | None = None, name: str | None = None) -> None:
        from data_pipeline.datasets import SAMPLE_NAMES, description_file, resolve_database

        self.path = resolve_database(db)
        is_sample = str(db) in SAMPLE_NAMES and not Path(db).exists()
        self.name = name or (str(db) if is_sample else self.path.stem)
        self.descriptions = descriptions if descriptions is not None else (description_file(str(db)) if is_sample else None)
        self.location = str(self.path)
        self._executor = SQLiteExecutor()
        self._schema: Schema | None = None

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

    def close(self) -> None:
        self._executor.close()

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
    ) -> None:
        self._client: pymongo.MongoClient | None = None
        if isinstance(uri, Database):
            self.db = uri
            host, port = uri.client.address or ("?", 0)
            self.location = f"mongodb://{host}:{port}/{uri.name}"
        else:
            self._client, self.db = connect(uri)
            self.location = redact_uri(uri)
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

