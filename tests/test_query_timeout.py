"""QueryTimeout: raised where a query had to succeed (a human-written question's gold SQL), never by
the executors, whose timed-out queries the rewards score 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import make_tiny_shop

from core.errors import QueryTimeout
from core.graph import SchemaGraph
from data_pipeline.backends.registry import load_backend
from data_pipeline.backends.sqlite import execute_readonly
from data_pipeline.human_sets import load_human_questions

RUNAWAY = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n, customers"


def test_a_gold_sql_past_its_limit_is_a_query_timeout_naming_file_and_line(tmp_path: Path) -> None:
    db = make_tiny_shop(tmp_path / "shop.sqlite")
    f = tmp_path / "mine.jsonl"
    ok = {"question": "list the customers", "sql": "SELECT * FROM customers", "path": {"anchor": "customers", "target": "customers"}}
    slow = ok | {"question": "count forever", "sql": RUNAWAY}
    f.write_text(json.dumps(ok) + "\n" + json.dumps(slow) + "\n", encoding="utf-8")
    with load_backend("sqlite", db) as backend:
        graph = SchemaGraph(backend.introspect(), max_hops=1)
        with pytest.raises(QueryTimeout, match=r"mine.jsonl:2: gold SQL ran past its limit of 0.2 s") as info:
            load_human_questions(f, graph, backend, timeout_s=0.2)
        assert info.value.line == 2 and "\n" not in str(info.value)
        assert len(load_human_questions(_first_line(f), graph, backend, timeout_s=0.2)) == 1


def _first_line(f: Path) -> Path:
    one = f.with_name("one.jsonl")
    one.write_text(f.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    return one


def test_the_executor_reports_a_timeout_without_raising(tmp_path: Path) -> None:
    db = make_tiny_shop(tmp_path / "shop.sqlite")
    res = execute_readonly(db, RUNAWAY, timeout_s=0.2)
    assert not res.ok and res.timed_out and res.error == "timed out after 0.2 s" and res.rows is None
