"""The generator reward: fixture cases (tests/fixtures/sql_rewards.sql), hostile input, config, caching."""

from __future__ import annotations

import logging
import threading

import pytest
from helpers import load_sql_cases, make_case_dbs, sha256_file

from data_pipeline.backends.sqlite import SQLiteExecutor
from core.errors import ConfigError, DataError, SchemaError
from rewards.sql import COMPONENTS, SQLRewardConfig, sql_reward_components, sql_rewards, weighted_total
from rewards.sql_execution import ExecutionScorer, execution_reward
from rewards.sql_format import format_reward
from rewards.sql_ngram import ngram_reward
from rewards.sql_schema import schema_match_reward
from rewards.sql_syntax import syntax_reward

CASES = load_sql_cases()
BAD = [c for c in CASES if "bad" in c.tags]
CONFIG = SQLRewardConfig(timeout_s=0.5, max_rows=1000)
BERLIN = "SELECT name FROM customers WHERE city = 'Berlin'"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    return make_case_dbs(tmp_path_factory.mktemp("reward-dbs"))


@pytest.fixture(scope="module")
def scorer():
    s = CONFIG.make_scorer()
    yield s
    s.executor.close()


def test_fixture_has_every_hostile_kind():
    names = {c.name for c in BAD}
    for kind in ("cartesian_product_count", "drop_table", "attach", "pragma_writable_schema", "several_statements",
                 "non_sql_text_in_answer", "empty_answer"):  # fmt: skip
        assert kind in names


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fixture_case(case, dbs, scorer, caplog):
    db = dbs[case.db]
    before = sha256_file(db)
    with caplog.at_level(logging.DEBUG, logger="rewards.sql_execution"):
        [got] = sql_reward_components([case.completion], [case.gold], db, CONFIG, scorer)
    for key, want in case.expect.items():
        if want is None:
            assert got[key] is None, f"{case.name}: {key}"
        else:
            assert got[key] == pytest.approx(want, abs=1e-6), f"{case.name} (line {case.line}): {key}"
    assert case.reason in got["reason"], f"{case.name}: reason {got['reason']!r}"
    assert got["total"] == pytest.approx(weighted_total(got, CONFIG))
    if got["execution"] == 0.0:
        # every zero execution score is explained in the log
        assert any(got["reason"] in r.getMessage() for r in caplog.records), caplog.text
    assert sha256_file(db) == before


def test_hostile_batch_leaves_databases_byte_identical(dbs, scorer):
    before = {name: sha256_file(path) for name, path in dbs.items()}
    listing = {name: sorted(p.name for p in path.parent.iterdir()) for name, path in dbs.items()}
    for db_name in ("shop", "big_shop"):
        cases = [c for c in BAD if c.db == db_name]
        got = sql_reward_components([c.completion for c in cases], [c.gold for c in cases], dbs[db_name], CONFIG,
                                    scorer)  # fmt: skip
        assert [g["execution"] for g in got] == [0.0] * len(cases)
        assert all(g["reason"] != "match" for g in got)
    assert {name: sha256_file(path) for name, path in dbs.items()} == before
    # no journal, WAL or attached file appeared next to the databases
    assert {name: sorted(p.name for p in path.parent.iterdir()) for name, path in dbs.items()} == listing


def test_runaway_cartesian_product_stops_at_the_timeout(dbs):
    threads = threading.active_count()
    scorer = ExecutionScorer(timeout_s=0.5)
    score = scorer.score(dbs["big_shop"], 'SELECT COUNT(*) FROM customers, orders, "order items"',
                         "SELECT COUNT(*) FROM orders")  # fmt: skip
    assert score.f1 == 0.0 and score.pred is not None and score.pred.timed_out
    assert score.pred.elapsed_s < 0.5 + 0.2
    assert threading.active_count() == threads  # no helper thread left running the query
    scorer.executor.close()


def test_seed_000_worked_example_total():
    # SPEC section 6: total = 3.0x0 + 0.1x0 + 0.2x1 + 0.3x0.2 + 0.2x0.15 = 0.29
    seed = {"execution": 0.0, "format": 0.0, "syntax": 1.0, "schema": 0.2, "ngram": 0.15}
    assert weighted_total(seed) == pytest.approx(0.29, abs=1e-12)
    assert weighted_total(seed, SQLRewardConfig()) == pytest.approx(0.29, abs=1e-12)
    # a different weighting changes it: the weights are really read from the config
    assert weighted_total(seed, SQLRewardConfig(syntax_weight=0.0)) == pytest.approx(0.09, abs=1e-12)
    assert weighted_total({"execution": None, "syntax": 1.0}) == pytest.approx(0.2)


def test_max_total_and_weights():
    cfg = SQLRewardConfig()
    assert cfg.weights == {"execution": 3.0, "format": 0.1, "syntax": 0.2, "schema": 0.3, "ngram": 0.2}
    assert cfg.max_total == pytest.approx(3.8)
    assert tuple(cfg.weights) == COMPONENTS


@pytest.mark.parametrize(
    ("kwargs", "where", "message"),
    [
        ({"execution_weight": 0.8}, "execution_weight", "execution_weight (0.8) must exceed the proxy weights together (0.8"),
        ({"execution_weight": 1.0, "schema_weight": 1.0}, "execution_weight", "(1.5 = format 0.1 + syntax 0.2 + schema 1.0"),
        ({"format_weight": -0.1}, "format_weight", "must be >= 0, got -0.1"),
        ({"timeout_s": 0}, "timeout_s", "must be positive"),
        ({"max_rows": 0}, "max_rows", "must be >= 1"),
        ({"ngram_n": 0}, "ngram_n", "must be >= 1"),
    ],
)
def test_config_checks_name_the_field(kwargs, where, message):
    with pytest.raises(ConfigError) as info:
        SQLRewardConfig(**kwargs)
    assert info.value.where == where
    assert message in str(info.value)


def test_gold_results_are_cached_per_db_and_sql(dbs):
    scorer = ExecutionScorer(timeout_s=1.0)
    completions = [f"<answer>SELECT name FROM customers WHERE id = {i}</answer>" for i in range(8)]
    scores = execution_reward(completions, [BERLIN] * 8, dbs["shop"], scorer=scorer)
    assert scores == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # only id 1 (Alice Martin) lives in Berlin
    assert scorer.gold_executions == 1
    execution_reward(completions[:2], [BERLIN, "SELECT city FROM customers"], dbs["shop"], scorer=scorer)
    assert scorer.gold_executions == 2
    execution_reward(completions[:1], [BERLIN], dbs["big_shop"], scorer=scorer)  # same SQL, other file
    assert scorer.gold_executions == 3
    scorer.executor.close()


def test_wrong_database_stops_instead_of_scoring_zero(dbs, tmp_path):
    # seed 000, pitfall 1: a wrong path must not make the execution reward silently 0
    with pytest.raises(SchemaError, match="database file not found"):
        sql_reward_components(["<answer>SELECT 1</answer>"], [BERLIN], tmp_path / "missing.sqlite", CONFIG)
    with pytest.raises(DataError, match="the gold SQL does not run on this database .*no such table: customers"):
        sql_reward_components(["<answer>SELECT 1</answer>"], [BERLIN], dbs["clinic"], CONFIG)
    with pytest.raises(DataError, match="gold SQL does not run"):  # even when the completion has no SQL
        sql_reward_components([""], [BERLIN], dbs["clinic"], CONFIG)


def test_no_gold_sql_means_not_applicable(dbs):
    [got] = sql_reward_components(["<reasoning>r</reasoning><answer>SELECT 1</answer>"], [None], dbs["shop"], CONFIG)
    assert (got["execution"], got["schema"], got["ngram"]) == (None, None, None)
    assert (got["format"], got["syntax"]) == (1.0, 1.0)
    assert got["total"] == pytest.approx(0.3)
    assert got["reason"] == "no gold SQL"


def test_component_functions_agree_with_the_combined_reward(dbs, scorer):
    cases = [c for c in CASES if c.db == "shop" and "bad" not in c.tags]
    completions, gold = [c.completion for c in cases], [c.gold for c in cases]
    combined = sql_reward_components(completions, gold, dbs["shop"], CONFIG, scorer)
    assert format_reward(completions) == [g["format"] for g in combined]
    assert syntax_reward(completions) == [g["syntax"] for g in combined]
    assert schema_match_reward(completions, gold) == [g["schema"] for g in combined]
    assert ngram_reward(completions, gold) == [g["ngram"] for g in combined]
    assert execution_reward(completions, gold, dbs["shop"], scorer=scorer) == [g["execution"] for g in combined]
    assert sql_rewards(completions, gold, dbs["shop"], CONFIG, scorer) == [g["total"] for g in combined]


def test_trl_calling_convention(dbs):
    # TRL's GRPOTrainer calls reward_func(prompts=..., completions=..., completion_ids=..., **dataset_columns)
    completions = [[{"role": "assistant", "content": f"<reasoning>r</reasoning><answer>{BERLIN}</answer>"}],
                   [{"role": "assistant", "content": "<answer>SELECT city FROM customers</answer>"}]]  # fmt: skip
    extra = {"prompts": [[{"role": "user", "content": "q"}]] * 2, "completion_ids": [[1], [2]],
             "gold_sql": [BERLIN, BERLIN], "db_path": [str(dbs["shop"])] * 2, "trainer_state": None}  # fmt: skip
    assert execution_reward(completions=completions, **extra) == [1.0, 0.0]
    assert format_reward(completions=completions, **extra) == [1.0, 0.0]
    assert syntax_reward(completions=completions, **extra) == [1.0, 1.0]
    assert schema_match_reward(completions=completions, **extra)[0] == 1.0
    assert ngram_reward(completions=completions, **extra)[0] == 1.0


def test_answer_only_format_config(dbs):
    completion = f"<answer>{BERLIN}</answer>"
    [strict] = sql_reward_components([completion], [BERLIN], dbs["shop"], CONFIG)
    [loose] = sql_reward_components([completion], [BERLIN], dbs["shop"], SQLRewardConfig(require_reasoning=False))
    assert (strict["format"], loose["format"]) == (0.0, 1.0)
    assert loose["total"] == pytest.approx(3.8)


def test_executor_argument_forms_and_per_item_dbs(dbs):
    completions = [f"<answer>{BERLIN}</answer>", "<answer>SELECT COUNT(*) FROM mz_cf</answer>"]
    gold = [BERLIN, "SELECT COUNT(*) FROM mz_cf"]
    paths = [dbs["shop"], dbs["clinic"]]
    with SQLiteExecutor(timeout_s=1.0) as executor:
        got = sql_reward_components(completions, gold, paths, CONFIG, executor)
    assert [g["execution"] for g in got] == [1.0, 1.0]
    assert [g["execution"] for g in sql_reward_components(completions, gold, paths, CONFIG)] == [1.0, 1.0]
    with pytest.raises(ValueError, match="2 completions but 1 values of db_path"):
        sql_reward_components(completions, gold, paths[:1], CONFIG)
    with pytest.raises(ValueError, match="2 completions but 1 gold queries"):
        sql_reward_components(completions, gold[:1], dbs["shop"], CONFIG)


def test_gold_too_large_is_not_judged(dbs):
    scorer = ExecutionScorer(timeout_s=1.0, max_rows=2)
    score = scorer.score(dbs["shop"], "SELECT name FROM customers", "SELECT name FROM customers")
    assert score.f1 is None and "more than 2 rows" in score.reason
    scorer.executor.close()


def test_trl_reward_functions_reproduce_the_combined_total(dbs):
    from rewards.sql import reward_functions

    cases = [c for c in CASES if c.db == "shop" and "bad" not in c.tags]
    completions, gold = [c.completion for c in cases], [c.gold for c in cases]
    cfg = SQLRewardConfig(timeout_s=0.5, require_reasoning=False)
    funcs, weights = reward_functions(cfg)
    assert [f.__name__ for f in funcs] == list(COMPONENTS)
    assert weights == [3.0, 0.1, 0.2, 0.3, 0.2]
    columns = {"prompts": ["p"] * len(cases), "gold_sql": gold, "db_path": [str(dbs["shop"])] * len(cases)}
    per_func = [f(completions=completions, **columns) for f in funcs]
    totals = [sum(w * (v or 0.0) for w, v in zip(weights, vals, strict=True)) for vals in zip(*per_func, strict=True)]
    assert totals == pytest.approx(sql_rewards(completions, gold, dbs["shop"], cfg))


def test_gold_timeout_is_not_judged_and_not_cached(dbs):
    scorer = ExecutionScorer(timeout_s=0.3)
    runaway = 'SELECT COUNT(*) FROM customers, orders, "order items"'
    for expected_runs in (1, 2):
        score = scorer.score(dbs["big_shop"], "SELECT 1", runaway)
        assert score.f1 is None and "timed out" in score.reason
        assert scorer.gold_executions == expected_runs
    scorer.executor.close()


def test_log_levels(dbs, scorer, caplog):
    by_name = {c.name: c for c in CASES}
    expected = {"runaway_recursive_cte": logging.WARNING, "drop_table": logging.INFO, "several_statements": logging.INFO,
                "non_sql_text_in_answer": logging.DEBUG, "unknown_column": logging.DEBUG}  # fmt: skip
    for name, level in expected.items():
        case = by_name[name]
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="rewards.sql_execution"):
            sql_reward_components([case.completion], [case.gold], dbs[case.db], CONFIG, scorer)
        assert [r.levelno for r in caplog.records if "scored 0" in r.getMessage()] == [level], name
