"""router.calibrate: the temperature fitted on human-written questions, written into config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.graph import JoinPath, SchemaGraph
from core.schema import introspect


def _router(tiny_db: Path, tmp_path: Path):
    from router.model import PathSpace, RouterModel
    from router.policy import RouterPolicy
    from router.route import Router

    torch.manual_seed(0)
    g = SchemaGraph(introspect(tiny_db), max_hops=3)
    model = RouterModel.from_encoder("all-MiniLM-L6-v2", trainable_layers=1, head_dim=16)
    folder = Router(RouterPolicy(model, PathSpace(g))).save_pretrained(tmp_path / "router")
    return Router.from_pretrained(folder), folder


QUESTIONS = [
    ("Which suppliers sell Green Tea?", "products", (), "suppliers"),
    ("How many orders has Alice Martin placed?", "customers", (), "orders"),
    ("What does Bob Chen buy?", "customers", ("orders", "order items"), "products"),
    ("List the categories", "categories", (), "categories"),
    ("Alice Martin 买过哪些产品？", "customers", ("orders", "order items"), "products"),
    ("Smoked Salmon 多少钱？", "products", (), "products"),
    ("Where does Carla Diaz live?", "customers", (), "customers"),
    ("Tokyo Traders 供应哪些产品？", "suppliers", (), "products"),
    ("Which customers ordered Black Coffee?", "products", ("order items", "orders"), "customers"),
    ("How many products are in Seafood?", "categories", (), "products"),
]


def _write(path: Path, rows) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for q, a, v, t in rows:
            fh.write(json.dumps({"question": q, "path": {"anchor": a, "via": list(v), "target": t},
                                 "sql": "SELECT 1", "language": "zh" if "？" in q else "en"}) + "\n")  # fmt: skip
    return path


def test_the_fit_minimises_the_gold_routes_nll_and_keeps_every_route(tiny_db: Path, tmp_path: Path) -> None:
    from router.calibrate import calibrate

    router, _ = _router(tiny_db, tmp_path)
    questions = [q for q, *_ in QUESTIONS]
    before = [r.path for r in router.route_batch(questions)]
    # the untrained router is right on half of them (its own routes) and wrong on the rest
    gold = [before[i] if i % 2 == 0 else next(p for p in router.graph.legal_paths if p != before[i]) for i in range(10)]
    res = calibrate(router, questions, gold)
    assert res.accuracy == 0.5 and 0.06 < res.temperature < 19  # inside the range searched
    assert res.n == 10 and res.temperature_before == 1.0
    assert res.accuracy == sum(p == g for p, g in zip(before, gold, strict=True)) / 10
    assert res.nll <= res.nll_before + 1e-9
    # the NLL at the fitted temperature is the smallest on a grid around it
    lp = torch.cat([d.log_prob for d in router.distributions(questions)]).double()
    idx = torch.tensor([router.policy.space.index(p) for p in gold])
    nll = lambda t: float(-torch.log_softmax(lp / t, -1).gather(1, idx.view(-1, 1)).mean())  # noqa: E731
    assert res.nll == pytest.approx(nll(res.temperature), abs=1e-4)
    assert all(nll(res.temperature) <= nll(res.temperature * f) + 1e-6 for f in (0.8, 0.9, 1.1, 1.25))
    assert [r.path for r in router.route_batch(questions)] == before  # the routes never change


def test_the_command_writes_the_temperature_and_the_router_reports_with_it(tiny_db: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from router.calibrate import main
    from router.route import Router

    router, folder = _router(tiny_db, tmp_path)
    file = _write(tmp_path / "dev.jsonl", QUESTIONS)
    dry = main(["--router", str(folder), "--questions", str(file), "--dry-run", "--threads", "1"])
    assert json.loads((folder / "config.json").read_text())["temperature"] == 1.0  # dry run: nothing written
    res = main(["--router", str(folder), "--questions", str(file), "--threads", "1"])
    assert res == dry
    doc = json.loads((folder / "config.json").read_text())
    assert doc["temperature"] == round(res.temperature, 4)
    assert doc["calibration"]["n"] == 10 and doc["calibration"]["questions"] == str(file)
    again = Router.from_pretrained(folder)
    assert again.temperature == round(res.temperature, 4)
    r = again.route(QUESTIONS[0][0])
    lp = again.distributions([QUESTIONS[0][0]])[0].log_prob[0]
    assert r.confidence == pytest.approx(float(torch.softmax(lp / again.temperature, -1).max()), abs=1e-6)
    assert "temperature 1.000 ->" in capsys.readouterr().out
    # the alternatives are on the confidence's scale, not the raw probability's
    calibrated = torch.softmax(lp / again.temperature, -1)
    k = len(r.top_k)
    assert r.top_k_confidence == pytest.approx([float(c) for c in calibrated.topk(k).values], abs=1e-6)
    assert r.top_k_confidence[0] == r.confidence and r.top_k[0][1] == pytest.approx(float(lp.exp().max()), abs=1e-6)
    assert r.to_dict()["top_k"][1]["confidence"] == r.top_k_confidence[1]


def test_an_illegal_gold_route_is_one_line_naming_the_file_and_line(tiny_db: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from core.cli import run_main
    from router.calibrate import main

    _, folder = _router(tiny_db, tmp_path)
    before = (folder / "config.json").read_bytes()
    good = _write(tmp_path / "good.jsonl", QUESTIONS).read_text(encoding="utf-8")
    cases = {  # file text -> what its one-line error says
        good + json.dumps({"question": "Who?", "path": {"anchor": "suppliers", "via": ["orders"], "target": "customers"},
                           "sql": "SELECT 1"}) + "\n": "good.jsonl:11: path suppliers -> orders -> customers is not a legal",  # fmt: skip
        "\n\n" + good.replace("Where does Carla Diaz live?", "Carla " * 400): "good.jsonl:9: question has",  # position 7, line 9
        good.replace("Where does Carla Diaz live?", "Carla \\ud800 Diaz?"): "good.jsonl:7: field 'question' is not valid Unicode",
        good + "[" * 5000 + "]" * 5000 + "\n": "good.jsonl:11: not a JSON object (RecursionError)",
        "\n".join(good.splitlines()[:4]) + "\n": "good.jsonl: 4 questions; a temperature needs at least 10",
        "\n\n": "good.jsonl: 0 questions",
    }
    for text, expected in cases.items():
        (tmp_path / "good.jsonl").write_text(text, encoding="utf-8")
        with pytest.raises(SystemExit) as exc:
            run_main(lambda: main(["--router", str(folder), "--questions", str(tmp_path / "good.jsonl")]))
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (expected, err)
    assert (folder / "config.json").read_bytes() == before  # nothing written


def test_the_api_refuses_mismatched_lengths_and_a_fit_with_nothing_to_fit(tiny_db: Path, tmp_path: Path) -> None:
    from core.errors import DataError
    from router.calibrate import calibrate

    router, _ = _router(tiny_db, tmp_path)
    questions = [q for q, *_ in QUESTIONS]
    gold = [JoinPath(a, v, t) for _, a, v, t in QUESTIONS]
    with pytest.raises(DataError, match="10 questions but 3 gold routes"):
        calibrate(router, questions, gold[:3])
    with pytest.raises(DataError, match="a string but"):
        calibrate(router, "How many orders?", gold[:1])
    routed = [r.path for r in router.route_batch(questions)]  # gold = what it routes: every question right
    with pytest.raises(DataError, match="low end of its range .*every question is routed right"):
        calibrate(router, questions, routed)


def test_a_stored_temperature_that_is_not_a_positive_finite_number_reads_as_1(tiny_db: Path, tmp_path: Path) -> None:
    from router.route import Router

    _, folder = _router(tiny_db, tmp_path)
    for bad in ("1e309", "-1", "0", "NaN"):
        text = (folder / "config.json").read_text()
        doc = json.loads(text)
        (folder / "config.json").write_text(text.replace(f'"temperature": {json.dumps(doc["temperature"])}', f'"temperature": {bad}'))
        assert Router.from_pretrained(folder).temperature == 1.0


def test_the_demo_calibrates_on_the_samples_development_questions_only(tmp_path: Path) -> None:
    from core.errors import ConfigError
    from data_pipeline.human_sets import packaged_human_file
    from evaluation.demo import DemoConfig, calibration_file

    for sample in ("northwind", "chinook", "hospital", "projects"):
        got = calibration_file(DemoConfig(db=sample))
        assert got is not None and got.name == f"{sample}.jsonl" and got.parent.name == "dev_sets"
        assert got.read_text(encoding="utf-8") != packaged_human_file(sample).read_text(encoding="utf-8")
    assert calibration_file(DemoConfig(db=str(tmp_path / "mine.sqlite"))) is None  # no development set: generated validation
    assert calibration_file(DemoConfig(db="northwind", calibration_questions="none")) is None
    own = _write(tmp_path / "own.jsonl", QUESTIONS)
    assert calibration_file(DemoConfig(db="northwind", calibration_questions=str(own))) == own
    with pytest.raises(ConfigError, match="calibration-questions"):
        calibration_file(DemoConfig(db="northwind", calibration_questions=str(tmp_path / "missing.jsonl")))


def test_a_question_with_a_lone_surrogate_is_a_data_error_not_a_tokenizer_crash(tiny_db: Path, tmp_path: Path) -> None:
    from core.errors import DataError

    router, _ = _router(tiny_db, tmp_path)
    with pytest.raises(DataError, match=r"question:2: question is not valid Unicode text \(character 7"):
        router.route_batch(["Who buys Green Tea?", "Green \ud800 Tea?"])
