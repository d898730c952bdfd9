"""SQLite databases built in memory and handed back as the bytes of a database file.

The builders of the sample data (:mod:`data_pipeline.sample_databases`, the Django reader in
:mod:`data_pipeline.django_sqlite`, the Spider schemas in :mod:`data_pipeline.spider_sqlite`) fill
an in-memory connection and finish with :func:`serialize_database`, so that the caller can write
the file atomically (:func:`data_pipeline.archives.cached_build`).
"""

from __future__ import annotations

import sqlite3

from core.errors import DataError


def serialize_database(conn: sqlite3.Connection, where: str, check_rows: bool = True) -> bytes:
    """The database of ``conn`` as file bytes, after checking its rows against its foreign keys.

    Args:
        conn: an open connection (usually ``":memory:"``).
        where: what the rows came from, named in the error.
        check_rows: run ``PRAGMA foreign_key_check`` first (off for schemas without rows).

    >>> conn = sqlite3.connect(":memory:")
    >>> _ = conn.executescript("CREATE TABLE a (id INTEGER PRIMARY KEY); CREATE TABLE b (a_id REFERENCES a(id));"
    ...                        "INSERT INTO b VALUES (7);")
    >>> serialize_database(conn, "dump.sql")
    Traceback (most recent call last):
    ...
    core.errors.DataError: dump.sql: 1 rows break a foreign key, e.g. b rowid 1 -> a

    Raises:
        DataError: rows break a foreign key (how many, and the first one).
    """
    bad = conn.execute("PRAGMA foreign_key_check").fetchall() if check_rows else []
    if bad:
        table, rowid, ref, _ = bad[0]
        raise DataError(f"{len(bad)} rows break a foreign key, e.g. {table} rowid {rowid} -> {ref}", where=where)
    conn.commit()
    return conn.serialize()


def sqlite_from_dump(sql: str, where: str = "dump.sql") -> bytes:
    """Execute a SQLite dump into a fresh in-memory database; return the database file's bytes.

    >>> data = sqlite_from_dump('CREATE TABLE a (id INTEGER PRIMARY KEY); INSERT INTO a VALUES (1);')
    >>> conn = sqlite3.connect(":memory:"); conn.deserialize(data)
    >>> conn.execute("SELECT count(*) FROM a").fetchone()
    (1,)

    Raises:
        DataError: (``where`` named) the dump does not execute, or its rows break a declared
            foreign key.
    """
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(sql)
    except sqlite3.Error as exc:
        raise DataError(f"SQL dump does not execute ({exc})", where=where) from exc
    try:
        return serialize_database(conn, where)
    finally:
        conn.close()
