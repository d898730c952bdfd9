"""How much the guards of ``data_pipeline.backends.sqlite`` cost, and how fast a runaway query stops.

Runs the same ~50 SELECT queries (built from the schema: scans, counts, filters, group-bys and
one query per foreign-key join) through raw ``sqlite3``, :func:`execute_readonly` (a fresh
read-only connection per call), :class:`SQLiteExecutor` (one cached connection) and the GRPO
execution reward (:class:`rewards.sql_execution.ExecutionScorer`: the gate's cached verdict,
run, soft F1 and exact match against the cached gold result), once with each query as its own
gold ("right answers") and once against the next query's gold ("wrong answers", no fast path).
Then batch scoring (:meth:`ExecutionScorer.score_batch`, batches of 64) in 1 and 2 worker
processes, a batch of 16 holding two runaway queries (in this process, in 1 and 2 workers), and how long a cartesian product of the three
largest tables runs past its timeout. Every rate is also given as a ratio to raw ``sqlite3``
measured in the same run; the machine and its load average (before and after) are printed.

    python benchmarks/bench_sql_exec.py            # Northwind if it can be built, else a generated DB
    python benchmarks/bench_sql_exec.py --db some.sqlite --rounds 50
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine  # noqa: E402

from data_pipeline.backends.sqlite import SQLiteExecutor, connect_readonly, execute_readonly
from core.cli import parse, run_main
from core.errors import Route2SQLError
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


def load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def interleaved_rates(fns: dict[str, Callable[[list[str]], None]], queries: list[str], rounds: int) -> dict[str, float]:
    """Items per second of each ``fn(queries)``, the methods taking turns every round, so a change
    in the machine's load during the run weighs on all of them alike."""
    spent = dict.fromkeys(fns, 0.0)
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(queries)
            spent[name] += time.perf_counter() - t0
    return {name: rounds * len(queries) / s for name, s in spent.items()}


def batches(scorer: ExecutionScorer, db: Path, size: int, cpu: list[float]) -> Callable[[list[str]], None]:
    """``score_batch`` over the queries (each its own gold) in batches of ``size``; every score
    checked; the CPU seconds each worker spent are added to ``cpu`` (one entry per worker)."""
    import psutil

    procs = [psutil.Process(pid) for pid in scorer.pool.pids]

    def busy() -> list[float]:
        return [sum(p.cpu_times()[:2]) for p in procs]

    def run(queries: list[str]) -> None:
        items = [(db, sql, sql) for sql in queries]
        before = busy()
        for i in range(0, len(items), size):
            scores = scorer.score_batch(items[i : i + size])
            assert all(s.f1 == 1.0 for s in scores), [s.reason for s in scores if s.f1 != 1.0][:3]
        for k, (a, b) in enumerate(zip(before, busy(), strict=True)):
            cpu[k] += b - a

    return run


def main() -> None:
    args = parse(Args, description=__doc__)
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        db, label = pick_db(args, Path(tmp))
        queries, largest = build_queries(db)
        raw = sqlite3.connect(db)

        def each(fn: Callable[[str], object]) -> Callable[[list[str]], None]:
            def run(qs: list[str]) -> None:
                for sql in qs:
                    fn(sql)

            return run

        with SQLiteExecutor() as ex, contextlib.ExitStack() as stack:
            scorer = ExecutionScorer(ex)
            wrong_gold = dict(zip(queries, queries[1:] + queries[:1], strict=True))

            def reward_right(sql: str) -> None:
                assert scorer.score(db, sql, sql).f1 == 1.0

            def reward_wrong(sql: str) -> None:
                assert scorer.score(db, sql, wrong_gold[sql]).pred is not None

            fns: dict[str, Callable[[list[str]], None]] = {
                "raw sqlite3 (one connection)": each(lambda sql: raw.execute(sql).fetchall()),
                "execute_readonly (path, new connection)": each(lambda sql: execute_readonly(db, sql)),
                "SQLiteExecutor (cached connection)": each(lambda sql: ex.execute(db, sql)),
                "execution reward, right answers (score)": each(reward_right),
                "execution reward, wrong answers (score)": each(reward_wrong),
            }
            worker_cpu: dict[str, list[float]] = {}
            for n in args.workers:
                pooled = stack.enter_context(ExecutionScorer(timeout_s=5.0, workers=n).start(wait=True))
                name = f"score_batch, {n} worker process{'es' if n > 1 else ''} (batch {args.batch_size})"
                worker_cpu[name] = [0.0] * n
                fns[name] = batches(pooled, db, args.batch_size, worker_cpu[name])
            for fn in fns.values():  # warm the page cache, sqlglot, the gate and gold caches, the workers
                fn(queries)
            for cpu in worker_cpu.values():
                cpu[:] = [0.0] * len(cpu)
            rates = interleaved_rates(fns, queries, args.rounds)
            runaway = "SELECT count(*) FROM " + ", ".join(q(t) for t in largest)
            slow_batch: dict[int, float] = {}
            items = [(db, runaway, queries[0]), (db, runaway, queries[0])] + [(db, sql, sql) for sql in queries[:14]]
            in_process = ExecutionScorer(ex, timeout_s=1.0)  # shares ex, closed below
            in_process.score_batch(items[2:])  # warm
            t0 = time.perf_counter()
            in_process.score_batch(items)
            slow_batch[0] = time.perf_counter() - t0
            for n in args.workers:
                with ExecutionScorer(timeout_s=1.0, workers=n) as pooled:
                    pooled.score_batch(items[2:])  # start the workers, warm their gold caches
                    t0 = time.perf_counter()
                    scores = pooled.score_batch(items)
                    slow_batch[n] = time.perf_counter() - t0
                    assert [s.f1 for s in scores[:2]] == [0.0, 0.0] and all(s.f1 == 1.0 for s in scores[2:]), [s.reason for s in scores]
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
    pooled_rates = [r for name, r in rates.items() if name.startswith("score_batch")]
    if len(pooled_rates) > 1:
        print(f"\nworkers {args.workers[0]} -> {args.workers[-1]}: {pooled_rates[-1] / pooled_rates[0]:.2f}x the throughput")
    items = args.rounds * len(queries)
    for name, cpu in worker_cpu.items():
        each = ", ".join(f"{c / items * 1e6:.0f}" for c in cpu)
        print(f"{name}: worker CPU per item (us): {each}")
    print()
    print(f"a batch of 16 holding two runaway queries ({runaway}, timeout 1 s) and 14 quick ones:")
    print(f"| {'scored in':<26} | {'batch wall (s)':>14} |")
    print(f"|{'-' * 28}|{'-' * 16}|")
    for n, wall in slow_batch.items():
        where = "this process" if n == 0 else f"{n} worker process{'es' if n > 1 else ''}"
        print(f"| {where:<26} | {wall:>14.2f} |")
    print()
    print(f"runaway query in this process: {runaway}")
    print(f"| {'timeout (s)':>11} | {'median past deadline (ms)':>26} | {'max past deadline (ms)':>23} |")
    print(f"|{'-' * 13}|{'-' * 28}|{'-' * 25}|")
    for timeout, over in overshoot.items():
        print(f"| {timeout:>11g} | {statistics.median(over) * 1e3:>26.2f} | {max(over) * 1e3:>23.2f} |")


if __name__ == "__main__":
    run_main(main)
