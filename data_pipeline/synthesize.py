"""Synthetic rows for empty tables, so that every legal path has data to ask questions about.

A schema without rows (Spider's ``tables.json``, Northwind's two empty demographic tables) has
legal paths but no entity values, so no question over them can have a gold SQL that returns
rows. :func:`synthesize_rows` copies the database (SQLite's backup API into a temporary file,
renamed into place; the input is opened read-only and never modified) and fills the empty tables
with rows that respect the schema:

* **keys**: primary keys and UNIQUE indexes stay unique (``INTEGER PRIMARY KEY`` counts up after
  the largest existing value; text keys are codes such as ``CT007``); composite keys are drawn
  until the combination is new, or the row is dropped;
* **NOT NULL and types**: every synthetic value is non-null and follows the declared type's
  affinity; columns typed ``BLOB`` (Spider's ``others``) or untyped get readable text, or 0/1
  and ``T``/``F`` flags for names such as ``is_male``;
* **foreign keys**: values are drawn from the referenced columns' existing values (read back
  from the database, so SQLite's type conversions are respected). Referenced tables are filled
  first (topological order over the FK graph). Several keys of one table into the same
  referenced table, on different referenced columns, take their values from one referenced row,
  so composite references hold. A self-reference (``Employees.ReportsTo``) points at an earlier
  row (the first row gets NULL when the column allows it, else itself). Tables in a cycle are
  ordered by breaking it at the table whose keys into the cycle are NULL-able (then fewest
  keys); those keys are filled after every table has its rows. Foreign keys that reference a
  column that is not unique (a Spider quirk: SQLite reports "foreign key mismatch" once
  ``foreign_keys=ON``) are fine: enforcement stays off and the values are made consistent here.
  An empty table that a filled table references is filled too (it is listed in the report);
* **readable values**, so question templates can name them: ``singer.name`` -> ``Singer 7``,
  ``song_name`` -> ``Song 7``, ``country`` and ``city`` from small word lists, ``*_code`` ->
  ``B007``, dates as ISO dates (2000-2024), years 1990-2024, ages 18-80, prices 5-5000 with
  cents, other numbers 1-100; free text such as ``type`` or ``status`` repeats a few values
  (``Status 3``) so that it can serve as a category.

The same seed gives the same file; each table draws from its own generator, so adding a table
does not change the rows of the others. After filling, every foreign key touching a filled table
is checked; dangling values (none are expected) are counted in
:attr:`SynthesisReport.fk_violations`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import re
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_pipeline.datasets import resolve_database
from core.catalog import CatalogColumn, CatalogKey, CatalogTable, read_catalog
from core.errors import ConfigError, SchemaError
from core.sqlite import connect_readonly
from core.io import ensure_writable_file
from core.schema import humanize, quote_ident
from data_pipeline.templates import singular

ROWS_PER_TABLE = 30
"""Synthetic rows per table unless told otherwise."""

MAX_DRAWS = 20
"""Attempts to find a new combination for a key made of foreign-key columns before a row is dropped."""

POOL_LIMIT = 10_000
"""Most distinct referenced values read from one existing table to draw foreign keys from."""

FIRST_DATE = dt.date(2000, 1, 1)
DATE_SPAN_DAYS = 9131  # 2000-01-01 .. 2024-12-31

WORDS: dict[str, tuple[str, ...]] = {
    "first": ("Anna", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Keiko", "Liam",
              "Maria", "Noah", "Olga", "Pedro", "Qing", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yara"),
    "last": ("Andersen", "Brown", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen", "Kowalski",
             "Lopez", "Meyer", "Novak", "Olsen", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka", "Urban", "Weber"),
    "country": ("France", "Germany", "Japan", "Brazil", "Canada", "Italy", "Spain", "Mexico", "Norway", "Kenya",
                "India", "Chile", "Poland", "Egypt", "Sweden", "Australia", "Portugal", "Vietnam"),
    "city": ("Berlin", "Paris", "Madrid", "Lisbon", "Oslo", "Tokyo", "Toronto", "Chicago", "Sydney", "Nairobi",
             "Lima", "Seoul", "Vienna", "Dublin", "Prague", "Boston", "Denver", "Milan"),
    "state": ("California", "Texas", "Ohio", "Oregon", "Florida", "Georgia", "Nevada", "Arizona", "Vermont",
              "Montana", "Alabama", "Kansas", "Maine", "Utah", "Idaho", "Iowa"),
    "continent": ("Europe", "Asia", "Africa", "America", "Oceania"),
    "language": ("English", "French", "Spanish", "German", "Japanese", "Chinese", "Arabic", "Hindi", "Portuguese",
                 "Italian", "Korean", "Russian"),
    "color": ("Red", "Blue", "Green", "Black", "White", "Yellow", "Silver", "Orange", "Purple", "Brown"),
    "gender": ("Female", "Male"),
    "street": ("Oak", "Maple", "Pine", "Cedar", "Elm", "Lake", "Hill", "Park", "River", "Church", "Mill", "Main"),
}  # fmt: skip
"""Word lists for columns whose name says what they hold (first/last names, places, colours...)."""

_ANY_WORD_KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("email", frozenset({"email", "mail"})),
    ("phone", frozenset({"phone", "fax", "tel", "telephone", "cell", "mobile"})),
    ("url", frozenset({"url", "website", "homepage", "link", "web"})),
    ("zip", frozenset({"zip", "postal", "postcode", "zipcode"})),
)
"""Text kinds recognised by any word of the column name (``cell_mobile_number`` is a phone)."""

_LIST_KINDS: dict[str, frozenset[str]] = {
    "first": frozenset({"first", "fname", "forename", "given"}),
    "last": frozenset({"last", "lname", "surname", "family"}),
    "gender": frozenset({"gender", "sex"}),
    "country": frozenset({"country", "nationality", "nation", "citizenship"}),
    "city": frozenset({"city", "town", "hometown"}),
    "state": frozenset({"state", "province", "county"}),
    "continent": frozenset({"continent"}),
    "language": frozenset({"language", "lang"}),
    "color": frozenset({"color", "colour"}),
    "address": frozenset({"address", "street", "addr"}),
}
"""Text kinds recognised by the last word, or the one before a final ``name`` (``country_name``)."""

_LATE_KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("describe", frozenset({"desc", "description"})),
    ("name", frozenset({"name", "title", "company", "label"})),
    ("notes", frozenset({"details", "detail", "comment", "comments", "note", "notes", "bio", "summary", "content",
                         "remarks", "remark", "information", "info", "text", "other"})),
)  # fmt: skip
"""Text kinds recognised by any word, after codes and word lists."""

_CODE_WORDS = frozenset({"code", "id", "key", "abbreviation", "abbrev", "abbr", "acronym", "no", "number", "num", "ref"})
_LABEL_DROP = frozenset({"name", "title", "desc", "description", "full", "label"})

_NUMBER_KINDS: tuple[tuple[frozenset[str], float, float, str], ...] = (
    (frozenset({"age"}), 18, 80, "int"),
    (frozenset({"price", "cost", "amount", "salary", "budget", "revenue", "sales", "fee", "fees", "income", "pay",
                "payment", "charge", "balance", "tax", "freight", "profit", "spend", "spending", "earnings", "worth",
                "gdp", "gnp", "rent", "bonus", "money", "value", "total", "expense", "expenses", "fare", "wage",
                "gross", "funding", "debt", "assets"}), 5, 5000, "money"),  # fmt: skip
    (frozenset({"rating", "score", "stars", "grade", "points", "point", "mark", "marks"}), 1, 10, "int"),
    (frozenset({"rank", "ranking", "position", "place"}), 1, 100, "int"),
    (frozenset({"percent", "percentage", "rate", "ratio", "share", "pct"}), 0, 100, "dec1"),
    (frozenset({"lat", "latitude"}), -60, 70, "dec4"),
    (frozenset({"lon", "lng", "longitude"}), -180, 180, "dec4"),
    (frozenset({"population"}), 1000, 10_000_000, "int"),
    (frozenset({"height", "weight", "length", "width", "area", "size", "distance", "duration", "horsepower", "mpg",
                "speed", "volume", "km", "miles", "depth", "elevation", "accelerate", "edispl", "surface"}),
     1, 500, "dec1"),  # fmt: skip
    (frozenset({"quantity", "qty", "count", "num", "number", "attendance", "seats", "capacity", "units", "stock",
                "level", "students", "members", "employees", "visits", "tickets", "hours", "days"}), 1, 500, "int"),
)  # fmt: skip
"""Plausible ranges by column-name word: (words, low, high, kind); the first match wins."""

_BOOL_FIRST_WORDS = frozenset({"is", "has", "if", "can", "was", "did"})


# ---------------------------------------------------------------------------- key draws


def key_draws(info: CatalogTable) -> tuple[CatalogKey, ...]:
    """The table's foreign keys merged into *draws*, in declaration order.

    A draw is a set of columns that take their values from one row of the referenced table: a
    composite foreign key is one draw; so are several single-column keys into the same table that
    reference different columns. Keys that reference the same column (``winner_id`` and
    ``loser_id`` -> ``players.player_id``) are separate draws.
    """
    out: list[CatalogKey] = []
    for fk in info.foreign_keys:
        for i, d in enumerate(out):
            if (
                d.ref_table == fk.ref_table
                and not set(d.columns) & set(fk.columns)
                and not set(d.ref_columns) & set(fk.ref_columns)
            ):
                out[i] = CatalogKey(d.table, d.columns + fk.columns, d.ref_table, d.ref_columns + fk.ref_columns)
                break
        else:
            out.append(fk)
    return tuple(out)


# ---------------------------------------------------------------------------- values


def _words(name: str) -> list[str]:
    return humanize(name).split()


def table_label(table: str) -> str:
    """How a row of ``table`` is called: ``singers`` -> ``Singer``, ``CustomerDemographics`` -> ``Customer demographic``.

    >>> table_label("singer"), table_label("CustomerDemographics"), table_label("Order Details")
    ('Singer', 'Customer demographic', 'Order detail')
    """
    text = singular(humanize(table)) or table
    return text[0].upper() + text[1:]


def column_label(table: str, column: str) -> str:
    """The words a synthetic name starts with: the column's words without ``name``/``title``/``desc``,
    or the table's label when nothing is left.

    >>> column_label("singer", "Name"), column_label("singer", "Song_Name"), column_label("Shippers", "CompanyName")
    ('Singer', 'Song', 'Company')
    """
    words = [w for w in _words(column) if w not in _LABEL_DROP]
    if not words:
        return table_label(table)
    text = " ".join(words)
    return text[0].upper() + text[1:]


def _initials(table: str, column: str) -> str:
    words = [w for w in _words(column) if w not in _CODE_WORDS] or _words(table)
    return "".join(w[0] for w in words if w[0].isalpha()).upper() or "X"


def _text_kind(column: str) -> str:
    """What a text column holds, from its name: a kind of :data:`WORDS`, ``email``, ``code``...

    >>> [_text_kind(c) for c in ("cell_mobile_number", "breed_code", "Home Town", "country_name", "abandoned_yn", "Theme")]
    ['phone', 'code', 'city', 'country', 'flag', 'plain']
    """
    words = _words(column)
    if not words:
        return "plain"
    found = set(words)
    for kind, keys in _ANY_WORD_KINDS:
        if found & keys:
            return kind
    if words[-1] in ("yn", "flag"):
        return "flag"
    if words[-1] in _CODE_WORDS:
        return "code"
    for kind in ("first", "last"):
        if found & _LIST_KINDS[kind]:
            return kind
    tail = [words[-1]] + ([words[-2]] if words[-1] == "name" and len(words) > 1 else [])
    for kind, keys in _LIST_KINDS.items():
        if set(tail) & keys:
            return kind
    for kind, keys in _LATE_KINDS:
        if found & keys:
            return kind
    return "plain"


def _number_kind(column: str, *, text: bool = False) -> tuple[float, float, str] | None:
    """``(low, high, kind)`` of the first :data:`_NUMBER_KINDS` entry a word of the name matches.

    For a text column (``text=True``) only measures (age, money, sizes, shares, coordinates,
    population) count: a text ``rank`` or ``position`` is more likely a word than a number.
    """
    found = set(_words(column))
    for keys, low, high, kind in _NUMBER_KINDS:
        if found & keys:
            if text and (kind == "int" and not keys & {"age", "population"}):
                return None
            return low, high, kind
    return None


def _categories(n_rows: int) -> int:
    """How many distinct values a repeating text column gets: 7 for 30 rows, 2 to 8 in general."""
    return max(2, min(8, n_rows // 4))


def _from_list(words: tuple[str, ...], serial: int, rng: random.Random, keyed: bool) -> str:
    if not keyed:
        return rng.choice(words)
    word = words[(serial - 1) % len(words)]
    return word if serial <= len(words) else f"{word} {serial}"


def _number(column: CatalogColumn, serial: int, rng: random.Random, keyed: bool, n_rows: int) -> int | float:
    if keyed:
        return serial
    words = _words(column.name)
    kind = _number_kind(column.name)
    if kind is None:
        if words and words[-1] in _CODE_WORDS:
            kind = (1, max(n_rows, 2), "int")  # an undeclared reference: the range of serial keys
        else:
            kind = (1, 100, "int") if column.affinity != "REAL" else (1, 100, "money")
    low, high, how = kind
    if how == "int" or column.affinity == "INTEGER":
        return rng.randint(int(low), int(high))
    digits = {"money": 2, "dec1": 1, "dec4": 4}[how]
    return round(rng.uniform(low, high), digits)


def synthetic_value(table: str, column: CatalogColumn, serial: int, rng: random.Random, *, keyed: bool, n_rows: int) -> Any:
    """A readable, non-null value for ``column`` of the ``serial``-th row (1-based) of ``table``.

    ``keyed`` columns (in a primary key or UNIQUE set) get a value unique to ``serial``.

    >>> rng = random.Random(0)
    >>> synthetic_value("singer", CatalogColumn("Name", "text", False, 0), 7, rng, keyed=False, n_rows=30)
    'Singer 7'
    >>> synthetic_value("Dogs", CatalogColumn("breed_code", "VARCHAR(10)", False, 1), 7, rng, keyed=True, n_rows=30)
    'B007'
    >>> synthetic_value("people", CatalogColumn("Birth_Date", "text", False, 0), 1, random.Random(1), keyed=False, n_rows=30)
    '2006-01-10'
    """
    words = _words(column.name)
    found = set(words)
    affinity = column.affinity
    numeric = affinity in ("INTEGER", "REAL", "NUMERIC")
    if "BOOL" in column.type.upper() or (words and words[0] in _BOOL_FIRST_WORDS and not keyed):
        flag = rng.random() < 0.5
        return int(flag) if numeric else ("T" if flag else "F")
    if "year" in found or column.name.lower().endswith("year"):
        year = 1980 + serial if keyed else rng.randint(1990, 2024)
        return year if affinity != "TEXT" else str(year)
    t = column.type.upper()
    if "DATE" in t or "TIME" in t or found & {"date", "dob", "birthday", "datetime", "timestamp"}:
        day = serial if keyed else rng.randrange(DATE_SPAN_DAYS)
        return (FIRST_DATE + dt.timedelta(days=day)).isoformat()
    if numeric or (not keyed and _number_kind(column.name, text=True) is not None):
        return _number(column, serial, rng, keyed, n_rows)
    kind = _text_kind(column.name)
    if kind == "flag":
        return "Y" if rng.random() < 0.5 else "N"
    slug = re.sub(r"[^a-z0-9]+", "", table.lower()) or "row"
    k = serial if keyed else rng.randint(1, _categories(n_rows))
    if kind == "email":
        return f"{slug}{serial}@example.com"
    if kind == "phone":
        return f"555-{(1000 + serial if keyed else rng.randint(1000, 9999)) % 10000:04d}"
    if kind == "url":
        return f"https://www.example.com/{slug}/{serial}"
    if kind == "address":
        return f"{serial if keyed else rng.randint(1, 999)} {rng.choice(WORDS['street'])} Street"
    if kind in WORDS:
        return _from_list(WORDS[kind], serial, rng, keyed)
    if kind == "zip":
        return f"{10000 + serial:05d}" if keyed else f"{rng.randint(10000, 99999)}"
    if kind == "describe":
        return f"{table_label(table)} {serial}"
    if kind == "name":
        return f"{column_label(table, column.name)} {serial}"
    if kind == "code":
        return f"{_initials(table, column.name)}{k:03d}"
    if kind == "notes":
        return f"{column_label(table, column.name)} for {table_label(table).lower()} {serial}"
    return f"{column_label(table, column.name)} {k}"


# ---------------------------------------------------------------------------- filling


@dataclass(frozen=True)
class SynthesisReport:
    """What :func:`synthesize_rows` did.

    Attributes:
        source: the input database (unchanged).
        out_path: the copy with synthetic rows.
        rows: synthetic rows inserted per table, in fill order (empty when nothing was empty).
        short: rows per table that could not be made (a key made of foreign keys ran out of new
            combinations, or SQLite refused the row, e.g. a CHECK constraint).
        deferred: foreign keys filled after all tables had rows (cycles), as ``T(c) -> R(rc)``.
        fk_violations: ``T(c) -> R(rc)`` -> number of rows whose value is missing from the
            referenced column, for every key touching a filled table (0 expected: absent).
        notes: foreign keys ignored (missing table or column) and empty tables added because a
            filled table references them.
        seed: the seed used.
        elapsed_s: wall time, seconds.
    """

    source: Path
    out_path: Path
    rows: dict[str, int]
    short: dict[str, int] = field(default_factory=dict)
    deferred: tuple[str, ...] = ()
    fk_violations: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    seed: int = 0
    elapsed_s: float = 0.0


def _fill_set(catalog: dict[str, CatalogTable], tables: Sequence[str] | None, where: Path) -> tuple[list[str], list[str]]:
    """Tables to fill (requested or empty ones, plus empty tables they reference) and notes."""
    if tables is None:
        wanted = [t for t in catalog if catalog[t].row_count == 0]
    else:
        by_lower = {t.lower(): t for t in catalog}
        wanted = []
        for t in tables:
            name = t if t in catalog else by_lower.get(str(t).lower())
            if name is None:
                raise SchemaError(f"unknown table {t!r}; tables are: {', '.join(catalog)}", where=where)
            if name not in wanted:
                wanted.append(name)
    notes: list[str] = []
    todo = list(wanted)
    while todo:
        t = todo.pop()
        for fk in catalog[t].foreign_keys:
            r = fk.ref_table
            if r not in wanted and catalog[r].row_count == 0:
                wanted.append(r)
                todo.append(r)
                notes.append(f"{r} is empty and referenced by {t}; filled too")
    return sorted(wanted), notes


def fill_order(catalog: dict[str, CatalogTable], fill: Sequence[str]) -> tuple[list[str], list[CatalogKey]]:
    """Referenced tables before referencing ones; returns the order and the draws to fill last.

    When only tables in a cycle remain, the one whose keys into the remaining tables are all
    NULL-able goes first (then the one with the fewest such keys, then by name); those keys are
    filled after every table has its rows.
    """
    remaining = set(fill)
    order: list[str] = []
    deferred: list[CatalogKey] = []

    def into_remaining(t: str) -> list[CatalogKey]:
        return [d for d in key_draws(catalog[t]) if d.ref_table in remaining and d.ref_table != t]

    while remaining:
        ready = sorted(t for t in remaining if not into_remaining(t))
        if ready:
            pick = ready[0]
        else:

            def cost(t: str) -> tuple[bool, int, str]:
                ds = into_remaining(t)
                nullable = all(not catalog[t].column(c).not_null for d in ds for c in d.columns)
                return (not nullable, len(ds), t)

            pick = min(remaining, key=cost)
            deferred += into_remaining(pick)
        order.append(pick)
        remaining.remove(pick)
    return order, deferred


def _pool(conn: sqlite3.Connection, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Distinct non-null value tuples of ``columns`` in ``table`` (sorted, at most :data:`POOL_LIMIT`)."""
    cols = ", ".join(quote_ident(c) for c in columns)
    cond = " AND ".join(f"{quote_ident(c)} IS NOT NULL" for c in columns)
    order = ", ".join(str(i + 1) for i in range(len(columns)))
    sql = f"SELECT DISTINCT {cols} FROM {quote_ident(table)} WHERE {cond} ORDER BY {order} LIMIT {POOL_LIMIT}"
    return [tuple(r) for r in conn.execute(sql)]


def _start_serial(conn: sqlite3.Connection, info: CatalogTable) -> int:
    """First serial number for new rows: after the existing rows and after the largest integer key."""
    start = info.row_count + 1
    alias = info.rowid_alias
    if alias is not None and info.row_count:
        top = conn.execute(f"SELECT MAX({quote_ident(alias)}) FROM {quote_ident(info.name)}").fetchone()[0]
        if isinstance(top, int):
            start = max(start, top + 1)
    return start


def _own_rows(conn: sqlite3.Connection, info: CatalogTable, n: int, seed: int) -> list[dict[str, Any]]:
    """Synthetic values of every column for ``n`` new rows.

    Foreign-key columns get values too; they are only used when there is nothing to draw from
    (a NOT NULL key into a table of a cycle that is not filled yet).
    """
    keyed = {c for s in info.unique_sets for c in s}
    rng = random.Random(f"{seed}:{info.name}:values")
    start = _start_serial(conn, info)
    return [
        {c.name: synthetic_value(info.name, c, start + i, rng, keyed=c.name in keyed, n_rows=n) for c in info.columns}
        for i in range(n)
    ]


def _existing_keys(conn: sqlite3.Connection, info: CatalogTable) -> dict[tuple[str, ...], set[tuple[Any, ...]]]:
    out: dict[tuple[str, ...], set[tuple[Any, ...]]] = {}
    for s in info.unique_sets:
        cols = ", ".join(quote_ident(c) for c in s)
        out[s] = {tuple(r) for r in conn.execute(f"SELECT {cols} FROM {quote_ident(info.name)}")} if info.row_count else set()
    return out


def _draw(
    pool: list[tuple[Any, ...]],
    draw: CatalogKey,
    row: dict[str, Any],
    taken: dict[tuple[str, ...], set[tuple[Any, ...]]],
    rng: random.Random,
) -> tuple[Any, ...] | None:
    """One referenced row for ``draw``: agreeing with columns of ``row`` already set by another
    draw, and new for every unique set made only of this draw's columns (a key that is a foreign
    key). None when the pool has no such row."""
    fixed = [(i, row[c]) for i, c in enumerate(draw.columns) if row.get(c) is not None]
    options = [p for p in pool if all(p[i] == v for i, v in fixed)] if fixed else pool
    if not options:
        options = pool
    for s in taken:
        if set(s) <= set(draw.columns):
            at = [draw.columns.index(c) for c in s]
            options = [p for p in options if tuple(p[i] for i in at) not in taken[s]]
    return rng.choice(options) if options else None


def _build_rows(
    info: CatalogTable,
    own: list[dict[str, Any]],
    pools: dict[CatalogKey, list[tuple[Any, ...]]],
    taken: dict[tuple[str, ...], set[tuple[Any, ...]]],
    seed: int,
) -> tuple[list[dict[str, Any]], int]:
    """Complete the rows of one table with foreign-key values; returns the rows and the number dropped.

    ``pools`` holds the referenced value tuples for every draw except self-references, which
    pick among the rows kept so far. ``taken`` (the unique sets' existing values) is updated.
    """
    rng = random.Random(f"{seed}:{info.name}:keys")
    draws = key_draws(info)
    outside = [d for d in draws if d.ref_table != info.name]
    inside = [d for d in draws if d.ref_table == info.name]
    fk_in_keys = any(c in s for d in draws for c in d.columns for s in info.unique_sets)
    kept: list[dict[str, Any]] = []
    dropped = 0
    fk_cols = {c for d in draws for c in d.columns}
    for base in own:
        for _attempt in range(MAX_DRAWS if fk_in_keys else 1):
            row = {c: v for c, v in base.items() if c not in fk_cols}
            exhausted = False
            for d in outside:
                values = _draw(pools.get(d, []), d, row, taken, rng)
                if values is None and pools.get(d):
                    exhausted = True  # every referenced row is already used by a key
                    break
                for c, v in zip(d.columns, values if values is not None else [None] * len(d.columns), strict=True):
                    row[c] = v
            if exhausted:
                continue
            for d in inside:
                earlier = [tuple(r[c] for c in d.ref_columns) for r in kept]
                earlier = [v for v in earlier if None not in v]
                if earlier:
                    values = rng.choice(earlier)
                elif all(not info.column(c).not_null for c in d.columns):
                    values = tuple(None for _ in d.columns)
                else:  # the first row of a NOT NULL self-reference points at itself
                    values = tuple(row.get(c) for c in d.ref_columns)
                for c, v in zip(d.columns, values, strict=True):
                    row[c] = v
            for c in fk_cols:  # nothing to draw from yet: a NOT NULL key keeps its synthetic value
                if row.get(c) is None and info.column(c).not_null:
                    row[c] = base[c]
            keys = {s: tuple(row.get(c) for c in s) for s in info.unique_sets}
            if all(None in k or k not in taken[s] for s, k in keys.items()):
                for s, k in keys.items():
                    taken[s].add(k)
                kept.append(row)
                break
        else:
            dropped += 1
    return kept, dropped


def _insert(conn: sqlite3.Connection, info: CatalogTable, rows: list[dict[str, Any]]) -> int:
    """Insert ``rows`` one by one; returns how many SQLite refused (CHECK or other constraints)."""
    names = [c.name for c in info.columns]
    sql = (
        f"INSERT INTO {quote_ident(info.name)} ({', '.join(quote_ident(c) for c in names)}) "
        f"VALUES ({', '.join('?' for _ in names)})"
    )
    refused = 0
    for row in rows:
        try:
            conn.execute(sql, [row.get(c) for c in names])
        except sqlite3.IntegrityError:
            refused += 1
    return refused


def _fill_deferred(conn: sqlite3.Connection, info: CatalogTable, draw: CatalogKey, seed: int) -> None:
    """Give a key left for last (a cycle) values from the referenced table's final rows."""
    pool = _pool(conn, draw.ref_table, draw.ref_columns)
    if not pool:
        return
    rng = random.Random(f"{seed}:{info.name}:deferred:{','.join(draw.columns)}")
    ident = list(info.primary_key) if info.without_rowid else ["rowid"]
    qt = quote_ident(info.name)
    rows = conn.execute(f"SELECT {', '.join(quote_ident(c) if c != 'rowid' else c for c in ident)} FROM {qt}").fetchall()
    sets = ", ".join(f"{quote_ident(c)} = ?" for c in draw.columns)
    where = " AND ".join(f"{quote_ident(c) if c != 'rowid' else c} IS ?" for c in ident)
    for key in rows:
        for _attempt in range(MAX_DRAWS):
            try:
                conn.execute(f"UPDATE {qt} SET {sets} WHERE {where}", [*rng.choice(pool), *key])
                break
            except sqlite3.IntegrityError:
                continue


def fk_violations(conn: sqlite3.Connection, catalog: dict[str, CatalogTable], tables: Sequence[str]) -> dict[str, int]:
    """Rows whose foreign-key value is missing from the referenced column(s), for keys touching ``tables``.

    Compared with ``=`` as the join skeletons do (so SQLite's affinity rules apply); NULL
    values are not violations. Returns only the keys with violations, ``str(CatalogKey)`` -> count.
    """
    touched = set(tables)
    out: dict[str, int] = {}
    for info in catalog.values():
        for fk in info.foreign_keys:
            if fk.table not in touched and fk.ref_table not in touched:
                continue
            t, r = quote_ident(fk.table), quote_ident(fk.ref_table)
            alias = '"_ref"'
            match = " AND ".join(
                f"{alias}.{quote_ident(rc)} = {t}.{quote_ident(c)}" for c, rc in zip(fk.columns, fk.ref_columns, strict=True)
            )
            present = " AND ".join(f"{t}.{quote_ident(c)} IS NOT NULL" for c in fk.columns)
            n = conn.execute(
                f"SELECT COUNT(*) FROM {t} WHERE {present} AND NOT EXISTS (SELECT 1 FROM {r} AS {alias} WHERE {match})"
            ).fetchone()[0]
            if n:
                out[str(fk)] = int(n)
    return out


def _fill(conn: sqlite3.Connection, tables: Sequence[str] | None, rows_per_table: int, seed: int, where: Path) -> dict[str, Any]:
    catalog, notes = read_catalog(conn)
    fill, added = _fill_set(catalog, tables, where)
    order, deferred = fill_order(catalog, fill)
    own = {t: _own_rows(conn, catalog[t], rows_per_table, seed) for t in order}
    rows: dict[str, int] = {}
    short: dict[str, int] = {}
    for t in order:
        info = catalog[t]
        pools: dict[CatalogKey, list[tuple[Any, ...]]] = {}
        for d in key_draws(info):
            if d.ref_table == t:
                continue
            if d in deferred:  # provisional values, replaced by _fill_deferred
                ref_fk = {c for r in key_draws(catalog[d.ref_table]) for c in r.columns}
                if not ref_fk & set(d.ref_columns):
                    pools[d] = sorted({tuple(r[c] for c in d.ref_columns) for r in own[d.ref_table]}, key=repr)
                continue
            pools[d] = _pool(conn, d.ref_table, d.ref_columns)
        kept, dropped = _build_rows(info, own[t], pools, _existing_keys(conn, info), seed)
        refused = _insert(conn, info, kept)
        rows[t] = len(kept) - refused
        if dropped + refused:
            short[t] = dropped + refused
    for d in deferred:
        _fill_deferred(conn, catalog[d.table], d, seed)
    return {
        "rows": rows,
        "short": short,
        "deferred": tuple(str(d) for d in deferred),
        "fk_violations": fk_violations(conn, catalog, fill),
        "notes": tuple(notes + added),
    }


def synthesize_rows(
    db_path: str | Path,
    out_path: str | Path,
    *,
    tables: Sequence[str] | None = None,
    rows_per_table: int = ROWS_PER_TABLE,
    seed: int = 0,
) -> SynthesisReport:
    """Copy ``db_path`` to ``out_path`` and fill its empty tables (or ``tables``) with synthetic rows.

    Args:
        db_path: a SQLite file (or a sample name, see :func:`~data_pipeline.datasets.resolve_database`);
            opened read-only, never modified.
        out_path: where the copy goes; written through a temporary file in the same folder and
            renamed into place, so a failed run leaves no half-written database there.
        tables: tables to add rows to (names matched case-insensitively; existing rows are kept
            and new keys avoid them). Default: every table without rows. Empty tables that one
            of them references are filled too.
        rows_per_table: rows to add to each table (fewer when a key made of foreign keys runs
            out of new combinations).
        seed: the same seed gives the same file.

    Returns:
        A :class:`SynthesisReport` (rows per table, shortfalls, foreign-key check).

    Raises:
        SchemaError: the input is missing or not SQLite, or ``tables`` names an unknown table.
        ConfigError: ``rows_per_table`` < 1, or ``out_path`` is the input file.
        Route2SQLError: the output folder cannot be written.

    >>> import tempfile, sqlite3, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> con = sqlite3.connect(d / "in.sqlite")
    >>> _ = con.executescript("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);"
    ...     "CREATE TABLE song (id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER REFERENCES singer(id));")
    >>> con.close()
    >>> report = synthesize_rows(d / "in.sqlite", d / "out.sqlite", rows_per_table=5)
    >>> report.rows, report.fk_violations
    ({'singer': 5, 'song': 5}, {})
    >>> sqlite3.connect(d / "out.sqlite").execute("SELECT name FROM singer WHERE id = 2").fetchone()
    ('Singer 2',)
    """
    start = time.perf_counter()
    if rows_per_table < 1:
        raise ConfigError(f"must be at least 1, got {rows_per_table}", where="rows_per_table")
    src = resolve_database(db_path)
    out = Path(out_path)
    if out.resolve() == src:
        raise ConfigError("is the input database, which is never modified; choose another file", where=out)
    ensure_writable_file(out)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        source = connect_readonly(src)
        target = sqlite3.connect(tmp)
        try:
            try:
                source.backup(target)
            except sqlite3.DatabaseError as exc:
                raise SchemaError(f"not a readable SQLite database ({exc})", where=src) from exc
            finally:
                source.close()
            target.execute("PRAGMA foreign_keys = OFF")  # Spider keys to non-unique columns; consistency is ours
            parts = _fill(target, tables, rows_per_table, seed, src)
            target.commit()
            target.execute("PRAGMA journal_mode = DELETE")
        finally:
            target.close()
        with tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp makes 0600; the copy gets a new file's usual mode
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return SynthesisReport(source=src, out_path=out, seed=seed, elapsed_s=round(time.perf_counter() - start, 4), **parts)
