"""Limits that must hold (issue 14 items 2, 4 and 9): bytes as well as rows, a deadline that holds,
parallel scoring with the same guarantees, and WAL databases read without leaving files behind."""

from __future__ import annotations

import mmap
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.sqlite import wal_is_idle
from data_pipeline.backends.sqlite import SQLiteExecutor, connect_readonly, execute_readonly
from rewards.pool import _PROGRESS, TICK_S, WorkerPool, pack_progress, unpack_progress
from rewards.sql import SQLRewardConfig, sql_reward_components
from rewards.sql_execution import ExecutionScorer

ZEROBLOB_ROWS = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 10000) SELECT zeroblob(9999999) FROM r"
)
"""Issue 14 item 2: 10,000 rows of 10 MB reached 4 GB peak RSS and ran 5.3-7.4 s against a 5 s timeout."""


@pytest.fixture
def shop(tiny_db: Path) -> Path:
    return tiny_db


# ---------------------------------------------------------------------------- item 2: bytes and time


@pytest.mark.parametrize("timeout_s", [0.5, 5.0])
def test_the_result_cap_counts_bytes(shop, timeout_s):
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    res = execute_readonly(shop, ZEROBLOB_ROWS, timeout_s=timeout_s, max_bytes=32_000_000)
    wall = time.perf_counter() - t0
    assert res.ok and res.truncated and res.limit == "bytes"
    assert len(res.rows) == 3  # 3 x 10 MB fit under 32 MB; the 4th does not
    assert wall < min(timeout_s, 1.0)
    # peak RSS grows by the rows kept and a chunk more, not by gigabytes (ru_maxrss is in KiB)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 256 * 1024
    rows = execute_readonly(shop, "SELECT id FROM customers", max_rows=2)
    assert rows.truncated and rows.limit == "rows" and rows.rows == [(1,), (2,)]
    small = execute_readonly(shop, "SELECT name FROM customers", max_bytes=20)
    assert small.truncated and small.limit == "bytes" and len(small.rows) < 3


def test_a_wrong_answer_over_the_byte_cap_scores_zero_with_its_reason(shop):
    scorer = ExecutionScorer(timeout_s=2.0, max_bytes=1_000_000)
    score = scorer.score(shop, ZEROBLOB_ROWS, "SELECT name FROM customers")
    assert score.f1 == 0.0 and "more than 1000000 bytes" in score.reason
    scorer.close()


def test_uninterruptible_calls_are_stopped_by_the_worker_deadline(shop):
    # one SQLite function call ignores the progress handler (7.7 s here in this process); a worker is killed
    cfg = SQLRewardConfig(timeout_s=0.5, score_workers=1)
    bomb = "<answer>SELECT instr(hex(zeroblob(2000000)), hex(zeroblob(100000)) || '1')</answer>"
    with cfg.make_scorer() as scorer:
        sql_reward_components(["<answer>SELECT 1</answer>"], ["SELECT 1"], shop, cfg, scorer)  # start, warm
        t0 = time.perf_counter()
        [got] = sql_reward_components([bomb], ["SELECT 1"], shop, cfg, scorer)
        assert time.perf_counter() - t0 < 0.5 + 0.5
        assert got["execution"] == 0.0 and "worker stopped at the deadline" in got["reason"]
        assert scorer.pool.kills == 1
        # the pool goes on with a fresh worker
        [ok] = sql_reward_components(["<answer>SELECT 1</answer>"], ["SELECT 1"], shop, cfg, scorer)
        assert ok["execution"] == 1.0



def test_execute_in_a_worker_returns_rows_and_stops_an_uninterruptible_call(shop):
    # generator.ask and score_answers run queries this way: a trim() over a megabyte string ran
    # 154 s past a 1 s timeout in this process
    bomb = "SELECT length(trim(replace(hex(zeroblob(1000000)), '0', 'a'), replace(hex(zeroblob(10000)), '0', 'b') || 'a'))"
    with ExecutionScorer(timeout_s=0.5, max_rows=2, workers=1).start(wait=True) as ex:
        ok = ex.execute(shop, "SELECT name FROM customers ORDER BY name")
        assert ok.ok and ok.truncated and len(ok.rows) == 2 and ok.columns == ["name"]
        t0 = time.perf_counter()
        stopped = ex.execute(shop, bomb)
        assert time.perf_counter() - t0 < 0.5 + 0.5
        assert not stopped.ok and stopped.timed_out and "worker stopped at the deadline" in stopped.error
        assert ex.execute(shop, "SELECT 1").rows == [(1,)]  # a fresh worker goes on

# ---------------------------------------------------------------------------- item 4: parallel scoring


def test_one_slow_query_does_not_hold_up_the_batch(tmp_path):
    from helpers import make_big_shop

    big = make_big_shop(tmp_path / "big.sqlite")
    cfg = SQLRewardConfig(timeout_s=1.0, score_workers=2)
    quick = [f"<answer>SELECT name FROM customers WHERE id = {i}</answer>" for i in range(15)]
    runaway = '<answer>SELECT count(*) FROM customers, orders, "order items"</answer>'
    gold = ["SELECT name FROM customers WHERE id = 3"] * 16
    with cfg.make_scorer() as scorer:
        sql_reward_components(quick, gold[:15], big, cfg, scorer)  # start both workers, warm the gold
        t0 = time.perf_counter()
        comps = sql_reward_components([runaway, *quick], gold, big, cfg, scorer)
        wall = time.perf_counter() - t0
    assert comps[0]["execution"] == 0.0 and "timed out" in comps[0]["reason"]
    assert [c["execution"] for c in comps[1:]] == [1.0 if i == 3 else 0.0 for i in range(15)]
    # in one process the 15 quick queries would wait behind the runaway one; here they ran beside it
    assert wall < 1.0 + 0.5


def test_workers_keep_the_guarantees(shop, tmp_path):
    before = (shop.read_bytes(), sorted(os.listdir(shop.parent)))
    scorer = ExecutionScorer(timeout_s=0.5, workers=2)
    items = [(shop, sql, "SELECT name FROM customers") for sql in
             ["DELETE FROM customers", "SELECT name FROM customers", "ATTACH 'x.sqlite' AS x",
              "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
              "SELECT name FROM customers LIMIT 1", ZEROBLOB_ROWS]]  # fmt: skip
    scores = scorer.score_batch(items)
    assert [s.f1 for s in scores][:2] == [0.0, 1.0] and scores[5].f1 == 0.0
    assert scores[0].reason.startswith("rejected") and scores[2].reason.startswith("rejected")
    assert "timed out" in scores[3].reason and scores[3].pred.elapsed_s < 0.5 + 0.3
    assert scores[4].f1 == pytest.approx(0.5)
    assert "bytes" in scores[5].reason
    # the same scores as in this process
    assert [s.f1 for s in ExecutionScorer(timeout_s=0.5).score_batch(items)] == [s.f1 for s in scores]
    pids = scorer.pool.pids
    assert len(pids) == 2
    for pid in pids:  # each worker's address space is capped
        limits = psutil.Process(pid).rlimit(psutil.RLIMIT_AS)
        assert limits[0] == scorer.worker_memory_mb << 20
    scorer.close()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    assert (shop.read_bytes(), sorted(os.listdir(shop.parent))) == before


def test_a_failing_gold_query_raises_from_the_workers_too(shop):
    from core.errors import DataError

    with ExecutionScorer(workers=1) as scorer:
        with pytest.raises(DataError, match="gold SQL does not run on this database .*no such table: nope"):
            scorer.score_batch([(shop, "SELECT 1", "SELECT * FROM nope")])
        assert scorer.score_batch([(shop, "SELECT 1", None)])[0].reason == "no gold SQL"


@pytest.mark.parametrize(("workers", "n"), [(1, 2), (1, 3), (2, 3)])
def test_a_group_whose_gold_query_times_out_is_scored_not_hung(shop, workers, n):
    """The items after the first were skipped while being dealt (their gold warm-up had timed out),
    so nothing was in flight and the pool waited for a reply forever."""
    import faulthandler

    slow_gold = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    faulthandler.dump_traceback_later(60, exit=True)  # a hang fails the run instead of stalling it
    try:
        with ExecutionScorer(timeout_s=0.5, workers=workers) as scorer:
            scores = scorer.score_batch([(shop, f"SELECT {i}", slow_gold) for i in range(n)])
            assert [s.reason for s in scores] == ["gold SQL timed out after 0.5 s"] * n
            assert scorer.score_batch([(shop, "SELECT 1", "SELECT 1")])[0].exact
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_pool_outcomes_and_errors():
    with WorkerPool(2) as pool:
        out = pool.map(time.sleep, [(0.01,), (30,), (0.01,)], budget_s=0.5)
        assert [o.ok for o in out] == [True, False, True] and out[1].killed
        assert 0.5 <= out[1].seconds < 1.5 and pool.kills == 1
        errs = pool.map(divmod, [(1, 0)], budget_s=5)
        assert isinstance(errs[0].error, ZeroDivisionError)


# ---------------------------------------------------------------------------- item 9: WAL databases


def _wal_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1), (2);")
    conn.commit()
    conn.close()  # the last connection checkpoints and removes -wal/-shm
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    return path


def test_reading_a_wal_database_leaves_no_files_beside_it(tmp_path):
    db = _wal_db(tmp_path / "wal.sqlite")
    assert wal_is_idle(db)
    before = db.read_bytes()
    conn = connect_readonly(db)
    assert conn.execute("SELECT sum(x) FROM t").fetchone() == (3,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite"]  # mode=ro alone left -wal and -shm here
    conn.close()
    with SQLiteExecutor() as ex:
        assert ex.execute(db, "SELECT count(*) FROM t").rows == [(2,)]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite"]
    with ExecutionScorer(workers=1) as scorer:
        assert scorer.score_batch([(db, "SELECT x FROM t", "SELECT x FROM t")])[0].f1 == 1.0
    assert execute_readonly(db, "SELECT 1").ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite"] and db.read_bytes() == before


def test_a_wal_database_being_written_is_read_normally(tmp_path):
    db = _wal_db(tmp_path / "wal.sqlite")
    with SQLiteExecutor() as ex:
        assert ex.execute(db, "SELECT count(*) FROM t").rows == [(2,)]  # opened immutable
        writer = sqlite3.connect(db)
        writer.execute("INSERT INTO t VALUES (3)")
        writer.commit()  # the writer keeps -wal open: the executor must not read a stale file
        assert not wal_is_idle(db)
        assert ex.execute(db, "SELECT count(*) FROM t").rows == [(3,)]
        writer.close()


def test_items_queued_behind_slow_ones_are_timed_from_their_own_start():
    # two slow items first in one chunk: the third must be timed from when it starts, not from
    # when the chunk was sent (a quick query was killed that way), across calls too
    with WorkerPool(1) as pool:
        pool.map(time.sleep, [(0.01,)] * 3, budget_s=5)
        time.sleep(1.0)  # the worker's shared-memory record now names a job that started long ago
        out = pool.map(time.sleep, [(0.5,), (0.5,)] + [(0.01,)] * 10, budget_s=0.8)
        assert all(o.ok for o in out) and pool.kills == 0, [(o.killed, o.seconds) for o in out]


def test_progress_word_survives_the_low_32_bits_wrapping():
    wrap = (1 << 32) * TICK_S  # the start's ticks wrap every 4.97 days
    start = wrap - 0.25
    tag, got = unpack_progress(pack_progress(7, start), now=wrap + 1.0)
    assert tag == 8 and start - TICK_S < got <= start
    assert unpack_progress(pack_progress(None, start), now=start)[0] == 0


def test_progress_word_is_never_read_half_written(tmp_path):
    # a worker and the parent share the record; while one process rewrites it as fast as it can,
    # every read must pair a job with its own start (two fields written one after the other were
    # read as a job with a start of 0.0 and the parent killed a worker whose query had just begun)
    path = tmp_path / "progress"
    path.write_bytes(_PROGRESS.pack(pack_progress(None, 0.0)))
    writer = subprocess.Popen([sys.executable, "-c", (
        "import mmap, sys, time\n"
        "from rewards.pool import pack_progress\n"
        "with open(sys.argv[1], 'r+b') as fh:\n"
        "    view = memoryview(mmap.mmap(fh.fileno(), 8)).cast('Q')\n"
        "end = time.monotonic() + 1.5\n"
        "j = 0\n"
        "while time.monotonic() < end:\n"
        "    view[0] = pack_progress(j, 1000.0 + j * 0.5)\n"
        "    j = (j + 1) % 10_000\n"
    ), str(path)], cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    with open(path, "r+b") as fh:
        record = mmap.mmap(fh.fileno(), _PROGRESS.size)
    seen, torn = set(), []
    while writer.poll() is None:
        tag, start = unpack_progress(_PROGRESS.unpack_from(record, 0)[0], now=10_000.0)
        if tag:
            seen.add(tag)
            if abs(start - (1000.0 + (tag - 1) * 0.5)) > TICK_S:
                torn.append((tag - 1, start))
    record.close()
    assert writer.returncode == 0
    assert len(seen) > 100  # the reads did overlap the writes
    assert torn == []
