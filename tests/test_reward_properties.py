"""Property-based tests (hypothesis): any text into the answer parser and every reward function.

Whatever a policy writes (arbitrary unicode with lone surrogates and NULs, SQL-looking token
soup, tags, nesting hundreds deep, megabyte strings), the parser and each reward must return,
never raise, give finite values within their bounds, and do so in bounded time. Issue 14 item 1:
``SELECT`` with 50 brackets made sqlglot raise RecursionError out of the reward and end a GRPO run.

The rewards run in this process (``score_workers = 0``) so hypothesis can try hundreds of
inputs; one property runs the same checks through the worker processes GRPO uses.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards.answer import parse_answer
from rewards.sql import SQLRewardConfig, reward_functions, sql_reward_components, sql_rewards
from rewards.sql_execution import execution_reward
from rewards.sql_format import format_reward
from rewards.sql_ngram import ngram_reward
from rewards.sql_schema import schema_match_reward
from rewards.sql_syntax import syntax_reward

CONFIG = SQLRewardConfig(timeout_s=0.5, max_rows=1000, score_workers=0)
GOLD = "SELECT name FROM customers WHERE city = 'Berlin'"
LIMIT_S = 5.0
"""Most seconds one completion may take through all rewards (a 0.5 s query timeout, a loaded CI runner)."""

# ---------------------------------------------------------------------------- strategies

ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=400)
"""Any code points, lone surrogates and control characters included."""

WORDS = ["SELECT", "FROM", "WHERE", "WITH", "RECURSIVE", "UNION", "ALL", "JOIN", "ON", "AS", "GROUP BY",
         "ORDER BY", "LIMIT", "CASE", "WHEN", "THEN", "END", "NOT", "AND", "OR", "IN", "LIKE", "NULL", "*",
         "(", ")", ",", ";", "'", '"', "`", "[", "]", "-", "+", "~", "||", "=", "<", "--", "/*", "*/",
         "customers", "orders", "name", "city", "id", "'Berlin'", "1", "2.5", "x'00'", "count(*)",
         "zeroblob(10)", "printf('%d', 1)", "DROP", "DELETE", "INSERT", "ATTACH", "PRAGMA", "VACUUM",
         "<answer>", "</answer>", "<reasoning>", "</reasoning>", "```sql", "```", "\n", "\x00", "\u200b",
         "ＳＥＬＥＣＴ", "名字", "客户", "\ud800"]  # fmt: skip
SQL_SOUP = st.lists(st.sampled_from(WORDS), max_size=60).map(" ".join)
"""Token soup that looks like SQL and answer tags."""

OPENERS = ["(", "(SELECT ", "CASE WHEN 1 THEN ", "NOT ", "- ", "abs(", "(SELECT * FROM ", "<answer>", "<reasoning>",
           "```", "1 IN (", "'", '"']  # fmt: skip
DEEP = st.builds(
    lambda opener, n, close, tail: "SELECT " + opener * n + tail + (")" * n if close else ""),
    st.sampled_from(OPENERS), st.integers(0, 400), st.booleans(), st.sampled_from(["1", "x", "", "'a'", "FROM t"]),
)  # fmt: skip
"""Nesting from 0 to 400 levels deep, closed or not."""

HUGE = st.builds(
    lambda unit, n: unit * n,
    st.sampled_from(["a, ", "(", "SELECT ", "<answer>", "</reasoning>", "x", "'", "名", "\u202e", " ", "```"]),
    st.integers(5_000, 400_000),
)
"""Long repetitive strings, up to a few megabytes."""

WRAPS = st.sampled_from([
    lambda s: s,
    lambda s: f"<reasoning>r</reasoning><answer>{s}</answer>",
    lambda s: f"<answer>{s}",
    lambda s: f"```sql\n{s}\n```",
    lambda s: f"<reasoning>{s}</reasoning>",
])  # fmt: skip

COMPLETION = st.one_of(ANY_TEXT, SQL_SOUP, DEEP, HUGE).flatmap(lambda s: WRAPS.map(lambda w: w(s)))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    from conftest import make_tiny_shop

    return make_tiny_shop(tmp_path_factory.mktemp("props") / "shop.sqlite")


@pytest.fixture(scope="module")
def scorer():
    s = CONFIG.make_scorer()
    yield s
    s.close()


def bounded(value: float | None, high: float = 1.0) -> bool:
    return value is None or (isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= high)


def check_components(comps: list[dict], n: int) -> None:
    assert len(comps) == n
    for c in comps:
        for key in ("execution", "format", "syntax", "schema", "ngram", "exact"):
            assert bounded(c[key]), (key, c[key])
        assert c["format"] is not None and c["syntax"] is not None
        assert bounded(c["total"], CONFIG.max_total), c["total"]
        assert isinstance(c["reason"], str) and isinstance(c["answer_reason"], str)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------- the parser


@PROPERTY
@given(text=COMPLETION, require_reasoning=st.booleans())
def test_parser_never_raises_and_is_fast(text, require_reasoning):
    t0 = time.perf_counter()
    got = parse_answer(text, require_reasoning=require_reasoning)
    assert time.perf_counter() - t0 < 1.0
    assert got.sql is None or (isinstance(got.sql, str) and got.sql == got.sql.strip() and got.sql)
    assert isinstance(got.well_formed, bool) and isinstance(got.reason, str)
    assert (got.reason == "ok") == got.well_formed


# ---------------------------------------------------------------------------- every reward


@PROPERTY
@given(text=COMPLETION)
def test_every_reward_function_is_bounded_and_never_raises(text, db, scorer):
    t0 = time.perf_counter()
    comps = sql_reward_components([text], [GOLD], db, CONFIG, scorer)
    check_components(comps, 1)
    assert sql_rewards([text], [GOLD], db, CONFIG, scorer) == [comps[0]["total"]]
    singles = {
        "format": format_reward([text]),
        "syntax": syntax_reward([text]),
        "schema": schema_match_reward([text], [GOLD]),
        "ngram": ngram_reward([text], [GOLD]),
        "execution": execution_reward([text], [GOLD], db, scorer=scorer),
    }
    for name, values in singles.items():
        assert len(values) == 1 and bounded(values[0]), (name, values)
    # the TRL functions reproduce the combined total (a refused statement is 0 in each of them)
    funcs, weights = reward_functions(CONFIG, scorer)
    per = [f(completions=[text], gold_sql=[GOLD], db_path=[str(db)])[0] for f in funcs]
    assert sum(w * (v or 0.0) for w, v in zip(weights, per, strict=True)) == pytest.approx(comps[0]["total"])
    assert time.perf_counter() - t0 < LIMIT_S


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=st.one_of(DEEP, SQL_SOUP, HUGE).map(lambda s: f"<reasoning>r</reasoning><answer>{s}</answer>"))
def test_the_gold_side_is_as_robust(text, db, scorer):
    # a gold query that is garbage is a DataError (wrong data set), never a crash of another kind;
    # a deep or huge one that happens to run is judged like any other
    from core.errors import DataError

    try:
        comps = sql_reward_components(["<answer>SELECT 1</answer>"], [text], db, CONFIG, scorer)
    except DataError as exc:
        assert "gold SQL does not run" in str(exc)
    else:
        check_components(comps, 1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(texts=st.lists(COMPLETION, min_size=1, max_size=6))
def test_the_same_holds_in_worker_processes(texts, db):
    cfg = SQLRewardConfig(timeout_s=0.5, max_rows=1000, score_workers=2)
    with cfg.make_scorer() as pooled:
        t0 = time.perf_counter()
        comps = sql_reward_components(texts, [GOLD] * len(texts), db, cfg, pooled)
        assert time.perf_counter() - t0 < LIMIT_S * len(texts) + 5.0  # worker start included
    check_components(comps, len(texts))
    in_process = sql_reward_components(texts, [GOLD] * len(texts), db, CONFIG)
    for a, b in zip(comps, in_process, strict=True):
        if "timed out" not in a["reason"] + b["reason"] and "memory" not in a["reason"] + b["reason"]:
            assert a["total"] == pytest.approx(b["total"]), (a, b)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + "(" * 50 + "1" + ")" * 50,  # issue 14 item 1, word for word
        "SELECT " + "(" * 50,  # unclosed
        "SELECT " + "NOT " * 500 + "1",
        "SELECT " + "CASE WHEN 1 THEN " * 200 + "1" + " END" * 200,
        "SELECT * FROM " + "(SELECT * FROM " * 100 + "customers" + ")" * 100,
        "SELECT a, " * 300_000 + "b FROM t",  # 2.7 MB
    ],
)
def test_named_parser_bombs_total_zero_quickly(sql, db, scorer):
    t0 = time.perf_counter()
    [got] = sql_reward_components([f"<reasoning>r</reasoning><answer>{sql}</answer>"], [GOLD], db, CONFIG, scorer)
    assert time.perf_counter() - t0 < 1.0  # issue 14 item 10: a 2 MB answer took 17 s and 1.1 GB
    assert got["total"] == 0.0 and got["reason"].startswith("rejected"), got


def test_grpo_scoring_survives_parser_bombs(db):
    # issue 14 item 1: train_grpo.score_completions let the RecursionError end the run; the smoke
    # test and generator.generate score through the same sql_reward_components
    from generator.train_grpo import score_completions

    cfg = SQLRewardConfig(timeout_s=0.5, score_workers=2)
    bombs = ["<reasoning>r</reasoning><answer>SELECT " + "(" * 50 + "1" + ")" * 50 + "</answer>",
             "<reasoning>r</reasoning><answer>SELECT " + "(" * 50 + "</answer>",
             f"<reasoning>r</reasoning><answer>{GOLD}</answer>"]  # fmt: skip
    with cfg.make_scorer() as scorer:
        comps, totals = score_completions(bombs, GOLD, db, cfg, scorer)
    assert totals.shape == (3,) and totals.tolist()[:2] == [0.0, 0.0]
    assert totals[2].item() == pytest.approx(cfg.max_total)
    assert [c["reason"][:9] for c in comps] == ["rejected:", "rejected:", "match"]
