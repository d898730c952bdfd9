"""Identifiers in generated SQL are bare where SQLite allows it and quoted everywhere else."""

from __future__ import annotations

import ctypes
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.graph import JoinPath, SchemaGraph
from core.schema import Column, ForeignKey, Schema, Table
from core.sqlite import SQLITE_KEYWORDS, quote_ident, sql_ident

_NAMES = st.one_of(
    st.sampled_from(sorted(SQLITE_KEYWORDS)).map(str.lower),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(table=_NAMES, column=_NAMES)
def test_every_name_written_by_sql_ident_selects_its_column(table: str, column: str) -> None:
    con = sqlite3.connect(":memory:")
    con.execute(f"CREATE TABLE {quote_ident(table)} ({quote_ident(column)} INTEGER)")
    con.execute(f"INSERT INTO {quote_ident(table)} VALUES (7)")
    rows = con.execute(f"SELECT {sql_ident(table)}.{sql_ident(column)} FROM {sql_ident(table)}").fetchall()
    assert rows == [(7,)]


def test_keywords_are_quoted_and_plain_names_are_bare() -> None:
    assert [sql_ident(n) for n in ("Order", "group", "Orders", "Order Details", "x1", "1x")] == [
        '"Order"', '"group"', "Orders", '"Order Details"', "x1", '"1x"']  # fmt: skip


def test_a_join_skeleton_over_keyword_tables_runs() -> None:
    s = Schema("s", (Table("order", (Column("id", primary_key=True),)), Table("Line Items", (Column("order", "INTEGER"),))),
               (ForeignKey("Line Items", "order", "order", "id"),))  # fmt: skip
    clause = SchemaGraph(s).from_clause(JoinPath("order", (), "Line Items"))
    assert clause == 'FROM "order" JOIN "Line Items" ON "Line Items"."order" = "order".id'
    con = sqlite3.connect(":memory:")
    con.executescript('CREATE TABLE "order" (id INTEGER PRIMARY KEY); CREATE TABLE "Line Items" ("order" INTEGER);'
                      'INSERT INTO "order" VALUES (1); INSERT INTO "Line Items" VALUES (1), (1);')  # fmt: skip
    assert con.execute(f"SELECT COUNT(*) {clause}").fetchall() == [(2,)]


def test_the_keyword_list_is_the_linked_sqlite_librarys() -> None:
    """sqlite3_keyword_count / sqlite3_keyword_name of the library the sqlite3 module runs on."""
    import _sqlite3

    lib = ctypes.CDLL(_sqlite3.__file__)
    if not hasattr(lib, "sqlite3_keyword_count"):
        pytest.skip("this Python's SQLite library does not export its keyword table")
    name, size = ctypes.c_char_p(), ctypes.c_int()
    linked = set()
    for i in range(lib.sqlite3_keyword_count()):
        assert lib.sqlite3_keyword_name(i, ctypes.byref(name), ctypes.byref(size)) == 0
        linked.add(ctypes.string_at(name, size.value).decode())
    assert linked == set(SQLITE_KEYWORDS)
