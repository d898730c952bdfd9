"""Which columns a question can name, and how users misspell the values in them.

:func:`profile_table` reads a few statistics of each column (distinct values, mean length) and
sorts the columns into roles: the *entity* columns a filter value can come from (names first),
the *descriptive* columns a question can ask for, the *numeric* columns that can be summed or
averaged, and *category* columns (values shared by many rows: city, country, title).

:func:`fuzz` turns a real database value into what a user might type instead: a partial name,
a case slip, a typo or a synonym (``Ltd`` for ``Limited``). The gold SQL always keeps the real
value; only the question shows the fuzzy one. A partial name must still point at one value of
its column: ``Singer`` is no partial of ``Singer 7`` when the column also holds ``Singer 8``
(:func:`matches_several`).
"""

from __future__ import annotations

import math
import random
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from core.schema import Column, Schema, Table, quote_ident

NAME_HINTS = ("name", "title", "company", "desc")
"""Column-name fragments that mark a name-like column (``CompanyName``, ``title``)."""

ZH_NAME_HINTS = ("名称", "姓名", "名字", "标题", "名")
"""Fragments of a sidecar Chinese column name that mark a name-like column (药品名称, 姓名)."""

MAX_NAME_LENGTH = 30
"""Mean length (characters) above which a text column is not a name (``Categories.Description``)."""

MAX_ENTITY_LENGTH = 40
"""Mean length (characters) above which a text column is free text, not a name to filter by."""

MAX_ASK_LENGTH = 80
"""Mean length above which a text column is not worth asking for (notes, long descriptions)."""

CATEGORY_MAX_RATIO = 0.9
"""A text column is a category when its distinct values are at most this share of its rows."""

SYNONYMS: tuple[tuple[str, str], ...] = (
    ("Ltd.", "Limited"),
    ("Ltd", "Limited"),
    ("Inc.", "Incorporated"),
    ("Inc", "Incorporated"),
    ("Co.", "Company"),
    ("Corp.", "Corporation"),
    ("Corp", "Corporation"),
    ("Intl", "International"),
    ("Int'l", "International"),
    ("&", "and"),
    ("St.", "Street"),
    ("Ave.", "Avenue"),
    ("Dept.", "Department"),
    ("Mfg", "Manufacturing"),
    ("Bros.", "Brothers"),
    ("Mr.", "Mister"),
    ("Dr.", "Doctor"),
    ("USA", "United States"),
    ("UK", "United Kingdom"),
)
"""Pairs a user may write either way; :func:`fuzz` swaps one side for the other."""

FUZZ_KINDS = ("partial", "case", "typo", "synonym")

_CJK_TEXT = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class ColumnStats:
    """Statistics of one column: non-null count, distinct values, mean length of its text."""

    column: Column
    non_null: int
    distinct: int
    mean_length: float
    is_key: bool

    @property
    def name(self) -> str:
        return self.column.name

    @property
    def name_like(self) -> bool:
        """A short text column that names its row: ``CompanyName``, ``title``, or a sidecar
        calling it a name (``hzxm`` = 姓名, ``ypmc`` = 药品名称). Long text (descriptions) is not."""
        c = self.column
        if self.mean_length > MAX_NAME_LENGTH:
            return False
        return (
            any(h in c.name.lower() for h in NAME_HINTS)
            or any(w in c.zh for w in ZH_NAME_HINTS)
            or bool(re.search(r"\bname\b", c.description.lower()))
        )


@dataclass(frozen=True)
class TableProfile:
    """Columns of one table sorted into roles (each tuple best first).

    Attributes:
        entity: columns to take a filter value from: short name-like text, then other short text,
            then text keys (codes), then numbers.
        names: the short name-like text columns (``CompanyName``, ``title``), best first.
        categories: short text columns whose values repeat (city, country).
        descriptive: columns worth asking for: text first, then numbers, then the primary key.
        numeric: non-key numeric columns with at least 3 distinct values (sum/average).
        count_key: the column to ``COUNT(DISTINCT ...)``, or None for ``COUNT(*)``.
    """

    table: str
    entity: tuple[str, ...]
    names: tuple[str, ...]
    categories: tuple[str, ...]
    descriptive: tuple[str, ...]
    numeric: tuple[str, ...]
    count_key: str | None
    rows: int


def key_columns(schema: Schema, table: Table) -> set[str]:
    """Primary-key and foreign-key columns of ``table`` (either end of a foreign key)."""
    keys = set(table.primary_key)
    for fk in schema.foreign_keys:
        if fk.table == table.name:
            keys.update(fk.columns)
        if fk.ref_table == table.name:
            keys.update(fk.ref_columns)
    return keys


def column_stats(conn: sqlite3.Connection, schema: Schema, table: Table) -> list[ColumnStats]:
    """One query per table: non-null count, distinct count and mean text length of every column."""
    keys = key_columns(schema, table)
    cols = [c for c in table.columns if "BLOB" not in c.type.upper()]
    if not cols:
        return []
    parts = []
    for c in cols:
        q = quote_ident(c.name)
        parts.append(f"COUNT({q}), COUNT(DISTINCT {q}), AVG(LENGTH({q}))")
    row = conn.execute(f"SELECT {', '.join(parts)} FROM {quote_ident(table.name)}").fetchone()
    out = []
    for i, c in enumerate(cols):
        non_null, distinct, mean_len = row[3 * i], row[3 * i + 1], row[3 * i + 2]
        out.append(ColumnStats(c, int(non_null), int(distinct), float(mean_len or 0.0), c.name in keys))
    return out


def profile_table(conn: sqlite3.Connection, schema: Schema, table: Table) -> TableProfile:
    """Sort the columns of ``table`` into roles (see :class:`TableProfile`), reading SQLite."""
    return profile_columns(table, column_stats(conn, schema, table))


def profile_columns(table: Table, column_stats: Sequence[ColumnStats]) -> TableProfile:
    """Sort the columns of ``table`` into roles from their statistics (any backend's
    ``column_stats``; see :class:`TableProfile`)."""
    stats = [s for s in column_stats if s.non_null > 0]
    text = [s for s in stats if s.column.is_text and not s.is_key]
    short_text = [s for s in text if s.mean_length <= MAX_ENTITY_LENGTH and s.distinct >= 1]

    def by_name_then_distinct(s: ColumnStats) -> tuple[int, int, str]:
        return (0 if s.name_like else 1, -s.distinct, s.name)

    entity = sorted(short_text, key=by_name_then_distinct)
    text_keys = [s for s in stats if s.column.is_text and s.is_key]
    numbers = [s for s in stats if s.column.is_numeric and not s.is_key and s.distinct >= 3]
    pk = [s for s in stats if s.column.primary_key]
    entity_names = [s.name for s in entity] + [s.name for s in text_keys] + [s.name for s in numbers] + [s.name for s in pk]
    if not entity_names:  # nothing but non-primary numeric keys: any column with values
        entity_names = [s.name for s in stats]
    categories = [
        s.name
        for s in sorted(short_text, key=lambda s: (s.distinct, s.name))
        if 2 <= s.distinct <= CATEGORY_MAX_RATIO * s.non_null
    ]
    asked_text = sorted((s for s in text if s.mean_length <= MAX_ASK_LENGTH), key=by_name_then_distinct)
    descriptive = [s.name for s in asked_text] + [s.name for s in numbers] + [s.name for s in pk]
    if not descriptive:
        descriptive = [s.name for s in stats]
    count_key = table.primary_key[0] if len(table.primary_key) == 1 else None
    return TableProfile(
        table.name,
        tuple(dict.fromkeys(entity_names)),
        tuple(s.name for s in entity if s.name_like),
        tuple(categories),
        tuple(dict.fromkeys(descriptive)),
        tuple(s.name for s in numbers),
        count_key,
        table.row_count,
    )


# ---------------------------------------------------------------------------- fuzzing


def fuzzable(value: object) -> bool:
    """A value can be fuzzed when it is text with at least 4 letters (codes like ``06897`` cannot)."""
    return isinstance(value, str) and sum(ch.isalpha() for ch in value) >= 4


def _synonym(value: str) -> list[str]:
    out = []
    for a, b in SYNONYMS:
        for src, dst in ((a, b), (b, a)):
            pattern = rf"(?<![\w]){re.escape(src)}(?![\w])" if src[-1].isalnum() else rf"(?<![\w]){re.escape(src)}"
            if re.search(pattern, value):
                out.append(re.sub(pattern, dst, value, count=1))
    return [s for s in dict.fromkeys(out) if s != value]


def matches_several(surface: str, column_values: Sequence[str]) -> bool:
    """Whether ``surface`` is a substring of more than one of ``column_values``, ignoring case.

    Such a partial surface does not name one value: a reader (or an entity linker) cannot tell
    which row the question means.

    >>> matches_several("Singer", ["Singer 7", "Singer 8", "Joe Sharp"]), matches_several("sharp", ["Singer 7", "Joe Sharp"])
    (True, False)
    """
    needle = surface.lower()
    hits = 0
    for v in column_values:
        if needle in v.lower():
            hits += 1
            if hits > 1:
                return True
    return False


def _partial(value: str, rng: random.Random, column_values: Sequence[str] = ()) -> str | None:
    words = value.split()
    if len(words) >= 2:
        options = [w for w in words if sum(ch.isalpha() for ch in w) >= 4]
        spans = [" ".join(words[:k]) for k in range(1, len(words)) if sum(ch.isalpha() for ch in " ".join(words[:k])) >= 4]
        candidates = list(dict.fromkeys(spans + options))
    elif len(value) >= 6:
        candidates = [value[: math.ceil(len(value) * 0.6)]]
    else:
        return None
    candidates = [c for c in candidates if not matches_several(c, column_values)]
    return rng.choice(candidates) if candidates else None


def _case(value: str, rng: random.Random) -> str | None:
    """Mostly all lower case (what users type), sometimes all upper or capitalised words."""
    options = [(value.lower(), 0.7), (value.upper(), 0.15), (" ".join(w.capitalize() for w in value.split()), 0.15)]
    options = [(v, p) for v, p in options if v != value]
    if not options:
        return None
    return rng.choices([v for v, _ in options], weights=[p for _, p in options])[0]


_NEIGHBOURS = {
    "a": "sqz", "b": "vn", "c": "xv", "d": "sf", "e": "wr", "f": "dg", "g": "fh", "h": "gj", "i": "uo",
    "j": "hk", "k": "jl", "l": "k", "m": "n", "n": "bm", "o": "ip", "p": "o", "q": "w", "r": "et",
    "s": "ad", "t": "ry", "u": "yi", "v": "cb", "w": "qe", "x": "zc", "y": "tu", "z": "x",
}  # fmt: skip


def _typo(value: str, rng: random.Random) -> str | None:
    positions = [i for i in range(1, len(value) - 1) if value[i].isalpha()]
    if len(positions) < 3:
        return None
    i = rng.choice(positions)
    op = rng.choice(("swap", "drop", "double", "neighbour"))
    if op == "swap" and value[i + 1].isalpha() and value[i + 1].lower() != value[i].lower():
        out = value[:i] + value[i + 1] + value[i] + value[i + 2 :]
    elif op == "drop":
        out = value[:i] + value[i + 1 :]
    elif op == "double":
        out = value[:i] + value[i] + value[i:]
    else:
        near = _NEIGHBOURS.get(value[i].lower(), "")
        if not near:
            out = value[:i] + value[i + 1 :]
        else:
            ch = rng.choice(near)
            out = value[:i] + (ch.upper() if value[i].isupper() else ch) + value[i + 1 :]
    return out if out != value else None


def fuzz(value: str, rng: random.Random, column_values: Sequence[str] = ()) -> tuple[str, str] | None:
    """A fuzzy surface for ``value`` and its kind (``partial``, ``case``, ``typo``, ``synonym``).

    A synonym is used in half the cases where one applies; otherwise the kind is drawn among
    those that change the value. A partial surface that is a substring (ignoring case) of more
    than one of ``column_values`` (the values of ``value``'s column, ``value`` among them) is
    never returned: another part is drawn, else another kind. Returns None when ``value`` is
    not :func:`fuzzable`.

    >>> rng = random.Random(0)
    >>> sorted({fuzz("Nordic Fish Ltd", rng)[1] for _ in range(40)})
    ['case', 'partial', 'synonym', 'typo']
    >>> fuzz("06897", rng) is None
    True
    >>> singers = [f"Singer {i}" for i in range(1, 31)]
    >>> sorted({fuzz("Singer 7", rng)[1] for _ in range(40)}), sorted({fuzz("Singer 7", rng, singers)[1] for _ in range(40)})
    (['case', 'partial', 'typo'], ['case', 'typo'])
    """
    if not fuzzable(value):
        return None
    synonyms = _synonym(value)
    if synonyms and rng.random() < 0.5:
        return rng.choice(synonyms), "synonym"
    if _CJK_TEXT.search(value):  # Chinese has no case, and a letter typo would be no character at all
        out = _partial(value, rng, column_values)
        return (out, "partial") if out and out != value else (rng.choice(synonyms), "synonym") if synonyms else None
    kinds = ["partial", "case", "typo"]
    rng.shuffle(kinds)
    for kind in kinds:
        out = _partial(value, rng, column_values) if kind == "partial" else {"case": _case, "typo": _typo}[kind](value, rng)
        if out and out.strip() and out != value:
            return out, kind
    if synonyms:
        return rng.choice(synonyms), "synonym"
    return None
