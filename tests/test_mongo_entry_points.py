"""The command lines with ``--backend mongodb --uri ...``: build, route, A/B routing evaluation, and
the gym env on a data set built from the server.

One real wire-protocol server per module (tests/mongo_server.py; under ``CI=true`` a server that
cannot start fails these tests, elsewhere they skip). The tiny shop is built on SQLite
(``samples_per_path=3``), its database copied to the server with ``python -m
data_pipeline.mongo_load``, and the same data set built again from the server: the two must agree
sample for sample, the MongoDB one
carrying its gold aggregation pipelines. A router is an untrained MiniLM with small heads, saved
with the SQLite schema: what matters here is that it loads and routes the same on both backends.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from data_pipeline import BuildConfig, build_dataset, load_dataset
from data_pipeline.backends.mongo_pipeline import execute_pipeline
from data_pipeline.backends.sqlite import execute_readonly
from data_pipeline.build import main as build_main
from core.cli import run_main
from core.errors import CheckpointError, ConfigError
from data_pipeline.mongo_load import main as load_main

from conftest import make_tiny_shop
from mongo_server import MongoServer, running_server

ENCODER = "all-MiniLM-L6-v2"


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines()]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def server():
    yield from running_server()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny shop and its data set built on SQLite."""
    root = tmp_path_factory.mktemp("mongo_cli")
    db = make_tiny_shop(root / "shop.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_dataset(BuildConfig(db=str(db), out=root / "sql", samples_per_path=3, unfiltered_share=0.0))  # MongoDB builds none
    return {"root": root, "db": db, "sql": root / "sql"}


@pytest.fixture(scope="module")
def mongo_shop(server: MongoServer, shop: dict[str, Path]) -> dict[str, Any]:
    """The shop copied to the server, and the data set built from the server by the command line."""
    load_main(["--db", str(shop["sql"]), "--uri", server.db_uri("shop")])
    with server.client() as client:
        before = {n: client["shop"][n].count_documents({}) for n in client["shop"].list_collection_names()}
    out = shop["root"] / "mongo"
    summary = build_main(["--backend", "mongodb", "--uri", server.uri, "--db", "shop", "--out", str(out),
                          "--samples-per-path", "3"])  # fmt: skip
    return {"uri": server.db_uri("shop"), "out": out, "summary": summary, "before": before}


@pytest.fixture(scope="module")
def router_dir(shop: dict[str, Path]) -> Path:
    """An untrained router (small heads) saved with the SQLite data set's schema."""
    from router.model import PathSpace, RouterModel
    from router.policy import RouterPolicy
    from router.route import Router

    ds = load_dataset(shop["sql"])
    model = RouterModel.from_encoder(ENCODER, trainable_layers=1, head_dim=16)
    return Router(RouterPolicy(model, PathSpace(ds.graph))).save_pretrained(shop["root"] / "router")


# ---------------------------------------------------------------------------- no server needed

BAD_OPTIONS = [
    (["--backend", "mongodb"], "error: --uri: --backend mongodb needs --uri mongodb://HOST:PORT/DATABASE"),
    (["--db", "northwind", "--uri", "mongodb://127.0.0.1:1/nw"], "error: --uri: mongodb://127.0.0.1:1/nw needs --backend mongodb"),
    (["--backend", "mongodb", "--uri", "mongodb://127.0.0.1:1"], "error: --uri: name the database: in the URI path"),
    (["--backend", "mongodb", "--uri", "http://127.0.0.1:1/nw"], "error: --uri: expected a mongodb:// URI, got 'http://127.0.0.1:1/nw'"),
    (["--backend", "oracle", "--db", "northwind"], "error: --backend: unknown backend 'oracle'; choose one of sqlite, mongodb"),
    ([], "error: --db: give the SQLite database (a sample name or a file)"),
    (["--backend", "mongodb", "--uri", "mongodb://127.0.0.1:1/nw", "--db", "shop"],
     "error: --db: the URI names database 'nw' but --db says 'shop'; give one"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD_OPTIONS, ids=[m.split(":")[1].strip() + str(i) for i, (_, m) in enumerate(BAD_OPTIONS)])
def test_build_refuses_bad_backend_options_in_one_line(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as code:
        run_main(lambda: build_main([*args, "--out", str(tmp_path / "out")]))
    assert code.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_route_and_ab_refuse_bad_backend_options():
    from evaluation.ab import ABConfig
    from router.route import RouteConfig

    with pytest.raises(ConfigError, match="--uri: --backend mongodb needs --uri"):
        RouteConfig(router=Path("r"), questions=("q",), backend="mongodb")
    with pytest.raises(ConfigError, match="give --uri or --schema"):
        RouteConfig(router=Path("r"), questions=("q",), backend="mongodb", uri="mongodb://h:1/nw", schema=Path("s"))
    with pytest.raises(ConfigError, match='--generator: the generator writes SQL, scored on SQLite; on MongoDB pass --generator ""'):
        ABConfig(data="d", backend="mongodb", uri="mongodb://h:1/nw")
    assert not ABConfig(data="d", backend="mongodb", uri="mongodb://h:1/nw", generator="").generates


# ---------------------------------------------------------------------------- with a server


@pytest.mark.mongo
def test_build_on_mongodb_gives_the_sqlite_samples_with_pipelines_that_run(server, shop, mongo_shop):
    sql_records, mongo_records = _records(shop["sql"]), _records(mongo_shop["out"])
    assert len(mongo_records) == mongo_shop["summary"]["n_samples"] > 50
    pipelines = [r["meta"].pop("pipeline") for r in mongo_records]
    assert mongo_records == sql_records  # questions, paths, entities, SQL, splits, row counts
    schema = json.loads((mongo_shop["out"] / "schema.json").read_text(encoding="utf-8"))
    assert schema["backend"] == "mongodb" and schema["source"] == mongo_shop["uri"] and schema["db_path"] == ""
    assert load_dataset(mongo_shop["out"]).schema.fingerprint() == load_dataset(shop["sql"]).schema.fingerprint()
    assert mongo_shop["summary"]["backend"] == "mongodb" and mongo_shop["summary"]["db_path"] == mongo_shop["uri"]
    with server.client() as client:
        db = client["shop"]
        for rec, text in zip(mongo_records, pipelines, strict=True):
            res = execute_pipeline(db, text)
            assert res.ok and len(res.rows) == rec["n_rows"] > 0, rec["id"]
            assert json.loads(text)["aggregate"] == rec["path"]["anchor"]
        after = {n: db[n].count_documents({}) for n in db.list_collection_names()}
    assert after == mongo_shop["before"]  # the build only read


@pytest.mark.mongo
def test_build_on_mongodb_skips_empty_collections(server, shop, tmp_path):
    """The server is never written: an empty collection's paths are skipped, not filled."""
    import sqlite3

    db = make_tiny_shop(tmp_path / "bare.sqlite")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM suppliers")
    conn.commit()
    conn.close()
    load_main(["--db", str(db), "--uri", server.db_uri("bare_shop")])
    with pytest.warns(UserWarning, match="collections without documents: suppliers; the server is only read"):
        _, summary = build_dataset(BuildConfig(backend="mongodb", uri=server.db_uri("bare_shop"), out=tmp_path / "out",
                                               samples_per_path=3, languages="en"))  # fmt: skip
    skipped = summary["paths"]["skipped"]
    assert skipped and all("suppliers" in s["path"] and s["reason"] == "empty table suppliers" for s in skipped)
    assert summary["synthesized_tables"] == {} and summary["paths"]["used"] == summary["paths"]["legal"] - len(skipped)


@pytest.mark.mongo
def test_route_command_line_reads_the_schema_from_the_server(server, shop, mongo_shop, router_dir, tmp_path):
    from router.route import main as route_main

    question = "which products did the customer Bob Chen buy"
    on_mongo = route_main(["--router", str(router_dir), "--backend", "mongodb", "--uri", mongo_shop["uri"],
                           "--threads", "1", question])  # no --retarget: the copy has the SQLite fingerprint
    skeleton = json.loads(on_mongo[0].skeleton)  # the path's $lookup pipeline, counting what SQL's skeleton counts
    assert skeleton["aggregate"] == on_mongo[0].path.anchor
    graph = load_dataset(shop["sql"]).graph
    with server.client() as client:
        count = execute_pipeline(client["shop"], skeleton)
    assert count.ok and count.rows == execute_readonly(shop["db"], graph.skeleton(on_mongo[0].path)).rows
    assert on_mongo[0].path in load_dataset(shop["sql"]).graph.legal_paths
    # file mode over the MongoDB-built samples: the same answers as over the SQLite ones
    outs = {}
    for name, extra in (("sql", ["--schema", str(shop["sql"])]), ("mongo", ["--backend", "mongodb", "--uri", server.uri, "--db", "shop"])):
        outs[name] = tmp_path / f"{name}.jsonl"
        route_main(["--router", str(router_dir), *extra, "--file", str(mongo_shop["out"] / "samples.jsonl"),
                    "--out", str(outs[name]), "--threads", "1"])  # fmt: skip
    routed = {k: [(r["path"], r["correct"]) for r in map(json.loads, v.read_text().splitlines())] for k, v in outs.items()}
    assert routed["mongo"] == routed["sql"] and len(routed["mongo"]) == mongo_shop["summary"]["n_samples"]
    # another schema on the server: refused without --retarget
    load_main(["--db", str(make_tiny_shop(tmp_path / "s.sqlite")), "--uri", server.db_uri("renamed"), "--name", "other"])
    with server.client() as client:
        client["renamed"]["_route2sql_schema"].update_one({"_id": "schema"}, {"$set": {"schema.foreign_keys": []}})
    with pytest.raises(CheckpointError, match="pass retarget=True / --retarget"):
        route_main(["--router", str(router_dir), "--backend", "mongodb", "--uri", server.db_uri("renamed"), question])


@pytest.mark.mongo
def test_ab_routing_accuracy_on_mongodb_equals_sqlite(shop, mongo_shop, router_dir, tmp_path):
    from evaluation.ab import main as ab_main

    common = ["--sft-router", str(router_dir), "--methods", "sft", "--generator", "", "--split", "train",
              "--progress", "False"]  # fmt: skip
    on_sql = ab_main(["--data", str(shop["sql"]), "--out", str(tmp_path / "sql"), *common])
    on_mongo = ab_main(["--data", str(mongo_shop["out"]), "--backend", "mongodb", "--uri", mongo_shop["uri"],
                        "--out", str(tmp_path / "mongo"), *common])  # fmt: skip
    drop = ("latency_ms",)
    sql_m = {k: v for k, v in on_sql["routing"]["sft"].items() if k not in drop}
    mongo_m = {k: v for k, v in on_mongo["routing"]["sft"].items() if k not in drop}
    assert mongo_m == sql_m and on_mongo["dataset"]["n"] == on_sql["dataset"]["n"] > 20
    assert on_mongo["generation"] == {} and on_mongo["dataset"]["schema_source"] == mongo_shop["uri"]
    assert (tmp_path / "mongo" / "report.md").is_file()
    with pytest.raises(ConfigError, match="was built on MongoDB"):
        ab_main(["--data", str(mongo_shop["out"]), "--out", str(tmp_path / "x"), "--sft-router", str(router_dir)])


@pytest.mark.mongo
def test_ab_refuses_a_server_holding_another_schema(server, mongo_shop, tmp_path):
    from evaluation.ab import main as ab_main

    db = make_tiny_shop(tmp_path / "x.sqlite")
    load_main(["--db", str(db), "--uri", server.db_uri("other_shop"), "--name", "other"])
    with server.client() as client:  # the same collections, no references: another schema
        client["other_shop"]["_route2sql_schema"].update_one({"_id": "schema"}, {"$set": {"schema.foreign_keys": []}})
    with pytest.raises(ConfigError, match=r"--uri: the server's schema 'other' \(fingerprint \w+\) is not the data set's 'shop'"):
        ab_main(["--data", str(mongo_shop["out"]), "--backend", "mongodb", "--uri", server.db_uri("other_shop"),
                 "--generator", "", "--methods", "retrieval", "--out", str(tmp_path / "ab")])  # fmt: skip


@pytest.mark.mongo
def test_env_runs_on_a_data_set_built_from_mongodb(shop, mongo_shop):
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    import envs  # noqa: F401 - registers the env

    env = gym.make("route2sql/SchemaRouting-v0", data_dir=str(mongo_shop["out"]), split=None, featurizer="hashed:64")
    twin = gym.make("route2sql/SchemaRouting-v0", data_dir=str(shop["sql"]), split=None, featurizer="hashed:64")
    inner = env.unwrapped
    assert len(inner.samples) == mongo_shop["summary"]["n_samples"]
    check_env(inner, skip_render_check=True)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        obs_sql, info_sql = twin.reset(seed=seed)
        assert info["sample_id"] == info_sql["sample_id"]
        assert all(np.array_equal(obs[k], obs_sql[k]) for k in obs)
        gold = int(inner.gold_actions[info["sample_index"]])
        _, reward, terminated, _, step_info = env.step(gold)
        assert terminated and step_info["is_success"]
        env.reset(seed=seed)
        _, worse, _, _, wrong_info = env.step((gold + 1) % inner.n_paths)
        assert not wrong_info["is_success"] and worse < reward


@pytest.mark.mongo
def test_generator_refuses_a_data_set_built_on_mongodb(mongo_shop, shop):
    from core.dataset import load_dataset
    from core.errors import DataError

    with pytest.raises(DataError, match=r"schema\.json.*built on MongoDB, but generator\.train_grpo executes SQL"):
        load_dataset(mongo_shop["out"], sql_user="generator.train_grpo")
    copy = load_dataset(shop["sql"]).db_path  # the SQLite twin is accepted in its place
    assert load_dataset(mongo_shop["out"], db_path=copy, sql_user="generator.train_grpo").db_path == copy
    assert load_dataset(mongo_shop["out"]).schema.backend == "mongodb"  # routing-only users are not refused
