"""The one way this project opens a SQLite file read-only.

``file:`` URI with the path percent-quoted (a ``?``, ``#`` or ``%`` in a file name would otherwise
end the path and start URI parameters), ``mode=ro`` so the file is never created or written, and
``PRAGMA query_only``. A WAL-mode file that no connection has open (no ``-wal`` / ``-shm`` beside
it) is opened ``immutable=1`` as well, because a ``mode=ro`` open of a WAL database creates those
two files. The executor in ``data_pipeline.backends.sqlite`` adds its statement gate, authorizer,
limits and timeout on top of this connection.
"""

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from pathlib import Path

from core.errors import SchemaError


SQLITE_KEYWORDS = frozenset("""
ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN BETWEEN BY
CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS CURRENT CURRENT_DATE
CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED DELETE DESC DETACH DISTINCT DO DROP
EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM
FULL GENERATED GLOB GROUP GROUPS HAVING IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT
INSTEAD INTERSECT INTO IS ISNULL JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING
NOTNULL NULL NULLS OF OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY
RAISE RANGE RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK
ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED UNION
UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT
""".split())
"""SQLite's 147 keywords (https://sqlite.org/lang_keywords.html); :func:`sql_ident` quotes them.
A test compares them with the keyword table of the SQLite library Python links."""

_PLAIN_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def sql_ident(name: str) -> str:
    """``name`` as a query writes it: bare when it is a plain identifier that is no SQLite keyword,
    else double-quoted (:func:`quote_ident`). Generated gold queries, join skeletons and the
    generator's prompts use it: ``Products.UnitPrice`` is a third fewer tokens than
    ``"Products"."UnitPrice"`` for the models that must write it.

    >>> sql_ident("Orders"), sql_ident("Order Details"), sql_ident("order"), sql_ident("2nd")
    ('Orders', '"Order Details"', '"order"', '"2nd"')
    """
    if _PLAIN_IDENT.fullmatch(name) and name.upper() not in SQLITE_KEYWORDS:
        return name
    return quote_ident(name)


def quote_ident(name: str) -> str:
    """Quote an SQL identifier for SQLite, so names with spaces or quotes work everywhere.

    >>> quote_ident("Order Details")
    '"Order Details"'
    >>> quote_ident('we"ird')
    '"we""ird"'
    """
    return '"' + name.replace('"', '""') + '"'


def is_wal_file(path: str | Path) -> bool:
    """True when the header of ``path`` says WAL mode (file format bytes 18 and 19 are 2)."""
    try:
        with Path(path).open("rb") as fh:
            header = fh.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[:16] == b"SQLite format 3\x00" and header[18] == 2 and header[19] == 2


def wal_is_idle(path: str | Path) -> bool:
    """True when ``path`` is a WAL-mode database that no connection has open (no ``-wal``/``-shm``).

    Such a file can be read with ``immutable=1`` without creating the ``-wal``/``-shm`` files that a
    ``mode=ro`` open of a WAL database leaves beside it.
    """
    path = Path(path)
    return is_wal_file(path) and not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def readonly_uri(path: str | Path) -> str:
    """The ``file:`` URI that opens ``path`` read-only (``immutable=1`` added for an idle WAL file).

    >>> readonly_uri("/tmp/50%#1.sqlite")
    'file:/tmp/50%25%231.sqlite?mode=ro'
    """
    path = Path(path)
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return uri + "&immutable=1" if wal_is_idle(path) else uri


def connect_readonly(path: str | Path, *, check_same_thread: bool = True, timeout: float = 1.0) -> sqlite3.Connection:
    """Open an existing SQLite file read-only (URI ``mode=ro`` plus ``PRAGMA query_only=ON``).

    Args:
        path: the database file; it is never created.
        check_same_thread: passed to :func:`sqlite3.connect`; ``False`` lets another thread use
            the connection (then the caller must serialise access).
        timeout: seconds :func:`sqlite3.connect` waits for a lock.

    Raises:
        SchemaError: naming the file when it does not exist, is not a regular file, cannot be
            opened, or is not a SQLite database.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise SchemaError("database file not found", where=path)
    if not path.is_file():
        raise SchemaError("not a file (a SQLite database file is needed)", where=path)
    try:
        conn = sqlite3.connect(readonly_uri(path), uri=True, timeout=timeout, check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise SchemaError(f"cannot open the database: {exc}", where=path) from exc
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise SchemaError(f"not a SQLite database ({exc})", where=path) from exc
    return conn
