"""The generated samples ``hospital`` and ``projects``: same bytes every build, keys, values, sidecars, CLI.

Both are built in memory from a fixed seed (no download), so these tests need no network; the
ones that go through :func:`load_sample` or the command line use a temporary cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import networkx as nx
import pytest

from data_pipeline.datasets import (
    BUILDER_VERSION,
    SAMPLE_NAMES,
    build_hospital,
    build_projects,
    description_file,
    load_sample,
    resolve_database,
)
from core.graph import JoinPath, SchemaGraph
from core.schema import introspect

BUILDERS: dict[str, Callable[[], bytes]] = {"hospital": build_hospital, "projects": build_projects}

# (fewest, most) rows per table: the sizes the samples were designed for, with some slack.
ROW_RANGES = {
    "hospital": {
        "ks": (14, 14), "ys": (55, 65), "hz": (400, 400), "mz_gh": (1200, 1200), "mz_jz": (1000, 1200),
        "mz_cf": (800, 1000), "mz_cfmx": (1700, 2300), "mz_yp": (75, 90), "yf_kc": (200, 300), "zy_br": (150, 150),
    },
    "projects": {
        "departments": (8, 8), "employees": (70, 70), "clients": (30, 30), "projects": (60, 60),
        "contractors": (40, 40), "contracts": (150, 210), "change_orders": (220, 300), "invoices": (360, 480),
        "timesheets": (1300, 1700),
    },
}  # fmt: skip

TOTAL_ROWS = {"hospital": 6153, "projects": 2631}

# Read off the CREATE TABLE statements: (table, column, referenced table, referenced column).
FKS = {
    "hospital": {
        ("ys", "ks_id", "ks", "ks_id"),
        ("mz_gh", "hz_id", "hz", "hz_id"),
        ("mz_gh", "ks_id", "ks", "ks_id"),
        ("mz_jz", "gh_id", "mz_gh", "gh_id"),
        ("mz_jz", "ys_id", "ys", "ys_id"),
        ("mz_cf", "jz_id", "mz_jz", "jz_id"),
        ("mz_cfmx", "cf_id", "mz_cf", "cf_id"),
        ("mz_cfmx", "yp_id", "mz_yp", "yp_id"),
        ("yf_kc", "yp_id", "mz_yp", "yp_id"),
        ("zy_br", "hz_id", "hz", "hz_id"),
        ("zy_br", "ks_id", "ks", "ks_id"),
        ("zy_br", "zzys_id", "ys", "ys_id"),
    },
    "projects": {
        ("employees", "department_id", "departments", "department_id"),
        ("projects", "client_id", "clients", "client_id"),
        ("projects", "manager_id", "employees", "employee_id"),
        ("projects", "department_id", "departments", "department_id"),
        ("contracts", "project_id", "projects", "project_id"),
        ("contracts", "contractor_id", "contractors", "contractor_id"),
        ("change_orders", "contract_id", "contracts", "contract_id"),
        ("change_orders", "requested_by", "employees", "employee_id"),
        ("invoices", "contract_id", "contracts", "contract_id"),
        ("timesheets", "employee_id", "employees", "employee_id"),
        ("timesheets", "project_id", "projects", "project_id"),
    },
}

# Two legal routes between the same tables, each a different question ("which departments has
# this patient been to" as an outpatient or as an inpatient).
PARALLEL = {
    "hospital": (JoinPath("hz", ("mz_gh",), "ks"), JoinPath("hz", ("zy_br",), "ks")),
    "projects": (JoinPath("employees", (), "projects"), JoinPath("employees", ("timesheets",), "projects")),
}


@pytest.fixture(scope="module")
def built() -> dict[str, bytes]:
    return {name: build() for name, build in BUILDERS.items()}


@pytest.fixture(params=sorted(BUILDERS))
def sample(request: pytest.FixtureRequest, built: dict[str, bytes]) -> Iterator[tuple[str, sqlite3.Connection]]:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(built[request.param])
    yield request.param, conn
    conn.close()


def _tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def _one(conn: sqlite3.Connection, sql: str) -> object:
    return conn.execute(sql).fetchone()[0]


# --------------------------------------------------------------------------- the builds


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_build_is_deterministic_and_fast(name: str, built: dict[str, bytes]) -> None:
    start = time.perf_counter()
    again = BUILDERS[name]()
    assert time.perf_counter() - start < 2.0
    assert hashlib.sha256(again).hexdigest() == hashlib.sha256(built[name]).hexdigest()


def test_row_counts_in_their_ranges(sample: tuple[str, sqlite3.Connection]) -> None:
    name, conn = sample
    counts = {t: _one(conn, f'SELECT count(*) FROM "{t}"') for t in _tables(conn)}
    assert set(counts) == set(ROW_RANGES[name])
    out_of_range = {t: n for t, n in counts.items() if not ROW_RANGES[name][t][0] <= n <= ROW_RANGES[name][t][1]}
    assert out_of_range == {}
    assert sum(counts.values()) == TOTAL_ROWS[name]  # as the sample_databases docstring says


def test_foreign_keys_declared_and_every_one_resolves(sample: tuple[str, sqlite3.Connection]) -> None:
    name, conn = sample
    fks = {(t, r[3], r[2], r[4]) for t in _tables(conn) for r in conn.execute(f'PRAGMA foreign_key_list("{t}")')}
    assert fks == FKS[name]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    for table, column, ref, ref_column in sorted(fks):  # the same, by hand: no dangling or empty reference
        dangling = _one(
            conn,
            f'SELECT count(*) FROM "{table}" WHERE "{column}" IS NULL '
            f'OR "{column}" NOT IN (SELECT "{ref_column}" FROM "{ref}")',
        )
        assert dangling == 0, (table, column)


def test_sidecar_describes_every_table_and_column(sample: tuple[str, sqlite3.Connection]) -> None:
    name, conn = sample
    sidecar = description_file(name)
    assert sidecar is not None and sidecar.name == f"{name}.json"
    doc = json.loads(sidecar.read_text(encoding="utf-8"))["tables"]
    assert sorted(doc) == _tables(conn)
    for table, tdoc in doc.items():
        assert all(tdoc.get(k) for k in ("description", "zh", "description_zh")), table
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        assert sorted(tdoc["columns"]) == sorted(columns), table
        for column, cdoc in tdoc["columns"].items():
            assert set(cdoc) == {"description", "zh"} and all(cdoc.values()), (table, column)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_schema_graph_has_cycles_and_parallel_routes(name: str, built: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / f"{name}.sqlite"
    path.write_bytes(built[name])
    graph = SchemaGraph(introspect(path, descriptions=description_file(name)), max_hops=3)
    assert len(nx.cycle_basis(graph.graph)) >= 3
    routes = Counter((p.anchor, p.target) for p in graph.legal_paths if p.anchor != p.target)
    assert max(routes.values()) >= 2
    first, second = PARALLEL[name]
    assert graph.is_legal(first) and graph.is_legal(second)
    assert (first.anchor, first.target) == (second.anchor, second.target)


# --------------------------------------------------------------------------- the values agree


def test_hospital_values_are_consistent(built: dict[str, bytes]) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(built["hospital"])
    checks = {
        # a prescription's amount is the sum of quantity x unit price of its items
        "amount": """SELECT count(*) FROM mz_cf c WHERE abs(c.cfje - (SELECT sum(m.sl * y.dj) FROM mz_cfmx m
                     JOIN mz_yp y ON y.yp_id = m.yp_id WHERE m.cf_id = c.cf_id)) > 0.005""",
        "empty prescription": "SELECT count(*) FROM mz_cf WHERE cf_id NOT IN (SELECT cf_id FROM mz_cfmx)",
        # the doctor works in the registration's department, was hired by then; dates in order
        "visit": """SELECT count(*) FROM mz_jz j JOIN mz_gh g ON g.gh_id = j.gh_id JOIN ys ON ys.ys_id = j.ys_id
                    WHERE ys.ks_id != g.ks_id OR j.jzrq < g.ghrq OR j.jzrq < ys.rzrq""",
        "prescription date": "SELECT count(*) FROM mz_cf c JOIN mz_jz j ON j.jz_id = c.jz_id WHERE c.kfrq != j.jzrq",
        "expert slot": """SELECT count(*) FROM mz_jz j JOIN mz_gh g ON g.gh_id = j.gh_id JOIN ys ON ys.ys_id = j.ys_id
                          WHERE (g.hb = '专家号') != (ys.zc IN ('主任医师', '副主任医师'))""",
        # 儿科 sees children under 14, 妇产科 women only
        "pediatrics": """SELECT count(*) FROM mz_gh g JOIN hz ON hz.hz_id = g.hz_id JOIN ks ON ks.ks_id = g.ks_id
                         WHERE ks.ksmc = '儿科' AND date(hz.csrq, '+14 years') <= g.ghrq""",
        "gynaecology": """SELECT count(*) FROM mz_gh g JOIN hz ON hz.hz_id = g.hz_id JOIN ks ON ks.ks_id = g.ks_id
                          WHERE ks.ksmc = '妇产科' AND hz.xb != '女'""",
        # the attending doctor is of the ward's department; discharge after admission
        "stay": """SELECT count(*) FROM zy_br z JOIN ys ON ys.ys_id = z.zzys_id
                   WHERE ys.ks_id != z.ks_id OR ys.zc = '住院医师' OR z.ryrq < ys.rzrq OR z.cyrq <= z.ryrq""",
        "shared bed": """SELECT count(*) FROM zy_br a JOIN zy_br b ON a.zy_id < b.zy_id AND a.ks_id = b.ks_id
                         AND a.cwh = b.cwh AND b.ryrq < coalesce(a.cyrq, '9999')
                         AND a.ryrq < coalesce(b.cyrq, '9999')""",
        "after snapshot": "SELECT count(*) FROM mz_gh WHERE ghrq > '2024-06-30' OR ghrq < '2023-01-01'",
    }
    assert {k: _one(conn, sql) for k, sql in checks.items()} == dict.fromkeys(checks, 0)
    assert 0 < _one(conn, "SELECT count(*) FROM zy_br WHERE cyrq IS NULL") < 30  # still in hospital
    assert _one(conn, "SELECT count(DISTINCT ksmc) FROM ks") == 14
    assert _one(conn, "SELECT count(*) FROM mz_jz WHERE zd = '上呼吸道感染'") > 0


def test_projects_values_are_consistent(built: dict[str, bytes]) -> None:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(built["projects"])
    checks = {
        "manager": """SELECT count(*) FROM projects p JOIN employees e ON e.employee_id = p.manager_id
                      WHERE e.department_id != p.department_id""",
        "over budget": """SELECT count(*) FROM projects p
                          WHERE p.budget < (SELECT sum(amount) FROM contracts c WHERE c.project_id = p.project_id)""",
        "over billed": """SELECT count(*) FROM contracts c WHERE
                          (SELECT coalesce(sum(amount), 0) FROM invoices i WHERE i.contract_id = c.contract_id)
                          > c.amount + (SELECT coalesce(sum(amount_delta), 0) FROM change_orders o
                                        WHERE o.contract_id = c.contract_id) + 0.005""",
        "invoice date": """SELECT count(*) FROM invoices i JOIN contracts c ON c.contract_id = i.contract_id
                           WHERE i.issued_date < c.signed_date OR i.issued_date > '2024-06-30'""",
        "change date": """SELECT count(*) FROM change_orders o JOIN contracts c ON c.contract_id = o.contract_id
                          JOIN employees e ON e.employee_id = o.requested_by
                          WHERE o.change_date < c.signed_date OR o.change_date < e.hire_date""",
        "hours": """SELECT count(*) FROM timesheets t JOIN employees e ON e.employee_id = t.employee_id
                    JOIN projects p ON p.project_id = t.project_id
                    WHERE t.work_date < e.hire_date OR t.work_date < p.start_date OR p.status = 'planning'
                    OR strftime('%w', t.work_date) IN ('0', '6') OR t.hours <= 0 OR t.hours > 12""",
        "pending": "SELECT count(*) FROM invoices WHERE status = 'pending' AND issued_date < '2024-06-01'",
        "duplicate numbers": "SELECT count(*) - count(DISTINCT contract_no) FROM contracts",
    }
    assert {k: _one(conn, sql) for k, sql in checks.items()} == dict.fromkeys(checks, 0)
    assert {r[0] for r in conn.execute("SELECT DISTINCT status FROM projects")} == {
        "planning", "active", "on hold", "completed",
    }  # fmt: skip
    assert {r[0] for r in conn.execute("SELECT DISTINCT status FROM invoices")} == {"paid", "pending", "overdue"}


# --------------------------------------------------------------------------- by name, everywhere


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_load_sample_builds_once_into_the_cache(name: str, fresh_cache: Path, built: dict[str, bytes]) -> None:
    assert name in SAMPLE_NAMES
    path = load_sample(name)
    assert path == fresh_cache / "data" / f"{name}.sqlite" == resolve_database(name)
    assert path.read_bytes() == built[name]
    marker = json.loads(path.with_name(f"{name}.sqlite.built.json").read_text(encoding="utf-8"))
    assert marker["builder"] == BUILDER_VERSION and marker["sources"] == {}
    assert marker["sha256"] == hashlib.sha256(built[name]).hexdigest()
    mtime = path.stat().st_mtime_ns
    assert load_sample(name) == path and path.stat().st_mtime_ns == mtime  # not rebuilt


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_build_command_takes_the_sample_name(name: str, fresh_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "data_pipeline.build", "--db", name, "--out", str(out), "--samples-per-path", "3"],
        capture_output=True, text=True, timeout=300, env=os.environ | {"COLUMNS": "120"}, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    samples = [json.loads(line) for line in lines]
    assert samples and {s["db"] for s in samples} == {name}
    assert {s["language"] for s in samples} == {"en", "zh"}
