"""MongoDB schema introspection (pymongo only): collections as tables, fields as columns, references as FKs.

A MongoDB database has no declared schema, so :func:`introspect_mongodb` reads one from the data
and builds the same :class:`~core.schema.Schema` the SQLite backend builds
(``backend="mongodb"``), which gives the same :class:`~core.graph.SchemaGraph`, legal
paths and router inputs:

- **tables**: every collection except ``system.*`` and :data:`METADATA_COLLECTION`;
- **columns**: the top-level fields of the first ``sample_size`` documents (in ``_id`` order), in
  first-seen order, each typed from its values (:func:`bson_type_name`); nested documents are one
  ``OBJECT`` column, arrays one ``ARRAY`` column;
- **primary key**: a field equal to ``_id`` in every sampled document (``_id`` itself is then not
  listed); a surrogate ``ObjectId`` ``_id`` is dropped; any other ``_id`` is a column ``_id``;
- **references** (foreign keys), either *declared* or *inferred*:

  * declared: the document ``{"_id": "schema"}`` in :data:`METADATA_COLLECTION`, written by
    ``python -m data_pipeline.mongo_load``, holds a ``Schema.to_dict()``; its tables, column
    order, declared types, keys, descriptions, sample values and foreign keys are used as
    declared, row counts and undeclared fields come from the data (a copied SQLite database
    therefore gives an equal schema: same fingerprint, legal paths and router inputs);
  * inferred (:func:`infer_references`): a field whose sampled values are all key values of
    another collection, preferring the collection whose key has the field's name
    (``Orders.CustomerID -> Customers.CustomerID``); several candidates without a name match
    (``Orders.ShipVia`` fits six small integer keys) are ambiguous and skipped with a warning.

Connection problems raise :class:`~core.errors.SchemaError` naming the URI with any
password removed.
"""

from __future__ import annotations

import datetime
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymongo
from bson import Binary, Decimal128, ObjectId
from pymongo.database import Database
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError
from pymongo.uri_parser import parse_uri

from core.errors import ConfigError, DataError, SchemaError
from core.schema import SAMPLE_VALUES_PER_COLUMN, Column, ForeignKey, Schema, Table

METADATA_COLLECTION = "_route2sql_schema"
"""Collection holding the declared schema document ``{"_id": "schema", "schema": {...}}``."""

METADATA_FORMAT = 1
"""Version of the declared schema document; a newer one is refused."""

DEFAULT_SAMPLE_SIZE = 1000
"""Documents read per collection to find fields, types and reference values."""

REFERENCE_MODES = ("auto", "declared", "inferred")
"""``auto``: declared when :data:`METADATA_COLLECTION` has a schema, else inferred."""


def redact_uri(uri: str) -> str:
    """The URI without its password, fit for messages.

    >>> redact_uri("mongodb://ana:s3cret@db.example:27017/shop?authSource=admin")
    'mongodb://ana:***@db.example:27017/shop?authSource=admin'
    >>> redact_uri("mongodb://127.0.0.1:27017/northwind")
    'mongodb://127.0.0.1:27017/northwind'
    """
    return re.sub(r"(mongodb(?:\+srv)?://[^:/@]+):[^@/]*@", r"\1:***@", uri)


def database_name(uri: str) -> str | None:
    """The database named in the URI path (``mongodb://host/northwind`` -> ``northwind``), else None.

    Raises:
        ConfigError: the text is not a MongoDB URI (``where="--uri"``).
    """
    try:
        parsed = parse_uri(uri, validate=False, warn=True)
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise ConfigError(f"not a MongoDB URI {redact_uri(uri)!r} ({exc})", where="--uri") from None
    return parsed.get("database") or None


def connect(
    uri: str, *, database: str | None = None, server_timeout_s: float = 5.0
) -> tuple[pymongo.MongoClient, Database]:
    """Open a client and check the server answers ``ping``.

    Args:
        uri: ``mongodb://host:port/<database>``; the database may instead come from ``database``.
        database: database name; overrides the URI's.
        server_timeout_s: how long to look for the server, seconds.

    Returns:
        ``(client, database)``; the caller closes the client.

    Raises:
        ConfigError: the URI is malformed or names no database (``where="--uri"``).
        SchemaError: the server cannot be reached (the message names the URI, password hidden).
    """
    name = database or database_name(uri)
    if not name:
        raise ConfigError(f"name the database in the URI path, e.g. mongodb://127.0.0.1:27017/northwind (got {redact_uri(uri)})", where="--uri")
    timeout_ms = max(1, int(server_timeout_s * 1000))
    try:
        client: pymongo.MongoClient = pymongo.MongoClient(
            uri, serverSelectionTimeoutMS=timeout_ms, connectTimeoutMS=timeout_ms
        )
    except (ConfigurationError, ValueError, TypeError) as exc:
        raise ConfigError(f"bad MongoDB URI options ({exc})", where="--uri") from None
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        client.close()
        first = str(exc).split(",")[0][:200]
        raise SchemaError(f"cannot reach the MongoDB server ({first})", where=redact_uri(uri)) from None
    return client, client[name]


def bson_type_name(values: Iterable[Any]) -> str:
    """A column type for the non-null values of one field (SQL-like names, ``""`` when unknown).

    ``INTEGER``, ``REAL`` (floats, or ints mixed with floats), ``TEXT``, ``BLOB``, ``BOOLEAN``,
    ``DATETIME``, ``DECIMAL``, ``OBJECTID``, ``OBJECT``, ``ARRAY``; several other kinds mixed
    give ``""``.

    >>> bson_type_name([1, 2, 3]), bson_type_name([1, 2.5]), bson_type_name(["a", None])
    ('INTEGER', 'REAL', 'TEXT')
    >>> bson_type_name([True, 1]), bson_type_name([None]), bson_type_name([{"a": 1}])
    ('', '', 'OBJECT')
    """
    kinds = {_kind(v) for v in values if v is not None}
    if kinds == {"INTEGER", "REAL"}:
        return "REAL"
    return kinds.pop() if len(kinds) == 1 else ""


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INTEGER"
    if isinstance(value, float):
        return "REAL"
    if isinstance(value, str):
        return "TEXT"
    if isinstance(value, (bytes, Binary)):
        return "BLOB"
    if isinstance(value, datetime.datetime):
        return "DATETIME"
    if isinstance(value, Decimal128):
        return "DECIMAL"
    if isinstance(value, ObjectId):
        return "OBJECTID"
    if isinstance(value, dict):
        return "OBJECT"
    if isinstance(value, list):
        return "ARRAY"
    return type(value).__name__.upper()


@dataclass
class CollectionSample:
    """What the sampled documents of one collection say.

    ``fields``: top-level field names in first-seen order (``_id`` included); ``values``: each
    field's sampled values, in document order, ``None`` where absent or null; ``key``: the field
    the collection is keyed by (the ``_id`` twin, ``"_id"`` itself, or None for a surrogate
    ``ObjectId``); ``count``: documents in the collection.
    """

    name: str
    fields: list[str]
    values: dict[str, list[Any]]
    key: str | None
    count: int


def sample_collection(db: Database, name: str, sample_size: int = DEFAULT_SAMPLE_SIZE) -> CollectionSample:
    """Read the first ``sample_size`` documents of ``name`` (``_id`` order) and summarise them."""
    docs = list(db[name].find({}, sort=[("_id", 1)], limit=sample_size))
    fields: dict[str, None] = {}
    for d in docs:
        fields.update(dict.fromkeys(d))
    values = {f: [d.get(f) for d in docs] for f in fields}
    key: str | None = None
    if docs:
        ids = values.get("_id", [])
        twins = [f for f in fields if f != "_id" and all(d.get(f) == d["_id"] and f in d for d in docs)]
        if twins:
            key = twins[0]
        elif not all(isinstance(i, ObjectId) for i in ids):
            key = "_id"
    return CollectionSample(name, list(fields), values, key, db[name].count_documents({}))


def _samples(values: list[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if v is None or isinstance(v, (bytes, Binary, dict, list)) or v in out:
            continue
        out.append(v)
        if len(out) == SAMPLE_VALUES_PER_COLUMN:
            break
    return tuple(out)


def _inferred_columns(cs: CollectionSample) -> tuple[Column, ...]:
    cols = []
    for f in cs.fields:
        if f == "_id" and cs.key != "_id":
            continue  # the _id twin of a key field, or a surrogate ObjectId
        cols.append(Column(f, bson_type_name(cs.values[f]), primary_key=(f == cs.key), samples=_samples(cs.values[f])))
    return tuple(cols)


def _declared_columns(declared: Table, cs: CollectionSample, where: str) -> tuple[Column, ...]:
    """The declared columns (types and sample values as declared) plus any field the data adds."""
    cols = []
    for c in declared.columns:
        seen = cs.values.get(c.name, [])
        inferred = bson_type_name(seen)
        if inferred and c.type and not _type_agrees(c.type, inferred):
            warnings.warn(f"{where}: {declared.name}.{c.name} is declared {c.type} but holds {inferred} values", stacklevel=3)
        cols.append(Column(c.name, c.type, c.primary_key, c.not_null, c.description, c.zh, c.samples or _samples(seen)))
    known = {c.name for c in declared.columns}
    for f in cs.fields:
        if f not in known and not (f == "_id" and cs.key != "_id"):
            cols.append(Column(f, bson_type_name(cs.values[f]), samples=_samples(cs.values[f])))
    return tuple(cols)


def _type_agrees(declared: str, inferred: str) -> bool:
    """Loose agreement between a declared SQL type and a BSON-inferred one."""
    probe = Column("x", declared)
    if inferred in ("INTEGER", "REAL", "DECIMAL", "BOOLEAN"):
        return probe.is_numeric or declared.upper() in ("BOOLEAN", "BOOL", "BIT")
    if inferred == "TEXT":
        return probe.is_text or any(k in declared.upper() for k in ("DATE", "TIME"))
    if inferred == "BLOB":
        return any(k in declared.upper() for k in ("BLOB", "BINARY", "IMAGE"))
    return True


def read_declared(db: Database) -> dict[str, Any] | None:
    """The declared schema document's ``schema`` field, or None when there is none.

    Raises:
        DataError: the document exists but is malformed or has a newer ``format``.
    """
    if METADATA_COLLECTION not in db.list_collection_names():
        return None
    doc = db[METADATA_COLLECTION].find_one({"_id": "schema"})
    if doc is None:
        return None
    where = f"{db.name}.{METADATA_COLLECTION}"
    fmt = doc.get("format")
    if fmt != METADATA_FORMAT:
        raise DataError(f"declared schema has format {fmt!r}; this version reads format {METADATA_FORMAT}", where=where)
    schema = doc.get("schema")
    if not isinstance(schema, dict) or not isinstance(schema.get("tables"), list):
        raise DataError('declared schema needs a field "schema" with a "tables" list', where=where)
    return schema


def introspect_mongodb(
    db: Database | str,
    *,
    references: str = "auto",
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    descriptions: str | Path | None = None,
    name: str | None = None,
) -> Schema:
    """Read a MongoDB database's schema (see the module docstring for the rules).

    Args:
        db: a pymongo ``Database`` or a URI naming one (``mongodb://127.0.0.1:27017/northwind``).
        references: ``auto``, ``declared`` or ``inferred`` (:data:`REFERENCE_MODES`).
        sample_size: documents read per collection.
        descriptions: optional description sidecar JSON (as for SQLite); it replaces declared
            descriptions.
        name: schema name; default the declared name, else the database name.

    Returns:
        A :class:`Schema` with ``backend="mongodb"``, ``source`` the database's URI (password
        hidden), tables in declared order (else name order).

    Raises:
        ConfigError: unknown ``references`` mode or ``sample_size < 1``.
        SchemaError: the server cannot be reached, the database has no collections, or
            ``references="declared"`` and nothing is declared.
        DataError: the declared schema is malformed or names a collection that does not exist;
            the sidecar is malformed or names an unknown table/column.

    Warns: ambiguous inferred references; declared types the data contradicts; no references.
    """
    if references not in REFERENCE_MODES:
        raise ConfigError(f"must be one of {', '.join(REFERENCE_MODES)}, got {references!r}", where="references")
    if sample_size < 1:
        raise ConfigError(f"must be >= 1, got {sample_size}", where="sample_size")
    if isinstance(db, str):
        client, database = connect(db)
        try:
            return introspect_mongodb(
                database, references=references, sample_size=sample_size, descriptions=descriptions, name=name
            )
        finally:
            client.close()
    source = _source(db)
    try:
        names = sorted(n for n in db.list_collection_names() if n != METADATA_COLLECTION and not n.startswith("system."))
        declared = read_declared(db) if references != "inferred" else None
        if references == "declared" and declared is None:
            raise SchemaError(
                f"no declared schema (collection {METADATA_COLLECTION} is missing or empty); load the data with "
                "python -m data_pipeline.mongo_load or use references='inferred'",
                where=source,
            )
        if not names:
            raise SchemaError("database has no collections", where=source)
        samples = {n: sample_collection(db, n, sample_size) for n in names}
        if declared is not None:
            schema = _declared_schema(db, declared, samples, source, name)
        else:
            tables = tuple(Table(n, _inferred_columns(samples[n]), samples[n].count) for n in names)
            fks, notes = infer_references(db, samples)
            for note in notes:
                warnings.warn(f"{source}: {note}", stacklevel=2)
            schema = Schema(name or db.name, tables, tuple(fks), source=source, backend="mongodb")
    except PyMongoError as exc:
        raise SchemaError(f"cannot read the database ({str(exc).split(',')[0][:200]})", where=source) from None
    if descriptions is not None:
        schema = _describe(schema, Path(descriptions))
    if not schema.foreign_keys:
        warnings.warn(f"{source}: no references between collections; only single-collection paths exist", stacklevel=2)
    return schema


def _source(db: Database) -> str:
    host, port = db.client.address or ("?", 0)
    return f"mongodb://{host}:{port}/{db.name}"


def _declared_schema(
    db: Database, declared: dict[str, Any], samples: dict[str, CollectionSample], source: str, name: str | None
) -> Schema:
    where = f"{db.name}.{METADATA_COLLECTION}"
    try:
        spec = Schema.from_dict(declared)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"malformed declared schema ({exc})", where=where) from None
    missing = [t.name for t in spec.tables if t.name not in samples]
    if missing:
        raise DataError(f"declared tables have no collection: {', '.join(missing)}", where=where)
    tables = [
        Table(t.name, _declared_columns(t, samples[t.name], where), samples[t.name].count, t.description, t.zh, t.description_zh)
        for t in spec.tables
    ]
    extra = [n for n in samples if not spec.has_table(n)]
    tables += [Table(n, _inferred_columns(samples[n]), samples[n].count) for n in extra]
    columns = {t.name: {c.name for c in t.columns} for t in tables}
    for fk in spec.foreign_keys:
        for table, column in ((fk.table, fk.column), (fk.ref_table, fk.ref_column)):
            if column not in columns.get(table, set()):
                raise DataError(f"declared reference {fk} names unknown field {table}.{column}", where=where)
    return Schema(name or spec.name or db.name, tuple(tables), spec.foreign_keys, source=source, backend="mongodb")


def _describe(schema: Schema, sidecar: Path) -> Schema:
    from core.schema import _load_descriptions, describe  # the SQLite backend's sidecar reader, checks and reading

    return describe(schema, _load_descriptions(sidecar, {t.name: list(t.columns) for t in schema.tables}))


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _name_score(field: str, target: CollectionSample) -> int:
    """2: the field is named like the target's key; 1: like the target collection; 0: no match.

    >>> cs = CollectionSample("Customers", ["CustomerID"], {}, "CustomerID", 0)
    >>> _name_score("CustomerID", cs), _name_score("customer_id", cs), _name_score("ShipVia", cs)
    (2, 2, 0)
    >>> _name_score("customer", CollectionSample("customers", ["_id"], {}, "_id", 0))
    1
    """
    f = _norm(field)
    if target.key and target.key != "_id" and f == _norm(target.key):
        return 2
    stem = re.sub(r"(id|key|code|no)$", "", f) or f
    coll = _norm(target.name)
    singular = re.sub(r"(ies)$", "y", coll) if coll.endswith("ies") else coll.rstrip("s")
    return 1 if stem and stem in (coll, singular) else 0


def _id_range(db: Database, name: str) -> tuple[Any, Any]:
    """The smallest and largest ``_id`` (the key or its twin), read through the ``_id`` index."""
    ends = [db[name].find_one({}, {"_id": 1}, sort=[("_id", d)]) for d in (1, -1)]
    return ends[0]["_id"], ends[1]["_id"]  # type: ignore[index]


def infer_references(db: Database, samples: dict[str, CollectionSample]) -> tuple[list[ForeignKey], list[str]]:
    """References inferred from values: ``(foreign_keys, notes)``.

    A field ``A.f`` (not A's key; integer or text values) references collection ``B`` when every
    sampled non-null value of ``f`` is a key value of ``B`` (values outside B's smallest and
    largest key are ruled out at once; the rest is checked on the server with one ``$in`` count). Among several such ``B``, the one whose key or name matches ``f``
    (:func:`_name_score`) wins; several without a unique best name match are ambiguous and only
    noted. ``A == B`` (a self reference such as ``Employees.ReportsTo``) is allowed.
    """
    fks: list[ForeignKey] = []
    notes: list[str] = []
    keyed = {n: s for n, s in samples.items() if s.key is not None and s.count > 0}
    key_kinds = {n: bson_type_name(s.values[s.key]) for n, s in keyed.items()}
    key_range = {n: _id_range(db, n) for n in keyed}
    for a, cs in samples.items():
        for f in cs.fields:
            if f in ("_id", cs.key):
                continue
            vals = list(dict.fromkeys(v for v in cs.values[f] if v is not None))
            kind = bson_type_name(vals)
            if not vals or kind not in ("INTEGER", "TEXT"):
                continue
            hits = []
            for b, ks in keyed.items():
                if key_kinds[b] != kind or (b == a and ks.key == f):
                    continue
                low, high = key_range[b]
                if not low <= min(vals) <= max(vals) <= high:  # cheap pre-check before asking the server
                    continue
                if db[b].count_documents({ks.key: {"$in": vals}}) == len(vals):
                    hits.append((_name_score(f, ks), b))
            if not hits:
                continue
            best = max(s for s, _ in hits)
            top = [b for s, b in hits if s == best]
            if len(top) == 1 and (best > 0 or len(hits) == 1):
                fks.append(ForeignKey(a, f, top[0], str(keyed[top[0]].key)))
            else:
                notes.append(f"{a}.{f} could reference {', '.join(sorted(b for _, b in hits))}; ambiguous, not used")
    return sorted(set(fks), key=lambda k: (k.table, k.column)), notes
