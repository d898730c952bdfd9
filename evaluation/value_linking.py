"""Value linking scored against gold SQL: ``python -m evaluation.value_linking --data DIR``.

For every question of the chosen splits (and of ``--questions``, a human-written file in the
format of ``data_pipeline/human``), the text literals that its gold SQL compares a column with
(``col = 'v'``, ``col IN ('v', ...)``, ``col LIKE 'v'``) are the values the question names. The
generator's prompt lists the literals :func:`generator.prompt.route_values` keeps for the gold
route from :meth:`core.values.ValueIndex.lookup`; this module counts how many gold literals that
list holds:

- ``literal recall``: gold literals listed with the same value and the same column, where a
  foreign key column counts as the column it references (``CustomerCustomerDemo.CustomerID``
  and ``Customers.CustomerID`` are one);
- ``value recall``: listed with the same value under any column;
- ``questions all linked``: questions with at least one gold literal whose literals are all listed
  (literal recall per question is 1);
- ``precision``: listed literals whose value is one of the question's gold literals.

A literal the gold SQL wraps in a function (``LIKE '%x%'``, ``lower(...)``) is skipped: its text is
a pattern, not a stored value. ``--show-misses N`` prints the first N missed literals.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.samples import Sample
from core.schema import Schema


@dataclass
class ValueLinkingConfig:
    """Options of ``python -m evaluation.value_linking``."""

    data: Path
    """Data set folder (python -m data_pipeline.build)."""
    splits: tuple[str, ...] = ("test",)
    """Splits of the data set to score; none for only --questions."""
    questions: tuple[Path, ...] = ()
    """Human-written question files (JSONL with question, sql and path) scored as well, each on its own."""
    show_misses: int = 0
    """Print this many missed literals per set (question, gold column and value, what was listed)."""
    out: Path | None = None
    """Also write the counts as JSON here."""


def gold_literals(sql: str, schema: Schema) -> list[tuple[str, str, str]]:
    """``(table, column, value)`` of each text literal ``sql`` compares a column with.

    Tables are resolved through aliases (``T1.Name``) and, for an unqualified column, the one
    table of the query that has it. Literals of LIKE patterns with ``%`` or ``_`` are skipped.
    Returns ``[]`` for SQL that sqlglot cannot parse.
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return []
    alias: dict[str, str] = {}
    tables: list[str] = []
    for t in tree.find_all(exp.Table):
        tables.append(t.name)
        alias[t.alias_or_name.lower()] = t.name
        alias[t.name.lower()] = t.name

    def resolve(col: exp.Column) -> tuple[str, str] | None:
        if col.table:
            table = alias.get(col.table.lower())
            return None if table is None else (table, col.name)
        owners = [t for t in tables if schema.has_table(t) and any(c.name == col.name for c in schema.table(t).columns)]
        return (owners[0], col.name) if len(set(owners)) == 1 else None

    out: list[tuple[str, str, str]] = []
    for node in tree.find_all(exp.EQ, exp.In, exp.Like):
        col = node.this if isinstance(node.this, exp.Column) else None
        if isinstance(node, exp.In):
            lits = [e for e in node.expressions if isinstance(e, exp.Literal) and e.is_string]
        else:
            other = node.expression
            if col is None and isinstance(node.expression, exp.Column):
                col, other = node.expression, node.this
            lits = [other] if isinstance(other, exp.Literal) and other.is_string else []
        if col is None:
            continue
        where = resolve(col)
        for lit in lits:
            if isinstance(node, exp.Like) and ("%" in lit.this or "_" in lit.this):
                continue
            if where is not None:
                out.append((where[0], where[1], lit.this))
    return out


def _canonical(schema: Schema) -> dict[tuple[str, str], tuple[str, str]]:
    """Foreign key column -> the column it references (followed to the end of a chain)."""
    ref = {(fk.table, c): (fk.ref_table, rc) for fk in schema.foreign_keys for c, rc in fk.pairs}
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for key in ref:
        seen, cur = {key}, ref[key]
        while cur in ref and cur not in seen:
            seen.add(cur)
            cur = ref[cur]
        out[key] = cur
    return out


def score_samples(samples: Sequence[Sample], ds: BuiltDataset, show_misses: int = 0) -> dict[str, Any]:
    """Value-linking counts over ``samples`` on their gold routes (the module docstring's measures).

    Returns:
        ``{"questions", "with_literals", "literals", "literal_hits", "value_hits",
        "questions_all_linked", "listed", "listed_right", "literal_recall", "value_recall",
        "precision", "by_language": {lang: {"literals", "literal_hits"}}, "misses": [...]}``
        (recalls and precision in [0, 1]; None where the denominator is 0).
    """
    from generator.prompt import route_values

    canon = _canonical(ds.schema)

    def key(table: str, column: str) -> tuple[str, str]:
        return canon.get((table, column), (table, column))

    counts: dict[str, Any] = defaultdict(int)
    by_lang: dict[str, dict[str, int]] = defaultdict(lambda: {"literals": 0, "literal_hits": 0})
    misses: list[dict[str, Any]] = []
    for s in samples:
        counts["questions"] += 1
        gold = gold_literals(s.sql, ds.schema)
        matches = ds.values.lookup(s.question) if ds.values is not None else []
        listed = route_values(matches, s.path, ds.schema)
        listed_keys = {(key(v.table, v.column), v.value) for v in listed}
        listed_values = {v.value for v in listed}
        gold_values = {v for _, _, v in gold}
        counts["listed"] += len(listed)
        counts["listed_right"] += sum(v.value in gold_values for v in listed)
        if not gold:
            continue
        counts["with_literals"] += 1
        hits = 0
        for table, column, value in gold:
            hit = (key(table, column), value) in listed_keys
            hits += hit
            counts["value_hits"] += value in listed_values
            by_lang[s.language]["literals"] += 1
            by_lang[s.language]["literal_hits"] += hit
            if not hit and len(misses) < show_misses:
                misses.append({"question": s.question, "gold": f"{table}.{column} = {value!r}",
                               "listed": [v.render() for v in listed]})  # fmt: skip
        counts["literals"] += len(gold)
        counts["literal_hits"] += hits
        counts["questions_all_linked"] += hits == len(gold)

    def ratio(a: str, b: str) -> float | None:
        return counts[a] / counts[b] if counts[b] else None

    return dict(counts) | {
        "literal_recall": ratio("literal_hits", "literals"),
        "value_recall": ratio("value_hits", "literals"),
        "precision": ratio("listed_right", "listed"),
        "by_language": dict(by_lang),
        "misses": misses,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    cfg = parse(ValueLinkingConfig, argv)
    ds = load_dataset(cfg.data)
    sets: dict[str, list[Sample]] = {split: ds.split(split) for split in cfg.splits}
    if cfg.questions:
        from data_pipeline.human_sets import load_human_questions

        for f in cfg.questions:
            sets[str(f)] = load_human_questions(f, ds.graph, db_name=ds.schema.name)
    results = {name: score_samples(samples, ds, cfg.show_misses) for name, samples in sets.items()}
    print(f"value linking on the gold route, {ds.schema.name}")
    print("| set | questions | with literals | literals | literal recall | value recall | all linked | precision |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        all_linked = _pct(r.get("questions_all_linked", 0) / r["with_literals"] if r.get("with_literals") else None)
        print(f"| {name} | {r.get('questions', 0)} | {r.get('with_literals', 0)} | {r.get('literals', 0)} | "
              f"{_pct(r['literal_recall'])} | {_pct(r['value_recall'])} | {all_linked} | {_pct(r['precision'])} |")  # fmt: skip
        for m in r["misses"]:
            print(f"  missed {m['gold']} in {m['question']!r}; listed {m['listed']}")
    if cfg.out is not None:
        from core.io import write_json

        write_json(cfg.out, results)
    return results


if __name__ == "__main__":
    run_main(main)
