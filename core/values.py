"""Value linking: find the database values a question mentions, exactly or fuzzily.

People name an entity by its value alone ("Which customers ordered Tunnbröd?", "张伟的处方"), so
the table that holds the value is the strongest anchor signal a router has, and the literal a
query must use. This module keeps an index of the distinct values of a database's text columns
and looks questions up in it, in the manner of the value retrievers of the text-to-SQL field:

- BRIDGE / CodeS (``bridge_content_encoder.py``): candidate values that share text with the
  question, kept when their match covers the value well (CodeS: longest common substring
  score >= 0.9);
- CHESS (``retrieve_entity.py``): a cheap candidate step over all values (MinHash LSH of 3-gram
  shingles), then an edit-similarity filter.

Here the cheap step is an inverted index of *units* (Latin words and Chinese character bigrams)
with IDF weights, plus a typo-tolerant word step (rapidfuzz's Levenshtein ratio against the
index's vocabulary of words of about the same length); the score of a value is the IDF-weighted
share of its units the question contains (a typo counting its similarity), so a full mention
scores 1, "Mishi Kobe" for "Mishi Kobe Niku" about 2/3, and a word every value contains adds
almost nothing. Text is compared after NFKC (full-width characters), accent stripping
("Tunnbrod" finds "Tunnbröd") and case folding. Matches carry the character span in the
original question.

What is indexed: text columns that are not foreign keys (a referencing column's values belong
to the referenced table), not dates, not longer than ``max_value_chars`` on average; at most
``max_values_per_column`` distinct values each (a capped column is reported). In a column of
countries, each value is also found by its other names in English and Chinese
(:mod:`core.value_aliases`, from the ISO 3166 database), and the match gives the stored value.
A value the column's description glosses is found by that gloss too ("prescription state
(未缴费 unpaid, ...)": "unpaid" gives '未缴费'), matched whole and exactly like a country's names.

A lookup keeps the longest reading of each part of the question (:meth:`ValueIndex.lookup`): a
value found inside a longer exact mention of another value is dropped ("Pavlova" the product
inside "Pavlova, Ltd." the supplier), a first and a last name of one table side by side make
one mention ("Frank Harris": the album "Frank" is not meant), and a column that copies the
identifying column of a table it references gives way to that column (Northwind's
``Orders.ShipName`` holds the customers' company names: "Ernst Handel" is a customer).

>>> idx = ValueIndex.from_values({("Products", "ProductName"): ["Tunnbröd", "Mishi Kobe Niku", "Chai"],
...                               ("Customers", "CompanyName"): ["Around the Horn", "Wartian Herkku"],
...                               ("Customers", "Country"): ["UK", "Germany"]})
>>> [(m.table, m.value, round(m.score, 2)) for m in idx.lookup("Which customers ordered Tunnbrod?")]
[('Products', 'Tunnbröd', 1.0)]
>>> [(m.value, round(m.score, 2)) for m in idx.lookup("How much does Mishi Kobe cost?")]
[('Mishi Kobe Niku', 0.67)]
>>> [(m.value, m.question[m.start:m.end]) for m in idx.lookup("客户 Around the Horn 买过哪些产品？")]
[('Around the Horn', 'Around the Horn')]
>>> [m.value for m in idx.lookup("orders shipped to the uk")], [m.value for m in idx.lookup("orders shipped to the UK")]
([], ['UK'])
>>> [(m.value, round(m.score, 2)) for m in idx.lookup("who handled orders for wartian herku")]
[('Wartian Herkku', 0.95)]
>>> [(m.value, m.surface) for m in idx.lookup("德国的客户有哪些？")], [m.value for m in idx.lookup("customers in Britain")]
([('Germany', '德国')], ['UK'])
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ConfigError, DataError
from core.io import write_json
from core.value_aliases import alias_span_ok, country_aliases, country_code, glossary_aliases

if TYPE_CHECKING:
    from core.schema import Schema

VALUE_INDEX_FILE = "values.json"
"""File name of a saved index inside a data set or router folder."""

INDEX_FORMAT = "route2sql-values"
INDEX_VERSION = 1

STOP_WORDS = frozenset(
    "a an the of and or in on at to for by with from is are was were be de la le el du des der die das und "
    "what which who whom whose how many much where when list show give me all any each every there have has "
    "did does do i we our my".split()
)
"""English (and a few European) function words: they weigh little in a value's score and never match alone."""

_CJK_CHAR = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[a-z0-9]+")
_DATE = re.compile(r"^\d{4}[-/.]\d{1,2}[-/.]\d{1,2}")
_CODE = re.compile(r"[A-Z][A-Z0-9]{1,2}")
_CODE_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9]{1,2}(?![A-Za-z0-9])")


_FULL_WIDTH_LATIN = {c: c - 0xFEE0 for c in (*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B))}


def fold_full_width_latin(text: str) -> str:
    """Full-width Latin letters and digits (``ＵＳＡ``, ``１２``: a Chinese input method's full-width
    mode) as ASCII, in their case; everything else, Chinese punctuation included, unchanged, so
    positions in the result are positions in ``text``.

    >>> fold_full_width_latin("ＵＳＡ的客户，Ｔｏｐ１０？")
    'USA的客户，Top10？'
    """
    return text.translate(_FULL_WIDTH_LATIN)


def _closest(options: Sequence[Sequence[int]]) -> list[int]:
    """One position per word of a value, from each word's ``options`` (the question positions where
    it is found best), as close together as they can be: the occurrence of "United" next to
    "Package", not the one three sentences before it.

    >>> _closest([[0, 7], [8]]), _closest([[2], [0, 3]]), _closest([[4]])
    ([7, 8], [2, 3], [4])
    """
    best: list[int] = []
    for anchor in options[0]:
        picked = [min(opts, key=lambda p: (abs(p - anchor), p)) for opts in options]
        if not best or max(picked) - min(picked) < max(best) - min(best):
            best = picked
    return best



def _place(
    options: Sequence[Sequence[int]], unit_hits: Sequence[tuple[float, Sequence[tuple[int, float]]]], span: int
) -> tuple[list[int], list[float]] | None:
    """The question positions of a value's found words chosen from ``options`` by :func:`_closest`,
    with each word's best similarity at its position; None when they span more than ``span``
    question words (scattered over the question)."""
    positions = _closest(options)
    if max(positions) - min(positions) + 1 > span:
        return None
    sims = [max(s for p, s in hits if p == pos) for pos, (_, hits) in zip(positions, unit_hits, strict=True)]
    return positions, sims

RARE_PARTIAL_SCORE = 0.4
"""A value of at most three words matches below ``min_score`` (down to this) when a found word is
long and held by at most two values: people shorten names to their rare part."""

STOP_WEIGHT = 0.15
"""Share of its IDF weight a stop word keeps in the score of a value of more than three words."""


def max_typo_edits(length: int) -> int:
    """Edits a question word of ``length`` letters may be from an indexed word and still match it:
    0 below 4 letters, 1 for 4-7, 2 from 8 (see :meth:`ValueIndex._typo_units`).

    >>> [max_typo_edits(n) for n in (3, 4, 7, 8, 12)]
    [0, 1, 1, 2, 2]
    """
    return 0 if length < 4 else 1 if length < 8 else 2


@dataclass(frozen=True)
class ValueIndexConfig:
    """What a value index holds and how it matches."""

    max_values_per_column: int = 20_000
    """Distinct values indexed per column at most (the first in sorted order are kept); a capped column is reported."""
    max_value_chars: int = 60
    """Columns whose values are longer than this on average are free text (notes, addresses) and skipped."""
    min_score: float = 0.6
    """Smallest match score (IDF-weighted share of the value's words found) a lookup returns."""
    word_similarity: float = 85.0
    """Smallest rapidfuzz ratio (0-100) for a question word to count as a typo of an indexed word."""
    max_matches: int = 10
    """Most matches one lookup returns (best first)."""
    country_aliases: bool = True
    """In a column of countries, find each value by its other English and Chinese names too ("德国" for Germany)."""

    def __post_init__(self) -> None:
        if self.max_values_per_column < 1:
            raise ConfigError(f"must be >= 1, got {self.max_values_per_column}", where="max_values_per_column")
        if not 0.0 < self.min_score <= 1.0:
            raise ConfigError(f"must be in (0, 1], got {self.min_score}", where="min_score")
        if not 0.0 < self.word_similarity <= 100.0:
            raise ConfigError(f"must be in (0, 100], got {self.word_similarity}", where="word_similarity")
        if self.max_matches < 1 or self.max_value_chars < 1:
            raise ConfigError("max_matches and max_value_chars must be >= 1", where="max_matches")


@dataclass(frozen=True)
class ValueMatch:
    """One value a question mentions.

    Attributes:
        table, column: where the value is stored.
        value: the value as stored (the literal a query must use).
        score: in ``(0, 1]``: IDF-weighted share of the value's words the question contains (typos
            count their similarity); 1 for a full, exact mention.
        start, end: character span ``[start, end)`` of the mention in ``question``.
        exact: the mention spells the whole value (after case folding and accent stripping).
        question: the question looked up.
    """

    table: str
    column: str
    value: str
    score: float
    start: int
    end: int
    exact: bool
    question: str = field(default="", repr=False, compare=False)

    @property
    def surface(self) -> str:
        """What the question says for the value."""
        return self.question[self.start : self.end]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("question")
        d["score"] = round(self.score, 4)
        return d


@dataclass(frozen=True)
class IndexedColumn:
    """The values kept for one column; ``distinct`` counts them all, ``capped`` when some were left out;
    ``aliases`` are ``(value, other name)`` pairs from the column's description
    (:func:`~core.value_aliases.glossary_aliases`: '未缴费' is "unpaid")."""

    table: str
    column: str
    values: tuple[str, ...]
    distinct: int
    capped: bool = False
    aliases: tuple[tuple[str, str], ...] = ()


def normalize(text: str) -> tuple[str, list[int]]:
    """Fold ``text`` for matching, with the index in ``text`` of every output character.

    NFKC (full-width letters and digits become ASCII), accents removed, case folded.

    >>> normalize("Ｔunnbröd")
    ('tunnbrod', [0, 1, 2, 3, 4, 5, 6, 7])
    """
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        folded = unicodedata.normalize("NFKC", ch)
        folded = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c)).casefold()
        for c in folded:
            out.append(c)
            where.append(i)
    return "".join(out), where


def units(norm: str) -> list[tuple[str, int, int]]:
    """Matching units of a normalised text with their spans: Latin words, and the character
    bigrams of each run of Chinese characters (the character itself for a run of one).

    >>> [u for u, _, _ in units("客户 around the horn 买过")]
    ['客户', 'around', 'the', 'horn', '买过']
    >>> [u for u, _, _ in units("张伟的处方")]
    ['张伟', '伟的', '的处', '处方']
    """
    out: list[tuple[str, int, int]] = []
    i, n = 0, len(norm)
    while i < n:
        if _CJK_CHAR.match(norm[i]):
            j = i
            while j < n and _CJK_CHAR.match(norm[j]):
                j += 1
            if j - i == 1:
                out.append((norm[i], i, j))
            for k in range(i, j - 1):
                out.append((norm[k : k + 2], k, k + 2))
            i = j
            continue
        m = _LATIN_WORD.match(norm, i)
        if m:
            out.append((m.group(), m.start(), m.end()))
            i = m.end()
            continue
        i += 1
    out.sort(key=lambda u: (u[1], u[2]))
    return out


def _is_latin(unit: str) -> bool:
    return unit.isascii()


def _is_utf8(text: str) -> bool:
    """False for a string holding a lone surrogate, which no UTF-8 file (the saved index) can hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_country_column(values: Sequence[str]) -> bool:
    """At least two values and half of them name countries (``Customers.Country``; not a column
    of people among whom one is called Jordan)."""
    if len(values) < 2:
        return False
    return sum(country_code(v) is not None for v in values) >= 0.5 * len(values)


@dataclass
class _Entry:
    table: str
    column: str
    value: str
    norm: str
    units: tuple[str, ...]
    short: bool  # short Latin value (<= 3 characters): matched only as a whole; an upper-case code only in its case
    alias: bool = False  # another name of the value (a country's): matched only whole and exactly


class ValueIndex:
    """The distinct values of a database's text columns, looked up by what a question says.

    Args:
        columns: the indexed columns.
        config: matching settings.

        schema_words: folded words of the schema's table and column names ("products",
            "order"): a question word that is one is taken as it is, never as a typo or a
            shortening of a value ("products" is no typo of "Produce").
        copies: ``{(table, column): (ref_table, ref_column)}``: columns that copy the
            identifying column of a table they reference (:func:`identifying_copies`); a match
            there gives way to the same mention in the source column.

    Build one with :meth:`build` (from a backend) or :meth:`from_values`; save and load it with
    :meth:`save` / :meth:`load` (one JSON file, :data:`VALUE_INDEX_FILE`).
    """

    def __init__(
        self,
        columns: Sequence[IndexedColumn],
        config: ValueIndexConfig | None = None,
        schema_words: Iterable[str] = (),
        copies: Mapping[tuple[str, str], tuple[str, str]] | None = None,
    ):
        self.columns = tuple(columns)
        self.config = config or ValueIndexConfig()
        self.schema_words = frozenset(schema_words)
        self.copies = dict(copies or {})
        self._entries: list[_Entry] = []
        self._codes: dict[str, list[int]] = defaultdict(list)  # "UK", "OR": matched case-sensitively as whole words
        postings: dict[str, list[int]] = defaultdict(list)
        for col in self.columns:
            aliased = self.config.country_aliases and _is_country_column(col.values)
            glossed: dict[str, list[str]] = defaultdict(list)
            for value, other in col.aliases:
                glossed[value].append(other)
            for value in col.values:
                # a country is also found by its other names ("德国", "United States"), a documented code by its meaning
                others = (*(country_aliases(value) if aliased else ()), *glossed.get(value, ()))
                for k, surface in enumerate((value, *others)):
                    norm, _ = normalize(surface)
                    us = tuple(dict.fromkeys(u for u, _, _ in units(norm)))
                    if not us:
                        continue
                    short = len(norm.strip()) <= 3 and norm.strip().isascii()
                    eid = len(self._entries)
                    if short and _CODE.fullmatch(surface.strip()):
                        self._entries.append(_Entry(col.table, col.column, value, norm, us, short, k > 0))
                        self._codes[surface.strip()].append(eid)
                        continue
                    if len(us) == 1 and us[0] in STOP_WORDS:
                        continue
                    self._entries.append(_Entry(col.table, col.column, value, norm, us, short, k > 0))
                    for u in us:
                        postings[u].append(eid)
        self._postings = dict(postings)
        # IDF and the rare-word rule count stored values only: a country's other names leave every other score as it was
        self._stored_df = {u: sum(not self._entries[i].alias for i in ids) for u, ids in postings.items()}
        n = max(sum(not e.alias for e in self._entries), 1)
        self._idf = {u: math.log(1.0 + n / (self._stored_df[u] or len(ids))) for u, ids in postings.items()}
        self._weights = [self._value_weights(e) for e in self._entries]
        by_len: dict[int, list[str]] = defaultdict(list)
        for u in self._postings:
            if _is_latin(u) and len(u) >= 4 and not u.isdigit():
                by_len[len(u)].append(u)
        self._vocab_by_len = {k: sorted(v) for k, v in by_len.items()}
        self._vocab_sorted = sorted(w for ws in by_len.values() for w in ws)

    def _value_weights(self, e: _Entry) -> list[float]:
        # in a short value every word counts: "Rock Me" is not mentioned by "rock" alone
        discount = STOP_WEIGHT if len(e.units) > 3 else 1.0
        return [self._idf.get(u, 1.0) * (discount if u in STOP_WORDS else 1.0) for u in e.units]

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tables(self) -> frozenset[str]:
        return frozenset(c.table for c in self.columns)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_values(
        cls,
        values: Mapping[tuple[str, str], Iterable[Any]],
        config: ValueIndexConfig | None = None,
        copies: Mapping[tuple[str, str], tuple[str, str]] | None = None,
    ) -> ValueIndex:
        """An index of ``{(table, column): values}`` (non-text values are skipped, duplicates
        dropped); ``copies`` as in the class docstring."""
        cfg = config or ValueIndexConfig()
        cols = []
        for (table, column), vals in values.items():
            kept = sorted({v for v in vals if isinstance(v, str) and v.strip() and _is_utf8(v)})
            cols.append(IndexedColumn(table, column, tuple(kept[: cfg.max_values_per_column]), len(kept),
                                      len(kept) > cfg.max_values_per_column))  # fmt: skip
        return cls(cols, cfg, copies=copies)

    @classmethod
    def build(cls, backend: Any, schema: Schema, config: ValueIndexConfig | None = None) -> tuple[ValueIndex, list[str]]:
        """Index the text columns of ``schema`` read through ``backend``.

        Args:
            backend: anything with ``column_values(table, column) -> list[str]`` (a
                :class:`~data_pipeline.backends.registry.Backend`: SQLite or MongoDB).
            schema: the schema (its foreign keys say which columns are references).
            config: caps and matching settings.

        Returns:
            ``(index, notes)``: notes name the columns that were capped or could not be read
            (e.g. text that is not valid UTF-8); a database without text columns gives an empty
            index and a note saying so.
        """
        cfg = config or ValueIndexConfig()
        notes: list[str] = []
        refs = {(fk.table, c) for fk in schema.foreign_keys for c in fk.columns}
        cols: list[IndexedColumn] = []
        for table in schema.tables:
            if table.row_count == 0:
                continue
            for col in table.columns:
                if not col.is_text or (table.name, col.name) in refs or "DATE" in col.type.upper() or "TIME" in col.type.upper():
                    continue
                try:
                    raw = backend.column_values(table.name, col.name)
                except Exception as exc:  # noqa: BLE001 (a driver's decode or read error: skip the column, say so)
                    notes.append(f"value index: skipped {table.name}.{col.name} ({type(exc).__name__}: {str(exc)[:120]})")
                    continue
                vals = sorted({v for v in raw if isinstance(v, str) and v.strip() and _is_utf8(v)})
                if not vals:
                    continue
                if sum(len(v) for v in vals) / len(vals) > cfg.max_value_chars:
                    continue
                if sum(bool(_DATE.match(v)) for v in vals) > 0.8 * len(vals):
                    continue
                capped = len(vals) > cfg.max_values_per_column
                if capped:
                    notes.append(
                        f"value index: {table.name}.{col.name} has {len(vals)} distinct values; "
                        f"indexed {cfg.max_values_per_column} (max_values_per_column)"
                    )
                    vals = vals[: cfg.max_values_per_column]
                glossary = glossary_aliases(col.description, vals) if col.description else ()
                cols.append(IndexedColumn(table.name, col.name, tuple(vals), len(vals) if not capped else len(raw), capped, glossary))
        if not cols:
            notes.append("value index: no text column to index; questions are linked by table and column words only")
        return cls(cols, cfg, schema_words_of(schema), identifying_copies(cols, schema)), notes

    # ------------------------------------------------------------------ lookup

    def _typo_units(self, word: str) -> list[tuple[str, float]]:
        """Indexed words that ``word`` may be a typo of, with similarity in ``(0, 1]``.

        Two rules, either is enough:

        - rapidfuzz's ``fuzz.ratio`` (insertions and deletions) at least ``config.word_similarity``,
          the first or the last letter the same;
        - at most ``max_typo_edits(len(word))`` edits of the optimal string alignment distance
          (insertions, deletions, substitutions and swaps of two neighbouring letters each count
          one: "Grubge" for "Grunge", "Poitn" for "Point"), the first letter the same. The
          allowance follows Elasticsearch's ``fuzziness: AUTO`` (one edit for 3-5 letters, two
          above), made stricter for 6-7 letters (one edit). Similarity ``1 - edits / length``.
        """
        from rapidfuzz import fuzz, process
        from rapidfuzz.distance import OSA

        found: dict[str, float] = {}
        edits = max_typo_edits(len(word))
        for n in range(len(word) - edits, len(word) + edits + 1):
            vocab = self._vocab_by_len.get(n)
            if not vocab:
                continue
            if abs(n - len(word)) <= 1:
                for cand, score, _ in process.extract(word, vocab, scorer=fuzz.ratio, score_cutoff=self.config.word_similarity,
                                                      limit=3):  # fmt: skip
                    if cand != word and (cand[0] == word[0] or cand[-1] == word[-1]):
                        found[cand] = max(found.get(cand, 0.0), score / 100.0)
            if edits:
                for cand, dist, _ in process.extract(word, vocab, scorer=OSA.distance, score_cutoff=edits, limit=3):
                    if cand != word and cand[0] == word[0]:
                        found[cand] = max(found.get(cand, 0.0), 1.0 - dist / max(len(cand), len(word)))
        return list(found.items())

    def _prefix_units(self, word: str) -> list[tuple[str, float]]:
        """Indexed words that ``word`` (4 letters or more) begins ("marga" -> "margaret"), with
        similarity ``0.5 + 0.5 * len(word) / len(indexed word)`` (a prefix says less than the word)."""
        import bisect

        out: list[tuple[str, float]] = []
        i = bisect.bisect_left(self._vocab_sorted, word)
        while i < len(self._vocab_sorted) and self._vocab_sorted[i].startswith(word) and len(out) < 8:
            cand = self._vocab_sorted[i]
            if cand != word:
                out.append((cand, 0.5 + 0.5 * len(word) / len(cand)))
            i += 1
        return out

    def lookup(self, question: str) -> list[ValueMatch]:
        """The values ``question`` mentions, best first (at most ``config.max_matches``).

        A value matches when its score (see :class:`ValueMatch`) is at least
        ``config.min_score``, its found words lie close together in the question, and it is not
        found by stop words alone. Short Latin values (3 characters or fewer) match only as a
        whole word, and upper-case codes (``UK``, ``WA``, ``OR``) only in the case they are
        stored in (``OR`` the region, not "or"). A reading that a longer or more specific one
        shadows is left out (:meth:`_longest_readings`; the module docstring's examples). An
        index saved before copies were recorded loads without them.
        """
        if not self._entries or not isinstance(question, str) or not question.strip():
            return []
        norm, where = normalize(question)
        q_units = units(norm)
        if not q_units:
            return []
        # unit -> list of (question unit position, similarity)
        found: dict[str, list[tuple[int, float]]] = defaultdict(list)
        near: dict[str, list[tuple[str, float]]] = {}  # typo and prefix candidates, once per distinct word
        for pos, (u, _, _) in enumerate(q_units):
            if u in self._postings:
                found[u].append((pos, 1.0))
            if _is_latin(u) and len(u) >= 4 and not u.isdigit() and u not in STOP_WORDS and u not in self.schema_words:
                if u not in near:
                    near[u] = self._typo_units(u) + self._prefix_units(u)
                for cand, sim in near[u]:
                    found[cand].append((pos, sim))
        candidates: set[int] = set()
        for u in found:
            if u in STOP_WORDS:
                continue
            candidates.update(self._postings.get(u, ()))
        matches: list[ValueMatch] = []
        for m in _CODE_TOKEN.finditer(fold_full_width_latin(question)):
            for eid in self._codes.get(m.group(), ()):
                e = self._entries[eid]
                matches.append(ValueMatch(e.table, e.column, e.value, 1.0, m.start(), m.end(), True, question))
        for eid in candidates:
            e = self._entries[eid]
            weights = self._weights[eid]
            total = sum(weights)
            exact = True
            content = False
            rare = False
            unit_hits: list[tuple[float, list[tuple[int, float]]]] = []  # per found unit: weight, hits
            for u, w in zip(e.units, weights, strict=True):
                hits = found.get(u)
                if not hits:
                    exact = False
                    continue
                unit_hits.append((w, hits))
                content = content or u not in STOP_WORDS
                # a long word that only one or two values hold names the value ("Rogede" for "Rogede sild")
                rare = rare or (
                    len(u) >= 5 and self._stored_df.get(u, 0) <= 2 and u not in STOP_WORDS and u not in self.schema_words
                )
            if not content or total <= 0:
                continue
            # each found word at its best hit; when those lie apart, at the hits closest together
            # ("Dairy Prroducts has how many products?": the typo next to "Dairy", not the exact word)
            span = len(e.units) + 2
            best_sims = [max(s for _, s in hits) for _, hits in unit_hits]
            placed = _place([[p for p, s in hits if s == b] for (_, hits), b in zip(unit_hits, best_sims, strict=True)],
                            unit_hits, span)  # fmt: skip
            if placed is None:
                placed = _place([[p for p, _ in hits] for _, hits in unit_hits], unit_hits, span)
            if placed is None:  # the words are scattered over the question
                continue
            positions, sims = placed
            got = sum(w * sim for (w, _), sim in zip(unit_hits, sims, strict=True))
            exact = exact and all(sim == 1.0 for sim in sims)
            score = got / total
            if score < self.config.min_score and not (score >= RARE_PARTIAL_SCORE and rare and len(e.units) <= 3):
                continue
            lo, hi = min(positions), max(positions)
            start, end = where[q_units[lo][1]], where[q_units[hi][2] - 1] + 1
            if e.short and (not exact or len(e.units) != 1):
                continue
            # another name matches only whole ("United" is no mention of the United Kingdom) and as a word (not 美国 in 南美国家)
            if e.alias and not (exact and score >= 0.999 and alias_span_ok(question, start, end)):
                continue
            matches.append(ValueMatch(e.table, e.column, e.value, min(score, 1.0), start, end, exact and score >= 0.999, question))
        matches.sort(key=lambda m: (-m.score, -(m.end - m.start), m.table, m.column, m.value))
        best: dict[tuple[str, str, str], ValueMatch] = {}  # a value found by several of its names counts once
        for m in matches:
            best.setdefault((m.table, m.column, m.value), m)
        return self._longest_readings(list(best.values()), question)[: self.config.max_matches]

    def _longest_readings(self, matches: list[ValueMatch], question: str) -> list[ValueMatch]:
        """``matches`` without the readings a longer or more specific one shadows (order kept):

        - a match whose span lies inside the longer span of a full, exact match of another value,
          or of a full name (:func:`_full_names`) it is not part of;
        - a match in a copy column (:attr:`copies`) when its source column matched the same span,
          unless the question names the copy column ("orders whose ship name is Ernst Handel").
        """
        full = [m for m in matches if m.exact and m.score >= 0.999]
        spans: list[tuple[int, int, tuple[ValueMatch, ...]]] = [(m.start, m.end, (m,)) for m in full]
        spans += _full_names(full, question)
        at = {(m.table, m.column, m.start, m.end) for m in matches}
        kept = []
        for m in matches:
            inside = any(
                a <= m.start and m.end <= b and b - a > m.end - m.start and not any(m is p for p in parts)
                for a, b, parts in spans
            )
            source = self.copies.get((m.table, m.column))
            copied = source is not None and (*source, m.start, m.end) in at and not _names_column(question, m.column)
            if not (inside or copied):
                kept.append(m)
        return kept

    def table_scores(self, question: str, tables: Sequence[str]) -> list[tuple[float, float]]:
        """Per table of ``tables``: ``(best score, best score shared out)`` of the values it holds
        that ``question`` mentions; the second divides each match's score by the number of
        tables where the same text matched as well (a value every table has decides nothing), and
        halves it for a mention that lies inside a longer mention of another value."""
        matches = self.lookup(question)
        best: dict[str, float] = {}
        spans: dict[tuple[int, int], set[str]] = defaultdict(set)
        for m in matches:
            best[m.table] = max(best.get(m.table, 0.0), m.score)
            spans[(m.start, m.end)].add(m.table)
        shared: dict[str, float] = {}
        for m in matches:
            k = len(spans[(m.start, m.end)])
            # a mention inside a longer one ("Pavlova" in "Pavlova Ltd") is the weaker reading
            inside = any(a <= m.start and m.end <= b and (b - a) > (m.end - m.start) for a, b in spans)
            shared[m.table] = max(shared.get(m.table, 0.0), m.score / k * (0.5 if inside else 1.0))
        return [(best.get(t, 0.0), shared.get(t, 0.0)) for t in tables]

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "config": asdict(self.config),
            "schema_words": sorted(self.schema_words),
            "copies": sorted([*k, *v] for k, v in self.copies.items()),
            "columns": [
                {"table": c.table, "column": c.column, "distinct": c.distinct, "capped": c.capped, "values": list(c.values),
                 **({"aliases": [list(a) for a in c.aliases]} if c.aliases else {})}
                for c in self.columns
            ],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str | Path | None = None) -> ValueIndex:
        """Read :meth:`to_dict`'s output; DataError names ``where`` when it is malformed."""
        if not isinstance(d, Mapping) or d.get("format") != INDEX_FORMAT:
            raise DataError(f"not a value index (format {d.get('format') if isinstance(d, Mapping) else None!r})", where=where)
        if d.get("version") != INDEX_VERSION:
            raise DataError(f"value index version {d.get('version')} is not supported (want {INDEX_VERSION})", where=where)
        try:
            known = set(ValueIndexConfig.__dataclass_fields__)
            cfg = ValueIndexConfig(**{k: v for k, v in dict(d.get("config", {})).items() if k in known})
            cols = [
                IndexedColumn(str(c["table"]), str(c["column"]), tuple(str(v) for v in c["values"]), int(c["distinct"]),
                              bool(c.get("capped")), _alias_pairs(c.get("aliases", ())))
                for c in d["columns"]
            ]
            copies = {(str(t), str(c)): (str(rt), str(rc)) for t, c, rt, rc in d.get("copies", ())}
            schema_words = [str(w) for w in d.get("schema_words", ())]
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise DataError(f"malformed value index ({exc})", where=where) from exc
        return cls(cols, cfg, schema_words, copies)

    def save(self, path: str | Path) -> Path:
        """Write the index as JSON (atomically); returns the path."""
        write_json(path, self.to_dict())
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> ValueIndex:
        """Read a file written by :meth:`save`.

        Raises:
            DataError: the file is missing, not JSON, or not a value index (naming it).
        """
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise DataError("value index file not found", where=p) from exc
        except (OSError, ValueError) as exc:
            raise DataError(f"unreadable value index ({exc})", where=p) from exc
        return cls.from_dict(d, where=p)


def _alias_pairs(raw: Any) -> tuple[tuple[str, str], ...]:
    """A column's "aliases" from a saved index: a list of ``[value, other name]`` string pairs.

    Raises:
        ValueError: an entry is not a pair of strings.
    """
    pairs = []
    for entry in raw:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
            raise ValueError(f"an alias must be a [value, other name] pair of strings, got {entry!r}")
        pairs.append((entry[0], entry[1]))
    return tuple(pairs)


def schema_words_of(schema: Schema) -> frozenset[str]:
    """Folded words of the table and column names of ``schema``, singular and plural forms
    ("Order Details" -> order, orders, detail, details).

    >>> from core.schema import Schema, Table, Column
    >>> sorted(schema_words_of(Schema("s", (Table("OrderDetails", (Column("UnitPrice"),)),), ())))
    ['detail', 'details', 'order', 'orders', 'price', 'prices', 'unit', 'units']
    """
    from core.schema import humanize

    out: set[str] = set()
    for t in schema.tables:
        for name in (t.name, *(c.name for c in t.columns)):
            for w in _LATIN_WORD.findall(normalize(humanize(name))[0]):
                if len(w) < 3:
                    continue
                stem = w[:-1] if w.endswith("s") and len(w) > 3 else w
                out.update({w, stem, stem + "s"})
    return frozenset(out)


NAME_COLUMN = re.compile(r"name|姓|名", re.IGNORECASE)
"""A column named like a name or a part of one (``CompanyName``, ``FirstName``, 姓, 名称)."""
FIRST_NAME = re.compile(r"first|given|(^|_)名$", re.IGNORECASE)
"""Among name columns, the first (given) name: ``FirstName``, ``given_name``, 名."""
LAST_NAME = re.compile(r"last|surname|family|(^|_)姓$", re.IGNORECASE)
"""Among name columns, the last (family) name: ``LastName``, ``surname``, 姓."""


def name_halves(columns: Sequence[str]) -> tuple[str, str] | None:
    """``(first, last)``: the two columns a person's name is split over, else None. The two must
    be named alike around their first/last word (``BillingFirstName`` pairs with
    ``BillingLastName``, not with ``ContactLastName``).

    >>> name_halves(["EmployeeID", "LastName", "FirstName", "Title"]), name_halves(["CompanyName"])
    (('FirstName', 'LastName'), None)
    >>> name_halves(["BillingFirstName", "ContactLastName"]), name_halves(["first_name", "surname"])
    (None, ('first_name', 'surname'))
    """
    names = [c for c in columns if NAME_COLUMN.search(c)]
    first = [c for c in names if FIRST_NAME.search(c)]
    last = [c for c in names if LAST_NAME.search(c) and c not in first]
    for f in first:
        for la in last:
            if _name_key(FIRST_NAME.sub("", f)) == _name_key(LAST_NAME.sub("", la)):
                return f, la
    return None


def _name_key(rest: str) -> str:
    return re.sub(r"[\s_]|name", "", rest.casefold())


_NAME_GAP = re.compile(r"[\s·・.]{0,2}")


def _full_names(full: Sequence[ValueMatch], question: str) -> list[tuple[int, int, tuple[ValueMatch, ...]]]:
    """Spans where two exact matches of one table's name columns (``FirstName``, ``LastName``;
    姓, 名) stand side by side, with the two matches: "Frank Harris" is one customer's name."""
    out = []
    for a in full:
        for b in full:
            if (a.table == b.table and a.column != b.column and a.end <= b.start
                    and NAME_COLUMN.search(a.column) and NAME_COLUMN.search(b.column)
                    and _NAME_GAP.fullmatch(question[a.end : b.start])):  # fmt: skip
                out.append((a.start, b.end, (a, b)))
    return out


def _names_column(question: str, column: str) -> bool:
    """True when every word of ``column``'s name (3 letters or more) is a word of ``question``
    ("ship name" for ``ShipName``).

    >>> _names_column("orders whose ship name is Ernst Handel", "ShipName"), _names_column("orders of Ernst Handel", "ShipName")
    (True, False)
    """
    from core.schema import humanize

    wanted = [w for w in _LATIN_WORD.findall(normalize(humanize(column))[0]) if len(w) >= 3]
    have = set(_LATIN_WORD.findall(normalize(question)[0]))
    return bool(wanted) and all(w in have for w in wanted)


def copy_sources(
    columns: Sequence[IndexedColumn], schema: Schema, min_overlap: float = 0.8, min_values: int = 5
) -> dict[tuple[str, str], tuple[str, str]]:
    """Columns whose values copy a column of a table they reference by a foreign key, with that column.

    A column of table A is a copy when A has a foreign key to table B and at least
    ``min_overlap`` of its (``min_values`` or more) distinct values are values of one column
    of B: Northwind's ``Orders.ShipName`` copies ``Customers.CompanyName``.

    Returns:
        ``{(table, column): (ref_table, ref_column)}`` (the first such column of B, in index order).
    """
    refs: dict[str, list[str]] = defaultdict(list)
    for fk in schema.foreign_keys:
        if fk.table != fk.ref_table and fk.ref_table not in refs[fk.table]:
            refs[fk.table].append(fk.ref_table)
    by_table: dict[str, list[IndexedColumn]] = defaultdict(list)
    for c in columns:
        by_table[c.table].append(c)
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for c in columns:
        mine = {v.casefold() for v in c.values}
        if len(mine) < min_values:
            continue
        for other_table in refs.get(c.table, ()):
            for o in by_table.get(other_table, ()):
                if (c.table, c.column) not in out and len(mine & {v.casefold() for v in o.values}) >= min_overlap * len(mine):
                    out[(c.table, c.column)] = (o.table, o.column)
    return out


def copy_columns(index: ValueIndex, schema: Schema, min_overlap: float = 0.8, min_values: int = 5) -> frozenset[tuple[str, str]]:
    """The ``(table, column)`` keys of :func:`copy_sources`. No one names an order by its ship
    name, so question generation does not.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("s", (Table("c", (Column("id", primary_key=True), Column("name", "TEXT"))),
    ...                  Table("o", (Column("id", primary_key=True), Column("c_id"), Column("ship_name", "TEXT")))),
    ...            (ForeignKey("o", "c_id", "c", "id"),))
    >>> names = [f"Shop {i}" for i in range(6)]
    >>> sorted(copy_columns(ValueIndex.from_values({("c", "name"): names, ("o", "ship_name"): names[:5]}), s))
    [('o', 'ship_name')]
    """
    return frozenset(copy_sources(index.columns, schema, min_overlap, min_values))


def identifying_copies(columns: Sequence[IndexedColumn], schema: Schema) -> dict[tuple[str, str], tuple[str, str]]:
    """The copies (:func:`copy_sources`) of a name that identifies the rows of its table: a
    column named like a name (``CompanyName``, 名称) with one distinct value per row or nearly
    (at least 90% of its rows), not a category. "Ernst Handel" in ``Orders.ShipName`` is a
    customer; "Germany" in ``Orders.ShipCountry`` and an address in ``Orders.ShipAddress`` stay
    readings of their own ("orders shipped to Germany"). Tables without a recorded row count are
    left out."""
    rows = {t.name: t.row_count for t in schema.tables}
    distinct = {(c.table, c.column): c.distinct for c in columns}
    return {
        k: src
        for k, src in copy_sources(columns, schema).items()
        if NAME_COLUMN.search(src[1]) and rows.get(src[0], 0) > 0 and distinct.get(src, 0) >= 0.9 * rows[src[0]]
    }


def load_value_index(folder: str | Path) -> ValueIndex | None:
    """The index saved in a data set or router ``folder`` (:data:`VALUE_INDEX_FILE`), else None (with a warning
    when the file exists but cannot be read)."""
    p = Path(folder) / VALUE_INDEX_FILE
    if not p.is_file():
        return None
    try:
        return ValueIndex.load(p)
    except DataError as exc:
        warnings.warn(f"{exc}; routing without value linking", UserWarning, stacklevel=2)
        return None
