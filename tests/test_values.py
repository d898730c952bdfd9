"""Value linking (core.values): a table of questions and the values they must (not) find,
the index built from real databases, and hostile databases (no text, huge columns, bad bytes)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_pipeline.backends.registry import load_backend
from data_pipeline.datasets import description_file, load_sample
from core.errors import DataError
from core.schema import introspect
from core.value_aliases import glossary_aliases
from core.values import ValueIndex, ValueIndexConfig, copy_columns, load_value_index, normalize

INDEX = ValueIndex.from_values(
    {
        ("Products", "ProductName"): ["Tunnbröd", "Mishi Kobe Niku", "Chai", "Gravad lax", "Rock Me", "Northwoods Cranberry Sauce"],
        ("Customers", "CompanyName"): ["Around the Horn", "Wartian Herkku", "Alfreds Futterkiste", "The Big Cheese"],
        ("Customers", "Region"): ["OR", "WA"],
        ("Customers", "Country"): ["UK", "Germany"],
        ("Suppliers", "Country"): ["UK", "Germany"],
        ("hz", "hzxm"): ["张伟", "王秀英"],
        ("mz_yp", "ypmc"): ["阿莫西林胶囊", "布洛芬缓释胶囊"],
    }
)

# (question, expected (table, value) of the best match or None, why)
CASES = [
    ("Which customers ordered Tunnbröd?", ("Products", "Tunnbröd"), "the value alone names its table"),
    ("which customers ordered tunnbrod", ("Products", "Tunnbröd"), "case and accents do not matter"),
    ("Ｔｕｎｎｂｒöｄ 的客户", ("Products", "Tunnbröd"), "full-width letters are folded (NFKC)"),
    ("客户 Around the Horn 买过哪些产品？", ("Customers", "Around the Horn"), "a Latin value inside a Chinese sentence"),
    ("orders of alfreds futerkiste", ("Customers", "Alfreds Futterkiste"), "a typo in one word"),
    ("How much does Mishi Kobe cost?", ("Products", "Mishi Kobe Niku"), "a partial name"),
    ("张伟的处方开了哪些药？", ("hz", "张伟"), "a Chinese name inside a Chinese sentence"),
    ("阿莫西林还有多少库存", ("mz_yp", "阿莫西林胶囊"), "a partial Chinese drug name"),
    ("Who lives in the big cheese?", ("Customers", "The Big Cheese"), "stop words count, content words decide"),
    ("customers in the UK", ("Customers", "UK"), "a two-letter code in its own case"),
    ("customers in the uk", None, "a two-letter code typed lower case is a word, not the code"),
    ("德国的客户有哪些？", ("Customers", "Germany"), "a country by its Chinese name gives the stored value"),
    ("英國的客戶", ("Customers", "UK"), "a country by its Traditional Chinese name, stored as a code"),
    ("customers in Great Britain", ("Customers", "UK"), "a country by another English name"),
    ("orders from OR", ("Customers", "OR"), "the region OR"),
    ("red or white wine", None, "the word 'or' is not the region OR"),
    ("What is the rock genre?", None, "'rock' alone does not mention the title 'Rock Me'"),
    ("Which sauce is the best?", None, "one common word of a long value is not a mention"),
    ("the of and", None, "stop words alone never match"),
    ("", None, "an empty question"),
]


@pytest.mark.parametrize(("question", "expected", "why"), CASES, ids=[c[2] for c in CASES])
def test_lookup_table(question: str, expected: tuple[str, str] | None, why: str) -> None:
    matches = INDEX.lookup(question)
    if expected is None:
        assert matches == [], why
    else:
        assert (matches[0].table, matches[0].value) == expected, why
        assert 0 < matches[0].score <= 1


def test_country_names_in_other_languages_only_for_columns_of_countries() -> None:
    idx = ValueIndex.from_values({("gys", "gj"): ["德国", "法国", "美国"], ("people", "first_name"): ["Jordan", "Ann", "Bo"],
                                  ("c", "country"): ["Canada", "USA"]})  # fmt: skip
    assert [(m.table, m.value) for m in idx.lookup("suppliers in Germany")] == [("gys", "德国")]
    found = [(m.table, m.value, m.surface) for m in idx.lookup("orders shipped to the United States")]
    assert found == [("c", "USA", "United States"), ("gys", "美国", "United States")]  # once each, by the best name
    assert idx.lookup("谁来自约旦？") == []  # Jordan is a first name here, not a country
    assert idx.lookup("can you list them") == []  # a country code is never an alias ("CAN")


@pytest.mark.parametrize(("question", "found"), [
    ("南美国家的客户有哪些", []),  # 美国 is no word of 南美国家 (South American countries)
    ("印度尼西亚的客户", []),  # 印度 inside Indonesia's name
    ("南苏丹的客户", []),  # 苏丹 inside South Sudan's name
    ("苏丹的客户", ["Sudan"]),
    ("来自美国和德国的供应商", ["Germany", "USA"]),
])  # fmt: skip
def test_a_chinese_country_name_matches_only_as_a_word_of_its_own(question: str, found: list[str]) -> None:
    idx = ValueIndex.from_values({("Customers", "Country"): ["Germany", "USA", "India", "Sudan", "France"]})
    assert sorted(m.value for m in idx.lookup(question)) == found


def test_short_words_and_first_names_are_no_country_codes() -> None:
    for column in (["Ben", "Guy", "Dom", "Per"], ["and", "are", "can", "per", "ita"]):
        idx = ValueIndex.from_values({("People", "First"): column})
        assert idx.lookup("people in Benin, Peru, Guyana, Canada and Andorra") == [], column


def test_full_width_codes_match_as_their_ascii_form_at_their_own_position() -> None:
    idx = ValueIndex.from_values({("Customers", "Country"): ["UK", "USA", "Germany"], ("Customers", "Region"): ["OR", "WA"]})
    found = [(m.value, m.surface) for m in idx.lookup("ＵＳＡ和ＵＫ的客户")]  # a Chinese input method's full-width letters
    assert sorted(found) == [("UK", "ＵＫ"), ("USA", "ＵＳＡ")]
    assert [m.value for m in idx.lookup("ＯＲ 的客户")] == ["OR"]
    assert idx.lookup("ｏｒ the customers") == []  # still in the stored case only


def test_a_mention_is_found_when_one_of_its_words_came_earlier_in_the_question() -> None:
    idx = ValueIndex.from_values({("Shippers", "CompanyName"): ["United Package", "Federal Shipping", "Speedy Express"]})
    q = "We are united in asking: which orders did United Package ship?"
    (m,) = idx.lookup(q)
    assert (m.value, q[m.start : m.end], m.score) == ("United Package", "United Package", 1.0)


def test_a_value_with_a_lone_surrogate_is_left_out_and_the_index_saves(tmp_path: Path) -> None:
    idx = ValueIndex.from_values({("t", "c"): ["\ud800", "Germany", "ok"]})
    assert idx.columns[0].values == ("Germany", "ok")
    assert len(ValueIndex.load(idx.save(tmp_path / "v.json"))) == len(idx)


def test_other_names_of_countries_leave_every_other_match_as_it_was() -> None:
    values = {("Shippers", "CompanyName"): ["United Package", "Federal Shipping", "Speedy Express"],
              ("Customers", "Region"): ["North America", "Central America"], ("Customers", "Country"): ["UK", "USA", "Germany"]}
    on, off = ValueIndex.from_values(values), ValueIndex.from_values(values, ValueIndexConfig(country_aliases=False))
    for q in ("Which phone does United have?", "orders shipped by Federal", "customers in North America", "customers in Germany"):
        assert on.lookup(q) == off.lookup(q), q  # IDF and the rare-word rule count stored values only
    assert on.lookup("Which phone does United have?")[0].value == "United Package"
    assert [m.value for m in on.lookup("customers in the United")] == ["United Package"]  # not the United Kingdom
    assert [m.value for m in on.lookup("美国的客户")] == ["USA"] and off.lookup("美国的客户") == []


def test_span_points_at_the_mention() -> None:
    q = "谁处理了 Wartian Herkku 的订单？"
    m = INDEX.lookup(q)[0]
    assert q[m.start : m.end] == "Wartian Herkku" and m.surface == "Wartian Herkku" and m.exact


def test_shared_value_is_shared_out() -> None:
    # "UK" is a country of customers and suppliers: best score 1 for both, shared 0.5
    scores = INDEX.table_scores("suppliers in the UK", ["Customers", "Suppliers", "Products"])
    assert scores == [(1.0, 0.5), (1.0, 0.5), (0.0, 0.0)]


def test_normalize_keeps_the_map_to_the_original() -> None:
    norm, where = normalize("Ｃafé")
    assert norm == "cafe" and where == [0, 1, 2, 3]


def test_round_trip(tmp_path: Path) -> None:
    p = INDEX.save(tmp_path / "values.json")
    again = ValueIndex.load(p)
    assert len(again) == len(INDEX)
    assert [m.to_dict() for m in again.lookup("who supplies Gravad lax")] == [m.to_dict() for m in INDEX.lookup("who supplies Gravad lax")]
    assert load_value_index(tmp_path) is not None and load_value_index(tmp_path / "nowhere") is None


def test_bad_index_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "values.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    with pytest.raises(DataError, match="values.json: not a value index"):
        ValueIndex.load(bad)
    with pytest.warns(UserWarning, match="routing without value linking"):
        assert load_value_index(tmp_path) is None


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="min_score"):
        ValueIndexConfig(min_score=0)


def test_built_from_northwind_skips_references_and_dates() -> None:
    with load_backend("sqlite", "northwind") as b:
        schema = b.introspect()
        idx, notes = ValueIndex.build(b, schema)
    cols = {(c.table, c.column) for c in idx.columns}
    assert ("Products", "ProductName") in cols and ("Customers", "CompanyName") in cols
    assert ("Orders", "CustomerID") not in cols  # a foreign key: its values belong to Customers
    assert ("Orders", "OrderDate") not in cols  # dates are not names
    assert ("Employees", "Notes") not in cols  # free text
    assert notes == []
    assert idx.lookup("Which customers ordered Tunnbröd?")[0].table == "Products"
    assert ("Orders", "ShipName") in copy_columns(idx, schema)
    assert ("Customers", "CompanyName") not in copy_columns(idx, schema)
    # a copy of the customers' names gives way to them; a copy of a category does not
    assert idx.copies[("Orders", "ShipName")] == ("Customers", "CompanyName")
    assert ("Orders", "ShipCountry") not in idx.copies and ("Orders", "ShipAddress") not in idx.copies
    assert [(m.table, m.column) for m in idx.lookup("How many orders has Ernst Handel placed?")] == [("Customers", "CompanyName")]
    assert {m.table for m in idx.lookup("How many orders were shipped to Germany?")} == {"Customers", "Orders", "Suppliers"}


def test_a_value_inside_a_longer_exact_mention_of_another_is_dropped() -> None:
    idx = ValueIndex.from_values({("Products", "ProductName"): ["Pavlova", "Chai"], ("Suppliers", "CompanyName"): ["Pavlova, Ltd."]})
    assert [m.value for m in idx.lookup("Pavlova Ltd 供应哪些产品？")] == ["Pavlova, Ltd."]
    assert [m.value for m in idx.lookup("Who supplies Pavlova?")] == ["Pavlova"]  # alone it is the product
    # only an exact mention shadows: a partial "Pavlova L" does not outrank the product it contains
    idx2 = ValueIndex.from_values({("Products", "ProductName"): ["Pavlova"], ("Suppliers", "CompanyName"): ["Pavlova Lindqvist Trading"]})
    assert "Pavlova" in [m.value for m in idx2.lookup("Who supplies Pavlova Lindqvist?")]


def test_a_first_and_a_last_name_side_by_side_are_one_mention() -> None:
    idx = ValueIndex.from_values({
        ("Customer", "FirstName"): ["Frank", "Luis"], ("Customer", "LastName"): ["Harris", "Rojas"],
        ("Album", "Title"): ["Frank"], ("Track", "Composer"): ["Harris"],
    })  # fmt: skip
    found = {(m.table, m.column) for m in idx.lookup("Who is Frank Harris's support rep?")}
    assert found == {("Customer", "FirstName"), ("Customer", "LastName")}
    # apart, each word keeps every reading
    assert {m.table for m in idx.lookup("Frank and Harris")} == {"Customer", "Album", "Track"}
    # two columns that are not names do not pair up
    idx2 = ValueIndex.from_values({("Employee", "City"): ["London"], ("Employee", "Title"): ["Sales Agent"],
                                   ("Customer", "City"): ["London"]})  # fmt: skip
    assert {m.table for m in idx2.lookup("London Sales Agent")} == {"Employee", "Customer"}


def test_copies_give_way_to_their_source_and_survive_save_and_load(tmp_path: Path) -> None:
    names = {("Customers", "CompanyName"): ["Ernst Handel"], ("Orders", "ShipName"): ["Ernst Handel", "Hanari Carnes"]}
    idx = ValueIndex.from_values(names, copies={("Orders", "ShipName"): ("Customers", "CompanyName")})
    assert [m.table for m in idx.lookup("orders of Ernst Handel")] == ["Customers"]
    assert [m.table for m in idx.lookup("orders of Hanari Carnes")] == ["Orders"]  # the source lacks it: the copy stays
    assert [m.table for m in idx.lookup("orders whose ship name is Ernst Handel")] == ["Customers", "Orders"]  # named
    again = ValueIndex.load(idx.save(tmp_path / "values.json"))
    assert again.copies == idx.copies
    assert [m.table for m in ValueIndex.from_values(names).lookup("orders of Ernst Handel")] == ["Customers", "Orders"]


def _db(path: Path, rows: list[tuple], ddl: str) -> Path:
    conn = sqlite3.connect(path)
    conn.execute(ddl)
    conn.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()
    conn.close()
    return path


def test_no_text_columns_gives_an_empty_index_and_a_note(tmp_path: Path) -> None:
    db = _db(tmp_path / "n.sqlite", [(i, i * 2.5) for i in range(5)], "CREATE TABLE t (id INTEGER PRIMARY KEY, x REAL)")
    with load_backend("sqlite", db) as b:
        idx, notes = ValueIndex.build(b, b.introspect())
    assert len(idx) == 0 and idx.lookup("anything at all") == []
    assert any("no text column" in n for n in notes)


def test_huge_column_is_capped_and_said_so(tmp_path: Path) -> None:
    db = _db(tmp_path / "h.sqlite", [(i, f"code{i:07d}") for i in range(1_000_000)], "CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT)")
    t0 = time.perf_counter()
    with load_backend("sqlite", db) as b:
        idx, notes = ValueIndex.build(b, b.introspect(), ValueIndexConfig(max_values_per_column=5000))
    assert time.perf_counter() - t0 < 60  # a loose bound: the build must not hang
    assert len(idx) == 5000 and idx.columns[0].capped
    assert any("t.code has 1000000 distinct values; indexed 5000" in n for n in notes)


def test_non_utf8_text_is_a_note_not_a_traceback(tmp_path: Path) -> None:
    db = tmp_path / "b.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO t VALUES (1, CAST(X'C328FFFE' AS TEXT)), (2, 'Alice Martin'), (3, 'Bob Stone')")
    conn.commit()
    conn.close()
    out = subprocess.run(
        [sys.executable, "-m", "data_pipeline.build", "--db", str(db), "--out", str(tmp_path / "out"), "--samples-per-path", "3"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode in (0, 2), out.stderr[-2000:]
    if out.returncode == 2:  # refused: one line naming the database
        assert len(out.stderr.strip().splitlines()) == 1 and "b.sqlite" in out.stderr


def test_one_edit_typos_and_a_typo_next_to_the_value_match():
    idx = ValueIndex.from_values({("Customers", "CompanyName"): ["Wilman Kala", "Ottawa Books"],
                                  ("Categories", "CategoryName"): ["Dairy Products"]})  # fmt: skip
    # swapped letters and a wrong letter are one edit each (fuzz.ratio alone counts two)
    assert [m.value for m in idx.lookup("List the customer demos of Wilamn Kala")] == ["Wilman Kala"]
    assert [m.value for m in idx.lookup("books sold by Ottaea Books")] == ["Ottawa Books"]
    # the exact word later in the question does not pull the typo away from "Dairy"
    got = idx.lookup("Dairy Prroducts has how many products?")
    assert [(m.value, m.question[m.start:m.end]) for m in got] == [("Dairy Products", "Dairy Prroducts")]
    # a different first letter is no typo of a short word
    assert idx.lookup("how many xairy things") == []


def test_values_glossed_by_their_description_are_found_by_the_gloss(tmp_path: Path) -> None:
    # hospital's sidecar: "prescription state (未缴费 unpaid, 已缴费 paid, or 已发药 dispensed)"
    schema = introspect(load_sample("hospital"), descriptions=description_file("hospital"))
    with load_backend("sqlite", str(load_sample("hospital"))) as b:
        idx, _ = ValueIndex.build(b, schema)

    def found(q: str) -> list[tuple[str, str, str]]:
        return [(m.table, m.column, m.value) for m in idx.lookup(q)]

    assert found("How many prescriptions are still unpaid?") == [("mz_cf", "cfzt", "未缴费")]
    assert found("How many female patients are there?") == [("hz", "xb", "女")]
    assert found("Which drugs come in a bottle?") == [("mz_yp", "dw", "瓶")]
    assert found("Which drugs come in bottles?") == []  # another name matches only whole and exactly
    assert found("How many male patients?") == [("hz", "xb", "男")]  # not 女 through "female"
    # saved and loaded with the index; an index file from before has none and still loads
    again = ValueIndex.load(idx.save(tmp_path / "values.json"))
    assert [m.value for m in again.lookup("How many expert registrations?")] == ["专家号"]
    d = idx.to_dict()
    for c in d["columns"]:
        c.pop("aliases", None)
    assert ValueIndex.from_dict(d).lookup("How many prescriptions are still unpaid?") == []


@pytest.mark.parametrize("aliases", [["ab"], [[None, None]], [["是", ["yes", "no"]]], [["a", "b", "c"]], 5])
def test_a_malformed_alias_in_a_saved_index_is_a_data_error(aliases) -> None:
    d = ValueIndex.from_values({("t", "c"): ["是"]}).to_dict()
    d["columns"][0]["aliases"] = aliases
    with pytest.raises(DataError, match="malformed value index"):
        ValueIndex.from_dict(d)


def test_a_gloss_that_is_a_function_word_is_no_alias() -> None:
    assert glossary_aliases("flag (是 yes, 否 no, 未知 unknown)", ["是", "否", "未知"]) == (("未知", "unknown"),)
