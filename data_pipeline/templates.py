"""Question templates (English and Chinese) and the words they are filled with.

A :class:`Template` is one phrasing of one *family* of questions. Families say what the gold
query does; the *scope* says whether the path joins tables (``join``: the entity is on the
anchor, the data asked for on the target) or stays in one table (``self``):

========== ======= ==========================================================================
family     scope   gold SQL
========== ======= ==========================================================================
list       join    ``SELECT DISTINCT T.col ... WHERE A.entity_col = v``
count      join    ``SELECT COUNT(DISTINCT T.pk) ... WHERE A.entity_col = v``
agg        join    ``SELECT SUM|AVG|MIN|MAX(T.col) ... WHERE A.entity_col = v`` (MIN/MAX: a date)
filter     join    ``SELECT DISTINCT T.col ... WHERE A.entity_col = v AND T.f >= x`` (or ``= v2``)
lookup     self    ``SELECT DISTINCT A.col FROM A WHERE A.entity_col = v``
count      self    ``SELECT COUNT(*) FROM A WHERE A.entity_col = v``
agg        self    ``SELECT SUM|AVG|MIN|MAX(A.col) FROM A WHERE A.entity_col = v``
filter     self    ``SELECT DISTINCT A.col FROM A WHERE A.entity_col = v AND A.f >= x``
========== ======= ==========================================================================

Placeholders: ``{a}``/``{a_pl}`` anchor table (singular/plural), ``{t}``/``{t_pl}`` target
table, ``{acol}`` the entity's column, ``{tcol}`` the column asked for, ``{ncol}`` the numeric
(or date) column aggregated, ``{agg}`` "total"/"average"/"earliest"/"latest" (总/平均/最早/最近).
``{E1}`` (the anchor entity) and ``{E2}`` (a second condition such as "unit price of at least
18") stay in the text until entity filling, so paraphrasing never touches them.

Held-out phrasings: within each (family, scope, language) group, every template whose index
``k`` has ``k % HELDOUT_EVERY == HELDOUT_EVERY - 1`` (one in four) is reserved for the
``test_heldout`` split and never appears in train, validation or test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.schema import Column, Table, humanize

HELDOUT_EVERY = 4
"""One template in this many (per family, scope and language) is held out."""

FAMILIES_BY_SCOPE: dict[str, tuple[str, ...]] = {
    "join": ("list", "count", "agg", "filter"),
    "self": ("lookup", "count", "agg", "filter"),
}
"""Question families for multi-table paths (``join``) and single-table paths (``self``)."""

AGG_WORDS: dict[str, dict[str, str]] = {
    "en": {"SUM": "total", "AVG": "average", "MIN": "earliest", "MAX": "latest"},
    "zh": {"SUM": "总", "AVG": "平均", "MIN": "最早", "MAX": "最近"},
}
"""How an aggregate function reads in a question (``MIN``/``MAX`` only ever take a date column)."""


@dataclass(frozen=True)
class Template:
    """One phrasing. ``id`` is ``family.scope.language.k`` (``family.scope.language.style.k`` for the
    natural styles of :data:`NATURAL_STYLES`); ``heldout`` marks test-only phrasings."""

    id: str
    family: str
    scope: str
    language: str
    text: str
    style: str = "classic"

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
    "join": ("all_count", "all_list", "top"),
    "self": ("all_count", "all_list", "all_agg"),
}
"""Families of questions without a filter value (``BuildConfig.unfiltered_share``). ``all_pairs``
(two tables' columns side by side) has templates but is not generated: its route has no target
a question could name (Spider's rule calls it ``select_spans_tables``).

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
top        join    ``SELECT T.col FROM A JOIN ... T GROUP BY T.pk ORDER BY COUNT(DISTINCT A.pk) DESC LIMIT 1``
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


NATURAL_STYLES = (
    "value", "agent", "agent_event", "who", "actor", "column", "via", "howmuch", "where", "when",
    "units", "units_actor", "money", "money_actor", "spend", "hours", "date",
)  # fmt: skip
"""Phrasings as people write them (issue: questions that name a value alone, relation verbs,
question words that imply the target). ``{E1}`` is never preceded by its table's name:

========== ======= =========================================================================
style      scope   used when
========== ======= =========================================================================
value      both    the entity is named text (a name, a title): "Which customers are linked to
                   {E1}?", "What is the price of {E1}?", "{E1} 的订单有哪些？"
agent      join    the target is an agent with a verb (:mod:`data_pipeline.relations`):
                   "Which suppliers supplied {E1}?", "哪些员工负责过 {E1}？"
agent_event join   as ``agent``, and the via holds an event table whose noun carries the
                   relation: "Which employees handled the orders of {E1}?"
who        both    the target is a person table with a verb: "Who supplies {E1}?", "谁承运过 {E1}？";
                   or one row's person column is asked for: "Who is the contact of {E1}?"
actor      join    the anchor is an agent: "What products did {E1} buy?", "{E1} 购买过哪些产品？"
column     join    the column asked for is the only one of its name in the schema: it names the
                   target ("What is the order date for {E1}?", "{E1} 的订购数量是多少？")
via        join    the route is not the shortest between its anchor and target: the via tables
                   are named ("the advisors of the students of {E1}")
howmuch    self    the asked-for column is a price or amount: "How much does {E1} cost?"
where      self    the asked-for column is a place: "Where is {E1} located?"
when       self    the asked-for column is a date: "When is the hire date of {E1}?"
units      join    a total of the only quantity column in the schema: "How many units in
                   total for {E1}?", "{E1} 一共多少件？"
units_actor join   as ``units``, with the anchor's verb: "How many units has {E1} sold in total?"
money      join    a total of the only table's money column (an amount or a total; never a
                   unit price or a fee): "How much in total for {E1}?", "{E1} 一共多少钱？"
money_actor join   as ``money``, with the anchor's verb: "How much has {E1} prescribed in total?"
spend      join    as ``money``, the anchor a buyer: "How much has {E1} spent in total?"
hours      join    a total of the only hours column: "How many hours in total for {E1}?"
date       both    the earliest or latest of the table's own date (the only date column, or
                   the one named after the table: OrderDate of Orders): "When was the latest
                   order of {E1}?", "{E1} 最近一次订单是什么时候？"
========== ======= =========================================================================

Extra placeholders: ``{v_base}``/``{v_past}``/``{v_zh}`` the verb, ``{ev_pl}``/``{ev}`` the event
table's words, ``{via_en}``/``{via_zh}`` the via tables as a chain ("the students of the"; "的学生的")."""

_NATURAL_TEXTS: dict[tuple[str, str, str, str], tuple[str, ...]] = {
    # ------------------------------------------------------------------ value alone, multi-table
    ("list", "join", "en", "value"): (
        "Which {t_pl} are linked to {E1}? Give the {tcol}.",
        "What are the {t_pl} of {E1}? I need the {tcol}.",
        "Show the {tcol} of the {t_pl} for {E1}.",
        "{E1}: list the {tcol} of its {t_pl}.",
        "List the {t_pl} that go with {E1} (their {tcol}).",
        "I need the {tcol} of every {t} connected to {E1}.",
        "{t_pl} of {E1}? Show their {tcol}.",
        "What {tcol} do the {t_pl} of {E1} have?",
    ),
    ("count", "join", "en", "value"): (
        "How many {t_pl} does {E1} have?",
        "How many {t_pl} are there for {E1}?",
        "Count the {t_pl} of {E1}.",
        "Number of {t_pl} for {E1}?",
        "{E1} has how many {t_pl}?",
        "How many {t_pl} involve {E1}?",
        "What's the number of {t_pl} tied to {E1}?",
        "how many {t_pl} for {E1}",
    ),
    ("agg", "join", "en", "value"): (
        "What is the {agg} {ncol} of the {t_pl} of {E1}?",
        "{agg} {ncol} of {E1}'s {t_pl}?",
        "For {E1}, what is the {agg} {ncol} of its {t_pl}?",
        "Give me the {agg} {ncol} over the {t_pl} of {E1}.",
        "What do the {t_pl} of {E1} come to in {agg} {ncol}?",
        "Calculate the {agg} {ncol} of {t_pl} for {E1}.",
    ),
    ("filter", "join", "en", "value"): (
        "Which {t_pl} of {E1} have {E2}? Show the {tcol}.",
        "{E1}'s {t_pl} with {E2}: list the {tcol}.",
        "Among the {t_pl} of {E1}, which have {E2}? Give the {tcol}.",
        "List the {tcol} of the {t_pl} for {E1} that have {E2}.",
        "Show {t_pl} of {E1} with {E2} (the {tcol}).",
        "What {tcol} do {E1}'s {t_pl} with {E2} have?",
    ),
    ("list", "join", "zh", "value"): (
        "{E1} 的{t}有哪些？列出{tcol}。",
        "{E1} 对应哪些{t}？要{tcol}。",
        "{E1} 相关的{t}的{tcol}是什么？",
        "查一下 {E1} 的{t}{tcol}。",
        "{E1} 都有哪些{t}？给出{tcol}。",
        "和 {E1} 有关的{t}，{tcol}分别是什么？",
        "看看 {E1} 的所有{t}，显示{tcol}。",
        "{E1} 涉及的{t}，要{tcol}。",
    ),
    ("count", "join", "zh", "value"): (
        "{E1} 有多少{t}？",
        "{E1} 一共有几个{t}？",
        "{E1} 的{t}数量是多少？",
        "统计一下 {E1} 的{t}数。",
        "{E1} 对应多少个{t}？",
        "和 {E1} 相关的{t}有几个？",
        "{E1} 名下有多少{t}？",
        "{E1} 的{t}一共多少",
    ),
    ("agg", "join", "zh", "value"): (
        "{E1} 的{t}{agg}{ncol}是多少？",
        "{E1} 所有{t}的{agg}{ncol}？",
        "算一下 {E1} 的{t}的{agg}{ncol}。",
        "{E1} 相关{t}的{agg}{ncol}是多少？",
        "{E1} 的{t}按{ncol}算，{agg}是多少？",
        "{E1} 的{t}，{agg}{ncol}多少？",
    ),
    ("filter", "join", "zh", "value"): (
        "{E1} 的{t}里哪些{E2}？列出{tcol}。",
        "{E1} 中{E2}的{t}有哪些？要{tcol}。",
        "找出 {E1} 的{t}中{E2}的，显示{tcol}。",
        "{E1} 的{t}，筛选{E2}的，看{tcol}。",
        "{E1} 有哪些{E2}的{t}？给出{tcol}。",
        "列出 {E1} 名下{E2}的{t}的{tcol}。",
    ),
    # ------------------------------------------------------------------ the target is an agent with a verb
    ("list", "join", "en", "agent"): (
        "Which {t_pl} {v_past} {E1}? Give the {tcol}.",
        "What {t_pl} have {v_past} {E1}? Show the {tcol}.",
        "List the {t_pl} that {v_past} {E1} (their {tcol}).",
        "Which {t} {v_past} {E1}? I want the {tcol}.",
        "{E1} was {v_past} by which {t_pl}? Give the {tcol}.",
        "Find the {t_pl} that {v_past} {E1} and show the {tcol}.",
    ),
    ("count", "join", "en", "agent"): (
        "How many {t_pl} {v_past} {E1}?",
        "How many different {t_pl} have {v_past} {E1}?",
        "Count the {t_pl} that {v_past} {E1}.",
        "Number of {t_pl} who {v_past} {E1}?",
    ),
    ("list", "join", "zh", "agent"): (
        "哪些{t}{v_zh}过 {E1}？列出{tcol}。",
        "{E1} 是哪些{t}{v_zh}的？要{tcol}。",
        "{v_zh}过 {E1} 的{t}有哪些？给出{tcol}。",
        "查一下{v_zh} {E1} 的{t}，显示{tcol}。",
        "有哪些{t}{v_zh}了 {E1}？看{tcol}。",
        "{E1} 由哪个{t}{v_zh}？要{tcol}。",
    ),
    ("count", "join", "zh", "agent"): (
        "有多少{t}{v_zh}过 {E1}？",
        "{v_zh}过 {E1} 的{t}有几个？",
        "{E1} 被多少个{t}{v_zh}过？",
        "统计{v_zh} {E1} 的{t}数量。",
    ),
    ("list", "join", "en", "agent_event"): (
        "Which {t_pl} {v_past} the {ev_pl} of {E1}? Give the {tcol}.",
        "Who {v_past} {E1}'s {ev_pl}? Show the {tcol} of the {t_pl}.",
        "List the {t_pl} that {v_past} {ev_pl} for {E1} (their {tcol}).",
        "Which {t_pl} {v_past} {ev_pl} of {E1}? I need the {tcol}.",
    ),
    ("count", "join", "en", "agent_event"): (
        "How many {t_pl} {v_past} the {ev_pl} of {E1}?",
        "How many different {t_pl} {v_past} {ev_pl} for {E1}?",
        "Count the {t_pl} that {v_past} {E1}'s {ev_pl}.",
        "Number of {t_pl} that {v_past} {ev_pl} of {E1}?",
    ),
    ("list", "join", "zh", "agent_event"): (
        "哪些{t}{v_zh}过 {E1} 的{ev}？列出{tcol}。",
        "谁{v_zh}了 {E1} 的{ev}？要{t}的{tcol}。",
        "{E1} 的{ev}是哪些{t}{v_zh}的？给出{tcol}。",
        "{v_zh} {E1} {ev}的{t}有哪些？显示{tcol}。",
    ),
    ("count", "join", "zh", "agent_event"): (
        "有多少{t}{v_zh}过 {E1} 的{ev}？",
        "{E1} 的{ev}由几个{t}{v_zh}？",
        "{v_zh}过 {E1} {ev}的{t}一共几个？",
        "统计{v_zh} {E1} 的{ev}的{t}数量。",
    ),
    ("list", "join", "en", "who"): (
        "Who {v_past} {E1}? Give the {tcol}.",
        "Who has {v_past} {E1}? I need their {tcol}.",
        "Who {v_past} {E1}? Show the {t}'s {tcol}.",
        "Tell me who {v_past} {E1} ({tcol}).",
    ),
    ("list", "join", "zh", "who"): (
        "谁{v_zh}过 {E1}？给出{tcol}。",
        "{E1} 是谁{v_zh}的？要{tcol}。",
        "谁{v_zh}了 {E1}？列出{t}的{tcol}。",
        "是谁{v_zh}的 {E1}？显示{tcol}。",
    ),
    # ------------------------------------------------------------------ the anchor is an agent
    ("list", "join", "en", "actor"): (
        "What {t_pl} did {E1} {v_base}? Give the {tcol}.",
        "Which {t_pl} has {E1} {v_past}? Show the {tcol}.",
        "List the {t_pl} {E1} {v_past} (their {tcol}).",
        "What did {E1} {v_base}? I need the {tcol} of the {t_pl}.",
        "Show the {tcol} of the {t_pl} that {E1} {v_past}.",
        "Which {t_pl} were {v_past} by {E1}? Give the {tcol}.",
    ),
    ("count", "join", "en", "actor"): (
        "How many {t_pl} did {E1} {v_base}?",
        "How many {t_pl} has {E1} {v_past}?",
        "Count the {t_pl} {E1} {v_past}.",
        "Number of {t_pl} {v_past} by {E1}?",
    ),
    ("agg", "join", "en", "actor"): (
        "What is the {agg} {ncol} of the {t_pl} {E1} {v_past}?",
        "{agg} {ncol} of the {t_pl} that {E1} {v_past}?",
        "For the {t_pl} {E1} {v_past}, what is the {agg} {ncol}?",
        "Give the {agg} {ncol} of {t_pl} {v_past} by {E1}.",
    ),
    ("list", "join", "zh", "actor"): (
        "{E1} {v_zh}过哪些{t}？列出{tcol}。",
        "{E1} {v_zh}了什么{t}？要{tcol}。",
        "{E1} 都{v_zh}过哪些{t}？给出{tcol}。",
        "查一下 {E1} {v_zh}的{t}，显示{tcol}。",
        "{E1} {v_zh}的{t}有哪些？看{tcol}。",
        "{E1} {v_zh}过的{t}，{tcol}是什么？",
    ),
    ("count", "join", "zh", "actor"): (
        "{E1} {v_zh}了多少{t}？",
        "{E1} 一共{v_zh}过几个{t}？",
        "{E1} {v_zh}的{t}有多少？",
        "统计 {E1} {v_zh}过的{t}数量。",
    ),
    ("agg", "join", "zh", "actor"): (
        "{E1} {v_zh}的{t}{agg}{ncol}是多少？",
        "{E1} {v_zh}过的{t}，{agg}{ncol}多少？",
        "算一下 {E1} {v_zh}的{t}的{agg}{ncol}。",
        "{E1} {v_zh}的所有{t}的{agg}{ncol}？",
    ),
    # ------------------------------------------------------------------ a total of what the target measures
    ("agg", "join", "en", "units"): (
        "How many units in total for {E1}?",
        "What is the total number of units for {E1}?",
        "How many units does {E1} come to altogether?",
        "Total units for {E1}?",
    ),
    ("agg", "join", "zh", "units"): (
        "{E1} 一共多少件？",
        "{E1} 总共有多少数量？",
        "{E1} 加起来一共多少个？",
        "{E1} 合计多少件？",
    ),
    ("agg", "join", "en", "units_actor"): (
        "How many units has {E1} {v_past} in total?",
        "How many units did {E1} {v_base} altogether?",
        "In total, how many units were {v_past} by {E1}?",
        "Total units {E1} {v_past}?",
    ),
    ("agg", "join", "zh", "units_actor"): (
        "{E1} 一共{v_zh}了多少件？",
        "{E1} 总共{v_zh}过多少数量？",
        "{E1} {v_zh}的数量加起来是多少？",
        "{E1} 累计{v_zh}了多少？",
    ),
    ("agg", "join", "en", "money"): (
        "How much in total for {E1}?",
        "What is the total amount for {E1}?",
        "How much does {E1} add up to?",
        "How much money in total for {E1}?",
    ),
    ("agg", "join", "zh", "money"): (
        "{E1} 一共多少钱？",
        "{E1} 总金额是多少？",
        "{E1} 加起来多少钱？",
        "{E1} 合计多少钱？",
    ),
    ("agg", "join", "en", "money_actor"): (
        "How much has {E1} {v_past} in total?",
        "What is the total value {E1} {v_past}?",
        "How much did {E1} {v_base} altogether, in money?",
        "In money, how much has {E1} {v_past}?",
    ),
    ("agg", "join", "zh", "money_actor"): (
        "{E1} 一共{v_zh}了多少钱？",
        "{E1} {v_zh}的总金额是多少？",
        "{E1} 累计{v_zh}了多少钱？",
        "{E1} {v_zh}的加起来多少钱？",
    ),
    ("agg", "join", "en", "spend"): (
        "How much has {E1} spent in total?",
        "How much money has {E1} spent?",
        "What is the total {E1} has paid?",
        "How much did {E1} spend altogether?",
    ),
    ("agg", "join", "zh", "spend"): (
        "{E1} 一共花了多少钱？",
        "{E1} 总共消费了多少？",
        "{E1} 花的钱加起来有多少？",
        "{E1} 一共付了多少钱？",
    ),
    ("agg", "join", "en", "hours"): (
        "How many hours in total for {E1}?",
        "What is the total number of hours for {E1}?",
        "How many hours does {E1} add up to?",
        "Total hours for {E1}?",
    ),
    ("agg", "join", "zh", "hours"): (
        "{E1} 一共多少小时？",
        "{E1} 总共多少工时？",
        "{E1} 加起来多少个小时？",
        "{E1} 合计多少小时？",
    ),
    ("agg", "join", "en", "date"): (
        "When was the {agg} {t} of {E1}?",
        "When did {E1} have its {agg} {t}?",
        "What was the date of the {agg} {t} for {E1}?",
        "{E1}: when was the {agg} {t}?",
    ),
    ("agg", "join", "zh", "date"): (
        "{E1} 的{t}{agg}是哪天？",
        "{E1} {agg}一次{t}是什么时候？",
        "{E1} {agg}的{t}是哪一天？",
        "{E1} 的{t}，{agg}的日期是哪天？",
    ),
    ("agg", "self", "en", "date"): (
        "When was the {agg} {a} in {E1}?",
        "In {E1}, when was the {agg} {a}?",
        "What was the date of the {agg} {a} from {E1}?",
        "When was the {agg} {a} for {E1}?",
    ),
    ("agg", "self", "zh", "date"): (
        "{E1} 的{a}{agg}是哪天？",
        "{E1} {agg}一次{a}是什么时候？",
        "{E1} {agg}的{a}是哪一天？",
        "{E1} 的{a}，{agg}的日期是哪天？",
    ),
    # ------------------------------------------------------------------ the target named by its column alone
    ("list", "join", "en", "column"): (
        "What is the {tcol} for {E1}?",
        "{tcol} of {E1}?",
        "Show the {tcol} for {E1}.",
        "Give me every {tcol} for {E1}.",
        "List the {tcol} values for {E1}.",
        "What {tcol} goes with {E1}?",
    ),
    ("agg", "join", "en", "column"): (
        "What is the {agg} {ncol} for {E1}?",
        "{agg} {ncol} of {E1}?",
        "Give me the {agg} {ncol} for {E1}.",
        "For {E1}, what is the {agg} {ncol}?",
    ),
    ("list", "join", "zh", "column"): (
        "{E1} 的{tcol}是什么？",
        "{E1} 的{tcol}有哪些？",
        "查一下 {E1} 的{tcol}。",
        "{E1} 对应的{tcol}？",
        "{E1} 都有哪些{tcol}？",
        "给出 {E1} 的{tcol}。",
    ),
    ("agg", "join", "zh", "column"): (
        "{E1} 的{agg}{ncol}是多少？",
        "{E1} {agg}{ncol}多少？",
        "算一下 {E1} 的{agg}{ncol}。",
        "{E1} 的{ncol}{agg}是多少？",
    ),
    # ------------------------------------------------------------------ a route that is not the shortest: name the via
    ("list", "join", "en", "via"): (
        "Which {t_pl} belong to {via_en} {E1}? Give the {tcol}.",
        "List the {tcol} of the {t_pl} of {via_en} {E1}.",
        "Show the {t_pl} reached through {via_en} {E1} (their {tcol}).",
        "What are the {t_pl} of {via_en} {E1}? I need the {tcol}.",
    ),
    ("count", "join", "en", "via"): (
        "How many {t_pl} do {via_en} {E1} have?",
        "Count the {t_pl} of {via_en} {E1}.",
        "How many {t_pl} belong to {via_en} {E1}?",
        "Number of {t_pl} of {via_en} {E1}?",
    ),
    ("agg", "join", "en", "via"): (
        "What is the {agg} {ncol} of the {t_pl} of {via_en} {E1}?",
        "Give the {agg} {ncol} over the {t_pl} of {via_en} {E1}.",
        "{agg} {ncol} of the {t_pl} of {via_en} {E1}?",
        "Compute the {agg} {ncol} for the {t_pl} of {via_en} {E1}.",
    ),
    ("filter", "join", "en", "via"): (
        "Which {t_pl} of {via_en} {E1} have {E2}? Give the {tcol}.",
        "List the {tcol} of the {t_pl} of {via_en} {E1} with {E2}.",
        "Among the {t_pl} of {via_en} {E1}, which have {E2}? Show the {tcol}.",
        "{t_pl} of {via_en} {E1} with {E2}: their {tcol}?",
    ),
    ("list", "join", "zh", "via"): (
        "{a} {E1} {via_zh}{t}有哪些？列出{tcol}。",
        "查询 {a} {E1} {via_zh}{t}的{tcol}。",
        "{a} {E1} {via_zh}{t}，{tcol}是什么？",
        "列出 {a} {E1} {via_zh}所有{t}，要{tcol}。",
    ),
    ("count", "join", "zh", "via"): (
        "{a} {E1} {via_zh}{t}有多少个？",
        "统计 {a} {E1} {via_zh}{t}数量。",
        "{a} {E1} {via_zh}{t}一共几个？",
        "{a} {E1} {via_zh}{t}数目是多少？",
    ),
    ("agg", "join", "zh", "via"): (
        "{a} {E1} {via_zh}{t}{agg}{ncol}是多少？",
        "计算 {a} {E1} {via_zh}{t}的{agg}{ncol}。",
        "{a} {E1} {via_zh}所有{t}的{agg}{ncol}？",
        "求 {a} {E1} {via_zh}{t}的{agg}{ncol}。",
    ),
    ("filter", "join", "zh", "via"): (
        "{a} {E1} {via_zh}{t}中，哪些{E2}？列出{tcol}。",
        "找出 {a} {E1} {via_zh}{E2}的{t}，显示{tcol}。",
        "{a} {E1} {via_zh}{t}里{E2}的有哪些？要{tcol}。",
        "列出 {a} {E1} {via_zh}{E2}的{t}的{tcol}。",
    ),
    # ------------------------------------------------------------------ value alone, one table
    ("lookup", "self", "en", "value"): (
        "What is the {tcol} of {E1}?",
        "What's {E1}'s {tcol}?",
        "{E1}: what is the {tcol}?",
        "Tell me the {tcol} of {E1}.",
        "Which {tcol} does {E1} have?",
        "{tcol} of {E1}?",
        "Give me {E1}'s {tcol}.",
        "I'd like to know the {tcol} for {E1}.",
    ),
    ("lookup", "self", "en", "howmuch"): (
        "How much does {E1} cost?",
        "What does {E1} cost?",
        "How much is {E1}?",
        "What is the {tcol} of {E1}?",
    ),
    ("lookup", "self", "en", "where"): (
        "Where is {E1}?",
        "Where is {E1} located?",
        "Where is {E1} based?",
        "Which {tcol} is {E1} in?",
    ),
    ("lookup", "self", "en", "who"): (
        "Who is the {tcol} of {E1}?",
        "Who's the {tcol} at {E1}?",
        "{E1}: who is the {tcol}?",
        "Tell me who the {tcol} of {E1} is.",
    ),
    ("lookup", "self", "zh", "who"): (
        "{E1} 的{tcol}是谁？",
        "谁是 {E1} 的{tcol}？",
        "{E1} 的{tcol}叫什么？",
        "{E1}，{tcol}是哪位？",
    ),
    ("lookup", "self", "en", "when"): (
        "When is the {tcol} of {E1}?",
        "What {tcol} does {E1} have?",
        "On what date is {E1}'s {tcol}?",
        "When was {E1}'s {tcol}?",
    ),
    ("count", "self", "en", "value"): (
        "How many {a_pl} are in {E1}?",
        "How many {a_pl} are there in {E1}?",
        "Count the {a_pl} in {E1}.",
        "Number of {a_pl} from {E1}?",
        "How many {a_pl} come from {E1}?",
        "{E1}: how many {a_pl}?",
    ),
    ("agg", "self", "en", "value"): (
        "What is the {agg} {ncol} of {a_pl} in {E1}?",
        "{agg} {ncol} for {a_pl} in {E1}?",
        "Give the {agg} {ncol} of the {a_pl} from {E1}.",
        "For {E1}, what is the {agg} {ncol} of the {a_pl}?",
    ),
    ("filter", "self", "en", "value"): (
        "Which {a_pl} in {E1} have {E2}? Show the {tcol}.",
        "List the {tcol} of {a_pl} from {E1} with {E2}.",
        "{a_pl} in {E1} with {E2}: their {tcol}?",
        "Show the {a_pl} of {E1} that have {E2} (the {tcol}).",
    ),
    ("lookup", "self", "zh", "value"): (
        "{E1} 的{tcol}是什么？",
        "{E1} 的{tcol}是多少？",
        "查一下 {E1} 的{tcol}。",
        "{E1} 的{tcol}？",
        "告诉我 {E1} 的{tcol}。",
        "{E1} {tcol}是啥？",
        "我想知道 {E1} 的{tcol}。",
        "{E1}，{tcol}是哪个？",
    ),
    ("lookup", "self", "zh", "howmuch"): (
        "{E1} 多少钱？",
        "{E1} 卖多少钱？",
        "{E1} 的价格是多少？",
        "{E1} 的{tcol}是多少？",
    ),
    ("lookup", "self", "zh", "where"): (
        "{E1} 在哪里？",
        "{E1} 在哪个{tcol}？",
        "{E1} 位于哪里？",
        "{E1} 是哪里的？",
    ),
    ("lookup", "self", "zh", "when"): (
        "{E1} 的{tcol}是哪天？",
        "{E1} 的{tcol}是什么时候？",
        "{E1} 是哪天的{tcol}？",
        "查一下 {E1} 的{tcol}日期。",
    ),
    ("count", "self", "zh", "value"): (
        "{E1} 有多少{a}？",
        "{E1} 的{a}有几个？",
        "来自 {E1} 的{a}有多少？",
        "统计 {E1} 的{a}数量。",
        "{E1} 一共几个{a}？",
        "{E1} 有几个{a}",
    ),
    ("agg", "self", "zh", "value"): (
        "{E1} 的{a}{agg}{ncol}是多少？",
        "{E1} 的{a}，{agg}{ncol}多少？",
        "算一下 {E1} 的{a}的{agg}{ncol}。",
        "{E1} 所有{a}的{agg}{ncol}？",
    ),
    ("filter", "self", "zh", "value"): (
        "{E1} 的{a}中哪些{E2}？列出{tcol}。",
        "{E1} 有哪些{E2}的{a}？要{tcol}。",
        "找出 {E1} {E2}的{a}，显示{tcol}。",
        "{E1} 的{a}里{E2}的，{tcol}是什么？",
    ),
}


TOP_FAMILY = "top"
"""Family of superlative questions without a filter value ("Which customer has the most orders?"):
``SELECT T.col FROM A JOIN ... T GROUP BY T.key ORDER BY COUNT(DISTINCT A.key) DESC LIMIT 1``."""

_TOP_TEXTS: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("top", "join", "en"): (
        "Which {t} has the most {a_pl}?",
        "Which {t} has the largest number of {a_pl}?",
        "What {t} is linked to the most {a_pl}?",
        "Which {t} comes first by number of {a_pl}?",
    ),
    ("top", "join", "zh"): (
        "哪个{t}的{a}最多？",
        "{a}最多的{t}是哪个？",
        "哪个{t}关联的{a}数量最多？",
        "按{a}数量排，第一的{t}是哪个？",
    ),
}


def _build(texts: dict[tuple[str, str, str], tuple[str, ...]]) -> tuple[Template, ...]:
    out = []
    for (family, scope, lang), texts_ in texts.items():
        for k, text in enumerate(texts_):
            out.append(Template(f"{family}.{scope}.{lang}.{k}", family, scope, lang, text))
    return tuple(out)


def _build_natural(texts: dict[tuple[str, str, str, str], tuple[str, ...]]) -> tuple[Template, ...]:
    out = []
    for (family, scope, lang, style), texts_ in texts.items():
        for k, text in enumerate(texts_):
            out.append(Template(f"{family}.{scope}.{lang}.{style}.{k}", family, scope, lang, text, style))
    return tuple(out)


TEMPLATES: tuple[Template, ...] = _build(_TEXTS)
"""Every classic template with a filter value, grouped by (family, scope, language) in index order."""

NATURAL_TEMPLATES: tuple[Template, ...] = _build_natural(_NATURAL_TEXTS)
"""Templates in the styles of :data:`NATURAL_STYLES` (the entity named by its value alone)."""

UNFILTERED_TEMPLATES: tuple[Template, ...] = _build(_UNFILTERED_TEXTS) + _build(_TOP_TEXTS)
"""Templates without a filter value (:data:`UNFILTERED_FAMILIES_BY_SCOPE` and ``top``); same id scheme and held-out rule."""

_BY_ID = {t.id: t for t in (*TEMPLATES, *NATURAL_TEMPLATES, *UNFILTERED_TEMPLATES)}


def template(template_id: str) -> Template:
    """The template with id ``template_id`` (KeyError when unknown)."""
    return _BY_ID[template_id]


def templates_for(family: str, scope: str, language: str, style: str = "classic") -> tuple[Template, ...]:
    """Templates of one (family, scope, language, style) group, held-out ones included."""
    key = (family, scope, language, style)
    return tuple(t for t in _BY_ID.values() if (t.family, t.scope, t.language, t.style) == key)


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


_EN_ASK_SENTENCE = re.compile(r"(?P<keep>.*?\?)\s+(?P<drop>[^?]*\{tcol\}[^?]*)")
_EN_ASK_TAIL = re.compile(r"\s*\((?:their |the )?\{tcol\}\)|\s+and (?:return|show) the \{tcol\}")
_ZH_ASK_SENTENCE = re.compile(r"(?P<keep>.*?？)(?P<drop>[^？]*\{tcol\}[^？]*)")
_ZH_ASK_CLAUSE = re.compile(r"(?P<keep>(?:查一下|查询|列出|看看).*?)，(?P<drop>[^，]*\{tcol\}[^，]*)。")


def bare_template(text: str, language: str) -> str | None:
    """The template without the words that name the asked-for column ``{tcol}``, or None when
    the column is part of the question itself.

    People ask for a table's rows without saying which column ("Which customers ordered
    Tunnbröd?"); the generated question then means the rows' name column
    (:func:`data_pipeline.stages.answer_columns`). Only a trailing request for the column goes:
    a sentence after the question ("... ? Give the {tcol}."), a bracket ("(their {tcol})"), "and
    show the {tcol}", or in Chinese a sentence after "？" or a clause after an imperative
    ("查一下 ...，显示{tcol}。").

    >>> bare_template("Which {t_pl} {v_past} {E1}? Give the {tcol}.", "en")
    'Which {t_pl} {v_past} {E1}?'
    >>> bare_template("List the {t_pl} that go with {E1} (their {tcol}).", "en")
    'List the {t_pl} that go with {E1}.'
    >>> bare_template("查一下 {E1} {v_zh}的{t}，显示{tcol}。", "zh")
    '查一下 {E1} {v_zh}的{t}。'
    >>> bare_template("{E1} 的{t}有哪些？列出{tcol}。", "zh"), bare_template("Show the {tcol} for {E1}.", "en")
    ('{E1} 的{t}有哪些？', None)
    """
    if language == "zh":
        m = _ZH_ASK_SENTENCE.fullmatch(text)
        out = m["keep"] if m and "{E" not in m["drop"] else None
        if out is None and (m := _ZH_ASK_CLAUSE.fullmatch(text)) and "{E" not in m["drop"]:
            out = m["keep"] + "。"
    else:
        m = _EN_ASK_SENTENCE.fullmatch(text)
        out = m["keep"] if m and "{E" not in m["drop"] else None
        if out is None:
            stripped = _EN_ASK_TAIL.sub("", text)
            out = stripped if stripped != text else None
    return out if out is not None and "{tcol}" not in out else None


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
    >>> _is_cryptic("ys", "doctors"), _is_cryptic("zzys_id", "attending doctor")
    (True, True)
    """
    desc = [w for w in re.findall(r"[a-z]+", description.lower()) if len(w) >= 4]
    tokens = humanize(name).split()
    if any(t[:4] == w[:4] for t in tokens if len(t) >= 4 for w in desc):
        return False
    # a "y" alone does not make a word: pinyin initials such as ys, yf, zzys are abbreviations
    return any(not re.search(r"[aeiou]", t) for t in tokens)


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
    if len(set(words.split())) < len(words.split()):  # "customer customer demo" -> "customer demo"
        words = " ".join(dict.fromkeys(words.split()))
    if table.description and _is_cryptic(table.name, table.description):
        words = _short(table.description)
    if language == "zh":
        return words, words
    return singular(words), plural(words)


def column_words(column: Column, language: str) -> str:
    """Words for a column: the sidecar ``zh`` name in Chinese, else the readable name
    (the description when the name is cryptic, or spells the pinyin initials of its Chinese
    name: ``cfje`` for 处方金额 has vowels but is no English word).

    >>> column_words(Column("cfje", description="prescription amount (in yuan)", zh="处方金额"), "en")
    'prescription amount'
    """
    if language == "zh" and column.zh:
        return column.zh
    if column.description and (_is_cryptic(column.name, column.description) or _spells_initials(column)):
        return _short(column.description)
    return humanize(column.name)


def _spells_initials(column: Column) -> bool:
    # imported when called: mentions imports relations, which imports this module
    from data_pipeline.mentions import pinyin_initials

    return bool(column.zh) and humanize(column.name).replace(" ", "") == pinyin_initials(column.zh)
