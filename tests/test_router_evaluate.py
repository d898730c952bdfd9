"""Routing metrics on hand-made predictions: every number below is counted by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import introspect
from router.evaluate import evaluate_router, format_table, path_metrics

P = JoinPath
GOLD_3HOP = P("customers", ("orders", "order items"), "products")
GOLD_1HOP = P("products", (), "categories")
GOLD_0HOP = P("suppliers", (), "suppliers")


def sample(i: int, path: JoinPath, language: str = "en", split: str = "test", kind: str = "real") -> Sample:
    return Sample(f"s{i}", "shop", f"question {i}", language, path, "SELECT 1", entity_kind=kind, split=split)


SAMPLES = [
    sample(0, GOLD_3HOP, "en"),
    sample(1, GOLD_3HOP, "zh", kind="fuzzy"),
    sample(2, GOLD_1HOP, "en", split="test_heldout"),
    sample(3, GOLD_0HOP, "zh", split="test_heldout", kind="fuzzy"),
]
PREDICTED = [
    GOLD_3HOP,  # all right
    P("customers", (), "orders"),  # anchor right; "always null" via wrong; target wrong
    P("categories", (), "products"),  # reversed: anchor and target wrong, null via right
    GOLD_0HOP,  # all right
]


@pytest.fixture
def graph(tiny_db: Path) -> SchemaGraph:
    return SchemaGraph(introspect(tiny_db))


def test_overall_per_head_and_full_path(graph: SchemaGraph) -> None:
    m = path_metrics(PREDICTED, SAMPLES, graph)
    assert m["n"] == 4
    assert m["anchor_acc"] == 3 / 4  # samples 0, 1, 3
    assert m["via_acc"] == 3 / 4  # 0, 2 (null = null), 3
    assert m["target_acc"] == 2 / 4  # 0, 3
    assert m["full_path_acc"] == 2 / 4
    assert m["nonnull_via_acc"] == 1 / 2  # gold via non-null for samples 0 and 1 only
    assert m["legal_rate"] == 1.0
    # rewards (defaults): 2.0 (0.5+1.0+0.5), 0.5 (anchor), 0.1 (null via, but anchor wrong -> 0) -> 0.0, 1.1
    assert m["mean_reward"] == pytest.approx((2.0 + 0.5 + 0.0 + 1.1) / 4)


def test_breakdowns_by_hops_language_split_and_entity_kind(graph: SchemaGraph) -> None:
    m = path_metrics(PREDICTED, SAMPLES, graph)
    assert m["by_hops"]["3"] == pytest.approx(
        {"n": 2, "anchor_acc": 1.0, "via_acc": 0.5, "target_acc": 0.5, "full_path_acc": 0.5, "nonnull_via_acc": 0.5}
    )
    assert m["by_hops"]["1"]["full_path_acc"] == 0.0 and "nonnull_via_acc" not in m["by_hops"]["1"]
    assert m["by_language"]["en"]["full_path_acc"] == 0.5 and m["by_language"]["zh"]["full_path_acc"] == 0.5
    assert m["by_split"]["test_heldout"]["anchor_acc"] == 0.5
    assert m["by_entity_kind"]["fuzzy"]["n"] == 2 and m["by_entity_kind"]["real"]["target_acc"] == 0.5


def test_an_illegal_prediction_lowers_the_legal_rate_and_the_reward(graph: SchemaGraph) -> None:
    illegal = P("customers", (), "products")  # no direct foreign key
    m = path_metrics([illegal], [sample(0, GOLD_3HOP)], graph)
    assert m["legal_rate"] == 0.0
    assert m["mean_reward"] == pytest.approx(0.5 + 0.5 - 1.0)  # anchor + target - illegal penalty


def test_lengths_must_match_and_empty_input_is_counted_as_zero() -> None:
    with pytest.raises(ValueError, match="1 predictions for 2 samples"):
        path_metrics([GOLD_0HOP], SAMPLES[:2])
    assert path_metrics([], [])["n"] == 0


def test_evaluate_router_calls_predict_paths_once(graph: SchemaGraph) -> None:
    class Fixed:
        calls = 0

        def predict_paths(self, questions: list[str]) -> list[JoinPath]:
            Fixed.calls += 1
            assert questions == [s.question for s in SAMPLES]
            return PREDICTED

    m = evaluate_router(Fixed(), SAMPLES, graph)
    assert Fixed.calls == 1 and m["full_path_acc"] == 0.5
    table = format_table(m, "test")
    assert table.splitlines()[0] == "test"
    assert "hops=3" in table and "lang=zh" in table and "split=test_heldout" in table


def test_command_line_scores_saved_routers_and_drops_excluded_questions(tiny_db: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from core.dataset import BuiltDataset, save_dataset
    from core.samples import Entity
    from router.evaluate import main, seed_key
    from router.model import PathSpace, RouterModel
    from router.policy import RouterPolicy
    from router.route import Router

    schema = introspect(tiny_db)
    g = SchemaGraph(schema, max_hops=3)
    berlin = (Entity("customers", "city", "Berlin", "berlin"),)
    rows = [  # (question, path, split, entities)
        ("orders of the customers in berlin", P("customers", (), "orders"), "test", berlin),
        ("suppliers of green tea", P("products", (), "suppliers"), "test", ()),
        ("what do berlin customers buy", GOLD_3HOP, "test_heldout", berlin),
        ("list the suppliers", GOLD_0HOP, "train", ()),
    ]
    samples = [Sample(f"s{i}", "shop", q, "en", p, g.skeleton(p), e, split=sp, template_id=f"t{i}")
               for i, (q, p, sp, e) in enumerate(rows)]  # fmt: skip
    data = save_dataset(tmp_path / "data", BuiltDataset(schema, g, samples, tiny_db))
    # a second data set holding sample 0 again, paraphrased: the same question for --exclude
    again = [Sample("x", "shop", "customers in berlin: their orders?", "en", samples[0].path, "", berlin,
                    template_id="t0")]  # fmt: skip
    assert seed_key(again[0]) == seed_key(samples[0]) != seed_key(samples[2])
    other = save_dataset(tmp_path / "other", BuiltDataset(schema, g, again, tiny_db))
    model = RouterModel.from_encoder("all-MiniLM-L6-v2", trainable_layers=1, head_dim=16)
    ckpt = Router(RouterPolicy(model, PathSpace(g))).save_pretrained(tmp_path / "router")

    res = main(["--router", str(ckpt), "--data", str(data), "--splits", "test", "test+test_heldout",
                "--threads", "1", "--out", str(tmp_path / "m.json")])  # fmt: skip
    got = res[str(ckpt)]
    assert got["test"]["n"] == 2 and got["test+test_heldout"]["n"] == 3
    direct = evaluate_router(Router.from_pretrained(ckpt), samples[:3], g)
    assert got["test+test_heldout"]["full_path_acc"] == direct["full_path_acc"]
    routes = Router.from_pretrained(ckpt).route_batch([s.question for s in samples[:3]])
    right = [r.path == s.path for r, s in zip(routes, samples, strict=False)]
    assert got["test+test_heldout"]["wrong"] == right.count(False) == round(3 * (1 - direct["full_path_acc"]))
    assert got["test+test_heldout"]["uncertain_wrong"] == sum(r.uncertain and not ok for r, ok in zip(routes, right))
    assert got["test+test_heldout"]["uncertain_right"] == sum(r.uncertain and ok for r, ok in zip(routes, right))
    assert "== " + str(ckpt) + ": test ==" in capsys.readouterr().out
    assert (tmp_path / "m.json").is_file()

    res = main(["--router", str(ckpt), "--data", str(data), "--exclude", str(other), "--splits", "test", "--failures", "True"])
    assert res[str(ckpt)]["test"]["n"] == 1  # sample 0 is in --exclude
    assert "dropped" in capsys.readouterr().err

    res = main(["--router", str(ckpt), "--data", str(data), "--splits", "validation"])  # no such questions there
    assert res[str(ckpt)] == {}
    assert f"validation: no questions in {data} (splits there: test, test_heldout, train); nothing to evaluate" in capsys.readouterr().err


def test_command_line_refuses_an_unknown_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from router.evaluate import main

    with pytest.raises(SystemExit) as exc:
        main(["--router", str(tmp_path), "--data", str(tmp_path), "--splits", "test+dev"])
    assert exc.value.code == 2
    assert "unknown split 'dev' in 'test+dev'" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--anchor-prior", "--who-prior"])
def test_command_line_refuses_a_negative_prior(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from router.evaluate import main

    with pytest.raises(SystemExit) as exc:
        main(["--router", str(tmp_path), "--data", str(tmp_path), flag, "-1"])
    assert exc.value.code == 2
    assert f"{flag}: must be a finite number >= 0, got -1.0" in capsys.readouterr().err
