"""Command line: ``python -m data_pipeline.build`` builds a question data set and prints its summary.

    python -m data_pipeline.build --db northwind --out runs/data/northwind
    python -m data_pipeline.build --db shop.sqlite --descriptions shop.json --out runs/data/shop
    python -m data_pipeline.build --db shop.sqlite --out runs/data/shop --no-synthesize-empty
    python -m data_pipeline.build --db shop.sqlite --out runs/data/shop --unfiltered-share 0.3
    python -m data_pipeline.build --backend mongodb --uri mongodb://127.0.0.1:27017 --db northwind --out runs/data/nw-mongo

With ``--backend mongodb`` the schema is read from the server and every gold query is an
aggregation pipeline (JSON, in each sample's ``meta.pipeline``) that ran there; the server is
only read. Options are the fields of :class:`~data_pipeline.pipeline.BuildConfig` (``--help`` lists them);
the work is :func:`~data_pipeline.pipeline.build_dataset`. A user's mistake (missing or
non-SQLite file, unknown sample, unwritable folder, unreachable LLM endpoint or MongoDB server) is one line on
stderr and exit status 2; warnings (no foreign keys, empty tables filled with synthetic rows or
skipped) are ``warning:`` lines. ``--no-synthesize-empty`` is short for
``--synthesize-empty False``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from data_pipeline.pipeline import BuildConfig, build_dataset

__all__ = ["BuildConfig", "build_dataset", "main", "print_summary"]


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def print_summary(summary: dict[str, Any]) -> None:
    """Print the summary as rich tables (overview, hops, splits)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    n = summary["n_samples"]
    over = Table(title=f"data set: {summary['db']}", show_header=False)
    over.add_column("what")
    over.add_column("value", justify="right")
    paths = summary["paths"]
    pp = summary["per_path"]
    rows = [
        ("samples", str(n)),
        ("legal paths / used / covered", f"{paths['legal']} / {paths['used']} / {paths['covered']}"),
        ("skipped paths", str(len(paths["skipped"]))),
        ("samples per path (min / median / max)", f"{pp['min']} / {pp['median']:g} / {pp['max']}"),
        ("null via (paths / samples)", f"{summary['null_via_share']['paths']:.0%} / {summary['null_via_share']['samples']:.0%}"),
        ("languages", ", ".join(f"{k} {v}" for k, v in summary["languages"].items())),
        ("real / fuzzy", f"{summary['entity_kinds'].get('real', 0)} / {summary['entity_kinds'].get('fuzzy', 0)} ({summary['fuzzy_share']:.0%} fuzzy)"),
        ("fuzz kinds", ", ".join(f"{k} {v}" for k, v in summary["fuzz_kinds"].items()) or "-"),
        ("difficulty", ", ".join(f"{k} {v}" for k, v in summary["difficulty"].items())),
        ("families", ", ".join(f"{k} {v}" for k, v in summary["families"].items())),
        ("templates used (held out)", f"{summary['templates']['used']} ({summary['templates']['heldout_used']})"),
        ("dropped", ", ".join(f"{k} {v}" for k, v in summary["dropped"].items())),
        ("gold SQL with rows", f"{summary['gold_sql']['share_with_rows']:.0%} (min {summary['gold_sql']['min_rows']} rows)"),
        ("value named alone / verb / question word", f"{summary['natural_share']:.0%} of samples"),
        ("route ambiguity (masked by table / strict)",
         f"{summary['route_ambiguity']['by_table']:.1%} / {summary['route_ambiguity']['strict']:.1%}"),
        ("value index", "-" if summary["value_index"] is None else
         f"{summary['value_index']['values']} values in {summary['value_index']['columns']} columns"
         + (f", capped: {', '.join(summary['value_index']['capped'])}" if summary["value_index"]["capped"] else "")),
        ("human-written questions", str(summary["splits"].get("human", 0))),
        ("synthetic rows", ", ".join(f"{k} {v}" for k, v in summary.get("synthesized_tables", {}).items()) or "-"),
        ("time", f"{summary['elapsed_s']:.2f} s"),
    ]
    for k, v in rows:
        over.add_row(k, v)
    console.print(over)
    hops = Table(title="hops")
    for c in ("hops", "paths", "samples", "share"):
        hops.add_column(c, justify="right")
    for h, d in summary["hops"].items():
        hops.add_row(h, str(d["paths"]), str(d["samples"]), f"{_share(d['samples'], n):.0%}")
    splits = Table(title="splits")
    for c in ("split", "samples", "share"):
        splits.add_column(c, justify="right")
    for sp, v in summary["splits"].items():
        if sp != "human":
            splits.add_row(sp, str(v), f"{_share(v, n):.0%}")
    console.print(hops)
    console.print(splits)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry: parse ``argv``, build, print warnings and the summary; returns the summary."""
    cfg = parse(BuildConfig, argv, description=__doc__.splitlines()[0] if __doc__ else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _, summary = build_dataset(cfg)
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
    print_summary(summary)
    print(f"wrote {Path(cfg.out) / 'samples.jsonl'} ({summary['n_samples']} samples, {summary['elapsed_s']:.2f} s)")
    return summary


if __name__ == "__main__":
    run_main(main)
