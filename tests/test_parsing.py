"""parse_answer on a table of completions: good, malformed and reward-hacking ones."""

from __future__ import annotations

import pytest

from generator.parsing import parse_answer
from generator.prompt import render_completion

# (completion, expected sql, expected well_formed, why)
CASES = [
    ("<reasoning>\none table\n</reasoning>\n<answer>\nSELECT name FROM customers\n</answer>",
     "SELECT name FROM customers", True, "the exact format"),
    ("<reasoning>r</reasoning><answer>SELECT 1;</answer>", "SELECT 1", True, "trailing semicolon dropped"),
    ("<reasoning>r</reasoning><answer>\n```sql\nSELECT 1\n```\n</answer>", "SELECT 1", True,
     "a code fence inside the answer is removed; the tags are still right"),
    ("<reasoning>r</reasoning><answer>SELECT 1; DROP TABLE t;</answer>", "SELECT 1; DROP TABLE t", True,
     "an inner semicolon stays, so the executor sees (and refuses) two statements"),
    ("<reasoning>r</reasoning><answer>SELECT 1</answer><answer>SELECT 2</answer>", "SELECT 2", False,
     "two answers: the last one is taken, and the format is wrong"),
    ("<reasoning>r</reasoning><answer>SELECT name FROM t WHERE", "SELECT name FROM t WHERE", False,
     "cut at the token limit: no closing tag"),
    ("<reasoning>r</reasoning>\n<answer>SELECT a FROM t\n<reasoning>more", "SELECT a FROM t", False,
     "an unclosed answer stops at the next tag"),
    ("Here you go:\n```sql\nSELECT a FROM t;\n```", "SELECT a FROM t", False, "code block fallback"),
    ("```sql\nSELECT 1\n```\nor better\n```\nSELECT 2\n```", "SELECT 2", False, "the last code block"),
    ("wrong output: SELECT COUNT(*) FROM yf_kc WHERE rksj > '2024-05-01'",
     "SELECT COUNT(*) FROM yf_kc WHERE rksj > '2024-05-01'", False, "seed 000 bare SQL after a label"),
    ("<answer>SELECT 1</answer>", "SELECT 1", False, "reasoning required by default"),
    ("<reasoning>r</reasoning> chatter <answer>SELECT 1</answer>", "SELECT 1", False, "text between the blocks"),
    ("<reasoning>r</reasoning><answer>SELECT 1</answer> Hope this helps!", "SELECT 1", False, "text after"),
    ("<reasoning></reasoning><answer>SELECT 1</answer>", "SELECT 1", False, "empty reasoning earns no format"),
    ("<reasoning>r</reasoning><answer>  </answer>", None, False, "empty answer"),
    ("<reasoning>r</reasoning><answer>;</answer>", None, False, "only a semicolon"),
    ("", None, False, "empty completion"),
    ("I cannot answer that.", None, False, "no SQL at all"),
]


@pytest.mark.parametrize(("text", "sql", "well_formed", "why"), CASES, ids=[c[3] for c in CASES])
def test_parse_table(text, sql, well_formed, why):
    got = parse_answer(text)
    assert (got.sql, got.well_formed) == (sql, well_formed), why
    assert got.reason == "ok" if well_formed else got.reason != "ok"


def test_reasons_name_the_problem():
    assert parse_answer("<reasoning>r</reasoning><answer>SELECT 1").reason == "answer tag not closed"
    assert parse_answer("<answer>x</answer><answer>y</answer>").reason == "2 answer blocks; used the last"
    assert parse_answer("<answer>SELECT 1</answer>").reason == "no reasoning block"
    assert parse_answer("<reasoning>r</reasoning><answer></answer>").reason == "empty answer"


def test_answer_only_format():
    assert parse_answer("<answer>SELECT 1</answer>", require_reasoning=False).well_formed
    assert parse_answer("\n<answer>\nSELECT 1\n</answer>\n", require_reasoning=False).well_formed
    # a reasoning block is text outside the answer when only the answer is asked for
    assert not parse_answer("<reasoning>r</reasoning><answer>SELECT 1</answer>", require_reasoning=False).well_formed


@pytest.mark.parametrize("sql", ["SELECT 1", 'SELECT "a b" FROM "order items";', "WITH x AS (SELECT 1) SELECT * FROM x"])
@pytest.mark.parametrize("reasoning", ["short", "two\nlines", None])
def test_render_round_trip(sql, reasoning):
    got = parse_answer(render_completion(sql, reasoning), require_reasoning=reasoning is not None)
    assert got.well_formed
    assert got.sql == sql.rstrip(";")
    assert got.reasoning == reasoning
