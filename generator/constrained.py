"""Route-constrained decoding: once a query reaches ``FROM``, its joins are the routed path's.

A small generator drops or invents joins; the router already knows the path. When a row of a
batch has written ``FROM`` (the first one after ``<answer>``), :class:`JoinSkeletonProcessor`
forces the tokens of the path's ``FROM ... JOIN ... ON ...`` clause
(:meth:`core.graph.SchemaGraph.from_clause`) one per step, then lets the model go on
(``WHERE``, ``GROUP BY``, ...). It is a ``transformers`` logits processor, so it works for
greedy decoding and for sampling alike (self-consistency, GRPO rollouts), and it costs one
decode of the row's new tokens per step.

Forcing sets every other token's score to ``-inf``; a row that never writes ``FROM``, or writes
it inside a longer token (``FROM"``), is left alone. A query that has used Spider-style aliases
before ``FROM`` (``SELECT T1.name``, as pretrained coder models write) gets the clause with its
tables aliased ``T1``, ``T2``, ... in path order (:func:`aliased_clause`), so the aliases it
already wrote are defined; the prompt's examples and the SFT targets never alias.

>>> import torch
>>> class Tok:  # a character tokenizer: token id = code point
...     def decode(self, ids, skip_special_tokens=True): return "".join(map(chr, ids))
...     def encode(self, text, add_special_tokens=False): return [ord(c) for c in text]
>>> p = JoinSkeletonProcessor(Tok(), ['FROM "a" JOIN "b" ON "b"."a_id" = "a"."id"'], prompt_width=0)
>>> ids = torch.tensor([[ord(c) for c in "<answer>SELECT x FROM"]])
>>> forced = []
>>> for _ in range(4):
...     scores = p(ids, torch.zeros(1, 200))
...     nxt = int(scores.argmax(-1))
...     forced.append(chr(nxt)); ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
>>> "".join(forced)
' "a"'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

_FROM_AT_END = re.compile(r"\bFROM\s*$", re.IGNORECASE)
_ANSWER = "<answer>"
_ALIAS_USE = re.compile(r"\bT\d+\s*\.", re.IGNORECASE)


def aliased_clause(clause: str) -> str:
    """``clause`` (a ``FROM ... JOIN ... ON ...`` clause) with its tables aliased ``T1``, ``T2``, ...
    in the order they appear, and the join conditions written with the aliases (Spider's style).

    >>> aliased_clause('FROM "a" JOIN "b" ON "b"."a_id" = "a"."id"')
    'FROM "a" AS T1 JOIN "b" AS T2 ON T2."a_id" = T1."id"'

    Raises:
        sqlglot.errors.ParseError: ``clause`` is not a FROM clause sqlglot can read.
    """
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(f"SELECT 1 {clause}", read="sqlite")
    names: dict[str, str] = {}
    for i, table in enumerate(tree.find_all(exp.Table, bfs=False), 1):
        names.setdefault(table.name, f"T{i}")
        table.set("alias", exp.TableAlias(this=exp.to_identifier(names[table.name])))
    for column in tree.find_all(exp.Column):
        if column.table in names:
            column.set("table", exp.to_identifier(names[column.table]))
    sql = tree.sql(dialect="sqlite")
    return sql[sql.index(" FROM ") + 1 :]


class JoinSkeletonProcessor(LogitsProcessor):
    """Force each row's ``FROM`` clause after the row writes ``FROM`` (module docstring).

    Args:
        tokenizer: the generator's tokenizer (``decode`` and ``encode``).
        clauses: per row of the batch, the full ``FROM ...`` clause to force, or None to leave
            the row free; ``len(clauses)`` is the batch size (``batch * num_return_sequences``).
        prompt_width: prompt length in tokens (left-padded batch): generated tokens start there.

    Attributes:
        forced: per row, how many tokens were forced so far.
    """

    def __init__(self, tokenizer: Any, clauses: Sequence[str | None], prompt_width: int):
        self.tokenizer = tokenizer
        self.clauses = list(clauses)
        self.prompt_width = prompt_width
        self._queue: list[list[int] | None] = [None] * len(self.clauses)
        self._done = [c is None for c in self.clauses]
        self.forced = [0] * len(self.clauses)

    def _start(self, row: int, new_ids: torch.Tensor) -> list[int] | None:
        text = self.tokenizer.decode(new_ids.tolist(), skip_special_tokens=True)
        at = text.rfind(_ANSWER)
        body = text[at + len(_ANSWER) :] if at >= 0 else text
        if not _FROM_AT_END.search(body) or len(re.findall(r"\bFROM\b", body, re.IGNORECASE)) != 1:
            return None
        clause = str(self.clauses[row])
        if _ALIAS_USE.search(body):  # the SELECT list already names T1, T2, ...: define them
            try:
                clause = aliased_clause(clause)
            except Exception:  # noqa: BLE001 - a clause sqlglot cannot read is forced as it is
                pass
        rest = re.sub(r"^\s*FROM\s+", "", clause, flags=re.IGNORECASE)
        lead = "" if text.endswith((" ", "\n")) else " "
        return list(self.tokenizer.encode(lead + rest, add_special_tokens=False))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """``scores`` ``(batch, vocab)`` with each forcing row's next token made the only choice."""
        for row in range(min(input_ids.shape[0], len(self.clauses))):
            if self._done[row]:
                continue
            if self._queue[row] is None:
                self._queue[row] = self._start(row, input_ids[row, self.prompt_width :])
                if self._queue[row] is None:
                    continue
            queue = self._queue[row]
            assert queue is not None
            if not queue:
                self._done[row] = True
                continue
            tok = queue.pop(0)
            scores[row] = float("-inf")
            scores[row, tok] = 0.0
            self.forced[row] += 1
            if not queue:
                self._done[row] = True
        return scores
