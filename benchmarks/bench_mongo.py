"""MongoDB backend: gold pipelines against their SQL twins, execution rate, $lookup cost per hop, timeouts.

Starts a wire-protocol test server (tests/mongo_server.py: ``secantus`` by default, or
``--server nx-27017``, or ``--uri`` for one already running), builds a Northwind data set
(``--samples-per-path``, default 10; ``python -m data_pipeline.build`` uses 20), copies its database
into MongoDB with ``data_pipeline.mongo_load``, then measures:

1. every sample's gold pipeline against its gold SQL (``results_match``, and exact multisets);
2. execution rate of the gold pipelines (and of the gold SQL on SQLite), overall and per hop count;
3. a ``$lookup`` chain by hop count: Customers of one country -> Orders -> Order Details ->
   Products, ``COUNT(*)`` at each depth; milliseconds per pipeline and per joined document;
4. with ``--routing True``: the test questions routed over the schema read from MongoDB and over
   the SQLite one (a trained ``--router`` checkpoint, else the untrained retrieval baseline);
5. time limits: a runaway pipeline under ``timeout_s=0.5`` through the product (client timeout),
   the same under the server's own ``maxTimeMS`` only, whether the server is idle afterwards,
   and a pipeline whose single long stage the server cannot interrupt (``--skip-uninterruptible``
   leaves that one out; it keeps the test server busy for seconds).

    python benchmarks/bench_mongo.py
    python benchmarks/bench_mongo.py --server nx-27017 --samples-per-path 3
    python benchmarks/bench_mongo.py --uri mongodb://127.0.0.1:27017/ --json-out /tmp/mongo.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pymongo
from pymongo.errors import ExecutionTimeout, PyMongoError

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the package from this checkout; the test server helper

from mongo_server import MongoServer  # noqa: E402

from data_pipeline import BuildConfig, build_dataset  # noqa: E402
from data_pipeline.backends.mongo_pipeline import (  # noqa: E402
    Condition,
    Join,
    Output,
    PathQuery,
    build_pipeline,
    execute_pipeline,
    gold_pipeline,
)
from data_pipeline.backends.sqlite import SQLiteExecutor  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from data_pipeline.mongo_load import LoadConfig, load  # noqa: E402
from rewards.sql_execution import normalize_rows, results_match  # noqa: E402


@dataclass
class Args:
    """Options of the MongoDB backend benchmark."""

    server: str = "secantus"
    """Test server to start: secantus or nx-27017 (ignored with --uri)."""
    uri: str | None = None
    """A running server (mongodb://host:port/) instead of starting one."""
    samples_per_path: int = 10
    """Questions per path in the Northwind data set built for the run."""
    chain_repeats: int = 5
    """Runs per depth of the $lookup chain (the median is reported)."""
    chain_country: str = "Germany"
    """Customers.Country anchoring the $lookup chain."""
    routing: bool = False
    """Also route the test questions over the schema read from MongoDB and from SQLite (the
    retrieval baseline, or --router) and compare the accuracies."""
    router: Path | None = None
    """Trained router checkpoint for --routing (default: the untrained retrieval baseline)."""
    skip_uninterruptible: bool = False
    """Leave out the single-long-stage runaway (it keeps the test server busy for seconds)."""
    json_out: Path | None = None
    """Also write every number as JSON here."""


RUNAWAY = [  # every order against every order line by a computed condition (830 x 2155 evaluations)
    {"$lookup": {"from": "Order Details", "let": {"x": "$OrderID"},
                 "pipeline": [{"$match": {"$expr": {"$gte": ["$Quantity", "$$x"]}}}], "as": "d"}},
    {"$count": "n"},
]  # fmt: skip
UNINTERRUPTIBLE = [  # uncorrelated $lookup + $unwind: 1.8 M documents built inside one stage
    {"$lookup": {"from": "Order Details", "pipeline": [], "as": "d"}},
    {"$unwind": "$d"},
    {"$count": "n"},
]
CHAIN = (
    ("Customers", None),
    ("Orders", Join("Orders", 0, "CustomerID", "CustomerID")),
    ("Order Details", Join("Order Details", 1, "OrderID", "OrderID")),
    ("Products", Join("Products", 2, "ProductID", "ProductID")),
)


def machine() -> dict[str, Any]:
    """The machine the numbers come from."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "pymongo": pymongo.version,
        "platform": platform.platform(),
    }


def gold_comparison(db: Any, ds: Any) -> dict[str, Any]:
    """Run every sample's gold pipeline and gold SQL; count matches; time both."""
    sql = SQLiteExecutor(timeout_s=30)
    matched = exact = 0
    failures: Counter[str] = Counter()
    mongo_ms: dict[int, list[float]] = defaultdict(list)
    sql_ms: dict[int, list[float]] = defaultdict(list)
    first_bad: list[str] = []
    for s in ds.samples:
        t = time.perf_counter()
        m = execute_pipeline(db, gold_pipeline(s, ds.graph), timeout_s=30)
        mongo_ms[s.path.hops].append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        g = sql.execute(ds.db_path, s.sql)
        sql_ms[s.path.hops].append((time.perf_counter() - t) * 1000)
        if not m.ok:
            failures[(m.error or "?").split(":")[0][:60]] += 1
            continue
        ok = results_match(m.rows, g.rows or [], ordered=False)
        matched += ok
        exact += Counter(normalize_rows(m.rows)) == Counter(normalize_rows(g.rows or []))
        if not ok and len(first_bad) < 3:
            first_bad.append(f"{s.id}: mongo {m.rows[:3]} vs sql {(g.rows or [])[:3]}")
    sql.close()
    all_m = [x for v in mongo_ms.values() for x in v]
    all_s = [x for v in sql_ms.values() for x in v]
    return {
        "samples": len(ds.samples),
        "matched": matched,
        "exact_multiset": exact,
        "failed_to_run": dict(failures),
        "mismatch_examples": first_bad,
        "mongo_pipelines_per_s": round(len(all_m) / (sum(all_m) / 1000), 1),
        "sql_queries_per_s": round(len(all_s) / (sum(all_s) / 1000), 1),
        "per_hop": {
            h: {
                "samples": len(mongo_ms[h]),
                "mongo_median_ms": round(statistics.median(mongo_ms[h]), 2),
                "mongo_p90_ms": round(sorted(mongo_ms[h])[int(0.9 * (len(mongo_ms[h]) - 1))], 2),
                "sql_median_ms": round(statistics.median(sql_ms[h]), 3),
            }
            for h in sorted(mongo_ms)
        },
    }


def lookup_chain(db: Any, conn_path: Path, country: str, repeats: int) -> list[dict[str, Any]]:
    """``COUNT(*)`` at each depth of the chain anchored at one country's customers."""
    rows = []
    sql = SQLiteExecutor(timeout_s=30)
    for depth in range(len(CHAIN)):
        tables = tuple(t for t, _ in CHAIN[: depth + 1])
        joins = tuple(j for _, j in CHAIN[1 : depth + 1] if j is not None)
        q = build_pipeline(PathQuery(tables, joins, (Condition(0, "Country", "=", country),), (Output(None, None, "count"),)))
        times, count = [], None
        for _ in range(repeats):
            t = time.perf_counter()
            r = execute_pipeline(db, q, timeout_s=60)
            times.append(time.perf_counter() - t)
            count = r.rows[0][0] if r.ok and r.rows else r.error
        from_sql = " ".join(
            f'JOIN "{j.table}" ON "{j.table}"."{j.foreign}" = "{tables[j.left]}"."{j.local}"' for j in joins
        )
        sql_text = f'SELECT COUNT(*) FROM "Customers" {from_sql} WHERE "Customers"."Country" = \'{country}\''
        st = []
        for _ in range(repeats):
            t = time.perf_counter()
            sr = sql.execute(conn_path, sql_text)
            st.append(time.perf_counter() - t)
        med_ms = statistics.median(times) * 1000
        prev = rows[-1] if rows else None
        lookups = prev["rows"] if prev and isinstance(prev["rows"], int) else None  # one $lookup per incoming document
        added = med_ms - prev["mongo_median_ms"] if prev else None
        rows.append(
            {
                "hops": depth,
                "path": " -> ".join(tables),
                "rows": count,
                "sql_rows": sr.rows[0][0] if sr.ok and sr.rows else sr.error,
                "mongo_median_ms": round(med_ms, 2),
                "hop_added_ms": round(added, 2) if added is not None else None,
                "lookups": lookups,
                "ms_per_lookup": round(added / lookups, 3) if added is not None and lookups else None,
                "sql_median_ms": round(statistics.median(st) * 1000, 3),
            }
        )
    sql.close()
    return rows


def routing(uri: str, ds: Any, router_dir: Path | None) -> dict[str, Any]:
    """Route the test split over the schema introspected from MongoDB and over the SQLite one."""
    from data_pipeline.backends.mongodb import introspect_mongodb
    from core.graph import SchemaGraph
    from router.evaluate import evaluate_router

    mongo_graph = SchemaGraph(introspect_mongodb(uri), max_hops=ds.graph.max_hops)
    samples = ds.split("test") + ds.split("test_heldout")
    out: dict[str, Any] = {"questions": len(samples), "router": str(router_dir) if router_dir else "retrieval baseline (untrained)"}
    predictions = {}
    encoder = None
    for name, graph in (("sqlite", ds.graph), ("mongodb", mongo_graph)):
        if router_dir is not None:
            from router.route import Router

            router: Any = Router.from_pretrained(router_dir, schema=graph)
        else:
            from evaluation.baselines import RetrievalRouter

            router = RetrievalRouter(graph, encoder) if encoder is not None else RetrievalRouter(graph)
            encoder = router.encoder
        predictions[name] = router.predict_paths([s.question for s in samples])
        metrics = evaluate_router(router, samples, graph)
        out[name] = {k: round(metrics[k], 4) for k in ("full_path_acc", "anchor_acc", "via_acc", "target_acc")}
    out["same_predictions"] = sum(a == b for a, b in zip(predictions["sqlite"], predictions["mongodb"]))
    return out


def timeouts(db: Any, server: MongoServer, skip_uninterruptible: bool) -> dict[str, Any]:
    """The runaway pipelines under a 0.5 s limit (see the module docstring)."""
    out: dict[str, Any] = {}
    proc = psutil.Process(server.pid) if server.pid else None
    t = time.perf_counter()
    part = execute_pipeline(db, {"aggregate": "Orders", "pipeline": [{"$limit": 8}, *RUNAWAY]}, timeout_s=60)
    out["runaway_estimated_full_s"] = round((time.perf_counter() - t) / 8 * 830, 1) if part.ok else part.error
    r = execute_pipeline(db, {"aggregate": "Orders", "pipeline": RUNAWAY}, timeout_s=0.5)
    out["product_timeout_0.5s"] = {"timed_out": r.timed_out, "elapsed_s": round(r.elapsed_s, 3), "error": r.error}
    if proc:
        out["product_server_cpu_pct_next_0.5s"] = proc.cpu_percent(interval=0.5)
    t = time.perf_counter()
    try:
        list(db["Orders"].aggregate(RUNAWAY, maxTimeMS=500))
        out["server_maxTimeMS_500"] = {"stopped": False, "elapsed_s": round(time.perf_counter() - t, 3)}
    except ExecutionTimeout:
        out["server_maxTimeMS_500"] = {"stopped": True, "elapsed_s": round(time.perf_counter() - t, 3)}
    except PyMongoError as exc:
        out["server_maxTimeMS_500"] = {"error": str(exc)[:120]}
    if skip_uninterruptible:
        return out
    r = execute_pipeline(db, {"aggregate": "Orders", "pipeline": UNINTERRUPTIBLE}, timeout_s=0.5)
    busy_s = None
    if proc:
        t = time.perf_counter()
        while proc.cpu_percent(interval=0.25) > 20 and time.perf_counter() - t < 120:
            pass
        busy_s = round(time.perf_counter() - t, 2)
    out["uninterruptible_product_0.5s"] = {"timed_out": r.timed_out, "elapsed_s": round(r.elapsed_s, 3), "error": r.error, "server_busy_after_s": busy_s}
    t = time.perf_counter()
    try:
        list(db["Orders"].aggregate(UNINTERRUPTIBLE, maxTimeMS=500))
        out["uninterruptible_server_maxTimeMS_500"] = {"stopped": False, "elapsed_s": round(time.perf_counter() - t, 2)}
    except ExecutionTimeout:
        out["uninterruptible_server_maxTimeMS_500"] = {"stopped": True, "elapsed_s": round(time.perf_counter() - t, 2)}
    except PyMongoError as exc:
        out["uninterruptible_server_maxTimeMS_500"] = {"error": str(exc)[:120]}
    return out


def main() -> dict[str, Any]:
    args = parse(Args, description=__doc__.splitlines()[0] if __doc__ else None)
    report: dict[str, Any] = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="bench-mongo-") as tmp, MongoServer(args.server, uri=args.uri) as server:
        report["server"] = {"kind": server.kind, "version": server.version, "start_s": round(server.start_s, 2)}
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds, _ = build_dataset(BuildConfig(db="northwind", out=Path(tmp), samples_per_path=args.samples_per_path))
        report["build_s"] = round(time.perf_counter() - t, 2)
        uri = server.db_uri("bench_northwind")
        loaded = load(LoadConfig(db=tmp, uri=uri, replace=True))
        report["load"] = {"documents": loaded.total_documents, "collections": len(loaded.documents), "seconds": round(loaded.elapsed_s, 2),
                          "docs_per_s": round(loaded.total_documents / loaded.elapsed_s)}  # fmt: skip
        with server.client() as client:
            db = client["bench_northwind"]
            report["gold"] = gold_comparison(db, ds)
            report["lookup_chain"] = lookup_chain(db, ds.db_path, args.chain_country, args.chain_repeats)
            if args.routing:
                report["routing"] = routing(uri, ds, args.router)
            report["timeouts"] = timeouts(db, server, args.skip_uninterruptible)
    print_report(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2, default=str))
    return report


def print_report(r: dict[str, Any]) -> None:
    m = r["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, load {m['load_avg_1m']}, Python {m['python']}, pymongo {m['pymongo']}")
    s = r["server"]
    print(f"server: {s['kind']} (reports {s['version']}), started in {s['start_s']} s; data set built in {r['build_s']} s")
    ld = r["load"]
    print(f"load: {ld['documents']} documents, {ld['collections']} collections in {ld['seconds']} s ({ld['docs_per_s']} docs/s)\n")
    g = r["gold"]
    print(f"gold pipelines vs SQL twins: {g['matched']}/{g['samples']} match (results_match), {g['exact_multiset']}/{g['samples']} exact multisets")
    if g["failed_to_run"]:
        print(f"  failed to run: {g['failed_to_run']}")
    for ex in g["mismatch_examples"]:
        print(f"  mismatch {ex}")
    print(f"rate: {g['mongo_pipelines_per_s']} pipelines/s on MongoDB, {g['sql_queries_per_s']} queries/s on SQLite\n")
    print("| hops | samples | pipeline median ms | p90 ms | SQL median ms |")
    print("|---:|---:|---:|---:|---:|")
    for h, v in g["per_hop"].items():
        print(f"| {h} | {v['samples']} | {v['mongo_median_ms']} | {v['mongo_p90_ms']} | {v['sql_median_ms']} |")
    print("\n$lookup chain (COUNT(*), anchor Customers.Country):\n")
    print("| hops | path | rows (SQL) | pipeline median ms | this hop adds ms | $lookups in this hop | ms per $lookup | SQL median ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for c in r["lookup_chain"]:
        dash = "-"
        print(
            f"| {c['hops']} | {c['path']} | {c['rows']} ({c['sql_rows']}) | {c['mongo_median_ms']} | {c['hop_added_ms'] if c['hop_added_ms'] is not None else dash} "
            f"| {c['lookups'] or dash} | {c['ms_per_lookup'] or dash} | {c['sql_median_ms']} |"
        )
    if "routing" in r:
        ro = r["routing"]
        print(f"\nrouting ({ro['router']}), {ro['questions']} test questions: SQLite schema {ro['sqlite']}, "
              f"MongoDB schema {ro['mongodb']}; same prediction for {ro['same_predictions']}/{ro['questions']}")
    print("\ntime limits:")
    for k, v in r["timeouts"].items():
        print(f"  {k}: {v}")


if __name__ == "__main__":
    run_main(main)
