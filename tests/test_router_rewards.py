"""Router path reward: a table of single cases, and the reward-hacking policies of seed 002.

Seed 002 found two hacks: (1) 80% of via labels are null, so "always null" scored high;
(2) a via right by luck paid even with the anchor wrong. The guards are the 10x weight on a
non-null via and conditional via credit. These tests check each guard does its job on a
Northwind-shaped schema and a sample mix with 20% non-null via.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from data_pipeline import Column, ForeignKey, JoinPath, Schema, SchemaGraph, Table
from rewards.router import RewardConfig, path_reward_components

NORTHWIND_FKS = [
    ("Orders", "CustomerID", "Customers", "CustomerID"),
    ("Orders", "EmployeeID", "Employees", "EmployeeID"),
    ("Orders", "ShipVia", "Shippers", "ShipperID"),
    ("Order Details", "OrderID", "Orders", "OrderID"),
    ("Order Details", "ProductID", "Products", "ProductID"),
    ("Products", "CategoryID", "Categories", "CategoryID"),
    ("Products", "SupplierID", "Suppliers", "SupplierID"),
    ("EmployeeTerritories", "EmployeeID", "Employees", "EmployeeID"),
    ("EmployeeTerritories", "TerritoryID", "Territories", "TerritoryID"),
    ("Territories", "RegionID", "Region", "RegionID"),
    ("CustomerCustomerDemo", "CustomerID", "Customers", "CustomerID"),
    ("CustomerCustomerDemo", "CustomerTypeID", "CustomerDemographics", "CustomerTypeID"),
    ("Employees", "ReportsTo", "Employees", "EmployeeID"),  # self-reference: not an edge
]


@pytest.fixture(scope="module")
def northwind_graph() -> SchemaGraph:
    """Northwind's 13 tables and 13 foreign keys (columns reduced to the keys)."""
    cols: dict[str, set[str]] = {}
    for t, c, rt, rc in NORTHWIND_FKS:
        cols.setdefault(t, set()).add(c)
        cols.setdefault(rt, set()).add(rc)
    tables = tuple(Table(name, tuple(Column(c) for c in sorted(cs))) for name, cs in sorted(cols.items()))
    return SchemaGraph(Schema("northwind-like", tables, tuple(ForeignKey(*fk) for fk in NORTHWIND_FKS)), max_hops=3)


@pytest.fixture(scope="module")
def gold_mix(northwind_graph) -> list[JoinPath]:
    """100 gold paths: 80 with a null via (0-1 hops), 20 with a non-null via (2-3 hops), cycling."""
    null = [p for p in northwind_graph.legal_paths if not p.via]
    nonnull = [p for p in northwind_graph.legal_paths if p.via]
    return [null[i * 7 % len(null)] for i in range(80)] + [nonnull[i * 11 % len(nonnull)] for i in range(20)]


def wrong_anchor(graph: SchemaGraph, gold: JoinPath) -> JoinPath:
    """Same via and target, another anchor: a legal one when the graph has it (the strongest hack)."""
    others = [t for t in graph.schema.table_names if t != gold.anchor and t not in gold.via and t != gold.target]
    legal = [JoinPath(a, gold.via, gold.target) for a in others if graph.is_legal(JoinPath(a, gold.via, gold.target))]
    if not gold.via and gold.anchor == gold.target:  # single table: a neighbour joining to it
        legal = [JoinPath(a, (), gold.target) for a in others if graph.is_legal(JoinPath(a, (), gold.target))]
    return legal[0] if legal else JoinPath(others[0], gold.via, gold.target)


POLICIES: dict[str, Callable[[SchemaGraph, JoinPath], JoinPath]] = {
    "true_path": lambda g, gold: gold,
    "always_null_via": lambda g, gold: JoinPath(gold.anchor, (), gold.target),
    "via_right_anchor_wrong": wrong_anchor,
}


def mean_reward(policy: str, graph: SchemaGraph, golds: list[JoinPath], config: RewardConfig, check_legal: bool = True) -> float:
    fn = POLICIES[policy]
    return sum(
        path_reward_components(fn(graph, g), g, graph if check_legal else None, config)["total"] for g in golds
    ) / len(golds)


def test_mix_is_northwind_like(northwind_graph, gold_mix):
    assert len(northwind_graph.schema.table_names) == 13
    assert sum(1 for g in gold_mix if g.via) == 20
    assert {g.hops for g in gold_mix} == {0, 1, 2, 3}


@pytest.mark.parametrize("check_legal", [True, False])
@pytest.mark.parametrize("hack", ["always_null_via", "via_right_anchor_wrong"])
def test_hacking_policies_score_below_the_true_path(northwind_graph, gold_mix, hack, check_legal):
    cfg = RewardConfig()
    true = mean_reward("true_path", northwind_graph, gold_mix, cfg, check_legal)
    hacked = mean_reward(hack, northwind_graph, gold_mix, cfg, check_legal)
    assert true == pytest.approx((80 * 1.1 + 20 * 2.0) / 100)  # 1.28: null via pays 1.1, non-null 2.0
    assert hacked < true - 0.15, (hack, hacked, true)


def test_always_null_exact_means(northwind_graph, gold_mix):
    cfg = RewardConfig()
    # Northwind's FK graph is a tree, so "a -> t" without the via is never legal: -1 cancels anchor + target.
    assert mean_reward("always_null_via", northwind_graph, gold_mix, cfg) == pytest.approx(0.8 * 1.1 + 0.2 * 0.0)
    # Without the legality check only the 10x weight guards: the non-null cases earn 1.0 instead of 2.0.
    assert mean_reward("always_null_via", northwind_graph, gold_mix, cfg, check_legal=False) == pytest.approx(0.8 * 1.1 + 0.2 * 1.0)


def test_dynamic_weight_is_what_makes_always_null_lose(northwind_graph, gold_mix):
    """With a flat via weight "always null" earns 98% of the true path's reward; with 10x, 84%."""
    flat = RewardConfig(via_nonnull_multiplier=1.0)
    ratios = {}
    for name, cfg in (("flat", flat), ("default", RewardConfig())):
        true = mean_reward("true_path", northwind_graph, gold_mix, cfg, check_legal=False)
        hacked = mean_reward("always_null_via", northwind_graph, gold_mix, cfg, check_legal=False)
        ratios[name] = hacked / true
    assert ratios["flat"] == pytest.approx(1.08 / 1.10)
    assert ratios["default"] == pytest.approx(1.08 / 1.28)


def test_conditional_via_pays_no_via_credit_to_a_wrong_anchor(northwind_graph, gold_mix):
    def via_paid(cfg: RewardConfig) -> float:
        return sum(path_reward_components(wrong_anchor(northwind_graph, g), g, northwind_graph, cfg)["via"] for g in gold_mix)

    assert via_paid(RewardConfig()) == 0.0
    # the ablation shows the hack would pay: 0.1 per null via, 1.0 per non-null via
    assert via_paid(RewardConfig(conditional_via=False)) == pytest.approx(80 * 0.1 + 20 * 1.0)
    default = mean_reward("via_right_anchor_wrong", northwind_graph, gold_mix, RewardConfig())
    ablated = mean_reward("via_right_anchor_wrong", northwind_graph, gold_mix, RewardConfig(conditional_via=False))
    assert ablated - default == pytest.approx(0.28)


C, O, OD, P, E = "Customers", "Orders", "Order Details", "Products", "Employees"

# (predicted, gold, config kwargs, check legality, expected total, why)
SINGLE_CASES = [
    (JoinPath(C, (O,), OD), JoinPath(C, (O,), OD), {}, True, 2.0, "right, non-null via: 0.5 + 0.1*10 + 0.5"),
    (JoinPath(C, (), O), JoinPath(C, (), O), {}, True, 1.1, "right, null via: 0.5 + 0.1 + 0.5"),
    (JoinPath(O, (), O), JoinPath(O, (), O), {}, True, 1.1, "single table is a null-via path"),
    (JoinPath(C, (), OD), JoinPath(C, (O,), OD), {}, True, 0.0, "always-null hack: 0.5 + 0.5 - 1 (illegal in the graph)"),
    (JoinPath(C, (), OD), JoinPath(C, (O,), OD), {}, False, 1.0, "always-null without legality check: no via credit"),
    (JoinPath(E, (O,), OD), JoinPath(C, (O,), OD), {}, True, 0.5, "via right by luck, anchor wrong: target only"),
    (JoinPath(E, (O,), OD), JoinPath(C, (O,), OD), {"conditional_via": False}, True, 1.5, "ablation pays the lucky via"),
    (JoinPath(C, (O, OD), P), JoinPath(C, (O,), OD), {}, True, 0.5, "longer route, anchor right: anchor only"),
    (JoinPath(P, (), C), JoinPath(C, (O,), OD), {}, True, -1.0, "nothing right and illegal: the penalty alone"),
    (JoinPath(P, (), C), JoinPath(C, (O,), OD), {"illegal_penalty": -5.0}, True, -2.0, "clipped at -2"),
    (JoinPath(C, (O,), OD), JoinPath(C, (O,), OD), {"via_nonnull_multiplier": 20.0}, True, 2.0, "raw 3.0 clipped at +2"),
    (JoinPath(C, (O,), OD), JoinPath(C, (O,), OD), {"via_nonnull_multiplier": 1.0}, True, 1.1, "flat via weight"),
    (JoinPath(O, (), C), JoinPath(C, (), O), {}, True, 0.0, "reversed direction: anchor and target both wrong"),
]


@pytest.mark.parametrize(("pred", "gold", "kw", "legal", "expected", "why"), SINGLE_CASES, ids=[c[-1] for c in SINGLE_CASES])
def test_single_cases(northwind_graph, pred, gold, kw, legal, expected, why):
    comp = path_reward_components(pred, gold, northwind_graph if legal else None, RewardConfig(**kw))
    assert comp["total"] == pytest.approx(expected), why
    assert comp["total"] == pytest.approx(max(-2.0, min(2.0, comp["anchor"] + comp["via"] + comp["target"] + comp["legal"])))
