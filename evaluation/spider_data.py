"""Training data for the Spider dev routing benchmark, generated from the schemas alone.

Spider's ``tables.json`` has schemas but no rows. For each of the 20 dev databases this module
takes the empty SQLite file with its keys (:func:`data_pipeline.datasets.spider_schema_sqlite`)
and runs the ordinary build on it (:func:`data_pipeline.build_dataset`): every table gets
synthetic rows in a copy (:func:`data_pipeline.synthesize.synthesize_rows`), then template
questions with gold paths and gold SQL are generated for every legal path. Spider's
human-written questions (``dev.json``) are read only for the list of database ids; they never
enter the generated data, which is what routers are trained on.

    python -m evaluation.spider_data --out runs/spider_dev_data

Layout::

    OUT/<db_id>/database.sqlite   the schema with synthetic rows (gold SQL runs here)
    OUT/<db_id>/schema.json, samples.jsonl, summary.json   as python -m data_pipeline.build writes
    OUT/index.json                one row per database of the last run (:class:`SpiderDataRow`)
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from core.cli import parse, run_main
from data_pipeline.datasets import spider_dev, spider_schema_sqlite
from core.errors import DataError
from core.graph import DEFAULT_MAX_HOPS
from core.io import ensure_writable_dir, write_json
from data_pipeline.pipeline import BuildConfig, build_dataset
from data_pipeline.synthesize import ROWS_PER_TABLE

INDEX_FILE = "index.json"

_BUILD_DEFAULTS = {f.name: f.default for f in fields(BuildConfig)}
"""Spider's data sets are built with the defaults every data set gets (``python -m data_pipeline.build``)."""


@dataclass(frozen=True)
class SpiderDataRow:
    """What was built for one database.

    Attributes:
        db_id: Spider's database id.
        tables, legal_paths: size of the schema (paths up to ``max_hops``).
        covered_paths: legal paths with at least one generated question.
        samples: generated questions.
        synthetic_rows: rows synthesized, all tables together.
        gold_with_rows: share of gold SQL returning rows (1.0 expected).
        seconds: wall time of this database's build.
        warnings: build warnings other than the expected "tables without rows" note.
        out: the data set folder.
    """

    db_id: str
    tables: int
    legal_paths: int
    covered_paths: int
    samples: int
    synthetic_rows: int
    gold_with_rows: float
    seconds: float
    warnings: tuple[str, ...]
    out: str


def spider_dev_db_ids() -> list[str]:
    """The 20 database ids of Spider's dev split, sorted. Raises DownloadError like :func:`spider_dev`."""
    return sorted({str(q["db_id"]) for q in spider_dev()})


def build_spider_dev_datasets(
    out_root: str | Path,
    db_ids: Sequence[str] | None = None,
    samples_per_path: int = _BUILD_DEFAULTS["samples_per_path"],
    max_hops: int = DEFAULT_MAX_HOPS,
    seed: int = 0,
    *,
    languages: str = "en,zh",
    synthetic_rows: int = ROWS_PER_TABLE,
    unfiltered_share: float = _BUILD_DEFAULTS["unfiltered_share"],
    hop_balance: float = _BUILD_DEFAULTS["hop_balance"],
) -> dict[str, Path]:
    """Build one generated data set per Spider database into ``out_root/<db_id>/``.

    Args:
        out_root: parent folder (created); ``index.json`` there lists a :class:`SpiderDataRow`
            per database.
        db_ids: databases to build; default: the 20 of Spider dev. Any ``tables.json`` id works.
        samples_per_path, max_hops, seed, languages, unfiltered_share, hop_balance: as in
            :class:`~data_pipeline.pipeline.BuildConfig`.
        synthetic_rows: rows synthesized per table.

    Returns:
        ``{db_id: data set folder}`` in the order built.

    Raises:
        SchemaError: an unknown ``db_id`` (close matches suggested).
        DownloadError: Spider's files cannot be fetched.
        Route2SQLError: ``out_root`` cannot be written; any build error of one database.
    """
    root = ensure_writable_dir(out_root)
    ids = list(db_ids) if db_ids is not None else spider_dev_db_ids()
    built: dict[str, Path] = {}
    rows: list[SpiderDataRow] = []
    for db_id in ids:
        start = time.perf_counter()
        schema_db = spider_schema_sqlite(db_id)
        cfg = BuildConfig(
            db=str(schema_db),
            out=root / db_id,
            max_hops=max_hops,
            seed=seed,
            samples_per_path=samples_per_path,
            languages=languages,
            synthesize_empty=True,
            synthetic_rows=synthetic_rows,
            unfiltered_share=unfiltered_share,
            hop_balance=hop_balance,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds, summary = build_dataset(cfg)
        others = tuple(str(w.message) for w in caught if not str(w.message).startswith("tables without rows:"))
        rows.append(
            SpiderDataRow(
                db_id=db_id,
                tables=len(ds.schema.tables),
                legal_paths=summary["paths"]["legal"],
                covered_paths=summary["paths"]["covered"],
                samples=summary["n_samples"],
                synthetic_rows=sum(summary["synthesized_tables"].values()),
                gold_with_rows=summary["gold_sql"]["share_with_rows"],
                seconds=round(time.perf_counter() - start, 3),
                warnings=others,
                out=str(cfg.out),
            )
        )
        built[db_id] = Path(cfg.out)
    write_json(root / INDEX_FILE, [asdict(r) for r in rows])
    return built


@dataclass
class SpiderDataConfig:
    """Generate routing training data for Spider's dev databases from their schemas (synthetic rows, template questions)."""

    out: Path
    """Output folder: one data set folder per database plus index.json."""
    db_ids: str = ""
    """Comma-separated database ids (default: the 20 of Spider dev)."""
    samples_per_path: int = _BUILD_DEFAULTS["samples_per_path"]
    """Questions per legal path after paraphrasing, on average (at least 3)."""
    max_hops: int = DEFAULT_MAX_HOPS
    """Longest join path, in joins."""
    seed: int = 0
    """Random seed (rows and questions)."""
    languages: str = "en,zh"
    """Comma-separated question languages: en, zh or both."""
    synthetic_rows: int = ROWS_PER_TABLE
    """Synthetic rows per table."""
    unfiltered_share: float = _BUILD_DEFAULTS["unfiltered_share"]
    """Share of each path's seed questions written without a filter value ("How many singers are there?"), rounded per path; the same default as data_pipeline.build."""
    hop_balance: float = _BUILD_DEFAULTS["hop_balance"]
    """How far questions move from join counts with many paths to those with few: 0 gives every path the same number, 1 every join count the same share; the same default as data_pipeline.build."""


def print_index(rows: Sequence[SpiderDataRow]) -> None:
    """Print one line per database and a total line as a rich table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Spider dev: generated training data")
    table.add_column("db_id", no_wrap=True)
    for c in ("tables", "paths", "covered", "samples", "synth rows", "gold rows", "s"):
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(
            r.db_id, str(r.tables), str(r.legal_paths), str(r.covered_paths), str(r.samples), str(r.synthetic_rows),
            f"{r.gold_with_rows:.0%}", f"{r.seconds:.2f}",
        )  # fmt: skip
    table.add_row(
        "total", str(sum(r.tables for r in rows)), str(sum(r.legal_paths for r in rows)),
        str(sum(r.covered_paths for r in rows)), str(sum(r.samples for r in rows)),
        str(sum(r.synthetic_rows for r in rows)), "", f"{sum(r.seconds for r in rows):.2f}",
    )  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 110)  # a log file gets whole numbers, not ellipses
    console.print(table)


def load_index(out_root: str | Path) -> list[SpiderDataRow]:
    """Rows of ``out_root/index.json`` written by :func:`build_spider_dev_datasets`.

    Raises:
        DataError: the file is missing or malformed (named).
    """
    path = Path(out_root) / INDEX_FILE
    if not path.is_file():
        raise DataError("no index.json; build with python -m evaluation.spider_data", where=Path(out_root))
    try:
        return [SpiderDataRow(**{**r, "warnings": tuple(r["warnings"])}) for r in json.loads(path.read_text("utf-8"))]
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise DataError(f"malformed index ({exc})", where=path) from exc


def main(argv: Sequence[str] | None = None) -> list[SpiderDataRow]:
    """Command-line entry: build every database, print the table and any unexpected warning."""
    cfg = parse(SpiderDataConfig, argv, description=SpiderDataConfig.__doc__)
    ids = [x.strip() for x in cfg.db_ids.split(",") if x.strip()] or None
    start = time.perf_counter()
    build_spider_dev_datasets(
        cfg.out, ids, cfg.samples_per_path, cfg.max_hops, cfg.seed, languages=cfg.languages, synthetic_rows=cfg.synthetic_rows,
        unfiltered_share=cfg.unfiltered_share, hop_balance=cfg.hop_balance,
    )
    rows = load_index(cfg.out)
    print_index(rows)
    for r in rows:
        for w in r.warnings:
            print(f"warning: {r.db_id}: {w}", file=sys.stderr)
    print(f"wrote {len(rows)} data sets under {cfg.out} ({time.perf_counter() - start:.1f} s)")
    return rows


if __name__ == "__main__":
    run_main(main)
