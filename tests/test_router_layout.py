"""The router's trainers are scripts, not libraries: what SFT and PPO share lives in
:mod:`router.sft_data`, and no router module imports a trainer; the SFT batches and the PPO
rollout batches pad a question's cached states the same way."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch
from conftest import make_tiny_shop

from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import introspect
from rewards.router import RewardConfig
from router.model import PathSpace, RouterModel
from router.policy import RouterPolicy
from router.rollout import policy_batch, routing_features
from router.sft_data import RewardTable, encode_split

ROUTER = Path(__file__).resolve().parent.parent / "router"
SCRIPTS = {"router.train_sft", "router.train_ppo"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_router_module_imports_a_trainer_script() -> None:
    found = {(p.name, m) for p in ROUTER.glob("*.py") for m in imported_modules(p) if m in SCRIPTS}
    assert found == set()


def test_sft_batches_and_rollout_batches_are_the_same_tensors(tmp_path: Path) -> None:
    graph = SchemaGraph(introspect(make_tiny_shop(tmp_path / "shop.sqlite")), max_hops=2)
    torch.manual_seed(0)
    model = RouterModel.from_encoder("all-MiniLM-L6-v2", trainable_layers=1, head_dim=16)
    policy = RouterPolicy(model, PathSpace(graph))
    questions = ["list all customers in Berlin", "which products did the customer Bob Chen buy from the supplier", "orders"]
    path = JoinPath("customers", (), "orders")
    samples = [Sample(str(i), "shop", q, "en", path, "") for i, q in enumerate(questions)]
    split = encode_split(policy, samples, RewardTable(policy.space, RewardConfig()), "test")
    table = routing_features(split, vocab_size=len(model.tokenizer))
    for idx in ([0], [2, 0], [1, 2, 0]):
        a = split.batch(idx)
        b = policy_batch({k: v[idx] for k, v in table.arrays.items()}, np.asarray(idx), split)
        for name in ("input_ids", "attention_mask", "links", "mentions", "lower"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.shape == y.shape and torch.equal(x, y.to(x.dtype)), name
    assert a.lower is not None and a.lower.shape[1] == max(len(t) for t in split.ids)
