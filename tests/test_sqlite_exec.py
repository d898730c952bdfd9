"""Read-only execution of generated SQL: refusals, the hard timeout, row limits, odd identifiers."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import data_pipeline.backends.sqlite as sqlite_backend
from data_pipeline.backends.sqlite import (
    ExecutionResult,
    SQLiteExecutor,
    check_statement,
    connect_readonly,
    execute_readonly,
    read_only_authorizer,
)
from core.errors import ConfigError, QueryRejected, SchemaError

# row counts chosen so the cartesian product of the three largest tables (1200 x 600 x 300 =
# 216 million rows) takes far longer than any timeout used here
TABLE_ROWS = {"Order Details": 1200, "orders": 600, "customers": 300, "products": 40, "categories": 8}


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("exec") / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category_id INTEGER REFERENCES categories(id));
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id));
        CREATE TABLE "Order Details" ("Order ID" INTEGER REFERENCES orders(id),
            "Product ID" INTEGER REFERENCES products(id), "Unit Price" REAL, Quantity INTEGER);
        """
    )
    conn.executemany("INSERT INTO categories VALUES (?, ?)", [(i, f"cat {i}") for i in range(1, 9)])
    conn.executemany("INSERT INTO products VALUES (?, ?, ?)", [(i, f"product {i}", 1 + i % 8) for i in range(1, 41)])
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i, f"customer {i}", f"city {i % 7}") for i in range(1, 301)])
    conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, 1 + i % 300) for i in range(1, 601)])
    conn.executemany(
        'INSERT INTO "Order Details" VALUES (?, ?, ?, ?)',
        [(1 + i % 600, 1 + i % 40, 2.5, 1 + i % 4) for i in range(1200)],
    )
    conn.commit()
    conn.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def largest_tables(db: Path, n: int) -> list[str]:
    conn = connect_readonly(db)
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in names}
    conn.close()
    return sorted(counts, key=counts.get, reverse=True)[:n]


# --------------------------------------------------------------------------- the hard timeout


@pytest.mark.parametrize("via", ["path", "executor"])
def test_runaway_cartesian_product_is_stopped_inside_sqlite(big_db: Path, via: str) -> None:
    tables = largest_tables(big_db, 3)
    assert tables == ["Order Details", "orders", "customers"]
    sql = "SELECT count(*) FROM " + ", ".join(f'"{t}"' for t in tables)
    threads_before = threading.active_count()
    timeout = 0.5
    with SQLiteExecutor() as ex:
        t0 = time.perf_counter()
        if via == "path":
            res = execute_readonly(big_db, sql, timeout_s=timeout)
        else:
            res = ex.execute(big_db, sql, timeout_s=timeout)
        wall = time.perf_counter() - t0
        assert res.timed_out and not res.ok and res.rows is None
        assert res.error == "timed out after 0.5 s"
        assert timeout <= wall <= timeout + 0.2, wall
        assert res.elapsed_s <= wall
        # nothing keeps running: no extra thread, and the process stops using CPU
        assert threading.active_count() == threads_before
        cpu0 = time.process_time()
        time.sleep(0.3)
        assert time.process_time() - cpu0 < 0.1
        if via == "executor":  # the cached connection still works after an abort
            assert ex.execute(big_db, "SELECT count(*) FROM orders").rows == [(600,)]


def test_the_runaway_query_is_not_just_slow_to_start(big_db: Path) -> None:
    # a longer limit is hit as well: the product really runs for seconds when not stopped
    res = execute_readonly(big_db, 'SELECT count(*) FROM "Order Details", orders, customers', timeout_s=1.2)
    assert res.timed_out and 1.2 <= res.elapsed_s < 1.5


def test_infinite_recursive_cte_times_out(big_db: Path) -> None:
    sql = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r"
    res = execute_readonly(big_db, sql, timeout_s=0.3)
    assert res.timed_out and res.elapsed_s < 0.5


# --------------------------------------------------------------------------- refusals

REFUSED = [
    # (sql, reason it must give)
    ("DROP TABLE orders", "not DROP"),
    ("ATTACH DATABASE 'other.sqlite' AS other", "not ATTACH"),
    ("PRAGMA writable_schema = ON", "not PRAGMA"),
    ("PRAGMA writable_schema=1", "not PRAGMA"),
    ("SELECT * FROM orders; DROP TABLE orders", "expected one statement, got 2"),
    ("SELECT 1; SELECT 2", "expected one statement, got 2"),
    ("please show me every customer in Berlin", "not valid SQL"),
    ("hello world", "not a bare expression"),
    ("", "empty query"),
    ("   \n ", "empty query"),
    (";", "empty query"),
    ("WITH x AS (SELECT 1) DELETE FROM orders", "not DELETE"),
    ("WITH x AS (SELECT 1) UPDATE orders SET customer_id = 1", "not UPDATE"),
    ("WITH x AS (SELECT 1) INSERT INTO orders SELECT * FROM x", "not INSERT"),
    ("INSERT INTO categories VALUES (99, 'x')", "not INSERT"),
    ("REPLACE INTO categories VALUES (1, 'x')", "not REPLACE"),
    ("UPDATE customers SET city = 'x'", "not UPDATE"),
    ("DELETE FROM customers", "not DELETE"),
    ("CREATE TABLE t (x)", "not CREATE"),
    ("CREATE TEMP VIEW v AS SELECT 1", "not CREATE"),
    ("VACUUM INTO 'copy.sqlite'", "not VACUUM"),
    ("BEGIN", "not BEGIN"),
    ("SELECT load_extension('/tmp/evil.so')", "function load_extension() is not allowed"),
    ("SELECT writefile('out.txt', name) FROM customers", "function writefile() is not allowed"),
    ("SELECT * FROM customers WHERE id IN (SELECT LOAD_EXTENSION('x'))", "function load_extension() is not allowed"),
    ("VALUES (1)", "not VALUES"),
]


@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_refused_statements_never_touch_the_database(big_db: Path, sql: str, reason: str) -> None:
    before = sha256(big_db)
    files_before = sorted(big_db.parent.iterdir())
    with pytest.raises(QueryRejected, match=reason.replace("(", r"\(").replace(")", r"\)")):
        check_statement(sql)
    res = execute_readonly(big_db, sql)
    assert not res.ok and not res.timed_out and res.rows is None
    assert res.error is not None and res.error.startswith("rejected: ") and reason in res.error
    assert sha256(big_db) == before
    assert sorted(big_db.parent.iterdir()) == files_before  # no attached or vacuumed copy appeared


def test_authorizer_blocks_writes_even_on_a_writable_connection(big_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(big_db.read_bytes())
    conn = sqlite3.connect(copy)
    conn.set_authorizer(read_only_authorizer)
    for sql in ["DELETE FROM orders", "DROP TABLE orders", f"ATTACH '{tmp_path / 'x.sqlite'}' AS x",
                "PRAGMA writable_schema = ON", "CREATE TEMP TABLE t (x)", "SELECT load_extension('x')"]:  # fmt: skip
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            conn.execute(sql)
    assert conn.execute("SELECT count(*) FROM orders").fetchone() == (600,)
    conn.close()
    assert sha256(copy) == sha256(big_db) and not (tmp_path / "x.sqlite").exists()


def test_a_writable_connection_passed_in_is_still_read_only_during_the_call(big_db: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(big_db.read_bytes())
    conn = sqlite3.connect(copy)
    res = execute_readonly(conn, "SELECT count(*) FROM customers")
    assert res.ok and res.rows == [(300,)]
    conn.execute("DELETE FROM categories")  # the guard is gone after the call: the caller's connection is theirs
    assert conn.execute("SELECT count(*) FROM categories").fetchone() == (0,)
    conn.close()


def test_check_statement_returns_normalised_sql() -> None:
    assert check_statement("select  name from [Order Details] where x = 1 ;") == 'SELECT name FROM "Order Details" WHERE x = 1'
    assert check_statement("with t as (select 1 as a) select a from t union select 2") == (
        "WITH t AS (SELECT 1 AS a) SELECT a FROM t UNION SELECT 2"
    )


# --------------------------------------------------------------------------- results


def test_max_rows_truncates_and_says_so(big_db: Path) -> None:
    res = execute_readonly(big_db, "SELECT id FROM orders ORDER BY id", max_rows=10)
    assert res.ok and res.truncated and res.rows == [(i,) for i in range(1, 11)]
    exact = execute_readonly(big_db, "SELECT id FROM orders ORDER BY id LIMIT 10", max_rows=10)
    assert exact.ok and not exact.truncated and len(exact.rows) == 10
    none = execute_readonly(big_db, "SELECT id FROM orders", max_rows=0)
    assert none.ok and none.truncated and none.rows == []


def test_identifiers_with_spaces(big_db: Path) -> None:
    sql = """
        SELECT c.name, sum(od."Unit Price" * od.Quantity) AS total
        FROM customers AS c
        JOIN orders AS o ON o.customer_id = c.id
        JOIN "Order Details" AS od ON od."Order ID" = o.id
        WHERE c.id = 2
        GROUP BY c.name
    """
    res = execute_readonly(big_db, sql)
    # customer 2 owns orders 1 and 301; order k gets detail rows i with 1 + i % 600 == k, quantity 1 + i % 4
    qty = sum(1 + i % 4 for i in range(1200) if 1 + i % 600 in (1, 301))
    assert res == ExecutionResult(True, [("customer 2", 2.5 * qty)], ["name", "total"], None, False, res.elapsed_s, False)
    bracket = execute_readonly(big_db, 'SELECT count(*) FROM [Order Details] WHERE "Product ID" = 3')
    assert bracket.rows == [(30,)]


def test_query_errors_are_results_not_exceptions(big_db: Path) -> None:
    res = execute_readonly(big_db, "SELECT nope FROM orders")
    assert not res.ok and not res.timed_out and res.error == "OperationalError: no such column: nope"
    res = execute_readonly(big_db, "SELECT * FROM no_such_table")
    assert not res.ok and "no such table: no_such_table" in res.error
    res = execute_readonly(big_db, "SELECT zeroblob(500000000)")  # over MAX_VALUE_BYTES: fails fast
    assert not res.ok and "too big" in res.error


# --------------------------------------------------------------------------- connections


def test_connect_readonly_refuses_writes_and_bad_files(big_db: Path, tmp_path: Path) -> None:
    conn = connect_readonly(big_db)
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        conn.execute("DELETE FROM orders")
    conn.close()
    with pytest.raises(SchemaError, match="database file not found") as err:
        connect_readonly(tmp_path / "missing.sqlite")
    assert err.value.where == str(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()  # mode=ro never creates the file
    text = tmp_path / "notes.sqlite"
    text.write_text("these are not the tables you are looking for\n" * 100)
    with pytest.raises(SchemaError, match="not a SQLite database"):
        connect_readonly(text)
    with pytest.raises(SchemaError, match="not a file"):
        connect_readonly(tmp_path)


def test_odd_characters_in_the_path(big_db: Path, tmp_path: Path) -> None:
    odd = tmp_path / "my db #1?.sqlite"
    odd.write_bytes(big_db.read_bytes())
    assert execute_readonly(odd, "SELECT count(*) FROM categories").rows == [(8,)]


def test_execute_readonly_raises_for_a_missing_database(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="not found"):
        execute_readonly(tmp_path / "gone.sqlite", "SELECT 1")
    with pytest.raises(SchemaError, match="not found"):
        SQLiteExecutor().execute(tmp_path / "gone.sqlite", "SELECT 1")


def test_bad_limits_are_config_errors(big_db: Path) -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        execute_readonly(big_db, "SELECT 1", timeout_s=0)
    with pytest.raises(ConfigError, match="max_rows"):
        execute_readonly(big_db, "SELECT 1", max_rows=-1)


def test_executor_reuses_one_connection_per_file_across_threads(big_db: Path, tmp_path: Path, monkeypatch) -> None:
    other = tmp_path / "other.sqlite"
    other.write_bytes(big_db.read_bytes())
    opened: list[Path] = []
    real = sqlite_backend.connect_readonly

    def counting(path, **kw):
        opened.append(Path(path))
        return real(path, **kw)

    monkeypatch.setattr(sqlite_backend, "connect_readonly", counting)
    results: list[ExecutionResult] = []
    with SQLiteExecutor(max_rows=5) as ex:

        def work() -> None:
            for _ in range(5):
                results.append(ex.execute(big_db, "SELECT id FROM customers ORDER BY id"))
                results.append(ex.execute(str(other), "SELECT count(*) FROM products"))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(opened) == sorted([big_db.resolve(), other.resolve()])
    assert len(results) == 40 and all(r.ok for r in results)
    assert sum(r.rows == [(1,), (2,), (3,), (4,), (5,)] and r.truncated for r in results) == 20
    assert sum(r.rows == [(40,)] for r in results) == 20


def test_the_gate_refuses_unparsed_commands_without_sqlglot_log_lines(caplog):
    import logging

    caplog.set_level(logging.WARNING)
    for sql in ("SHOW TABLES", "EXPLAIN QUERY PLAN SELECT 1"):
        with pytest.raises(QueryRejected, match="only SELECT queries may run"):
            check_statement(sql)
    assert [r for r in caplog.records if r.name.startswith("sqlglot")] == []
    import sqlglot

    sqlglot.parse("SHOW TABLES", read="sqlite")  # outside the gate sqlglot still speaks
    assert any("unsupported syntax" in r.getMessage() for r in caplog.records)
