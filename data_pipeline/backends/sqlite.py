"""Safe execution of generated SQL on SQLite: one read-only SELECT, a hard timeout, bounded rows.

Three independent guards stand between a generated query and the database file:

1. :func:`check_statement` parses the text with sqlglot and accepts exactly one
   ``SELECT`` / ``UNION`` / ``INTERSECT`` / ``EXCEPT`` (``WITH`` allowed in front) that calls no
   function able to load code or touch files;
2. the connection is opened read-only (``file:...?mode=ro`` and ``PRAGMA query_only``);
3. while a query runs, SQLite's own authorizer (:func:`read_only_authorizer`) denies every
   action except reading, so a text that sqlglot and SQLite parse differently still cannot write.

The timeout is enforced inside SQLite: a progress handler, called every
:data:`PROGRESS_STEPS` virtual-machine instructions in the calling thread, aborts the statement
once the deadline has passed. No helper thread is started, so nothing keeps burning CPU after a
timeout (seed 000's thread-pool timeout abandoned the thread while the query ran on).
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from data_pipeline.errors import ConfigError, QueryRejected, SchemaError

PROGRESS_STEPS = 1000
"""SQLite VM instructions between two deadline checks (a few microseconds of work each)."""

MAX_VALUE_BYTES = 10_000_000
"""Longest string or blob a query may build (``SQLITE_LIMIT_LENGTH``), so ``zeroblob(2e9)`` fails fast.

One function call is not interrupted by the progress handler: ``randomblob(99999999)`` took 1 s.
"""

MAX_SQL_CHARS = 20_000
"""Longest query text accepted; parsing is not under the deadline (10,000 statements took 3 s)."""

DENIED_FUNCTIONS = frozenset(
    {"load_extension", "writefile", "readfile", "edit", "fts3_tokenizer", "zipfile", "sqlar_compress"}
)
"""Functions refused by name: they load native code or read/write files (some exist only in the CLI)."""

_ALLOWED_TOP = (exp.Select, exp.Union, exp.Intersect, exp.Except)
_FORBIDDEN_NODES = (
    exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Command, exp.Pragma,
    exp.Attach, exp.Detach, exp.Transaction, exp.Commit, exp.Rollback, exp.Merge,
)  # fmt: skip

_SQLITE = Dialect.get_or_raise("sqlite")
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


def connect_readonly(path: str | Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open an existing SQLite file read-only (URI ``mode=ro`` plus ``PRAGMA query_only=ON``).

    Args:
        path: the database file; it is never created.
        check_same_thread: passed to :func:`sqlite3.connect`; ``False`` lets another thread use
            the connection (then the caller must serialise access).

    Raises:
        SchemaError: naming the file when it does not exist, is a directory, or is not a SQLite
            database.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise SchemaError("database file not found", where=path)
    if not path.is_file():
        raise SchemaError("not a file (a SQLite database file is needed)", where=path)
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=1.0, check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise SchemaError(f"cannot open the database: {exc}", where=path) from exc
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise SchemaError(f"not a SQLite database ({exc})", where=path) from exc
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    return conn


def check_statement(sql: str) -> str:
    """Accept exactly one read-only query; return it normalised by sqlglot (SQLite dialect).

    >>> check_statement('select name from "Order Details" limit 3;')
    'SELECT name FROM "Order Details" LIMIT 3'
    >>> check_statement("SELECT 1; DROP TABLE t")
    Traceback (most recent call last):
    ...
    data_pipeline.errors.QueryRejected: expected one statement, got 2
    >>> check_statement("WITH x AS (SELECT 1) DELETE FROM t")
    Traceback (most recent call last):
    ...
    data_pipeline.errors.QueryRejected: only SELECT queries may run, not DELETE

    Raises:
        QueryRejected: with a short reason: empty text, text over :data:`MAX_SQL_CHARS` or nested too deeply, text that does not parse, more than one
            statement, a statement that is not a SELECT/UNION/INTERSECT/EXCEPT, a write or
            schema change anywhere inside it, or a call to a function in :data:`DENIED_FUNCTIONS`.
    """
    return _checked(sql)[0].sql(dialect="sqlite")


def _checked(sql: str) -> tuple[exp.Expression, str]:
    """:func:`check_statement`'s work: the accepted statement and its own text, without trailing ``;``."""
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRejected("empty query")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryRejected(f"query too long ({len(sql)} characters, at most {MAX_SQL_CHARS})")
    try:
        tokens = _SQLITE.tokenize(sql)
        parsed = _SQLITE.parser().parse(tokens, sql)
    except (ParseError, TokenError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise QueryRejected(f"not valid SQL ({first})") from None
    except RecursionError:
        raise QueryRejected("query nested too deeply to parse") from None
    # a bare ';' parses to None and a trailing comment to a Semicolon: neither is a statement
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]
    if not statements:
        raise QueryRejected("empty query")
    if len(statements) != 1:
        raise QueryRejected(f"expected one statement, got {len(statements)}")
    stmt = statements[0]
    if not isinstance(stmt, _ALLOWED_TOP):
        raise QueryRejected(f"only SELECT queries may run, not {_kind(stmt)}")
    try:
        _check_nodes(stmt)
    except RecursionError:
        raise QueryRejected("query nested too deeply to parse") from None
    end = max(t.end for t in tokens if t.token_type != TokenType.SEMICOLON)
    return stmt, sql[: end + 1]


def _check_nodes(stmt: exp.Expression) -> None:
    """Refuse a write, schema change or denied function anywhere inside ``stmt``."""
    for node in stmt.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            raise QueryRejected(f"only SELECT queries may run; found {_kind(node)} inside")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in DENIED_FUNCTIONS:
                raise QueryRejected(f"function {name}() is not allowed")
            if name in ("printf", "format"):
                _check_format(node)


_HUGE_FIELD = re.compile(r"%[^a-zA-Z%]*(\*|\d{6,})")


def _check_format(node: exp.Func) -> None:
    """Refuse ``printf``/``format`` with a computed format or a ``*``/6-digit width or precision.

    SQLite 3.40 writes ``printf('%.*c', 2000000000, 'x')`` one character at a time for seconds,
    inside one function call that the progress handler cannot interrupt.
    """
    fmt = node.expressions[0] if isinstance(node, exp.Anonymous) and node.expressions else node.this
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise QueryRejected("printf()/format() needs a literal format string")
    if _HUGE_FIELD.search(fmt.this):
        raise QueryRejected("printf()/format() width or precision must be a literal under 100000")


def _kind(node: exp.Expression) -> str:
    """A short SQL-ish name for a statement node (``DROP``, ``PRAGMA``, ``a bare expression``)."""
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    known = {exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Create: "CREATE",
             exp.Drop: "DROP", exp.Alter: "ALTER", exp.Pragma: "PRAGMA", exp.Attach: "ATTACH",
             exp.Detach: "DETACH", exp.Transaction: "BEGIN", exp.Commit: "COMMIT", exp.Rollback: "ROLLBACK",
             exp.Values: "VALUES", exp.Subquery: "a parenthesised query", exp.Merge: "MERGE"}  # fmt: skip
    for cls, word in known.items():
        if isinstance(node, cls):
            return word
    return f"a bare expression ({type(node).__name__})"


def read_only_authorizer(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
    """SQLite authorizer callback that allows only reading (``SELECT``, column reads, recursive CTEs, functions).

    Functions in :data:`DENIED_FUNCTIONS` are denied; everything else (writes, schema changes,
    ``ATTACH``, ``PRAGMA``, transactions) gets ``SQLITE_DENY``, which fails the statement with
    "not authorized" when it is prepared.

    >>> read_only_authorizer(sqlite3.SQLITE_READ, "orders", "id", "main", None) == sqlite3.SQLITE_OK
    True
    >>> read_only_authorizer(sqlite3.SQLITE_DELETE, "orders", None, "main", None) == sqlite3.SQLITE_DENY
    True
    """
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


@dataclass(frozen=True)
class ExecutionResult:
    """What one query did.

    ``rows``/``columns`` are ``None`` unless ``ok``. ``error`` is a one-line reason when not
    ``ok`` (``"rejected: ..."``, ``"timed out after 5.0 s"`` or SQLite's message). ``elapsed_s``
    is wall time in seconds from the check to the last fetched row. ``truncated`` is True when
    the query had more than ``max_rows`` rows and only the first ``max_rows`` were kept.
    """

    ok: bool
    rows: list[tuple[Any, ...]] | None
    columns: list[str] | None
    error: str | None
    timed_out: bool
    elapsed_s: float
    truncated: bool


def _failure(error: str, start: float, *, timed_out: bool = False) -> ExecutionResult:
    return ExecutionResult(False, None, None, error, timed_out, time.perf_counter() - start, False)


def _run(conn: sqlite3.Connection, sql: str, timeout_s: float, max_rows: int) -> ExecutionResult:
    """Check and run ``sql`` on ``conn`` under the deadline; never raises for a bad query."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):  # NaN would never time out
        raise ConfigError(f"must be a positive number of seconds, got {timeout_s}", where="timeout_s")
    if max_rows < 0:
        raise ConfigError(f"must be >= 0, got {max_rows}", where="max_rows")
    start = time.perf_counter()
    try:
        _, text = _checked(sql)
    except QueryRejected as exc:
        return _failure(f"rejected: {exc.message}", start)
    # The text as written runs (not sqlglot's rewrite, which may rename functions): the reward
    # judges the model's own query, and the authorizer guards what SQLite actually parses.
    deadline = time.monotonic() + timeout_s
    expired = False

    def past_deadline() -> int:
        nonlocal expired
        expired = time.monotonic() > deadline
        return 1 if expired else 0

    conn.set_authorizer(read_only_authorizer)
    conn.set_progress_handler(past_deadline, PROGRESS_STEPS)
    cur: sqlite3.Cursor | None = None
    try:
        cur = conn.execute(text)
        columns = [d[0] for d in cur.description or ()]
        rows = cur.fetchmany(max_rows + 1)
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        if expired:
            return _failure(f"timed out after {timeout_s:g} s", start, timed_out=True)
        return _failure(f"{type(exc).__name__}: {exc}", start)
    finally:
        if cur is not None:
            cur.close()  # resets the statement, so no read transaction stays open
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)
    truncated = len(rows) > max_rows
    return ExecutionResult(True, rows[:max_rows], columns, None, False, time.perf_counter() - start, truncated)


def execute_readonly(
    db: str | Path | sqlite3.Connection, sql: str, *, timeout_s: float = 5.0, max_rows: int = 10_000
) -> ExecutionResult:
    """Run one generated query safely and report what happened; query errors never raise.

    Args:
        db: a database file (opened read-only for this call and closed after) or an open
            connection (used as is, guarded by the authorizer during the call; a connection
            from :func:`connect_readonly` is safest). An authorizer or progress handler the
            caller had set on it is removed.
        sql: the query text; it must pass :func:`check_statement`.
        timeout_s: wall-clock limit in seconds; the statement is aborted inside SQLite when it
            passes (checked every :data:`PROGRESS_STEPS` VM instructions, fetching included).
        max_rows: keep at most this many rows; ``truncated`` says whether more existed.

    Returns:
        An :class:`ExecutionResult`; a rejected, failing or timed-out query gives ``ok=False``.

    Raises:
        SchemaError: ``db`` is a path to a missing file or to something that is not SQLite.
        ConfigError: ``timeout_s`` not a positive finite number or ``max_rows < 0``.
    """
    if isinstance(db, sqlite3.Connection):
        return _run(db, sql, timeout_s, max_rows)
    conn = connect_readonly(db)
    try:
        return _run(conn, sql, timeout_s, max_rows)
    finally:
        conn.close()


class SQLiteExecutor:
    """:func:`execute_readonly` with one cached read-only connection per database file.

    Thread safety: each connection is opened with ``check_same_thread=False`` and guarded by its
    own lock, so any thread may call :meth:`execute`; queries on the same file run one at a time
    (each for at most its timeout), queries on different files run in parallel. A file replaced
    on disk after its first use is still read through the old connection until :meth:`close`.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
    >>> sqlite3.connect(path).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);").close()
    >>> with SQLiteExecutor() as ex:
    ...     ex.execute(path, "SELECT sum(x) FROM t").rows
    [(3,)]
    """

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000) -> None:
        """Defaults for :meth:`execute`: ``timeout_s`` seconds and ``max_rows`` rows."""
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._conns: dict[Path, tuple[sqlite3.Connection, threading.Lock]] = {}

    def _connection(self, db: str | Path) -> tuple[sqlite3.Connection, threading.Lock]:
        key = Path(db).expanduser().resolve()
        with self._lock:
            entry = self._conns.get(key)
            if entry is None:
                entry = (connect_readonly(key, check_same_thread=False), threading.Lock())
                self._conns[key] = entry
            return entry

    def execute(
        self, db: str | Path, sql: str, *, timeout_s: float | None = None, max_rows: int | None = None
    ) -> ExecutionResult:
        """As :func:`execute_readonly` on the cached connection for ``db``.

        Raises:
            SchemaError: ``db`` is missing or not a SQLite database.
        """
        conn, lock = self._connection(db)
        with lock:
            return _run(
                conn,
                sql,
                self.timeout_s if timeout_s is None else timeout_s,
                self.max_rows if max_rows is None else max_rows,
            )

    def close(self) -> None:
        """Close every cached connection (waiting for queries in flight to finish)."""
        with self._lock:
            entries, self._conns = list(self._conns.values()), {}
        for conn, lock in entries:
            with lock:
                conn.close()

    def __enter__(self) -> SQLiteExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
