"""How people talk about the relation between two tables: agents and their verbs, events, persons.

Questions people write name a relation by a verb ("Which customers *ordered* Tunnbröd?", "Who
*supplies* Gravad lax?", "谁*负责* Wartian Herkku 的订单？"), not by the foreign key. This module
reads a table's role off its name, description and Chinese name, with a small lexicon of the
business words the field's schemas use:

- an **agent** does something to the rows it is linked to, and has a verb
  (suppliers supply, shippers ship, employees handle, customers order, teachers teach,
  doctors treat);
- an **event** is a row that records something happening between agents and items (orders,
  invoices, visits, prescriptions, enrollments); its noun can carry the relation
  ("the orders of Wartian Herkku");
- a **person** table is one a question can ask for with "who" / "谁".

Question generation (:mod:`data_pipeline.stages`) uses these to write the verb and question-word
templates of :mod:`data_pipeline.templates`; a table the lexicon does not know simply gets the
templates without a verb.

>>> from core.schema import Table, Column
>>> s = Table("Suppliers", (Column("CompanyName"),), description="companies that supply the products", zh="供应商")
>>> agent_verb(s, "en"), agent_verb(s, "zh"), is_person(s)
(Verb(base='supply', past='supplied', zh='供应'), Verb(base='supply', past='supplied', zh='供应'), True)
>>> is_event(Table("Orders", (Column("OrderID"),), zh="订单")), is_event(Table("Products", (Column("ProductID"),)))
(True, False)
>>> agent_verb(Table("ys", (Column("ysxm"),), description="doctors", zh="医生"), "zh").zh
'诊治'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from core.schema import Table, humanize
from data_pipeline.templates import plural, table_words


@dataclass(frozen=True)
class Verb:
    """A relation verb: English base and past forms, and the Chinese verb."""

    base: str
    past: str
    zh: str


# (English stems that mark the table, Chinese words that mark it, its verbs: the first is the usual one)
_AGENTS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[Verb, ...]], ...] = (
    (("supplier", "vendor", "manufactur"), ("供应商", "厂商", "供货"),
     (Verb("supply", "supplied", "供应"), Verb("provide", "provided", "提供"), Verb("make", "made", "生产"))),
    (("shipper", "carrier", "courier", "shipping compan", "logistic"), ("承运", "物流", "快递"),
     (Verb("ship", "shipped", "承运"), Verb("deliver", "delivered", "运送"))),
    (("customer", "client", "buyer", "purchaser"), ("客户", "顾客", "买家"),
     (Verb("buy", "bought", "购买"), Verb("order", "ordered", "订购"), Verb("purchase", "purchased", "买"))),
    (("employee", "staff", "salesperson", "sales rep", "agent", "clerk"), ("员工", "职员", "销售代表", "业务员"),
     (Verb("handle", "handled", "负责"), Verb("sell", "sold", "销售"), Verb("process", "processed", "处理"))),
    (("teacher", "instructor", "professor", "lecturer", "faculty"), ("教师", "老师", "讲师", "教授"),
     (Verb("teach", "taught", "教"), Verb("give", "gave", "讲授"))),
    (("advisor", "adviser", "mentor", "tutor"), ("导师",), (Verb("advise", "advised", "指导"), Verb("mentor", "mentored", "带"))),
    (("student", "pupil", "learner"), ("学生",), (Verb("take", "took", "选修"), Verb("attend", "attended", "上"))),
    (("doctor", "physician", "surgeon", "clinician"), ("医生", "医师", "大夫"),
     (Verb("treat", "treated", "诊治"), Verb("see", "saw", "看诊"), Verb("prescribe", "prescribed", "开"))),
    (("patient", "inpatient"), ("患者", "病人", "病患"), (Verb("visit", "visited", "就诊"), Verb("see", "saw", "看"))),
    (("artist", "band", "singer", "musician", "performer"), ("艺术家", "歌手", "乐队", "艺人"),
     (Verb("record", "recorded", "演唱"), Verb("perform", "performed", "唱"), Verb("release", "released", "发行"))),
    (("composer", "author", "writer"), ("作曲", "作者", "作家"), (Verb("write", "wrote", "创作"), Verb("compose", "composed", "作曲"))),
    (("contractor", "subcontractor"), ("承包商", "分包商", "施工单位"),
     (Verb("work on", "worked on", "承接"), Verb("build", "built", "施工"))),
    (("manager", "director", "supervisor"), ("经理", "主管"), (Verb("manage", "managed", "管理"), Verb("lead", "led", "带领"))),
)
"""Agent tables and their verbs, most specific first (the first match wins)."""

_EVENTS: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("order", "invoice", "sale", "purchase", "payment", "transaction", "shipment", "booking", "reservation",
     "visit", "encounter", "admission", "registration", "prescription", "enrollment", "enrolment", "registration",
     "contract", "timesheet", "change order", "rental", "loan", "appointment", "claim", "ticket"),
    ("订单", "发票", "销售", "采购", "付款", "交易", "发货", "预订", "就诊", "挂号", "处方", "住院", "入院",
     "选课", "合同", "工时", "变更", "借阅", "预约", "明细"),
)  # fmt: skip
"""English stems and Chinese words of event tables (rows that record something happening)."""

_PERSON_WORDS = (
    ("person", "people", "member", "user", "contact", "company", "companies"),
    ("人", "会员", "用户", "公司"),
)
"""Words of tables a "who" question can ask for, beyond the agents."""


# (English stems of a table's name, other English nouns for it, other Chinese nouns for it)
_NOUNS: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (("track", "曲目"), ("song",), ("歌曲",)),
    (("album", "专辑"), ("record",), ("唱片",)),
    (("artist", "艺人"), ("band", "singer"), ("歌手", "乐队")),
    (("genre", "流派"), ("music style",), ("风格",)),
    (("invoice line", "invoiceline", "发票明细"), ("purchased track", "sale"), ("购买明细",)),
    (("invoice", "发票"), ("purchase", "bill"), ("账单",)),
    (("customer", "客户"), ("client", "buyer"), ("顾客",)),
    (("employee", "员工"), ("staff member",), ("职员",)),
    (("product", "产品"), ("item",), ("商品",)),
    (("categor", "类别"), ("kind of product",), ("种类",)),
    (("supplier", "供应商"), ("vendor",), ("厂商",)),
    (("shipper", "承运商"), ("carrier", "shipping company"), ("物流公司", "快递公司")),
    (("order detail", "订单明细"), ("order line",), ("订单行",)),
    (("doctor", "医生"), ("physician",), ("大夫",)),
    (("patient", "患者"), (), ("病人",)),
    (("department", "科室"), (), ("部门",)),
    (("drug", "药品"), ("medicine", "medication"), ("药物",)),
    (("prescription", "处方"), (), ("药方",)),
    (("contractor", "承包商"), ("subcontractor",), ("施工方",)),
    (("timesheet", "工时记录"), ("hours log",), ("工时",)),
    (("client", "客户"), ("customer",), ("甲方",)),
)
"""Other nouns people use for common tables ("songs" for Track, 病人 for patients), matched by the
table's English name stem or Chinese name."""


def table_synonyms(table: Table) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(english, chinese)`` other nouns for ``table``: the built-in ones for its kind of table
    (matched on the head of its name, or of its description when the name is cryptic), plus a
    single word in parentheses right after the description's head ("tracks (songs)").

    >>> t = Table("Track", (), description="tracks (songs) for sale", zh="曲目")
    >>> table_synonyms(t)
    (('song', 'songs'), ('歌曲',))
    >>> table_synonyms(Table("mz_yp", (), description="drugs", zh="药品目录"))
    (('medicine', 'medicines', 'medication', 'medications'), ('药物',))
    >>> table_synonyms(Table("CustomerCustomerDemo", (), zh="客户人群关联"))  # not a customer
    ((), ())
    """
    en: list[str] = []
    zh: list[str] = []
    head = " " + table_words(table, "en")[0].lower() + " "  # the description's head for a cryptic name (mz_yp: "drug")
    for stems, other_en, other_zh in _NOUNS:
        # the stem must be the name's head: "customer demo" is no customer, 处方明细 no prescription
        if any(re.search(rf"\b{re.escape(st)}\w*\s*$", head) if st.isascii() else bool(table.zh) and _zh_head(table.zh, (st,))
               for st in stems):  # fmt: skip
            en += other_en
            zh += other_zh
            break
    m = re.match(r"^\s*[\w ]+?\(\s*([A-Za-z]{3,}(?: [A-Za-z]+)*)\s*\)", table.description or "")
    if m:  # words only: not "( )" or "(2019 catalogue)"
        en.append(m.group(1).strip())
    m = re.search(r"（([\u3400-\u9fff]{2,6})）", table.description_zh or "")
    if m:
        zh.append(m.group(1))
    words: list[str] = []
    for w in en:
        words += [w, w + "s"] if not w.endswith("s") and " " not in w else [w]
    return tuple(dict.fromkeys(words)), tuple(dict.fromkeys(zh))


GENERIC_HEADS = frozenset({"record", "item", "detail", "line", "entry", "list"})
"""English last words no one uses alone for a table; the word before them is its noun ("pharmacy stock record": "stock")."""

VAGUE_HEADS = frozenset({"info", "information", "data", "type", "log", "demo", "link", "map", "relation"})
"""English last words that leave a table without a short noun ("media type" is not called "media")."""

_PHRASE_NAME = re.compile(r"\b(by|of|for|per|above|below|over|under|in|with|from|to)\b|\d")
"""A name that is a phrase or a period (``SalesByYear``, ``ProductsAboveAveragePrice``, ``sales_2019``):
its last word is no noun for the table."""

GENERIC_HEADS_ZH = ("目录", "明细", "记录")
"""Chinese name endings no one uses alone for a table; what comes before is its noun (药品目录: 药品)."""

VAGUE_HEADS_ZH = frozenset({"列表", "信息", "关联", "类型", "清单", "格式"})
"""Chinese name endings that leave a table without a short noun (播放列表 is not called 播放)."""


@lru_cache(maxsize=256)
def short_nouns(tables: tuple[Table, ...]) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The word people use alone for a table named by a longer phrase, per table name:
    ``(english singular and plural, chinese)``.

    People write "prescriptions" for outpatient prescriptions and 处方 for 门诊处方. The short noun is
    the head of the table's readable name (its last word; 2 characters for a Chinese name of 4 or
    more). A generic head (:data:`GENERIC_HEADS`: "record", 目录) is dropped and the word before
    it is used instead (药品目录 -> 药品), at lower rank; a vague one (:data:`VAGUE_HEADS`: "type",
    列表) leaves the table without a short noun. A short noun that is another table's name, last word or
    synonym, or that a table of the same rank also claims, belongs to no one (员工负责区域 and
    销售区域 both end in 区域); a lower-rank claim gives way to a head (处方明细 leaves 处方 to 门诊处方).

    >>> ts = (Table("mz_cf", (), description="outpatient prescriptions", zh="门诊处方"),
    ...       Table("mz_cfmx", (), description="prescription items", zh="处方明细"),
    ...       Table("mz_yp", (), description="drugs", zh="药品目录"))
    >>> short_nouns(ts)
    {'mz_cf': (('prescription', 'prescriptions'), ('处方',)), 'mz_yp': ((), ('药品',))}
    """
    claims: dict[tuple[str, str], list[tuple[int, str]]] = {}  # (language, word) -> [(rank, table)]
    taken: dict[tuple[str, str], set[str]] = {}  # words that already name a table
    for t in tables:
        words = table_words(t, "en")[0].lower().split()
        syn_en, syn_zh = table_synonyms(t)
        for w in (" ".join(words), words[-1] if words else "", *(x.lower() for x in syn_en)):
            taken.setdefault(("en", w), set()).add(t.name)
        for z in (t.zh, *syn_zh):
            taken.setdefault(("zh", z), set()).add(t.name)
        if len(words) >= 2 and words[-1] not in VAGUE_HEADS and not _PHRASE_NAME.search(" ".join(words)):
            rank, head = 0, list(words)
            while head and head[-1] in GENERIC_HEADS:
                rank, head = 1, head[:-1]
            if head:
                claims.setdefault(("en", head[-1]), []).append((rank, t.name))
        z = t.zh
        if z and len(z) >= 4 and all("\u3400" <= ch <= "\u9fff" for ch in z):
            rest, rank = z, 0
            for g in GENERIC_HEADS_ZH:
                if rest.endswith(g):
                    rest, rank = rest[: -len(g)], 1
                    break
            short = rest if rank and len(rest) in (2, 3) else rest[-2:]
            if len(short) >= 2 and short not in VAGUE_HEADS_ZH:
                claims.setdefault(("zh", short), []).append((rank, t.name))
    out: dict[str, tuple[list[str], list[str]]] = {}
    for (lang, word), who in claims.items():
        best = min(r for r, _ in who)
        owners = [name for r, name in who if r == best]
        if len(owners) != 1 or taken.get((lang, word), set()) - {owners[0]}:
            continue
        en, zh = out.setdefault(owners[0], ([], []))
        if lang == "en":
            en += [word, plural(word)]
        else:
            zh.append(word)
    return {name: (tuple(en), tuple(zh)) for name, (en, zh) in out.items()}


def _name(table: Table) -> str:
    return " " + humanize(table.name).lower() + " "


def _head(table: Table) -> str:
    """The description's first three words: its head noun phrase ("outpatient prescriptions")."""
    if not table.description:
        return ""
    return " " + " ".join(re.split(r"[,;(]", table.description)[0].lower().split()[:3]) + " "


def _zh_head(zh: str, words: tuple[str, ...]) -> bool:
    """A Chinese name whose head is one of ``words``: it ends with it, or with it and one more
    character (承运商, 销售代表): 员工负责区域 is a territory, not an employee."""
    return any(zh.endswith(w) or zh[:-1].endswith(w) and len(zh) <= len(w) + 1 for w in words)


def _matches(table: Table, stems: tuple[str, ...], zh_words: tuple[str, ...], *, head_only: bool) -> bool | None:
    """True/False when the name or Chinese name decides, None when only the description can.

    With ``head_only`` the English name's last word must carry the stem (``customer customer
    demo`` is no customer); otherwise any word of the name may (``order details`` is an event).
    """
    name = _name(table)
    if head_only:
        name = " " + name.split()[-1] + " " if name.strip() else name
    if _has_stem(name, stems) or bool(table.zh) and _zh_head(table.zh, zh_words):
        return True
    if table.zh:
        return False
    return None


def _has_stem(text: str, stems: tuple[str, ...]) -> bool:
    return any(re.search(rf"\b{re.escape(s)}", text) for s in stems)


def agent_verb(table: Table, language: str = "en") -> Verb | None:
    """The usual verb of an agent table (``Suppliers`` -> supply / 供应), else None (see :func:`agent_verbs`)."""
    verbs = agent_verbs(table)
    return verbs[0] if verbs else None


@lru_cache(maxsize=4096)
def agent_verbs(table: Table) -> tuple[Verb, ...]:
    """The verbs of an agent table, the usual one first (``Suppliers``: supply, provide, make), else ``()``.

    The English name and the Chinese name decide; the description's head noun phrase only when
    the table has neither a readable name nor a Chinese name. An event table is no agent.
    Each verb carries both languages."""
    if is_event(table):
        return ()
    for stems, zh_words, verbs in _AGENTS:
        if _matches(table, stems, zh_words, head_only=True):
            return verbs
    if not table.zh:
        head = _head(table)
        for stems, _, verbs in _AGENTS:
            if _has_stem(head, stems):
                return verbs
    return ()


@lru_cache(maxsize=4096)
def is_event(table: Table) -> bool:
    """True for a table whose rows record something happening (orders, invoices, visits, 处方)."""
    stems, zh_words = _EVENTS
    found = _matches(table, stems, zh_words, head_only=False)
    return found if found is not None else _has_stem(_head(table), stems)


@lru_cache(maxsize=4096)
def is_person(table: Table) -> bool:
    """True for a table a question can ask for with "who" (agents, people, companies)."""
    if agent_verb(table) is not None:
        return True
    stems, zh_words = _PERSON_WORDS
    found = _matches(table, stems, zh_words, head_only=True)
    return found if found is not None else _has_stem(_head(table), stems)
