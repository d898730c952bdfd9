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
