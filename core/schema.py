"""The schema model every stage shares: tables, columns, foreign keys, descriptions.

A :class:`Schema` is plain data. It is read from a database by :func:`introspect` (SQLite here;
other backends build the same object), optionally explained by a *description sidecar* (JSON,
format in ``data_pipeline/descriptions/README.md``) so that cryptic names such as ``mz_cf``
(门诊处方, outpatient prescriptions) carry words that questions can be linked to.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import DataError, SchemaError
from core.catalog import read_catalog
from core.sqlite import connect_readonly, quote_ident

SAMPLE_VALUES_PER_COLUMN = 5
SAMPLE_MAX_CHARS = 200
"""A text sample longer than this is cut to it (a megabyte string would otherwise go into every schema.json)."""


@dataclass(frozen=True)
class Column:
    """One column. ``samples`` holds up to 5 distinct non-null values read from the data, text
    cut to :data:`SAMPLE_MAX_CHARS` characters."""

    name: str
    type: str = ""
    primary_key: bool = False
    not_null: bool = False
    description: str = ""
    zh: str = ""
    samples: tuple[Any, ...] = ()

    @property
    def is_text(self) -> bool:
        """True for text-like declared types (``TEXT``, ``VARCHAR(40)``, ``NCHAR``...) or untyped text values."""
        t = self.type.upper()
        if any(k in t for k in ("CHAR", "TEXT", "CLOB")):
            return True
        return not t and bool(self.samples) and all(isinstance(v, str) for v in self.samples)

    @property
    def is_numeric(self) -> bool:
        """True for integer/real/decimal declared types."""
        t = self.type.upper()
        return any(k in t for k in ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC", "MONEY"))


@dataclass(frozen=True)
class ForeignKey:
    """``table.column`` references ``ref_table.ref_column``.

    A composite key (``FOREIGN KEY (order_id, line_no) REFERENCES lines (order_id, line_no)``)
    is one ForeignKey: its first column pair in ``column``/``ref_column``, the others in
    ``more_pairs`` as ``(column, ref_column)``. A join on it must match every pair.

    >>> fk = ForeignKey("ships", "order_id", "lines", "order_id", (("line_no", "line_no"),))
    >>> str(fk), fk.pairs
    ('ships(order_id, line_no) -> lines(order_id, line_no)', (('order_id', 'order_id'), ('line_no', 'line_no')))
    """

    table: str
    column: str
    ref_table: str
    ref_column: str
    more_pairs: tuple[tuple[str, str], ...] = ()

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """Every ``(column, ref_column)`` pair of the key, the first one first."""
        return ((self.column, self.ref_column), *self.more_pairs)

    @property
    def columns(self) -> tuple[str, ...]:
        """The referencing columns of ``table``, in key order."""
        return (self.column, *(c for c, _ in self.more_pairs))

    @property
    def ref_columns(self) -> tuple[str, ...]:
        """The referenced columns of ``ref_table``, in key order."""
        return (self.ref_column, *(rc for _, rc in self.more_pairs))

    def to_list(self) -> list[Any]:
        """JSON form: ``[table, column, ref_table, ref_column]``, plus ``[[column, ref_column], ...]``
        for the other pairs of a composite key (read back by :meth:`from_list`)."""
        head: list[Any] = [self.table, self.column, self.ref_table, self.ref_column]
        return head + [[list(p) for p in self.more_pairs]] if self.more_pairs else head

    @classmethod
    def from_list(cls, row: list[Any]) -> ForeignKey:
        """Inverse of :meth:`to_list`. Raises TypeError or ValueError on a malformed row."""
        if not isinstance(row, (list, tuple)) or len(row) not in (4, 5):
            raise ValueError(f"a foreign key is [table, column, ref_table, ref_column] (got {row!r})")
        more = tuple((str(c), str(rc)) for c, rc in row[4]) if len(row) == 5 else ()
        return cls(*(str(x) for x in row[:4]), more_pairs=more)

    def __str__(self) -> str:
        if not self.more_pairs:
            return f"{self.table}.{self.column} -> {self.ref_table}.{self.ref_column}"
        return f"{self.table}({', '.join(self.columns)}) -> {self.ref_table}({', '.join(self.ref_columns)})"


@dataclass(frozen=True)
class Table:
    """One table with its columns, row count and optional English/Chinese descriptions."""

    name: str
    columns: tuple[Column, ...]
    row_count: int = 0
    description: str = ""
    zh: str = ""
    description_zh: str = ""

    def column(self, name: str) -> Column:
        """The column called ``name``. Raises SchemaError naming the table when absent."""
        for c in self.columns:
            if c.name == name:
                return c
        raise SchemaError(f"table has no column {name!r}", where=self.name)

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.primary_key)

    def label(self, language: str = "en") -> str:
        """Human words for the table: the Chinese name for ``zh`` when described, else a readable name."""
        if language == "zh" and self.zh:
            return self.zh
        return humanize(self.name)


@dataclass(frozen=True)
class Schema:
    """A database schema: ``tables`` in a stable order and the ``foreign_keys`` between them.

    ``source`` is the file (or URI) it was read from; ``backend`` is ``"sqlite"`` or ``"mongodb"``.
    """

    name: str
    tables: tuple[Table, ...]
    foreign_keys: tuple[ForeignKey, ...]
    source: str = ""
    backend: str = "sqlite"
    _index: dict[str, Table] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({t.name: t for t in self.tables})

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    def table(self, name: str) -> Table:
        """The table called ``name``. Raises SchemaError listing the known tables when absent."""
        try:
            return self._index[name]
        except KeyError:
            raise SchemaError(
                f"unknown table {name!r}; tables are: {', '.join(self.table_names)}", where=self.source or self.name
            ) from None

    def has_table(self, name: str) -> bool:
        return name in self._index

    def fingerprint(self) -> str:
        """A 16-hex-digit hash of table names, column names/types and foreign keys.

        Descriptions, row counts and sample values do not enter it: a router trained on a
        schema stays valid when its data or its documentation changes, not when its shape does.
        """
        shape = {
            "tables": sorted([t.name, sorted([c.name, c.type.upper()] for c in t.columns)] for t in self.tables),
            "fks": sorted(fk.to_list() for fk in self.foreign_keys),
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (round-trips through :meth:`from_dict`)."""
        return {
            "name": self.name,
            "source": self.source,
            "backend": self.backend,
            "tables": [
                {
                    "name": t.name,
                    "row_count": t.row_count,
                    "description": t.description,
                    "zh": t.zh,
                    "description_zh": t.description_zh,
                    "columns": [
                        {
                            "name": c.name,
                            "type": c.type,
                            "primary_key": c.primary_key,
                            "not_null": c.not_null,
                            "description": c.description,
                            "zh": c.zh,
                            "samples": list(c.samples),
                        }
                        for c in t.columns
                    ],
                }
                for t in self.tables
            ],
            "foreign_keys": [fk.to_list() for fk in self.foreign_keys],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schema:
        """Inverse of :meth:`to_dict`."""
        tables = tuple(
            Table(
                name=t["name"],
                row_count=t.get("row_count", 0),
                description=t.get("description", ""),
                zh=t.get("zh", ""),
                description_zh=t.get("description_zh", ""),
                columns=tuple(
                    Column(
                        name=c["name"],
                        type=c.get("type", ""),
                        primary_key=c.get("primary_key", False),
                        not_null=c.get("not_null", False),
                        description=c.get("description", ""),
                        zh=c.get("zh", ""),
                        samples=tuple(c.get("samples", ())),
                    )
                    for c in t["columns"]
                ),
            )
            for t in d["tables"]
        )
        fks = tuple(ForeignKey.from_list(fk) for fk in d.get("foreign_keys", []))
        return cls(d["name"], tables, fks, source=d.get("source", ""), backend=d.get("backend", "sqlite"))


def humanize(identifier: str) -> str:
    """Readable words from an identifier: ``OrderDetails``/``order_details`` -> ``order details``.

    >>> humanize("CustomerCustomerDemo")
    'customer customer demo'
    >>> humanize("Order Details")
    'order details'
    >>> humanize("invoice_line_id")
    'invoice line id'
    >>> humanize("mz_cf")
    'mz cf'
    """
    out: list[str] = []
    prev = ""
    for ch in identifier:
        if ch in "_- ":
            out.append(" ")
        elif ch.isupper() and prev and (prev.islower() or prev.isdigit()):
            out.append(" " + ch)
        else:
            out.append(ch)
        prev = ch
    return " ".join("".join(out).lower().split())


def _open_sqlite(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise SchemaError("database file not found", where=path)
    with path.open("rb") as fh:
        header = fh.read(20)
    if header[:16] != b"SQLite format 3\x00":
        raise SchemaError("not a SQLite database (bad header)", where=path)
    conn = connect_readonly(path)
    conn.text_factory = decode_text
    return conn


def decode_text(raw: bytes) -> str:
    r"""SQLite text as ``str``; bytes that are not UTF-8 become U+FFFD instead of an error.

    >>> decode_text("café".encode()), decode_text(b"\xff(")
    ('café', '\ufffd(')
    """
    return raw.decode("utf-8", errors="replace")


def _load_descriptions(path: Path | None, schema_tables: dict[str, list[Column]]) -> dict[str, Any]:
    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise DataError("description file not found", where=path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", where=path, line=exc.lineno) from exc
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        raise DataError('expected an object {"tables": {...}}', where=path)
    for tname, tdoc in tables.items():
        if tname not in schema_tables:
            raise DataError(f"describes unknown table {tname!r}", where=path)
        _check_text_fields(tdoc, ("description", "zh", "description_zh"), f"tables.{tname}", path)
        columns = (tdoc or {}).get("columns") or {}
        if not isinstance(columns, dict):
            raise DataError(f'tables.{tname}.columns must be an object {{"column": {{...}}}}', where=path)
        known = {c.name for c in schema_tables[tname]}
        for cname, cdoc in columns.items():
            if cname not in known:
                raise DataError(f"describes unknown column {tname}.{cname}", where=path)
            _check_text_fields(cdoc, ("description", "zh"), f"tables.{tname}.columns.{cname}", path)
    return tables


def _check_text_fields(doc: Any, fields: tuple[str, ...], where: str, path: Path) -> None:
    """``doc`` is null or an object whose ``fields`` are strings when present; DataError names ``where``."""
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise DataError(f"{where} must be an object with {', '.join(fields)} (got {type(doc).__name__})", where=path)
    for f in fields:
        if doc.get(f) is not None and not isinstance(doc[f], str):
            raise DataError(f"{where}.{f} must be text (got {type(doc[f]).__name__})", where=path)


def introspect(db: str | Path, descriptions: str | Path | None = None, name: str | None = None) -> Schema:
    """Read a SQLite database's schema: tables, columns (type, PK, NOT NULL), FKs, row counts, sample values.

    Args:
        db: path to a SQLite file (opened read-only; it is never modified).
        descriptions: optional sidecar JSON with English/Chinese descriptions of tables and columns.
        name: schema name; defaults to the file's stem.

    Returns:
        A :class:`Schema` with tables in name order.

    Raises:
        SchemaError: the file is missing, is not SQLite, or has no tables.
        DataError: the sidecar is malformed or names a table/column the database lacks.

    A schema without foreign keys is valid (only single-table paths exist) and warns.
    """
    path = Path(db)
    conn = _open_sqlite(path)
    try:
        try:
            catalog, notes = read_catalog(conn)
        except sqlite3.DatabaseError as exc:
            raise SchemaError(f"not a readable SQLite database ({exc})", where=path) from exc
        if not catalog:
            raise SchemaError("database has no tables", where=path)
        raw_cols: dict[str, list[Column]] = {}
        for t, info in catalog.items():
            qt = quote_ident(t)
            cols = []
            for c in info.columns:
                qc = quote_ident(c.name)
                samples = tuple(
                    r[0]
                    for r in conn.execute(
                        f"SELECT DISTINCT CASE WHEN typeof({qc}) = 'text' THEN substr({qc}, 1, {SAMPLE_MAX_CHARS}) "
                        f"ELSE {qc} END FROM {qt} WHERE {qc} IS NOT NULL "
                        f"AND typeof({qc}) != 'blob' LIMIT {SAMPLE_VALUES_PER_COLUMN}"
                    )
                )
                cols.append(Column(c.name, c.type, c.pk > 0, c.not_null, samples=samples))
            raw_cols[t] = cols
    finally:
        conn.close()
    for note in notes:
        warnings.warn(f"{path}: {note}", stacklevel=2)
    names = list(catalog)
    counts = {t: info.row_count for t, info in catalog.items()}
    fks = [
        ForeignKey(
            t, key.columns[0], key.ref_table, key.ref_columns[0],
            tuple(zip(key.columns[1:], key.ref_columns[1:], strict=True)),
        )
        for t, info in catalog.items()
        for key in info.foreign_keys
    ]
    desc = _load_descriptions(Path(descriptions) if descriptions else None, raw_cols)
    tables = tuple(Table(t, tuple(raw_cols[t]), counts[t]) for t in names)
    if not fks:
        warnings.warn(f"{path}: no foreign keys; only single-table paths exist", stacklevel=2)
    schema = Schema(name or path.stem, tables, tuple(sorted(set(fks), key=lambda f: (f.table, f.column))), source=str(path))
    return describe(schema, desc)


def describe(schema: Schema, tables_doc: dict[str, Any]) -> Schema:
    """``schema`` with the names and descriptions of a sidecar's checked ``tables`` object
    (:func:`_load_descriptions`); a table or column it leaves out, or a null text, gets ``""``.
    Used by every backend, so a sidecar reads the same on SQLite and MongoDB."""

    def text(doc: dict[str, Any] | None, key: str) -> str:
        return (doc or {}).get(key) or ""

    tables = []
    for t in schema.tables:
        tdoc = tables_doc.get(t.name) or {}
        cdocs = tdoc.get("columns") or {}
        cols = tuple(
            Column(c.name, c.type, c.primary_key, c.not_null, text(cdocs.get(c.name), "description"),
                   text(cdocs.get(c.name), "zh"), c.samples)
            for c in t.columns
        )  # fmt: skip
        tables.append(Table(t.name, cols, t.row_count, text(tdoc, "description"), text(tdoc, "zh"), text(tdoc, "description_zh")))
    return Schema(schema.name, tuple(tables), schema.foreign_keys, source=schema.source, backend=schema.backend)
