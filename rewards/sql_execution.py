"""Execution correctness: run the predicted and the gold SQL, compare the rows.

Two comparisons, shared by the GRPO reward and by evaluation:

- :func:`rows_f1` (the reward, SPEC section 6): a soft F1 over rows taken as multisets, so a
  query returning 100 rows of which 99 are right scores 0.99 instead of 0.
- :func:`results_match` (execution accuracy, SPEC section 7): the exact-match rule of Spider's
  test-suite evaluator (``result_eq`` in taoyds/test-suite-sql-eval ``exec_eval.py``): rows
  compared as a multiset, in order only when the gold query has a top-level ORDER BY
  (:func:`gold_is_ordered`), and columns matched up to a permutation.

Both normalise every value first (:func:`normalize_value`): numbers are compared to
:data:`SIGNIFICANT_DIGITS` significant digits (about 1e-6 relative), an integral float equals
the integer (``AVG`` gives ``3.0`` where ``SUM`` gives ``3``), ``NULL`` equals ``NULL``, and
strings compare exactly (no case folding, no trimming).

**Permuted columns.** ``SELECT name, city`` and ``SELECT city, name`` answer the same question;
Spider's evaluator accepts them, and so do we. As there, the candidate permutations are
constrained: a predicted column can stand for a gold column only when their value sets agree
(:func:`results_match`: equal sets; :func:`rows_f1`: overlapping sets), the identity order is
tried first, and at most :data:`MAX_PERMUTATIONS` candidates are scored. Unlike the test-suite
evaluator, which samples 20 rows to build the constraints, we use every row, so the result is
deterministic. A different number of columns never matches.

**Empty results.** Two empty results are equal (F1 1.0), as in Spider; one empty result against
a non-empty one scores 0.

**Running the queries** (:class:`ExecutionScorer`, :func:`execution_reward`): both queries go
through :class:`data_pipeline.backends.sqlite.SQLiteExecutor`: one read-only SELECT, a timeout
enforced inside SQLite, at most ``max_rows`` rows. A predicted query that is rejected, fails,
times out, or returns more than ``max_rows`` rows (when the gold result does not) scores 0.0
with its reason logged (logger ``rewards.sql_execution``: timeouts at WARNING, refused
statements and too many rows at INFO, text that is not SQL and other failures at DEBUG, so a
base model's thousands of broken queries stay quiet) and returned in
:attr:`ExecutionScore.reason`, for the trainer to count. Gold results are cached per (database file, gold SQL). A gold query
that *fails* raises :class:`~core.errors.DataError`: seed 000 trained all night on an
execution reward that was silently 0 because the database path was wrong, so a gold query that
cannot run on the given database stops the run instead. A gold query that times out or exceeds
``max_rows`` cannot be judged: that item scores None (not applicable), with a warning; a gold
timeout is not cached, so the next call tries again.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlglot import exp

from data_pipeline.backends.sqlite import MAX_RESULT_BYTES, ExecutionResult, SQLiteExecutor, inspect_statement
from core.errors import ConfigError, DataError
from rewards.answer import completion_text, parse_answer
from rewards.pool import DEFAULT_MEMORY_MB, Outcome, WorkerPool

logger = logging.getLogger(__name__)

SIGNIFICANT_DIGITS = 7
"""Numbers are rounded to this many significant digits before comparison (~1e-6 relative)."""

_INT_EXACT = 10**SIGNIFICANT_DIGITS

MAX_PERMUTATIONS = 120
"""Most column permutations scored per comparison (identity included); 5! = 120."""

Row = tuple[Any, ...]


def normalize_value(value: Any) -> Any:
    """One cell as it is compared: numbers rounded to :data:`SIGNIFICANT_DIGITS` digits.

    Integral results become ``int``; other types pass through unchanged.

    >>> normalize_value(3.0), normalize_value(True), normalize_value(None)
    (3, 1, None)
    >>> normalize_value(0.1 + 0.2) == normalize_value(0.3)
    True
    >>> normalize_value(2.5000001) == normalize_value(2.5)
    True
    >>> normalize_value(2.51) == normalize_value(2.5)
    False
    """
    kind = type(value)
    if kind is str or value is None or kind is bytes:  # the common cells first
        return value
    if kind is int and -_INT_EXACT < value < _INT_EXACT:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if abs(value) < _INT_EXACT:
            return value
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float: compared exactly
            return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or value == 0.0:
            return 0 if value == 0.0 else value
        rounded = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
        return int(rounded) if rounded.is_integer() else rounded
    return value


def normalize_rows(rows: Sequence[Sequence[Any]]) -> list[Row]:
    """Every cell of every row through :func:`normalize_value`, rows as tuples."""
    return [tuple(map(normalize_value, row)) for row in rows]


class PreparedRows:
    """One result made ready for comparison once (a gold result is compared with many predictions).

    Attributes:
        raw: the rows as the database returned them.
        rows: :func:`normalize_rows` of them.
        n_cols: columns (0 for an empty result).
    """

    __slots__ = ("raw", "rows", "n_cols", "_counts", "_cols", "_unordered", "_unordered_counts")

    def __init__(self, raw: Sequence[Sequence[Any]]) -> None:
        self.raw = raw if isinstance(raw, list) else list(raw)
        self.rows = normalize_rows(self.raw)
        self.n_cols = len(self.rows[0]) if self.rows else 0
        self._counts: Counter[Row] | None = None
        self._cols: list[set[Any]] | None = None
        self._unordered: list[Row] | None = None
        self._unordered_counts: Counter[Row] | None = None

    @property
    def counts(self) -> Counter[Row]:
        """The normalised rows as a multiset."""
        if self._counts is None:
            self._counts = Counter(self.rows)
        return self._counts

    @property
    def cols(self) -> list[set[Any]]:
        """Each column's set of normalised values."""
        if self._cols is None:
            self._cols = _columns(self.rows, self.n_cols)
        return self._cols

    @property
    def unordered(self) -> list[Row]:
        """Each row with its cells sorted (the test-suite's quick reject)."""
        if self._unordered is None:
            self._unordered = [tuple(sorted(row, key=_sort_key)) for row in self.rows]
        return self._unordered

    @property
    def unordered_counts(self) -> Counter[Row]:
        if self._unordered_counts is None:
            self._unordered_counts = Counter(self.unordered)
        return self._unordered_counts


def _multiset_f1(pred: Sequence[Row], gold: Sequence[Row], gold_counts: Counter[Row] | None = None) -> float:
    if not pred and not gold:
        return 1.0
    if not pred or not gold:
        return 0.0
    common = sum((Counter(pred) & (gold_counts if gold_counts is not None else Counter(gold))).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _permutations(candidates: list[list[int]]) -> Iterator[tuple[int, ...]]:
    """Injective choices, one candidate column per gold column; identity first, at most MAX_PERMUTATIONS."""
    n = len(candidates)
    identity = tuple(range(n))
    if all(i in c for i, c in enumerate(candidates)):
        yield identity
        tried = 1
    else:
        tried = 0
    for perm in itertools.product(*candidates):
        if tried >= MAX_PERMUTATIONS:
            return
        if perm == identity or len(set(perm)) != n:
            continue
        tried += 1
        yield perm


def _columns(rows: Sequence[Row], n: int) -> list[set[Any]]:
    return [{row[i] for row in rows} for i in range(n)]


def _as_prepared(rows: Sequence[Sequence[Any]] | PreparedRows) -> PreparedRows:
    return rows if isinstance(rows, PreparedRows) else PreparedRows(rows)


def rows_f1(pred_rows: Sequence[Sequence[Any]], gold_rows: Sequence[Sequence[Any]] | PreparedRows) -> float:
    """Soft F1 between two results, rows as multisets, best over column permutations.

    ``precision = matched / len(pred)``, ``recall = matched / len(gold)``, where ``matched`` counts
    rows in the multiset intersection (a duplicated row counts as often as both sides have it).
    Row order is ignored: the reward pays for the right rows; :func:`results_match` judges order.

    Args:
        pred_rows: rows of the predicted query, ``(n_pred, n_cols)``.
        gold_rows: rows of the gold query, ``(n_gold, n_cols)``, or a :class:`PreparedRows` of them
            (the scorer prepares each gold result once).

    Returns:
        A float in ``[0, 1]``; 1.0 for two empty results, 0.0 when the column counts differ.
        Rows equal as returned (``pred_rows == gold_rows``) score 1.0 without normalising.

    >>> gold = [(i,) for i in range(100)]
    >>> rows_f1(gold[:99] + [(-1,)], gold)  # 99 of 100 rows right
    0.99
    >>> rows_f1([(1, "a"), (1, "a")], [(1, "a")])  # a duplicated row is a wrong extra row
    0.6666666666666666
    >>> rows_f1([("a", 1)], [(1, "a")])  # permuted columns
    1.0
    """
    g = _as_prepared(gold_rows)
    if pred_rows == g.raw:  # equal values normalise equally: the fast path of a right answer
        return 1.0
    return _f1_normalised(normalize_rows(pred_rows), g)


def _f1_normalised(pred: list[Row], g: PreparedRows) -> float:
    """:func:`rows_f1` of already normalised predicted rows."""
    gold = g.rows
    if not pred or not gold:
        return _multiset_f1(pred, gold)
    n = g.n_cols
    if len(pred[0]) != n:
        return 0.0
    gold_cols, pred_cols = g.cols, _columns(pred, n)
    candidates = []
    for gc in gold_cols:
        overlap = sorted(((len(gc & pc), j) for j, pc in enumerate(pred_cols) if gc & pc), reverse=True)
        if not overlap:
            return 0.0  # no predicted column shares a value with this gold column: no row can match
        candidates.append([j for _, j in overlap])
    best = 0.0
    for perm in _permutations(candidates):
        permuted = pred if perm == tuple(range(n)) else [tuple(row[j] for j in perm) for row in pred]
        best = max(best, _multiset_f1(permuted, gold, g.counts))
        if best == 1.0:
            break
    return best


def results_match(pred_rows: Sequence[Sequence[Any]], gold_rows: Sequence[Sequence[Any]] | PreparedRows, *,
                  ordered: bool) -> bool:  # fmt: skip
    """Spider test-suite exact match: same rows (as a multiset, or as a list when ``ordered``).

    Args:
        pred_rows: rows of the predicted query.
        gold_rows: rows of the gold query (or a :class:`PreparedRows` of them).
        ordered: compare row order too; pass :func:`gold_is_ordered` of the gold SQL.

    Returns:
        True when some column permutation (constrained as in the module docstring) makes the
        two results equal.

    >>> results_match([(2,), (1,)], [(1,), (2,)], ordered=False)
    True
    >>> results_match([(2,), (1,)], [(1,), (2,)], ordered=True)
    False
    >>> results_match([(1,), (1,)], [(1,)], ordered=False)  # duplicates count
    False
    >>> results_match([], [], ordered=True)
    True
    """
    g = _as_prepared(gold_rows)
    if pred_rows == g.raw:
        return True
    return _match_normalised(normalize_rows(pred_rows), g, ordered)


def _match_normalised(pred: list[Row], g: PreparedRows, ordered: bool) -> bool:
    """:func:`results_match` of already normalised predicted rows."""
    gold = g.rows
    if not pred and not gold:
        return True
    if len(pred) != len(gold):
        return False
    n = g.n_cols
    if len(pred[0]) != n:
        return False
    # quick reject (test-suite ``quick_rej``): compare rows with their cells sorted
    unordered = [tuple(sorted(row, key=_sort_key)) for row in pred]
    if ordered:
        if unordered != g.unordered:
            return False
    elif Counter(unordered) != g.unordered_counts:
        return False
    gold_cols, pred_cols = g.cols, _columns(pred, n)
    candidates = [[j for j, pc in enumerate(pred_cols) if pc == gc] for gc in gold_cols]
    if any(not c for c in candidates):
        return False
    for perm in _permutations(candidates):
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if (permuted == gold) if ordered else (Counter(permuted) == g.counts):
            return True
    return False


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    return (3, repr(value))


def gold_is_ordered(sql: str) -> bool:
    """Whether the result order of ``sql`` is defined: its outermost query has ORDER BY.

    Spider's test-suite evaluator tests ``'order by' in gold.lower()``; that also fires on an
    ORDER BY inside a subquery or a string, which does not fix the order of the output. We read
    the gate's parse tree (SQLite dialect, :func:`~data_pipeline.backends.sqlite.inspect_statement`)
    and fall back to the string test only when it did not parse.

    >>> gold_is_ordered("SELECT name FROM t ORDER BY name")
    True
    >>> gold_is_ordered("SELECT * FROM (SELECT name FROM t ORDER BY name LIMIT 3)")
    False
    >>> gold_is_ordered("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    True
    """
    _, tree = inspect_statement(sql)
    if tree is None:
        return "order by" in " ".join(sql.lower().split())
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    return tree is not None and tree.args.get("order") is not None


# --------------------------------------------------------------------------- running queries


@dataclass(frozen=True)
class ExecutionScore:
    """The execution outcome of one predicted query against its gold query.

    Attributes:
        f1: :func:`rows_f1` in ``[0, 1]``; 0.0 for a query that did not run; None when the item
            cannot be judged (no gold SQL, or a gold result that timed out or was truncated).
        exact: :func:`results_match` with the gold query's ORDER BY rule (execution accuracy).
        reason: ``"match"``, ``"rows differ"`` or why the query scored 0 / None.
        pred: the predicted query's :class:`ExecutionResult`; None when it never ran. Scored in
            a worker process (:meth:`ExecutionScorer.score_batch`) it carries no rows.
    """

    f1: float | None
    exact: bool
    reason: str
    pred: ExecutionResult | None = None


GRACE_S = 0.3
"""Seconds past ``timeout_s`` a worker may take on one item before it is killed (fetching, comparing)."""


@dataclass(frozen=True)
class Limits:
    """The limits a scorer runs queries under (sent to its worker processes)."""

    timeout_s: float
    max_rows: int
    max_bytes: int
    cache_size: int


@dataclass
class _Gold:
    result: ExecutionResult
    ordered: bool
    prepared: PreparedRows | None


class ExecutionScorer:
    """Runs predicted queries, compares them with cached gold results, explains each score.

    Args:
        executor: the :class:`SQLiteExecutor` to run on in this process (one with cached
            connections is made when None; pass your own to share it).
        timeout_s: seconds each query may run (predicted and gold alike).
        max_rows: rows kept per result; more makes a predicted result score 0.
        max_bytes: bytes kept per result (:func:`~data_pipeline.backends.sqlite.result_bytes`);
            more makes a predicted result score 0, like too many rows.
        cache_size: gold results kept (least recently used dropped first).
        workers: worker processes for :meth:`score_batch` and :meth:`map_in_workers`
            (:class:`rewards.pool.WorkerPool`, started on first use); 0 scores in this process.
            With workers every item has a hard deadline of ``timeout_s + GRACE_S`` seconds and
            each worker's memory is capped at ``worker_memory_mb``.
        worker_memory_mb: address-space cap of each worker, MiB.

    Raises:
        ConfigError: ``timeout_s <= 0``, ``max_rows < 1``, ``max_bytes < 1``, ``cache_size < 1``
            or ``workers < 0``.

    Thread-safe in this process: the gold cache has a lock and the executor serialises queries
    per file. Close it (or use ``with``) to stop its workers.
    """

    def __init__(self, executor: SQLiteExecutor | None = None, *, timeout_s: float = 5.0, max_rows: int = 10_000,
                 max_bytes: int = MAX_RESULT_BYTES, cache_size: int = 4096, workers: int = 0,
                 worker_memory_mb: int = DEFAULT_MEMORY_MB):  # fmt: skip
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"must be positive, got {timeout_s}", where="timeout_s")
        if max_rows < 1:
            raise ConfigError(f"must be >= 1, got {max_rows}", where="max_rows")
        if max_bytes < 1:
            raise ConfigError(f"must be >= 1, got {max_bytes}", where="max_bytes")
        if cache_size < 1:
            raise ConfigError(f"must be >= 1, got {cache_size}", where="cache_size")
        if workers < 0:
            raise ConfigError(f"must be >= 0, got {workers}", where="workers")
        self.executor = executor or SQLiteExecutor(timeout_s=timeout_s, max_rows=max_rows, max_bytes=max_bytes)
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.cache_size = cache_size
        self.workers = workers
        self.worker_memory_mb = worker_memory_mb
        self.limits = Limits(timeout_s, max_rows, max_bytes, cache_size)
        self._pool: WorkerPool | None = None
        self._gold: OrderedDict[tuple[str, str], _Gold] = OrderedDict()
        self._db_keys: dict[Any, str] = {}
        self._lock = threading.Lock()
        self.gold_executions = 0
        """Gold queries actually run in this process (cache misses), for tests and benchmarks."""

    # ------------------------------------------------------------------ in this process

    def _run(self, db: str | Path, sql: str) -> ExecutionResult:
        return self.executor.execute(db, sql, timeout_s=self.timeout_s, max_rows=self.max_rows, max_bytes=self.max_bytes)

    def _db_key(self, db: str | Path) -> str:
        key = self._db_keys.get(db)
        if key is None:
            key = self._db_keys[db] = str(Path(db).expanduser().resolve())
        return key

    def gold_result(self, db: str | Path, gold_sql: str) -> ExecutionResult:
        """The gold query's result, run once per (resolved database path, SQL) and cached.

        Raises:
            DataError: the gold query is rejected or fails (wrong database?).
            SchemaError: ``db`` is missing or not a SQLite file.
        """
        return self._gold_entry(db, gold_sql).result

    def _gold_entry(self, db: str | Path, gold_sql: str) -> _Gold:
        """The cached gold result, whether its order counts (:func:`gold_is_ordered`) and its prepared rows."""
        key = (self._db_key(db), gold_sql)
        with self._lock:
            hit = self._gold.get(key)
            if hit is not None:
                self._gold.move_to_end(key)
                return hit
        result = self._run(db, gold_sql)
        if not result.ok and not result.timed_out:
            raise DataError(
                f"the gold SQL does not run on this database ({result.error}); is it the database the data set "
                f"was built from? gold SQL: {gold_sql}",
                where=key[0],
            )
        prepared = PreparedRows(result.rows) if result.ok and not result.truncated and result.rows is not None else None
        entry = _Gold(result, gold_is_ordered(gold_sql), prepared)
        with self._lock:
            self.gold_executions += 1
            if result.timed_out:
                return entry  # maybe a busy machine: try again next time rather than never judge it
            self._gold[key] = entry
            while len(self._gold) > self.cache_size:
                self._gold.popitem(last=False)
        return entry

    def score(self, db: str | Path, pred_sql: str | None, gold_sql: str | None) -> ExecutionScore:
        """Score one predicted query in this process (see the module docstring for every outcome).

        Raises:
            DataError: the gold query fails on ``db``.
            SchemaError: ``db`` is missing or not a SQLite file.
        """
        if gold_sql is None:
            return ExecutionScore(None, False, "no gold SQL")
        g = self._gold_entry(db, gold_sql)
        gold = g.result
        if not gold.ok:
            logger.warning("gold SQL cannot be judged (%s): %s", gold.error, gold_sql)
            return ExecutionScore(None, False, f"gold SQL {gold.error}")
        if gold.truncated:
            what = f"{self.max_rows} rows" if gold.limit != "bytes" else f"{self.max_bytes} bytes"
            logger.warning("gold SQL returns more than %s; item not judged: %s", what, gold_sql)
            return ExecutionScore(None, False, f"gold result has more than {what}")
        if pred_sql is None:
            return ExecutionScore(0.0, False, "no SQL in the completion")
        pred = self._run(db, pred_sql)
        if not pred.ok:
            logger.log(_log_level(pred), "predicted SQL scored 0 (%s): %s", pred.error, pred_sql)
            return ExecutionScore(0.0, False, str(pred.error), pred)
        if pred.truncated:
            if pred.limit == "bytes":
                reason = f"returned more than {self.max_bytes} bytes of rows (gold has {len(gold.rows or [])} rows)"
            else:
                reason = f"returned more than {self.max_rows} rows (gold has {len(gold.rows or [])})"
            logger.info("predicted SQL scored 0 (%s): %s", reason, pred_sql)
            return ExecutionScore(0.0, False, reason, pred)
        pred_rows = pred.rows or []
        assert g.prepared is not None
        if pred_rows == g.prepared.raw:  # fast path: the gold rows themselves
            return ExecutionScore(1.0, True, "match", pred)
        pred_norm = normalize_rows(pred_rows)
        f1 = _f1_normalised(pred_norm, g.prepared)
        exact = _match_normalised(pred_norm, g.prepared, g.ordered)
        if exact:
            reason = "match"
        elif f1 == 1.0:
            reason = "right rows, wrong order"
        else:
            reason = f"rows differ ({len(pred_rows)} returned, {len(g.prepared.rows)} expected)"
        if not exact:
            logger.debug("predicted SQL scored %.3f (%s): %s", f1, reason, pred_sql)
        return ExecutionScore(f1, exact, reason, pred)

    # ------------------------------------------------------------------ in worker processes

    @property
    def pool(self) -> WorkerPool:
        """The worker processes (started on first use; ``workers`` must be >= 1)."""
        if self.workers < 1:
            raise ConfigError("this scorer runs in-process (workers=0)", where="workers")
        if self._pool is None:
            self._pool = WorkerPool(self.workers, memory_mb=self.worker_memory_mb,
                                    preload=("rewards.sql",))  # fmt: skip
        return self._pool

    def map_in_workers(self, job: Any, items: Sequence[tuple[Any, ...]], golds: Sequence[tuple[str | Path, str] | None]
                       ) -> list[Outcome]:  # fmt: skip
        """``job(limits, *item)`` for each item on the workers, each after its gold query ran there.

        ``golds[i]`` is item ``i``'s ``(db, gold_sql)`` (None: no gold). An item whose gold query
        timed out on a worker is not sent (its outcome is ``skipped``); one whose gold query fails
        raises here. ``job`` must be a module-level function taking the :class:`Limits` first.

        Raises:
            DataError: a gold query fails on its database.
            SchemaError: a database is missing or not SQLite.
        """
        keys = [None if g is None else (self._db_key(g[0]), g[1]) for g in golds]
        outcomes = self.pool.map(
            job, [(self.limits, *item) for item in items], budget_s=self.timeout_s + GRACE_S, keys=keys,
            warm=lambda key: (_gold_job, (self.limits, *key)), skip_if=_gold_unusable,
        )  # fmt: skip
        for o in outcomes:
            failed = o.skipped if o.skipped is not None else o
            if failed.error is not None and not isinstance(failed.error, MemoryError):
                raise failed.error
        return outcomes

    def score_batch(self, items: Sequence[tuple[str | Path, str | None, str | None]]) -> list[ExecutionScore]:
        """:meth:`score` of each ``(db, pred_sql, gold_sql)``, in the workers when ``workers >= 1``.

        With workers, queries run in parallel and each has a hard deadline (module docstring of
        :mod:`rewards.pool`); a query stopped there scores 0.0 with reason ``"timed out after
        5 s (worker stopped at the deadline)"``. ``pred`` of a worker's score carries no rows.

        Raises:
            DataError, SchemaError: as :meth:`score`.
        """
        if self.workers < 1:
            return [self.score(db, pred, gold) for db, pred, gold in items]
        out: list[ExecutionScore | None] = [None] * len(items)
        sent = [i for i, (_, _, gold) in enumerate(items) if gold is not None]
        for i, (_, _, gold) in enumerate(items):
            if gold is None:
                out[i] = ExecutionScore(None, False, "no gold SQL")
        outcomes = self.map_in_workers(_score_job, [items[i] for i in sent], [(items[i][0], items[i][2]) for i in sent])
        for i, o in zip(sent, outcomes, strict=True):
            out[i] = score = self.outcome_score(o, items[i][1])
            if o.ok:
                log_worker_score(score, items[i][1])
        return [s for s in out if s is not None]

    def execute(self, db: str | Path, sql: str) -> ExecutionResult:
        """Run one query under this scorer's limits and return its result, rows included.

        With ``workers >= 1`` it runs in a worker process that is killed at ``timeout_s +
        GRACE_S`` seconds, so even a query that SQLite cannot interrupt (one ``instr`` or ``trim``
        call over megabyte strings ran minutes past a 1 s timeout) stops: the result then says
        ``timed_out`` with reason ``"timed out after T s (worker stopped at the deadline)"``.
        With ``workers=0`` it runs in this process (SQLite's own timeout only).

        Raises:
            SchemaError: ``db`` is missing or not a SQLite file.
        """
        if self.workers < 1:
            return self._run(db, sql)
        (o,) = self.pool.map(_execute_job, [(self.limits, db, sql)], budget_s=self.timeout_s + GRACE_S)
        if o.killed:
            reason = f"timed out after {self.timeout_s:g} s (worker stopped at the deadline)"
            logger.warning("query stopped (%s): %s", reason, sql[:300])
            return ExecutionResult(False, None, None, reason, True, o.seconds, False)
        if isinstance(o.error, MemoryError):
            return ExecutionResult(False, None, None, "out of memory", False, o.seconds, False)
        if o.error is not None:
            raise o.error
        return o.value

    def outcome_score(self, o: Outcome, pred_sql: str | None) -> ExecutionScore:
        """The :class:`ExecutionScore` a worker's :class:`~rewards.pool.Outcome` stands for."""
        if o.skipped is not None:
            return ExecutionScore(None, False, f"gold SQL timed out after {self.timeout_s:g} s")
        if o.killed:
            reason = f"timed out after {self.timeout_s:g} s (worker stopped at the deadline)"
            logger.warning("predicted SQL scored 0 (%s): %s", reason, (pred_sql or "")[:300])
            return ExecutionScore(0.0, False, reason, ExecutionResult(False, None, None, reason, True, o.seconds, False))
        if isinstance(o.error, MemoryError):
            logger.info("predicted SQL scored 0 (out of memory): %s", (pred_sql or "")[:300])
            return ExecutionScore(0.0, False, "out of memory", ExecutionResult(False, None, None, "out of memory", False,
                                                                                o.seconds, False))  # fmt: skip
        return o.value

    def start(self, *, wait: bool = False) -> ExecutionScorer:
        """Start the worker processes now, so the first batch does not wait for them (no-op with
        ``workers=0``); ``wait`` blocks until they are ready. Returns self."""
        if self.workers > 0:
            self.pool.start(wait=wait)
        return self

    def close(self) -> None:
        """Close the in-process connections and stop the workers."""
        self.executor.close()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> ExecutionScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_LOCAL: dict[Limits, ExecutionScorer] = {}
"""In a worker process: one in-process scorer per set of limits (its connections and gold cache)."""


def local_scorer(limits: Limits) -> ExecutionScorer:
    """This process's in-process :class:`ExecutionScorer` for ``limits`` (made on first use; in a
    worker its log records are dropped: the parent logs the scores it receives)."""
    scorer = _LOCAL.get(limits)
    if scorer is None:
        logger.disabled = True
        scorer = _LOCAL[limits] = ExecutionScorer(timeout_s=limits.timeout_s, max_rows=limits.max_rows,
                                                  max_bytes=limits.max_bytes, cache_size=limits.cache_size)  # fmt: skip
    return scorer


_GOLD_TIMED_OUT: set[tuple[Limits, str, str]] = set()
"""In a worker: gold queries whose last warm-up timed out (their items are not judged until the next try)."""


def _gold_job(limits: Limits, db_key: str, gold_sql: str) -> tuple[bool, bool]:
    """Worker: run (and cache) a gold query; ``(ok, timed_out)``. Raises DataError/SchemaError as :meth:`ExecutionScorer.gold_result`."""
    key = (limits, str(db_key), gold_sql)
    _GOLD_TIMED_OUT.discard(key)
    result = local_scorer(limits).gold_result(db_key, gold_sql)
    if result.timed_out:
        _GOLD_TIMED_OUT.add(key)
    return result.ok, result.timed_out


def gold_timed_out_here(limits: Limits, db: str | Path, gold_sql: str | None) -> ExecutionScore | None:
    """In a worker: the not-judged score of an item whose gold warm-up just timed out, else None."""
    if gold_sql is not None and (limits, str(local_scorer(limits)._db_key(db)), gold_sql) in _GOLD_TIMED_OUT:
        return ExecutionScore(None, False, f"gold SQL timed out after {limits.timeout_s:g} s")
    return None


def _gold_unusable(o: Outcome) -> bool:
    """Whether a gold warm-up's outcome leaves its items unjudgeable (it failed, timed out or was killed)."""
    return not o.ok or o.value[1]


def _slim(score: ExecutionScore) -> ExecutionScore:
    """The score without the predicted rows (what a worker sends back)."""
    if score.pred is None or score.pred.rows is None:
        return score
    return replace(score, pred=replace(score.pred, rows=None, columns=None))


def _execute_job(limits: Limits, db: str | Path, sql: str) -> ExecutionResult:
    """Worker: :meth:`ExecutionScorer.execute` of one query in this process, rows included."""
    return local_scorer(limits)._run(db, sql)


def _score_job(limits: Limits, db: str | Path, pred_sql: str | None, gold_sql: str) -> ExecutionScore:
    """Worker: :meth:`ExecutionScorer.score` of one item, without the predicted rows."""
    return gold_timed_out_here(limits, db, gold_sql) or _slim(local_scorer(limits).score(db, pred_sql, gold_sql))


def log_worker_score(score: ExecutionScore, pred_sql: str | None) -> None:
    """Log a score that a worker process computed, as :meth:`ExecutionScorer.score` would have
    (workers keep their logs to themselves)."""
    if score.f1 != 0.0:
        return
    if score.pred is not None:
        logger.log(_log_level(score.pred), "predicted SQL scored 0 (%s): %s", score.reason, (pred_sql or "")[:300])
    else:
        logger.debug("predicted SQL scored 0 (%s)", score.reason)


def _log_level(result: ExecutionResult) -> int:
    """WARNING for a timeout (rare, and it costs a whole timeout), INFO for a refused statement
    (a write, ATTACH, PRAGMA, several statements) or a result over a limit, DEBUG for text that
    is not SQL and for errors."""
    error = result.error or ""
    if result.timed_out:
        return logging.WARNING
    if result.ok and result.truncated:
        return logging.INFO
    if error.startswith("rejected") and not error.startswith(("rejected: not valid SQL", "rejected: empty query")):
        return logging.INFO
    return logging.DEBUG


def _per_item(value: str | Path | Sequence[str | Path], n: int, name: str) -> list[str | Path]:
    if isinstance(value, str | Path):
        return [value] * n
    items = list(value)
    if len(items) != n:
        raise ValueError(f"{n} completions but {len(items)} values of {name}")
    return items


def execution_scores(
    completions: Sequence[Any],
    gold_sql: Sequence[str | None],
    db_path: str | Path | Sequence[str | Path],
    *,
    scorer: ExecutionScorer | None = None,
) -> list[ExecutionScore]:
    """:meth:`ExecutionScorer.score` for a batch of completions (SQL read by ``parse_answer``).

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion (None: not applicable).
        db_path: the database, one for all or one per completion.
        scorer: reuse this scorer (and its gold cache); a new one with default limits when None.

    Raises:
        ValueError: lengths differ.
        DataError, SchemaError: as :meth:`ExecutionScorer.score`.
    """
    if len(completions) != len(gold_sql):
        raise ValueError(f"{len(completions)} completions but {len(gold_sql)} gold queries")
    dbs = _per_item(db_path, len(completions), "db_path")
    own = scorer is None
    scorer = scorer or ExecutionScorer()
    try:
        parsed = [parse_answer(completion_text(c)) for c in completions]
        scores = scorer.score_batch([(db, p.sql, gold) for p, gold, db in zip(parsed, gold_sql, dbs, strict=True)])
    finally:
        if own:
            scorer.close()
    out = []
    for p, score in zip(parsed, scores, strict=True):
        if p.sql is None and score.f1 == 0.0:
            score = ExecutionScore(0.0, False, f"no SQL in the completion ({p.reason})")
            logger.debug("predicted SQL scored 0 (%s)", score.reason)
        out.append(score)
    return out


def execution_reward(
    completions: Sequence[Any],
    gold_sql: Sequence[str | None],
    db_path: str | Path | Sequence[str | Path],
    *,
    scorer: ExecutionScorer | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Soft row F1 of each completion's query against its gold query (seed 000 weight: 3.0).

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion; None where there is none.
        db_path: the SQLite file, one for all or one per completion (a data set column).
        scorer: an :class:`ExecutionScorer` to reuse across calls (keeps the gold cache and the
            connections); a fresh one when None.
        **kwargs: ignored (TRL passes prompts and other data set columns).

    Returns:
        One value per completion, shape ``(batch,)``: :attr:`ExecutionScore.f1` (0.0 for a query
        that was rejected, failed, timed out or returned too many rows; None when the item
        cannot be judged).

    Raises:
        ValueError: lengths differ.
        DataError: a gold query fails on the database (wrong database path?).
        SchemaError: the database file is missing or not SQLite.

    >>> import os, sqlite3, tempfile
    >>> db = os.path.join(tempfile.mkdtemp(), "t.sqlite")
    >>> sqlite3.connect(db).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2), (3), (4);").close()
    >>> execution_reward(["<answer>SELECT x FROM t</answer>", "<answer>SELECT x FROM t WHERE x < 4</answer>",
    ...                   "<answer>DROP TABLE t</answer>"], ["SELECT x FROM t"] * 3, db)
    [1.0, 0.8571428571428571, 0.0]
    """
    return [s.f1 for s in execution_scores(completions, gold_sql, db_path, scorer=scorer)]
