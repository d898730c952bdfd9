"""How long the data pipeline takes: building the Northwind (and Chinook) data sets, and
enumerating the legal paths of the largest Spider schema.

    python benchmarks/bench_data_pipeline.py
    python benchmarks/bench_data_pipeline.py --rounds 5 --max-hops 4

Each build runs :func:`data_pipeline.build_dataset` with the defaults into a temporary folder
(introspection, profiling, the four stages, every gold query executed, splits, files written).
Path enumeration builds a fresh :class:`~core.graph.SchemaGraph` each round, so the
networkx graph and ``legal_paths`` are computed from scratch. Times are medians over rounds.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main
from data_pipeline.datasets import spider_tables
from core.graph import SchemaGraph
from data_pipeline.pipeline import BuildConfig, build_dataset
from data_pipeline.spider import largest_spider_schema


@dataclass
class Args:
    """Options of the data-pipeline benchmark."""

    rounds: int = 3
    """Repetitions of each measurement (the median is reported)."""
    max_hops: int = 3
    """Hop limit for data sets and path enumeration."""
    samples: tuple[str, ...] = ("northwind", "chinook")
    """Sample databases to build."""


def time_build(name: str, max_hops: int, rounds: int) -> tuple[float, dict]:
    times, summary = [], {}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            _, summary = build_dataset(BuildConfig(db=name, out=Path(tmp) / name, max_hops=max_hops))
            times.append(time.perf_counter() - start)
    return statistics.median(times), summary


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    args = parse(Args, description="Data-pipeline timings")
    rows: list[tuple[str, str, str, str]] = []
    for name in args.samples:
        t, summary = time_build(name, args.max_hops, args.rounds)
        rows.append(
            (
                f"build {name} data set",
                f"{summary['n_samples']} samples, {summary['paths']['covered']} of {summary['paths']['legal']} paths",
                f"{t:.2f} s",
                f"{1000 * t / summary['n_samples']:.2f} ms/sample",
            )
        )
    spider = largest_spider_schema(spider_tables())
    times, n_paths = [], 0
    for _ in range(args.rounds):
        start = time.perf_counter()
        n_paths = len(SchemaGraph(spider, max_hops=args.max_hops).legal_paths)
        times.append(time.perf_counter() - start)
    t = statistics.median(times)
    rows.append(
        (
            f"legal paths, largest Spider schema ({spider.name})",
            f"{len(spider.tables)} tables, {len(spider.foreign_keys)} FKs, {n_paths} paths",
            f"{1000 * t:.1f} ms",
            f"{1e6 * t / max(n_paths, 1):.1f} us/path",
        )
    )
    table = Table(title=f"data pipeline ({args.rounds} rounds, median; max_hops={args.max_hops})", caption=machine())
    for col in ("what", "size", "time", "per item"):
        table.add_column(col, justify="left" if col in ("what", "size") else "right")
    for r in rows:
        table.add_row(*r)
    Console().print(table)


if __name__ == "__main__":
    run_main(main)
