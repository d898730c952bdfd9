"""Execution-guided self-consistency: sample several queries, keep those that run, vote by result.

The field's recipe (OmniSQL: majority vote over 8 samples; SLM-SQL: corrective self-consistency;
+0.4 to +10 points in their reports): draw ``N`` candidate queries, execute each read-only,
drop those that fail or return no rows, and return the one whose *result* most candidates
agree on (rows compared as a multiset after :func:`rewards.sql_execution.normalize_rows`, so
``SELECT a, b`` and a query returning the same rows in another order agree). Ties go to the
earliest candidate, so with the greedy answer first a tie keeps it.

>>> from data_pipeline.backends.sqlite import ExecutionResult
>>> ok = lambda rows: ExecutionResult(True, rows, ["x"], None, False, 0.0, False)
>>> bad = ExecutionResult(False, None, None, "no such column", False, 0.0, False)
>>> vote([ok([(1,)]), bad, ok([(2,)]), ok([(2,)]), ok([])])
2
>>> vote([bad, ok([])]) is None
True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from data_pipeline.backends.sqlite import ExecutionResult
from rewards.sql_execution import normalize_rows


def result_key(rows: Sequence[Sequence[object]]) -> tuple:
    """A hashable key equal for two results with the same rows in any order (a multiset)."""
    return tuple(sorted(normalize_rows(rows), key=repr))


def vote(results: Sequence[ExecutionResult]) -> int | None:
    """Index of the candidate whose result most candidates share (module docstring), or None
    when no candidate ran and returned rows.

    Args:
        results: one execution result per candidate, in candidate order (greedy first).
    """
    keys: list[tuple | None] = []
    for r in results:
        keys.append(result_key(r.rows) if r.ok and r.rows else None)
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(i for i, k in enumerate(keys) if k is not None and counts[k] == best)
