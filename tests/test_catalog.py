"""One catalogue reader: core.catalog.read_catalog, which core.schema.introspect and the row synthesiser share."""

from __future__ import annotations

import sqlite3
import warnings

import pytest

from core.catalog import read_catalog
from core.schema import introspect


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "keys.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE plan (region TEXT, year INTEGER, budget REAL, PRIMARY KEY (region, year));
        CREATE TABLE line (id INTEGER PRIMARY KEY, region TEXT, yr INTEGER, owner_id INTEGER, ghost_id INTEGER,
            FOREIGN KEY (region, yr) REFERENCES plan,
            FOREIGN KEY (OWNER_ID) REFERENCES People(PERSON_ID),
            FOREIGN KEY (ghost_id) REFERENCES people(no_such_column));
        CREATE TABLE people (person_id INTEGER PRIMARY KEY, name TEXT UNIQUE);
        """
    )
    con.commit()
    con.close()
    return path


def test_catalogue_resolves_keys_as_sqlite_does(db):
    con = sqlite3.connect(db)
    catalog, notes = read_catalog(con)
    con.close()
    assert list(catalog) == ["line", "people", "plan"]
    assert sorted(str(k) for k in catalog["line"].foreign_keys) == [
        "line(owner_id) -> people(person_id)",  # names resolved to their declared spelling
        "line(region, yr) -> plan(region, year)",  # no target columns: the primary key, position by position
    ]
    assert notes == ["line: foreign key ['ghost_id'] -> people names a missing column; ignored"]
    assert catalog["plan"].primary_key == ("region", "year")
    assert catalog["people"].unique_sets == (("person_id",), ("name",))
    assert catalog["people"].rowid_alias == "person_id"


def test_introspect_builds_its_keys_from_the_catalogue(db):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schema = introspect(db)
    assert [str(fk) for fk in schema.foreign_keys] == [
        "line.owner_id -> people.person_id",
        "line(region, yr) -> plan(region, year)",
    ]
    assert [str(w.message) for w in caught] == [
        f"{db}: line: foreign key ['ghost_id'] -> people names a missing column; ignored"
    ]


def test_without_rowid_after_strict_or_before_a_comment_and_tables_named_sqlite_something(tmp_path):
    """Each was missed: STRICT before or after WITHOUT ROWID, or a comment after it, read as a rowid
    table (the synthesiser then failed on "no such column: rowid"); "sqlite1" and "SQLiteUsers" were
    dropped as if they were SQLite's own tables (LIKE 'sqlite_%' with "_" a wildcard)."""
    path = tmp_path / "wr.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE a (id INTEGER PRIMARY KEY, name TEXT) STRICT, WITHOUT ROWID;
        CREATE TABLE b (id INTEGER PRIMARY KEY, name TEXT) WITHOUT ROWID, STRICT;
        CREATE TABLE c (id INTEGER PRIMARY KEY, name TEXT) WITHOUT ROWID /* comment */;
        CREATE TABLE d (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE sqlite1 (id INTEGER PRIMARY KEY, d_id INTEGER REFERENCES d (id));
        CREATE TABLE "SQLiteUsers" (id INTEGER PRIMARY KEY);
        CREATE TABLE seq (id INTEGER PRIMARY KEY AUTOINCREMENT);
        """
    )
    conn.close()
    conn = sqlite3.connect(path)
    tables, notes = read_catalog(conn)
    conn.close()
    assert {t: info.without_rowid for t, info in tables.items()} == {
        "SQLiteUsers": False, "a": True, "b": True, "c": True, "d": False, "seq": False, "sqlite1": False,
    }  # fmt: skip
    assert notes == []


def test_a_foreign_key_with_fewer_columns_than_the_parent_key_is_ignored_with_a_note(tmp_path):
    """SQLite calls it a foreign key mismatch; it was read as c.x -> p.a, a join on half the key."""
    path = tmp_path / "mismatch.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE p (a INTEGER, b INTEGER, name TEXT, PRIMARY KEY (a, b));
        CREATE TABLE c (id INTEGER PRIMARY KEY, x INTEGER REFERENCES p, label TEXT);
        """
    )
    tables, notes = read_catalog(conn)
    conn.close()
    assert tables["c"].foreign_keys == ()
    assert notes == ["c: foreign key ['x'] -> p has 1 column(s) but p's primary key has 2; ignored (SQLite calls it a foreign key mismatch)"]
