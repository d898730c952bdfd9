"""examples/fresh_question_logs.py: question logs hold only questions the router's data set lacks, without labels."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from core.dataset import load_dataset

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "fresh_question_logs.py"


def test_logs_hold_fresh_questions_only(tiny_db, tmp_path, monkeypatch):
    from data_pipeline.build import main as build

    for name, n in (("data", "4"), ("fresh", "12")):
        build(["--db", str(tiny_db), "--out", str(tmp_path / name / "shop"), "--samples-per-path", n, "--languages", "en"])
    monkeypatch.setattr(sys, "argv", ["fresh_question_logs.py", "--data", str(tmp_path / "data"), "--fresh", str(tmp_path / "fresh"),
                                      "--out", str(tmp_path / "logs"), "--per-data-set", "25"])  # fmt: skip
    runpy.run_path(str(SCRIPT), run_name="__main__")
    rows = [json.loads(x) for x in (tmp_path / "logs" / "shop.jsonl").read_text().splitlines()]
    seen = {s.question for s in load_dataset(tmp_path / "data" / "shop").samples}
    fresh = {s.question for s in load_dataset(tmp_path / "fresh" / "shop").samples}
    assert len(rows) == min(25, len(fresh - seen)) and len(rows) > 0
    assert all(set(r) == {"question", "lang"} and r["question"] in fresh - seen for r in rows)
    assert len({r["question"] for r in rows}) == len(rows)
