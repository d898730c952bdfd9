"""Question templates (English and Chinese) and the words they are filled with.

A :class:`Template` is one phrasing of one *family* of questions. Families say what the gold
query does; the *scope* says whether the path joins tables (``join``: the entity is on the
anchor, the data asked for on the target) or stays in one table (``self``):

========== ======= ==========================================================================
family     scope   gold SQL
========== ======= ==========================================================================
list       join    ``SELECT DISTINCT T.col ... WHERE A.entity_col = v``
count      join    ``SELECT COUNT(DISTINCT T.pk) ... WHERE A.entity_col = v``
agg        join    ``SELECT SUM|AVG(T.num_col) ... WHERE A.entity_col = v``
filter     join    ``SELECT DISTINCT T.col ... WHERE A.entity_col = v AND T.f >= x`` (or ``= v2``)
lookup     self    ``SELECT DISTINCT A.col FROM A WHERE A.entity_col = v``
count      self    ``SELECT COUNT(*) FROM A WHERE A.entity_col = v``
agg        self    ``SELECT SUM|AVG(A.num_col) FROM A WHERE A.entity_col = v``
filter     self    ``SELECT DISTINCT A.col FROM A WHERE A.entity_col = v AND A.f >= x``
========== ======= ==========================================================================

Placeholders: ``{a}``/``{a_pl}`` anchor table (singular/plural), ``{t}``/``{t_pl}`` target
table, ``{acol}`` the entity's column, ``{tcol}`` the column asked for, ``{ncol}`` the numeric
column aggregated, ``{agg}`` "total"/"average" (总/平均). ``{E1}`` (the anchor entity) and
``{E2}`` (a second condition such as "unit price of at least 18") stay in the text until entity
filling, so paraphrasing never touches them.

Held-out phrasings: within each (family, scope, language) group, every template whose index
``k`` has ``k % HELDOUT_EVERY == HELDOUT_EVERY - 1`` (one in four) is reserved for the
``test_heldout`` split and never appears in train, validation or test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from data_pipeline.schema import Column, Table, humanize

HELDOUT_EVERY = 4
"""One template in this many (per family, scope and language) is held out."""

FAMILIES_BY_SCOPE: dict[str, tuple[str, ...]] = {
    "join": ("list", "count", "agg", "filter"),
    "self": ("lookup", "count", "agg", "filter"),
}
"""Question families for multi-table paths (``join``) and single-table paths (``self``)."""

AGG_WORDS: dict[str, dict[str, str]] = {
    "en": {"SUM": "total", "AVG": "average"},
    "zh": {"SUM": "总", "AVG": "平均"},
}
"""How an aggregate function reads in a question."""


@dataclass(frozen=True)
class Template:
    """One phrasing. ``id`` is ``family.scope.language.k``; ``heldout`` marks test-only phrasings."""

    id: str
    family: str
    scope: str
    language: str
    text: str

    @property
    def index(self) -> int:
        return int(self.id.rsplit(".", 1)[1])

    @property
    def heldout(self) -> bool:
        return self.index % HELDOUT_EVERY == HELDOUT_EVERY - 1


_TEXTS: dict[tuple[str, str, str], tuple[str, ...]] = {
    # ------------------------------------------------------------------ English, multi-table
    ("list", "join", "en"): (
        "Which {t_pl} are linked to the {a} {E1}? Give the {tcol}.",
        "List the {tcol} of every {t} related to {a} {E1}.",
        "Show me the {tcol} of the {t_pl} for the {a} whose {acol} is {E1}.",
        "For {a} {E1}, what {tcol} values appear among its {t_pl}?",
        "What are the {t_pl} connected with {a} {E1}? I need the {tcol}.",
        "Find the {t_pl} of {a} {E1} and return the {tcol}.",
        "Give me the {tcol} for all {t_pl} tied to the {a} {E1}.",
        "Get the {tcol} from the {t_pl} that belong to {a} {E1}.",
    ),
    ("count", "join", "en"): (
        "How many {t_pl} does the {a} {E1} have?",
        "Count the {t_pl} linked to {a} {E1}.",
        "What is the number of {t_pl} for the {a} whose {acol} is {E1}?",
        "{a} {E1}: how many {t_pl} in total?",
        "How many distinct {t_pl} are related to {a} {E1}?",
        "Tell me how many {t_pl} the {a} {E1} is connected to.",
        "Give the count of {t_pl} associated with the {a} {E1}.",
        "Number of {t_pl} behind {a} {E1}?",
    ),
    ("agg", "join", "en"): (
        "What is the {agg} {ncol} of the {t_pl} of {a} {E1}?",
        "Give me the {agg} {ncol} across {t_pl} linked to {a} {E1}.",
        "Compute the {agg} {ncol} of {t_pl} for the {a} whose {acol} is {E1}.",
        "For {a} {E1}, what do its {t_pl} come to in {agg} {ncol}?",
        "Show the {agg} {ncol} over all {t_pl} related to the {a} {E1}.",
        "What {agg} {ncol} do the {t_pl} of {a} {E1} have?",
        "Calculate the {agg} {ncol} for {t_pl} connected with {a} {E1}.",
        "{agg} {ncol} of {t_pl}, restricted to {a} {E1}?",
    ),
    ("filter", "join", "en"): (
        "Which {t_pl} of {a} {E1} have {E2}? Show the {tcol}.",
        "List the {tcol} of {t_pl} linked to {a} {E1} with {E2}.",
        "Show the {t_pl} for the {a} whose {acol} is {E1}, only those with {E2}, by {tcol}.",
        "Among the {t_pl} of {a} {E1}, which ones have {E2}? I want the {tcol}.",
        "Find {t_pl} related to the {a} {E1} that have {E2}, and give the {tcol}.",
        "What {tcol} do the {t_pl} of {a} {E1} with {E2} have?",
        "Give me the {tcol} of every {t} tied to {a} {E1} having {E2}.",
        "{t_pl} of {a} {E1} with {E2}: list their {tcol}.",
    ),
    # ------------------------------------------------------------------ English, one table
    ("lookup", "self", "en"): (
        "What is the {tcol} of the {a} {E1}?",
        "Show the {tcol} for {a} {E1}.",
        "Look up the {tcol} of the {a} whose {acol} is {E1}.",
        "{a} {E1}: what is its {tcol}?",
        "Tell me the {tcol} of {a} {E1}.",
        "Which {tcol} does the {a} {E1} have?",
        "Give me the {tcol} recorded for the {a} {E1}.",
        "The {a} {E1} has which {tcol}?",
    ),
    ("count", "self", "en"): (
        "How many {a_pl} have {acol} {E1}?",
        "Count the {a_pl} whose {acol} is {E1}.",
        "What is the number of {a_pl} with {acol} equal to {E1}?",
        "{acol} {E1}: how many {a_pl} are there?",
        "How many {a_pl} are there with {acol} {E1}?",
        "Tell me the count of {a_pl} whose {acol} is {E1}.",
        "Give the number of {a_pl} where the {acol} is {E1}.",
        "Number of {a_pl} having {acol} {E1}?",
    ),
    ("agg", "self", "en"): (
        "What is the {agg} {ncol} of {a_pl} whose {acol} is {E1}?",
        "Give the {agg} {ncol} over all {a_pl} with {acol} {E1}.",
        "Compute the {agg} {ncol} for {a_pl} where the {acol} is {E1}.",
        "Across {a_pl} with {acol} {E1}, what is the {agg} {ncol}?",
        "Show the {agg} {ncol} of the {a_pl} having {acol} {E1}.",
        "What {agg} {ncol} do {a_pl} with {acol} {E1} have?",
        "Calculate the {agg} {ncol} of {a_pl} whose {acol} equals {E1}.",
        "{agg} {ncol} for {a_pl} with {acol} {E1}?",
    ),
    ("filter", "self", "en"): (
        "Which {a_pl} with {acol} {E1} have {E2}? Show the {tcol}.",
        "List the {tcol} of {a_pl} whose {acol} is {E1} and that have {E2}.",
        "Show the {a_pl} where the {acol} is {E1}, with {E2}, by {tcol}.",
        "Among {a_pl} with {acol} {E1}, which have {E2}? Give the {tcol}.",
        "Find the {a_pl} having {acol} {E1} and {E2}; return the {tcol}.",
        "What {tcol} do {a_pl} with {acol} {E1} and {E2} have?",
        "Give me the {tcol} of each {a} whose {acol} is {E1} with {E2}.",
        "{a_pl} with {acol} {E1} and {E2}: list the {tcol}.",
    ),
    # ------------------------------------------------------------------ Chinese, multi-table
    ("list", "join", "zh"): (
        "{a} {E1} 关联的{t}有哪些？列出{tcol}。",
        "查询{a} {E1} 对应的所有{t}的{tcol}。",
        "{acol}为 {E1} 的{a}，相关{t}的{tcol}是什么？",
        "和{a} {E1} 有关的{t}，给我看看{tcol}。",
        "列出{a} {E1} 的全部{t}，显示{tcol}。",
        "{a} {E1} 涉及哪些{t}？要{tcol}。",
        "找出与{a} {E1} 相关联的{t}的{tcol}。",
        "{a} {E1} 下面的{t}都有哪些{tcol}？",
    ),
    ("count", "join", "zh"): (
        "{a} {E1} 有多少个{t}？",
        "统计与{a} {E1} 相关的{t}数量。",
        "{acol}为 {E1} 的{a}共有几个{t}？",
        "{a} {E1} 名下的{t}一共多少？",
        "和{a} {E1} 关联的{t}有几个？",
        "计算{a} {E1} 对应的{t}个数。",
        "{a} {E1} 一共涉及多少{t}？",
        "{a} {E1} 的{t}数目是多少？",
    ),
    ("agg", "join", "zh"): (
        "{a} {E1} 的{t}{agg}{ncol}是多少？",
        "计算与{a} {E1} 相关的{t}的{agg}{ncol}。",
        "{acol}为 {E1} 的{a}，其{t}的{agg}{ncol}是多少？",
        "{a} {E1} 名下所有{t}的{agg}{ncol}？",
        "统计{a} {E1} 关联的{t}的{agg}{ncol}。",
        "和{a} {E1} 有关的{t}，{agg}{ncol}是多少？",
        "求{a} {E1} 对应{t}的{agg}{ncol}。",
        "{a} {E1} 的全部{t}按{ncol}算，{agg}是多少？",
    ),
    ("filter", "join", "zh"): (
        "{a} {E1} 的{t}中，哪些{E2}？列出{tcol}。",
        "查询{a} {E1} 关联且{E2}的{t}的{tcol}。",
        "{acol}为 {E1} 的{a}，有哪些{E2}的{t}？给出{tcol}。",
        "在{a} {E1} 的{t}里找出{E2}的，显示{tcol}。",
        "列出与{a} {E1} 相关、{E2}的{t}的{tcol}。",
        "{a} {E1} 对应的{t}里{E2}的有哪些？要{tcol}。",
        "找出{a} {E1} 名下{E2}的{t}，给出{tcol}。",
        "{a} {E1} 的{t}，筛选{E2}的，看{tcol}。",
    ),
    # ------------------------------------------------------------------ Chinese, one table
    ("lookup", "self", "zh"): (
        "{a} {E1} 的{tcol}是什么？",
        "查一下{a} {E1} 的{tcol}。",
        "{acol}为 {E1} 的{a}，{tcol}是什么？",
        "{a} {E1} 对应的{tcol}？",
        "告诉我{a} {E1} 的{tcol}。",
        "{a} {E1} 的{tcol}是哪个？",
        "请给出{a} {E1} 登记的{tcol}。",
        "{a} {E1}，{tcol}？",
    ),
    ("count", "self", "zh"): (
        "{acol}为 {E1} 的{a}有多少个？",
        "统计{acol}是 {E1} 的{a}数量。",
        "有几个{a}的{acol}是 {E1}？",
        "{acol} {E1} 下共有多少{a}？",
        "{acol}等于 {E1} 的{a}一共几个？",
        "计算{acol}为 {E1} 的{a}个数。",
        "{a}里{acol}是 {E1} 的有多少？",
        "{acol} {E1} 的{a}数目是多少？",
    ),
    ("agg", "self", "zh"): (
        "{acol}为 {E1} 的{a}，{agg}{ncol}是多少？",
        "计算{acol}是 {E1} 的所有{a}的{agg}{ncol}。",
        "{a}中{acol}为 {E1} 的，{ncol}的{agg}值是多少？",
        "{acol} {E1} 的{a}{agg}{ncol}？",
        "统计{acol}为 {E1} 的{a}的{agg}{ncol}。",
        "{acol}等于 {E1} 的{a}，{ncol}{agg}多少？",
        "求{acol}是 {E1} 的{a}的{agg}{ncol}。",
        "{acol}为 {E1} 的全部{a}按{ncol}算，{agg}是多少？",
    ),
    ("filter", "self", "zh"): (
        "{acol}为 {E1} 的{a}中，哪些{E2}？列出{tcol}。",
        "查询{acol}是 {E1} 且{E2}的{a}的{tcol}。",
        "找出{acol}为 {E1}、{E2}的{a}，显示{tcol}。",
        "在{acol}是 {E1} 的{a}里，{E2}的有哪些？给出{tcol}。",
        "列出{acol}等于 {E1} 并且{E2}的{a}的{tcol}。",
        "{acol}为 {E1} 的{a}里{E2}的是哪些？要{tcol}。",
        "筛选{acol}是 {E1} 、{E2}的{a}，看{tcol}。",
        "{acol} {E1} 的{a}中{E2}的，{tcol}分别是什么？",
    ),
}


UNFILTERED_FAMILIES_BY_SCOPE: dict[str, tuple[str, ...]] = {
    "join": ("all_count", "all_list", "all_pairs"),
    "self": ("all_count", "all_list", "all_pairs", "all_agg"),
}
"""Families of questions without a filter value (opt-in: ``BuildConfig.unfiltered_share``).

========== ======= ==========================================================================
family     scope   gold SQL (no WHERE)
========== ======= ==========================================================================
all_count  join    ``SELECT COUNT(DISTINCT T.pk) FROM A JOIN ... T``
all_list   join    ``SELECT DISTINCT T.col FROM A JOIN ... T``
all_pairs  join    ``SELECT DISTINCT T.col, A.acol FROM A JOIN ... T``
all_count  self    ``SELECT COUNT(*) FROM A``
all_list   self    ``SELECT DISTINCT A.col FROM A``
all_pairs  self    ``SELECT DISTINCT A.col, A.acol FROM A``
all_agg    self    ``SELECT SUM|AVG(A.num_col) FROM A``
========== ======= ==========================================================================

The FROM clause starts at the anchor and the target's column comes first in the SELECT, so
:func:`evaluation.gold_paths.derive_gold_path` reads the same route back (no filter over a join:
the anchor is the join's other end)."""

_UNFILTERED_TEXTS: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("all_count", "join", "en"): (
        "How many {t_pl} have a {a}?",
        "Count the {t_pl} that are linked to some {a}.",
        "What is the number of {t_pl} with at least one {a}?",
        "How many different {t_pl} appear with {a_pl}?",
    ),
    ("all_list", "join", "en"): (
        "List the {tcol} of all {t_pl} that have a {a}.",
        "Show the {tcol} of every {t} linked to any {a}.",
        "What {tcol} values do the {t_pl} of all {a_pl} have?",
        "Give me the {tcol} of the {t_pl} connected with {a_pl}.",
    ),
    ("all_pairs", "join", "en"): (
        "List the {tcol} of the {t_pl} together with the {acol} of their {a}.",
        "Show each {t}'s {tcol} and the {acol} of its {a}.",
        "For every {a}, give its {acol} and the {tcol} of its {t_pl}.",
        "Give all pairs of {a} {acol} and {t} {tcol}.",
    ),
    ("all_count", "self", "en"): (
        "How many {a_pl} are there?",
        "Count all {a_pl}.",
        "What is the number of {a_pl} in all?",
        "How many {a_pl} do we have?",
    ),
    ("all_list", "self", "en"): (
        "List the {tcol} of all {a_pl}.",
        "Show every {a}'s {tcol}.",
        "What are the {tcol} values of the {a_pl}?",
        "Give me the {tcol} of each {a}.",
    ),
    ("all_pairs", "self", "en"): (
        "List the {acol} and {tcol} of every {a}.",
        "Show the {tcol} and {acol} of all {a_pl}.",
        "For each {a}, give its {acol} and {tcol}.",
        "What are the {acol} and the {tcol} of the {a_pl}?",
    ),
    ("all_agg", "self", "en"): (
        "What is the {agg} {ncol} of all {a_pl}?",
        "Compute the {agg} {ncol} over every {a}.",
        "Give the {agg} {ncol} of the {a_pl}.",
        "Across all {a_pl}, what is the {agg} {ncol}?",
    ),
    ("all_count", "join", "zh"): (
        "有{a}的{t}有多少个？",
        "统计关联了{a}的{t}数量。",
        "至少有一个{a}的{t}共有几个？",
        "和{a}有关的{t}一共多少？",
    ),
    ("all_list", "join", "zh"): (
        "列出所有有{a}的{t}的{tcol}。",
        "显示与{a}关联的每个{t}的{tcol}。",
        "所有{a}的{t}都有哪些{tcol}？",
        "给出和{a}相关的{t}的{tcol}。",
    ),
    ("all_pairs", "join", "zh"): (
        "列出{t}的{tcol}以及对应{a}的{acol}。",
        "显示每个{t}的{tcol}和它的{a}的{acol}。",
        "对每个{a}，给出{acol}和其{t}的{tcol}。",
        "给出所有{a}的{acol}与{t}的{tcol}的配对。",
    ),
    ("all_count", "self", "zh"): (
        "一共有多少个{a}？",
        "统计{a}的数量。",
        "{a}总数是多少？",
        "我们有几个{a}？",
    ),
    ("all_list", "self", "zh"): (
        "列出所有{a}的{tcol}。",
        "显示每个{a}的{tcol}。",
        "{a}的{tcol}都有哪些？",
        "给出各个{a}的{tcol}。",
    ),
    ("all_pairs", "self", "zh"): (
        "列出每个{a}的{acol}和{tcol}。",
        "显示所有{a}的{tcol}与{acol}。",
        "对每个{a}，给出{acol}和{tcol}。",
        "{a}的{acol}和{tcol}分别是什么？",
    ),
    ("all_agg", "self", "zh"): (
        "所有{a}的{agg}{ncol}是多少？",
        "计算全部{a}的{agg}{ncol}。",
        "给出{a}的{agg}{ncol}。",
        "{a}的{ncol}{agg}是多少？",
    ),
}


def _build(texts: dict[tuple[str, str, str], tuple[str, ...]]) -> tuple[Template, ...]:
    out = []
    for (family, scope, lang), texts_ in texts.items():
        for k, text in enumerate(texts_):
            out.append(Template(f"{family}.{scope}.{lang}.{k}", family, scope, lang, text))
    return tuple(out)


TEMPLATES: tuple[Template, ...] = _build(_TEXTS)
"""Every template with a filter value, grouped by (family, scope, language) in index order."""

UNFILTERED_TEMPLATES: tuple[Template, ...] = _build(_UNFILTERED_TEXTS)
"""Templates without a filter value (:data:`UNFILTERED_FAMILIES_BY_SCOPE`); same id scheme and held-out rule."""

_BY_ID = {t.id: t for t in (*TEMPLATES, *UNFILTERED_TEMPLATES)}


def template(template_id: str) -> Template:
    """The template with id ``template_id`` (KeyError when unknown)."""
    return _BY_ID[template_id]


def templates_for(family: str, scope: str, language: str) -> tuple[Template, ...]:
    """Templates of one (family, scope, language) group, held-out ones included."""
    return tuple(t for t in _BY_ID.values() if (t.family, t.scope, t.language) == (family, scope, language))


def heldout_template_ids() -> frozenset[str]:
    """Ids of the phrasings reserved for ``test_heldout`` (one in :data:`HELDOUT_EVERY` per group)."""
    return frozenset(t.id for t in _BY_ID.values() if t.heldout)


# ---------------------------------------------------------------------------- words

_CJK = r"\u3400-\u9fff\uff00-\uffef\u3000-\u303f"


def tidy(text: str, language: str) -> str:
    """Collapse spaces; in Chinese drop spaces between Chinese characters or punctuation and
    put one between Chinese characters and Latin letters or digits.

    >>> tidy("客户 Alfreds  Futterkiste 的 订单 有哪些？", "zh")
    '客户 Alfreds Futterkiste 的订单有哪些？'
    >>> tidy("查一下categories Seafood的id。", "zh")
    '查一下 categories Seafood 的 id。'
    >>> tidy("Which  orders ?", "en")
    'Which orders?'
    """
    text = " ".join(text.split())
    if language == "zh":
        text = re.sub(rf"(?<=[{_CJK}]) +(?=[{_CJK}])", "", text)
        text = re.sub(r" +(?=[，。？、：；！）])", "", text)
        text = re.sub(r"(?<=[（]) +", "", text)
        text = re.sub(r"(?<=[\u3400-\u9fff])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?=[\u3400-\u9fff])", " ", text)
    else:
        text = re.sub(r" +(?=[?.,;:!])", "", text)
    return text


def singular(words: str) -> str:
    """Singular of an English noun phrase (last word only): ``order details`` -> ``order detail``.

    >>> [singular(w) for w in ("categories", "addresses", "order details", "album", "boxes", "status")]
    ['category', 'address', 'order detail', 'album', 'box', 'status']
    """
    head, _, last = words.rpartition(" ")
    if last.endswith("ies") and len(last) > 4:
        last = last[:-3] + "y"
    elif re.search(r"(ss|x|ch|sh|z)es$", last):
        last = last[:-2]
    elif last.endswith("s") and not re.search(r"(ss|us|is)$", last):
        last = last[:-1]
    return f"{head} {last}" if head else last


def plural(words: str) -> str:
    """Plural of an English noun phrase (last word only): ``category`` -> ``categories``.

    >>> [plural(w) for w in ("category", "address", "album", "employee territories", "day")]
    ['categories', 'addresses', 'albums', 'employee territories', 'days']
    """
    words = singular(words)
    head, _, last = words.rpartition(" ")
    if re.search(r"[^aeiou]y$", last):
        last = last[:-1] + "ies"
    elif re.search(r"(s|x|ch|sh|z)$", last):
        last += "es"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def _is_cryptic(name: str, description: str) -> bool:
    """True when a name needs its description to be understood (``kfrq``, ``mz_cf``).

    A name is readable when one of its words shares its first four letters with a word of the
    description (``shippers``/``shipping``), or when all its words have a vowel (real words).

    >>> _is_cryptic("kfrq", "date the prescription was written"), _is_cryptic("Shippers", "shipping companies")
    (True, False)
    >>> _is_cryptic("Description", "what products the category covers")
    False
    """
    desc = [w for w in re.findall(r"[a-z]+", description.lower()) if len(w) >= 4]
    tokens = humanize(name).split()
    if any(t[:4] == w[:4] for t in tokens if len(t) >= 4 for w in desc):
        return False
    return any(not re.search(r"[aeiouy]", t) for t in tokens)


def _short(description: str) -> str:
    return re.split(r"[,;(]", description.strip())[0].strip().rstrip(".")


def table_words(table: Table, language: str) -> tuple[str, str]:
    """``(singular, plural)`` words for a table in ``language``.

    Chinese uses the sidecar's ``zh`` name (the same for both), else the readable name.
    English uses the readable name, or the description when the name is cryptic (``mz_cf``).
    """
    if language == "zh" and table.zh:
        return table.zh, table.zh
    words = humanize(table.name)
    if table.description and _is_cryptic(table.name, table.description):
        words = _short(table.description)
    if language == "zh":
        return words, words
    return singular(words), plural(words)


def column_words(column: Column, language: str) -> str:
    """Words for a column: the sidecar ``zh`` name in Chinese, else the readable name
    (the description when the name is cryptic)."""
    if language == "zh" and column.zh:
        return column.zh
    if column.description and _is_cryptic(column.name, column.description):
        return _short(column.description)
    return humanize(column.name)
