"""MongoDB backend: introspection, references, path pipelines, read-only execution, the loader.

Tests marked ``mongo`` talk to a real wire-protocol server on 127.0.0.1 (tests/mongo_server.py:
``secantusdb`` started as a child process, or ``R2S_MONGO_URI``). Under CI (``CI=true``) a server
that cannot start fails them; elsewhere they skip with the reason. Never a mock.

Northwind is copied from its SQLite sample once per module; the data set is built with
``samples_per_path=3`` (hop-balanced: 3 to 5 per path) once per module too.
"""

from __future__ import annotations

import json
import sqlite3
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import pymongo
import pytest
from pymongo.errors import ExecutionTimeout

from data_pipeline import BuildConfig, SchemaGraph, build_dataset, load_dataset
from data_pipeline.backends.mongo_pipeline import (
    Condition,
    Join,
    MongoQuery,
    Output,
    PathQuery,
    build_pipeline,
    check_query,
    collections_used,
    documents_to_rows,
    execute_pipeline,
    gold_pipeline,
    translate_sql,
)
from data_pipeline.backends.mongodb import (
    METADATA_COLLECTION,
    bson_type_name,
    database_name,
    introspect_mongodb,
    redact_uri,
)
from data_pipeline.backends.registry import MongoBackend, SQLiteBackend, load_backend
from data_pipeline.backends.sqlite import execute_readonly
from core.errors import ConfigError, DataError, QueryRejected, SchemaError
from data_pipeline.mongo_load import check_names, load_sqlite_into_mongo
from data_pipeline.mongo_load import main as load_main
from core.schema import Column, Schema, Table, introspect
from rewards.sql_execution import normalize_rows, results_match

from conftest import make_tiny_shop
from mongo_server import MongoServer, running_server

NORTHWIND_FKS_INFERRED = {
    ("CustomerCustomerDemo", "CustomerID", "Customers", "CustomerID"),
    ("CustomerCustomerDemo", "CustomerTypeID", "CustomerDemographics", "CustomerTypeID"),
    ("EmployeeTerritories", "EmployeeID", "Employees", "EmployeeID"),
    ("EmployeeTerritories", "TerritoryID", "Territories", "TerritoryID"),
    ("Order Details", "OrderID", "Orders", "OrderID"),
    ("Order Details", "ProductID", "Products", "ProductID"),
    ("Orders", "CustomerID", "Customers", "CustomerID"),
    ("Orders", "EmployeeID", "Employees", "EmployeeID"),
    ("Products", "CategoryID", "Categories", "CategoryID"),
    ("Products", "SupplierID", "Suppliers", "SupplierID"),
    ("Territories", "RegionID", "Region", "RegionID"),
}
"""Northwind's 13 declared FKs (the data set's copy, empty tables filled) less the 2 that values
cannot settle: Orders.ShipVia and Employees.ReportsTo hold small integers that fit several keys,
and their names match none."""

# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def northwind_sqlite() -> Path:
    from data_pipeline.datasets import load_sample
    from core.errors import DownloadError

    try:
        return load_sample("northwind")
    except DownloadError as exc:
        pytest.skip(f"Northwind sample unavailable: {exc}")


@pytest.fixture(scope="module")
def northwind_dir(northwind_sqlite: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Northwind data set, ``samples_per_path=3`` (its database has synthetic rows in the empty tables)."""
    out = tmp_path_factory.mktemp("nw")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_dataset(BuildConfig(db="northwind", out=out, samples_per_path=3, unfiltered_share=0.0))  # MongoDB builds none
    return out


@pytest.fixture(scope="module")
def northwind_ds(northwind_dir: Path):
    return load_dataset(northwind_dir)


@pytest.fixture(scope="module")
def server():
    yield from running_server()


@pytest.fixture(scope="module")
def northwind_uri(server: MongoServer, northwind_dir: Path, northwind_ds) -> str:
    """The data set's database copied into MongoDB (``--db <data set folder>``)."""
    uri = server.db_uri("northwind")
    report = load_main(["--db", str(northwind_dir), "--uri", uri])
    assert report.documents == {t.name: t.row_count for t in northwind_ds.schema.tables}
    return uri


@pytest.fixture(scope="module")
def nw_db(server: MongoServer, northwind_uri: str):
    with server.client() as client:
        yield client["northwind"]


def _tiny_shop_db(server: MongoServer, tmp_path: Path, name: str, extra_sql: str = "") -> tuple[Path, pymongo.database.Database]:
    path = make_tiny_shop(tmp_path / f"{name}.sqlite")
    if extra_sql:
        conn = sqlite3.connect(path)
        conn.executescript(extra_sql)
        conn.commit()
        conn.close()
    schema = introspect(path, name=name)
    client = server.client()
    load_sqlite_into_mongo(path, client[name], schema, replace=True)
    return path, client[name]


# ---------------------------------------------------------------------------- no server needed

REJECTED = [
    # (query, words the reason must contain, why)
    ({"aggregate": "Orders", "pipeline": [{"$out": "copy"}]}, "write stage $out", "writes a collection"),
    ({"aggregate": "Orders", "pipeline": [{"$match": {}}, {"$merge": {"into": "x"}}]}, "write stage $merge is not allowed (stage 2)", "writes into another collection"),
    ({"aggregate": "Orders", "pipeline": [{"$lookup": {"from": "x", "pipeline": [{"$out": "y"}], "as": "z"}}]}, "write stage $out", "hidden in a $lookup"),
    ({"aggregate": "Orders", "pipeline": [{"$facet": {"a": [{"$merge": "y"}]}}]}, "write stage $merge", "hidden in a $facet"),
    ({"aggregate": "Orders", "pipeline": [{"$unionWith": {"coll": "x", "pipeline": [{"$out": "y"}]}}]}, "write stage $out", "hidden in $unionWith"),
    ({"insert": "Orders", "documents": [{}]}, "write command insert", "a write command, not an aggregate"),
    ({"delete": "Orders", "deletes": []}, "write command delete", "a write command"),
    ({"drop": "Orders"}, "write command drop", "drops a collection"),
    ({"aggregate": "Orders", "pipeline": [{"$currentOp": {}}]}, "stage $currentOp is not allowed", "admin stage"),
    ({"aggregate": "Orders", "pipeline": [{"$match": {"$where": "sleep(1000)"}}]}, "$where runs JavaScript", "server-side JS"),
    ({"aggregate": "Orders", "pipeline": [{"$project": {"x": {"$function": {"body": "f", "args": [], "lang": "js"}}}}]}, "$function", "JS in an expression"),
    ({"aggregate": "Orders", "pipeline": [{"$match": {}, "$limit": 1}]}, "exactly one stage name", "two stages in one object"),
    ({"aggregate": "Orders", "pipeline": {"$match": {}}}, "must be a list", "pipeline not a list"),
    ({"aggregate": "", "pipeline": []}, "must name a collection", "no collection"),
    ({"aggregate": "Orders", "pipeline": [], "writeConcern": {}}, "unknown field 'writeConcern'", "extra options"),
    ("SELECT * FROM Orders", "not valid JSON", "SQL given to the MongoDB backend"),
    ("", "empty query", "nothing"),
    ("[1, 2]", "expected an object", "a JSON list"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "reason", "why"), REJECTED, ids=[r[2] for r in REJECTED])
def test_check_query_refuses(query, reason, why):
    with pytest.raises(QueryRejected) as err:
        check_query(query)
    assert reason in err.value.message, why


def test_check_query_accepts_read_stages_and_lists_collections():
    q = check_query(
        json.dumps(
            {
                "aggregate": "Orders",
                "pipeline": [
                    {"$match": {"ShipVia": {"$gte": 1}}},
                    {"$lookup": {"from": "Customers", "localField": "CustomerID", "foreignField": "CustomerID", "as": "c"}},
                    {"$unwind": "$c"},
                    {"$facet": {"n": [{"$count": "n"}]}},
                    {"$unionWith": {"coll": "Shippers", "pipeline": [{"$project": {"_id": 0}}]}},
                ],
            }
        )
    )
    assert q.collection == "Orders" and len(q.pipeline) == 5
    assert collections_used(q) == {"Orders", "Customers", "Shippers"}


TRANSLATE_ERRORS = [
    ("SELECT a.x FROM a LEFT JOIN b ON b.a_id = a.id", "inner JOIN"),
    ("SELECT a.x FROM a WHERE a.x = 1 OR a.y = 2", "does not translate"),
    ("SELECT a.x, COUNT(*) FROM a GROUP BY a.x", "GROUP"),
    ("SELECT a.x FROM a ORDER BY a.x", "ORDER"),
    ("SELECT a.x, COUNT(*) FROM a", "mixed"),
    ("SELECT a.x FROM a JOIN b ON b.y > a.x", "ON a.x = b.y"),
    ("SELECT x FROM a", "needs a table qualifier"),
    ("SELECT (a.x FROM a", "does not parse"),
    ("DELETE FROM a", "only a plain SELECT"),
    ("SELECT SUM(DISTINCT a.x) FROM a", "not supported"),
]


@pytest.mark.parametrize(("sql", "reason"), TRANSLATE_ERRORS)
def test_translate_sql_refuses_what_it_cannot_translate(sql, reason):
    with pytest.raises(DataError) as err:
        build_pipeline(translate_sql(sql))
    assert reason in err.value.message


def test_translate_sql_reads_literals_aliases_and_flipped_comparisons():
    q = translate_sql("SELECT DISTINCT p.name FROM products AS p JOIN categories c ON p.category_id = c.id "
                      "WHERE 4 < p.price AND c.name = 'Sea''food' AND p.stock IS NOT NULL AND p.delta >= -2.5")  # fmt: skip
    assert q.tables == ("products", "categories")
    assert q.joins == (Join("categories", 0, "category_id", "id"),)
    assert q.where == (
        Condition(0, "price", ">", 4),
        Condition(1, "name", "=", "Sea'food"),
        Condition(0, "stock", "IS NOT NULL"),
        Condition(0, "delta", ">=", -2.5),
    )
    assert q.select == (Output(0, "name"),) and q.distinct


def test_pipeline_shape_for_a_two_hop_count():
    q = PathQuery(
        ("Customers", "Orders", "Order Details"),
        (Join("Orders", 0, "CustomerID", "CustomerID"), Join("Order Details", 1, "OrderID", "OrderID")),
        (Condition(0, "CompanyName", "=", "Alfreds Futterkiste"), Condition(2, "Quantity", ">=", 10)),
        (Output(2, "ProductID", "count", distinct=True),),
    )
    p = build_pipeline(q).pipeline
    assert p[0] == {"$match": {"CompanyName": {"$eq": "Alfreds Futterkiste"}}}  # on the anchor, before any join
    assert p[1] == {"$replaceRoot": {"newRoot": {"t0": "$$ROOT"}}}
    assert p[2] == {"$match": {"t0.CustomerID": {"$ne": None}}}  # SQL never joins on NULL
    assert p[3]["$lookup"] == {"from": "Orders", "localField": "t0.CustomerID", "foreignField": "CustomerID", "as": "t1"}
    assert p[6]["$lookup"]["localField"] == "t1.OrderID" and p[6]["$lookup"]["as"] == "t2"
    assert p[8] == {"$match": {"t2.Quantity": {"$gte": 10}}}  # the target's condition right after its join
    facet = p[9]["$facet"]["o0"]
    assert facet == [{"$match": {"t2.ProductID": {"$ne": None}}}, {"$group": {"_id": "$t2.ProductID"}}, {"$count": "v"}]
    assert p[-1] == {"$project": {"_id": 0, "count_ProductID": {"$ifNull": ["$o0.v", 0]}}}


def test_every_northwind_sample_translates_the_same_from_its_plan_and_from_its_sql(northwind_ds):
    """Both routes to a gold pipeline (structured fields; sqlglot on the SQL) agree on all samples."""
    graph = northwind_ds.graph
    same = sum(gold_pipeline(s, graph) == build_pipeline(translate_sql(s.sql, graph.schema)) for s in northwind_ds.samples)
    assert len(northwind_ds.samples) > 200
    assert same == len(northwind_ds.samples)


def test_values_become_sql_comparable_cells():
    from bson import Decimal128, Int64, ObjectId

    cols, rows = documents_to_rows([{"n": Int64(3), "d": Decimal128("2.50")}, {"o": ObjectId("0" * 24), "n": 1}])
    assert cols == ["n", "d", "o"]
    assert rows == [(3, 2.5, None), (1, None, "0" * 24)]
    assert type(rows[0][0]) is int


def test_bson_types_and_uri_helpers():
    assert bson_type_name([1, None, 2]) == "INTEGER"
    assert bson_type_name([1, "a"]) == ""
    assert database_name("mongodb://127.0.0.1:1/shop?w=1") == "shop"
    assert database_name("mongodb://127.0.0.1:1/") is None
    assert redact_uri("mongodb://u:p@h/db") == "mongodb://u:***@h/db"
    with pytest.raises(ConfigError, match="--uri"):
        database_name("postgres://h/db")


def test_load_backend_refuses_wrong_kinds(tmp_path):
    with pytest.raises(ConfigError, match="--backend: unknown backend 'oracle'"):
        load_backend("oracle", "x")
    with pytest.raises(ConfigError, match="use --backend mongodb"):
        load_backend("sqlite", "mongodb://127.0.0.1:1/x")
    with pytest.raises(ConfigError, match="--uri"):
        load_backend("mongodb", str(tmp_path / "shop.sqlite"))
    with pytest.raises(ConfigError, match="name the database"):
        load_backend("mongodb", "mongodb://127.0.0.1:1/")


def test_loader_refuses_names_mongodb_cannot_hold():
    bad = Schema("s", (Table("t", (Column("a.b"),)),), ())
    with pytest.raises(SchemaError, match=r"column t\.'a\.b' cannot be a MongoDB field name"):
        check_names(bad)
    with pytest.raises(SchemaError, match="cannot be a MongoDB collection name"):
        check_names(Schema("s", (Table("x$y", (Column("a"),)),), ()))


def test_unreachable_server_is_a_schema_error_naming_the_uri():
    from mongo_server import free_port

    uri = f"mongodb://ana:secret@127.0.0.1:{free_port()}/shop"
    with pytest.raises(SchemaError) as err:
        from data_pipeline.backends.mongodb import connect

        connect(uri, server_timeout_s=0.3)
    assert "ana:***@127.0.0.1" in str(err.value) and "secret" not in str(err.value)


# ---------------------------------------------------------------------------- with a server


@pytest.mark.mongo
def test_northwind_on_mongodb_has_the_sqlite_schema_and_legal_paths(northwind_uri, northwind_ds):
    sql_schema = northwind_ds.schema  # introspected from the data set's SQLite database
    mongo_schema = introspect_mongodb(northwind_uri)
    assert mongo_schema.backend == "mongodb" and mongo_schema.source == northwind_uri
    assert mongo_schema.fingerprint() == sql_schema.fingerprint()
    # columns, types, keys, row counts, descriptions, sample values: what a router reads
    assert mongo_schema.tables == sql_schema.tables and mongo_schema.foreign_keys == sql_schema.foreign_keys
    sql_paths, mongo_paths = set(SchemaGraph(sql_schema).legal_paths), set(SchemaGraph(mongo_schema).legal_paths)
    assert len(mongo_paths) == 95
    assert mongo_paths == sql_paths


@pytest.mark.mongo
def test_references_inferred_from_values_without_a_declaration(nw_db):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schema = introspect_mongodb(nw_db, references="inferred", sample_size=300)
    assert {(f.table, f.column, f.ref_table, f.ref_column) for f in schema.foreign_keys} == NORTHWIND_FKS_INFERRED
    notes = " ".join(str(w.message) for w in caught)
    assert "Orders.ShipVia could reference Categories, Employees, Products, Region, Shippers, Suppliers; ambiguous" in notes
    assert "Employees.ReportsTo could reference" in notes
    customers = schema.table("Customers")
    assert customers.primary_key == ("CustomerID",) and customers.column("CustomerID").type == "TEXT"
    assert schema.table("Order Details").column("Discount").type == "REAL"
    assert schema.table("Categories").column("Picture").type == "BLOB"
    assert schema.table("CustomerDemographics").primary_key == ("CustomerTypeID",)  # the field equal to _id
    assert schema.table("Order Details").primary_key == ()  # composite key: ObjectId _id, no single key
    with pytest.raises(SchemaError, match="no declared schema"):
        introspect_mongodb(nw_db.client["nothing_here"], references="declared")


@pytest.mark.mongo
def test_declared_schema_is_checked_against_the_data(server, tmp_path):
    _, db = _tiny_shop_db(server, tmp_path, "declared_shop")
    try:
        db["products"].update_many({}, {"$set": {"price": "n/a"}})
        with pytest.warns(UserWarning, match="products.price is declared REAL but holds TEXT values"):
            schema = introspect_mongodb(db)
        assert schema.table("products").column("price").type == "REAL"  # the declaration stands
        db.drop_collection("suppliers")
        with pytest.raises(DataError, match="declared_shop._route2sql_schema: declared tables have no collection: suppliers"):
            introspect_mongodb(db)
    finally:
        db.client.close()


@pytest.mark.mongo
def test_gold_pipelines_return_the_rows_of_their_sql_twins(nw_db, northwind_ds):
    """Two samples per (family, hop count): every one returns its SQL twin's rows as a multiset.

    The benchmark (benchmarks/bench_mongo.py) compares every sample of a data set; a sample is
    here to keep this test to a few seconds on the test server (Python, ~0.5 ms per $lookup).
    """
    groups: dict[tuple[str, int], list] = defaultdict(list)
    for s in northwind_ds.samples:
        groups[(s.meta["plan"]["family"], s.path.hops)].append(s)
    chosen = [s for key in sorted(groups) for s in groups[key][:2]]
    matched = exact = 0
    for s in chosen:
        mongo = execute_pipeline(nw_db, gold_pipeline(s, northwind_ds.graph), timeout_s=10)
        sql = execute_readonly(northwind_ds.db_path, s.sql)
        assert mongo.ok, (s.id, mongo.error)
        assert mongo.rows, s.id  # the data set keeps only questions with answers
        matched += results_match(mongo.rows, sql.rows, ordered=False)
        exact += Counter(normalize_rows(mongo.rows)) == Counter(normalize_rows(sql.rows))
    assert len(groups) == 16  # list/count/agg/filter x hops 1-3 and lookup/count/agg/filter x hop 0
    assert len(chosen) >= 30
    assert matched == exact == len(chosen)


EDGE_SQL = [
    # (SQL on the tiny shop with NULLs added, expected rows, why)
    ('SELECT COUNT(*) FROM customers JOIN suppliers ON suppliers.country = customers.city', [(0,)],
     "NULL = NULL never joins (a bare $lookup would pair them)"),
    ("SELECT SUM(products.price) FROM categories JOIN products ON products.category_id = categories.id "
     "WHERE categories.name = 'Seafood'", [(None,)], "SUM of only NULLs is NULL, not 0"),
    ("SELECT COUNT(DISTINCT products.id) FROM categories JOIN products ON products.category_id = categories.id "
     "WHERE categories.name = 'Nothing'", [(0,)], "COUNT over no rows is one row 0"),
    ("SELECT AVG(products.price), MAX(products.name) FROM products WHERE products.id > 99", [(None, None)],
     "AVG/MAX over no rows is one row of NULLs"),
    ("SELECT COUNT(customers.city), COUNT(*) FROM customers", [(2, 3)], "COUNT(col) skips NULL"),
    ("SELECT DISTINCT customers.city FROM customers JOIN orders ON orders.customer_id = customers.id",
     [("Berlin",), ("Paris",), (None,)], "DISTINCT keeps one NULL"),
    ('SELECT SUM("order items".quantity) FROM customers JOIN orders ON orders.customer_id = customers.id '
     'JOIN "order items" ON "order items".order_id = orders.id WHERE customers.name = \'Alice Martin\'', [(8,)],
     "join multiplicity: 2 + 1 + 5"),
    ("SELECT products.name FROM products WHERE products.price >= 6", [("Black Coffee",)], "comparison, no DISTINCT"),
]  # fmt: skip

EDGE_NULLS = """
UPDATE customers SET city = NULL WHERE id = 3;
UPDATE suppliers SET country = NULL WHERE id = 1;
UPDATE products SET price = NULL WHERE category_id = 2;
"""


@pytest.mark.mongo
def test_sql_semantics_kept_on_edge_cases(server, tmp_path):
    path, db = _tiny_shop_db(server, tmp_path, "edge_shop", EDGE_NULLS)
    try:
        for sql, expected, why in EDGE_SQL:
            got = execute_pipeline(db, build_pipeline(translate_sql(sql)))
            twin = execute_readonly(path, sql)
            assert twin.rows is not None and sorted(map(repr, twin.rows)) == sorted(map(repr, expected)), ("sql", why)
            assert got.ok, (why, got.error)
            assert sorted(map(repr, got.rows)) == sorted(map(repr, expected)), why
    finally:
        db.client.close()


@pytest.mark.mongo
def test_write_stages_are_refused_and_nothing_is_written(northwind_uri, nw_db):
    with load_backend("mongodb", northwind_uri) as backend:
        before = set(nw_db.list_collection_names())
        out = backend.execute({"aggregate": "Orders", "pipeline": [{"$match": {}}, {"$out": "stolen"}]})
        merge = backend.execute(json.dumps({"aggregate": "Orders", "pipeline": [{"$merge": {"into": "Customers"}}]}))
        insert = backend.execute({"insert": "Orders", "documents": [{"OrderID": 1}]})
        assert not out.ok and out.error == "rejected: write stage $out is not allowed (stage 2); only read stages may run"
        assert not merge.ok and merge.error.startswith("rejected: write stage $merge")
        assert not insert.ok and insert.error.startswith("rejected: write command insert")
        assert set(nw_db.list_collection_names()) == before
        assert nw_db["Orders"].count_documents({}) == 830 and nw_db["Customers"].count_documents({}) == 91
        unknown = backend.execute({"aggregate": "Invoices", "pipeline": []})
        assert not unknown.ok and unknown.error == "unknown collection 'Invoices'"
        bad = backend.execute({"aggregate": "Orders", "pipeline": [{"$project": {"x": {"$noSuchOp": 1}}}]})
        assert not bad.ok and bad.error.startswith("OperationFailure")


RUNAWAY = [  # every order against every order line by a computed condition: 830 x 2155 evaluations
    {"$lookup": {"from": "Order Details", "let": {"x": "$OrderID"},
                 "pipeline": [{"$match": {"$expr": {"$gte": ["$Quantity", "$$x"]}}}], "as": "d"}},
    {"$count": "n"},
]  # fmt: skip


@pytest.mark.mongo
def test_time_limit_stops_a_runaway_pipeline(server, nw_db):
    import psutil

    t = time.perf_counter()
    sample = execute_pipeline(nw_db, {"aggregate": "Orders", "pipeline": [{"$limit": 8}, *RUNAWAY]}, timeout_s=30)
    per_order = (time.perf_counter() - t) / 8
    assert sample.ok and sample.rows == [(8,)]
    assert per_order * 830 > 10 * 0.5  # the whole pipeline would run for more than 10 limits

    result = execute_pipeline(nw_db, {"aggregate": "Orders", "pipeline": RUNAWAY}, timeout_s=0.5)
    assert result.timed_out and not result.ok and result.rows is None
    assert result.error.startswith("timed out after 0.5 s")
    assert 0.4 < result.elapsed_s < 1.5  # the limit, plus scheduling on a busy 2-core machine

    # the server itself stops it (maxTimeMS, no client deadline)...
    t = time.perf_counter()
    with pytest.raises(ExecutionTimeout):
        list(nw_db["Orders"].aggregate(RUNAWAY, maxTimeMS=500))
    assert time.perf_counter() - t < 3.0  # on a busy machine; far below the minutes the whole pipeline takes
    # ...and then is idle: neither run is still working
    if server.pid is not None:
        assert psutil.Process(server.pid).cpu_percent(interval=0.3) < 50
    t = time.perf_counter()
    nw_db.client.admin.command("ping")
    assert time.perf_counter() - t < 0.2


class _Commands(pymongo.monitoring.CommandListener):
    """Records every command a client sends: ``(name, maxTimeMS)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None]] = []

    def started(self, event) -> None:
        self.sent.append((event.command_name, event.command.get("maxTimeMS")))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


@pytest.mark.mongo
def test_every_command_carries_max_time_ms_and_the_server_honours_it(server, northwind_uri):
    # issue 14 item 11: after the client's deadline the server kept working; a getMore carries no
    # maxTimeMS, so the whole result must come in the aggregate reply, and the server must stop itself
    import psutil

    listener = _Commands()
    with server.client(event_listeners=[listener]) as client:
        db = client["northwind"]
        big = execute_pipeline(db, {"aggregate": "Order Details", "pipeline": []}, timeout_s=5.0, max_rows=2000)
        assert big.ok and len(big.rows) == 2000 and big.truncated  # 2,155 lines: more than one default batch (101)
        t = time.perf_counter()
        runaway = execute_pipeline(db, {"aggregate": "Orders", "pipeline": RUNAWAY}, timeout_s=0.5)
        assert runaway.timed_out and time.perf_counter() - t < 0.5 + 0.5
        if server.pid is not None:  # the server itself stopped: idle right after, and answering at once
            assert psutil.Process(server.pid).cpu_percent(interval=0.3) < 50
        t = time.perf_counter()
        client.admin.command("ping")
        assert time.perf_counter() - t < 0.2
    queries = [(name, ms) for name, ms in listener.sent if name in ("aggregate", "getMore")]
    assert [name for name, _ in queries] == ["aggregate", "aggregate"]  # no getMore without a time limit
    assert all(ms is not None and 0 < ms <= 5000 for _, ms in queries), queries
    assert queries[1][1] <= 500


@pytest.mark.mongo
def test_rows_are_capped_at_max_rows(nw_db):
    q = MongoQuery("Orders", [{"$sort": {"OrderID": 1}}, {"$project": {"_id": 0, "OrderID": 1, "ShipVia": 1}}])
    r = execute_pipeline(nw_db, q, max_rows=5)
    assert r.ok and r.truncated and r.columns == ["OrderID", "ShipVia"]
    assert r.rows == [(10248, 3), (10249, 1), (10250, 2), (10251, 1), (10252, 2)]
    with pytest.raises(ConfigError, match="timeout_s"):
        execute_pipeline(nw_db, q, timeout_s=0)


@pytest.mark.mongo
def test_backends_answer_a_sample_alike(northwind_uri, northwind_ds):
    sample = next(s for s in northwind_ds.samples if s.path.hops == 2 and s.meta["plan"]["family"] == "agg")
    with load_backend("sqlite", "northwind") as sql_b, load_backend("mongodb", northwind_uri) as mongo_b:
        assert isinstance(sql_b, SQLiteBackend) and isinstance(mongo_b, MongoBackend)
        assert sql_b.introspect().fingerprint() == mongo_b.introspect().fingerprint()
        graph = SchemaGraph(mongo_b.introspect())
        sql_text, pipeline_json = sql_b.gold_query(sample, graph), mongo_b.gold_query(sample, graph)
        assert sql_text == sample.sql and json.loads(pipeline_json)["aggregate"] == sample.path.anchor
        a, b = sql_b.execute(sql_text), mongo_b.execute(pipeline_json)
        assert a.ok and b.ok and results_match(b.rows, a.rows, ordered=False)
        with pytest.raises(ConfigError, match="SQL text"):
            sql_b.execute(json.loads(pipeline_json))


@pytest.mark.mongo
def test_loader_refuses_to_overwrite_without_replace_and_keeps_the_declaration(server, tmp_path):
    path = make_tiny_shop(tmp_path / "shop.sqlite")
    uri = server.db_uri("shop_reload")
    first = load_main(["--db", str(path), "--uri", uri])
    assert first.documents == {"categories": 2, "customers": 3, "order items": 6, "orders": 4, "products": 3, "suppliers": 2}
    assert first.indexes == 6 + 5  # a unique one per primary key, one per FK field (the referenced ends are the PKs)
    with pytest.raises(ConfigError, match="--replace: collections already hold documents: categories, customers, .*; pass --replace True"):
        load_main(["--db", str(path), "--uri", uri])
    load_main(["--db", str(path), "--uri", uri, "--replace", "True"])
    with server.client() as client:
        db = client["shop_reload"]
        assert db["orders"].count_documents({}) == 4
        declared = db[METADATA_COLLECTION].find_one({"_id": "schema"})
        assert declared["fingerprint"] == introspect(path).fingerprint()
        assert db["customers"].find_one({"_id": 1}) == {"_id": 1, "id": 1, "name": "Alice Martin", "city": "Berlin"}
        assert "customer_id_1" in db["orders"].index_information()


def test_the_command_line_reports_a_bad_uri_as_one_line(capsys):
    from core.cli import run_main

    with pytest.raises(SystemExit) as code:
        run_main(lambda: load_main(["--db", "northwind", "--uri", "http://127.0.0.1/x"]))
    assert code.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --uri: not a MongoDB URI 'http://127.0.0.1/x' (Invalid URI scheme: URI must begin with 'mongodb://' or 'mongodb+srv://')"
    ]
