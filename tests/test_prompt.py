"""The generator prompt on the tiny shop: what it shows for each condition, and its examples."""

from __future__ import annotations

import pytest

from data_pipeline import JoinPath, Sample, SchemaGraph, introspect
from core.errors import ConfigError, SchemaError
from generator.parsing import parse_answer
from generator.prompt import build_prompt, render_completion, system_message

ROUTE = JoinPath("customers", ("orders",), "order items")


@pytest.fixture
def shop(tiny_db):
    schema = introspect(tiny_db)
    return schema, SchemaGraph(schema)


def _examples() -> list[Sample]:
    return [
        Sample("shop-1", "shop", "How many items did Bob Chen order?", "en", ROUTE,
               'SELECT SUM(oi.quantity) FROM customers c JOIN orders o ON o.customer_id = c.id '
               'JOIN "order items" oi ON oi.order_id = o.id WHERE c.name = \'Bob Chen\''),
        Sample("shop-2", "shop", "List every product name", "en", JoinPath("products", (), "products"),
               "SELECT name FROM products"),
        Sample("shop-3", "shop", "Which city is Alice Martin in?", "en", JoinPath("customers", (), "customers"),
               "SELECT city FROM customers WHERE name = 'Alice Martin'"),
    ]


def test_routed_prompt_shows_only_the_path(shop):
    schema, graph = shop
    msgs = build_prompt("How many items did Carla Diaz order?", ROUTE, schema, graph, _examples(), k=2)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    final = msgs[-1]["content"]
    for table in ("Table customers", "Table orders", 'Table "order items"'):
        assert table in final
    for other in ("Table products", "Table categories", "Table suppliers"):
        assert other not in final
    assert "  - quantity INTEGER" in final
    assert "'Alice Martin'" in final  # sample values of customers.name
    assert "(3 rows)" in final  # customers row count
    assert "Join skeleton: FROM customers JOIN orders ON orders.customer_id = customers.id " in final
    assert "Route: customers -> orders -> order items" in final
    assert final.endswith("Question: How many items did Carla Diaz order?")
    # the path tables come in route order
    assert final.index("Table customers") < final.index("Table orders") < final.index('Table "order items"')


def test_no_path_prompt_is_whole_compact_schema(shop):
    schema, graph = shop
    final = build_prompt("List every product name", None, schema, graph, _examples(), k=3)[-1]["content"]
    assert "Join skeleton" not in final and "Route:" not in final
    for line in ("customers(id, name, city)", '"order items"(id, order_id, product_id, quantity)',
                 "products(id, name, price, category_id, supplier_id)"):
        assert line in final
    assert "products.supplier_id -> suppliers.id" in final
    assert "Alice Martin" not in final  # no sample values in the compact form


def test_examples_are_in_the_answer_format(shop):
    schema, graph = shop
    examples = _examples()
    msgs = build_prompt("q", ROUTE, schema, graph, examples, k=3)
    answers = [m["content"] for m in msgs if m["role"] == "assistant"]
    # the most similar (first) example is the last one shown, next to the question
    assert [parse_answer(a).sql for a in answers] == [e.sql for e in reversed(examples)]
    assert all(parse_answer(a).well_formed for a in answers)
    assert "Start at customers, reach order items; join customers -> orders -> order items." in answers[-1]
    example_user = msgs[-3]["content"]
    assert example_user.startswith("Route: customers -> orders -> order items\nJoin skeleton: FROM")
    assert "<reasoning>" in msgs[0]["content"] and "<answer>" in msgs[0]["content"]


def test_k_limits_and_zero(shop):
    schema, graph = shop
    assert len(build_prompt("q", ROUTE, schema, graph, _examples(), k=1)) == 4
    assert len(build_prompt("q", ROUTE, schema, graph, _examples(), k=0)) == 2
    assert len(build_prompt("q", ROUTE, schema, graph, _examples()[:1], k=3)) == 4
    with pytest.raises(ConfigError, match="k must be >= 0"):
        build_prompt("q", ROUTE, schema, graph, _examples(), k=-1)


def test_answer_only_format(shop):
    schema, graph = shop
    msgs = build_prompt("q", ROUTE, schema, graph, _examples(), k=1, with_reasoning=False)
    assert "<reasoning>" not in msgs[0]["content"] and "<answer>" in msgs[0]["content"]
    assert msgs[2]["content"] == render_completion(_examples()[0].sql, None)
    assert parse_answer(msgs[2]["content"], require_reasoning=False).well_formed
    assert system_message(True) != system_message(False)


def test_unknown_table_in_path_is_a_schema_error(shop):
    schema, graph = shop
    with pytest.raises(SchemaError, match="unknown table 'invoices'"):
        build_prompt("q", JoinPath("invoices", (), "invoices"), schema, graph, [])


def test_prompt_is_deterministic(shop):
    schema, graph = shop
    a = build_prompt("q", ROUTE, schema, graph, _examples())
    b = build_prompt("q", ROUTE, schema, graph, _examples())
    assert a == b


def test_language_aware_descriptions_and_text_samples(tiny_db):
    from core.schema import Column, Schema, Table

    base = introspect(tiny_db)
    customers = base.table("customers")
    cols = tuple(
        Column(c.name, c.type, c.primary_key, c.not_null, description=f"{c.name} of the customer", zh="客户" + c.name,
               samples=c.samples)  # fmt: skip
        for c in customers.columns
    )
    tables = tuple(Table(t.name, cols, t.row_count, zh="客户") if t.name == "customers" else t for t in base.tables)
    schema = Schema(base.name, tables, base.foreign_keys, source=base.source)
    graph = SchemaGraph(schema)
    path = JoinPath("customers", (), "customers")
    en = build_prompt("Where does Bob live?", path, schema, graph, [])[-1]["content"]
    zh = build_prompt("Bob 住在哪里？", path, schema, graph, [])[-1]["content"]
    assert "客户" not in en and "  - city TEXT: city of the customer (e.g. 'Berlin', 'Paris', 'Madrid')" in en
    assert "  - city TEXT: city of the customer; 客户city (e.g. 'Berlin'" in zh
    assert "Table customers: 客户 (3 rows)" in zh
    assert "  - id INTEGER primary key: id of the customer\n" in en  # no samples for a number column


def test_compact_schema_detail(shop):
    schema, graph = shop
    full = build_prompt("q", ROUTE, schema, graph, [], k=0)[-1]["content"]
    compact = build_prompt("q", ROUTE, schema, graph, [], k=0, schema_detail="compact")[-1]["content"]
    assert compact.startswith(
        'Tables on the route:\ncustomers(id, name, city)\norders(id, customer_id, order_date)\n'
        '"order items"(id, order_id, product_id, quantity)\n'
        'Foreign keys: "order items".order_id -> orders.id, orders.customer_id -> customers.id\n'
    )
    assert "products" not in compact.split("Join skeleton")[0].replace("product_id", "")
    assert "Join skeleton: FROM" in compact and len(compact) < len(full)
    with pytest.raises(ConfigError, match="schema_detail"):
        build_prompt("q", ROUTE, schema, graph, [], schema_detail="tiny")


def test_linked_values_list_one_value_per_mention():
    from core.values import ValueMatch
    from generator.prompt import render_values

    question = "Pavlova Ltd 和 Simons bistro 的 Robert King"
    ranked = [  # best first, as ValueIndex.lookup returns them
        ValueMatch("Suppliers", "CompanyName", "Pavlova, Ltd.", 1.0, 0, 11, True, question),
        ValueMatch("Customers", "CompanyName", "Simons bistro", 1.0, 14, 27, True, question),
        ValueMatch("Employees", "FirstName", "Robert", 1.0, 30, 36, True, question),
        ValueMatch("Employees", "LastName", "King", 1.0, 37, 41, True, question),
        ValueMatch("Orders", "ShipName", "Simons bistro", 1.0, 14, 27, True, question),  # the same words
        ValueMatch("Products", "ProductName", "Pavlova", 1.0, 0, 7, True, question),  # inside a better mention
        ValueMatch("Customers", "ContactName", "Simon Crowther", 0.49, 14, 20, False, question),  # overlaps one
    ]
    everywhere = JoinPath("Suppliers", ("Products", "Order Details", "Orders"), "Customers")
    assert render_values(ranked, everywhere) == (
        "Values in the question: Suppliers.CompanyName = 'Pavlova, Ltd.'; Customers.CompanyName = 'Simons bistro'"
    )
    # off the route the better reading is not there, so the other one is the literal to use
    assert render_values(ranked, JoinPath("Products", ("Order Details",), "Orders")) == (
        "Values in the question: Orders.ShipName = 'Simons bistro'; Products.ProductName = 'Pavlova'"
    )
    assert render_values(ranked, None) == (
        "Values in the question: Suppliers.CompanyName = 'Pavlova, Ltd.'; Customers.CompanyName = 'Simons bistro'; "
        "Employees.FirstName = 'Robert'"
    )


def test_a_value_off_the_route_is_shown_as_the_route_column_that_references_it():
    from core.values import ValueMatch
    from generator.prompt import render_values, route_values

    from data_pipeline.datasets import load_sample

    schema = introspect(load_sample("northwind"))
    m = ValueMatch("Customers", "CustomerID", "VICTE", 0.9, 16, 22, False, "customer demo VICTTE")
    route = JoinPath("CustomerCustomerDemo", (), "CustomerDemographics")
    assert render_values([m], route) == ""  # without the schema: Customers is not on the route
    assert render_values([m], route, schema) == "Values in the question: CustomerCustomerDemo.CustomerID = 'VICTE'"
    assert [(v.table, v.column) for v in route_values([m], JoinPath("Customers", (), "Customers"), schema)] == [
        ("Customers", "CustomerID")
    ]
