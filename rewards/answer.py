"""The answer format and reading the SQL out of a completion (what the SQL rewards judge).

The answer format (SPEC section 6) is::

    <reasoning>
    ...free text...
    </reasoning>
    <answer>
    SELECT ...
    </answer>

:func:`parse_answer` never raises: a completion is whatever a policy wrote, so every oddity is
an outcome with a ``reason``. The rules, in order:

1. Complete ``<answer>...</answer>`` blocks: the SQL is the **last** one. A model that restates
   or corrects itself ends with its final answer, and a grader must pick one deterministically.
   More than one answer block is not well formed.
2. An ``<answer>`` that is never closed (generation stopped at the token limit): the SQL runs to
   the next tag or the end of the text. Not well formed.
3. No answer tag: the last fenced code block (```sql ... ``` or plain ``` ... ```), else the
   text from the first ``SELECT``/``WITH`` keyword to the end. Not well formed, but the SQL still
   gets its syntax and execution scores (seed 000's worked example scores syntax 1 for a bare
   query preceded by "wrong output:").

Inside the chosen text a surrounding code fence is removed, and so are trailing semicolons and
whitespace (``SELECT 1;`` is one statement; ``SELECT 1; DROP TABLE t`` keeps its inner
semicolon, so the executor still sees and refuses two statements).

*Well formed* means: exactly one non-empty reasoning block (when ``require_reasoning``), then
exactly one non-empty answer block, and nothing but whitespace around them. Empty tags do not
count, so ``<reasoning></reasoning><answer></answer>`` cannot farm the format reward.

**Refused outright** (:func:`refused_outright`): an answer whose SQL the executor's gate refuses
as unsafe (a write, a schema change, ``ATTACH``/``PRAGMA``, several statements, a denied
function) or as beyond its limits (longer than :data:`MAX_ANSWER_CHARS`, nested too deeply)
earns nothing from any reward, format included: otherwise ``DROP TABLE customers`` in the right
tags would out-earn writing nothing (a refused INSERT totalled 0.25, a refused DELETE 0.1). Text
that merely is not SQL keeps its format and partial-name credit.

Blocks are found by scanning for the tags (:func:`tag_blocks`), not by backtracking regular
expressions, so any text is read in time linear in its length (``"<answer>" * 16000`` took
6.7 s with ``re.findall``; the parser is fed whatever a policy writes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from data_pipeline.backends.sqlite import MAX_SQL_CHARS, gate_verdict

MAX_ANSWER_CHARS = MAX_SQL_CHARS
"""Longest answer SQL any reward reads; a longer one scores 0 everywhere (the executor refuses it too)."""

REASONING_OPEN, REASONING_CLOSE = "<reasoning>", "</reasoning>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

_FENCE = re.compile(r"```(?:[ \t]*[A-Za-z0-9_+-]*[ \t]*\n)?(.*?)(?:```|\Z)", re.DOTALL)
_ANY_TAG = re.compile(r"</?(?:reasoning|answer)>")
_SQL_START = re.compile(r"\b(SELECT|WITH)\b", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAnswer:
    """What :func:`parse_answer` found in one completion.

    Attributes:
        sql: the query text (trimmed, trailing semicolons removed), or None when there is none.
        reasoning: the text of the last reasoning block, or None.
        well_formed: True only for the exact answer format (see the module docstring).
        reason: ``"ok"`` or a short phrase saying what was wrong or which fallback was used.
    """

    sql: str | None
    reasoning: str | None
    well_formed: bool
    reason: str


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The generated text of one completion: a string as is, or the last message's content.

    TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``; both
    forms are accepted so the reward functions work inside TRL's ``GRPOTrainer`` too.

    >>> completion_text("<answer>SELECT 1</answer>")
    '<answer>SELECT 1</answer>'
    >>> completion_text([{"role": "assistant", "content": "hi"}])
    'hi'
    >>> completion_text([])
    ''
    """
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    return content if isinstance(content, str) else ""


def score_against_gold(completions: Sequence[Any], gold_sql: Sequence[str | None],
                       score: Callable[[str, str], float]) -> list[float | None]:  # fmt: skip
    """``score(answer_sql, gold)`` for each completion: the shared loop of the gold-referenced rewards.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion; None where there is none.
        score: similarity of the parsed answer SQL to the gold SQL, in ``[0, 1]``.

    Returns:
        One value per completion, shape ``(batch,)``: ``score(...)``, 0.0 when the completion has
        no SQL or its SQL is :func:`refused_outright`, or None where the gold SQL is None.

    Raises:
        ValueError: ``completions`` and ``gold_sql`` differ in length.

    >>> score_against_gold(["<answer>SELECT 1</answer>", "no sql", "x"], ["SELECT 1", "SELECT 1", None],
    ...                    lambda sql, gold: float(sql == gold))
    [1.0, 0.0, None]
    """
    if len(completions) != len(gold_sql):
        raise ValueError(f"{len(completions)} completions but {len(gold_sql)} gold queries")
    out: list[float | None] = []
    for c, gold in zip(completions, gold_sql, strict=True):
        if gold is None:
            out.append(None)
            continue
        sql = parse_answer(completion_text(c)).sql
        out.append(0.0 if sql is None or refused_outright(sql) else score(sql, gold))
    return out


def refused_outright(sql: str | None) -> str | None:
    """Why ``sql`` earns no reward at all (module docstring), or None when the rewards may judge it.

    >>> refused_outright("DROP TABLE customers")
    'only SELECT queries may run, not DROP'
    >>> refused_outright("SELECT name FROM customers WHERE"), refused_outright(None)  # not SQL: judged
    (None, None)
    >>> refused_outright("SELECT " + "(" * 60 + "1" + ")" * 60)
    'query nested too deeply (60 levels, at most 24)'
    """
    if sql is None:
        return None
    if len(sql) > MAX_ANSWER_CHARS:
        return f"answer too long ({len(sql)} characters, at most {MAX_ANSWER_CHARS})"
    verdict = gate_verdict(sql)
    return verdict.reason if verdict.kind in ("unsafe", "limit") else None


def clean_sql(text: str) -> str | None:
    """Trim a query: drop a surrounding code fence, whitespace and trailing semicolons.

    Returns None when nothing is left.

    >>> clean_sql("```sql\\nSELECT 1;\\n```")
    'SELECT 1'
    >>> clean_sql("  SELECT name FROM t ;; ")
    'SELECT name FROM t'
    >>> clean_sql(" ; ") is None
    True
    """
    body = text.strip()
    fence = _FENCE.match(body)
    if fence and body.startswith("```"):
        body = fence.group(1)
    body = body.strip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    return body or None


def _fallback_sql(text: str) -> tuple[str | None, str]:
    fences = [m.group(1) for m in _FENCE.finditer(text)]
    for block in reversed(fences):
        sql = clean_sql(block)
        if sql:
            return sql, "no answer tags; used the last code block"
    start = _SQL_START.search(text)
    if start:
        sql = clean_sql(_ANY_TAG.split(text[start.start() :])[0])
        if sql:
            return sql, "no answer tags; used the text from the first SELECT/WITH"
    return None, "no answer tags and no SQL found"


def tag_blocks(text: str, open_tag: str, close_tag: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every complete ``open_tag ... close_tag`` block, left to right, as
    ``re.findall(open + "(.*?)" + close)`` would find them (``start``/``end`` bound the whole block,
    tags included); linear time.

    >>> tag_blocks("<a>x</a> <a>y</a> <a>z", "<a>", "</a>")
    [(0, 8), (9, 17)]
    """
    out: list[tuple[int, int]] = []
    pos = 0
    while True:
        i = text.find(open_tag, pos)
        if i < 0:
            return out
        j = text.find(close_tag, i + len(open_tag))
        if j < 0:
            return out
        pos = j + len(close_tag)
        out.append((i, pos))


def _inner(text: str, block: tuple[int, int], open_tag: str, close_tag: str) -> str:
    return text[block[0] + len(open_tag) : block[1] - len(close_tag)]


def parse_answer(text: str, *, require_reasoning: bool = True) -> ParsedAnswer:
    """Extract the SQL and reasoning from a completion; never raises.

    Args:
        text: the completion (generated text only, not the prompt).
        require_reasoning: when False the format ``<answer>SQL</answer>`` alone is well formed
            (prompts built with ``with_reasoning=False``).

    Returns:
        A :class:`ParsedAnswer`.

    >>> parse_answer("<reasoning>count rows</reasoning>\\n<answer>SELECT COUNT(*) FROM t;</answer>")
    ParsedAnswer(sql='SELECT COUNT(*) FROM t', reasoning='count rows', well_formed=True, reason='ok')
    >>> parse_answer("<answer>SELECT 1</answer> <answer>SELECT 2</answer>").sql
    'SELECT 2'
    >>> parse_answer("<reasoning>x</reasoning><answer>SELECT a FROM t").reason
    'answer tag not closed'
    >>> parse_answer("Sure! ```sql\\nSELECT a FROM t\\n```").sql
    'SELECT a FROM t'
    """
    if not isinstance(text, str):
        return ParsedAnswer(None, None, False, "not text")
    reasoning_blocks = tag_blocks(text, REASONING_OPEN, REASONING_CLOSE)
    reasonings = [_inner(text, b, REASONING_OPEN, REASONING_CLOSE) for b in reasoning_blocks]
    reasoning = reasonings[-1].strip() if reasonings else None
    answer_blocks = tag_blocks(text, ANSWER_OPEN, ANSWER_CLOSE)

    if answer_blocks:
        answer = answer_blocks[-1]
        sql = clean_sql(_inner(text, answer, ANSWER_OPEN, ANSWER_CLOSE))
        if sql is None:
            return ParsedAnswer(None, reasoning, False, "empty answer")
        if len(answer_blocks) > 1:
            return ParsedAnswer(sql, reasoning, False, f"{len(answer_blocks)} answer blocks; used the last")
        if require_reasoning and not reasoning_blocks:
            return ParsedAnswer(sql, reasoning, False, "no reasoning block")
        if require_reasoning and len(reasoning_blocks) > 1:
            return ParsedAnswer(sql, reasoning, False, f"{len(reasoning_blocks)} reasoning blocks")
        if require_reasoning:
            r = reasoning_blocks[0]
            strict = (not text[: r[0]].strip() and r[1] <= answer[0] and not text[r[1] : answer[0]].strip()
                      and not text[answer[1] :].strip())  # fmt: skip
        else:
            strict = not text[: answer[0]].strip() and not text[answer[1] :].strip()
        if not strict:
            return ParsedAnswer(sql, reasoning, False, "text outside the tags")
        if require_reasoning and not reasoning:
            return ParsedAnswer(sql, reasoning, False, "empty reasoning")
        return ParsedAnswer(sql, reasoning, True, "ok")

    open_at = text.rfind(ANSWER_OPEN)
    if open_at >= 0:
        tail = _ANY_TAG.split(text[open_at + len(ANSWER_OPEN) :])[0]
        sql = clean_sql(tail)
        return ParsedAnswer(sql, reasoning, False, "answer tag not closed" if sql else "empty answer")

    sql, why = _fallback_sql(text)
    return ParsedAnswer(sql, reasoning, False, why)
