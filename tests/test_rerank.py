"""generator.rerank and evaluation.rerank: the LM's continuation log-probs against a plain forward
pass of SmolLM2-135M, the combined score, the reranked route's fields, and the command line on the
tiny shop (a router trained here)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from core.cli import run_main
from core.dataset import load_dataset
from core.graph import JoinPath
from core.samples import Sample
from evaluation.rerank import calibration_report, compare, grid_table, pick, read_scores
from evaluation.rerank import main as rerank_main
from generator.models import DEFAULT_GENERATOR
from generator.rerank import CandidateScore, RerankConfig, RouteReranker, confidences, pick_examples, route_text
from router.route import Router
from router.train_sft import train
from tests.conftest import make_tiny_shop
from tests.test_router_sft import LABELLED, tiny_config, write_data_set

P = JoinPath
A, B, C = P("customers", (), "orders"), P("orders", (), "customers"), P("customers", ("orders",), "order items")


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rerank")
    db = make_tiny_shop(root / "shop.sqlite")
    data = write_data_set(db, root / "data")
    torch.manual_seed(0)
    train(tiny_config(data, root / "router", epochs=4))
    return {"root": root, "data": data, "router": root / "router"}


@pytest.fixture(scope="module")
def reranker(shop: dict[str, Path]) -> RouteReranker:
    torch.set_num_threads(1)
    router = Router.from_pretrained(shop["router"])
    return RouteReranker.from_pretrained(router, RerankConfig(model=DEFAULT_GENERATOR, n_examples=2))


def test_continuation_logprobs_equal_a_plain_forward_pass(reranker: RouteReranker) -> None:
    """The shared prefix cache, the batch of unequal lengths and the scored positions give what one
    forward pass over prefix + sequence gives, token by token."""
    tok, model = reranker.tokenizer, reranker.model
    prefix_text = "-- a prefix shared by every candidate\n"
    prefix = reranker._encode_prefix(prefix_text)
    seqs = [tok(" customers -> orders\n", add_special_tokens=False).input_ids,
            tok(" x\n", add_special_tokens=False).input_ids,
            tok(" customers -> orders -> order items\n", add_special_tokens=False).input_ids]
    starts = [0, 1, 3]
    got = reranker.continuation_logprobs(prefix, seqs, starts)
    pre = tok(prefix_text, return_tensors="pt").input_ids[0].tolist()
    for seq, start, value in zip(seqs, starts, got, strict=True):
        ids = torch.tensor([pre + seq])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)[0]
        want = sum(float(logp[len(pre) + t - 1, seq[t]]) for t in range(start, len(seq)))
        assert value == pytest.approx(want, abs=1e-3)
    # the cache was copied, not extended: a second call gives the same numbers
    assert reranker.continuation_logprobs(prefix, seqs, starts) == pytest.approx(got, abs=1e-5)


def test_score_gives_the_router_log_prob_and_two_negative_lm_log_probs(reranker: RouteReranker) -> None:
    scores = reranker.score("which orders did the customer Alice Martin place", [A, C], [0.7, 0.2])
    assert [s.path for s in scores] == [A, C]
    assert [s.router_logp for s in scores] == pytest.approx([math.log(0.7), math.log(0.2)])
    assert all(s.forward_logp < 0 and s.channel_logp < 0 for s in scores)
    # a longer route has more tokens to pay for in the forward direction
    assert scores[1].forward_logp < scores[0].forward_logp
    # the question read once, then the routes, gives what reading question + route per candidate gives
    query = reranker._tokens(reranker._forward_query("which orders did the customer Alice Martin place"))
    routes = [reranker._tokens(" " + route_text(p)) + reranker._newline for p in (A, C)]
    whole = reranker.continuation_logprobs(reranker._forward_prefix, [query + r for r in routes], [len(query)] * 2)
    assert [s.forward_logp for s in scores] == pytest.approx(whole, abs=1e-3)


def test_with_zero_weights_the_router_order_is_kept(shop: dict[str, Path], reranker: RouteReranker) -> None:
    router = reranker.router
    routes = router.route_batch([q for q, _ in LABELLED], top_k=3)
    reranker.config = RerankConfig(model=DEFAULT_GENERATOR, top_k=3, forward_weight=0.0, channel_weight=0.0)
    try:
        out = reranker.rerank(routes)
    finally:
        reranker.config = RerankConfig(model=DEFAULT_GENERATOR, n_examples=2)
    assert [r.route.path for r in out] == [r.path for r in routes]
    assert not any(r.changed for r in out)
    assert [r.route.top_k for r in out] == [r.top_k for r in routes]


def test_choose_replaces_path_skeleton_order_and_confidence_with_the_reranked_ones(reranker: RouteReranker) -> None:
    routed = reranker.router.route("which orders did the customer Alice Martin place", top_k=3)
    paths = [p for p, _ in routed.top_k]
    probs = [q for _, q in routed.top_k]
    # the LM prefers the router's last candidate by far
    scores = [CandidateScore(p, math.log(q), 0.0, -50.0 if j < 2 else 0.0) for j, (p, q) in enumerate(zip(paths, probs))]
    out = reranker._choose(routed, scores, forward_weight=0.0, channel_weight=1.0)
    assert out.changed
    assert out.route.path == paths[2]
    assert out.route.skeleton == reranker.router.graph.skeleton(paths[2])
    assert out.route.prob == pytest.approx(probs[2])
    assert [p for p, _ in out.route.top_k] == [paths[2], paths[0], paths[1]]
    # the confidence is the softmax of the combined scores at the config's temperature, reordered with the routes
    temp = reranker.config.temperature
    totals = [(math.log(q) + (-50.0 if j < 2 else 0.0)) / temp for j, q in enumerate(probs)]
    soft = [math.exp(t) / sum(math.exp(u) for u in totals) for t in totals]
    assert out.route.confidence == pytest.approx(soft[2]) and out.route.confidence > 0.99  # 50 nats apart
    assert out.route.top_k_confidence == pytest.approx([soft[j] for j in (2, 0, 1)])
    assert not out.route.uncertain
    # a hotter temperature spreads the confidence: the pick is the same, now marked uncertain
    reranker.config = RerankConfig(model=DEFAULT_GENERATOR, n_examples=2, temperature=1e3)
    try:
        hot = reranker._choose(routed, scores, forward_weight=0.0, channel_weight=1.0)
    finally:
        reranker.config = RerankConfig(model=DEFAULT_GENERATOR, n_examples=2)
    assert hot.route.path == paths[2]
    assert hot.route.confidence == pytest.approx(1 / 3, abs=0.02)
    assert hot.route.uncertain == (hot.route.confidence < reranker.router.min_confidence)
    assert sum(hot.route.top_k_confidence) == pytest.approx(1.0)


def test_pick_examples_takes_distinct_anchors_and_never_more_than_asked() -> None:
    samples = [Sample(f"s{i}", "shop", f"q{i}", lang, path, "")
               for i, (lang, path) in enumerate([("en", A), ("en", B), ("zh", C), ("en", P("orders", (), "orders")),
                                                 ("zh", P("customers", (), "customers"))])]
    got = pick_examples(samples, 6)
    assert len({s.path.anchor for s in got}) == len(got)
    assert {s.path.anchor for s in got} == {"customers", "orders"}
    assert pick_examples(samples, 0) == []
    assert len(pick_examples(samples, 1)) == 1 and pick_examples(samples, 1)[0].path.hops == 0


def test_combined_score_pick_and_paired_counts() -> None:
    cands = [CandidateScore(A, math.log(0.6), -3.0, -20.0), CandidateScore(B, math.log(0.4), -2.0, -10.0)]
    assert pick(cands, 0.0, 0.0) == A
    assert pick(cands, 0.0, 1.0) == B  # -0.51 - 20 < -0.92 - 10
    assert cands[1].total(0.5, 1.0) == pytest.approx(math.log(0.4) - 1.0 - 10.0)
    tie = [CandidateScore(A, 0.0, 0.0, 0.0), CandidateScore(B, 0.0, 0.0, 0.0)]
    assert pick(tie, 1.0, 1.0) == A  # the router's order breaks ties
    conf = confidences(cands, 0.0, 1.0, 1.0)
    assert sum(conf) == pytest.approx(1.0) and conf[1] == pytest.approx(1 / (1 + math.exp(math.log(0.6 / 0.4) - 10.0)))
    m = compare([A, A, B, B], [A, B, A, B], [A, A, A, A])
    assert m == {"n": 4, "router_right": 2, "reranked_right": 2, "won": 1, "lost": 1, "mcnemar_p": 1.0}
    assert route_text(C) == "customers -> orders -> order items"


def test_calibration_report_fits_the_temperature_that_makes_the_confidence_the_accuracy() -> None:
    # the router prefers A by 4 nats; A is right for 3 of 4 questions; a fifth question's gold is no candidate
    records = [(A, [CandidateScore(A, 0.0, 0.0, 0.0), CandidateScore(B, -4.0, 0.0, 0.0)]) for _ in range(3)]
    records.append((B, [CandidateScore(A, 0.0, 0.0, 0.0), CandidateScore(B, -4.0, 0.0, 0.0)]))
    cal = calibration_report(records, RerankConfig(forward_weight=0.0, channel_weight=0.0, temperature=1.0))
    assert cal["n"] == 4 and cal["right"] == 3
    assert cal["ece"] == pytest.approx(1 / (1 + math.exp(-4.0)) - 0.75, abs=1e-6)  # at temperature 1
    assert cal["fitted_temperature"] == pytest.approx(4.0 / math.log(3.0), rel=1e-4)  # confidence 3/4
    assert cal["fitted_ece"] == pytest.approx(0.0, abs=1e-6)
    records.append((C, [CandidateScore(A, 0.0, 0.0, 0.0), CandidateScore(B, -4.0, 0.0, 0.0)]))
    hotter = calibration_report(records, RerankConfig(forward_weight=0.0, channel_weight=0.0, temperature=1.0))
    assert hotter["right"] == 3 and hotter["fitted_temperature"] > cal["fitted_temperature"]  # confidence 3/5
    one = calibration_report(records, RerankConfig(forward_weight=0.0, channel_weight=0.0, top_k=1, temperature=1.0))
    assert one["ece"] == pytest.approx(1 - 0.6)  # a single candidate is always 100% sure


def test_command_line_scores_grid_and_bad_score_file(shop: dict[str, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    questions = tmp_path / "q.jsonl"
    rows = [("which orders did the customer Alice Martin place", A), ("which customer placed order 2", B)]
    questions.write_text("".join(json.dumps({"question": q, "language": "en", "sql": "SELECT 1", "path": p.to_dict()}) + "\n"
                                 for q, p in rows), encoding="utf-8")
    scores = tmp_path / "scores.jsonl"
    out = rerank_main(["--router", str(shop["router"]), "--data", str(shop["data"]), "--splits", "validation",
                       "--questions", str(questions), "--rerank.model", DEFAULT_GENERATOR, "--rerank.top-k", "3",
                       "--rerank.n-examples", "2", "--scores-out", str(scores), "--threads", "1", "--no-progress"])
    assert set(out) == {"validation", "q.jsonl"}
    assert out["validation"]["n"] == len(LABELLED) and out["q.jsonl"]["n"] == 2
    assert all(0.0 <= out[g][k] <= 1.0 for g in out for k in ("ece_router", "ece_reranked"))
    router = Router.from_pretrained(shop["router"])
    right = sum(r.path == p for r, (_, p) in zip(router.route_batch([q for q, _ in LABELLED]), LABELLED))
    assert out["validation"]["router_right"] == right
    records = read_scores(scores)
    assert len(records) == len(LABELLED) + 2
    assert all(len(c) == 3 for _, c in records)
    # the grid's (forward 0, channel 0) cell is the router alone; the defaults' cell is the reranked count
    table = grid_table(records)
    first = sum(c[0].path == g for g, c in records)
    assert f"right first by the router: {first};" in table
    zero_row = next(line for line in table.splitlines() if line.startswith("      0  "))
    assert int(zero_row.split()[1]) == first
    cfg = RerankConfig()
    reranked = sum(pick(c, cfg.forward_weight, cfg.channel_weight) == g for g, c in records)
    assert reranked == out["validation"]["reranked_right"] + out["q.jsonl"]["reranked_right"]
    # one candidate left: every cell is the router alone; all three: the same table as no cut
    assert grid_table(records, 3) == table
    one = grid_table(records, 1).splitlines()
    assert f"gold among the candidates: {first}" in one[0]
    assert all(int(x) == first for line in one[3:] for x in line.split()[1:])
    capsys.readouterr()
    printed = rerank_main(["--grid", str(scores), "--grid-top-k", "1", "3"])["grid"]
    assert printed.startswith("first 1 candidates of the router\n") and "\n\nfirst 3 candidates of the router\n" in printed
    assert printed.endswith(table)
    grid_out = rerank_main(["--grid", str(scores), "--rerank.temperature", "2"])
    assert grid_out["calibration"] == calibration_report(records, RerankConfig(temperature=2.0))
    assert grid_out["calibration"]["n"] == len(records) and grid_out["calibration"]["temperature"] == 2.0
    assert "ECE" in capsys.readouterr().out.splitlines()[-1]

    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "gold": {"anchor": "a", "via": [], "target": "a"}}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: rerank_main(["--grid", str(bad)]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.jsonl:1: not a score record (KeyError" in err[0]
    with pytest.raises(SystemExit) as exc:
        run_main(lambda: rerank_main(["--grid", str(scores), "--grid-top-k", "0"]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--grid-top-k" in err[0]


def test_ab_routes_with_the_reranked_router_and_uses_it_for_the_routed_condition(shop: dict[str, Path], tmp_path: Path) -> None:
    from evaluation.ab import best_routing_method
    from evaluation.ab import main as ab_main

    res = ab_main(["--data", str(shop["data"]), "--split", "validation", "--methods", "sft", "--sft-router",
                   str(shop["router"]), "--generator", "", "--rerank-model", DEFAULT_GENERATOR, "--out", str(tmp_path / "ab"),
                   "--no-progress"])
    assert set(res["routing"]) == {"sft", "rerank"}
    router = Router.from_pretrained(shop["router"])
    reranker = RouteReranker.from_pretrained(router, RerankConfig(model=DEFAULT_GENERATOR),
                                             load_dataset(shop["data"]).split("train"))
    routes = router.route_batch([q for q, _ in LABELLED], top_k=5)
    want = sum(r.route.path == p for r, (_, p) in zip(reranker.rerank(routes), LABELLED)) / len(LABELLED)
    assert res["routing"]["rerank"]["full_path_acc"] == pytest.approx(want)
    assert best_routing_method({"sft": [], "ppo": [], "rerank": []}) == "rerank"
    assert best_routing_method({"sft": [], "ppo": []}) == "ppo"


def test_judge_command_writes_the_reranked_confidences_resumes_and_feeds_the_v1_env(shop: dict[str, Path], tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from envs import SchemaRoutingV1Env
    from generator.judge import main as judge_main

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"question": q, "lang": "en"}) + "\n" for q in
                           ("which orders did Alice Martin place", "where does the customer Alice Martin live",
                            "how many items are in order 2")), encoding="utf-8")
    out = tmp_path / "judged.jsonl"
    args = ["--router", str(shop["router"]), "--data", str(shop["data"]), "--questions", str(log), "--out", str(out),
            "--rerank.model", DEFAULT_GENERATOR, "--rerank.top-k", "3", "--rerank.n-examples", "2", "--save-every", "2",
            "--threads", "1", "--no-progress"]
    got = judge_main(args)
    assert got["n"] == got["judged"] == 3 and got["seconds_per_question"] > 0
    lines = [json.loads(s) for s in out.read_text(encoding="utf-8").splitlines()]
    assert [r["question"] for r in lines] == [json.loads(s)["question"] for s in log.read_text(encoding="utf-8").splitlines()]
    assert all(r["lang"] == "en" for r in lines)  # the log's other fields are kept
    cfg = RerankConfig()
    for r in lines:
        j = r["judge"]
        assert (j["forward_weight"], j["channel_weight"], j["temperature"]) == (cfg.forward_weight, cfg.channel_weight, cfg.temperature)
        assert len(j["routes"]) == 3 and sum(c["p"] for c in j["routes"]) == pytest.approx(1.0)
        scores = [CandidateScore(P.from_dict(c["path"]), c["router_logp"], c["forward_logp"], c["channel_logp"]) for c in j["routes"]]
        # p is rounded to 6 decimals and each log-prob to 4; the softmax of the rounded log-probs is within 1e-4
        assert [c["p"] for c in j["routes"]] == pytest.approx(
            confidences(scores, cfg.forward_weight, cfg.channel_weight, cfg.temperature), abs=1e-4)
    router = Router.from_pretrained(shop["router"])
    assert [P.from_dict(r["judge"]["routes"][0]["path"]) for r in lines] == [r.path for r in router.route_batch([r["question"] for r in lines])]
    # a stopped run (its last question missing) is continued: only that question is judged again
    out.write_text("".join(json.dumps(r) + "\n" for r in lines[:2]), encoding="utf-8")
    again = judge_main(args)
    assert again["n"] == 3 and again["judged"] == 1
    assert [json.loads(s)["question"] for s in out.read_text(encoding="utf-8").splitlines()] == [r["question"] for r in lines]
    assert judge_main(args)["judged"] == 0  # finished: nothing to do
    # the judged log is what route2sql/SchemaRouting-v1 pays unlabelled questions by
    env = SchemaRoutingV1Env(data_dir=shop["data"], unlabelled=out, unlabelled_ratio=1.0, featurizer="hashed:64")
    first = lines[0]["judge"]["routes"]
    env.reset(options={"sample_index": env.n_labelled})
    _, r, _, _, info = env.step(env.action_of(P.from_dict(first[1]["path"])))
    assert r == pytest.approx(first[1]["p"]) and info["reward_components"]["label_free/judge"] == pytest.approx(first[1]["p"])
    # refused before any model is loaded, each with one line naming the file, line or option
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question": "something else"}) + "\n", encoding="utf-8")
    long_q = tmp_path / "long.jsonl"
    long_q.write_text(json.dumps({"question": "ok"}) + "\n" + json.dumps({"question": "x " * 600}) + "\n", encoding="utf-8")
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(json.dumps({**lines[0], "judge": {"routes": [{"path": None, "p": 1.0}]}}) + "\n", encoding="utf-8")
    empty_routes = tmp_path / "empty_routes.jsonl"
    empty_routes.write_text(json.dumps({**lines[0], "judge": {"routes": []}}) + "\n", encoding="utf-8")
    planets = tmp_path / "planets.jsonl"
    planets.write_text(json.dumps({**lines[0], "judge": {**lines[0]["judge"], "routes": [
        {"path": {"anchor": "planets", "via": [], "target": "planets"}, "p": 1.0}]}}) + "\n", encoding="utf-8")
    longer = tmp_path / "longer.jsonl"
    longer.write_text("".join(json.dumps(r) + "\n" for r in [*lines, lines[0]]), encoding="utf-8")
    no_judge = tmp_path / "no_judge.jsonl"
    no_judge.write_text(json.dumps({**lines[0], "judge": None}) + "\n", encoding="utf-8")

    def with_(flag: str, value: str) -> list[str]:
        if flag not in args:
            return [*args, flag, value]
        return [*args[: args.index(flag) + 1], value, *args[args.index(flag) + 2 :]]

    capsys.readouterr()
    for bad_args, message in (
        (with_("--questions", str(other)), "judged.jsonl:1: not the question on line 1 of the question log"),
        (args[2:], "--router: is required"),
        (with_("--out", str(log)), "--out: must not be the question log itself"),
        (with_("--questions", str(long_q)), "long.jsonl:2: question of 1199 characters (at most 1000)"),
        (with_("--out", str(damaged)), "damaged.jsonl:1: judge route 1: path must be an object, got None"),
        (with_("--out", str(empty_routes)), "empty_routes.jsonl:1: field 'judge' must hold a non-empty list 'routes'"),
        (with_("--out", str(no_judge)), "no_judge.jsonl:1: no 'judge' field"),
        (with_("--out", str(planets)), "planets.jsonl:1: judge route 1 names table(s) ['planets'] that the schema lacks"),
        (with_("--out", str(longer)), "longer.jsonl:4: more judged lines than the question log's 3 questions"),
        (with_("--out", str(tmp_path)), "--out: " + str(tmp_path) + " is a folder; give a file's path"),
        (with_("--rerank.top-k", "4"), "judged.jsonl:1: judged with other --rerank settings: top_k 3 (now 4)"),
        (with_("--rerank.temperature", "1.0"), "temperature 2.7 (now 1.0)"),
        (with_("--rerank.model", str(tmp_path)), "--rerank.model: "),
    ):
        if "--rerank.model" in message:  # a fresh --out, so the model is loaded (and refused)
            bad_args = [*bad_args[: bad_args.index("--out") + 1], str(tmp_path / "fresh.jsonl"), *bad_args[bad_args.index("--out") + 2 :]]
        with pytest.raises(SystemExit) as exc:
            run_main(lambda a=bad_args: judge_main(a))
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    # a question longer than the router reads is refused with its line in the log (not its chunk)
    wordy = tmp_path / "wordy.jsonl"
    wordy.write_text(json.dumps({"question": "ok"}) + "\n\n" + json.dumps({"question": "which orders " * 40}) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        run_main(lambda: judge_main([*args[:5], str(wordy), "--out", str(tmp_path / "wordy_out.jsonl"), *args[8:]]))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wordy.jsonl:3: question has" in err[0] and "limit of 64" in err[0], err


def test_a_stopped_judge_run_keeps_what_it_judged(shop: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import generator.rerank as rerank
    from generator.judge import main as judge_main

    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("which orders did Alice Martin place",
                                                                       "how many items are in order 2", "list the products")),
                   encoding="utf-8")
    out = tmp_path / "judged.jsonl"
    real, calls = rerank.route_and_rerank, []

    def stop_on_second(*a: object, **kw: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM) while the second question is scored
        return real(*a, **kw)

    monkeypatch.setattr(rerank, "route_and_rerank", stop_on_second)
    args = ["--router", str(shop["router"]), "--data", str(shop["data"]), "--questions", str(log), "--out", str(out),
            "--rerank.model", DEFAULT_GENERATOR, "--rerank.top-k", "2", "--rerank.n-examples", "0", "--save-every", "100",
            "--threads", "1", "--no-progress"]
    with pytest.raises(KeyboardInterrupt):
        judge_main(args)
    saved = [json.loads(s) for s in out.read_text(encoding="utf-8").splitlines()]
    assert [r["question"] for r in saved] == ["which orders did Alice Martin place"] and saved[0]["judge"]["top_k"] == 2
    monkeypatch.setattr(rerank, "route_and_rerank", real)
    again = judge_main(args)  # continued from the saved question
    assert (again["n"], again["judged"]) == (3, 2) and len(out.read_text(encoding="utf-8").splitlines()) == 3
