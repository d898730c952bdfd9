"""Shared fixtures: a tiny shop database made in the test, whose paths can be counted by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

# customers <- orders <- order_items -> products -> categories ; products -> suppliers
TINY_SHOP_DDL = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE suppliers (id INTEGER PRIMARY KEY, company TEXT NOT NULL, country TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL,
    category_id INTEGER REFERENCES categories(id), supplier_id INTEGER REFERENCES suppliers(id));
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), order_date TEXT);
CREATE TABLE "order items" (id INTEGER PRIMARY KEY, order_id INTEGER REFERENCES orders(id),
    product_id INTEGER REFERENCES products(id), quantity INTEGER);
"""

TINY_SHOP_ROWS = """
INSERT INTO customers VALUES (1,'Alice Martin','Berlin'),(2,'Bob Chen','Paris'),(3,'Carla Diaz','Madrid');
INSERT INTO categories VALUES (1,'Beverages'),(2,'Seafood');
INSERT INTO suppliers VALUES (1,'Nordic Fish AS','Norway'),(2,'Tokyo Traders','Japan');
INSERT INTO products VALUES (1,'Green Tea',4.5,1,2),(2,'Smoked Salmon',18.0,2,1),(3,'Black Coffee',6.0,1,2);
INSERT INTO orders VALUES (1,1,'2024-01-03'),(2,1,'2024-02-10'),(3,2,'2024-02-11'),(4,3,'2024-03-01');
INSERT INTO "order items" VALUES (1,1,1,2),(2,1,2,1),(3,2,3,5),(4,3,2,2),(5,4,1,1),(6,4,3,3);
"""


class PlantedPickle:
    """A pickle that creates ``path`` when unpickled: checkpoint loaders must refuse it without running it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def make_tiny_shop(path: Path) -> Path:
    """Create the tiny shop database at ``path`` (6 tables, 5 foreign keys, a table name with a space)."""
    conn = sqlite3.connect(path)
    conn.executescript(TINY_SHOP_DDL + TINY_SHOP_ROWS)
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def tiny_db(tmp_path: Path) -> Path:
    """A fresh copy of the tiny shop database."""
    return make_tiny_shop(tmp_path / "shop.sqlite")


def dense_schema(n: int = 9):
    """A schema of ``n`` tables with a foreign key between every pair (~986,000 simple paths at
    n = 9 without a join limit) plus ``a_alone``, a table joined to nothing that sorts first."""
    from core.schema import Column, ForeignKey, Schema, Table

    tables = (Table("a_alone", (Column("id", "INTEGER", primary_key=True),)),) + tuple(
        Table(f"t{i}", (Column("id", "INTEGER", primary_key=True), *(Column(f"r{j}", "INTEGER") for j in range(n) if j != i)))
        for i in range(n)
    )
    fks = tuple(ForeignKey(f"t{i}", f"r{j}", f"t{j}", "id") for i in range(n) for j in range(i + 1, n))
    return Schema("dense", tables, fks)
