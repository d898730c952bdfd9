"""examples/score_answers.py: generator.ask answers scored by their rows against the gold SQL."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "score_answers.py"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def _fail(monkeypatch, capsys, *argv: str) -> str:
    """The message the script prints before it exits with status 2."""
    monkeypatch.setattr(sys, "argv", ["score_answers.py", *argv])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    assert exc.value.code == 2
    return capsys.readouterr().err.rstrip("\n")


def test_rows_not_sql_text_decide_and_routes_are_counted(tiny_db, tmp_path, monkeypatch, capsys):
    path = {"anchor": "customers", "via": [], "target": "customers"}
    questions = _write(tmp_path / "q.jsonl", [
        {"question": "Where does Alice Martin live?", "language": "en", "path": path,
         "sql": "SELECT city FROM customers WHERE name = 'Alice Martin'"},
        {"question": "客户有多少？", "language": "zh", "path": path, "sql": "SELECT COUNT(*) FROM customers"},
        {"question": "Names of all customers", "language": "en", "path": path, "sql": "SELECT name FROM customers ORDER BY name"},
    ])  # fmt: skip
    answers = _write(tmp_path / "a.jsonl", [
        # other SQL, same rows: right
        {"question": "Where does Alice Martin live?", "path": path, "uncertain": False,
         "sql": "SELECT c.city FROM customers AS c WHERE c.id = 1"},
        # wrong route, failing SQL
        {"question": "客户有多少？", "path": {"anchor": "orders", "via": [], "target": "orders"}, "uncertain": True,
         "sql": "SELECT COUNT(*) FROM nowhere", "error": "no such table: nowhere"},
        # the gold orders its rows, this answer does not: wrong
        {"question": "Names of all customers", "path": path, "uncertain": False, "sql": "SELECT name FROM customers ORDER BY name DESC"},
    ])  # fmt: skip
    out = tmp_path / "s.json"
    monkeypatch.setattr(sys, "argv", ["score_answers.py", "--questions", str(questions), "--answers", str(answers),
                                      "--db", str(tiny_db), "--json-out", str(out)])  # fmt: skip
    runpy.run_path(str(SCRIPT), run_name="__main__")
    result = json.loads(out.read_text())
    assert (result["route_right"], result["route_n"], result["exec_right"], result["n"]) == (2, 3, 1, 3)
    assert result["by_language"] == {"en": [1, 2], "zh": [0, 1]}
    assert result["by_flag"] == {"sure": [1, 2], "uncertain": [0, 1]}
    printed = capsys.readouterr().out
    assert "rows equal the gold query's: 1 of 3 (33.3%)" in printed and "error: no such table: nowhere" in printed


def test_mismatched_files_and_bad_lines_are_one_line_errors(tiny_db, tmp_path, monkeypatch, capsys):
    questions = _write(tmp_path / "q.jsonl", [{"question": "How many customers?", "sql": "SELECT COUNT(*) FROM customers"}])
    other = _write(tmp_path / "a.jsonl", [{"question": "How many orders?", "sql": "SELECT 1"}])
    msg = _fail(monkeypatch, capsys, "--questions", str(questions), "--answers", str(other), "--db", str(tiny_db))
    assert msg.startswith(f"error: {questions}, {other}: line 1: question 'How many customers?'") and "\n" not in msg
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "How many customers?"}\n\n[1, 2]\n', encoding="utf-8")
    msg = _fail(monkeypatch, capsys, "--questions", str(questions), "--answers", str(bad), "--db", str(tiny_db))
    assert msg == f"error: {bad}:3: each line must be a JSON object"


def test_missing_or_mistyped_fields_and_a_folder_for_json_out_are_one_line_errors(tiny_db, tmp_path, monkeypatch, capsys):
    answers = _write(tmp_path / "a.jsonl", [{"question": "How many customers?", "sql": "SELECT 1"}])
    no_sql = _write(tmp_path / "q1.jsonl", [{"question": "How many customers?"}])
    msg = _fail(monkeypatch, capsys, "--questions", str(no_sql), "--answers", str(answers), "--db", str(tiny_db))
    assert msg == f"error: {no_sql}:1: field 'sql' must be a non-empty str"
    listed = _write(tmp_path / "q2.jsonl", [{"question": "How many customers?", "sql": "SELECT 1", "language": ["en"]}])
    msg = _fail(monkeypatch, capsys, "--questions", str(listed), "--answers", str(answers), "--db", str(tiny_db))
    assert msg == f"error: {listed}:1: field 'language' must be a str or null"
    good = _write(tmp_path / "q3.jsonl", [{"question": "How many customers?", "sql": "SELECT 1"}])
    two = _write(tmp_path / "a2.jsonl", [{"question": "How many customers?"}, {"question": "And orders?"}])
    msg = _fail(monkeypatch, capsys, "--questions", str(good), "--answers", str(two), "--db", str(tiny_db))
    assert msg == f"error: {two}: 1 questions in {good} but 2 answers"
    msg = _fail(monkeypatch, capsys, "--questions", str(good), "--answers", str(answers), "--db", str(tiny_db),
                "--json-out", str(tmp_path))  # fmt: skip
    assert msg == f"error: {tmp_path}: is a folder; give a file name for the output"


@pytest.mark.parametrize("path", [{"anchor": "customers"}, {"anchor": "customers", "via": 5, "target": "orders"},
                                  {"anchor": None, "via": [], "target": "orders"}, "customers"])  # fmt: skip
def test_a_malformed_route_names_its_file_and_line(tiny_db, tmp_path, monkeypatch, capsys, path):
    """It said "path needs fields anchor, via, target" with no file or line; a null anchor was read as the table "None"."""
    good = _write(tmp_path / "q.jsonl", [{"question": "How many customers?", "sql": "SELECT 1"}])
    answers = _write(tmp_path / "a.jsonl", [{"question": "How many customers?", "sql": "SELECT 1", "path": path}])
    msg = _fail(monkeypatch, capsys, "--questions", str(good), "--answers", str(answers), "--db", str(tiny_db))
    assert msg.startswith(f"error: {answers}:1: ") and "path" in msg and "\n" not in msg
