"""Schema introspection and the schema graph, on a schema small enough to count by hand."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import dense_schema

from data_pipeline import JoinPath, SchemaGraph, introspect
from core.errors import DataError, SchemaError


def test_introspect_tiny(tiny_db):
    s = introspect(tiny_db)
    assert s.table_names == ("categories", "customers", "order items", "orders", "products", "suppliers")
    assert len(s.foreign_keys) == 5
    assert s.table("products").row_count == 3
    assert s.table("order items").column("quantity").type == "INTEGER"
    assert s.table("customers").primary_key == ("id",)
    assert s.table("customers").column("name").not_null
    assert set(s.table("categories").column("name").samples) == {"Beverages", "Seafood"}


def test_paths_counted_by_hand(tiny_db):
    # The FK graph is a tree: customers-orders-order items-products-{categories,suppliers}.
    # Distances: 6 single-table paths; ordered pairs at 1 hop: 5 edges x 2 = 10;
    # 2 hops: pairs (customers,order items),(orders,products),(order items,categories),
    # (order items,suppliers),(categories,suppliers) = 5 x 2 = 10;
    # 3 hops: (customers,products),(orders,categories),(orders,suppliers) = 3 x 2 = 6.
    g = SchemaGraph(introspect(tiny_db), max_hops=3)
    assert g.hop_histogram() == {0: 6, 1: 10, 2: 10, 3: 6}
    assert len(g.legal_paths) == 32
    assert SchemaGraph(introspect(tiny_db), max_hops=1).hop_histogram() == {0: 6, 1: 10}
    assert g.is_legal(JoinPath("customers", ("orders", "order items"), "products"))
    assert not g.is_legal(JoinPath("customers", (), "products"))  # no direct FK
    assert g.via_options[0] == ()


def test_skeletons_execute_with_expected_counts(tiny_db):
    g = SchemaGraph(introspect(tiny_db))
    conn = sqlite3.connect(tiny_db)
    counts = {str(p): conn.execute(g.skeleton(p)).fetchone()[0] for p in g.legal_paths}
    assert counts["customers"] == 3
    assert counts["customers -> orders"] == 4  # every order has one customer
    assert counts["customers -> orders -> order items"] == 6
    assert counts["customers -> orders -> order items -> products"] == 6
    assert counts["categories -> products -> suppliers"] == 3
    # direction does not change an inner join's size
    assert counts["products -> order items -> orders"] == counts["orders -> order items -> products"] == 6


def test_check_path_names_the_problem(tiny_db):
    g = SchemaGraph(introspect(tiny_db))
    with pytest.raises(DataError, match="unknown table 'clients'"):
        g.check_path(JoinPath("clients", (), "orders"), where="labels.jsonl", line=7)
    with pytest.raises(DataError, match=r"labels.jsonl:2: path customers -> products is not a legal"):
        g.check_path(JoinPath("customers", (), "products"), where="labels.jsonl", line=2)


def test_bad_databases(tmp_path):
    with pytest.raises(SchemaError, match="database file not found"):
        introspect(tmp_path / "missing.sqlite")
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    with pytest.raises(SchemaError, match="not a SQLite database"):
        introspect(bad)
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("CREATE TABLE t(x)").connection.close()
    sqlite3.connect(empty).execute("DROP TABLE t").connection.close()
    with pytest.raises(SchemaError, match="no tables"):
        introspect(empty)


def test_no_foreign_keys_warns_and_keeps_single_table_paths(tmp_path):
    p = tmp_path / "flat.sqlite"
    conn = sqlite3.connect(p)
    conn.executescript("CREATE TABLE a(id INTEGER PRIMARY KEY); CREATE TABLE b(id INTEGER PRIMARY KEY);")
    conn.close()
    with pytest.warns(UserWarning, match="no foreign keys"):
        s = introspect(p)
    assert [str(x) for x in SchemaGraph(s).legal_paths] == ["a", "b"]


def test_fingerprint_ignores_data_but_not_shape(tiny_db):
    before = introspect(tiny_db).fingerprint()
    conn = sqlite3.connect(tiny_db)
    conn.execute("INSERT INTO customers VALUES (9,'Zed','Rome')")
    conn.commit()
    assert introspect(tiny_db).fingerprint() == before
    conn.execute("ALTER TABLE customers ADD COLUMN email TEXT")
    conn.commit()
    conn.close()
    assert introspect(tiny_db).fingerprint() != before


def test_description_sidecar(tiny_db, tmp_path):
    side = tmp_path / "desc.json"
    side.write_text('{"tables": {"customers": {"description": "buyers", "zh": "客户", "columns": {"city": {"zh": "城市"}}}}}')
    s = introspect(tiny_db, descriptions=side)
    assert s.table("customers").zh == "客户"
    assert s.table("customers").column("city").zh == "城市"
    side.write_text('{"tables": {"clients": {}}}')
    with pytest.raises(DataError, match="unknown table 'clients'"):
        introspect(tiny_db, descriptions=side)
    side.write_text('{"tables": {"customers": {"columns": {"email": {}}}}}')
    with pytest.raises(DataError, match="unknown column customers.email"):
        introspect(tiny_db, descriptions=side)


@pytest.mark.parametrize(("doc", "message"), [
    ({"customers": "buyers"}, r"tables\.customers must be an object with description, zh, description_zh \(got str\)"),
    ({"customers": {"columns": ["city"]}}, r"tables\.customers\.columns must be an object"),
    ({"customers": {"columns": {"city": "the city"}}}, r"tables\.customers\.columns\.city must be an object"),
    ({"customers": {"description": {"x": 1}}}, r"tables\.customers\.description must be text \(got dict\)"),
])  # fmt: skip
def test_a_malformed_description_sidecar_is_one_error_naming_the_field(tiny_db, tmp_path, doc, message):
    """Each was an AttributeError traceback, or (a dict as a description) stored as the text "{'x': 1}"."""
    side = tmp_path / "desc.json"
    side.write_text(json.dumps({"tables": doc}))
    with pytest.raises(DataError, match=f"desc.json: {message}"):
        introspect(tiny_db, descriptions=side)


def test_null_descriptions_are_empty_not_the_word_none(tiny_db, tmp_path):
    side = tmp_path / "desc.json"
    side.write_text(json.dumps({"tables": {"customers": {"description": None, "columns": {"city": {"zh": None}}}}}))
    table = introspect(tiny_db, descriptions=side).table("customers")
    assert table.description == "" and table.column("city").zh == ""


def test_schema_round_trip(tiny_db):
    s = introspect(tiny_db)
    from core.schema import Schema

    s2 = Schema.from_dict(s.to_dict())
    assert s2.fingerprint() == s.fingerprint()
    assert s2.table("order items").column("quantity") == s.table("order items").column("quantity")


def test_too_many_legal_paths_is_one_clear_error():
    # a hostile max_hops (from a config file, say) must stop at the cap with an error, not
    # enumerate every path; the isolated table that sorts first would make a search per
    # (anchor, target) pair walk every simple path of the dense part before yielding one
    from core.graph import MAX_LEGAL_PATHS

    dense = dense_schema(9)
    with pytest.raises(SchemaError, match=f"more than {MAX_LEGAL_PATHS:,} legal paths of up to 1000000 joins") as err:
        SchemaGraph(dense, max_hops=10**6).legal_paths
    assert "\n" not in str(err.value) and str(err.value).startswith("max_hops: ")
    n = 9
    assert len(SchemaGraph(dense, max_hops=2).legal_paths) == 1 + n + n * (n - 1) + n * (n - 1) * (n - 2)


def test_a_data_set_whose_max_hops_gives_too_many_paths_names_its_schema_file(tmp_path):
    from core.dataset import load_dataset

    doc = SchemaGraph(dense_schema(9), max_hops=10**6).to_dict()
    (tmp_path / "schema.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "samples.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"schema\.json: max_hops: schema 'dense' has more than 200,000 legal paths"):
        load_dataset(tmp_path)


def test_a_composite_foreign_key_is_one_key_and_its_join_matches_every_column(tmp_path):
    """Line 1 of order 1 has one shipment, line 1 of order 2 has two: a join on line_no alone
    (the key split into single columns, as before) would count 3 shipments for order 1's line."""
    db = tmp_path / "composite.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE lines (order_id INTEGER, line_no INTEGER, item TEXT, PRIMARY KEY (order_id, line_no));
        CREATE TABLE shipments (id INTEGER PRIMARY KEY, order_id INTEGER, line_no INTEGER, carrier TEXT,
            FOREIGN KEY (order_id, line_no) REFERENCES lines (order_id, line_no));
        INSERT INTO lines VALUES (1, 1, 'tea'), (2, 1, 'coffee');
        INSERT INTO shipments VALUES (1, 1, 1, 'a'), (2, 2, 1, 'b'), (3, 2, 1, 'c');
        """
    )
    conn.commit()
    schema = introspect(db)
    (fk,) = schema.foreign_keys
    assert fk.pairs == (("order_id", "order_id"), ("line_no", "line_no"))
    assert str(fk) == "shipments(order_id, line_no) -> lines(order_id, line_no)"
    graph = SchemaGraph(schema)
    path = JoinPath("lines", (), "shipments")
    assert graph.from_clause(path) == (
        "FROM lines JOIN shipments ON shipments.order_id = lines.order_id AND shipments.line_no = lines.line_no"
    )
    sql = f"SELECT COUNT(*) {graph.from_clause(path)} WHERE lines.item = 'tea'"
    assert conn.execute(sql).fetchone() == (1,)
    again = type(schema).from_dict(json.loads(json.dumps(schema.to_dict())))
    assert again.foreign_keys == schema.foreign_keys and again.fingerprint() == schema.fingerprint()
    conn.close()


def test_long_text_samples_are_cut(tmp_path):
    from core.schema import SAMPLE_MAX_CHARS

    db = tmp_path / "long.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, n INTEGER)")
    conn.execute("INSERT INTO notes VALUES (1, ?, 123456789)", ("x" * 1_000_000,))
    conn.commit()
    conn.close()
    with pytest.warns(UserWarning, match="no foreign keys"):
        table = introspect(db).table("notes")
    assert table.column("body").samples == ("x" * SAMPLE_MAX_CHARS,)
    assert table.column("n").samples == (123456789,)


def test_a_count_over_a_join_that_repeats_target_rows_is_not_generated(tmp_path):
    """Shipments reference order lines by a composite key and a line has 4 shipments: "how many
    lines does shipment carrier X have" as COUNT(*) counted each line 4 times (20 for 5 lines)."""
    from data_pipeline.pipeline import BuildConfig, build_dataset

    db = tmp_path / "lines.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        """
        CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer TEXT);
        CREATE TABLE lines (order_id INTEGER REFERENCES orders (order_id), line_no INTEGER, product TEXT,
            PRIMARY KEY (order_id, line_no)) WITHOUT ROWID;
        CREATE TABLE shipments (ship_id INTEGER PRIMARY KEY, order_id INTEGER, line_no INTEGER, carrier TEXT,
            FOREIGN KEY (order_id, line_no) REFERENCES lines (order_id, line_no));
        """
    )
    ship = 0
    for o in range(1, 11):
        conn.execute("INSERT INTO orders VALUES (?, ?)", (o, f"Customer {o % 3}"))
        for line in (1, 2):
            conn.execute("INSERT INTO lines VALUES (?, ?, ?)", (o, line, f"Product {(o + line) % 4}"))
        for _ in range(4):
            ship += 1
            conn.execute("INSERT INTO shipments VALUES (?, ?, 1, ?)", (ship, o, f"Carrier {o % 2}"))
    conn.commit()
    ds, summary = build_dataset(BuildConfig(db=str(db), out=tmp_path / "data", seed=0))
    counts = [s for s in ds.samples if s.sql.startswith("SELECT COUNT(*)") and s.path.hops > 0]
    assert counts, "the count questions that do not repeat rows are still generated"
    for s in counts:
        n = conn.execute(s.sql).fetchone()[0]
        pk = ", ".join(f'"{s.path.target}"."{c}"' for c in introspect(db).table(s.path.target).primary_key)
        rest = s.sql[len("SELECT COUNT(*)"):]
        assert n == conn.execute(f"SELECT COUNT(*) FROM (SELECT DISTINCT {pk} {rest})").fetchone()[0], s.sql
    assert summary["dropped"]["count_repeats_rows"] > 0
    conn.close()
