"""Synthetic rows: keys, NOT NULL, types and foreign keys hold; the input is never touched.

The schema below packs the quirks the filler must survive into seven small tables: a nullable
and a NOT NULL self-reference, a composite primary key made of two foreign keys, a foreign key
to a column that is not unique (Spider's "foreign key mismatch"), a BLOB column, a two-table
cycle, and a table that already has rows.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path

import pytest

from core.errors import ConfigError, SchemaError
from core.catalog import read_catalog
from data_pipeline.synthesize import fill_order, fk_violations, synthesize_rows

QUIRKS_DDL = """
CREATE TABLE dept (id INTEGER PRIMARY KEY, name TEXT NOT NULL, budget REAL);
CREATE TABLE staff (id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept_id INTEGER NOT NULL REFERENCES dept(id),
    boss_id INTEGER REFERENCES staff(id), hired DATE, is_manager BOOLEAN);
CREATE TABLE skill (code VARCHAR(8) PRIMARY KEY, description TEXT);
CREATE TABLE staff_skill (staff_id INTEGER NOT NULL REFERENCES staff(id), skill_code VARCHAR(8) NOT NULL
    REFERENCES skill(code), level INTEGER, PRIMARY KEY (staff_id, skill_code));
CREATE TABLE region (region_id INTEGER PRIMARY KEY, city TEXT NOT NULL);
CREATE TABLE office (id INTEGER PRIMARY KEY, city TEXT NOT NULL REFERENCES region(city), floor_plan BLOB);
CREATE TABLE part (id INTEGER PRIMARY KEY, parent_id INTEGER NOT NULL REFERENCES part(id), title TEXT);
CREATE TABLE a (id INTEGER PRIMARY KEY, b_id INTEGER REFERENCES b(id));
CREATE TABLE b (id INTEGER PRIMARY KEY, a_id INTEGER NOT NULL REFERENCES a(id));
INSERT INTO dept VALUES (1, 'Sales', 100.0), (7, 'Research', 250.5);
"""
EMPTY = ["a", "b", "office", "part", "region", "skill", "staff", "staff_skill"]


def make_quirks(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript(QUIRKS_DDL)
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def quirks(tmp_path_factory):
    root = tmp_path_factory.mktemp("quirks")
    src = make_quirks(root / "in.sqlite")
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    report = synthesize_rows(src, root / "out.sqlite", rows_per_table=30, seed=3)
    return src, before, report, sqlite3.connect(root / "out.sqlite")


def _fk_pairs(con: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return [(t, r[3], r[2], r[4]) for t in tables for r in con.execute(f'PRAGMA foreign_key_list("{t}")')]


def test_report_counts_and_the_input_is_untouched(quirks):
    src, before, report, _ = quirks
    assert report.rows == dict.fromkeys(EMPTY, 30)  # dept has rows: it is not filled
    order = list(report.rows)
    assert order.index("staff") < order.index("staff_skill") and order.index("skill") < order.index("staff_skill")
    assert report.short == {} and report.fk_violations == {} and report.notes == ()
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert sqlite3.connect(src).execute("SELECT COUNT(*) FROM staff").fetchone()[0] == 0


def test_every_foreign_key_value_exists_in_the_referenced_column(quirks):
    _, _, _, con = quirks
    pairs = _fk_pairs(con)
    assert len(pairs) == 8
    for table, column, ref, ref_col in pairs:
        values = {r[0] for r in con.execute(f'SELECT "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL')}
        targets = {r[0] for r in con.execute(f'SELECT "{ref_col}" FROM "{ref}"')}
        assert values and values <= targets, (table, column)
    # staff draws its department from the two rows that were already there
    assert {r[0] for r in con.execute("SELECT dept_id FROM staff")} == {1, 7}


def test_foreign_key_to_a_non_unique_column(quirks):
    _, _, _, con = quirks
    n, distinct = con.execute("SELECT COUNT(*), COUNT(DISTINCT city) FROM region").fetchone()
    assert n == 30 and distinct < n  # region.city repeats, so SQLite would report "foreign key mismatch"
    con.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.OperationalError, match="foreign key mismatch"):
        con.execute("PRAGMA foreign_key_check(office)").fetchall()
    con.execute("PRAGMA foreign_keys = OFF")
    # every office joins to at least one region row
    assert con.execute("SELECT COUNT(DISTINCT o.id) FROM office o JOIN region r ON r.city = o.city").fetchone()[0] == 30


def test_keys_not_null_and_types(quirks):
    _, _, _, con = quirks
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT staff_id || '/' || skill_code) FROM staff_skill").fetchone() == (30, 30)
    assert con.execute("SELECT MIN(id), MAX(id), COUNT(DISTINCT id) FROM staff").fetchone() == (1, 30, 30)
    assert con.execute("SELECT COUNT(*) FROM staff WHERE name IS NULL OR dept_id IS NULL").fetchone()[0] == 0
    names = [r[0] for r in con.execute("SELECT name FROM staff ORDER BY id LIMIT 3")]
    assert names == ["Staff 1", "Staff 2", "Staff 3"]
    codes = [r[0] for r in con.execute("SELECT code FROM skill ORDER BY code LIMIT 2")]
    assert codes == ["S001", "S002"]
    assert con.execute("SELECT description FROM skill WHERE code = 'S004'").fetchone() == ("Skill 4",)
    hired = [r[0] for r in con.execute("SELECT hired FROM staff")]
    assert all(re.fullmatch(r"20[0-2]\d-\d\d-\d\d", h) for h in hired)
    assert {r[0] for r in con.execute("SELECT DISTINCT is_manager FROM staff")} == {0, 1}
    assert {r[0] for r in con.execute("SELECT DISTINCT typeof(budget) FROM dept WHERE id > 7")} <= {"real"}
    assert {r[0] for r in con.execute("SELECT DISTINCT typeof(floor_plan) FROM office")} == {"text"}


def test_self_references_point_at_earlier_rows(quirks):
    _, _, _, con = quirks
    rows = con.execute("SELECT id, boss_id FROM staff ORDER BY id").fetchall()
    assert rows[0] == (1, None)  # the first row is the root: the column allows NULL
    assert all(boss is not None and boss < sid for sid, boss in rows[1:])
    parts = con.execute("SELECT id, parent_id FROM part ORDER BY id").fetchall()
    assert parts[0] == (1, 1)  # NOT NULL: the first row points at itself
    assert all(parent < pid for pid, parent in parts[1:])


def test_cycle_is_broken_at_the_nullable_key_and_filled_last(quirks):
    _, _, report, con = quirks
    assert report.deferred == ("a(b_id) -> b(id)",)
    assert con.execute("SELECT COUNT(*) FROM a WHERE b_id IS NULL OR b_id NOT IN (SELECT id FROM b)").fetchone()[0] == 0
    assert con.execute("SELECT COUNT(*) FROM b WHERE a_id NOT IN (SELECT id FROM a)").fetchone()[0] == 0
    catalog, _ = read_catalog(con)
    order, deferred = fill_order(catalog, ["a", "b", "part"])
    assert order == ["part", "a", "b"] and [str(d) for d in deferred] == ["a(b_id) -> b(id)"]


def test_fk_violations_counts_dangling_values(tmp_path, quirks):
    _, _, _, con = quirks
    catalog, _ = read_catalog(con)
    assert fk_violations(con, catalog, list(catalog)) == {}
    copy = sqlite3.connect(tmp_path / "c.sqlite")
    con.backup(copy)
    copy.execute("UPDATE staff SET dept_id = 99 WHERE id <= 2")
    assert fk_violations(copy, catalog, ["staff"]) == {"staff(dept_id) -> dept(id)": 2}


def test_same_seed_same_file_other_seed_other_rows(tmp_path):
    src = make_quirks(tmp_path / "in.sqlite")
    for name, seed in (("x", 5), ("y", 5), ("z", 6)):
        synthesize_rows(src, tmp_path / f"{name}.sqlite", seed=seed, rows_per_table=12)
    x, y, z = ((tmp_path / f"{n}.sqlite").read_bytes() for n in "xyz")
    assert x == y
    assert x != z
    dump = lambda p: list(sqlite3.connect(p).iterdump())  # noqa: E731
    assert dump(tmp_path / "x.sqlite") != dump(tmp_path / "z.sqlite")


def test_given_tables_keep_their_rows_and_new_keys_follow(tmp_path):
    src = make_quirks(tmp_path / "in.sqlite")
    report = synthesize_rows(src, tmp_path / "out.sqlite", tables=["DEPT", "staff"], rows_per_table=5)
    assert report.rows == {"dept": 5, "staff": 5}
    con = sqlite3.connect(tmp_path / "out.sqlite")
    assert con.execute("SELECT id, name FROM dept ORDER BY id").fetchall()[:2] == [(1, "Sales"), (7, "Research")]
    assert [r[0] for r in con.execute("SELECT id FROM dept ORDER BY id")][2:] == [8, 9, 10, 11, 12]
    assert con.execute("SELECT COUNT(*) FROM skill").fetchone()[0] == 0  # not asked for, not referenced


def test_an_empty_referenced_table_is_filled_too(tmp_path):
    src = make_quirks(tmp_path / "in.sqlite")
    report = synthesize_rows(src, tmp_path / "out.sqlite", tables=["office"], rows_per_table=4)
    assert report.rows == {"region": 4, "office": 4}
    assert report.notes == ("region is empty and referenced by office; filled too",)
    assert report.fk_violations == {}


def test_bad_arguments(tmp_path):
    src = make_quirks(tmp_path / "in.sqlite")
    with pytest.raises(SchemaError, match="unknown table 'nope'"):
        synthesize_rows(src, tmp_path / "o.sqlite", tables=["nope"])
    with pytest.raises(ConfigError, match="rows_per_table"):
        synthesize_rows(src, tmp_path / "o.sqlite", rows_per_table=0)
    with pytest.raises(ConfigError, match="never modified"):
        synthesize_rows(src, src)
    with pytest.raises(SchemaError, match="database file not found"):
        synthesize_rows(tmp_path / "missing.sqlite", tmp_path / "o.sqlite")
    assert not (tmp_path / "o.sqlite").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["in.sqlite"]  # no temporary file left behind
