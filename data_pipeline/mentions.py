"""Where a question names a table (by its name, description, synonyms, Chinese name or pinyin
initials) or one of its columns.

Shared by the router (its link features, :mod:`router.text`) and the routing environment (the
label-free reward's target evidence, :mod:`envs.evidence`), so both read a question's table
mentions the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from core.schema import Table, humanize
from data_pipeline.relations import short_nouns, table_synonyms

_CJK = re.compile(r"[\u3400-\u9fff]+")
_SUBWORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def pinyin_initials(text: str) -> str:
    """First letters of the pinyin of every Chinese character in ``text``; other characters are dropped.

    >>> pinyin_initials("门诊 处方 (rx)")
    'mzcf'
    """
    from pypinyin import Style, lazy_pinyin

    chars = "".join(_CJK.findall(text))
    if not chars:
        return ""
    return "".join(p[0] for p in lazy_pinyin(chars, style=Style.FIRST_LETTER) if p).lower()


def name_code(name: str) -> str:
    """The letters of a name that looks pinyin-abbreviated (``mz_cf`` -> ``mzcf``), else ``""``.

    A name qualifies when it is lower-case ASCII letters in parts of at most 4 letters
    joined by ``_`` (at least 2 letters in all), which English names rarely are.

    >>> name_code("yf_kc"), name_code("customers"), name_code("kfrq")
    ('yfkc', '', 'kfrq')
    """
    parts = name.split("_")
    if not all(p.isascii() and p.isalpha() and p.islower() and 1 <= len(p) <= 4 for p in parts):
        return ""
    code = "".join(parts)
    return code if len(code) >= 2 else ""


def singular(word: str) -> str:
    """An English word's singular by its ending (categories -> category, boxes -> box, orders -> order)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _stems_with_spans(text: str) -> list[tuple[str, int, int]]:
    """Lower-case singular word stems of ``text`` with their character spans (camel case split)."""
    return [(singular(m.group().lower()), m.start(), m.end()) for m in _SUBWORD.finditer(text)]


@lru_cache(maxsize=4096)
def _surface_forms(table: Table) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...], str]:
    """English stem sequences, Chinese strings and the pinyin code that name ``table``."""
    english = [tuple(s for s, _, _ in _stems_with_spans(table.name))]
    if table.description:
        short = re.split(r"[,;(]", table.description)[0].split()
        for phrase in (short, short[:2]) if len(short) <= 6 else (short[:2],):
            if phrase:
                english.append(tuple(s for s, _, _ in _stems_with_spans(" ".join(phrase))))
    syn_en, syn_zh = table_synonyms(table)
    english += [tuple(s for s, _, _ in _stems_with_spans(w)) for w in syn_en]
    chinese = tuple(z for z in (table.zh, *syn_zh) if len(z) >= 2)
    return tuple(e for e in english if e), chinese, name_code(table.name)


def mention_spans(question: str, tables: Sequence[Table]) -> list[list[tuple[int, int]]]:
    """Character spans ``[start, end)`` where the question names each table, maximal matches only.

    A table is named by its name's words (``EmployeeTerritories`` = "employee territories",
    plural or singular), by its description up to the first comma when that is at most six
    words long ("shipping companies that deliver orders"), by the description's first two words
    ("shipping companies" for Shippers), by its Chinese name, by the short noun people use for
    it (:func:`~data_pipeline.relations.short_nouns`: "prescriptions" and 处方 for 门诊处方),
    or by Chinese characters whose pinyin initials spell a pinyin-abbreviated name (``mz_cf``).
    A span inside a longer span of another table is dropped: "employee territories" names
    EmployeeTerritories, not Employees or Territories; 订单明细 names Order Details, not Orders.

    >>> from core.schema import Column
    >>> ts = [Table(n, (Column("id"),), zh=z) for n, z in
    ...       [("Employees", "员工"), ("Territories", "销售区域"), ("EmployeeTerritories", "员工负责区域")]]
    >>> mention_spans("Which employee territories cover the territory Boston?", ts)
    [[], [(37, 46)], [(6, 26)]]
    >>> mention_spans("员工 King 的员工负责区域", ts)
    [[(0, 2)], [], [(9, 15)]]
    """
    stems = _stems_with_spans(question)
    initials = ""
    init_pos: list[int] = []
    for m in _CJK.finditer(question):
        run = pinyin_initials(m.group())
        if len(run) == len(m.group()):
            initials += run + " "
            init_pos.extend(range(m.start(), m.end()))
            init_pos.append(-1)
    found: list[list[tuple[int, int]]] = []
    short = short_nouns(tuple(tables))
    for table in tables:
        english, chinese, code = _surface_forms(table)
        if table.name in short:  # "prescriptions" and 处方 name 门诊处方 (mz_cf)
            short_en, short_zh = short[table.name]
            english += tuple(tuple(s for s, _, _ in _stems_with_spans(w)) for w in short_en)
            chinese += short_zh
        spans = _spans(question, stems, english, chinese)
        if code and len(code) >= 3:
            start = initials.find(code)
            while start >= 0:
                spans.add((init_pos[start], init_pos[start + len(code) - 1] + 1))
                start = initials.find(code, start + 1)
        found.append(sorted(spans))
    return _maximal(found)


_KEY = re.compile(r"(^|\s)(id|code|key)$")


def column_mention_spans(question: str, tables: Sequence[Table]) -> list[list[tuple[int, int]]]:
    """Character spans where ``question`` names one of each table's non-key columns: its humanised
    name (singular or plural) or its Chinese name of 2+ characters; maximal matches only. Key
    columns (``CustomerID``) name other tables and are skipped.

    >>> from core.schema import Column
    >>> ts = [Table("Customers", (Column("CompanyName", "TEXT"),), zh="客户"), Table("Orders", (Column("OrderDate"),))]
    >>> column_mention_spans("What is the order date of 客户 Alfreds?", ts)
    [[], [(12, 22)]]
    """
    stems = _stems_with_spans(question)
    return _maximal([_spans(question, stems, *_column_forms(t)) for t in tables])


@lru_cache(maxsize=4096)
def _column_forms(table: Table) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """English stem sequences and Chinese names of ``table``'s non-key columns."""
    english, chinese = [], []
    for c in table.columns:
        h = humanize(c.name)
        if c.primary_key or _KEY.search(h):
            continue
        english.append(tuple(s for s, _, _ in _stems_with_spans(h)))
        if len(c.zh) >= 2:
            chinese.append(c.zh)
    return tuple(e for e in english if e), tuple(chinese)


def _spans(question: str, stems: list[tuple[str, int, int]], english: Sequence[tuple[str, ...]],
           chinese: Sequence[str]) -> set[tuple[int, int]]:  # fmt: skip
    """Spans of ``question`` (its ``stems``: :func:`_stems_with_spans`) spelling one of the ``english``
    stem sequences or containing one of the ``chinese`` strings."""
    seq = [w for w, _, _ in stems]
    spans: set[tuple[int, int]] = set()
    for form in english:
        n = len(form)
        if n == 0:  # a name with no English stems (e.g. "Ünïcødé 表") names nothing in English
            continue
        for i in range(len(seq) - n + 1):
            if tuple(seq[i : i + n]) == form:
                spans.add((stems[i][1], stems[i + n - 1][2]))
    for z in chinese:
        start = question.find(z)
        while start >= 0:
            spans.add((start, start + len(z)))
            start = question.find(z, start + 1)
    return spans


def _maximal(found: list[list[tuple[int, int]]]) -> list[list[tuple[int, int]]]:
    """Per table, its spans that lie inside no longer span of any table."""
    every = [s for spans in found for s in spans]
    return [
        sorted((a, b) for a, b in spans if not any(c <= a and b <= d and d - c > b - a for c, d in every))
        for spans in found
    ]
