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
once the deadline has passed, and the deadline is checked again between the chunks of rows
fetched. No helper thread is started, so nothing keeps burning CPU after a timeout (seed 000's
thread-pool timeout abandoned the thread while the query ran on). One SQLite function call is
not interrupted (``instr`` of two megabyte strings ran 7.7 s): for a hard wall-clock limit run the
queries in worker processes (:class:`rewards.pool.WorkerPool`), which are killed at the deadline.

Results are capped twice: at ``max_rows`` rows and at ``max_bytes`` bytes (the rows as
:func:`result_bytes` measures them, about their size in memory for text and blobs), so ``SELECT zeroblob(9999999) FROM r`` over ten
thousand rows stops after a few rows instead of filling 4 GB.

The gate's verdict is cached per SQL text (:func:`gate_verdict`), and the executor keeps the
authorizer and progress handler installed on its own connections, so SQLite's statement cache
is not flushed before every query: a query seen before costs about what raw ``sqlite3`` costs.

**WAL databases.** Opening a WAL-mode file read-only makes SQLite create ``-wal`` and ``-shm``
files beside it. When neither exists (no connection has the file open), :func:`connect_readonly`
opens it with ``immutable=1``, which reads the file without them; the executor reopens it
normally if a ``-wal`` file appears later (a writer arrived). A file whose ``-wal`` exists is
opened normally: its writer's files are already there.
"""

from __future__ import annotations

import logging
import marshal
import math
import os
import pickle
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from core.errors import ConfigError, QueryRejected
from core.sqlite import connect_readonly as _connect_readonly
from core.sqlite import wal_is_idle

PROGRESS_STEPS = 1000
"""SQLite VM instructions between two deadline checks (a few microseconds of work each)."""

MAX_VALUE_BYTES = 10_000_000
"""Longest string or blob a query may build (``SQLITE_LIMIT_LENGTH``), so ``zeroblob(2e9)`` fails fast.

One function call is not interrupted by the progress handler: ``randomblob(99999999)`` took 1 s.
"""

MAX_SQL_CHARS = 20_000
"""Longest query text accepted; parsing is not under the deadline (10,000 statements took 3 s)."""

MAX_NESTING = 24
"""Deepest nesting of brackets, ``CASE`` and runs of unary operators the gate reads.

sqlglot's parser recurses about 24 Python frames per bracket (``SELECT`` with 50 brackets hit
Python's recursion limit) and SQLite's own parser stack overflows at about 20 nested
subqueries, so deeper text is refused before parsing, the same way at any call depth.
"""

MAX_RESULT_BYTES = 32_000_000
"""Default cap on one result's size in bytes (:func:`result_bytes`); more is ``truncated``."""

LIKE_PATTERN_CHARS = 100
"""Longest ``LIKE``/``GLOB`` pattern (``SQLITE_LIMIT_LIKE_PATTERN_LENGTH``): matching costs
pattern x text length inside one uninterruptible call (a 41-character pattern over 8 MB took 0.3 s)."""

GATE_CACHE_SIZE = 8192
"""Verdicts of :func:`gate_verdict` kept, by SQL text (least recently used dropped first)."""

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
    """:func:`core.sqlite.connect_readonly` with this executor's limits on value and LIKE-pattern length.

    Raises:
        SchemaError: naming the file when it does not exist, is a directory, or is not a SQLite
            database.
    """
    conn = _connect_readonly(path, check_same_thread=check_same_thread)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, LIKE_PATTERN_CHARS)
    return conn


def check_statement(sql: str) -> str:
    """Accept exactly one read-only query; return it normalised by sqlglot (SQLite dialect).

    >>> check_statement('select name from "Order Details" limit 3;')
    'SELECT name FROM "Order Details" LIMIT 3'
    >>> check_statement("SELECT 1; DROP TABLE t")
    Traceback (most recent call last):
    ...
    core.errors.QueryRejected: expected one statement, got 2
    >>> check_statement("WITH x AS (SELECT 1) DELETE FROM t")
    Traceback (most recent call last):
    ...
    core.errors.QueryRejected: only SELECT queries may run, not DELETE

    Raises:
        QueryRejected: with a short reason and its ``kind`` (see :class:`QueryRejected`): empty
            text or text that does not parse (``invalid``); text over :data:`MAX_SQL_CHARS` or
            nested deeper than :data:`MAX_NESTING` (``limit``); more than one statement, a
            statement that is not a SELECT/UNION/INTERSECT/EXCEPT, a write or schema change
            anywhere inside it, or a call to a function in :data:`DENIED_FUNCTIONS` (``unsafe``).
    """
    stmt = _checked(sql)[0]
    try:
        return stmt.sql(dialect="sqlite")
    except RecursionError:
        raise QueryRejected("query nested too deeply to parse", kind="limit") from None


@dataclass(frozen=True)
class GateVerdict:
    """What the gate decided about one SQL text (:func:`gate_verdict`).

    Attributes:
        ok: the text is one read-only query and may run.
        text: the statement's own text without trailing ``;`` (what runs), when ``ok``.
        reason: the refusal (:class:`QueryRejected` message) when not ``ok``.
        kind: ``"ok"``, or the refusal's kind: ``"invalid"``, ``"limit"`` or ``"unsafe"``.
    """

    ok: bool
    text: str | None
    reason: str | None
    kind: str

    def raise_if_refused(self) -> str:
        """The text to run; raises :class:`QueryRejected` (same reason and kind) when refused."""
        if not self.ok:
            raise QueryRejected(self.reason or "refused", kind=self.kind)
        assert self.text is not None
        return self.text


class LRUCache:
    """A small thread-safe least-recently-used map: ``get`` (None when absent) and ``put``; ``size`` entries at most."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_VERDICTS = LRUCache(GATE_CACHE_SIZE)


def inspect_statement(sql: str) -> tuple[GateVerdict, exp.Expression | None]:
    """The gate's verdict on ``sql`` and sqlglot's tree of it (None when it did not parse).

    The tree is returned also for a refused statement that parsed (``DROP TABLE t``), for
    callers that read names from it; do not modify it. The verdict is remembered for
    :func:`gate_verdict`. Never raises for any text.
    """
    try:
        stmt, text = _checked(sql)
    except QueryRejected as exc:
        verdict = GateVerdict(False, None, exc.message, exc.kind)
        tree = getattr(exc, "tree", None)
    else:
        verdict, tree = GateVerdict(True, text, None, "ok"), stmt
    if isinstance(sql, str):
        _VERDICTS.put(sql, verdict)
    return verdict, tree


def gate_verdict(sql: str) -> GateVerdict:
    """:func:`check_statement`'s decision as a value, cached per SQL text (:data:`GATE_CACHE_SIZE`).

    >>> gate_verdict("SELECT 1;").text, gate_verdict("DROP TABLE t").kind, gate_verdict("hello (").kind
    ('SELECT 1', 'unsafe', 'invalid')
    """
    if not isinstance(sql, str):
        return GateVerdict(False, None, "empty query", "invalid")
    hit = _VERDICTS.get(sql)
    if hit is not None:
        return hit
    return inspect_statement(sql)[0]


_WRITE_TOKENS = frozenset(
    {
        TokenType.INSERT, TokenType.UPDATE, TokenType.DELETE, TokenType.DROP, TokenType.CREATE, TokenType.ALTER,
        TokenType.ATTACH, TokenType.DETACH, TokenType.PRAGMA, TokenType.COMMAND, TokenType.MERGE,
        TokenType.ANALYZE, TokenType.BEGIN, TokenType.COMMIT, TokenType.ROLLBACK,
    }
)  # fmt: skip
_WRITE_WORDS = re.compile(
    r"\b(INSERT|UPDATE|DELETE|DROP|CREATE|ALTER|ATTACH|DETACH|PRAGMA|VACUUM|REINDEX|REPLACE\s+INTO|MERGE)\b", re.I
)
_WRITE_FIRST_WORDS = frozenset({"REINDEX", "SAVEPOINT", "RELEASE", "VACUUM", "ANALYZE", "END", "REPLACE", "UPSERT"})
"""Words that start a statement that is not a read, whatever sqlglot makes of them (``REINDEX`` parses as a column)."""
_UNARY = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE})


def _nesting(tokens: list[Any]) -> int:
    """Deepest nesting of brackets and ``CASE ... END`` plus the longest run of unary operators in it."""
    depth = deepest = run = 0
    for tok in tokens:
        t = tok.token_type
        if t == TokenType.L_PAREN or t == TokenType.CASE:
            depth += 1
            run = 0
        elif t == TokenType.R_PAREN or t == TokenType.END:
            depth -= 1
            run = 0
        elif t in _UNARY:
            run += 1
        else:
            run = 0
        if depth + run > deepest:
            deepest = depth + run
    return deepest


def _write_in_unparsed(tokens: list[Any] | None, sql: str) -> str | None:
    """The write keyword in text that is not a query (``DELETE FROM t WHERE``, ``REINDEX``), else None."""
    if tokens is None:
        m = _WRITE_WORDS.search(sql)
        return m.group(1).split()[0].upper() if m else None
    for i, tok in enumerate(tokens):
        if tok.token_type in _WRITE_TOKENS:
            return tok.text.split()[0].upper()
        starts = i == 0 or tokens[i - 1].token_type == TokenType.SEMICOLON
        if starts and tok.text.upper() in _WRITE_FIRST_WORDS:
            return tok.text.upper()
        if tok.token_type == TokenType.REPLACE and (i + 1 >= len(tokens) or tokens[i + 1].token_type != TokenType.L_PAREN):
            return "REPLACE"
    return None


_IN_GATE = threading.local()


class _QuietInsideTheGate(logging.Filter):
    """Drops sqlglot's own log lines (``'SHOW TABLES' contains unsupported syntax. Falling back to
    parsing as a 'Command'.``) while this thread is inside the statement gate, which reports the
    refusal itself; sqlglot's messages outside the gate pass as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_IN_GATE, "active", False)


logging.getLogger("sqlglot").addFilter(_QuietInsideTheGate())


def _checked(sql: str) -> tuple[exp.Expression, str]:
    """:func:`check_statement`'s work: the accepted statement and its own text, without trailing ``;``.

    A refusal of a statement that parsed carries the tree as ``exc.tree`` (for :func:`inspect_statement`).
    """
    if not isinstance(sql, str) or not sql.strip():
        raise QueryRejected("empty query", kind="invalid")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryRejected(f"query too long ({len(sql)} characters, at most {MAX_SQL_CHARS})", kind="limit")
    tokens: list[Any] | None = None
    try:
        tokens = _SQLITE.tokenize(sql)
        depth = _nesting(tokens)
        if depth > MAX_NESTING:
            raise QueryRejected(f"query nested too deeply ({depth} levels, at most {MAX_NESTING})", kind="limit")
        _IN_GATE.active = True
        try:
            parsed = _SQLITE.parser().parse(tokens, sql)
        finally:
            _IN_GATE.active = False
    except (ParseError, TokenError) as exc:
        write = _write_in_unparsed(tokens, sql)
        if write is not None:
            raise QueryRejected(f"only SELECT queries may run, not {write} (and the text does not parse)") from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise QueryRejected(f"not valid SQL ({first})", kind="invalid") from None
    except RecursionError:
        raise QueryRejected("query nested too deeply to parse", kind="limit") from None
    # a bare ';' parses to None and a trailing comment to a Semicolon: neither is a statement
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]
    if not statements:
        raise QueryRejected("empty query", kind="invalid")
    if len(statements) != 1:
        raise QueryRejected(f"expected one statement, got {len(statements)}")
    stmt = statements[0]
    if not isinstance(stmt, _ALLOWED_TOP):
        write = None if isinstance(stmt, _FORBIDDEN_NODES) else _write_in_unparsed(tokens, sql)
        unsafe = isinstance(stmt, _FORBIDDEN_NODES) or write is not None
        exc = QueryRejected(f"only SELECT queries may run, not {write or _kind(stmt)}", kind="unsafe" if unsafe else "invalid")
        exc.tree = stmt  # type: ignore[attr-defined]
        raise exc
    try:
        _check_nodes(stmt)
    except RecursionError:
        raise QueryRejected("query nested too deeply to parse", kind="limit") from None
    except QueryRejected as exc:
        exc.tree = stmt  # type: ignore[attr-defined]
        raise
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
    the query had more than ``max_rows`` rows or more than ``max_bytes`` bytes of them, and only
    the rows before the limit were kept; ``limit`` then says which (``"rows"`` or ``"bytes"``).
    """

    ok: bool
    rows: list[tuple[Any, ...]] | None
    columns: list[str] | None
    error: str | None
    timed_out: bool
    elapsed_s: float
    truncated: bool
    limit: str = ""


def _failure(error: str, start: float, *, timed_out: bool = False) -> ExecutionResult:
    return ExecutionResult(False, None, None, error, timed_out, time.perf_counter() - start, False)


def _check_limits(timeout_s: float, max_rows: int, max_bytes: int) -> None:
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):  # NaN would never time out
        raise ConfigError(f"must be a positive number of seconds, got {timeout_s}", where="timeout_s")
    if max_rows < 0:
        raise ConfigError(f"must be >= 0, got {max_rows}", where="max_rows")
    if max_bytes < 0:
        raise ConfigError(f"must be >= 0, got {max_bytes}", where="max_bytes")


class _Deadline:
    """The progress handler of one connection: aborts the running statement once ``at`` has passed."""

    __slots__ = ("at", "expired")

    def __init__(self) -> None:
        self.at = math.inf
        self.expired = False

    def __call__(self) -> int:
        if time.monotonic() > self.at:
            self.expired = True
            return 1
        return 0


_MAX_CHUNK = 1024
"""Most rows fetched at once; chunks start at one row and double while the bytes allow."""


def result_bytes(rows: Any) -> int:
    """The size of ``rows`` in bytes as :mod:`marshal` writes them (about their size in memory for
    text and blobs; a few bytes per number). SQLite's values are all marshallable; anything else
    (a registered converter's objects) is measured pickled.

    >>> result_bytes([(1, "abc")]) < result_bytes([(1, "abc" * 100)])
    True
    """
    try:
        return len(marshal.dumps(rows))
    except ValueError:
        return len(pickle.dumps(rows, 5))


def _fetch(cur: sqlite3.Cursor, max_rows: int, max_bytes: int, deadline: _Deadline) -> tuple[list[Any], str]:
    """Fetch up to ``max_rows`` rows and ``max_bytes`` bytes; ``(rows, limit hit: "" / "rows" / "bytes")``.

    Rows come in chunks that start at one row and double, each no larger than half the bytes
    still allowed at the largest row size seen so far, so a result of huge rows stops after the
    first few of them. The deadline is checked after every chunk.
    """
    rows: list[Any] = []
    size = 0
    chunk = 1
    widest = 1
    while True:
        got = cur.fetchmany(chunk)
        if not got:
            return rows, ""
        got_bytes = result_bytes(got)
        if size + got_bytes > max_bytes:
            for row in got:  # keep the rows that still fit
                size += result_bytes(row)
                if size > max_bytes:
                    break
                rows.append(row)
            return rows, "bytes"
        size += got_bytes
        rows.extend(got)
        if len(rows) > max_rows:
            del rows[max_rows:]
            return rows, "rows"
        if time.monotonic() > deadline.at:
            deadline.expired = True
            raise sqlite3.OperationalError("interrupted")
        widest = max(widest, got_bytes // len(got))
        chunk = max(1, min(2 * chunk, _MAX_CHUNK, max_rows + 1 - len(rows), (max_bytes - size) // (2 * widest)))


def _run_guarded(conn: sqlite3.Connection, deadline: _Deadline, text: str, timeout_s: float, max_rows: int,
                 max_bytes: int, start: float) -> ExecutionResult:  # fmt: skip
    """Run an accepted statement on a connection whose authorizer and progress handler are set."""
    deadline.at = time.monotonic() + timeout_s
    deadline.expired = False
    cur: sqlite3.Cursor | None = None
    try:
        cur = conn.execute(text)
        columns = [d[0] for d in cur.description or ()]
        rows, limit = _fetch(cur, max_rows, max_bytes, deadline)
    except (sqlite3.Error, ValueError, OverflowError, MemoryError) as exc:
        if deadline.expired:
            return _failure(f"timed out after {timeout_s:g} s", start, timed_out=True)
        if isinstance(exc, MemoryError):
            return _failure("out of memory", start)
        return _failure(f"{type(exc).__name__}: {exc}", start)
    finally:
        deadline.at = math.inf
        if cur is not None:
            cur.close()  # resets the statement, so no read transaction stays open
    return ExecutionResult(True, rows, columns, None, False, time.perf_counter() - start, bool(limit), limit)


def _run(conn: sqlite3.Connection, sql: str, timeout_s: float, max_rows: int,
         max_bytes: int = MAX_RESULT_BYTES) -> ExecutionResult:  # fmt: skip
    """Check and run ``sql`` on a caller's ``conn`` under the deadline; never raises for a bad query."""
    _check_limits(timeout_s, max_rows, max_bytes)
    start = time.perf_counter()
    verdict = gate_verdict(sql)
    if not verdict.ok:
        return _failure(f"rejected: {verdict.reason}", start)
    # The text as written runs (not sqlglot's rewrite, which may rename functions): the reward
    # judges the model's own query, and the authorizer guards what SQLite actually parses.
    deadline = _Deadline()
    conn.set_authorizer(read_only_authorizer)
    conn.set_progress_handler(deadline, PROGRESS_STEPS)
    try:
        assert verdict.text is not None
        return _run_guarded(conn, deadline, verdict.text, timeout_s, max_rows, max_bytes, start)
    finally:
        conn.set_progress_handler(None, 0)
        conn.set_authorizer(None)


def execute_readonly(
    db: str | Path | sqlite3.Connection, sql: str, *, timeout_s: float = 5.0, max_rows: int = 10_000,
    max_bytes: int = MAX_RESULT_BYTES,
) -> ExecutionResult:  # fmt: skip
    """Run one generated query safely and report what happened; query errors never raise.

    Args:
        db: a database file (opened read-only for this call and closed after) or an open
            connection (used as is, guarded by the authorizer during the call; a connection
            from :func:`connect_readonly` is safest). An authorizer or progress handler the
            caller had set on it is removed.
        sql: the query text; it must pass :func:`check_statement`.
        timeout_s: wall-clock limit in seconds; the statement is aborted inside SQLite when it
            passes (checked every :data:`PROGRESS_STEPS` VM instructions and between fetched
            chunks of rows).
        max_rows: keep at most this many rows; ``truncated`` says whether more existed.
        max_bytes: keep at most this many bytes of rows (:func:`result_bytes`); ``truncated`` with
            ``limit == "bytes"`` when more existed.

    Returns:
        An :class:`ExecutionResult`; a rejected, failing or timed-out query gives ``ok=False``.

    Raises:
        SchemaError: ``db`` is a path to a missing file or to something that is not SQLite.
        ConfigError: ``timeout_s`` not a positive finite number, ``max_rows < 0`` or ``max_bytes < 0``.
    """
    if isinstance(db, sqlite3.Connection):
        return _run(db, sql, timeout_s, max_rows, max_bytes)
    _check_limits(timeout_s, max_rows, max_bytes)
    conn = connect_readonly(db)
    try:
        return _run(conn, sql, timeout_s, max_rows, max_bytes)
    finally:
        conn.close()


class _Guarded:
    """One executor-owned connection: read-only, the authorizer and progress handler always set."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = connect_readonly(path, check_same_thread=False)
        self.deadline = _Deadline()
        self.conn.set_authorizer(read_only_authorizer)
        self.conn.set_progress_handler(self.deadline, PROGRESS_STEPS)
        self.lock = threading.Lock()
        self.wal = Path(str(path) + "-wal") if wal_is_idle(path) else None
        """The -wal file whose appearance means a writer arrived (immutable connections only)."""

    def stale(self) -> bool:
        """True when the file was opened immutable and a writer has appeared since."""
        return self.wal is not None and os.path.exists(self.wal)

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class SQLiteExecutor:
    """:func:`execute_readonly` with one cached read-only connection per database file.

    Each connection keeps the read-only authorizer and the deadline's progress handler installed
    for its whole life (it runs nothing else), so SQLite's statement cache survives between
    queries; the gate's verdicts are cached per text (:func:`gate_verdict`).

    Thread safety: each connection is opened with ``check_same_thread=False`` and guarded by its
    own lock, so any thread may call :meth:`execute`; queries on the same file run one at a time
    (each for at most its timeout), queries on different files run in parallel. For parallel
    queries on one file use worker processes (:class:`rewards.pool.WorkerPool`). A file replaced
    on disk after its first use is still read through the old connection until :meth:`close`.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.sqlite")
    >>> sqlite3.connect(path).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);").close()
    >>> with SQLiteExecutor() as ex:
    ...     ex.execute(path, "SELECT sum(x) FROM t").rows
    [(3,)]
    """

    def __init__(self, *, timeout_s: float = 5.0, max_rows: int = 10_000, max_bytes: int = MAX_RESULT_BYTES) -> None:
        """Defaults for :meth:`execute`: ``timeout_s`` seconds, ``max_rows`` rows, ``max_bytes`` bytes.

        Raises:
            ConfigError: a limit out of range (as :func:`execute_readonly`).
        """
        _check_limits(timeout_s, max_rows, max_bytes)
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._conns: dict[Any, _Guarded] = {}

    def _connection(self, db: str | Path) -> _Guarded:
        key = db if isinstance(db, str) else str(db)
        entry = self._conns.get(key)
        if entry is not None and not entry.stale():
            return entry
        with self._lock:
            entry = self._conns.get(key)
            if entry is not None and entry.stale():
                entry.close()
                entry = None
                self._conns = {k: v for k, v in self._conns.items() if not v.stale()}
            if entry is None:
                path = Path(db).expanduser().resolve()
                entry = next((e for e in self._conns.values() if e.path == path), None) or _Guarded(path)
                self._conns[key] = entry
            return entry

    def execute(
        self, db: str | Path, sql: str, *, timeout_s: float | None = None, max_rows: int | None = None,
        max_bytes: int | None = None,
    ) -> ExecutionResult:  # fmt: skip
        """As :func:`execute_readonly` on the cached connection for ``db``.

        Raises:
            SchemaError: ``db`` is missing or not a SQLite database.
            ConfigError: a limit out of range.
        """
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        max_rows = self.max_rows if max_rows is None else max_rows
        max_bytes = self.max_bytes if max_bytes is None else max_bytes
        if timeout_s is not self.timeout_s or max_rows is not self.max_rows or max_bytes is not self.max_bytes:
            _check_limits(timeout_s, max_rows, max_bytes)
        start = time.perf_counter()
        entry = self._connection(db)
        verdict = gate_verdict(sql)
        if not verdict.ok:
            return _failure(f"rejected: {verdict.reason}", start)
        assert verdict.text is not None
        with entry.lock:
            return _run_guarded(entry.conn, entry.deadline, verdict.text, timeout_s, max_rows, max_bytes, start)

    def close(self) -> None:
        """Close every cached connection (waiting for queries in flight to finish)."""
        with self._lock:
            entries, self._conns = list(self._conns.values()), {}
        for entry in {id(e): e for e in entries}.values():
            entry.close()

    def __enter__(self) -> SQLiteExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
