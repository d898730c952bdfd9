"""Table texts and lexical links of the router: tables of inputs with the value expected and why."""

from __future__ import annotations

import pytest

from core.schema import Column, Schema, Table, introspect
from data_pipeline.datasets import description_file, load_sample
from data_pipeline.mentions import mention_spans, name_code, pinyin_initials
from data_pipeline.relations import short_nouns, table_synonyms
from router.text import LINK_FEATURES, link_features, table_text, words

MZ_CF = Table(
    "mz_cf",
    (Column("id", "INTEGER", primary_key=True), Column("kfrq", "TEXT", zh="开方日期"), Column("ys_id", "INTEGER")),
    description="outpatient prescriptions",
    zh="门诊处方",
)
CUSTOMERS = Table(
    "Customers",
    (
        Column("CustomerID", "TEXT", primary_key=True, samples=("ALFKI",)),
        Column("CompanyName", "TEXT", zh="客户公司名称", samples=("Around the Horn", "Alfreds Futterkiste")),
        Column("City", "TEXT", samples=("Berlin",)),
    ),
    description="customer companies",
    zh="客户",
)
ORDERS = Table(
    "Orders",
    (Column("OrderID", "INTEGER", primary_key=True), Column("CustomerID", "TEXT"), Column("ShipName", "TEXT")),
    zh="订单",
)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("mz_cf", "mzcf"),  # pinyin abbreviation in two parts
        ("yf_kc", "yfkc"),
        ("kfrq", "kfrq"),  # one part of four letters still counts
        ("Customers", ""),  # capitalised English name
        ("order_items", ""),  # "items" has five letters: English, not an abbreviation
        ("Order Details", ""),  # spaces
        ("x", ""),  # too short to link anything
    ],
)
def test_name_code(name: str, code: str) -> None:
    assert name_code(name) == code


def test_pinyin_initials_drop_non_chinese() -> None:
    assert pinyin_initials("门诊处方") == "mzcf"
    assert pinyin_initials("查 mz_cf 的门诊处方") == "cdmzcf"  # "查" "的" count, Latin letters do not
    assert pinyin_initials("orders") == ""


def test_words_stem_plurals_and_split_camel_case() -> None:
    assert words("OrderDetails of the Categories") == {"order", "detail", "category"}
    assert words("addresses boxes") == {"address", "box"}


def test_table_text_has_every_source_of_words() -> None:
    text = table_text(MZ_CF)
    for part in ("mz_cf", "mz cf", "outpatient prescriptions", "门诊处方", "mzcf", "kfrq 开方日期"):
        assert part in text
    # an English name is not repeated when humanize leaves it unchanged... but case differs here
    assert table_text(Table("orders", (Column("id"),))) == "orders | columns: id"


@pytest.mark.parametrize(
    ("question", "table", "expected"),
    [
        # English table name word, plural in the question
        ("Which customers live in Berlin?", CUSTOMERS, {"name_words": 1.0, "value_mention": 1.0, "mention": 1.0, "name_prefix": 1.0}),
        # the Chinese name occurs; the column's Chinese name too
        ("客户公司名称是什么", CUSTOMERS, {"zh_name": 1.0, "column_words": 1.0, "mention": 1.0}),
        # only a sample value: Around the Horn is in CompanyName (case does not matter)
        ("what did AROUND THE HORN buy", CUSTOMERS, {"value_mention": 1.0, "agent_verb": 1.0}),
        # pinyin-abbreviated name spelled by consecutive Chinese initials
        ("门诊处方有多少张", MZ_CF, {"zh_name": 1.0, "pinyin_code": 1.0, "mention": 1.0}),
        # initials match but the Chinese name is not written: still linked by pinyin
        ("统计每个门诊处方", MZ_CF, {"zh_name": 1.0, "pinyin_code": 1.0, "mention": 1.0}),
        # a column named by its Chinese name
        ("开方日期最早的是哪天", MZ_CF, {"column_words": 1.0}),
        # CustomerID in Orders is a key column: "customer" must not link Orders
        ("Which orders did the customer place?", ORDERS, {"name_words": 1.0, "mention": 1.0, "name_prefix": 1.0}),
        # a verb whose first five letters begin the table's name: "supplies" for Suppliers
        ("Who supplies Chai?", Table("Suppliers", (Column("id"),)), {"name_prefix": 1.0, "agent_verb": 1.0, "who": 1.0}),
        # another noun for the table ("songs" for Track) names it
        ("How many songs are there?", Table("Track", (Column("id"),)), {"mention": 1.0}),
        # half of the Chinese name's bigrams: 订单 is not in 订购
        ("订购了什么", ORDERS, {"zh_name": 0.0}),
        # nothing in common
        ("how is the weather", MZ_CF, {}),
    ],
)
def test_link_features(question: str, table: Table, expected: dict[str, float]) -> None:
    got = dict(zip(LINK_FEATURES, link_features(question, [table])[0].tolist(), strict=True))
    want = {name: expected.get(name, 0.0) for name in LINK_FEATURES}
    assert got == pytest.approx(want)


def test_link_features_shape_and_range() -> None:
    f = link_features("客户 Around the Horn 的订单", [MZ_CF, CUSTOMERS, ORDERS])
    assert f.shape == (3, len(LINK_FEATURES))
    assert f.min() >= 0.0 and f.max() <= 1.0
    assert f[1, LINK_FEATURES.index("zh_name")] == 1.0 and f[2, LINK_FEATURES.index("zh_name")] == 1.0


SHOP = [
    Table("Employees", (Column("id"),), zh="员工"),
    Table("Territories", (Column("id"),), zh="销售区域"),
    Table("EmployeeTerritories", (Column("id"),), zh="员工负责区域"),
    Table("Shippers", (Column("id"),), description="shipping companies that deliver orders", zh="运输公司"),
    Table("mz_cf", (Column("id"),), zh="门诊处方"),
    Table("Order Details", (Column("id"),), zh="订单明细"),
    Table("Orders", (Column("id"),), zh="订单"),
]


def _named(question: str) -> dict[str, list[str]]:
    return {t.name: [question[a:b] for a, b in spans] for t, spans in zip(SHOP, mention_spans(question, SHOP)) if spans}


@pytest.mark.parametrize(
    ("question", "named"),
    [
        # the longest name wins: "employee territories" is not also Employees or Territories
        ("How many employee territories has employee King?", {"EmployeeTerritories": ["employee territories"],
                                                             "Employees": ["employee"]}),
        # camel case in the question and singular forms still match
        ("List each EmployeeTerritory", {"EmployeeTerritories": ["EmployeeTerritory"]}),
        # the description's first two words name a table whose name is not used
        ("count the shipping companies", {"Shippers": ["shipping companies"]}),
        # 订单明细 (Order Details) contains 订单 (Orders): only the longer one counts there
        ("订单 10248 的订单明细", {"Orders": ["订单"], "Order Details": ["订单明细"]}),
        # 员工负责区域 contains neither 员工 nor 销售区域 as a separate mention
        ("员工负责区域有哪些", {"EmployeeTerritories": ["员工负责区域"]}),
        # pinyin initials of 门诊处方 spell mz_cf even without its Chinese name in the sidecar
        ("查门诊处方", {"mz_cf": ["门诊处方"]}),
        ("nothing here", {}),
    ],
)  # fmt: skip
def test_mention_spans(question: str, named: dict[str, list[str]]) -> None:
    assert _named(question) == named


def test_pinyin_code_alone_names_a_table_without_chinese_name() -> None:
    bare = [Table("mz_cf", (Column("id"),))]  # no sidecar: only the code links it
    assert mention_spans("今天的门诊处方", bare) == [[(3, 7)]]


def test_a_table_name_without_english_words_is_no_crash() -> None:
    # its short noun has no English stems: an empty form matched past the question's last word
    tables = [Table("Ünïcødé 表", (Column("id"),)), Table("orders", (Column("id"),))]
    assert mention_spans("How many orders?", tables) == [[], [(9, 15)]]


# --------------------------------------------------------------------------- short nouns and synonyms


def _sample_schema(name: str) -> Schema:
    return introspect(load_sample(name), descriptions=description_file(name))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the head of a longer name; 处方明细 leaves 处方 to 门诊处方, 住院病人's 病人 is the patients' synonym
        ("hospital", {"mz_cf": (("prescription", "prescriptions"), ("处方",)),
                      "mz_gh": (("registration", "registrations"), ("挂号",)),
                      "mz_jz": (("visit", "visits"), ("就诊",)),
                      "mz_yp": ((), ("药品",)),  # 药品目录: the catalogue ending is dropped
                      "yf_kc": (("stock", "stocks"), ("库存",)),  # pharmacy stock record: "record" is dropped
                      "zy_br": (("stay", "stays"), ())}),
        # 员工负责区域 and 销售区域 both end in 区域; "order detail" would be "order", the Orders' name
        ("northwind", {"Categories": ((), ("类别",)), "CustomerDemographics": (("demographic", "demographics"), ()),
                       "Region": ((), ("大区",))}),
    ],
)  # fmt: skip
def test_short_nouns_of_the_sample_databases(name: str, expected: dict) -> None:
    assert short_nouns(tuple(_sample_schema(name).tables)) == expected


def test_short_nouns_name_their_table_in_questions() -> None:
    tables = _sample_schema("hospital").tables
    names = [t.name for t in tables]

    def named(q: str) -> dict[str, list[str]]:
        return {names[i]: [q[a:b] for a, b in s] for i, s in enumerate(mention_spans(q, tables)) if s}

    assert named("How many prescriptions are still unpaid?") == {"mz_cf": ["prescriptions"]}
    assert named("王军医生开过的处方一共多少钱？") == {"ys": ["医生"], "mz_cf": ["处方"]}
    assert named("处方明细有多少条") == {"mz_cfmx": ["处方明细"]}  # the longer name wins over the short noun


def test_built_in_synonyms_need_the_table_to_be_that_thing() -> None:
    nw = {t.name: t for t in _sample_schema("northwind").tables}
    hosp = {t.name: t for t in _sample_schema("hospital").tables}
    assert table_synonyms(nw["Customers"])[1] == ("顾客",)
    # a junction or link table is not called by the noun of the table it starts with
    assert table_synonyms(nw["CustomerCustomerDemo"]) == ((), ())
    assert table_synonyms(nw["EmployeeTerritories"]) == ((), ())
    # a cryptic name is matched by its description's head (mz_yp: drugs), not by a modifier (prescription items)
    assert "medicine" in table_synonyms(hosp["mz_yp"])[0]
    assert table_synonyms(hosp["mz_cfmx"]) == ((), ())


def test_a_name_that_is_a_phrase_or_a_period_has_no_short_noun() -> None:
    # "price" must not name ProductsAboveAveragePrice, nor "year" SalesByYear
    ts = tuple(Table(n, (Column("id"),)) for n in ("Products", "SalesByYear", "ProductsAboveAveragePrice", "sales_2019",
                                                     "OutpatientVisits"))  # fmt: skip
    assert short_nouns(ts) == {"OutpatientVisits": (("visit", "visits"), ())}
    assert table_synonyms(Table("Track", (), description="tracks ( ) for sale")) == (("song", "songs"), ("歌曲",))
