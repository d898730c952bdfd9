"""Result comparison shared by the reward and evaluation: soft F1 and Spider's exact-match rule."""

from __future__ import annotations

import time

import pytest

from rewards.sql_execution import gold_is_ordered, normalize_value, results_match, rows_f1

GOLD_100 = [(i, f"row {i}") for i in range(100)]

# (pred, gold, expected F1, why)
F1_CASES = [
    (GOLD_100, GOLD_100, 1.0, "identical"),
    (GOLD_100[:99] + [(-1, "wrong")], GOLD_100, 0.99, "99 of 100 rows right (SPEC section 6)"),
    (GOLD_100[:99], GOLD_100, 2 * 0.99 / 1.99, "one row missing: P 1, R 0.99"),
    (list(reversed(GOLD_100)), GOLD_100, 1.0, "order is ignored by the soft score"),
    ([(1,), (1,), (2,)], [(1,), (2,)], 0.8, "a duplicate is an extra row: P 2/3, R 1"),
    ([(1,), (2,)], [(1,), (1,), (2,)], 0.8, "a missing duplicate: P 1, R 2/3"),
    ([(1,), (1,)], [(1,), (1,)], 1.0, "duplicates on both sides match"),
    ([], [], 1.0, "two empty results (Spider)"),
    ([], [(1,)], 0.0, "empty prediction"),
    ([(1,)], [], 0.0, "rows where none are expected"),
    ([(None,), (1,)], [(None,), (1,)], 1.0, "NULL equals NULL"),
    ([(0,), (1,)], [(None,), (1,)], 0.5, "0 is not NULL"),
    ([("",)], [(None,)], 0.0, "empty string is not NULL"),
    ([(3.0,)], [(3,)], 1.0, "integral float equals int"),
    ([(0.1 + 0.2,)], [(0.3,)], 1.0, "float noise"),
    ([(2.3333333,)], [(7 / 3,)], 1.0, "equal to 7 significant digits"),
    ([(2.33,)], [(7 / 3,)], 0.0, "2.33 is not 7/3"),
    ([(1e12 + 1,)], [(1e12,)], 1.0, "relative tolerance also for large numbers"),
    ([("Berlin",)], [("berlin",)], 0.0, "strings are case-sensitive"),
    ([("a", 1), ("b", 2)], [(1, "a"), (2, "b")], 1.0, "permuted columns"),
    ([("x", 1, "a"), ("y", 2, "b")], [(1, "a", "x"), (2, "b", "y")], 1.0, "three permuted columns"),
    ([(1, "a"), (9, "b")], [("a", 1), ("b", 2)], 0.5, "permuted, one row wrong"),
    ([(1, 1), (2, 2)], [(1,), (2,)], 0.0, "a column too many never matches"),
    ([(1,), (2,)], [(1, 1), (2, 2)], 0.0, "a column too few never matches"),
    ([(1, 2)], [(2, 1)], 1.0, "same values, swapped: a permutation matches"),
]


@pytest.mark.parametrize(("pred", "gold", "want", "why"), F1_CASES, ids=[c[3] for c in F1_CASES])
def test_rows_f1(pred, gold, want, why):
    assert rows_f1(pred, gold) == pytest.approx(want, abs=1e-12), why


# (pred, gold, ordered, expected match, why)
MATCH_CASES = [
    ([(1,), (2,)], [(2,), (1,)], False, True, "no ORDER BY: any order"),
    ([(1,), (2,)], [(2,), (1,)], True, False, "ORDER BY: order matters"),
    ([(2,), (1,)], [(2,), (1,)], True, True, "ORDER BY, same order"),
    ([(1,), (1,), (2,)], [(1,), (2,), (2,)], False, False, "same set, different multiplicities"),
    ([(1,), (1,)], [(1,)], False, False, "a duplicate row too many"),
    ([], [], True, True, "two empty results"),
    ([], [(None,)], False, False, "empty vs one NULL row"),
    ([(None, "a")], [(None, "a")], False, True, "NULLs equal"),
    ([(1.0000001,)], [(1,)], False, True, "float within 1e-6 relative"),
    ([(1.001,)], [(1,)], False, False, "float outside the tolerance"),
    ([("a", 1), ("b", 2)], [(1, "a"), (2, "b")], False, True, "permuted columns (test-suite rule)"),
    ([("a", 1), ("b", 2)], [(1, "a"), (2, "b")], True, True, "permuted columns, order kept"),
    ([("b", 2), ("a", 1)], [(1, "a"), (2, "b")], True, False, "permuted columns, order broken"),
    ([(1, 2), (2, 1)], [(1, 1), (2, 2)], False, False, "same column sets but rows do not pair up"),
    ([(1, "a")], [(1, "a", "x")], False, False, "column count differs"),
]


@pytest.mark.parametrize(("pred", "gold", "ordered", "want", "why"), MATCH_CASES, ids=[c[4] for c in MATCH_CASES])
def test_results_match(pred, gold, ordered, want, why):
    assert results_match(pred, gold, ordered=ordered) is want, why


def test_exact_match_implies_full_f1():
    for pred, gold, ordered, want, _ in MATCH_CASES:
        if want:
            assert rows_f1(pred, gold) == 1.0


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT name FROM t ORDER BY name", True),
        ("select name from t order by name desc limit 3", True),
        ("SELECT name FROM t", False),
        ("SELECT * FROM (SELECT name FROM t ORDER BY name LIMIT 3)", False),  # inner order only
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b)", False),
        ("WITH x AS (SELECT a FROM t ORDER BY a) SELECT a FROM x", False),
        ("WITH x AS (SELECT a FROM t) SELECT a FROM x ORDER BY a", True),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT 'order by' FROM t", False),  # Spider's string test would say True
        ("SELECT (((", False),  # does not parse: string fallback
        ("SELECT ((( ORDER  BY", True),
    ],
)
def test_gold_is_ordered(sql, ordered):
    assert gold_is_ordered(sql) is ordered


def test_normalize_value_types():
    assert normalize_value(None) is None
    assert normalize_value(b"\x00") == b"\x00"
    assert normalize_value("3") == "3"  # text '3' is not the number 3
    assert normalize_value(12345678) == 12345680  # ints beyond 7 digits get the same relative rounding
    assert normalize_value(-0.0) == 0
    assert normalize_value(float("inf")) == float("inf")


def test_permutation_search_is_constrained_and_bounded():
    row = tuple(range(8))
    gold = [row, tuple(v + 10 for v in row)]
    # reversed columns: each gold column overlaps exactly one predicted column, found at once
    assert rows_f1([tuple(reversed(r)) for r in gold], gold) == 1.0
    assert results_match([tuple(reversed(r)) for r in gold], gold, ordered=True)
    # cyclic shifts: every column overlaps every column (8**8 candidates); at most
    # MAX_PERMUTATIONS are scored, so the comparison stays fast
    cyclic = [row[i:] + row[:i] for i in range(8)] * 200
    shifted = [r[3:] + r[:3] for r in cyclic]
    start = time.perf_counter()
    f1 = rows_f1(shifted, cyclic)
    assert time.perf_counter() - start < 2.0
    assert f1 == 1.0  # the rows are the same multiset even without permuting (cyclic closure)
