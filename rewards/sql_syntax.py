"""Syntax reward: 1.0 when the completion's SQL parses as one read-only query.

"Parses" is the executor's own gate, :func:`data_pipeline.backends.sqlite.gate_verdict`
(sqlglot, SQLite dialect; the verdict is cached per text, so the executor does not parse again): exactly one ``SELECT``/``UNION``/``INTERSECT``/``EXCEPT`` statement
(``WITH`` allowed) and no write, ``ATTACH``, ``PRAGMA`` or file function inside. A ``DROP TABLE``
parses too, but paying syntax credit for it would reward the very statements the executor
refuses, so it scores 0. The SQL is found with :func:`rewards.answer.parse_answer`, tags
or not: seed 000's bare "wrong output: SELECT ..." scores 1 (weight 0.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from data_pipeline.backends.sqlite import gate_verdict
from rewards.answer import completion_text, parse_answer


def sql_parses(sql: str | None) -> bool:
    """True when ``sql`` is one read-only query that sqlglot parses (SQLite dialect).

    >>> sql_parses("SELECT name FROM customers WHERE id = 1"), sql_parses("SELECT name FROM")
    (True, False)
    >>> sql_parses("DROP TABLE customers"), sql_parses("SELECT 1; SELECT 2"), sql_parses(None)
    (False, False, False)
    """
    if sql is None:
        return False
    return gate_verdict(sql).ok


def syntax_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """1.0 for each completion whose SQL parses as one read-only query, else 0.0.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        **kwargs: ignored (TRL passes prompts and data set columns).

    Returns:
        One float per completion, shape ``(batch,)``; never None.

    >>> syntax_reward(["<reasoning>r</reasoning><answer>SELECT COUNT(*) FROM orders</answer>",
    ...                "wrong output: SELECT COUNT(*) FROM yf_kc WHERE rksj > '2024-05-01'",
    ...                "<answer>SELECT FROM WHERE</answer>", "<answer>DROP TABLE orders</answer>", ""])
    [1.0, 1.0, 0.0, 0.0, 0.0]
    """
    return [1.0 if sql_parses(parse_answer(completion_text(c)).sql) else 0.0 for c in completions]
