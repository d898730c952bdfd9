"""What the router reads about a schema: one text per table, and lexical links from a question to tables.

The router's heads score a schema's *own* tables and via options (SPEC section 4), so every
table needs words the encoder can match against a question. :func:`table_text` writes them:
the raw name, its humanised form, the English description, the Chinese name and description,
the pinyin initials of the Chinese name (``门诊处方`` -> ``mzcf``, how a pinyin-abbreviated table
name such as ``mz_cf`` is spelled) and the columns' names.

:func:`link_features` adds a few exact-match signals the encoder cannot see reliably in a
pooled vector: a table's name words, its Chinese name, its pinyin-abbreviated name spelled by
the initials of Chinese words in the question, its column names, and sample values.
They are per (question, table) numbers, not per-table parameters, so they transfer to any
schema.

>>> pinyin_initials("门诊处方")
'mzcf'
>>> name_code("mz_cf"), name_code("Order Details")
('mzcf', '')
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

from core.schema import Table, humanize
from data_pipeline.mentions import mention_spans, name_code, pinyin_initials, singular
from data_pipeline.relations import agent_verbs, is_person, table_synonyms
from core.values import ValueIndex

LINK_FEATURES = (
    "name_words", "zh_name", "pinyin_code", "column_words", "value_mention", "mention",
    "name_prefix", "value_score", "value_shared", "agent_verb", "who",
)  # fmt: skip
"""Names of the columns of :func:`link_features`, in order."""

_VALUE_SCORE = LINK_FEATURES.index("value_score")
_MENTION = LINK_FEATURES.index("mention")
_AGENT_VERB = LINK_FEATURES.index("agent_verb")
_WHO_FEATURE = LINK_FEATURES.index("who")

MAX_COLUMNS_IN_TEXT = 12
"""Columns listed in a table's text (the encoder cuts long texts anyway)."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"id", "of", "the", "a", "an", "and", "to", "in", "for", "by", "no", "code"})


def words(text: str) -> frozenset[str]:
    """Lower-case English word stems of ``text`` (plural ``s`` removed, stop words dropped).

    >>> sorted(words("Which Order Details list the categories?"))
    ['category', 'detail', 'list', 'order', 'which']
    """
    return frozenset(singular(w) for w in _WORD.findall(humanize_words(text)) if w not in _STOP)


def humanize_words(text: str) -> str:
    """Split camel case and underscores in every token of ``text``, lower-cased."""
    return " ".join(humanize(tok) for tok in text.split())


def table_text(table: Table) -> str:
    """The text the encoder reads for ``table``.

    >>> from core.schema import Column
    >>> t = Table("mz_cf", (Column("kfrq", zh="开方日期"), Column("ys_id")), description="outpatient prescriptions",
    ...           zh="门诊处方")
    >>> table_text(t)
    'mz_cf | mz cf | outpatient prescriptions | 门诊处方 mzcf | also: 药方 | columns: kfrq 开方日期, ys id'
    """
    parts = [table.name]
    human = humanize(table.name)
    if human != table.name:
        parts.append(human)
    if table.description:
        parts.append(table.description)
    zh = " ".join(x for x in (table.zh, table.description_zh) if x)
    initials = pinyin_initials(table.zh) if table.zh else ""
    if zh:
        parts.append(f"{zh} {initials}".strip())
    cols = []
    for c in table.columns[:MAX_COLUMNS_IN_TEXT]:
        cols.append(" ".join(x for x in (humanize(c.name), c.zh) if x))
    syn_en, syn_zh = table_synonyms(table)
    verbs = agent_verbs(table)
    also = [*syn_en[:2], *syn_zh[:1], *(f"{v.past} {v.zh}" for v in verbs[:2])]
    if also:
        parts.append("also: " + ", ".join(also))
    if cols:
        parts.append("columns: " + ", ".join(cols))
    return " | ".join(parts)


def anchor_support(links: torch.Tensor) -> torch.Tensor:
    """How strongly a question's own words support starting a route from each table, ``(batch, T)``
    in ``[0, 1]``, read from its link features ``links`` ``(batch, T, len(LINK_FEATURES))``.

    A question that mentions a stored value (``value_score > 0`` for some table) supports the
    tables that hold it, by the value's score capped at 1; one that mentions no value supports
    the tables it names (``mention``). A table neither holds a mentioned value nor is named gets
    0: a route that starts there starts from something the question never said ("Which orders
    had freight charges above 80?" does not start from Shippers). The router adds
    ``anchor_prior x anchor_support`` to every legal path's potential (:mod:`router.policy`).

    >>> links = torch.zeros(2, 3, len(LINK_FEATURES))
    >>> links[0, 1, LINK_FEATURES.index("value_score")] = 0.8  # a value of table 1
    >>> links[0, 2, LINK_FEATURES.index("mention")] = 1.0      # table 2 named too
    >>> links[1, 2, LINK_FEATURES.index("mention")] = 1.0      # no value: only the name counts
    >>> anchor_support(links).tolist()
    [[0.0, 0.800000011920929, 0.0], [0.0, 0.0, 1.0]]
    """
    value = links[..., _VALUE_SCORE].clamp(max=1.0)
    has_value = (value > 0).any(-1, keepdim=True)
    return torch.where(has_value, value, links[..., _MENTION])


def who_support(links: torch.Tensor) -> torch.Tensor:
    """How strongly a question's own words ask for each table as the route's target, ``(batch, T)``
    in ``[0, 1]``, read from its link features ``links`` ``(batch, T, len(LINK_FEATURES))``.

    A question that asks "who" (谁, 哪位) and uses the verb of a person table as an agent ("Who
    supplies Gravad lax?", "谁供应 Chai？") asks for that table: it gets 1, shared out when the
    verb fits several tables. Every other question, and every other table, gets 0. The router
    adds ``who_prior x who_support`` to every legal path's potential
    (:mod:`router.policy`), as it does the anchor prior.

    >>> links = torch.zeros(2, 3, len(LINK_FEATURES))
    >>> links[:, :, LINK_FEATURES.index("who")] = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    >>> links[:, :, LINK_FEATURES.index("agent_verb")] = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    >>> who_support(links).tolist()  # who + verb: table 1 only; no "who": nothing
    [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    hit = ((links[..., _WHO_FEATURE] > 0) & (links[..., _AGENT_VERB] > 0)).to(links.dtype)
    return hit / hit.sum(-1, keepdim=True).clamp(min=1.0)


def _is_key_name(name: str) -> bool:
    h = humanize(name)
    return h == "id" or h.endswith(" id") or h.endswith(" code") and len(h.split()) <= 2


_TableKeys = tuple[frozenset[str], str, str, tuple[frozenset[str], ...], tuple[str, ...], tuple[str, ...]]


@lru_cache(maxsize=4096)
def _table_keys(table: Table) -> _TableKeys:
    name_words = words(table.name)
    code = name_code(table.name)
    # key columns (CustomerID in Orders) name other tables: they would link the wrong table
    plain = [c for c in table.columns if not _is_key_name(c.name)]
    col_words = tuple(w for w in (words(c.name) for c in plain) if w)
    col_zh = tuple(c.zh for c in plain if len(c.zh) >= 2)
    values = tuple(
        sorted({v.lower() for c in table.columns if c.is_text for v in c.samples if isinstance(v, str) and len(v) >= 4})
    )
    return name_words, code, table.zh, col_words, col_zh, values


def _prefixes(words_: frozenset[str], n: int = 5) -> frozenset[str]:
    return frozenset(w[:n] for w in words_ if len(w) >= n)


def link_features(
    question: str,
    tables: Sequence[Table],
    mentions: list[list[tuple[int, int]]] | None = None,
    values: ValueIndex | None = None,
) -> np.ndarray:
    """Lexical and value links from ``question`` to each table, shape ``(len(tables), len(LINK_FEATURES))``.

    ``mentions`` may pass :func:`mention_spans` already computed; ``values`` is the database's
    value index (:class:`core.values.ValueIndex`), without which the value columns are 0.
    Columns (all in ``[0, 1]``):

    - ``name_words``: share of the table name's word stems found in the question;
    - ``zh_name``: 1 when the table's Chinese name occurs in the question, else the share of its
      character bigrams that do;
    - ``pinyin_code``: 1 when a pinyin-abbreviated name (``mz_cf``) is spelled by the initials of
      consecutive Chinese characters of the question (``门诊处方`` -> ``mzcf``);
    - ``column_words``: 1 when all word stems of some column name occur (or a column's Chinese
      name does), else 0;
    - ``value_mention``: 1 when one of the table's sample text values occurs in the question;
    - ``mention``: 1 when :func:`mention_spans` finds the table named (maximal match);
    - ``name_prefix``: share of the table name's words (5 letters or more) whose first five
      letters begin a word of the question: "supplies" for Suppliers, "shipped" for Shippers;
    - ``value_score``: the best score of a value of this table the question mentions
      (:meth:`~core.values.ValueIndex.table_scores`): "Tunnbröd" links Products;
    - ``value_shared``: that score divided by the number of tables the same mention matched in
      (a city every table has decides less than a product name only Products holds);
    - ``agent_verb``: 1 when the question uses a verb of the table as an agent
      (:func:`data_pipeline.relations.agent_verbs`: "supplies" for Suppliers, 承运 for Shippers);
    - ``who``: 1 when the question asks "who" (谁, 哪位) and the table holds people or companies.

    >>> from core.schema import Column
    >>> ts = [Table("mz_cf", (Column("kfrq", zh="开方日期"),), zh="门诊处方"),
    ...       Table("Customers", (Column("CompanyName", "TEXT", samples=("Around the Horn",)),))]
    >>> link_features("门诊处方的开方日期", ts)[0].tolist()
    [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    >>> link_features("What did customer around the horn buy?", ts)[1].tolist()
    [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    >>> idx = ValueIndex.from_values({("Customers", "CompanyName"): ["Around the Horn"]})
    >>> link_features("Who is Around the Horn's buyer?", ts, values=idx)[1, 6:].tolist()
    [0.0, 1.0, 1.0, 0.0, 1.0]
    """
    q_words = words(question)
    q_raw_words = frozenset(_WORD.findall(question.lower()))
    q_who = bool(_WHO.search(question))
    q_prefixes = _prefixes(frozenset(singular(w) for w in _WORD.findall(humanize_words(question))))
    q_lower = question.lower()
    q_initials = pinyin_initials(question)
    out = np.zeros((len(tables), len(LINK_FEATURES)), dtype=np.float32)
    spans = mention_spans(question, tables) if mentions is None else mentions
    if values is not None:
        for i, (best, shared) in enumerate(values.table_scores(question, [t.name for t in tables])):
            out[i, 7], out[i, 8] = best, shared
    for i, table in enumerate(tables):
        out[i, 5] = 1.0 if spans[i] else 0.0
        name_words, code, zh, col_words, col_zh, sample_values = _table_keys(table)
        if name_words:
            out[i, 0] = len(name_words & q_words) / len(name_words)
        if zh:
            if zh in question:
                out[i, 1] = 1.0
            elif len(zh) >= 2:
                bigrams = {zh[k : k + 2] for k in range(len(zh) - 1)}
                out[i, 1] = sum(b in question for b in bigrams) / len(bigrams)
        if code and len(code) >= 3 and code in q_initials:
            out[i, 2] = 1.0
        if any(w <= q_words for w in col_words) or any(z in question for z in col_zh):
            out[i, 3] = 1.0
        if any(v in q_lower for v in sample_values):
            out[i, 4] = 1.0
        long_words = [w for w in name_words if len(w) >= 5]
        if long_words:
            out[i, 6] = sum(w[:5] in q_prefixes for w in long_words) / len(long_words)
        verbs = _verb_forms(table)
        if verbs and (any(v in q_lower for v in verbs[1]) or verbs[0] & q_raw_words):
            out[i, 9] = 1.0
        if q_who and is_person(table):
            out[i, 10] = 1.0
    return out


@lru_cache(maxsize=4096)
def _verb_forms(table: Table) -> tuple[frozenset[str], tuple[str, ...]]:
    """English word forms (supply, supplies, supplied, supplying) and Chinese verbs of a table's agent verbs."""
    en: set[str] = set()
    zh: list[str] = []
    for v in agent_verbs(table):
        base = v.base.split()[0]
        stem = base[:-1] if base.endswith("e") else base
        en |= {base, v.past.split()[0], base + "s", stem + "ing", base[:-1] + "ies" if base.endswith("y") else base + "es"}
        if len(v.zh) >= 2:
            zh.append(v.zh)
    return frozenset(en), tuple(zh)


_WHO = re.compile(r"\bwho(m|se)?\b|谁|哪位|哪个人", re.IGNORECASE)
