"""A hostile-input suite: 50 completions that try to write, escape, exhaust or confuse the scorer.

Each completion goes through the path GRPO uses (``SQLRewardConfig.make_scorer()``: two worker
processes, a 0.5 s timeout) one at a time, and for each one:

- nothing raises;
- a statement the gate refuses (a write, an escape, a parser bomb) totals exactly 0;
- the database file is byte-identical and no file appeared beside it (or where an ``ATTACH`` /
  ``VACUUM INTO`` / ``writefile`` points);
- the call returns within ``timeout + 0.5`` seconds;
- memory stays bounded: this process grows by less than 64 MiB, each worker's address space is
  capped (768 MiB here: a 2 GB row fails with "out of memory") and no worker holds more than
  256 MiB once the case is done.

MongoDB stages (``$out``, ``$merge``, server-side JavaScript, write commands, a runaway
``$lookup``) are the last cases; they need the wire-protocol server (tests/mongo_server.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest
from helpers import make_case_dbs, sha256_file

from data_pipeline.backends.sqlite import gate_verdict
from rewards.answer import parse_answer, refused_outright
from rewards.sql import SQLRewardConfig, sql_reward_components

TIMEOUT_S = 0.5
CONFIG = SQLRewardConfig(timeout_s=TIMEOUT_S, max_rows=1000, score_workers=2, worker_memory_mb=768)
GOLD = "SELECT name FROM customers WHERE city = 'Berlin'"
EVIL = "/tmp/route2sql-hostile"
"""Prefix of every file a hostile statement names; none may exist afterwards."""

BIG_CROSS = ", ".join(f"customers c{i}" for i in range(12))  # 3003^12 rows on the big shop

# (name, database, completion text or SQL, refused by the gate, what it tries)
CASES: list[tuple[str, str, str, bool, str]] = [
    # ---- writes and schema changes
    ("drop", "shop", "DROP TABLE customers", True, "a write"),
    ("delete", "shop", "DELETE FROM customers", True, "a write"),
    ("update", "shop", "UPDATE customers SET city = 'x'", True, "a write"),
    ("insert", "shop", "INSERT INTO customers VALUES (9, 'Mallory', 'Berlin')", True, "a write"),
    ("replace", "shop", "REPLACE INTO categories VALUES (1, 'x')", True, "a write"),
    ("create", "shop", "CREATE TABLE evil (x)", True, "a schema change"),
    ("create_temp_as", "shop", "CREATE TEMP TABLE t AS SELECT * FROM customers", True, "a temp table"),
    ("alter", "shop", "ALTER TABLE customers ADD COLUMN evil", True, "a schema change"),
    ("delete_behind_cte", "shop", "WITH x AS (SELECT 1) DELETE FROM customers", True, "a write behind WITH"),
    ("broken_delete", "shop", "DELETE FROM customers WHERE", True, "a write that does not parse"),
    ("transaction", "shop", "BEGIN; DELETE FROM customers; COMMIT", True, "a transaction"),
    # ---- escapes: other files, settings, code
    ("attach", "shop", f"ATTACH DATABASE '{EVIL}-attach.sqlite' AS evil", True, "a new file"),
    ("detach", "shop", "DETACH DATABASE main", True, "detach"),
    ("pragma_schema", "shop", "PRAGMA writable_schema = ON", True, "a pragma"),
    ("pragma_wal", "shop", "PRAGMA journal_mode = WAL", True, "a -wal file beside the database"),
    ("vacuum", "shop", "VACUUM", True, "rewrites the file"),
    ("vacuum_into", "shop", f"VACUUM INTO '{EVIL}-copy.sqlite'", True, "a copy elsewhere"),
    ("reindex", "shop", "REINDEX", True, "rewrites indexes"),
    ("load_extension", "shop", f"SELECT load_extension('{EVIL}.so')", True, "native code"),
    ("writefile", "shop", f"SELECT writefile('{EVIL}-out.txt', name) FROM customers", True, "a file write"),
    ("readfile", "shop", "SELECT readfile('/etc/passwd')", True, "a file read"),
    ("smuggled_second", "shop", "SELECT name FROM customers WHERE city = 'Berlin'; DROP TABLE customers", True, "two statements"),
    ("comment_smuggle", "shop", "SELECT 1 -- harmless\n; ATTACH 'x' AS y", True, "a statement after a comment"),
    ("nul_smuggle", "shop", "SELECT 1\x00; DROP TABLE customers", True, "a NUL byte hiding a statement"),
    ("printf_bomb", "shop", "SELECT printf('%.*c', 2000000000, 'x')", True, "an uninterruptible format"),
    ("pragma_function", "shop", "SELECT * FROM pragma_table_info('customers')", False, "a pragma as a table"),
    ("schema_read", "shop", "SELECT sql FROM sqlite_master", False, "reads the schema (allowed: read-only)"),
    # ---- parser bombs (issue 14 items 1 and 10)
    ("parens_50", "shop", "SELECT " + "(" * 50 + "1" + ")" * 50, True, "RecursionError in sqlglot"),
    ("parens_unclosed", "shop", "SELECT " + "(" * 500, True, "RecursionError in sqlglot"),
    ("not_chain", "shop", "SELECT " + "NOT " * 1000 + "1", True, "unary recursion"),
    ("case_nest", "shop", "SELECT " + "CASE WHEN 1 THEN " * 100 + "1" + " END" * 100, True, "CASE recursion"),
    ("subquery_nest", "shop", "SELECT * FROM " + "(SELECT * FROM " * 60 + "customers" + ")" * 60, True, "subqueries"),
    ("too_long", "shop", "SELECT " + "1 + " * 6000 + "1", True, "over 20,000 characters"),
    ("two_megabytes", "shop", "SELECT a, " * 230_000 + "b FROM customers", True, "2 MB answer: 17 s and 1.1 GB before"),
    ("tag_bomb", "shop", "RAW:" + "<answer>" * 20_000, False, "quadratic tag matching"),
    # ---- resource bombs
    ("zeroblob_rows", "shop", "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 10000) "
     "SELECT zeroblob(9999999) FROM r", False, "4 GB of rows (issue 14 item 2)"),
    ("zeroblob_columns", "shop", "SELECT " + ", ".join(["zeroblob(9999999)"] * 200), False, "2 GB in one row"),
    ("randomblob_columns", "shop", "SELECT " + ", ".join(["randomblob(9999999)"] * 60), False, "uninterruptible calls"),
    ("instr_bomb", "shop", "SELECT instr(hex(zeroblob(2000000)), hex(zeroblob(100000)) || '1')", False,
     "one uninterruptible call for 7.7 s"),
    ("like_bomb", "shop", "SELECT hex(zeroblob(4000000)) LIKE '%' || hex(zeroblob(49)) || '1'", False, "pattern x text"),
    ("recursive_forever", "shop", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
     False, "an endless CTE"),
    ("cartesian_count", "big_shop", 'SELECT count(*) FROM customers, orders, "order items"', False, "2.7e10 rows"),
    ("cartesian_sort", "big_shop", f"SELECT * FROM {BIG_CROSS} ORDER BY random() LIMIT 1", False, "a sort that spills"),
    ("group_concat", "big_shop", "SELECT group_concat(a.name || b.name) FROM customers a, customers b", False,
     "a string over the length limit"),
    ("replace_grow", "shop", "SELECT replace(hex(zeroblob(4000000)), '0', '00')", False, "a string over the limit"),
    # ---- unicode tricks
    ("fullwidth_drop", "shop", "ＤＲＯＰ ＴＡＢＬＥ customers", False, "fullwidth letters"),
    ("zero_width_drop", "shop", "DR\u200bOP TABLE customers", False, "a zero-width space inside DROP: not SQL at all"),
    ("cyrillic_select", "shop", "SЕLECT name FROM customers", False, "a Cyrillic Е in SELECT"),
    ("rtl_override", "shop", "SELECT name FROM customers WHERE city = '\u202enilreB'", False, "right-to-left override"),
    ("lone_surrogate", "shop", "SELECT '\ud800' FROM customers", False, "not encodable as UTF-8"),
    ("emoji_table", "shop", 'SELECT * FROM "😀"', False, "an emoji identifier"),
]  # fmt: skip


def completion_of(text: str) -> str:
    """The completion: ``RAW:`` text as it is, anything else as the SQL of a well-formed answer."""
    if text.startswith("RAW:"):
        return text[4:]
    return f"<reasoning>try it</reasoning><answer>{text}</answer>"


def evil_files() -> list[str]:
    folder = Path(EVIL).parent
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(Path(EVIL).name))


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    return make_case_dbs(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def pooled():
    scorer = CONFIG.make_scorer()
    yield scorer
    scorer.close()


def test_the_suite_is_large_and_varied():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)
    refused = [c for c in CASES if c[3]]
    assert len(refused) >= 25 and len(CASES) - len(refused) >= 15
    for name, _, text, is_refused, _ in CASES:  # the table says what the gate does
        sql = parse_answer(completion_of(text)).sql
        assert (refused_outright(sql) is not None) == is_refused, (name, sql and gate_verdict(sql))


@pytest.mark.parametrize(("name", "db_name", "text", "is_refused", "why"), CASES, ids=[c[0] for c in CASES])
def test_hostile_completion(name, db_name, text, is_refused, why, dbs, pooled):
    db = dbs[db_name]
    # warm both workers' gold caches first, so each case's time is its own query's
    sql_reward_components(["<answer>SELECT 1</answer>"] * 4, [GOLD] * 4, db, CONFIG, pooled)
    before, listing, evil = sha256_file(db), sorted(os.listdir(db.parent)), evil_files()
    me = psutil.Process()
    rss0 = me.memory_info().rss
    t0 = time.perf_counter()
    [got] = sql_reward_components([completion_of(text)], [GOLD], db, CONFIG, pooled)
    wall = time.perf_counter() - t0
    assert wall <= TIMEOUT_S + 0.5, (why, wall, got["reason"])
    assert got["total"] >= 0.0
    if is_refused:
        assert got["total"] == 0.0, (why, got)
        assert all(got[k] in (0.0, None) for k in ("execution", "format", "syntax", "schema", "ngram")), got
    assert got["execution"] in (0.0, None) or name in ("schema_read", "pragma_function"), got  # never the gold rows
    assert sha256_file(db) == before, why
    assert sorted(os.listdir(db.parent)) == listing, why  # no -wal, -shm, -journal or copy beside it
    assert evil_files() == evil, why
    assert me.memory_info().rss - rss0 < 64 << 20, why
    for pid in pooled.pool.pids:
        assert psutil.Process(pid).memory_info().rss < 256 << 20, why


# ---------------------------------------------------------------------------- MongoDB stages

MONGO_CASES = [
    ("out", {"aggregate": "customers", "pipeline": [{"$out": "stolen"}]}),
    ("merge", {"aggregate": "customers", "pipeline": [{"$merge": {"into": "orders"}}]}),
    ("out_in_lookup", {"aggregate": "customers", "pipeline": [{"$lookup": {"from": "orders", "pipeline": [{"$out": "x"}], "as": "o"}}]}),
    ("merge_in_facet", {"aggregate": "customers", "pipeline": [{"$facet": {"a": [{"$merge": "x"}]}}]}),
    ("out_in_union", {"aggregate": "customers", "pipeline": [{"$unionWith": {"coll": "orders", "pipeline": [{"$out": "x"}]}}]}),
    ("where_js", {"aggregate": "customers", "pipeline": [{"$match": {"$where": "while (true) {}"}}]}),
    ("function_js", {"aggregate": "customers", "pipeline": [{"$project": {"x": {"$function": {"body": "function() {}", "args": [], "lang": "js"}}}}]}),
    ("accumulator_js", {"aggregate": "customers", "pipeline": [{"$group": {"_id": 1, "x": {"$accumulator": {}}}}]}),
    ("insert", {"insert": "customers", "documents": [{"name": "Mallory"}]}),
    ("delete", {"delete": "customers", "deletes": [{"q": {}, "limit": 0}]}),
    ("drop", {"drop": "customers"}),
    ("current_op", {"aggregate": "customers", "pipeline": [{"$currentOp": {}}]}),
    ("runaway_lookup", {"aggregate": "customers", "pipeline": [
        {"$lookup": {"from": "customers", "pipeline": [{"$lookup": {"from": "customers", "pipeline": [
            {"$lookup": {"from": "orders", "let": {"n": "$name"}, "pipeline": [{"$match": {"$expr": {"$gte": [{"$strLenCP": "$$n"}, 0]}}}], "as": "o"}}],
            "as": "c2"}}], "as": "c1"}}, {"$count": "n"}]}),
]  # fmt: skip


@pytest.fixture(scope="module")
def mongo_shop(tmp_path_factory):
    from conftest import make_tiny_shop
    from mongo_server import running_server

    from data_pipeline.mongo_load import load_sqlite_into_mongo
    from core.schema import introspect

    for srv in running_server():
        path = make_tiny_shop(tmp_path_factory.mktemp("mongo-hostile") / "shop.sqlite")
        with srv.client() as client:
            db = client["hostile_shop"]
            load_sqlite_into_mongo(path, db, introspect(path, name="hostile_shop"), replace=True)
            # a bigger customers collection, so the nested $lookup runs for minutes when not stopped
            db["customers"].insert_many([{"id": 100 + i, "name": f"c{i}", "city": "x"} for i in range(300)])
            yield db


@pytest.mark.mongo
@pytest.mark.parametrize(("name", "query"), MONGO_CASES, ids=[c[0] for c in MONGO_CASES])
def test_hostile_mongodb_query(name, query, mongo_shop):
    from data_pipeline.backends.mongo_pipeline import execute_pipeline

    db = mongo_shop
    names = sorted(db.list_collection_names())
    counts = {c: db[c].count_documents({}) for c in names}
    t0 = time.perf_counter()
    got = execute_pipeline(db, query, timeout_s=TIMEOUT_S)
    assert time.perf_counter() - t0 <= TIMEOUT_S + 0.5, got.error
    assert not got.ok, got
    if name == "runaway_lookup":
        assert got.timed_out
    else:
        assert got.error.startswith("rejected: "), got.error
    assert sorted(db.list_collection_names()) == names
    assert {c: db[c].count_documents({}) for c in names} == counts
