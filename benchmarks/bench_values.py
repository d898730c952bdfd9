"""Value index speed: build time per database and lookup latency per question.

    python benchmarks/bench_values.py                      # northwind, chinook, hospital, projects
    python benchmarks/bench_values.py --dbs northwind my.sqlite

For each database the index is built from the database (:meth:`core.values.ValueIndex.build`,
median of ``--build-rounds``), then every question of its packaged human-written set (or, for a
database without one, 200 generated questions of a fresh build) is looked up ``--rounds`` times
after a warm-up; p50 / p95 / max are over all lookups. The reference measured in the same run is
one ``str.lower()`` plus a ``dict`` probe per question word (the least any lookup must do), so
the ratio column says what the fuzzy matching costs over it. The machine and its load average
are printed with the table.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout

from bench_common import machine  # noqa: E402
from data_pipeline.backends.registry import load_backend  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from data_pipeline.human_sets import packaged_human_file  # noqa: E402
from core.values import ValueIndex  # noqa: E402


@dataclass
class Args:
    """Options of the value-index benchmark."""

    dbs: tuple[str, ...] = ("northwind", "chinook", "hospital", "projects")
    """Sample names or SQLite files."""
    build_rounds: int = 3
    """Index builds timed per database (median reported)."""
    rounds: int = 20
    """Times each question is looked up."""
    out: Path | None = None
    """Also write the results as JSON here."""


def _questions(db: str) -> list[str]:
    f = packaged_human_file(db)
    if f is not None:
        return [json.loads(line)["question"] for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    import tempfile

    from data_pipeline.pipeline import BuildConfig, build_dataset

    with tempfile.TemporaryDirectory() as tmp:
        ds, _ = build_dataset(BuildConfig(out=Path(tmp), db=db, samples_per_path=3))
        return [s.question for s in ds.samples[:200]]


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> list[dict]:
    args = parse(Args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    load = os.getloadavg()[0]
    rows = []
    for db in args.dbs:
        with load_backend("sqlite", db) as backend:
            schema = backend.introspect()
            builds = []
            for _ in range(args.build_rounds):
                t0 = time.perf_counter()
                index, _notes = ValueIndex.build(backend, schema)
                builds.append(time.perf_counter() - t0)
        questions = _questions(db)
        for q in questions[:5]:
            index.lookup(q)  # warm-up (imports, caches)
        vocab = {w for c in index.columns for v in c.values for w in v.lower().split()}
        times, ref = [], []
        for _ in range(args.rounds):
            for q in questions:
                t0 = time.perf_counter()
                index.lookup(q)
                times.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                _ = [w in vocab for w in q.lower().split()]
                ref.append(time.perf_counter() - t0)
        p50, p50_ref = statistics.median(times), statistics.median(ref)
        rows.append({
            "db": db, "values": len(index), "columns": len(index.columns), "build_ms": statistics.median(builds) * 1e3,
            "questions": len(questions), "lookup_p50_ms": p50 * 1e3, "lookup_p95_ms": _percentile(times, 0.95) * 1e3,
            "lookup_max_ms": max(times) * 1e3, "ratio_p50_vs_dict": p50 / max(p50_ref, 1e-9),
        })  # fmt: skip
    load_end = os.getloadavg()[0]
    print(f"machine: {machine()}; load average {load:.2f} at start, {load_end:.2f} at end")
    head = f"{'db':<10} {'values':>7} {'cols':>5} {'build ms':>9} {'n q':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'p50 / dict probe':>17}"
    print(head)
    for r in rows:
        print(f"{r['db']:<10} {r['values']:>7} {r['columns']:>5} {r['build_ms']:>9.1f} {r['questions']:>5} "
              f"{r['lookup_p50_ms']:>8.3f} {r['lookup_p95_ms']:>8.3f} {r['lookup_max_ms']:>8.3f} {r['ratio_p50_vs_dict']:>16.1f}x")  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps({"machine": machine(), "load": [load, load_end], "rows": rows}, indent=2), encoding="utf-8")
    return rows


if __name__ == "__main__":
    run_main(main)
