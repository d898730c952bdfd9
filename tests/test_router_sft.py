"""Router SFT end to end on a schema made in the test: it learns its training set, saves, reloads
bit-identically, refuses another schema unless re-targeted, and routes from the command line.

The real smallest encoder (all-MiniLM-L6-v2) trains for a few dozen steps with 4 of its 6
layers frozen; one module-scoped run feeds every test here.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_shop

from core.dataset import BuiltDataset, save_dataset
from core.errors import CheckpointError, ConfigError, DataError
from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import introspect
from router.evaluate import evaluate_router
from router.model import RouterModel
from router.route import Router
from router.route import main as route_main
from router.train_sft import SFTConfig, SFTResult, train
from router.train_sft import main as sft_main

ENCODER = "all-MiniLM-L6-v2"
P = JoinPath

# (question, path) over the tiny shop: customers <- orders <- order items -> products -> {categories, suppliers}
LABELLED = [
    ("list all customers in Berlin", P("customers", (), "customers")),
    ("which orders did the customer Alice Martin place", P("customers", (), "orders")),
    ("which products did the customer Bob Chen buy", P("customers", ("orders", "order items"), "products")),
    ("what category is the product Green Tea in", P("products", (), "categories")),
    ("which supplier makes the product Smoked Salmon", P("products", (), "suppliers")),
    ("how many order items does order 3 have", P("orders", (), "order items")),
    ("list the products in the category Seafood", P("categories", (), "products")),
    ("which orders contain products of the supplier Tokyo Traders",
     P("suppliers", ("products", "order items"), "orders")),
    ("show every supplier and its country", P("suppliers", (), "suppliers")),
    ("which categories does the supplier Nordic Fish AS supply", P("suppliers", ("products",), "categories")),
    ("what is the price of the product Black Coffee", P("products", (), "products")),
    ("which customer placed order 2", P("orders", (), "customers")),
]


def write_data_set(db: Path, out: Path, rows: list[tuple[str, JoinPath]] = LABELLED) -> Path:
    """A data set folder whose train and validation splits both hold ``rows``."""
    schema = introspect(db)
    graph = SchemaGraph(schema, max_hops=3)
    samples = [
        Sample(f"shop-{split}-{i}", "shop", q, "en", path, graph.skeleton(path), split=split)
        for split in ("train", "validation")
        for i, (q, path) in enumerate(rows)
    ]
    return save_dataset(out, BuiltDataset(schema, graph, samples, db))


def tiny_config(data: Path, out: Path, **kw: object) -> SFTConfig:
    opts: dict[str, object] = dict(
        encoder=ENCODER, trainable_layers=2, head_dim=64, epochs=16, patience=16, batch_size=4, lr=3e-3,
        encoder_lr=2e-4, warmup_ratio=0.05, value_calibration_epochs=20, threads=1, progress=False,
        tensorboard=True, eval_splits=("train", "validation"),
    )  # fmt: skip
    opts.update(kw)
    return SFTConfig(data=data, out=out, **opts)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("router_sft")
    db = make_tiny_shop(root / "shop.sqlite")
    data = write_data_set(db, root / "data")
    return {"root": root, "db": db, "data": data}


@pytest.fixture(scope="module")
def trained(shop: dict[str, Path]) -> SFTResult:
    torch.manual_seed(0)
    return train(tiny_config(shop["data"], shop["root"] / "ckpt"))


def test_sft_learns_its_training_set_to_100_percent(trained: SFTResult, shop: dict[str, Path]) -> None:
    assert trained.metrics["train"]["full_path_acc"] == 1.0
    router = Router.from_pretrained(trained.out)
    samples = [Sample(str(i), "shop", q, "en", p, "") for i, (q, p) in enumerate(LABELLED)]
    m = evaluate_router(router, samples, router.graph)
    assert m["full_path_acc"] == 1.0 and m["legal_rate"] == 1.0
    assert m["by_hops"]["3"]["n"] == 2 and m["by_hops"]["3"]["full_path_acc"] == 1.0


def test_sft_writes_metrics_logs_and_a_complete_checkpoint(trained: SFTResult, shop: dict[str, Path]) -> None:
    out = trained.out
    for name in ("model.safetensors", "config.json", "schema.json", "eval.json", "metrics.jsonl"):
        assert (out / name).is_file(), name
    assert (out / "encoder" / "config.json").is_file() and (out / "encoder" / "tokenizer.json").is_file()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["schema_fingerprint"] == introspect(shop["db"]).fingerprint()
    assert cfg["model"]["encoder"] == ENCODER and cfg["training"]["via_nonnull_weight"] == 10.0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows[-1]["train/loss"] < rows[0]["train/loss"]
    assert {"route/full_path_acc", "train/via_ce", "train/value_loss"} <= set(rows[0])
    logs = Path(str(out) + ".logs")
    assert (logs / "metrics.jsonl").is_file() and any((logs / "tensorboard").iterdir())
    # the critic was fitted to the final policy: its error is far below the reward's spread
    assert trained.metrics["value"]["value/train_mse"] < 0.05


def test_every_trainable_parameter_moved(trained: SFTResult) -> None:
    fresh = RouterModel.from_encoder(ENCODER, trainable_layers=2, head_dim=64)
    before = dict(fresh.named_parameters())
    after = dict(trained.model.named_parameters())
    for name, p in after.items():
        if p.requires_grad:
            assert not torch.equal(p, before[name]), f"{name} did not change"
        else:
            assert torch.equal(p, before[name]), f"frozen {name} changed"


def test_saved_router_reloads_bit_identically_and_routes_the_same(trained: SFTResult) -> None:
    reloaded, meta = RouterModel.from_pretrained(trained.out)
    a, b = trained.model.state_dict(), reloaded.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    questions = [q for q, _ in LABELLED]
    live = Router(trained.policy.eval(), meta).route_batch(questions, top_k=3)
    again = Router.from_pretrained(trained.out).route_batch(questions, top_k=3)
    assert [r.path for r in live] == [r.path for r in again]
    assert [r.prob for r in live] == [r.prob for r in again]  # exactly, not approximately
    r = again[2]
    assert r.prob == pytest.approx(r.anchor_prob * r.via_prob * r.target_prob, rel=1e-4)
    assert r.top_k[0] == (r.path, r.prob) and len(r.top_k) == 3
    assert r.skeleton.startswith("SELECT COUNT(*) FROM customers JOIN orders")


def _shop_with_reviews(path: Path) -> Path:
    db = make_tiny_shop(path)
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER REFERENCES products(id), stars INTEGER);"
        "INSERT INTO reviews VALUES (1, 1, 5), (2, 2, 3);"
    )
    conn.commit()
    conn.close()
    return db


def test_another_schema_is_refused_naming_both_fingerprints(trained: SFTResult, shop: dict[str, Path]) -> None:
    other = _shop_with_reviews(shop["root"] / "shop_reviews.sqlite")
    want, got = introspect(shop["db"]).fingerprint(), introspect(other).fingerprint()
    assert want != got
    with pytest.raises(CheckpointError, match=rf"fingerprint {want}.*fingerprint {got}.*retarget"):
        Router.from_pretrained(trained.out, other)


def test_retarget_routes_over_the_new_schemas_tables(trained: SFTResult, shop: dict[str, Path]) -> None:
    other = _shop_with_reviews(shop["root"] / "shop_reviews2.sqlite")
    router = Router.from_pretrained(trained.out, other, retarget=True)
    assert router.meta["retargeted"] is True
    assert "reviews" in router.schema.table_names
    assert router.graph.is_legal(JoinPath("reviews", (), "products"))
    routes = router.route_batch([q for q, _ in LABELLED])
    assert all(router.graph.is_legal(r.path) for r in routes)
    right = sum(r.path == p for r, (_, p) in zip(routes, LABELLED, strict=True))
    # the same questions still route over the old tables although a seventh table competes
    assert right >= 10, [str(r.path) for r in routes]


def test_route_command_line_text_and_file(trained: SFTResult, shop: dict[str, Path], capsys) -> None:
    routes = route_main(["--router", str(trained.out), "which products did the customer Bob Chen buy"])
    assert routes[0].path == LABELLED[2][1]
    printed = capsys.readouterr().out
    assert "customers" in printed and "orders -> order items" in printed and "skeleton" in printed
    infile, outfile = shop["root"] / "in.jsonl", shop["root"] / "out.jsonl"
    infile.write_text(
        json.dumps({"id": "a", "question": LABELLED[5][0], "path": LABELLED[5][1].to_dict()}) + "\n"
        + json.dumps({"question": LABELLED[0][0]}) + "\n"
    )  # fmt: skip
    route_main(["--router", str(trained.out), "--file", str(infile), "--out", str(outfile)])
    rows = [json.loads(line) for line in outfile.read_text().splitlines()]
    assert rows[0]["id"] == "a" and rows[0]["correct"] is True
    assert rows[1]["path"] == LABELLED[0][1].to_dict() and "correct" not in rows[1]


def test_route_label_with_unknown_table_names_file_and_line(trained: SFTResult, shop: dict[str, Path]) -> None:
    infile = shop["root"] / "bad_labels.jsonl"
    infile.write_text(
        json.dumps({"question": "list customers", "path": {"anchor": "customers", "via": [], "target": "customers"}})
        + "\n"
        + json.dumps({"question": "list reviews", "path": {"anchor": "reviews", "via": [], "target": "reviews"}})
        + "\n"
    )
    with pytest.raises(DataError, match=r"bad_labels.jsonl:2: unknown table 'reviews'"):
        route_main(["--router", str(trained.out), "--file", str(infile)])


@pytest.mark.parametrize(("question", "message"), [("", "question is empty"), ("   ", "question is empty"),
                                                   ("word " * 200, "more than the router's limit")])  # fmt: skip
def test_route_refuses_empty_and_overlong_questions(trained: SFTResult, question: str, message: str) -> None:
    router = Router.from_pretrained(trained.out)
    with pytest.raises(DataError, match=message):
        router.route(question)


def test_training_labels_with_an_unknown_table_name_file_and_line(shop: dict[str, Path], tmp_path: Path) -> None:
    data = write_data_set(shop["db"], tmp_path / "data")
    lines = (data / "samples.jsonl").read_text().splitlines()
    rec = json.loads(lines[2])
    rec["path"] = {"anchor": "customers", "via": [], "target": "invoices"}
    lines[2] = json.dumps(rec)
    (data / "samples.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"samples.jsonl:3: unknown table 'invoices'"):
        sft_main(["--data", str(data), "--out", str(tmp_path / "ckpt"), "--encoder", ENCODER])


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"epochs": 0}, "epochs"), ({"via_nonnull_weight": 0.5}, "via_nonnull_weight"),
     ({"warmup_ratio": 1.0}, "warmup_ratio"), ({"init": Path("x"), "encoder": ENCODER}, "encoder")],
)  # fmt: skip
def test_bad_training_options_name_the_field(kw: dict[str, object], field: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        SFTConfig(data=tmp_path, out=tmp_path / "o", **kw)  # type: ignore[arg-type]
    assert exc.value.where == field


def test_bad_option_on_the_command_line_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        sft_main(["--data", str(tmp_path), "--out", str(tmp_path / "o"), "--epochs", "0"])
    assert exc.value.code == 2
    assert "epochs: must be >= 1, got 0" in capsys.readouterr().err


def test_checkpoint_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no config.json"):
        Router.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CheckpointError, match="config.json: format is 'something-else'"):
        RouterModel.from_pretrained(tmp_path)


def test_router_follows_weight_updates_and_saves_with_its_schema(trained: SFTResult, tmp_path: Path) -> None:
    router = Router.from_pretrained(trained.out)
    q = LABELLED[2][0]
    before = router.route(q).prob
    with torch.no_grad():  # an in-place update, as an optimizer step makes
        router.policy.model.key["anchor"].weight.mul_(0.0)
    after = router.route(q).prob
    assert after != before  # candidate encodings were recomputed
    out = router.save_pretrained(tmp_path / "ppo", {"ppo": {"updates": 3}})
    again = Router.from_pretrained(out)
    assert again.meta["ppo"] == {"updates": 3} and again.meta["training"]["encoder"] == ENCODER
    assert again.meta["schema_fingerprint"] == router.schema.fingerprint()
    assert again.route(q).prob == after


# --------------------------------------------------------------------------- one router on two schemas

SCHOOL_DDL = """
CREATE TABLE teachers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, office TEXT);
CREATE TABLE courses (id INTEGER PRIMARY KEY, title TEXT NOT NULL, teacher_id INTEGER REFERENCES teachers(id));
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT NOT NULL, year INTEGER);
CREATE TABLE enrollments (id INTEGER PRIMARY KEY, student_id INTEGER REFERENCES students(id),
    course_id INTEGER REFERENCES courses(id), grade TEXT);
INSERT INTO teachers VALUES (1, 'Dr Weber', 'A12'), (2, 'Dr Sato', 'B3');
INSERT INTO courses VALUES (1, 'Algebra', 1), (2, 'Poetry', 2);
INSERT INTO students VALUES (1, 'Anna Berg', 2), (2, 'Omar Haddad', 3);
INSERT INTO enrollments VALUES (1, 1, 1, 'A'), (2, 2, 1, 'B'), (3, 2, 2, 'A');
"""

SCHOOL = [
    ("list every student in year 3", P("students", (), "students")),
    ("which courses does the teacher Dr Weber teach", P("teachers", (), "courses")),
    ("which courses did the student Anna Berg take", P("students", ("enrollments",), "courses")),
    ("which teachers taught the student Omar Haddad", P("students", ("enrollments", "courses"), "teachers")),
    ("what grades were given in the course Algebra", P("courses", (), "enrollments")),
    ("which students took the course Poetry", P("courses", ("enrollments",), "students")),
    ("what is the office of the teacher Dr Sato", P("teachers", (), "teachers")),
    ("who teaches the course Algebra", P("courses", (), "teachers")),
]


@pytest.fixture(scope="module")
def two_schemas(shop: dict[str, Path]) -> dict[str, object]:
    root = shop["root"] / "multi"
    school_db = root / "school.sqlite"
    root.mkdir()
    conn = sqlite3.connect(school_db)
    conn.executescript(SCHOOL_DDL)
    conn.close()
    write_data_set(shop["db"], root / "data" / "shop")
    write_data_set(school_db, root / "data" / "school", SCHOOL)
    torch.manual_seed(0)
    result = train(tiny_config(root / "data", root / "ckpt"))
    return {"root": root, "school_db": school_db, "result": result}


def test_one_router_learns_both_schemas_training_sets(two_schemas: dict[str, object], shop: dict[str, Path]) -> None:
    result = two_schemas["result"]
    assert isinstance(result, SFTResult)
    m = result.metrics["train"]
    assert m["n"] == len(LABELLED) + len(SCHOOL)
    assert {k: v["n"] for k, v in m["by_schema"].items()} == {"shop": len(LABELLED), "school": len(SCHOOL)}
    assert m["full_path_acc"] == 1.0, {k: v["full_path_acc"] for k, v in m["by_schema"].items()}
    # each schema routes its own questions through a router loaded from disk, no retarget needed
    router = Router.from_pretrained(result.out, shop["db"])
    school = router.for_schema(SchemaGraph(introspect(two_schemas["school_db"]), max_hops=3))
    for r, rows in ((router, LABELLED), (school, SCHOOL)):
        assert r.meta["retargeted"] is False
        assert [x.path for x in r.route_batch([q for q, _ in rows])] == [p for _, p in rows]
    assert school.policy.model is router.policy.model


def test_multi_schema_checkpoint_records_every_schema(two_schemas: dict[str, object], shop: dict[str, Path]) -> None:
    result = two_schemas["result"]
    assert isinstance(result, SFTResult)
    cfg = json.loads((result.out / "config.json").read_text())
    want = {"shop": introspect(shop["db"]).fingerprint(), "school": introspect(two_schemas["school_db"]).fingerprint()}
    assert {e["name"]: e["fingerprint"] for e in cfg["schemas"]} == want
    assert "schema_fingerprint" not in cfg and not (result.out / "schema.json").exists()
    snaps = json.loads((result.out / "schemas.json").read_text())
    assert [s["name"] for s in snaps] == [e["name"] for e in cfg["schemas"]] == ["school", "shop"]
    with pytest.raises(CheckpointError, match=r"trained on 2 schemas \(school, shop\); pass the schema"):
        Router.from_pretrained(result.out)
    other = _shop_with_reviews(two_schemas["root"] / "reviews.sqlite")
    got = introspect(other).fingerprint()
    with pytest.raises(CheckpointError, match=rf"2 schemas .*{want['school']}.*fingerprint {got}.*retarget"):
        Router.from_pretrained(result.out, other)
    assert Router.from_pretrained(result.out, other, retarget=True).meta["retargeted"] is True
    # a router bound to one schema saves as a single-schema checkpoint of that schema
    saved = Router.from_pretrained(result.out, shop["db"]).save_pretrained(two_schemas["root"] / "bound")
    bound = json.loads((saved / "config.json").read_text())
    assert bound["schema_fingerprint"] == want["shop"] and "schemas" not in bound
    assert Router.from_pretrained(saved).schema.name == "shop"


def test_a_folder_without_data_sets_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: not a data set folder \(no schema.json\) and no data set folders"):
        train(tiny_config(tmp_path / "empty", tmp_path / "ckpt"))


def test_routing_on_the_training_database_file_keeps_the_data_sets_descriptions(trained: SFTResult, shop: dict[str, Path],
                                                                              tmp_path: Path) -> None:
    """--db / a SQLite file of the same shape routes with the table texts the router learned, not bare names."""
    import shutil

    ckpt = Path(shutil.copytree(trained.out, tmp_path / "ckpt"))
    snap = json.loads((ckpt / "schema.json").read_text())
    products = next(t for t in snap["tables"] if t["name"] == "products")
    products["description"] = "things the shop sells (goods, items)"
    (ckpt / "schema.json").write_text(json.dumps(snap))
    on_file = Router.from_pretrained(ckpt, shop["db"])
    assert on_file.graph.schema.table("products").description == "things the shop sells (goods, items)"
    assert Path(on_file.graph.schema.source) == Path(shop["db"]).resolve() or on_file.graph.schema.source == str(shop["db"])
    questions = [q for q, _ in LABELLED]
    assert [r.path for r in on_file.route_batch(questions)] == [r.path for r in Router.from_pretrained(ckpt).route_batch(questions)]
