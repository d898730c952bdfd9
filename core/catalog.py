"""The SQLite catalogue as SQLite declares it: the one reader of ``PRAGMA table_info``,
``index_list`` and ``foreign_key_list`` in this project.

:func:`read_catalog` returns every table's columns (declared type, NOT NULL, position in the
primary key), its unique column sets, its foreign keys (a composite key as one
:class:`CatalogKey`), its row count and whether it is ``WITHOUT ROWID``. Foreign-key targets
are resolved as SQLite resolves them: table and column names case-insensitively, to their
declared spelling, and a key without target columns to the referenced table's primary key,
position by position. A key naming a table or column that does not exist is left out, with a
note. :func:`core.schema.introspect` builds the :class:`~core.schema.Schema` from this
catalogue; :mod:`data_pipeline.synthesize` fills empty tables from it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from core.sqlite import quote_ident

__all__ = ["CatalogColumn", "CatalogKey", "CatalogTable", "read_catalog"]


@dataclass(frozen=True)
class CatalogColumn:
    """One column as SQLite declares it. ``pk`` is its 1-based position in the primary key, 0 if none."""

    name: str
    type: str
    not_null: bool
    pk: int

    @property
    def affinity(self) -> str:
        """SQLite's type affinity of the declared type: INTEGER, TEXT, BLOB, REAL or NUMERIC.

        >>> [CatalogColumn("c", t, False, 0).affinity for t in ("BIGINT", "nvarchar(40)", "", "DOUBLE", "DATETIME")]
        ['INTEGER', 'TEXT', 'BLOB', 'REAL', 'NUMERIC']
        """
        t = self.type.upper()
        if "INT" in t:
            return "INTEGER"
        if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
            return "TEXT"
        if "BLOB" in t or not t:
            return "BLOB"
        if any(k in t for k in ("REAL", "FLOA", "DOUB")):
            return "REAL"
        return "NUMERIC"


@dataclass(frozen=True)
class CatalogKey:
    """``table(columns) -> ref_table(ref_columns)``: one foreign key, a composite one as one key.

    Names are resolved to their declared spelling; ``columns[i]`` references ``ref_columns[i]``.
    """

    table: str
    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.table}({', '.join(self.columns)}) -> {self.ref_table}({', '.join(self.ref_columns)})"


@dataclass(frozen=True)
class CatalogTable:
    """One table: columns, unique column sets (primary key first), foreign keys, row count."""

    name: str
    columns: tuple[CatalogColumn, ...]
    unique_sets: tuple[tuple[str, ...], ...]
    foreign_keys: tuple[CatalogKey, ...]
    row_count: int
    without_rowid: bool = False

    @property
    def primary_key(self) -> tuple[str, ...]:
        """The primary-key columns in key order; ``()`` when none is declared."""
        return tuple(c.name for c in sorted((c for c in self.columns if c.pk), key=lambda c: c.pk))

    @property
    def rowid_alias(self) -> str | None:
        """The ``INTEGER PRIMARY KEY`` column (an alias of the rowid), if any."""
        pk = [c for c in self.columns if c.pk]
        if len(pk) == 1 and pk[0].type.upper() == "INTEGER" and not self.without_rowid:
            return pk[0].name
        return None

    def column(self, name: str) -> CatalogColumn:
        """The column called ``name`` (exact spelling). Raises KeyError when absent."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")


def read_catalog(conn: sqlite3.Connection) -> tuple[dict[str, CatalogTable], list[str]]:
    """Tables of an open database (``sqlite_*`` excluded), in name order, and notes on keys left out.

    Args:
        conn: an open connection (read-only is enough).

    Returns:
        ``({table name: CatalogTable}, notes)``; each note is one line naming the table and the key.

    Raises:
        sqlite3.DatabaseError: the file is not a readable SQLite database.
    """
    names = [
        r[0]
        for r in conn.execute(
            # only SQLite's own tables start with "sqlite_" (LIKE's "_" is a wildcard: it hid "sqlite1", "SQLiteUsers")
            "SELECT name FROM sqlite_master WHERE type = 'table' AND lower(substr(name, 1, 7)) != 'sqlite_' ORDER BY name"
        )
    ]
    by_lower = {n.lower(): n for n in names}
    cols: dict[str, tuple[CatalogColumn, ...]] = {}
    for t in names:
        cols[t] = tuple(
            CatalogColumn(r[1], r[2] or "", bool(r[3]), int(r[5]))
            for r in conn.execute(f"PRAGMA table_info({quote_ident(t)})")
        )
    notes: list[str] = []
    out: dict[str, CatalogTable] = {}
    for t in names:
        qt = quote_ident(t)
        col_by_lower = {c.name.lower(): c.name for c in cols[t]}
        pk = tuple(c.name for c in sorted((c for c in cols[t] if c.pk), key=lambda c: c.pk))
        unique: list[tuple[str, ...]] = [pk] if pk else []
        for _seq, index, is_unique, origin, partial in conn.execute(f"PRAGMA index_list({qt})"):
            if not is_unique or origin == "pk" or partial:
                continue
            members = [r[2] for r in conn.execute(f"PRAGMA index_info({quote_ident(index)})")]
            if members and None not in members and tuple(members) not in unique:
                unique.append(tuple(members))
        grouped: dict[int, list[tuple[str, str, str | None]]] = {}
        for row in conn.execute(f"PRAGMA foreign_key_list({qt})"):
            grouped.setdefault(row[0], []).append((row[2], row[3], row[4]))
        keys: list[CatalogKey] = []
        for _id, parts in sorted(grouped.items()):
            ref = by_lower.get(str(parts[0][0]).lower())
            if ref is None:
                notes.append(f"{t}: foreign key to missing table {parts[0][0]!r} ignored")
                continue
            ref_pk = [c.name for c in sorted((c for c in cols[ref] if c.pk), key=lambda c: c.pk)]
            if any(to is None for _r, _f, to in parts) and len(parts) != len(ref_pk):
                notes.append(f"{t}: foreign key {[p[1] for p in parts]} -> {ref} has {len(parts)} column(s) but {ref}'s "
                             f"primary key has {len(ref_pk)}; ignored (SQLite calls it a foreign key mismatch)")  # fmt: skip
                continue
            ref_lower = {c.name.lower(): c.name for c in cols[ref]}
            mine, theirs = [], []
            for k, (_r, frm, to) in enumerate(parts):
                src = col_by_lower.get(str(frm).lower())
                dst = ref_lower.get(str(to).lower()) if to is not None else (ref_pk[k] if k < len(ref_pk) else None)
                if src is None or dst is None:
                    break
                mine.append(src)
                theirs.append(dst)
            else:
                key = CatalogKey(t, tuple(mine), ref, tuple(theirs))
                if key not in keys:
                    keys.append(key)
                continue
            notes.append(f"{t}: foreign key {[p[1] for p in parts]} -> {ref} names a missing column; ignored")
        without_rowid = _without_rowid(conn, t)
        count = conn.execute(f"SELECT COUNT(*) FROM {qt}").fetchone()[0]
        out[t] = CatalogTable(t, cols[t], tuple(unique), tuple(keys), int(count), without_rowid)
    return out, notes


def _without_rowid(conn: sqlite3.Connection, table: str) -> bool:
    """True for a ``WITHOUT ROWID`` table: SQLite's own answer (``PRAGMA table_list``, SQLite
    3.37+), else whether ``rowid`` can be selected (any options, order or comments after the
    column list: ``STRICT, WITHOUT ROWID``; a column named ``rowid`` counts as one)."""
    try:
        for row in conn.execute(f"PRAGMA table_list({quote_ident(table)})"):
            if row[1] == table:
                return bool(row[4])
    except sqlite3.DatabaseError:
        pass
    try:
        conn.execute(f"SELECT rowid FROM {quote_ident(table)} LIMIT 0")
        return False
    except sqlite3.OperationalError:
        return True
