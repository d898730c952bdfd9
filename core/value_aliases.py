"""Names of well-known values in other languages, so a question can link a value it translates.

A Chinese analyst asks "德国的客户有哪些？" of a database that stores ``Germany``; an English
one asks about "the United States" of one that stores ``USA``. Value linking by spelling finds
neither. Countries are the values business databases share most, and their names in many
languages are kept by the ISO 3166 database that ``pycountry`` ships (with Debian's iso-codes
translations), so this module reads them from there rather than from a hand-made list.

:func:`country_aliases` gives, for a stored value that is a country (its English name, common
or official name, or ISO alpha-3 code, or one of :data:`EXTRA_NAMES`), the other names a question
may use for it: English names and Simplified and Traditional Chinese names. Codes are
recognised as stored values but never offered as aliases ("CAN" is not a way to say Canada in a
question).

:func:`glossary_aliases` reads the other names a database's own description gives its coded or
Chinese values ("prescription state (未缴费 unpaid, ...)"), so "unpaid" links '未缴费'.
"""

from __future__ import annotations

import functools
import gettext
import re
from collections.abc import Sequence

EXTRA_NAMES: dict[str, tuple[str, ...]] = {
    "GB": ("UK", "Britain", "Great Britain"),
    "US": ("US",),  # not "America": "North America" is a region
    "KR": ("South Korea", "韩国"),
    "KP": ("North Korea", "朝鲜"),
    "RU": ("Russia",),
    "TW": ("Taiwan",),
    "CZ": ("Czech Republic",),
    "TR": ("Turkey",),
}
"""Names people and databases use that the ISO names leave out (ISO alpha-2 code -> names)."""

CHINESE_LOCALES = ("zh_CN", "zh_TW")
"""Translations of the ISO names offered as aliases."""


@functools.cache
def _country_names() -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """``(recognised, aliases)``: folded stored form -> alpha-2 code, and alpha-2 code -> names
    a question may use (English and Chinese, codes left out)."""
    import pycountry

    translations = [gettext.translation("iso3166-1", pycountry.LOCALES_DIR, languages=[loc], fallback=True)
                    for loc in CHINESE_LOCALES]  # fmt: skip
    recognised: dict[str, str] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    for c in pycountry.countries:
        english = [getattr(c, attr) for attr in ("name", "common_name", "official_name") if getattr(c, attr, None)]
        extra = EXTRA_NAMES.get(c.alpha_2, ())
        names: dict[str, None] = {}
        for n in (*english, *extra):
            names[n] = None
        for tr in translations:
            for n in english:
                t = tr.gettext(n)
                if t != n:
                    names[t] = None
        for stored in (*names, c.alpha_3):
            recognised.setdefault(_key(stored), c.alpha_2)
        aliases[c.alpha_2] = tuple(n for n in names if not (n.isascii() and len(n) <= 3 and n.isupper()) or n in extra)
    return recognised, aliases


def _key(text: str) -> str:
    """How a stored value is compared with the names: a code or short name (USA, UK) in its own
    case ("Ben" is no BEN, "can" no CAN), anything longer case-folded."""
    text = text.strip()
    return text if text.isascii() and len(text) <= 3 else text.casefold()


@functools.cache
def _longer_names(alias: str) -> tuple[str, ...]:
    """Every country name in Chinese that holds ``alias`` inside it (苏丹 -> 南苏丹)."""
    _, aliases = _country_names()
    return tuple(n for names in aliases.values() for n in names if alias in n and n != alias and not n.isascii())


def alias_span_ok(question: str, start: int, end: int) -> bool:
    """Whether a Chinese country name found at ``question[start:end]`` is a mention of it: not a
    part of a longer country name (苏丹 in 南苏丹, 印度 in 印度尼西亚) and on word boundaries
    of jieba's segmentation (美国 is no word of 南美国家, "South American countries").
    A name in Latin letters is always a mention (the index matched it word by word).

    >>> alias_span_ok("德国的客户有哪些", 0, 2), alias_span_ok("南美国家的客户", 1, 3), alias_span_ok("南苏丹的客户", 1, 3)
    (True, False, False)
    """
    surface = question[start:end]
    if surface.isascii():
        return True
    for longer in _longer_names(surface):
        i = question.find(longer)
        while i >= 0:
            if i <= start and end <= i + len(longer):
                return False
            i = question.find(longer, i + 1)
    bounds = _word_bounds(question)
    return start in bounds and end in bounds


@functools.lru_cache(maxsize=256)
def _word_bounds(question: str) -> frozenset[int]:
    """Character offsets where jieba's words start or end in ``question``."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict" lines on first use
    return frozenset(i for _, a, b in jieba.tokenize(question) for i in (a, b))


def country_code(value: str) -> str | None:
    """The ISO alpha-2 code of the country ``value`` names, else None.

    >>> country_code("Germany"), country_code("USA"), country_code("UK"), country_code("德国"), country_code("Chai")
    ('DE', 'US', 'GB', 'DE', None)
    >>> country_code("germany"), country_code("Ben"), country_code("can"), country_code("Turkey")
    ('DE', None, None, 'TR')
    """
    recognised, _ = _country_names()
    return recognised.get(_key(value))


def country_aliases(value: str) -> tuple[str, ...]:
    """Other names of the country ``value`` names (English, Simplified and Traditional Chinese),
    without ``value`` itself; empty when ``value`` is no country.

    >>> aliases = country_aliases("Germany")
    >>> "德国" in aliases, "德國" in aliases, "Federal Republic of Germany" in aliases, "Germany" in aliases
    (True, True, True, False)
    >>> "美国" in country_aliases("USA"), "United States" in country_aliases("USA")
    (True, True)
    >>> country_aliases("Chai")
    ()
    """
    code = country_code(value)
    if code is None:
        return ()
    _, aliases = _country_names()
    own = value.strip().casefold()
    return tuple(a for a in aliases[code] if a.casefold() != own)


_GLOSS_END = re.compile(r",|;|\)|\bor\b|$")
_GLOSS = re.compile(r"[A-Za-z][A-Za-z' -]*[A-Za-z]")
MAX_GLOSS_CHARS = 80
"""Characters after a value in which its gloss must end."""
_FUNCTION_WORDS = frozenset({"yes", "no", "not", "none", "other", "others", "all", "any", "and", "or", "the", "true", "false"})
"""Glosses too common to stand for a value in a question ("是否 (是 yes, 否 no)": "no" is no mention of 否)."""


def glossary_aliases(description: str, values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``(value, english name)`` pairs a column's description gives for its stored values.

    A sidecar documents coded or Chinese values by what they mean: "prescription state (未缴费
    unpaid, 已缴费 paid, or 已发药 dispensed)". A question in English says "unpaid", and the
    query needs '未缴费'. A value counts when it appears in the description as a whole item and
    is followed by one to four English words, up to the next comma, "or", or bracket, that are not
    a function word ("yes", "no": :data:`_FUNCTION_WORDS`).

    >>> glossary_aliases("prescription state (未缴费 unpaid, 已缴费 paid, or 已发药 dispensed)", ["已发药", "已缴费", "未缴费"])
    (('未缴费', 'unpaid'), ('已缴费', 'paid'), ('已发药', 'dispensed'))
    >>> glossary_aliases("sex (男 male or 女 female)", ["女", "男"])
    (('男', 'male'), ('女', 'female'))
    >>> glossary_aliases("pharmacy name (门诊西药房, 中药房 or 住院药房)", ["中药房", "门诊西药房"])
    ()
    """
    out: list[tuple[str, str]] = []
    for value in sorted(set(values), key=len, reverse=True):  # the longest first: 主任医师 before 副主任医师's tail
        if not value.strip() or value.isascii() or value not in description:
            continue
        start = description.find(value)
        while start >= 0:
            end = start + len(value)
            if start == 0 or description[start - 1] in " \t(:,，（：":  # not 主任医师 inside 副主任医师
                window = min(len(description), end + MAX_GLOSS_CHARS)  # a gloss is a few words: never scan the rest
                stop = _GLOSS_END.search(description, end, window)
                gloss = description[end : stop.start() if stop else window].strip()
                if (_GLOSS.fullmatch(gloss) and 1 <= len(gloss.split()) <= 4 and gloss.casefold() not in _FUNCTION_WORDS
                        and all(gloss != g for _, g in out)):  # fmt: skip
                    out.append((value, gloss))
                    break
            start = description.find(value, end)
    order = {v: description.find(v) for v, _ in out}
    return tuple(sorted(out, key=lambda p: order[p[0]]))
