"""One error hierarchy for the whole project (in the manner of ``sqlglot/errors.py``).

Every error a *user* can cause (a bad file, a bad flag, a query that must not run) is a
:class:`Route2SQLError` child that says where the problem is: the file, the line or the field.
Command-line entry points print these as one line and exit with status 2, no traceback
(see :func:`core.cli.run_main`).
"""

from __future__ import annotations

from pathlib import Path


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of a library's error message (at most ``limit`` characters), or its type
    name when the message is empty: what a one-line error can quote.

    >>> first_line(ValueError("expected value at line 1\\nmore detail"))
    'expected value at line 1'
    >>> first_line(KeyError())
    'KeyError'
    """
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:limit]

class Route2SQLError(Exception):
    """Base error. ``where`` names the file, line or field at fault, when known.

    >>> str(Route2SQLError("no foreign keys", where="shop.sqlite"))
    'shop.sqlite: no foreign keys'
    >>> str(Route2SQLError("bad label", where="train.jsonl", line=3)), str(Route2SQLError("bad label", line=3))
    ('train.jsonl:3: bad label', 'line 3: bad label')
    """

    def __init__(self, message: str, *, where: str | Path | None = None, line: int | None = None):
        self.message = message
        self.where = str(where) if where is not None else None
        self.line = line
        prefix = ""
        if self.where is not None:
            prefix = f"{self.where}:{line}: " if line is not None else f"{self.where}: "
        elif line is not None:
            prefix = f"line {line}: "
        super().__init__(prefix + message)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle with ``where``/``line`` and extra attributes (errors cross worker processes intact).

        >>> import pickle
        >>> e = pickle.loads(pickle.dumps(DataError("bad label", where="train.jsonl", line=3)))
        >>> type(e).__name__, str(e), e.line
        ('DataError', 'train.jsonl:3: bad label', 3)
        """
        extra = {k: v for k, v in self.__dict__.items() if k not in ("message", "where", "line")}
        return (_rebuild, (type(self), self.message, self.where, self.line, extra))


def _rebuild(cls: type, message: str, where: str | None, line: int | None, extra: dict[str, object]) -> Route2SQLError:
    """Unpickle a :class:`Route2SQLError` (see :meth:`Route2SQLError.__reduce__`)."""
    err = Route2SQLError.__new__(cls)
    Route2SQLError.__init__(err, message, where=where, line=line)
    err.__dict__.update(extra)
    return err


class SchemaError(Route2SQLError):
    """A database or schema that cannot be used (missing file, not SQLite, unknown table...)."""


class DataError(Route2SQLError):
    """A malformed data file: a JSONL line, a label naming an unknown table, a sidecar file."""


class DownloadError(Route2SQLError):
    """A sample data set or model could not be fetched from the package registry or failed its checksum."""


class ConfigError(Route2SQLError, ValueError):
    """An invalid configuration value; ``where`` is the field name (e.g. ``--clip-range``)."""


class CheckpointError(Route2SQLError):
    """A checkpoint that cannot be loaded: missing files, or made for another schema."""


class QueryRejected(Route2SQLError):
    """A generated query refused before it ran: not a single read-only statement.

    ``kind`` says why, for the rewards (``rewards/sql.py``): ``"unsafe"`` (the default: a write,
    a schema change, ``ATTACH``/``PRAGMA``, several statements, a denied function), ``"limit"``
    (longer or nested deeper than the gate reads) or ``"invalid"`` (empty, or text that does not
    parse as SQL and names no write). A refusal for ``unsafe`` or ``limit`` earns no reward at
    all; ``invalid`` text keeps its format and partial-name credit.

    >>> QueryRejected("expected one statement, got 2").kind
    'unsafe'
    >>> QueryRejected("empty query", kind="invalid").kind
    'invalid'
    """

    KINDS = ("unsafe", "limit", "invalid")

    def __init__(self, message: str, *, where: str | Path | None = None, line: int | None = None, kind: str = "unsafe"):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {', '.join(self.KINDS)}, got {kind!r}")
        self.kind = kind
        super().__init__(message, where=where, line=line)


class QueryTimeout(Route2SQLError):
    """A query that had to succeed stopped because it ran past its time limit.

    Raised where a timeout leaves the caller nothing to go on: a human-written question's gold
    SQL (``data_pipeline.human_sets``) and a data read of the MongoDB backend. The executors
    themselves never raise it: a generated query that times out is an ``ExecutionResult`` with
    ``timed_out`` set, which the rewards score 0 (and a gold query that times out leaves its
    item unjudged), so one slow query never stops training.
    """
