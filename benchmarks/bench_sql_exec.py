"""How much the guards of ``data_pipeline.backends.sqlite`` cost, and how fast a runaway query stops.

Runs the same ~50 SELECT queries (built from the schema: scans, counts, filters, group-bys and
one query per foreign-key join) through raw ``sqlite3``, :func:`execute_readonly` (a fresh
read-only connection per call), :class:`SQLiteExecutor` (one cached connection) and the GRPO
execution reward (:class:`rewards.sql_execution.ExecutionScorer`: the gate's cached verdict,
run, soft F1 and exact match against the cached gold result), once with each query as its own
gold ("right answers") and once against the next query's gold ("wrong answers", no fast path).
Then batch scoring (:meth:`ExecutionScorer.score_batch`, GRPO-sized batches) in 1 and 2 worker
processes, a batch holding one runaway query, and how long a cartesian product of the three
largest tables runs past its timeout. Every rate is also given as a ratio to raw ``sqlite3``
measured in the same run; the machine and its load average (before and after) are printed.

    python benchmarks/bench_sql_exec.py            # Northwind if it can be built, else a generated DB
    python benchmarks/bench_sql_exec.py --db some.sqlite --rounds 50
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine  # noqa: E402

from data_pipeline.backends.sqlite import SQLiteExecutor, connect_readonly, execute_readonly
from data_pipeline.cli import parse, run_main
from data_pipeline.errors import Route2SQLError
from rewards.sql_execution import ExecutionScorer


@dataclass
class Args:
    """Options of the SQL execution benchmark."""

    db: str | None = None
    """SQLite file to use; default: the Northwind sample, else a generated shop database."""
    rounds: int = 20
    """Times the whole query set is run per method."""
    timeouts: tuple[float, ...] = (0.1, 0.5, 1.0)
    """Timeouts (seconds) at which the runaway query's abort latency is measured."""
    repeats: int = 3
    """Runaway-query runs per timeout."""
    batch_size: int = 64
    """Items per score_batch call (a GRPO step's completions)."""
    workers: tuple[int, ...] = (1, 2)
    """Worker-process counts whose batch throughput is measured."""


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def generated_db(folder: Path) -> Path:
    """A shop database with 5 tables and 4 foreign keys (2,000 order lines)."""
    path = folder / "bench_shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price REAL, category_id INTEGER REFERENCES categories(id));
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), day TEXT);
        CREATE TABLE "Order Details" (order_id INTEGER REFERENCES orders(id), product_id INTEGER REFERENCES products(id), qty INTEGER);
        """
    )
    conn.executemany("INSERT INTO categories VALUES (?, ?)", [(i, f"cat {i}") for i in range(1, 9)])
    conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", [(i, f"p{i}", i * 1.5, 1 + i % 8) for i in range(1, 81)])
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i, f"c{i}", f"city {i % 9}") for i in range(1, 101)])
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, 1 + i % 100, f"2024-01-{1 + i % 28:02d}") for i in range(1, 801)])
    conn.executemany('INSERT INTO "Order Details" VALUES (?, ?, ?)', [(1 + i % 800, 1 + i % 80, 1 + i % 5) for i in range(2000)])
    conn.commit()
    conn.close()
    return path


def pick_db(args: Args, folder: Path) -> tuple[Path, str]:
    if args.db:
        return Path(args.db), args.db
    try:
        from data_pipeline.datasets import load_sample

        return load_sample("northwind"), "Northwind (sample)"
    except (ImportError, Route2SQLError) as exc:
        print(f"(Northwind unavailable: {exc}; using a generated database)")
        return generated_db(folder), "generated shop"


def build_queries(db: Path, limit: int = 50) -> tuple[list[str], list[str]]:
    """~``limit`` read-only queries over ``db`` and the three largest tables (by row count)."""
    conn = connect_readonly(db)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    counts = {t: conn.execute(f"SELECT count(*) FROM {q(t)}").fetchone()[0] for t in tables}
    queries: list[str] = []
    for t in tables:
        cols = [(r[1], r[2]) for r in conn.execute(f"PRAGMA table_info({q(t)})")]
        first = cols[0][0]
        queries += [f"SELECT * FROM {q(t)} LIMIT 20", f"SELECT count(*) FROM {q(t)}"]
        text = [c for c, ty in cols if "CHAR" in ty.upper() or "TEXT" in ty.upper()]
        if text:
            queries.append(f"SELECT {q(text[0])}, count(*) FROM {q(t)} GROUP BY {q(text[0])} ORDER BY 2 DESC LIMIT 10")
            queries.append(f"SELECT * FROM {q(t)} WHERE {q(text[0])} LIKE '%a%' ORDER BY {q(first)} LIMIT 50")
        for fk in conn.execute(f"PRAGMA foreign_key_list({q(t)})"):
            ref, src, dst = fk[2], fk[3], fk[4] or first
            queries.append(
                f"SELECT a.*, b.* FROM {q(t)} AS a JOIN {q(ref)} AS b ON a.{q(src)} = b.{q(dst)} LIMIT 100"
            )
    conn.close()
    largest = sorted(counts, key=counts.get, reverse=True)[:3]
    return queries[:limit], largest


def rate(fn, queries: list[str], rounds: int) -> float:
    """Executions per second of ``fn(sql)`` over ``rounds`` passes of ``queries``."""
    t0 = time.perf_counter()
    for _ in range(rounds):
        for sql in queries:
            fn(sql)
    return rounds * len(queries) / (time.perf_counter() - t0)


def load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def batch_rate(scorer: ExecutionScorer, db: Path, queries: list[str], rounds: int, size: int) -> float:
    """Items per second of ``scorer.score_batch`` over ``rounds`` passes of ``queries`` in batches of ``size``."""
    items = [(db, sql, sql) for sql in queries] * rounds
    scorer.score_batch(items[:size])  # start the workers and warm their gold caches
    t0 = time.perf_counter()
    for i in range(0, len(items), size):
        scores = scorer.score_batch(items[i : i + size])
        assert all(s.f1 == 1.0 for s in scores), [s.reason for s in scores if s.f1 != 1.0][:3]
    return len(items) / (time.perf_counter() - t0)


def main() -> None:
    args = parse(Args, description=__doc__)
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        db, label = pick_db(args, Path(tmp))
        queries, largest = build_queries(db)
        raw = sqlite3.connect(db)

        def run_raw(sql: str) -> None:
            raw.execute(sql).fetchall()

        def run_fresh(sql: str) -> None:
            assert execute_readonly(db, sql).ok

        with SQLiteExecutor() as ex:

            def run_cached(sql: str) -> None:
                assert ex.execute(db, sql).ok

            scorer = ExecutionScorer(ex)
            wrong_gold = dict(zip(queries, queries[1:] + queries[:1], strict=True))

            def run_reward(sql: str) -> None:
                assert scorer.score(db, sql, sql).f1 == 1.0

            def run_reward_wrong(sql: str) -> None:
                assert scorer.score(db, sql, wrong_gold[sql]).pred is not None

            fns = (run_raw, run_fresh, run_cached, run_reward, run_reward_wrong)
            for fn in fns:  # warm the page cache, sqlglot, the gate and gold caches
                rate(fn, queries, 1)
            rates = {
                "raw sqlite3 (one connection)": rate(run_raw, queries, args.rounds),
                "execute_readonly (path, new connection)": rate(run_fresh, queries, args.rounds),
                "SQLiteExecutor (cached connection)": rate(run_cached, queries, args.rounds),
                "execution reward, right answers (score)": rate(run_reward, queries, args.rounds),
                "execution reward, wrong answers (score)": rate(run_reward_wrong, queries, args.rounds),
            }
            rates["raw sqlite3 (again, after the others)"] = rate(run_raw, queries, args.rounds)
            batch: dict[int, float] = {}
            for n in args.workers:
                with ExecutionScorer(timeout_s=5.0, workers=n) as pooled:
                    batch[n] = batch_rate(pooled, db, queries, args.rounds, args.batch_size)
            runaway = "SELECT count(*) FROM " + ", ".join(q(t) for t in largest)
            slow_batch: dict[int, tuple[float, float]] = {}
            for n in args.workers:
                with ExecutionScorer(timeout_s=1.0, workers=n) as pooled:
                    items = [(db, sql, sql) for sql in queries[:15]]
                    pooled.score_batch(items)  # warm
                    t0 = time.perf_counter()
                    scores = pooled.score_batch([(db, runaway, queries[0]), *items])
                    slow_batch[n] = (time.perf_counter() - t0, max(s.pred.elapsed_s for s in scores[1:] if s.pred))
                    assert scores[0].f1 == 0.0 and all(s.f1 == 1.0 for s in scores[1:])
            overshoot: dict[float, list[float]] = {}
            for timeout in args.timeouts:
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    res = ex.execute(db, runaway, timeout_s=timeout)
                    wall = time.perf_counter() - t0
                    if not res.timed_out:
                        print(f"(runaway query finished in {wall:.2f} s before the {timeout} s timeout)")
                    overshoot.setdefault(timeout, []).append(wall - timeout)
        raw.close()

    print(f"machine: {machine()}, SQLite {sqlite3.sqlite_version}")
    print(f"load average before: {load_before}; after: {load()}")
    print(f"database: {label} ({db.name}); {len(queries)} queries x {args.rounds} rounds")
    print()
    base = rates["raw sqlite3 (one connection)"]
    print(f"| {'method':<44} | {'exec/s':>9} | {'vs raw':>7} |")
    print(f"|{'-' * 46}|{'-' * 11}|{'-' * 9}|")
    for name, r in rates.items():
        print(f"| {name:<44} | {r:>9.0f} | {r / base:>6.2f}x |")
    for n, r in batch.items():
        name = f"score_batch, {n} worker process{'es' if n > 1 else ''} (batch {args.batch_size})"
        print(f"| {name:<44} | {r:>9.0f} | {r / base:>6.2f}x |")
    if len(batch) > 1:
        ns = sorted(batch)
        print(f"\nworkers {ns[0]} -> {ns[-1]}: {batch[ns[-1]] / batch[ns[0]]:.2f}x the throughput")
    print()
    print(f"a batch of 16 with one runaway query ({runaway}, timeout 1 s):")
    print(f"| {'workers':>7} | {'batch wall (s)':>14} | {'slowest other item (ms)':>23} |")
    print(f"|{'-' * 9}|{'-' * 16}|{'-' * 25}|")
    for n, (wall, other) in slow_batch.items():
        print(f"| {n:>7} | {wall:>14.2f} | {other * 1e3:>23.2f} |")
    print()
    print(f"runaway query in this process: {runaway}")
    print(f"| {'timeout (s)':>11} | {'median past deadline (ms)':>26} | {'max past deadline (ms)':>23} |")
    print(f"|{'-' * 13}|{'-' * 28}|{'-' * 25}|")
    for timeout, over in overshoot.items():
        print(f"| {timeout:>11g} | {statistics.median(over) * 1e3:>26.2f} | {max(over) * 1e3:>23.2f} |")


if __name__ == "__main__":
    run_main(main)
