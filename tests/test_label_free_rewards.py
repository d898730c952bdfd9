"""Label-free router reward (rewards/label_free.py): a table of single cases per component.

The schema is Northwind-shaped (tests/test_router_rewards.py); the row counter is a table of
counts by route and filter, so each case says what the database would return.
"""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph
from core.schema import Column, ForeignKey, Schema, Table
from core.values import ValueMatch
from rewards.label_free import (
    COMPONENTS,
    LabelFreeConfig,
    detour_hops,
    filtered_skeleton_sql,
    label_free_components,
    label_free_rewards,
    target_evidence,
)
from tests.test_router_rewards import NORTHWIND_FKS


@pytest.fixture(scope="module")
def graph() -> SchemaGraph:
    cols: dict[str, set[str]] = {}
    for t, c, rt, rc in NORTHWIND_FKS:
        cols.setdefault(t, set()).add(c)
        cols.setdefault(rt, set()).add(rc)
    cols["Products"].add("ProductName")
    tables = tuple(Table(name, tuple(Column(c) for c in sorted(cs))) for name, cs in sorted(cols.items()))
    return SchemaGraph(Schema("nw", tables, tuple(ForeignKey(*fk) for fk in NORTHWIND_FKS)), max_hops=3)


P = JoinPath
TUNNBROD = ValueMatch("Products", "ProductName", "Tunnbröd", 1.0, 24, 32, True)
PARTIAL = ValueMatch("Products", "ProductName", "Mishi Kobe Niku", 0.6, 0, 10, False)
EV_CUSTOMERS = {"Customers": 1.0, "Orders": 0.0, "Products": 0.0}


def counter(table: dict[str, int]):
    """A row counter that answers by the FROM clause's tables; an unknown query cannot run (None)."""

    def count(sql: str) -> int | None:
        for key, n in table.items():
            if key in sql:
                return n
        return None

    return count


ALWAYS_ROWS = counter({"SELECT": 3})

# (route, matches, evidence, counter, expected components, why)
CASES = [
    (P("Products", ("Order Details", "Orders"), "Customers"), [TUNNBROD], EV_CUSTOMERS, ALWAYS_ROWS,
     {"value_anchor": 0.5, "rows": 0.5, "target_evidence": 0.5, "detour": 0.0, "legal": 0.0, "total": 1.5},
     "the intended route: value in the anchor, rows, the asked-for target"),
    (P("Products", ("Order Details", "Orders"), "Customers"), [PARTIAL], EV_CUSTOMERS, ALWAYS_ROWS,
     {"value_anchor": 0.3, "rows": 0.5, "total": 1.3}, "a partial value match pays its score"),
    (P("Customers", (), "Customers"), [TUNNBROD], EV_CUSTOMERS, ALWAYS_ROWS,
     {"value_anchor": 0.0, "rows": 0.0, "target_evidence": 0.5, "total": 0.5},
     "anchor holds no mentioned value: no anchor credit, and no rows credit (conditional)"),
    (P("Products", ("Order Details", "Orders"), "Customers"), [TUNNBROD], EV_CUSTOMERS, counter({"SELECT": 0}),
     {"value_anchor": 0.0, "rows": 0.0, "n_rows": 0.0, "total": 0.5}, "the filter finds no rows on this route: anchor not right"),
    (P("Products", ("Order Details", "Orders"), "Customers"), [TUNNBROD], EV_CUSTOMERS, counter({}),
     {"value_anchor": 0.0, "rows": 0.0, "n_rows": -1.0, "total": 0.5}, "the skeleton cannot run (None): nothing paid for it"),
    (P("Products", ("Order Details", "Orders"), "Customers"), [TUNNBROD], EV_CUSTOMERS, counter({"SELECT": 20_000}),
     {"value_anchor": 0.5, "rows": 0.0, "total": 1.0}, "more rows than the row budget: no rows credit"),
    (P("Suppliers", (), "Suppliers"), [], {"Suppliers": 1.0}, counter({"SELECT": 29}),
     {"value_anchor": 0.5, "rows": 0.5, "target_evidence": 0.5, "total": 1.5},
     "no value mentioned: the anchor counts when the question names it"),
    (P("Orders", (), "Orders"), [], {"Suppliers": 1.0}, counter({"SELECT": 830}),
     {"value_anchor": 0.0, "rows": 0.0, "target_evidence": 0.0, "total": 0.0}, "no value and an unnamed anchor: nothing"),
    (P("Products", ("Categories",), "Products"), [TUNNBROD], {"Products": 1.0}, ALWAYS_ROWS,
     {"legal": -1.0, "value_anchor": 0.0, "total": -1.0}, "illegal route (a table repeats): only the penalty, nothing run"),
    (P("Customers", ("Orders", "Order Details"), "Products"), [], {"Customers": 0.5, "Products": 1.0}, ALWAYS_ROWS,
     {"detour": 0.0, "total": 1.5}, "2 hops is the shortest route Customers -> Products: no detour"),
]


@pytest.mark.parametrize(("path", "matches", "evidence", "count", "expected", "why"), CASES, ids=[c[-1] for c in CASES])
def test_components_table(graph, path, matches, evidence, count, expected, why) -> None:
    comp = label_free_components(path, graph, matches, evidence, count)
    assert set(COMPONENTS) <= set(comp)
    for k, v in expected.items():
        assert comp[k] == pytest.approx(v), f"{k}: {why}"


def test_rows_credit_needs_the_anchor_unless_ablated(graph) -> None:
    path = P("Customers", (), "Customers")
    assert label_free_components(path, graph, [TUNNBROD], EV_CUSTOMERS, ALWAYS_ROWS)["rows"] == 0.0
    free = LabelFreeConfig(conditional_rows=False)
    assert label_free_components(path, graph, [TUNNBROD], EV_CUSTOMERS, ALWAYS_ROWS, free)["rows"] == 0.5


def test_the_filter_uses_the_best_value_of_the_anchor_that_finds_rows(graph) -> None:
    other = ValueMatch("Products", "QuantityPerUnit", "10 boxes", 0.9, 0, 5, False)
    seen: list[str] = []

    def count(sql: str) -> int:
        seen.append(sql)
        return 0 if "Tunnbröd" in sql else 4

    comp = label_free_components(P("Products", (), "Products"), graph, [other, TUNNBROD], {}, count)
    assert comp["value_anchor"] == pytest.approx(0.45)  # Tunnbröd (1.0) found nothing; the next value (0.9) did
    assert "Tunnbröd" in seen[0] and "10 boxes" in seen[1]


def test_detour_hops(graph) -> None:
    assert detour_hops(graph, P("Customers", ("Orders",), "Order Details")) == 0
    assert detour_hops(graph, P("Orders", (), "Orders")) == 0
    # Employees -> Orders is one join; the route through the territories is not one of them
    assert detour_hops(graph, P("Employees", ("Orders", "Customers"), "CustomerCustomerDemo")) == 0
    assert detour_hops(graph, P("Order Details", ("Orders",), "Employees")) == 0
    tri = SchemaGraph(Schema("tri", (Table("a", (Column("id"),)), Table("b", (Column("id"), Column("a_id"))),
                                     Table("c", (Column("id"), Column("a_id"), Column("b_id")))),
                             (ForeignKey("b", "a_id", "a", "id"), ForeignKey("c", "a_id", "a", "id"), ForeignKey("c", "b_id", "b", "id"))))
    assert detour_hops(tri, P("a", ("b",), "c")) == 1  # a joins c directly
    assert label_free_components(P("a", ("b",), "c"), tri, [], {"a": 0.5, "c": 1.0}, ALWAYS_ROWS)["detour"] == pytest.approx(-0.1)


def test_filtered_skeleton_sql_quotes_and_refuses_another_table(graph) -> None:
    sql = filtered_skeleton_sql(graph, P("Products", (), "Products"), ValueMatch("Products", "ProductName", "Chef Anton's", 1.0, 0, 1, True))
    assert sql.endswith("WHERE Products.ProductName = 'Chef Anton''s'")
    with pytest.raises(ValueError, match="not in the anchor"):
        filtered_skeleton_sql(graph, P("Orders", (), "Orders"), TUNNBROD)


# (question, table spans, value spans, column spans, value tables, expected evidence, why)
EVIDENCE = [
    ("How many orders did Alfreds place?", {"Orders": [(9, 15)]}, [(20, 27)], {}, ["Customers"],
     {"Orders": 1.0, "Customers": 0.0}, "the table after 'how many' is asked for; the value table is not"),
    ("List the products of supplier Tokyo Traders", {"Products": [(9, 17)], "Suppliers": [(21, 29)]}, [(30, 43)], {}, ["Suppliers"],
     {"Products": 1.0, "Suppliers": 0.5}, "nearest name after the question word wins; the other is only named"),
    ("Orders shipped by Speedy Express", {"Orders": [(0, 6)], "Shippers": []}, [(18, 32)], {}, ["Shippers"],
     {"Orders": 0.5, "Shippers": 0.0}, "no question word: named tables get the named score only"),
    ("What is the order date for Ipoh Coffee?", {}, [(27, 38)], {"Orders": [(12, 22)]}, ["Products"],
     {"Orders": 1.0, "Products": 0.0}, "a column name after the question word points at its table"),
    ("Where is Bottom-Dollar Markets?", {"Markets": [(23, 30)]}, [(9, 30)], {}, ["Customers"],
     {"Markets": 0.0, "Customers": 1.0}, "a name inside the value is part of the value; nothing else named: the value's row"),
    ("Chai 的供应商是谁？", {"Suppliers": [(6, 9)]}, [(0, 4)], {}, ["Products"],
     {"Suppliers": 1.0, "Products": 0.0}, "Chinese: nothing after 谁, the nearest name before it"),
]


@pytest.mark.parametrize(("q", "spans", "vspans", "cspans", "vtables", "expected", "why"), EVIDENCE, ids=[e[-1] for e in EVIDENCE])
def test_target_evidence_table(q, spans, vspans, cspans, vtables, expected, why) -> None:
    assert target_evidence(q, spans, vspans, cspans, vtables) == expected, why


def test_batch_form_and_length_check(graph) -> None:
    paths = [P("Suppliers", (), "Suppliers"), P("Orders", (), "Orders")]
    assert label_free_rewards(paths, graph, [[], []], [{"Suppliers": 1.0}] * 2, ALWAYS_ROWS) == [1.5, 0.0]
    with pytest.raises(ValueError, match="differ in length"):
        label_free_rewards(paths, graph, [[]], [{}], ALWAYS_ROWS)


@pytest.mark.parametrize(("kw", "where"), [({"anchor_weight": -1}, "anchor_weight"), ({"illegal_penalty": 1}, "illegal_penalty"),
                                           ({"row_budget": 0}, "row_budget"), ({"detour_penalty": float("nan")}, "detour_penalty")])
def test_config_errors_name_the_field(kw, where) -> None:
    with pytest.raises(ConfigError, match=where):
        LabelFreeConfig(**kw)


# -- reward hacking: each hack must score below the intended route ---------------------------------
#
# "Which customers ordered Tunnbröd?": the value Tunnbröd is in Products, the question word asks for
# Customers; the intended route is Products -> Order Details -> Orders -> Customers (1.5). The row
# counter returns rows for every join except one through Shippers (an empty result).

QUESTION_MATCHES = [TUNNBROD]
QUESTION_EVIDENCE = {"Customers": 1.0, "Products": 0.0, "Orders": 0.0}
ROWS_BUT_SHIPPERS = counter({"JOIN Shippers": 0, "SELECT": 12})
INTENDED = P("Products", ("Order Details", "Orders"), "Customers")

# (hack route, expected total, why it is a hack and what stops it)
HACKS = [
    (P("Products", (), "Products"), 1.0, "always route to the linked value's table: value and rows pay, the target evidence does not"),
    (P("Products", ("Order Details", "Orders"), "Employees"), 1.0, "a longest legal path (3 hops) from the value: rows, but not the asked-for table"),
    (P("Products", ("Order Details",), "Orders"), 1.0, "a path that returns rows but ends before the asked-for table"),
    (P("Products", ("Order Details", "Orders"), "Shippers"), 0.0, "an empty result: the filter finds no rows on it, so no anchor and no rows credit"),
    (P("Customers", (), "Customers"), 0.5, "the empty (null-via, 0-hop) path on the asked-for table: no value there, no rows credit"),
    (P("Orders", (), "Customers"), 0.5, "the right target from an anchor that holds no mentioned value: target evidence only"),
    (P("Employees", ("Orders",), "Customers"), 0.5, "via right by luck, anchor wrong: no rows credit (conditional)"),
]


@pytest.mark.parametrize(("hack", "expected", "why"), HACKS, ids=[h[-1] for h in HACKS])
def test_reward_hacks_score_below_the_intended_route(graph, hack, expected, why) -> None:
    intended = label_free_components(INTENDED, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS)["total"]
    got = label_free_components(hack, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS)["total"]
    assert intended == pytest.approx(1.5)
    assert got == pytest.approx(expected), why
    assert got < intended, why


def test_the_intended_route_is_the_only_best_of_every_legal_path(graph) -> None:
    scores = {p: label_free_components(p, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS)["total"]
              for p in graph.legal_paths}  # fmt: skip
    best = max(scores.values())
    assert [p for p, v in scores.items() if v == best] == [INTENDED]


def test_a_detour_to_the_right_tables_scores_below_the_direct_route() -> None:
    # a -- c directly, and a -- b -- c: the long way reaches the same tables and returns rows too
    tri = SchemaGraph(Schema("tri", (Table("a", (Column("id"), Column("name"))), Table("b", (Column("id"), Column("a_id"))),
                                     Table("c", (Column("id"), Column("a_id"), Column("b_id")))),
                             (ForeignKey("b", "a_id", "a", "id"), ForeignKey("c", "a_id", "a", "id"), ForeignKey("c", "b_id", "b", "id"))))
    m = [ValueMatch("a", "name", "x", 1.0, 0, 1, True)]
    direct = label_free_components(P("a", (), "c"), tri, m, {"c": 1.0}, ALWAYS_ROWS)["total"]
    detour = label_free_components(P("a", ("b",), "c"), tri, m, {"c": 1.0}, ALWAYS_ROWS)["total"]
    assert direct == pytest.approx(1.5) and detour == pytest.approx(1.4) and detour < direct


def test_ablations_reopen_the_hacks(graph) -> None:
    """Each guard is needed: without it the hack it closes ties with or beats the intended route."""
    no_target = LabelFreeConfig(target_weight=0.0)
    value_table = P("Products", (), "Products")
    lf = lambda p, cfg=None: label_free_components(p, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS, cfg)["total"]  # noqa: E731
    assert lf(value_table, no_target) == lf(INTENDED, no_target)  # always-the-value-table pays in full
    free_rows = LabelFreeConfig(conditional_rows=False)
    lucky = P("Employees", ("Orders",), "Customers")
    assert lf(lucky, free_rows) == pytest.approx(1.0) and lf(lucky) == pytest.approx(0.5)  # via by luck pays when rows are unconditional


# -- the language-model judge (a judged question log, python -m generator.judge) ----------------------

JUDGE = {INTENDED: 0.6, P("Products", (), "Products"): 0.3, P("Products", ("Order Details",), "Orders"): 0.1}


def test_a_judged_question_pays_the_judge_p_and_scales_the_heuristics(graph) -> None:
    comp = label_free_components(INTENDED, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS, judge=JUDGE)
    assert comp["judge"] == pytest.approx(0.6)
    assert comp["value_anchor"] == comp["rows"] == comp["target_evidence"] == 0.0  # heuristics_with_judge 0
    assert comp["anchor_ok"] == 1.0  # still reported, for logging how the two rewards agree
    assert comp["total"] == pytest.approx(0.6)
    cfg = LabelFreeConfig(judge_weight=2.0, heuristics_with_judge=0.5)
    comp = label_free_components(INTENDED, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS, cfg, JUDGE)
    assert comp["judge"] == pytest.approx(1.2)
    assert comp["total"] == pytest.approx(1.2 + 0.5 * 1.5)
    # without a judge the judge component is 0 and nothing is scaled
    assert label_free_components(INTENDED, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS)["judge"] == 0.0


# (route, expected total with the judge above, why)
JUDGE_HACKS = [
    (P("Products", (), "Products"), 0.3, "always route to the linked value's table: only the p the judge gave it"),
    (P("Products", ("Order Details", "Orders"), "Employees"), 0.0, "a longest legal path the judge did not score: nothing"),
    (P("Products", ("Order Details",), "Orders"), 0.1, "a path that returns rows but ends early: its small p"),
    (P("Products", ("Categories",), "Products"), -1.0, "an illegal route: only the penalty, whatever the judge says"),
]


@pytest.mark.parametrize(("hack", "expected", "why"), JUDGE_HACKS, ids=[h[-1] for h in JUDGE_HACKS])
def test_judged_hacks_score_below_the_judged_route(graph, hack, expected, why) -> None:
    judge = dict(JUDGE) | {P("Products", ("Categories",), "Products"): 0.9}  # a judge that scored an illegal route
    got = label_free_components(hack, graph, QUESTION_MATCHES, QUESTION_EVIDENCE, ROWS_BUT_SHIPPERS, judge=judge)["total"]
    assert got == pytest.approx(expected), why
    assert got < 0.6, why


def test_batch_form_takes_one_judge_per_route(graph) -> None:
    paths = [INTENDED, INTENDED]
    got = label_free_rewards(paths, graph, [QUESTION_MATCHES] * 2, [QUESTION_EVIDENCE] * 2, ROWS_BUT_SHIPPERS, judges=[JUDGE, None])
    assert got == pytest.approx([0.6, 1.5])
    with pytest.raises(ValueError, match="judges"):
        label_free_rewards(paths, graph, [QUESTION_MATCHES] * 2, [QUESTION_EVIDENCE] * 2, ROWS_BUT_SHIPPERS, judges=[JUDGE])
