"""evaluation.value_linking: the gold SQL's literals, and recall of the prompt's linked values."""

from __future__ import annotations

from data_pipeline import introspect
from data_pipeline.datasets import load_sample
from evaluation.value_linking import gold_literals


def test_gold_literals_resolve_aliases_and_skip_patterns():
    schema = introspect(load_sample("northwind"))
    sql = ("SELECT T1.ProductName FROM Products AS T1 JOIN Suppliers AS T2 ON T1.SupplierID = T2.SupplierID "
           "WHERE T2.CompanyName = 'Pavlova, Ltd.' AND T1.UnitPrice > 10 AND T2.Country IN ('UK', 'USA') "
           "AND T1.ProductName LIKE '%lax%' AND 'Konbu' = ProductName")  # fmt: skip
    assert sorted(gold_literals(sql, schema)) == [
        ("Products", "ProductName", "Konbu"),
        ("Suppliers", "CompanyName", "Pavlova, Ltd."),
        ("Suppliers", "Country", "UK"),
        ("Suppliers", "Country", "USA"),
    ]
    assert gold_literals("SELEC nonsense FROM", schema) == []
