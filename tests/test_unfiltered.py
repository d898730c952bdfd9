"""Questions without a filter value (``BuildConfig.unfiltered_share``), labelled by the gold-path rule.

Share 0 builds no such question; an unfiltered question has no entity and a WHERE-less gold SQL
that returns rows; its gold path is what :func:`evaluation.gold_paths.derive_gold_path` reads
back from that SQL.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import sqlglot

from data_pipeline import BuildConfig, JoinPath, build_dataset
from data_pipeline.backends.sqlite import connect_readonly, execute_readonly
from core.errors import ConfigError
from data_pipeline.gold import UNFILTERED_FAMILIES, Plan, gold_sql
from core.graph import SchemaGraph
from core.schema import Column, ForeignKey, Schema, Table
from data_pipeline.templates import (
    TEMPLATES,
    UNFILTERED_FAMILIES_BY_SCOPE,
    UNFILTERED_TEMPLATES,
    heldout_template_ids,
    templates_for,
)
from evaluation.gold_paths import derive_gold_path
from tests.conftest import make_tiny_shop

SHARE = 0.5
PER_PATH = 4  # 3 seeds per path; round(0.5 * 3) = 2 of them without a filter value


@pytest.fixture(scope="module")
def unfiltered_built(tmp_path_factory):
    root = tmp_path_factory.mktemp("unfiltered")
    db = make_tiny_shop(root / "shop.sqlite")
    ds, summary = build_dataset(BuildConfig(db=str(db), out=root / "out", samples_per_path=PER_PATH, unfiltered_share=SHARE,
                                                        hop_balance=0.0))
    return db, ds, summary


def test_share_zero_has_no_unfiltered_question_and_the_default_has_some(tmp_path, tiny_db):
    _, default = build_dataset(BuildConfig(db=str(tiny_db), out=tmp_path / "default", samples_per_path=PER_PATH))
    ds, summary = build_dataset(
        BuildConfig(db=str(tiny_db), out=tmp_path / "zero", samples_per_path=PER_PATH, unfiltered_share=0.0)
    )
    assert BuildConfig(out=tmp_path, db="northwind").unfiltered_share == 0.2
    assert default["entity_kinds"].get("none", 0) > 0  # the default asks some questions without a value
    assert "none" not in summary["entity_kinds"]
    assert all(s.entities and " WHERE " in s.sql for s in ds.samples)
    assert not any(s.template_id.split(".")[0] in UNFILTERED_FAMILIES for s in ds.samples)


def test_unfiltered_questions_have_no_entity_no_where_and_rows(unfiltered_built):
    db, ds, _ = unfiltered_built
    none = [s for s in ds.samples if s.entity_kind == "none"]
    assert none and {s.language for s in none} == {"en", "zh"}
    conn = connect_readonly(db)
    try:
        for s in none:
            assert s.entities == ()
            assert "{E1}" not in s.question and "{E2}" not in s.question
            assert s.template_id.split(".")[0] in UNFILTERED_FAMILIES
            assert sqlglot.parse_one(s.sql, read="sqlite").args.get("where") is None, s.sql
            rows = execute_readonly(conn, s.sql)
            assert rows.ok and rows.rows and len(rows.rows) == s.n_rows, s.sql
            if s.template_id.startswith(("all_count", "all_agg")):
                assert rows.rows[0][0] not in (None, 0)
    finally:
        conn.close()
    # the filtered questions keep their entity and WHERE
    assert all(s.entities and " WHERE " in s.sql for s in ds.samples if s.entity_kind != "none")


def test_unfiltered_gold_path_is_what_derive_gold_path_reads_back(unfiltered_built):
    _, ds, _ = unfiltered_built
    none = [s for s in ds.samples if s.entity_kind == "none"]
    families = Counter((s.template_id.split(".")[0], s.path.hops > 0) for s in none)
    assert {f for f, _ in families} >= {"all_count", "all_list", "top"}  # every family exercised
    assert any(join for _, join in families) and any(not join for _, join in families)
    for s in none:
        gold = derive_gold_path(s.sql, ds.graph)
        assert gold.path == s.path, (s.question, s.sql, str(gold.path))
        if s.path.hops == 0:
            assert s.path.anchor == s.path.target and gold.ambiguous == ()
        else:
            assert "no_filter_over_join" in gold.ambiguous and "star_over_join" not in gold.ambiguous


def test_share_of_each_paths_questions(unfiltered_built):
    _, ds, summary = unfiltered_built
    by_path: dict[JoinPath, Counter] = defaultdict(Counter)
    for s in ds.samples:
        by_path[s.path][s.entity_kind == "none"] += 1
    assert len(by_path) == summary["paths"]["covered"]
    # 2 of the 3 seeds of a path lack a filter value; the 4th sample paraphrases the first (filtered) seed
    for path, c in by_path.items():
        assert c[True] == 2 and c[False] == 2, (str(path), c)
    assert summary["entity_kinds"]["none"] == 2 * len(by_path)
    # the fuzzy share is taken over the questions that have an entity
    assert summary["entity_kinds"].get("fuzzy", 0) <= summary["entity_kinds"]["real"]


def test_gold_sql_of_each_unfiltered_family():
    s = Schema(
        "s",
        (Table("a", (Column("id", primary_key=True), Column("name"), Column("n"))),
         Table("b", (Column("id", primary_key=True), Column("a_id"), Column("title")))),
        (ForeignKey("b", "a_id", "a", "id"),),
    )  # fmt: skip
    g = SchemaGraph(s)
    join, one = JoinPath("a", (), "b"), JoinPath("a", (), "a")
    frm = "FROM a JOIN b ON b.a_id = a.id"
    assert gold_sql(g, join, Plan("all_count", "join", "name", agg="COUNT", count_column="id")) == (
        f"SELECT COUNT(DISTINCT b.id) {frm}"
    )
    assert gold_sql(g, join, Plan("all_list", "join", "name", ask_column="title")) == f"SELECT DISTINCT b.title {frm}"
    assert gold_sql(g, join, Plan("all_pairs", "join", "name", ask_column="title")) == (
        f"SELECT DISTINCT b.title, a.name {frm}"
    )
    assert gold_sql(g, one, Plan("all_count", "self", "name", agg="COUNT")) == "SELECT COUNT(*) FROM a"
    assert gold_sql(g, one, Plan("all_agg", "self", "name", num_column="n", agg="AVG")) == "SELECT AVG(a.n) FROM a"
    assert not Plan("all_list", "self", "name").filtered and Plan("list", "join", "name").filtered
    # the pair's target column comes first: the rule reads the target from it, the anchor is the join's other end
    assert derive_gold_path(gold_sql(g, join, Plan("all_pairs", "join", "name", ask_column="title")), g).path == join


def test_unfiltered_templates():
    groups = defaultdict(list)
    for t in UNFILTERED_TEMPLATES:
        groups[(t.family, t.scope, t.language)].append(t)
    want = {(f, scope, lang) for scope, fams in UNFILTERED_FAMILIES_BY_SCOPE.items() for f in fams for lang in ("en", "zh")}
    want |= {("all_pairs", scope, lang) for scope in ("join", "self") for lang in ("en", "zh")}  # kept, not generated
    assert set(groups) == want
    for key, ts in groups.items():
        assert len(ts) == 4 and sum(t.heldout for t in ts) == 1, key
        assert not any("{E1}" in t.text or "{E2}" in t.text for t in ts), key
        assert templates_for(*key) == tuple(ts)
    assert {t.id for t in UNFILTERED_TEMPLATES if t.heldout} <= heldout_template_ids()
    assert not {t.id for t in TEMPLATES} & {t.id for t in UNFILTERED_TEMPLATES}


def test_share_out_of_range_is_a_config_error_and_mongodb_builds_none(tmp_path, tiny_db):
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="--unfiltered-share"):
            BuildConfig(db=str(tiny_db), out=tmp_path / "o", unfiltered_share=bad)
    # MongoDB builds skip them (their gold queries are pipelines): the option is accepted, and ignored there
    assert BuildConfig(backend="mongodb", uri="mongodb://127.0.0.1:27017/x", out=tmp_path / "o", unfiltered_share=0.3)
