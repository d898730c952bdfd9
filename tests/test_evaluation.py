"""The A/B evaluation on a real (tiny) data set, its metric code, and the Spider gold-route rule."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from data_pipeline import JoinPath, Sample, SchemaGraph, build_dataset
from data_pipeline.pipeline import BuildConfig
from core.cli import parse
from core.errors import ConfigError
from core.schema import Column, ForeignKey, Schema, Table
from evaluation.ab import ABConfig, evaluate, execution_metrics, select_samples, table_set_acc
from generator.prompt import PromptOverrides
from evaluation.gold_paths import derive_gold_path
from router.evaluate import path_metrics


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    from tests.conftest import make_tiny_shop

    root = tmp_path_factory.mktemp("ab")
    db = make_tiny_shop(root / "shop.sqlite")
    build_dataset(BuildConfig(db=str(db), out=root / "data", samples_per_path=4, seed=0))
    return root / "data"


class OracleRouter:
    """Routes every question to its labelled path: the A/B must then score 100%."""

    def __init__(self, samples: list[Sample]):
        self.by_question = {s.question: s.path for s in samples}

    def predict_paths(self, questions):
        return [self.by_question[q] for q in questions]


class ReverseRouter:
    """Routes to the reversed gold path: same tables, wrong direction (table-set 100%, full path only 0-hop)."""

    def __init__(self, samples: list[Sample]):
        self.by_question = {s.question: s.path for s in samples}

    def predict_paths(self, questions):
        out = []
        for q in questions:
            p = self.by_question[q]
            out.append(JoinPath(p.target, tuple(reversed(p.via)), p.anchor))
        return out


def test_ab_routing_report(tiny_data: Path, tmp_path: Path) -> None:
    from data_pipeline import load_dataset

    ds = load_dataset(tiny_data)
    test = ds.split("test")
    out = tmp_path / "report"
    cfg = ABConfig(data=str(tiny_data), out=str(out), methods=(), generator="", conditions=())
    results = evaluate(cfg, extra_methods={"oracle": OracleRouter(test), "reverse": ReverseRouter(test)})
    oracle, reverse = results["routing"]["oracle"], results["routing"]["reverse"]
    assert oracle["n"] == len(test) and oracle["full_path_acc"] == 1.0 and oracle["table_set_acc"] == 1.0
    assert reverse["table_set_acc"] == 1.0
    single = sum(s.path.hops == 0 for s in test) / len(test)
    assert reverse["full_path_acc"] == pytest.approx(single)  # only single-table paths read the same reversed
    # every output exists and the failures CSV lists exactly the reversed multi-table routes
    assert {p.name for p in out.iterdir()} >= {"ab_results.json", "report.md", "routing.png", "failures.csv"}
    rows = list(csv.DictReader((out / "failures.csv").open()))
    assert Counter(r["method"] for r in rows) == {"reverse": sum(s.path.hops > 0 for s in test)}
    assert json.loads((out / "ab_results.json").read_text())["routing"]["oracle"]["full_path_acc"] == 1.0
    assert "| oracle |" in (out / "report.md").read_text()


def test_select_samples_keeps_every_path(tiny_data: Path) -> None:
    from data_pipeline import load_dataset

    test = load_dataset(tiny_data).split("test")
    n_paths = len({s.path for s in test})
    picked = select_samples(test, n_paths)
    assert len(picked) == n_paths and len({s.path for s in picked}) == n_paths
    assert select_samples(test, 0) == test


def test_table_set_and_path_metrics_by_hand() -> None:
    gold = JoinPath("a", ("b",), "c")
    samples = [Sample("1", "db", "q1", "en", gold, "SELECT 1"), Sample("2", "db", "q2", "zh", gold, "SELECT 1")]
    preds = [JoinPath("c", ("b",), "a"), JoinPath("a", (), "c")]
    assert table_set_acc(preds, samples) == 0.5
    m = path_metrics(preds, samples)
    assert m["full_path_acc"] == 0.0 and m["anchor_acc"] == 0.5 and m["target_acc"] == 0.5 and m["via_acc"] == 0.5


def test_execution_metrics_by_group() -> None:
    def row(ran, exact, f1, empty, hops, lang="en"):
        return dict(ran=ran, exact=exact, f1=f1, empty=empty, latency_ms=5.0, hops=hops, language=lang,
                    entity_kind="real")  # fmt: skip

    m = execution_metrics([row(True, True, 1.0, False, 0), row(True, False, 0.0, True, 1), row(False, False, 0.0, False, 1)])
    assert m["execution_success"] == pytest.approx(2 / 3)
    assert m["execution_accuracy"] == pytest.approx(1 / 3)
    assert m["empty_result_rate"] == pytest.approx(1 / 3)
    assert m["by_hops"]["1"] == {"n": 2, "execution_success": 0.5, "execution_accuracy": 0.0, "execution_f1": 0.0,
                                 "empty_result_rate": 0.5, "latency_ms": 5.0}  # fmt: skip


def test_bad_ab_options(tiny_data: Path) -> None:
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="--split"):
        ABConfig(data=str(tiny_data), split="dev")
    with pytest.raises(ConfigError, match="unknown method 'bm25'"):
        ABConfig(data=str(tiny_data), methods=("bm25",))


def test_a_generator_folder_without_a_model_names_the_generator_flag(tiny_data: Path, tmp_path: Path) -> None:
    from core.errors import ConfigError

    (tmp_path / "gen").mkdir()
    cfg = ABConfig(data=str(tiny_data), out=str(tmp_path / "ab"), methods=(), generator=str(tmp_path / "gen"),
                   conditions=("gold",), max_samples=2, progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--generator: .*gen has no config\.json"):
        evaluate(cfg)


SPIDER_LIKE = Schema(
    "concert",
    (
        Table("singer", (Column("singer_id"), Column("name"), Column("age"))),
        Table("concert", (Column("concert_id"), Column("year"), Column("stadium_id"))),
        Table("stadium", (Column("stadium_id"), Column("capacity"))),
        Table("singer_in_concert", (Column("singer_id"), Column("concert_id"))),
    ),
    (
        ForeignKey("singer_in_concert", "singer_id", "singer", "singer_id"),
        ForeignKey("singer_in_concert", "concert_id", "concert", "concert_id"),
        ForeignKey("concert", "stadium_id", "stadium", "stadium_id"),
    ),
)


@pytest.mark.parametrize(
    ("sql", "path", "ambiguous"),
    [
        # one table, filter and answer on it
        ('SELECT name FROM singer WHERE age > 30', "singer", ()),
        # Spider writes string literals in double quotes: not a column
        ('SELECT count(*) FROM singer WHERE name = "Joe Sharp"', "singer", ()),
        # filter on concert, answer from singer, through the link table
        ("SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
         "JOIN concert AS T3 ON T1.concert_id = T3.concert_id WHERE T3.year = 2014",
         "concert -> singer_in_concert -> singer", ()),
        # no filter over a join: anchor is the other end of the chain, and the rule says so
        ("SELECT T2.capacity FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id",
         "concert -> stadium", ("no_filter_over_join",)),
        # COUNT(*) over a join: the target is the first FROM table, flagged
        ("SELECT count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id WHERE T2.capacity > 5",
         "stadium -> concert", ("star_over_join",)),
        # set operation and nested query are flagged, the outer query still routes
        ("SELECT name FROM singer WHERE age > 40 UNION SELECT name FROM singer WHERE age < 20", "singer",
         ("set_operation",)),
        ("SELECT name FROM singer WHERE singer_id NOT IN (SELECT singer_id FROM singer_in_concert)", "singer",
         ("nested_query",)),
    ],
)
def test_spider_gold_route_rule(sql: str, path: str, ambiguous: tuple[str, ...]) -> None:
    gold = derive_gold_path(sql, SchemaGraph(SPIDER_LIKE))
    assert str(gold.path) == path
    assert gold.ambiguous == ambiguous


def test_spider_gold_route_tables_include_nested() -> None:
    gold = derive_gold_path("SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM singer_in_concert)",
                            SchemaGraph(SPIDER_LIKE))  # fmt: skip
    assert gold.tables == {"singer", "singer_in_concert"}


def test_ab_prompts_follow_a_trained_generator_unless_told_otherwise(tmp_path: Path) -> None:
    from evaluation.ab import PromptOverrides, PromptSettings, prompt_settings

    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "route2sql_generator.json").write_text(json.dumps(
        {"prompt": {"k_examples": 0, "with_reasoning": False, "schema_detail": "compact"}}), encoding="utf-8")
    # a folder that records no value_linking predates it: off; nor quote_all_identifiers: its SQL quoted every name
    assert prompt_settings(ABConfig(data="d", generator=str(gen))) == PromptSettings(0, False, "compact", False, True)
    given = PromptOverrides(k_examples=2, schema_detail="full")
    assert prompt_settings(ABConfig(data="d", generator=str(gen), prompt=given)) == PromptSettings(2, False, "full", False, True)
    # the settings after ? in --generators apply, and the command line's win over them
    assert prompt_settings(ABConfig(data="d", prompt=given), str(gen), {"k_examples": 4, "value_linking": True}) == \
        PromptSettings(2, False, "full", True, True)
    # a base model (no trained-generator meta): 2 examples, reasoning, full schema, linked values
    assert prompt_settings(ABConfig(data="d")) == PromptSettings(2, True, "full", True)
    (gen / "route2sql_generator.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^--generator: .*unreadable"):
        prompt_settings(ABConfig(data="d", generator=str(gen)))


def test_bad_prompt_options_name_their_flag() -> None:
    with pytest.raises(ConfigError, match="^--schema-detail: "):
        ABConfig(data="d", prompt=PromptOverrides(schema_detail="tiny"))
    with pytest.raises(ConfigError, match="^--k-examples: "):
        ABConfig(data="d", prompt=PromptOverrides(k_examples=-1))
    with pytest.raises(SystemExit) as exit_info:
        parse(ABConfig, ["--data", "d", "--k-examples", "-1"])
    assert exit_info.value.code == 2
