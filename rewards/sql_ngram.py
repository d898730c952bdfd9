"""N-gram reward: overlap of the completion's SQL token bigrams with the gold SQL's.

Both queries are cut into tokens by sqlglot's SQLite tokenizer and normalised
(:func:`sql_tokens`): keywords upper-case, identifiers and function names lower-case (SQLite
ignores their case), string literals kept verbatim in quotes, numbers as written; comments
dropped. Text the tokenizer rejects (an unclosed quote) is cut on words and punctuation instead.

The score is the F1 of the two bigram multisets: ``matched / len(pred)`` (precision) and
``matched / len(gold)`` (recall), where ``matched`` counts shared bigrams with multiplicity.
Recall alone would pay for padding a query with extra clauses, precision alone for writing
very little; F1 pays for neither (weight 0.2). An answer the gate refuses as unsafe or too large
scores 0 (:func:`rewards.answer.refused_outright`). The tokens of each text are cached.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot.errors import TokenError
from sqlglot.tokens import TokenType

from data_pipeline.backends.sqlite import LRUCache
from rewards.answer import MAX_ANSWER_CHARS, score_against_gold

_TOKENS = LRUCache(8192)

_WORDS = re.compile(r"'[^']*'?|\w+|[^\w\s]", re.UNICODE)


def sql_tokens(sql: str) -> list[str]:
    """Normalised tokens of ``sql`` (rules in the module docstring).

    >>> sql_tokens('select SUM(ypsl) from "Mz_CF" where d > \\'2024-05\\' -- note')
    ['SELECT', 'sum', '(', 'ypsl', ')', 'FROM', 'mz_cf', 'WHERE', 'd', '>', "'2024-05'"]
    >>> sql_tokens("SELECT 'unclosed")  # the fallback splitter
    ['SELECT', "'unclosed"]
    >>> sql_tokens("x" * 20_001)  # longer than any reward reads
    []
    """
    if not isinstance(sql, str) or len(sql) > MAX_ANSWER_CHARS:
        return []
    hit = _TOKENS.get(sql)
    if hit is None:
        hit = tuple(_tokens(sql))
        _TOKENS.put(sql, hit)
    return list(hit)


def _tokens(sql: str) -> list[str]:
    try:
        tokens = sqlglot.tokenize(sql, read="sqlite")
    except (TokenError, ValueError):
        return [w if w.startswith("'") else w.upper() for w in _WORDS.findall(sql)]
    out = []
    for tok in tokens:
        if tok.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            out.append(tok.text.lower())
        elif tok.token_type == TokenType.STRING:
            out.append("'" + tok.text + "'")
        elif tok.token_type == TokenType.NUMBER:
            out.append(tok.text)
        else:
            out.append(tok.text.upper())
    return out


def ngrams(tokens: Sequence[str], n: int = 2) -> Counter[tuple[str, ...]]:
    """The multiset of ``n``-grams of ``tokens``; a sequence shorter than ``n`` is one short gram.

    >>> sorted(ngrams(["SELECT", "a", "FROM"]).items())
    [(('SELECT', 'a'), 1), (('a', 'FROM'), 1)]
    >>> ngrams(["x"])
    Counter({('x',): 1})
    """
    if not tokens:
        return Counter()
    if len(tokens) < n:
        return Counter([tuple(tokens)])
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def ngram_f1(pred_sql: str, gold_sql: str, n: int = 2) -> float:
    """F1 of the ``n``-gram multisets of two queries, in ``[0, 1]``.

    >>> ngram_f1("SELECT name FROM customers", "SELECT name FROM customers")
    1.0
    >>> ngram_f1("SELECT name FROM customers", "SELECT city FROM customers")  # shares FROM customers
    0.3333333333333333
    """
    return counts_f1(ngrams(sql_tokens(pred_sql), n), ngrams(sql_tokens(gold_sql), n))


def counts_f1(pred: Counter[tuple[str, ...]], gold: Counter[tuple[str, ...]]) -> float:
    """F1 of two n-gram multisets (:func:`ngram_f1` with the gold side computed once)."""
    matched = sum((pred & gold).values())
    if matched == 0:
        return 0.0
    precision, recall = matched / sum(pred.values()), matched / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def ngram_reward(completions: Sequence[Any], gold_sql: Sequence[str | None], *, n: int = 2,
                 **kwargs: Any) -> list[float | None]:  # fmt: skip
    """Bigram (by default) F1 of each completion's SQL against its gold SQL.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion; None where there is none.
        n: n-gram size (2: bigrams, SPEC section 6).
        **kwargs: ignored (TRL passes prompts and data set columns).

    Returns:
        One value per completion, shape ``(batch,)``: a float in ``[0, 1]`` (0.0 when the
        completion has no SQL), or None where the gold SQL is None.

    Raises:
        ValueError: the lengths differ, or ``n < 1``.

    >>> ngram_reward(["<answer>SELECT name FROM customers</answer>", "nothing"],
    ...              ["SELECT name FROM customers", "SELECT 1"])
    [1.0, 0.0]
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return score_against_gold(completions, gold_sql, lambda sql, gold: ngram_f1(sql, gold, n))
