"""Spider schemas as :class:`~core.schema.Schema` objects, straight from ``tables.json``.

Spider ships no row data for its schemas; this converter keeps names, types and keys so the
schema graph and its legal paths can be built (for evaluation and benchmarks, never training).
"""

from __future__ import annotations

from typing import Any

from core.errors import DataError
from core.schema import Column, ForeignKey, Schema, Table

SPIDER_TYPES: dict[str, str] = {"text": "TEXT", "number": "NUMERIC", "time": "DATETIME", "boolean": "BOOLEAN", "others": "BLOB"}
"""Declared type for each Spider ``column_types`` value (as in ``data_pipeline.datasets``)."""


def schema_from_spider(entry: dict[str, Any]) -> Schema:
    """Convert one ``tables.json`` entry to a :class:`Schema` (original table and column names).

    Primary keys may be single column indices or lists (composite keys). Foreign keys are
    ``[column, referenced column]`` index pairs; repeated pairs are kept once.

    >>> s = schema_from_spider({"db_id": "pets", "table_names_original": ["people", "pet"],
    ...     "column_names_original": [[-1, "*"], [0, "id"], [0, "Home Town"], [1, "owner"]],
    ...     "column_types": ["text", "number", "text", "number"], "primary_keys": [1], "foreign_keys": [[3, 1]]})
    >>> s.table_names, s.table("people").primary_key, [str(fk) for fk in s.foreign_keys]
    (('people', 'pet'), ('id',), ['pet.owner -> people.id'])

    Raises:
        DataError: a field is missing, lists have different lengths, or an index is out of range
            (``tables.json[db_id]`` named).
    """
    where = f"tables.json[{entry.get('db_id', '?')}]"
    try:
        tables = [str(t) for t in entry["table_names_original"]]
        columns = [(int(t), str(n)) for t, n in entry["column_names_original"]]
        types = [str(x) for x in entry["column_types"]]
        if len(types) != len(columns):
            raise DataError(f"{len(columns)} columns but {len(types)} column_types", where=where)
        pk_cols: set[int] = set()
        for p in entry.get("primary_keys", []):
            pk_cols.update(int(c) for c in (p if isinstance(p, list) else [p]))
        fks: list[ForeignKey] = []
        for c, ref in entry.get("foreign_keys", []):
            (ti, cn), (rti, rcn) = columns[int(c)], columns[int(ref)]
            fk = ForeignKey(tables[ti], cn, tables[rti], rcn)
            if fk not in fks:
                fks.append(fk)
        cols_by_table: dict[int, list[Column]] = {i: [] for i in range(len(tables))}
        for ci, (ti, name) in enumerate(columns):
            if ti < 0:
                continue  # the "*" pseudo-column
            cols_by_table[ti].append(Column(name, SPIDER_TYPES.get(types[ci].lower(), ""), primary_key=ci in pk_cols))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataError(f"malformed schema entry ({exc!r})", where=where) from exc
    return Schema(
        str(entry["db_id"]),
        tuple(Table(name, tuple(cols_by_table[i])) for i, name in enumerate(tables)),
        tuple(fks),
        source=where,
    )


def largest_spider_schema(entries: list[dict[str, Any]]) -> Schema:
    """The schema with the most tables (ties: the most foreign keys, then ``db_id``)."""
    if not entries:
        raise DataError("no Spider schemas given", where="tables.json")
    best = max(
        entries,
        key=lambda e: (len(e.get("table_names_original", [])), len(e.get("foreign_keys", [])), str(e.get("db_id"))),
    )
    return schema_from_spider(best)
