"""router.pseudo_labels and router.train_sft --pseudo-labels: the judge's best routes as training labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_shop
from test_router_sft import tiny_config, write_data_set

from core.dataset import load_dataset
from core.errors import ConfigError, DataError
from core.graph import JoinPath
from router.pseudo_labels import PSEUDO_TEMPLATE_ID, pseudo_labelled_samples
from router.route import Router
from router.train_sft import SFTConfig, _load_part, train

P = JoinPath
SHOPPING = P("customers", ("orders", "order items"), "products")


def _route(path: JoinPath, p: float) -> dict[str, object]:
    return {"path": {"anchor": path.anchor, "via": list(path.via), "target": path.target}, "p": p}


def _log(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    return path


JUDGED = [
    # line 1: sure enough -> labelled with its best route
    {"question": "Alice Martin's shopping list", "judge": {"routes": [
        _route(SHOPPING, 0.8), _route(P("customers", (), "orders"), 0.2)]}},
    # line 2: the best route below 0.6
    {"question": "Bob Chen stuff", "judge": {"routes": [
        _route(P("customers", (), "orders"), 0.5), _route(P("customers", (), "customers"), 0.4)]}},
    # line 3: not judged
    {"question": "how many suppliers are there"},
    # line 4: Chinese, no lang field
    {"question": "谁供应 Green Tea？", "judge": {"routes": [_route(P("products", (), "suppliers"), 0.9)]}},
    # line 5: best route not a legal path of the schema (customers and products are not joined)
    {"question": "Carla's products", "judge": {"routes": [_route(P("customers", (), "products"), 0.95)]}},
]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pseudo")
    db = make_tiny_shop(root / "shop.sqlite")
    return {"root": root, "data": write_data_set(db, root / "data"), "log": _log(root / "judged.jsonl", JUDGED)}


def test_questions_the_judge_is_sure_of_become_training_samples(shop: dict[str, Path]) -> None:
    graph = load_dataset(shop["data"]).graph
    got = pseudo_labelled_samples(shop["log"], graph, "shop", min_p=0.6)
    assert [(s.question, s.path, s.language) for s in got] == [
        ("Alice Martin's shopping list", SHOPPING, "en"),
        ("谁供应 Green Tea？", P("products", (), "suppliers"), "zh"),
    ]
    assert [s.id for s in got] == ["shop-pseudo-1", "shop-pseudo-4"]
    assert all(s.split == "train" and s.template_id == PSEUDO_TEMPLATE_ID and s.sql == "" for s in got)
    assert got[0].meta["pseudo_label"] == {"log": str(shop["log"]), "line": 1, "p": 0.8}
    lower = pseudo_labelled_samples(shop["log"], graph, "shop", min_p=0.5)
    assert [s.id for s in lower] == ["shop-pseudo-1", "shop-pseudo-2", "shop-pseudo-4"]


def test_a_malformed_judge_names_file_and_line(shop: dict[str, Path], tmp_path: Path) -> None:
    graph = load_dataset(shop["data"]).graph
    bad = _log(tmp_path / "bad.jsonl", [JUDGED[0], {"question": "x", "judge": {"routes": [_route(SHOPPING, 1.5)]}}])
    with pytest.raises(DataError, match=r"bad.jsonl:2: judge route 1: p must be a number in \[0, 1\]"):
        pseudo_labelled_samples(bad, graph)
    with pytest.raises(ConfigError, match="must be in"):
        pseudo_labelled_samples(shop["log"], graph, min_p=1.5)
    with pytest.raises(ConfigError) as exc:
        SFTConfig(data=tmp_path, out=tmp_path / "o", pseudo_weight=0.0)
    assert exc.value.where == "pseudo_weight"


def test_pseudo_labelled_rows_carry_the_pseudo_weight(shop: dict[str, Path]) -> None:
    folder = shop["data"]
    parts = {w: _load_part(tiny_config(folder, shop["root"] / "unused", pseudo_weight=w), folder, None, shop["log"])
             for w in (1.0, 3.0)}  # fmt: skip
    n_generated = len(load_dataset(folder).split("train"))
    for part in parts.values():
        assert part.n_pseudo == 2 and len(part.train) == n_generated + 2
        assert [s.question for s in part.train.samples[-2:]] == ["Alice Martin's shopping list", "谁供应 Green Tea？"]
    for head in ("anchor", "via", "target"):
        one, three = parts[1.0].weights[head], parts[3.0].weights[head]
        assert torch.allclose(three[:n_generated], one[:n_generated])
        assert torch.allclose(three[n_generated:], 3 * one[n_generated:])


def test_sft_learns_the_judges_route_for_a_question_unlike_the_generated_ones(shop: dict[str, Path]) -> None:
    cfg = tiny_config(shop["data"], shop["root"] / "ckpt", pseudo_labels=shop["log"], tensorboard=False)
    torch.manual_seed(0)
    result = train(cfg)
    assert result.metrics["pseudo_labelled"] == {"shop": 2}
    router = Router.from_pretrained(result.out)
    routed = router.route_batch(["Alice Martin's shopping list", "谁供应 Green Tea？"])
    assert [r.path for r in routed] == [SHOPPING, P("products", (), "suppliers")]
