"""core.schema.introspect opens the database read-only whatever its file name, and leaves nothing beside it."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import make_tiny_shop

from core.schema import introspect


@pytest.mark.parametrize("name", ["50%#1.sqlite", "a?mode=rwc&x", "b#c"])
def test_odd_file_names_open_that_file_read_only(tmp_path: Path, name: str) -> None:
    """The path went into the URI unquoted: "#" dropped ``?mode=ro`` and SQLite created an empty
    read-write database "50%" (then "database has no tables"); "?" started URI parameters."""
    db = shutil.copy(make_tiny_shop(tmp_path / "shop.sqlite"), tmp_path / name)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert introspect(Path(db)).tables
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_idle_wal_database_gets_no_wal_or_shm_files(tmp_path: Path) -> None:
    db = make_tiny_shop(tmp_path / "shop.sqlite")
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert not list(tmp_path.glob("shop.sqlite-*"))
    assert introspect(db).tables
    assert not list(tmp_path.glob("shop.sqlite-*"))
