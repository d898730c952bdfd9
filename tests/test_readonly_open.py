"""One read-only opener (core.sqlite) for every SQLite file the project reads."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.errors import SchemaError
from core.schema import introspect
from core.sqlite import connect_readonly, readonly_uri
from data_pipeline.synthesize import synthesize_rows


def make_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT);"
                      "CREATE TABLE song (id INTEGER PRIMARY KEY, singer_id INTEGER REFERENCES singer(id));")
    con.close()
    return path


def test_a_hash_or_percent_in_the_name_stays_read_only(tmp_path: Path) -> None:
    db = make_db(tmp_path / "50%#1.sqlite")
    before = sorted(p.name for p in tmp_path.iterdir())
    conn = connect_readonly(db)
    with pytest.raises(sqlite3.OperationalError, match="readonly|query_only|attempt to write"):
        conn.execute("CREATE TABLE x (a)")
    conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no "50%" database created beside it
    assert readonly_uri(db).endswith("50%25%231.sqlite?mode=ro")


def test_synthesize_reads_through_the_same_opener(tmp_path: Path) -> None:
    db = make_db(tmp_path / "a?mode=rw#x.sqlite")
    report = synthesize_rows(db, tmp_path / "out.sqlite", rows_per_table=3)
    assert report.rows == {"singer": 3, "song": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a?mode=rw#x.sqlite", "out.sqlite"]
    assert [t.name for t in introspect(db).tables] == ["singer", "song"]


def test_not_a_database_is_one_error_naming_the_file(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("hello, this is not SQLite\n" * 10)
    with pytest.raises(SchemaError, match="not a SQLite database") as info:
        connect_readonly(text)
    assert "notes.sqlite" in str(info.value)
    with pytest.raises(SchemaError, match="not a file"):
        connect_readonly(tmp_path)


def test_a_saved_folder_has_the_usual_file_modes(tmp_path: Path) -> None:
    import os

    from core.io import atomic_directory

    with atomic_directory(tmp_path / "ckpt") as tmp:
        fd = os.open(tmp / "model.safetensors", os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
        (tmp / "config.json").write_text("{}")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "ckpt" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~mask
