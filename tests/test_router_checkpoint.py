"""The router checkpoint contract (router.checkpoint.RouterCheckpointConfig): one dataclass that
saves, loads and binds; SchemaGraph.to_dict carries max_hops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import dense_schema, make_tiny_shop

from core.errors import CheckpointError
from core.graph import DEFAULT_MAX_HOPS, SchemaGraph
from core.schema import introspect
from router.checkpoint import SCHEMA_FILE, SCHEMAS_FILE, RouterCheckpointConfig, RouterModelConfig, SchemaRecord


@pytest.fixture
def graphs(tmp_path: Path) -> tuple[SchemaGraph, SchemaGraph]:
    shop = introspect(make_tiny_shop(tmp_path / "shop.sqlite"))
    small = introspect(make_tiny_shop(tmp_path / "small.sqlite"), name="small")
    small = type(small)("small", small.tables[:2], (), source="x")  # another shape: another fingerprint
    return SchemaGraph(shop, max_hops=2), SchemaGraph(small, max_hops=1)


def test_graph_round_trips_with_its_max_hops(graphs) -> None:
    g, _ = graphs
    again = SchemaGraph.from_dict(json.loads(json.dumps(g.to_dict())))
    assert again.max_hops == 2 and again.legal_paths == g.legal_paths
    doc = g.to_dict()
    del doc["max_hops"]
    assert SchemaGraph.from_dict(doc).max_hops == DEFAULT_MAX_HOPS


def test_one_schema_checkpoint_saves_loads_and_binds(graphs, tmp_path: Path) -> None:
    g, other = graphs
    ck = RouterCheckpointConfig.for_graphs(RouterModelConfig(head_dim=16), [g], temperature=1.5,
                                           training={"lr": 0.1}, extra={"best_epoch": 3})  # fmt: skip
    ck.save(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    assert (doc["schema_fingerprint"], doc["schema_name"], doc["max_hops"]) == (g.schema.fingerprint(), "shop", 2)
    assert doc["best_epoch"] == 3 and "schemas" not in doc and not (tmp_path / SCHEMAS_FILE).exists()
    back = RouterCheckpointConfig.load(tmp_path)
    assert back == ck and back.model.head_dim == 16 and back.temperature == 1.5
    snap = back.snapshot(tmp_path)
    assert snap.max_hops == 2 and snap.schema.fingerprint() == g.schema.fingerprint()
    # binding: the recorded schema binds (its recorded hops unless the caller or the graph says), another is refused
    bound, known = back.bind(g.schema)
    assert known and bound.max_hops == 2
    assert back.bind(g.schema, max_hops=1)[0].max_hops == 1
    assert back.bind(SchemaGraph(g.schema, max_hops=3))[0].max_hops == 3
    with pytest.raises(CheckpointError, match=rf"^ck: router was trained on schema 'shop' \(fingerprint {g.schema.fingerprint()}\) "
                       rf"but was given schema 'small' \(fingerprint {other.schema.fingerprint()}\); pass retarget"):
        back.bind(other.schema, where="ck")
    retargeted, known = back.bind(other.schema, retarget=True)
    assert not known and retargeted.max_hops == 2  # the checkpoint's hops for a schema it never saw


def test_multi_schema_checkpoint_binds_each_recorded_schema(graphs, tmp_path: Path) -> None:
    g, small = graphs
    ck = RouterCheckpointConfig.for_graphs(RouterModelConfig(), [g, small], multi=True, data=["a", "b"])
    ck.save(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    assert "schema_fingerprint" not in doc and doc["max_hops"] == 2 and not (tmp_path / SCHEMA_FILE).exists()
    assert [e["data"] for e in doc["schemas"]] == ["a", "b"]
    back = RouterCheckpointConfig.load(tmp_path)
    assert back.multi and back.schemas == (SchemaRecord.of(g, "a"), SchemaRecord.of(small, "b"))
    assert back.bind(small.schema)[0].max_hops == 1  # each schema with its own hops
    with pytest.raises(CheckpointError, match=r"trained on 2 schemas \(shop, small\); pass the schema"):
        back.snapshot(tmp_path)
    assert back.bound_to(small).to_dict()["schema_name"] == "small"


@pytest.mark.parametrize(("edit", "message"), [
    ({"format": "x"}, "format is 'x'"),
    ({"version": 1}, "router checkpoint version 1 is not supported"),
    ({"link_features": ["exact"]}, "router reads the link features"),
    ({"model": "nope"}, "malformed router config"),
    ({"training": [1, 2]}, "malformed router config"),
    ({"metrics": "x"}, "malformed router config"),
    ({"max_hops": -1}, "malformed router config"),
    ({"version": "4"}, "version '4' is not supported"),
])  # fmt: skip
def test_bad_configs_are_one_line_naming_the_file(graphs, tmp_path: Path, edit: dict, message: str) -> None:
    RouterCheckpointConfig.for_graphs(RouterModelConfig(), [graphs[0]]).save(tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text()) | edit
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=message) as info:
        RouterCheckpointConfig.load(tmp_path)
    assert str(info.value).startswith(str(tmp_path / "config.json")) and "\n" not in str(info.value)


def test_a_config_nested_too_deep_is_one_line(graphs, tmp_path: Path) -> None:
    RouterCheckpointConfig.for_graphs(RouterModelConfig(), [graphs[0]]).save(tmp_path)
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="unreadable config") as info:
        RouterCheckpointConfig.load(tmp_path)
    assert str(info.value).startswith(str(tmp_path / "config.json")) and "\n" not in str(info.value)


def test_a_recorded_max_hops_with_too_many_paths_names_config_json() -> None:
    # a hostile max_hops in config.json: one clear error naming the file, not an endless enumeration
    g = SchemaGraph(dense_schema(9), max_hops=1)
    ck = RouterCheckpointConfig.for_graphs(RouterModelConfig(head_dim=16), [g])
    doc = ck.to_dict()
    doc["max_hops"] = 10**6
    hostile = RouterCheckpointConfig.from_dict(doc)
    with pytest.raises(CheckpointError, match=r"^runs/r: schema 'dense' has more than 200,000 legal paths of up to 1000000 "
                                              r"joins; .*; max_hops 1000000 is recorded in config\.json$"):
        hostile.bind(g.schema, where="runs/r")
    assert hostile.bind(g.schema, max_hops=1, where="runs/r")[0].max_hops == 1  # the caller's own limit wins
