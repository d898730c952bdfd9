"""Score ``python -m generator.ask --file`` answers against questions with gold SQL and routes.

Both files are JSONL. The questions file is in the format of ``data_pipeline/human/*.jsonl`` and
``evaluation/dev_sets/*.jsonl`` (``question``, ``sql``, optionally ``path`` and ``language``); the
answers file is what ``generator.ask --file Q --out A`` wrote for it, line for line. Each answer's
SQL and its gold SQL are run again read-only on the database (in a worker process stopped at the
10 s timeout) and compared by the Spider test-suite rule (rows as a multiset; in order only when
the gold query has ORDER BY).

    python -m generator.ask --router R --generator G --file evaluation/dev_sets/northwind.jsonl --out A.jsonl
    python examples/score_answers.py --questions evaluation/dev_sets/northwind.jsonl --answers A.jsonl \\
        --db northwind [--json-out scores.json]

Prints route accuracy (full path, where the questions give one), execution accuracy overall, by
language and by the uncertainty flag, and one line per wrong answer. Exits 2 with a one-line
message on a malformed file or when the two files do not hold the same questions.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from core.errors import DataError, Route2SQLError
from core.graph import JoinPath
from core.io import atomic_write_text, ensure_writable_file, read_jsonl_lines, terminal_safe
from data_pipeline.sample_databases import resolve_database
from rewards.sql_execution import ExecutionScorer, gold_is_ordered, results_match


def score(questions: list[dict[str, Any]], answers: list[dict[str, Any]], db: Path,
          timeout_s: float = 10.0) -> dict[str, Any]:  # fmt: skip
    """Score answers question by question.

    Returns:
        ``{"n", "route_right", "route_n", "exec_right", "by_language": {lang: [right, n]},
        "by_flag": {"uncertain"|"sure": [right, n]}, "rows": [per-question dicts]}``.

    Raises:
        ValueError: the two lists differ in length or in a question's text, or a gold query fails.
        DataError: a ``path`` without its anchor or target.
    """
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    out: dict[str, Any] = {"n": len(questions), "route_right": 0, "route_n": 0, "exec_right": 0,
                           "by_language": defaultdict(lambda: [0, 0]), "by_flag": defaultdict(lambda: [0, 0]), "rows": []}  # fmt: skip
    # one worker process with one read-only connection runs every query, killed at the deadline
    with ExecutionScorer(timeout_s=timeout_s, workers=1) as executor:
        for i, (q, a) in enumerate(zip(questions, answers), 1):
            if q.get("question") != a.get("question"):
                raise ValueError(f"line {i}: question {q.get('question')!r} but answer to {a.get('question')!r}")
            gold = executor.execute(db, q["sql"])
            if not gold.ok:
                raise ValueError(f"line {i}: the gold SQL fails: {gold.error}")
            right = False
            if a.get("sql"):
                pred = executor.execute(db, a["sql"])
                right = pred.ok and results_match(pred.rows, gold.rows, ordered=gold_is_ordered(q["sql"]))
            route = None
            if q.get("path"):
                route = bool(a.get("path")) and JoinPath.from_dict(a["path"]) == JoinPath.from_dict(q["path"], line=i)
            if route is not None:
                out["route_n"] += 1
                out["route_right"] += route
            out["exec_right"] += right
            lang = q.get("language") or "?"
            out["by_language"][lang][0] += right
            out["by_language"][lang][1] += 1
            flag = "uncertain" if a.get("uncertain") else "sure"
            out["by_flag"][flag][0] += right
            out["by_flag"][flag][1] += 1
            out["rows"].append({"line": i, "question": q["question"], "route_right": route, "exec_right": right,
                                "path": a.get("path"), "gold_path": q.get("path"), "sql": a.get("sql"),
                                "gold_sql": q["sql"], "error": a.get("error")})  # fmt: skip
    out["by_language"], out["by_flag"] = dict(out["by_language"]), dict(out["by_flag"])
    return out


def read_records(path: Path, required: dict[str, type], optional: dict[str, type]) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, each checked for its fields' types.

    Raises:
        DataError: naming the file and line of a record without a required field or with a field
            of the wrong type (a null optional field is fine).
    """
    records = []
    for line, rec in read_jsonl_lines(path):
        if not isinstance(rec, dict):
            raise DataError("each line must be a JSON object", where=path, line=line)
        for key, kind in required.items():
            if not isinstance(rec.get(key), kind) or (kind is str and not rec[key].strip()):
                raise DataError(f"field {key!r} must be a non-empty {kind.__name__}", where=path, line=line)
        for key, kind in optional.items():
            if rec.get(key) is not None and not isinstance(rec[key], kind):
                raise DataError(f"field {key!r} must be a {kind.__name__} or null", where=path, line=line)
        if rec.get("path") is not None:
            JoinPath.from_dict(rec["path"], where=path, line=line)  # a bad route is named here, with its file and line
        records.append(rec)
    return records


def _pct(k: int, n: int) -> str:
    return f"{k} of {n} ({100 * k / n:.1f}%)" if n else "-"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="Score generator.ask answers against gold SQL and routes.")
    parser.add_argument("--questions", type=Path, required=True, help="JSONL questions with gold sql (and path).")
    parser.add_argument("--answers", type=Path, required=True, help="JSONL answers written by generator.ask --out.")
    parser.add_argument("--db", required=True, help="Sample name or SQLite file the queries run on.")
    parser.add_argument("--json-out", type=Path, help="Also write the scores and per-question rows here.")
    parser.add_argument("--quiet", action="store_true", help="Do not list the wrong answers.")
    args = parser.parse_args(argv)
    try:
        if args.json_out:
            ensure_writable_file(args.json_out)
        questions = read_records(args.questions, {"question": str, "sql": str}, {"language": str, "path": dict})
        answers = read_records(args.answers, {"question": str}, {"sql": str, "path": dict})
        if len(questions) != len(answers):
            raise DataError(f"{len(questions)} questions in {args.questions} but {len(answers)} answers", where=args.answers)
        result = score(questions, answers, resolve_database(args.db))
    except Route2SQLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except (ValueError, OSError) as exc:
        print(f"error: {args.questions}, {args.answers}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not args.quiet:
        for row in result["rows"]:
            if not row["exec_right"]:
                mark = {True: "route ok", False: "route WRONG", None: ""}[row["route_right"]]
                print(terminal_safe(f"- {row['line']}: {row['question']} [{mark}]\n    sql:  {row['sql']}\n    gold: {row['gold_sql']}"
                                    + (f"\n    error: {row['error']}" if row["error"] else "")))  # fmt: skip
    print(f"route (full path): {_pct(result['route_right'], result['route_n'])}")
    print(f"rows equal the gold query's: {_pct(result['exec_right'], result['n'])}")
    for lang, (k, n) in sorted(result["by_language"].items()):
        print(f"  language {lang}: {_pct(k, n)}")
    for flag, (k, n) in sorted(result["by_flag"].items()):
        print(f"  {flag}: {_pct(k, n)}")
    if args.json_out:
        atomic_write_text(args.json_out, json.dumps(result, ensure_ascii=False, indent=1))
    return result


if __name__ == "__main__":
    main()
