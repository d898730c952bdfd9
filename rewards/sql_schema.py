"""Schema-match reward: Jaccard similarity of the table and column names used, against the gold SQL.

Tokens (:func:`schema_tokens`) are the lower-cased names of the tables and columns a query
reads, found in sqlglot's parse tree (SQLite dialect): ``FROM "Order Details" AS od`` gives
``order details``, ``od.Quantity`` gives ``quantity``. Table aliases, CTE names, output
aliases (``AS total``), function names and ``*`` are not schema and do not count; neither do
keywords or literals.

Seed 000 computed the same Jaccard but let shared keywords (``WHERE``, ``AND``) earn "a bit"
(its worked example scored 0.2 with no table or column in common). We leave keywords out: every
query has them, so they would pay a policy for writing ``SELECT ... FROM ... WHERE`` around the
wrong tables, a free floor under the reward. The seed's 0.2 therefore enters our tests only
through the weighted total (``rewards/sql.py``); its query pair scores 0.0 here.

A query sqlglot cannot parse still gets partial credit: names are then read from its tokens
(identifiers not followed by ``(`` and not after ``AS``), so a policy that picks the right tables
but breaks the syntax learns that the tables were right (weight 0.3). A query the gate refuses as
unsafe or too large scores 0 (:func:`rewards.answer.refused_outright`).

The tree is the gate's own parse (:func:`data_pipeline.backends.sqlite.inspect_statement`: text
nested deeper than the gate reads is never handed to sqlglot's recursive parser), and the names
of each text are cached, so the gold query of a GRPO group is read once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from data_pipeline.backends.sqlite import LRUCache, inspect_statement
from rewards.answer import MAX_ANSWER_CHARS, score_against_gold

_NAMES = LRUCache(8192)

_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


def _tokens_from_tree(trees: list[exp.Expression | None]) -> frozenset[str]:
    names: set[str] = set()
    for tree in trees:
        if tree is None:
            continue
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        output_aliases = {a.alias.lower() for a in tree.find_all(exp.Alias) if a.alias}
        for table in tree.find_all(exp.Table):
            name = table.name.lower()
            if name and name not in ctes:
                names.add(name)
        for column in tree.find_all(exp.Column):
            name = column.name.lower()
            if name and name != "*" and name not in output_aliases:
                names.add(name)
    return frozenset(names)


def _tokens_from_lexer(sql: str) -> frozenset[str]:
    try:
        tokens = sqlglot.tokenize(sql, read="sqlite")
    except (TokenError, ValueError):
        return frozenset()
    names = set()
    for i, tok in enumerate(tokens):
        if tok.token_type not in _NAME_TOKENS:
            continue
        if i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.L_PAREN:
            continue  # a function call
        if i > 0 and tokens[i - 1].token_type == TokenType.ALIAS:
            continue  # an alias
        names.add(tok.text.lower())
    return frozenset(names)


def schema_tokens(sql: str) -> frozenset[str]:
    """Lower-cased table and column names read by ``sql`` (module docstring for the rules).

    >>> sorted(schema_tokens('SELECT c.name, COUNT(*) AS n FROM customers c JOIN "Orders" o '
    ...                      'ON o.customer_id = c.id GROUP BY c.name ORDER BY n'))
    ['customer_id', 'customers', 'id', 'name', 'orders']
    >>> sorted(schema_tokens("SELECT name, FROM customers WHERE"))  # does not parse: lexer fallback
    ['customers', 'name']
    >>> sorted(schema_tokens("SELECT " + "(" * 99 + "x"))  # nested too deeply for the parser: lexer fallback
    ['x']
    """
    if not isinstance(sql, str) or len(sql) > MAX_ANSWER_CHARS:
        return frozenset()
    hit = _NAMES.get(sql)
    if hit is not None:
        return hit
    _, tree = inspect_statement(sql)
    try:
        names = _tokens_from_tree([tree]) if tree is not None else _tokens_from_lexer(sql)
    except RecursionError:
        names = _tokens_from_lexer(sql)
    _NAMES.put(sql, names)
    return names


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a & b| / |a | b|``; 1.0 when both are empty.

    >>> jaccard(frozenset("ab"), frozenset("bc"))
    0.3333333333333333
    """
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def schema_match_reward(completions: Sequence[Any], gold_sql: Sequence[str | None], **kwargs: Any) -> list[float | None]:
    """Jaccard of each completion's table/column names against its gold SQL's.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion; None where there is none.
        **kwargs: ignored (TRL passes prompts and data set columns).

    Returns:
        One value per completion, shape ``(batch,)``: a float in ``[0, 1]`` (0.0 when the
        completion has no SQL), or None where the gold SQL is None.

    Raises:
        ValueError: ``completions`` and ``gold_sql`` differ in length.

    >>> gold = "SELECT name FROM customers WHERE city = 'Berlin'"
    >>> schema_match_reward(["<answer>SELECT name FROM customers</answer>",
    ...                      "<answer>SELECT city FROM customers WHERE name = 'Bob'</answer>",
    ...                      "<answer>SELECT name FROM products</answer>", "no sql"], [gold] * 4)
    [0.6666666666666666, 1.0, 0.25, 0.0]
    """
    return score_against_gold(completions, gold_sql, lambda sql, gold: jaccard(schema_tokens(sql), schema_tokens(gold)))
