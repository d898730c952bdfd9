"""Spider dev routing benchmark: the scoring on a hand-made case (counted by hand), the report,
and the command on one real dev database with the retrieval baseline (skipped without Spider's files)."""

from __future__ import annotations

import json

import pytest

from core.errors import ConfigError, DownloadError
from core.graph import JoinPath, SchemaGraph
from core.schema import Column, ForeignKey, Schema, Table
from evaluation.gold_paths import SpiderGold, derive_gold_path
from evaluation.spider_bench import SpiderBenchConfig, ambiguity_counts, main, paired_counts, report_markdown, score_routes

P = JoinPath
SCHEMA = Schema(
    "concert",
    (
        Table("singer", (Column("singer_id"), Column("name"), Column("country"))),
        Table("concert", (Column("concert_id"), Column("year"), Column("stadium_id"))),
        Table("singer_in_concert", (Column("singer_id"), Column("concert_id"))),
        Table("stadium", (Column("stadium_id"), Column("location"))),
    ),
    (
        ForeignKey("singer_in_concert", "singer_id", "singer", "singer_id"),
        ForeignKey("singer_in_concert", "concert_id", "concert", "concert_id"),
        ForeignKey("concert", "stadium_id", "stadium", "stadium_id"),
    ),
)
GRAPH = SchemaGraph(SCHEMA, max_hops=3)
SQL = [
    "SELECT name FROM singer WHERE country = 'France'",
    "SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
    "JOIN concert AS T3 ON T1.concert_id = T3.concert_id WHERE T3.year = 2014",
    "SELECT T1.year FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id WHERE T2.location = 'Oslo'",
    "SELECT name FROM singer WHERE singer_id NOT IN (SELECT singer_id FROM singer_in_concert)",
]
# question 5: gold SQL that did not parse (made by hand: the rule gives no path, only the table set)
GOLDS = [derive_gold_path(s, GRAPH) for s in SQL] + [SpiderGold(frozenset({"singer"}), None, ("parse_error",))]
PREDICTED = [
    P("singer", (), "singer"),  # right
    P("singer", ("singer_in_concert",), "concert"),  # the gold path reversed: table set right, path wrong
    P("stadium", (), "concert"),  # right
    P("singer", (), "singer"),  # path right, but the nested query's table is missing from the set
    P("singer", (), "singer"),  # table set right; no gold path to match
]
DB_IDS = ["a", "a", "b", "b", "b"]


def test_hand_made_gold_routes_are_what_the_rule_says() -> None:
    assert [g.path for g in GOLDS[:4]] == [
        P("singer", (), "singer"),
        P("concert", ("singer_in_concert",), "singer"),
        P("stadium", (), "concert"),
        P("singer", (), "singer"),
    ]
    assert [g.ambiguous for g in GOLDS] == [(), (), (), ("nested_query",), ("parse_error",)]
    assert GOLDS[3].tables == {"singer", "singer_in_concert"}


def test_scores_counted_by_hand() -> None:
    m = score_routes(PREDICTED, GOLDS, DB_IDS)
    # table set right: 1, 2, 3, 5; path right: 1, 3, 4; anchor and target right: 1, 3, 4
    assert (m["n"], m["table_set_acc"], m["full_path_acc"], m["anchor_acc"], m["target_acc"]) == (5, 0.8, 0.6, 0.6, 0.6)
    hops = {k: (v["n"], v["table_set_acc"], v["full_path_acc"]) for k, v in m["by_hops"].items()}
    assert list(hops) == ["0", "1", "2", "none"]
    assert hops == {"0": (2, 0.5, 1.0), "1": (1, 1.0, 1.0), "2": (1, 1.0, 0.0), "none": (1, 1.0, 0.0)}
    amb = {k: (v["n"], v["table_set_acc"], v["full_path_acc"]) for k, v in m["by_ambiguity"].items()}
    assert amb == {"ambiguous": (2, 0.5, 0.5), "clear": (3, 1.0, pytest.approx(2 / 3))}
    db = {k: (v["n"], v["table_set_acc"], v["full_path_acc"]) for k, v in m["by_db"].items()}
    assert db == {"a": (2, 1.0, 0.5), "b": (3, pytest.approx(2 / 3), pytest.approx(2 / 3))}
    assert "by_db" not in score_routes(PREDICTED, GOLDS)


def test_a_wrong_number_of_predictions_is_refused() -> None:
    with pytest.raises(ValueError, match="4 predictions for 5 gold routes"):
        score_routes(PREDICTED[:4], GOLDS)


def test_ambiguity_counts_by_reason() -> None:
    assert ambiguity_counts(GOLDS) == {
        "questions": 5, "ambiguous": 2, "by_reason": {"nested_query": 1, "parse_error": 1},
    }  # fmt: skip


def test_report_tables() -> None:
    scores = score_routes(PREDICTED, GOLDS, DB_IDS) | {"latency_ms": 2.0}
    results = {"questions": 5, "databases": 2, "gold_beyond_max_hops": 0, "ambiguity": ambiguity_counts(GOLDS),
               "scores": {"router": scores, "retrieval": scores}}  # fmt: skip
    md = report_markdown(results)
    assert "| router | 5 | 80.0 | 60.0 | 60.0 | 60.0 | 2.0 |" in md
    assert "| hops | n | router: table set / full path | retrieval: table set / full path |" in md
    assert "| 0 | 2 | 50.0 / 100.0 | 50.0 / 100.0 |" in md
    assert "| nested_query | 1 |" in md and "2 of 5 questions have at least one reason." in md


def test_a_reference_router_is_compared_question_by_question() -> None:
    # the reference gets question 1 wrong and question 2 right (PREDICTED: 1 right, 2 reversed)
    reference = [P("concert", (), "concert"), GOLDS[1].path, *PREDICTED[2:]]
    paired = paired_counts(PREDICTED, reference, GOLDS)
    # full path: router 1, 3, 4; reference 2, 3, 4. Table set: router 1, 2, 3, 5; reference 2, 3, 5
    assert paired["full_path"] == {"both": 2, "a_only": 1, "b_only": 1, "neither": 1, "p": 1.0}
    assert paired["table_set"] == {"both": 3, "a_only": 1, "b_only": 0, "neither": 1, "p": 1.0}
    scores = score_routes(PREDICTED, GOLDS) | {"latency_ms": 2.0}
    md = report_markdown({"questions": 5, "databases": 2, "gold_beyond_max_hops": 0, "ambiguity": ambiguity_counts(GOLDS),
                          "scores": {"router": scores, "reference": scores}, "paired": paired})  # fmt: skip
    assert "| full path | 2 | 1 | 1 | 1 | 1 |" in md and "| table set | 3 | 1 | 0 | 1 | 1 |" in md
    with pytest.raises(ValueError, match="4 and 5 routes for 5 gold routes"):
        paired_counts(PREDICTED[:4], reference, GOLDS)


def test_bad_options_name_the_field(tmp_path) -> None:
    with pytest.raises(ConfigError) as exc:
        SpiderBenchConfig(data=tmp_path)
    assert exc.value.where == "router"
    with pytest.raises(ConfigError) as exc:
        SpiderBenchConfig(data=tmp_path, methods=("oracle",))
    assert exc.value.where == "methods"
    with pytest.raises(ConfigError) as exc:
        SpiderBenchConfig(data=tmp_path, methods=("retrieval", "reference"))
    assert exc.value.where == "reference"
    cfg = SpiderBenchConfig(data=tmp_path, router=tmp_path / "ppo", reference=tmp_path / "sft")
    assert cfg.methods == ("router", "retrieval", "reference")


def test_command_on_one_dev_database(tmp_path, capsys) -> None:
    from evaluation.spider_data import build_spider_dev_datasets

    try:
        build_spider_dev_datasets(tmp_path / "data", ["concert_singer"], samples_per_path=3, languages="en")
    except DownloadError as exc:
        pytest.skip(f"Spider data unavailable: {exc}")
    out = tmp_path / "bench"
    argv = ["--data", str(tmp_path / "data"), "--methods", "retrieval", "--encoder", "all-MiniLM-L6-v2",
            "--db-ids", "concert_singer", "--out", str(out), "--threads", "1"]  # fmt: skip
    results = main(argv)
    assert results["questions"] == 45 and results["databases"] == 1
    assert sum(results["gold_hops"].values()) == 45 and results["scores"]["retrieval"]["n"] == 45
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 45 and {"retrieval", "gold_path", "gold_tables", "ambiguous"} <= set(rows[0])
    assert json.loads((out / "spider_results.json").read_text())["ambiguity"] == results["ambiguity"]
    assert "# Spider dev routing benchmark" in (out / "report.md").read_text()
    assert (out / "by_hops.png").read_bytes().startswith(b"\x89PNG")
    assert "retrieval  n=45" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="'nope' is not a Spider dev database"):
        main(["--data", str(tmp_path / "data"), "--methods", "retrieval", "--db-ids", "nope", "--out", str(out)])
