"""Copy a SQLite database (a sample such as Northwind, or any file) into MongoDB, references kept.

    python -m data_pipeline.mongo_load --db northwind --uri mongodb://127.0.0.1:27017/northwind
    python -m data_pipeline.mongo_load --db data/northwind --uri mongodb://127.0.0.1:27017/northwind

The second form copies a built data set's database (``python -m data_pipeline.build --out
data/northwind``), synthetic rows for empty tables included, so its gold answers hold on MongoDB.

One collection per table (empty tables too) and one document per row; every column is a field
of the same name and value (NULL stays ``null``, BLOB becomes binary). A single-column primary
key is also the document's ``_id``; other rows get an ``ObjectId``. Every primary-key and
foreign-key field is indexed, so ``$lookup`` hops are index lookups. The SQLite schema
(columns, declared types, keys, foreign keys, descriptions) is stored as the *declared schema*
in ``_route2sql_schema`` (see :mod:`data_pipeline.backends.mongodb`), so the copy has the same
schema fingerprint, legal paths, questions and gold answers as the original.

The declared schema is removed first and written last: a load that fails half-way leaves no
declaration, and introspection of the partial copy falls back to inferred references.
Collections that already hold documents are refused unless ``--replace True`` is given.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo.database import Database
from pymongo.errors import BulkWriteError, PyMongoError

from data_pipeline.backends.mongodb import METADATA_COLLECTION, METADATA_FORMAT, connect, database_name
from data_pipeline.backends.sqlite import connect_readonly
from core.cli import parse, run_main
from core.dataset import load_dataset
from data_pipeline.datasets import description_file, resolve_database
from data_pipeline.sample_databases import is_sample_name
from core.errors import ConfigError, DataError, SchemaError
from core.schema import Schema, Table, introspect, quote_ident


@dataclass
class LoadConfig:
    """Copy a SQLite database into MongoDB with its references (declared schema in _route2sql_schema)."""

    db: str
    """Sample name (northwind, chinook, hospital, projects), path to a SQLite file, or a data set folder (python -m data_pipeline.build --out): its database, synthetic rows included. A bare sample name is the sample even when a file or folder of that name is in the working directory; write ./chinook for that one."""
    uri: str
    """MongoDB URI naming the target database, e.g. mongodb://127.0.0.1:27017/northwind."""
    descriptions: Path | None = None
    """Description sidecar JSON; samples use their packaged one, data set folders their schema.json."""
    name: str | None = None
    """Schema name stored in the declaration (default: the sample name, the data set's schema name or the file stem)."""
    replace: bool = False
    """Drop collections of the same names that already hold documents (otherwise refuse)."""
    batch_size: int = 1000
    """Documents per insert_many call."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {self.batch_size}", where="--batch-size")


@dataclass
class LoadReport:
    """What a load did: documents per collection, references declared, indexes built, seconds."""

    database: str
    uri: str
    documents: dict[str, int] = field(default_factory=dict)
    foreign_keys: int = 0
    indexes: int = 0
    fingerprint: str = ""
    elapsed_s: float = 0.0

    @property
    def total_documents(self) -> int:
        return sum(self.documents.values())


def check_names(schema: Schema) -> None:
    """Refuse tables and columns MongoDB cannot hold as collections and plain fields.

    Raises:
        SchemaError: naming the table or column: an empty name, a collection name with ``$`` or
            a ``system.`` prefix, or a column name with ``.``, a leading ``$`` or equal to ``_id``
            (field paths would misread them).
    """
    for t in schema.tables:
        if not t.name or "$" in t.name or t.name.startswith("system.") or t.name == METADATA_COLLECTION or "\0" in t.name:
            raise SchemaError(f"table name {t.name!r} cannot be a MongoDB collection name", where=schema.source)
        for c in t.columns:
            if not c.name or "." in c.name or c.name.startswith("$") or c.name == "_id" or "\0" in c.name:
                raise SchemaError(f"column {t.name}.{c.name!r} cannot be a MongoDB field name", where=schema.source)


def _id_column(conn: sqlite3.Connection, table: Table) -> str | None:
    """The single primary-key column when its values are unique and non-null (usable as ``_id``)."""
    if len(table.primary_key) != 1:
        return None
    pk = quote_ident(table.primary_key[0])
    n, distinct, nonnull = conn.execute(f"SELECT COUNT(*), COUNT(DISTINCT {pk}), COUNT({pk}) FROM {quote_ident(table.name)}").fetchone()
    return table.primary_key[0] if n == distinct == nonnull else None


def _documents(conn: sqlite3.Connection, table: Table, id_column: str | None) -> Iterator[dict[str, Any]]:
    names = [c.name for c in table.columns]
    cols = ", ".join(quote_ident(n) for n in names)
    for row in conn.execute(f"SELECT {cols} FROM {quote_ident(table.name)}"):
        doc: dict[str, Any] = {"_id": row[names.index(id_column)]} if id_column else {}
        doc.update(zip(names, row))
        yield doc


def _batches(docs: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for d in docs:
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _indexed_fields(schema: Schema, table: Table) -> list[tuple[tuple[str, ...], bool]]:
    """``(fields, unique)`` index specs for one table: its primary key and its FK fields (both ends)."""
    specs: list[tuple[tuple[str, ...], bool]] = []
    if table.primary_key:
        specs.append((table.primary_key, True))
    for fk in schema.foreign_keys:
        for t, fields in ((fk.table, fk.columns), (fk.ref_table, fk.ref_columns)):
            if t == table.name and fields not in [s for s, _ in specs]:
                specs.append((fields, False))
    return specs


def load_sqlite_into_mongo(sqlite_path: str | Path, db: Database, schema: Schema, *, replace: bool = False, batch_size: int = 1000) -> LoadReport:
    """Copy every table of ``sqlite_path`` (described by ``schema``) into ``db``; see the module docstring.

    Args:
        sqlite_path: the SQLite file (opened read-only).
        db: the target database.
        schema: the file's schema (:func:`~core.schema.introspect`), declared as is.
        replace: drop non-empty collections of the same names first.
        batch_size: documents per insert.

    Returns:
        A :class:`LoadReport`.

    Raises:
        SchemaError: a name MongoDB cannot hold (:func:`check_names`), a value BSON cannot hold
            (an integer beyond 64 bits), or the server fails during the load.
        ConfigError: a collection already holds documents and ``replace`` is False (``--replace``).
        DataError: a collection's document count differs from its table's row count afterwards.
    """
    start = time.perf_counter()
    check_names(schema)
    host, port = db.client.address or ("?", 0)
    where = f"mongodb://{host}:{port}/{db.name}"
    report = LoadReport(db.name, where, foreign_keys=len(schema.foreign_keys), fingerprint=schema.fingerprint())
    conn = connect_readonly(sqlite_path)
    try:
        existing = set(db.list_collection_names())
        if not replace:
            busy = [t.name for t in schema.tables if t.name in existing and db[t.name].estimated_document_count() > 0]
            if busy:
                raise ConfigError(f"collections already hold documents: {', '.join(busy)}; pass --replace True to drop them", where="--replace")
        db[METADATA_COLLECTION].delete_one({"_id": "schema"})
        for t in schema.tables:
            if t.name in existing:
                db.drop_collection(t.name)
            db.create_collection(t.name)
            id_col = _id_column(conn, t)
            for batch in _batches(_documents(conn, t, id_col), batch_size):
                try:
                    db[t.name].insert_many(batch, ordered=True)
                except OverflowError as exc:
                    raise SchemaError(f"table {t.name!r} holds a value BSON cannot store ({exc})", where=sqlite_path) from None
            for fields, unique in _indexed_fields(schema, t):
                db[t.name].create_index([(f, 1) for f in fields], unique=unique)
                report.indexes += 1
            report.documents[t.name] = db[t.name].count_documents({})
            if report.documents[t.name] != t.row_count:
                raise DataError(f"collection {t.name!r} has {report.documents[t.name]} documents after the copy, table has {t.row_count} rows", where=where)
        declared = schema.to_dict() | {"backend": "mongodb", "source": where}
        db[METADATA_COLLECTION].replace_one(
            {"_id": "schema"},
            {"_id": "schema", "format": METADATA_FORMAT, "schema": declared, "fingerprint": report.fingerprint,
             "loaded_from": str(Path(sqlite_path).resolve()), "loaded_at": time.time()},
            upsert=True,
        )  # fmt: skip
    except (BulkWriteError, PyMongoError) as exc:
        raise SchemaError(f"the MongoDB server failed during the load ({str(exc)[:200]})", where=where) from None
    finally:
        conn.close()
    report.elapsed_s = time.perf_counter() - start
    return report


def source_schema(db: str, descriptions: Path | None = None, name: str | None = None) -> tuple[Path, Schema]:
    """``(sqlite_file, schema)`` for ``--db``: a sample name, a SQLite file or a data set folder.

    A data set folder (with ``schema.json``) gives the database its questions were generated on
    (``<folder>/database.sqlite`` when empty tables were filled) and its saved schema.

    Raises:
        SchemaError: unknown sample, missing file, not SQLite.
        DataError: a data set folder whose ``schema.json`` is malformed.
    """
    folder = Path(db)
    if not is_sample_name(db) and folder.is_dir() and (folder / "schema.json").is_file():
        ds = load_dataset(folder)
        schema = ds.schema if descriptions is None else introspect(ds.db_path, descriptions=descriptions, name=ds.schema.name)
        if name:
            schema = Schema.from_dict(schema.to_dict() | {"name": name})
        return ds.db_path, schema
    path = resolve_database(db)
    is_sample = is_sample_name(db)
    default = str(db) if is_sample else path.stem
    sidecar = descriptions if descriptions is not None else (description_file(default) if is_sample else None)
    return path, introspect(path, descriptions=sidecar, name=name or default)


def load(cfg: LoadConfig) -> LoadReport:
    """Resolve ``cfg.db`` (:func:`source_schema`), connect to ``cfg.uri`` and copy (:func:`load_sqlite_into_mongo`).

    The target database is the one named in the URI, else the schema's name.
    """
    path, schema = source_schema(cfg.db, cfg.descriptions, cfg.name)
    name = schema.name
    client, db = connect(cfg.uri, database=database_name(cfg.uri) or name)
    try:
        return load_sqlite_into_mongo(path, db, schema, replace=cfg.replace, batch_size=cfg.batch_size)
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> LoadReport:
    """Command-line entry: load, then print one line per collection and a total."""
    cfg = parse(LoadConfig, argv, description=__doc__.splitlines()[0] if __doc__ else None)
    report = load(cfg)
    for name, n in report.documents.items():
        print(f"{name:28s} {n:8d} documents")
    print(
        f"loaded {report.total_documents} documents into {len(report.documents)} collections of {report.database!r} "
        f"({report.foreign_keys} references declared in {METADATA_COLLECTION}, {report.indexes} indexes, "
        f"fingerprint {report.fingerprint}) in {report.elapsed_s:.2f} s"
    )
    return report


if __name__ == "__main__":
    run_main(main)
