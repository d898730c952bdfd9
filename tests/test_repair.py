"""generator.repair: column references fixed from the schema and the question's value links."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.schema import introspect
from core.values import ValueMatch
from generator.repair import repair_sql

JOIN = 'FROM orders JOIN "order items" ON "order items".order_id = orders.id'
BEVERAGES = ValueMatch("categories", "name", "Beverages", 1.0, 0, 9, True)
ALICE = ValueMatch("customers", "name", "Alice Martin", 1.0, 0, 12, True)


@pytest.fixture
def shop(tiny_db: Path):
    return introspect(tiny_db), tiny_db


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute(sql).fetchall())


def test_a_column_under_the_wrong_joined_table_is_requalified(shop) -> None:
    schema, db = shop
    sql = f"SELECT SUM(orders.quantity) {JOIN} WHERE orders.customer_id = 1"
    with pytest.raises(sqlite3.OperationalError):
        rows(db, sql)
    r = repair_sql(sql, schema)
    assert r.sql == f'SELECT SUM("order items".quantity) {JOIN} WHERE orders.customer_id = 1'
    assert [(x.before, x.after, x.rule) for x in r.repairs] == [("orders.quantity", '"order items".quantity', "requalified")]
    assert rows(db, r.sql) == [(8,)]  # order items 1 and 2 of Alice's orders 1 and 2: 2 + 1 + 5


def test_aliases_are_kept_when_requalifying(shop) -> None:
    schema, db = shop
    sql = 'SELECT T1.quantity FROM orders AS T1 JOIN "order items" AS T2 ON T2.order_id = T1.id WHERE T1.id = 3'
    r = repair_sql(sql, schema)
    assert r.sql == 'SELECT T2.quantity FROM orders AS T1 JOIN "order items" AS T2 ON T2.order_id = T1.id WHERE T1.id = 3'
    assert rows(db, r.sql) == [(2,)]


def test_a_misspelt_column_takes_the_closest_name_of_its_table(shop) -> None:
    schema, db = shop
    r = repair_sql("SELECT suppliers.compny FROM suppliers WHERE suppliers.countri = 'Japan'", schema)
    assert r.sql == "SELECT suppliers.company FROM suppliers WHERE suppliers.country = 'Japan'"
    assert [x.rule for x in r.repairs] == ["closest name", "closest name"]
    assert rows(db, r.sql) == [("Tokyo Traders",)]


def test_a_name_far_from_every_column_is_left(shop) -> None:
    schema, _ = shop
    sql = "SELECT suppliers.turnover FROM suppliers"
    assert repair_sql(sql, schema).sql == sql
    assert repair_sql(sql, schema).repairs == ()


def test_a_column_two_joined_tables_hold_is_ambiguous_and_left(shop) -> None:
    schema, _ = shop
    # both products and categories have "name"; orders has no "name": which one is meant is unknown
    sql = ("SELECT orders.name FROM orders JOIN \"order items\" ON \"order items\".order_id = orders.id "
           "JOIN products ON \"order items\".product_id = products.id JOIN categories ON products.category_id = categories.id")
    assert repair_sql(sql, schema).sql == sql


def test_a_linked_value_filtered_on_the_wrong_column_moves_to_its_column(shop) -> None:
    schema, db = shop
    sql = ("SELECT products.name FROM categories JOIN products ON products.category_id = categories.id "
           "WHERE categories.id = 'Beverages'")
    assert rows(db, sql) == []
    r = repair_sql(sql, schema, [BEVERAGES])
    assert r.repairs[0].rule == "linked value"
    assert "WHERE categories.name = 'Beverages'" in r.sql
    assert rows(db, r.sql) == [("Black Coffee",), ("Green Tea",)]
    # the value matched case-insensitively, as SQLite's = would not: the literal itself is not rewritten
    assert "'beverages'" in repair_sql(sql.replace("'Beverages'", "'beverages'"), schema, [BEVERAGES]).sql


def test_a_value_on_its_own_column_or_through_a_foreign_key_is_left(shop) -> None:
    schema, _ = shop
    right = "SELECT categories.id FROM categories WHERE categories.name = 'Beverages'"
    assert repair_sql(right, schema, [BEVERAGES]).sql == right
    # orders.customer_id references customers.id; a value of customers.id compared there is in place
    cust_id = ValueMatch("customers", "id", "1", 1.0, 0, 1, True)
    by_fk = "SELECT orders.id FROM orders JOIN customers ON orders.customer_id = customers.id WHERE orders.customer_id = '1'"
    assert repair_sql(by_fk, schema, [cust_id]).sql == by_fk
    # a value whose table is not in the query: nothing to move it to
    off_route = "SELECT orders.id FROM orders WHERE orders.order_date = 'Alice Martin'"
    assert repair_sql(off_route, schema, [ALICE]).sql == off_route


def test_valid_unreadable_and_foreign_queries_come_back_unchanged(shop) -> None:
    schema, _ = shop
    valid = f"select   \"order items\".quantity {JOIN}   -- keep my spacing"
    assert repair_sql(valid, schema).sql == valid
    assert repair_sql("SELECT FROM WHERE (((", schema).sql == "SELECT FROM WHERE ((("
    other_db = "SELECT invoices.total FROM invoices"
    assert repair_sql(other_db, schema).sql == other_db
    assert repair_sql(None, schema).sql == "" and repair_sql("", schema).repairs == ()


@pytest.fixture
def staff(tmp_path: Path):
    db = tmp_path / "staff.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE Employees (EmployeeID INTEGER PRIMARY KEY, LastName TEXT, FirstName TEXT, City TEXT);"
            "INSERT INTO Employees VALUES (1, 'Davolio', 'Nancy', 'Seattle'), (2, 'King', 'Robert', 'London'),"
            " (3, 'Buchanan', 'Steven', 'London');"
        )
    with pytest.warns(UserWarning, match="no foreign keys"):
        return introspect(db), db


@pytest.mark.parametrize(
    ("question", "sql", "expected"),
    [
        # people are named by the whole name, first name first, DISTINCT and aliases kept
        ("住在 London 的员工有哪几位？", "SELECT DISTINCT Employees.FirstName FROM Employees WHERE Employees.City = 'London'",
         "SELECT DISTINCT Employees.FirstName, Employees.LastName FROM Employees WHERE Employees.City = 'London'"),
        ("Who lives in London?", "SELECT e.LastName FROM Employees AS e WHERE e.City = 'London'",
         "SELECT e.FirstName, e.LastName FROM Employees AS e WHERE e.City = 'London'"),
        # the question asks for the half: kept
        ("What is King's first name?", "SELECT FirstName FROM Employees WHERE LastName = 'King'", None),
        ("What is Nancy's surname?", "SELECT LastName FROM Employees WHERE FirstName = 'Nancy'", None),
        # a subquery's columns are its own SELECT list's: LastName is not there
        ("Who lives in London?", "SELECT FirstName FROM (SELECT FirstName FROM Employees WHERE City = 'London')", None),
        # more than one column, a group, an aggregate, another column: not a lone half
        ("Who?", "SELECT FirstName, City FROM Employees", None),
        ("Who?", "SELECT LastName FROM Employees GROUP BY LastName", None),
        ("How many?", "SELECT COUNT(FirstName) FROM Employees", None),
        ("Where?", "SELECT City FROM Employees WHERE LastName = 'King'", None),
    ],
)  # fmt: skip
def test_a_lone_half_of_a_name_becomes_the_whole_name(staff, question: str, sql: str, expected: str | None) -> None:
    schema, db = staff
    r = repair_sql(sql, schema, (), question)
    assert r.sql == (expected or sql)
    assert [x.rule for x in r.repairs] == (["whole name"] if expected else [])
    if expected:
        assert rows(db, r.sql)[0] in {("Robert", "King"), ("Steven", "Buchanan")}


def test_the_whole_name_rule_needs_no_question(staff) -> None:
    schema, db = staff
    r = repair_sql("SELECT FirstName FROM Employees WHERE City = 'Seattle'", schema, (), None)
    assert rows(db, r.sql) == [("Nancy", "Davolio")]


@pytest.fixture
def trade(tmp_path: Path):
    db = tmp_path / "trade.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE Customers (CustomerID TEXT PRIMARY KEY, CompanyName TEXT, ContactName TEXT, ContactTitle TEXT);"
            "CREATE TABLE Orders (OrderID INTEGER PRIMARY KEY, CustomerID TEXT REFERENCES Customers, Freight REAL);"
            "CREATE TABLE Products (ProductID INTEGER PRIMARY KEY, ProductName TEXT, UnitsInStock INTEGER);"
            'CREATE TABLE "Order Details" (OrderID INTEGER REFERENCES Orders, ProductID INTEGER REFERENCES Products,'
            " Quantity INTEGER, PRIMARY KEY (OrderID, ProductID));"
            "INSERT INTO Customers VALUES ('ALFKI', 'Alfreds', 'Maria Anders', 'Sales Representative'),"
            " ('BONAP', 'Bon app', 'Laurence Lebihan', 'Owner');"
            "INSERT INTO Orders VALUES (1, 'ALFKI', 80), (2, 'BONAP', 95.5), (3, 'ALFKI', 12);"
            "INSERT INTO Products VALUES (1, 'Chai', 39), (2, 'Tofu', 35);"
            'INSERT INTO "Order Details" VALUES (1, 1, 10), (2, 1, 25), (3, 2, 4);'
        )
    return introspect(db), db


@pytest.mark.parametrize(
    ("question", "sql", "expected"),
    [
        ("Which orders had freight above 80?", "SELECT OrderID FROM Orders WHERE Freight >= 80",
         "SELECT OrderID FROM Orders WHERE Freight > 80"),
        ("运费超过 80 的订单", "SELECT OrderID FROM Orders WHERE Freight >= 80", "SELECT OrderID FROM Orders WHERE Freight > 80"),
        ("orders with freight of at least $80", "SELECT OrderID FROM Orders WHERE Freight > 80",
         "SELECT OrderID FROM Orders WHERE Freight >= 80"),
        ("orders with freight 80 or more", "SELECT OrderID FROM Orders AS o WHERE o.Freight > 80",
         "SELECT OrderID FROM Orders AS o WHERE o.Freight >= 80"),
        ("freight under 80", "SELECT OrderID FROM Orders WHERE Freight <= 80", "SELECT OrderID FROM Orders WHERE Freight < 80"),
        # already right; the other direction is never touched; 以上 is read both ways; a number the question lacks
        ("freight above 80", "SELECT OrderID FROM Orders WHERE Freight > 80", None),
        ("freight above 80", "SELECT OrderID FROM Orders WHERE Freight <= 80", None),
        ("运费 80 以上的订单", "SELECT OrderID FROM Orders WHERE Freight >= 80", None),
        ("expensive freight", "SELECT OrderID FROM Orders WHERE Freight >= 80", None),
        # the same number said both ways: left
        ("freight above 80 and orders of at least 80 units", "SELECT OrderID FROM Orders WHERE Freight >= 80", None),
    ],
)  # fmt: skip
def test_a_bound_takes_the_strictness_the_question_says(trade, question: str, sql: str, expected: str | None) -> None:
    schema, db = trade
    r = repair_sql(sql, schema, (), question)
    assert r.sql == (expected or sql)
    assert [x.rule for x in r.repairs] == (["strictness"] if expected else [])


def test_strictness_changes_the_rows(trade) -> None:
    schema, db = trade
    r = repair_sql("SELECT OrderID FROM Orders WHERE Freight >= 80", schema, (), "Orders with freight over 80?")
    assert rows(db, r.sql) == [(2,)]


@pytest.mark.parametrize(
    ("question", "sql", "expected"),
    [
        ("who ordered Chai?", "SELECT DISTINCT Customers.ContactTitle FROM Customers JOIN Orders ON Orders.CustomerID ="
         " Customers.CustomerID WHERE Orders.OrderID = 1", "SELECT DISTINCT Customers.CompanyName FROM Customers JOIN Orders"
         " ON Orders.CustomerID = Customers.CustomerID WHERE Orders.OrderID = 1"),
        ("谁下了 2 号订单？", "SELECT c.CustomerID FROM Customers AS c JOIN Orders ON Orders.CustomerID = c.CustomerID"
         " WHERE Orders.OrderID = 2", "SELECT c.CompanyName FROM Customers AS c JOIN Orders ON Orders.CustomerID ="
         " c.CustomerID WHERE Orders.OrderID = 2"),
        # the name the question's words point to
        ("Who's the contact at Alfreds?", "SELECT ContactTitle FROM Customers WHERE CompanyName = 'Alfreds'",
         "SELECT ContactName FROM Customers WHERE CompanyName = 'Alfreds'"),
        # a name already, no "who", a table without a name column, an aggregate: left
        ("Who ordered?", "SELECT ContactName FROM Customers", None),
        ("What is the contact's title at Alfreds?", "SELECT ContactTitle FROM Customers WHERE CompanyName = 'Alfreds'", None),
        ("Who paid the most freight?", "SELECT Freight FROM Orders ORDER BY Freight DESC LIMIT 1", None),
        ("Who?", "SELECT COUNT(*) FROM Customers", None),
        ("Whoever", "SELECT ContactTitle FROM Customers", None),
    ],
)  # fmt: skip
def test_who_is_answered_by_a_name(trade, question: str, sql: str, expected: str | None) -> None:
    schema, db = trade
    r = repair_sql(sql, schema, (), question)
    assert r.sql == (expected or sql)
    assert [x.rule for x in r.repairs] == (["who"] if expected else [])


def test_who_gives_a_split_name_whole(staff) -> None:
    schema, db = staff
    r = repair_sql("SELECT City FROM Employees WHERE EmployeeID = 2", schema, (), "谁的编号是 2？")
    assert r.sql == "SELECT FirstName, LastName FROM Employees WHERE EmployeeID = 2"
    assert rows(db, r.sql) == [("Robert", "King")]


JOINED = 'FROM Products JOIN "Order Details" ON "Order Details".ProductID = Products.ProductID WHERE Products.ProductName = \'Chai\''


@pytest.mark.parametrize(
    ("question", "sql", "expected"),
    [
        ("How many units of Chai were sold?", f'SELECT COUNT(DISTINCT "Order Details".OrderID) {JOINED}',
         f'SELECT SUM("Order Details".Quantity) {JOINED}'),
        ("Chai 一共卖出去多少件？", f"SELECT COUNT(*) {JOINED}", f'SELECT SUM("Order Details".Quantity) {JOINED}'),
        ("How many units of Chai were sold?", "SELECT COUNT(*) FROM Products AS p JOIN \"Order Details\" AS d ON"
         " d.ProductID = p.ProductID WHERE p.ProductName = 'Chai'", "SELECT SUM(d.Quantity) FROM Products AS p JOIN"
         " \"Order Details\" AS d ON d.ProductID = p.ProductID WHERE p.ProductName = 'Chai'"),
        # orders asked for, no quantity column joined, units a column already used, a sum already: left
        ("How many orders included Chai?", f"SELECT COUNT(*) {JOINED}", None),
        ("How many units of Chai are there?", "SELECT COUNT(*) FROM Products WHERE ProductName = 'Chai'", None),
        ("How many products with Chai orders have over 30 units in stock?",
         f"SELECT COUNT(*) {JOINED} AND Products.UnitsInStock > 30", None),
        ("How many units of Chai were sold?", f'SELECT SUM("Order Details".Quantity) {JOINED}', None),
    ],
)  # fmt: skip
def test_units_are_summed_not_counted(trade, question: str, sql: str, expected: str | None) -> None:
    schema, db = trade
    r = repair_sql(sql, schema, (), question)
    assert r.sql == (expected or sql)
    assert [x.rule for x in r.repairs] == (["units"] if expected else [])
    if expected:
        assert rows(db, r.sql) == [(35,)]


ROUTE = ("FROM Customers JOIN Orders ON Orders.CustomerID = Customers.CustomerID JOIN \"Order Details\" ON"
         " \"Order Details\".OrderID = Orders.OrderID JOIN Products ON \"Order Details\".ProductID = Products.ProductID"
         " WHERE Customers.CompanyName = 'Alfreds'")


@pytest.mark.parametrize(
    ("sql", "target", "expected"),
    [
        # a column of a table on the way: the target's name column, aliases kept
        (f"SELECT DISTINCT Orders.OrderID {ROUTE}", "Products", f"SELECT DISTINCT Products.ProductName {ROUTE}"),
        ("SELECT o.Freight FROM Customers AS c JOIN Orders AS o ON o.CustomerID = c.CustomerID WHERE c.CustomerID = 'ALFKI'",
         "Customers", "SELECT c.CompanyName FROM Customers AS c JOIN Orders AS o ON o.CustomerID = c.CustomerID WHERE"
         " c.CustomerID = 'ALFKI'"),
        # the target's own column of that name
        (f'SELECT "Order Details".ProductID {ROUTE}', "Products", f"SELECT Products.ProductID {ROUTE}"),
        # already on the target, no target, an aggregate, two columns, the target not joined, one table: left
        (f"SELECT Products.ProductName {ROUTE}", "Products", None),
        (f"SELECT Orders.OrderID {ROUTE}", None, None),
        (f"SELECT COUNT(Orders.OrderID) {ROUTE}", "Products", None),
        (f"SELECT Orders.OrderID, Orders.Freight {ROUTE}", "Products", None),
        ("SELECT Orders.OrderID FROM Customers JOIN Orders ON Orders.CustomerID = Customers.CustomerID", "Products", None),
        ("SELECT Freight FROM Orders", "Customers", None),
    ],
)  # fmt: skip
def test_the_answer_comes_from_the_route_target(trade, sql: str, target: str | None, expected: str | None) -> None:
    schema, db = trade
    r = repair_sql(sql, schema, (), "Which ones?", target)
    assert r.sql == (expected or sql)
    assert [x.rule for x in r.repairs] == (["route target"] if expected else [])
    if expected == f"SELECT DISTINCT Products.ProductName {ROUTE}":
        assert rows(db, r.sql) == [("Chai",), ("Tofu",)]


_COLUMNS = ("Customers.CompanyName", "Customers.ContactTitle", "c.CustomerID", "Orders.Freight", "o.OrderID",
            '"Order Details".Quantity', "Products.UnitsInStock", "Products.Nope", "x.y", "Freight")  # fmt: skip
_OUTPUTS = st.sampled_from(_COLUMNS) | st.sampled_from(_COLUMNS).map(lambda c: f"COUNT({c})") | st.just("COUNT(*)")
_FROMS = st.sampled_from([
    "Customers AS c JOIN Orders AS o ON o.CustomerID = c.CustomerID",
    'Orders JOIN "Order Details" ON "Order Details".OrderID = Orders.OrderID JOIN Products ON Products.ProductID = "Order Details".ProductID',
    "Customers", "(SELECT * FROM Orders) AS s", "Nowhere", "Customers, Orders",
])  # fmt: skip
_WHERES = st.sampled_from(["", " WHERE Orders.Freight >= 80", " WHERE o.Freight < 12.5", " WHERE 80 <= Freight",
                           " WHERE Products.UnitsInStock > -3", " WHERE c.CompanyName = 'Alfreds'"])  # fmt: skip
_WORDS = st.lists(st.sampled_from(["who", "whom", "谁", "units", "多少件", "above", "at least", "or more", "under",
                                   "超过", "不超过", "80", "12.5", "$80", "-3", "contact", "name", "how many", "以上"]),
                  max_size=8).map(" ".join)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # read only
@given(out=st.lists(_OUTPUTS, min_size=1, max_size=2), from_=_FROMS, where=_WHERES, question=_WORDS,
       target=st.sampled_from([None, "Customers", "Products", "Orders", "Missing"]), distinct=st.booleans())
def test_repair_never_raises_and_keeps_what_it_does_not_change(trade, out, from_, where, question, target, distinct) -> None:
    schema, db = trade
    sql = f"SELECT {'DISTINCT ' if distinct else ''}{', '.join(out)} FROM {from_}{where}"
    r = repair_sql(sql, schema, (), question, target)
    if not r.repairs:
        assert r.sql == sql
    else:
        import sqlglot

        assert sqlglot.parse_one(r.sql, read="sqlite") is not None
        assert all(x.before != x.after for x in r.repairs)


def test_who_keeps_a_column_that_may_name_people(tmp_path: Path) -> None:
    """Chinook's "Who wrote Stairway to Heaven?" is answered by Track.Composer, not Track.Name."""
    db = tmp_path / "music.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE Track (TrackId INTEGER PRIMARY KEY, Name TEXT, Composer TEXT, Email TEXT);"
                           "INSERT INTO Track VALUES (1, 'Stairway to Heaven', 'Page, Plant', 'x@y.z');")  # fmt: skip
    with pytest.warns(UserWarning, match="no foreign keys"):
        schema = introspect(db)
    sql = "SELECT Composer FROM Track WHERE Name = 'Stairway to Heaven'"
    assert repair_sql(sql, schema, (), "Who wrote Stairway to Heaven?").sql == sql
    r = repair_sql("SELECT Email FROM Track WHERE TrackId = 1", schema, (), "Who is track 1?")
    assert r.sql == "SELECT Name FROM Track WHERE TrackId = 1"
