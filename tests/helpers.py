"""Test helpers: the SQL reward fixture loader and the databases its cases run on.

``tests/fixtures/sql_rewards.sql`` holds one case per ``-- name:`` line (format at the top of
that file), in the manner of sqlglot's ``tests/fixtures/optimizer/*.sql`` and
``tests/helpers.py``: the cases are data, one loader reads them for every test.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from conftest import make_tiny_shop

from generator.prompt import render_completion

FIXTURES = Path(__file__).parent / "fixtures"

BIG_SHOP_ROWS = 3000
"""Rows in each of the three largest tables of the big shop: their product has 2.7e10 rows."""


@dataclass(frozen=True)
class SQLCase:
    """One fixture case.

    Attributes:
        name: unique id (pytest parameter id).
        db: which database it runs on: ``shop``, ``big_shop`` or ``clinic`` (:func:`make_case_dbs`).
        question: the question the gold SQL answers.
        gold: the gold SQL.
        body: the case's text: the SQL (``wrap == "answer"``) or the whole completion (``"raw"``);
            it starts at the first line that is neither blank nor a ``--`` comment.
        wrap: ``"answer"`` (body goes into the answer format) or ``"raw"`` (body is the completion).
        expect: expected component values (``None`` allowed), e.g. ``{"execution": 0.0}``.
        reason: a substring the execution ``reason`` must contain ("" for no check).
        tags: labels such as ``bad`` (hostile input: must leave the database byte-identical).
        line: line of the ``-- name:`` in the fixture file.
    """

    name: str
    db: str
    question: str
    gold: str
    body: str
    wrap: str
    expect: dict[str, float | None]
    reason: str
    tags: frozenset[str] = field(default_factory=frozenset)
    line: int = 0

    @property
    def completion(self) -> str:
        """The completion the rewards see."""
        if self.wrap == "raw":
            return self.body
        return render_completion(self.body, f"Answer: {self.question}")


def _parse_expect(text: str, where: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{where}: expect item {item!r} is not key=value")
        out[key.strip()] = None if value.strip() == "None" else float(value)
    return out


def load_sql_cases(name: str = "sql_rewards.sql") -> list[SQLCase]:
    """Read every case of ``tests/fixtures/<name>``.

    Raises:
        ValueError: naming the file and line of a malformed case (unknown key, missing field,
            duplicate name, unknown wrap).
    """
    path = FIXTURES / name
    cases: list[SQLCase] = []
    current: dict[str, str] | None = None
    body: list[str] = []
    start = 0

    def finish() -> None:
        if current is None:
            return
        where = f"{path}:{start}"
        for key in ("name", "db", "question", "gold", "expect"):
            if key not in current:
                raise ValueError(f"{where}: case lacks '-- {key}:'")
        wrap = current.get("wrap", "answer")
        if wrap not in ("answer", "raw"):
            raise ValueError(f"{where}: wrap must be 'answer' or 'raw', got {wrap!r}")
        text = "\n".join(body).strip("\n")
        cases.append(SQLCase(
            name=current["name"], db=current["db"], question=current["question"], gold=current["gold"],
            body=text, wrap=wrap, expect=_parse_expect(current["expect"], where),
            reason=current.get("reason", ""), tags=frozenset(current.get("tags", "").split()), line=start,
        ))  # fmt: skip

    keys = {"name", "db", "question", "gold", "wrap", "expect", "reason", "tags"}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("-- name:"):
            finish()
            current, body, start = {}, [], i
        if current is None:
            continue  # the file header
        if not body and (line.startswith("--") or not line.strip()):
            # before the body: "-- key: value" lines, free comments, blank lines
            key, sep, value = line[2:].partition(":")
            if sep and key.strip() in keys:
                current[key.strip()] = value.strip()
            elif sep and key.strip().isidentifier():
                raise ValueError(f"{path}:{i}: unknown key {key.strip()!r}")
            continue
        body.append(line)
    finish()
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"{path}: duplicate case names {sorted(dupes)}")
    return cases


def make_big_shop(path: Path, n: int = BIG_SHOP_ROWS) -> Path:
    """The tiny shop's schema with ``n`` customers, ``n`` orders and ``n`` order items.

    A cross join of those three tables has ``n**3`` rows: no query over it finishes in seconds.
    """
    make_tiny_shop(path)
    conn = sqlite3.connect(path)
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                     [(i, f"Customer {i}", "Lyon") for i in range(100, 100 + n)])  # fmt: skip
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?)",
                     [(i, 100 + i % n, "2024-04-01") for i in range(100, 100 + n)])  # fmt: skip
    conn.executemany('INSERT INTO "order items" VALUES (?, ?, ?, ?)',
                     [(i, 100 + i % n, 1 + i % 3, 1) for i in range(100, 100 + n)])  # fmt: skip
    conn.commit()
    conn.close()
    return path


CLINIC_DDL = """
CREATE TABLE mz_cf (cfid INTEGER PRIMARY KEY, cfrq TEXT, ypid TEXT, ypsl INTEGER);
CREATE TABLE yf_kc (kcid INTEGER PRIMARY KEY, rksj TEXT, ypmc TEXT);
INSERT INTO mz_cf VALUES (1, '2024-05-03', 'METFORMIN_500', 2), (2, '2024-05-20', 'METFORMIN_500', 3),
    (3, '2024-05-21', 'INSULIN_GLARGINE', 1), (4, '2024-06-02', 'METFORMIN_500', 5);
INSERT INTO yf_kc VALUES (1, '2024-05-02', '二甲双胍'), (2, '2024-05-09', '胰岛素');
"""


def make_clinic(path: Path) -> Path:
    """Seed 000's two outpatient tables (prescriptions ``mz_cf``, pharmacy stock ``yf_kc``), a few rows."""
    conn = sqlite3.connect(path)
    conn.executescript(CLINIC_DDL)
    conn.commit()
    conn.close()
    return path


def make_case_dbs(folder: Path) -> dict[str, Path]:
    """Every database a fixture case may name, created in ``folder``."""
    return {
        "shop": make_tiny_shop(folder / "shop.sqlite"),
        "big_shop": make_big_shop(folder / "big_shop.sqlite"),
        "clinic": make_clinic(folder / "clinic.sqlite"),
    }


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
