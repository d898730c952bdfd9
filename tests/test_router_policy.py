"""The router policy: a distribution over legal paths only, chain-rule heads, SB3-style API, separable critic.

A tiny randomly initialised BERT (2 layers, hidden 32) with MiniLM's tokenizer keeps these fast;
the network's quality does not matter here, only the probability bookkeeping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.errors import ConfigError, DataError
from core.graph import SchemaGraph
from core.schema import introspect
from router.model import PathSpace, RouterModel, RouterModelConfig
from router.policy import RouterPolicy, grouped_logsumexp

QUESTIONS = [
    "which products did alice martin order",
    "list the categories",
    "how many orders were shipped to berlin customers",
]


@pytest.fixture(scope="module")
def tok() -> Any:
    """MiniLM's tokenizer (a fast WordPiece tokenizer with offsets)."""
    from transformers import AutoTokenizer

    from data_pipeline.encoders import resolve_encoder

    return AutoTokenizer.from_pretrained(resolve_encoder("all-MiniLM-L6-v2"))


def tiny_model(tok: Any, trainable_layers: int = 1, max_question_tokens: int = 32) -> RouterModel:
    """A 2-layer hidden-32 BERT with ``tok`` wrapped as a router (random weights, seeded)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    enc = BertModel(
        BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64),
        add_pooling_layer=False,
    )  # fmt: skip
    cfg = RouterModelConfig(encoder="tiny", hidden_size=32, num_layers=2, trainable_layers=trainable_layers,
                            head_dim=16, query_prefix="", passage_prefix="",
                            max_question_tokens=max_question_tokens)  # fmt: skip
    return RouterModel(cfg, enc, tok)


@pytest.fixture
def graph(tiny_db: Path) -> SchemaGraph:
    return SchemaGraph(introspect(tiny_db), max_hops=3)


@pytest.fixture
def policy(graph: SchemaGraph, tok: Any) -> RouterPolicy:
    return RouterPolicy(tiny_model(tok), PathSpace(graph)).eval()


def test_grouped_logsumexp_matches_per_group_and_empty_group_is_minus_inf() -> None:
    v = torch.tensor([[1.0, 2.0, 3.0, -1.0]])
    got = grouped_logsumexp(v, torch.tensor([0, 0, 2, 2]), 3)
    assert got[0, 0] == pytest.approx(torch.logsumexp(torch.tensor([1.0, 2.0]), 0).item())
    assert got[0, 1] == float("-inf")
    assert got[0, 2] == pytest.approx(torch.logsumexp(torch.tensor([3.0, -1.0]), 0).item())


def test_joint_is_a_distribution_over_the_legal_paths(policy: RouterPolicy) -> None:
    dist = policy.distribution(policy.make_batch(QUESTIONS))
    assert dist.log_prob.shape == (3, 32)  # 32 legal paths in the tiny shop (test_schema_graph)
    assert torch.allclose(dist.log_prob.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert torch.isfinite(dist.log_prob).all()


def test_heads_are_chain_rule_factors_of_the_joint(policy: RouterPolicy) -> None:
    space = policy.space
    dist = policy.distribution(policy.make_batch(QUESTIONS))
    summed = dist.anchor_log_prob[:, space.path_anchor] + dist.via_log_prob[:, space.path_pair] + dist.target_log_prob
    assert torch.allclose(summed, dist.log_prob, atol=1e-5)
    # each head is a distribution over the choices legal given the earlier ones
    assert torch.allclose(dist.anchor_log_prob.exp().sum(-1), torch.ones(3), atol=1e-5)
    for a in range(space.n_tables):
        pairs = space.pair_anchor == a
        assert torch.allclose(dist.via_log_prob[:, pairs].exp().sum(-1), torch.ones(3), atol=1e-5)
    for p in range(space.n_pairs):
        paths = space.path_pair == p
        assert torch.allclose(dist.target_log_prob[:, paths].exp().sum(-1), torch.ones(3), atol=1e-5)
    # "customers" starts paths through orders only: via options beyond that are not scored at all
    c = space.table_index["customers"]
    vias = {space.vias[int(v)] for v in space.pair_via[space.pair_anchor == c]}
    assert vias == {(), ("orders",), ("orders", "order items")}


def test_forward_samples_legal_paths_and_evaluate_actions_agrees(policy: RouterPolicy) -> None:
    batch = policy.make_batch(QUESTIONS)
    torch.manual_seed(1)
    actions, values, log_prob = policy(batch)
    assert actions.shape == values.shape == log_prob.shape == (3,)
    assert all(0 <= int(a) < policy.space.n_paths for a in actions)
    v2, lp2, ent = policy.evaluate_actions(batch, actions)
    assert torch.allclose(v2, values) and torch.allclose(lp2, log_prob)
    dist = policy.distribution(batch)
    assert torch.allclose(ent, -(dist.log_prob.exp() * dist.log_prob).sum(-1))
    assert torch.allclose(policy.predict_values(batch), values)
    det, _, det_lp = policy(batch, deterministic=True)
    assert torch.equal(det, dist.log_prob.argmax(-1))
    assert torch.allclose(det_lp, dist.log_prob.max(-1).values)


def test_sampling_follows_the_distribution(policy: RouterPolicy) -> None:
    batch = policy.make_batch(QUESTIONS[:1])
    dist = policy.distribution(batch)
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([dist.sample(gen) for _ in range(4000)]).squeeze(-1)
    freq = torch.bincount(draws, minlength=policy.space.n_paths).float() / len(draws)
    assert (freq - dist.log_prob.exp()[0]).abs().max() < 0.03


def test_evaluate_actions_rejects_an_action_outside_the_legal_paths(policy: RouterPolicy) -> None:
    with pytest.raises(IndexError, match=r"\[0, 32\)"):
        policy.evaluate_actions(policy.make_batch(QUESTIONS[:1]), torch.tensor([32]))


def test_critic_gradient_never_reaches_the_actor(policy: RouterPolicy) -> None:
    policy.train()
    actor, critic = policy.actor_parameters(), policy.critic_parameters()
    assert not {id(p) for p in actor} & {id(p) for p in critic}
    trainable = {id(p) for p in policy.parameters() if p.requires_grad}
    assert trainable == {id(p) for p in actor} | {id(p) for p in critic}
    batch = policy.make_batch(QUESTIONS)
    values, log_prob, entropy = policy.evaluate_actions(batch, torch.tensor([0, 5, 9]))
    values.pow(2).sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in actor)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in critic[:2])
    policy.zero_grad(set_to_none=True)
    (-log_prob.sum() - entropy.sum()).backward()
    assert all(p.grad is None for p in critic)
    moved = [p for p in actor if p.grad is not None and p.grad.abs().sum() > 0]
    assert len(moved) > len(actor) // 2


def test_frozen_layers_do_not_train_and_stay_in_eval_mode(tok: Any) -> None:
    model = tiny_model(tok, trainable_layers=1)
    assert not any(p.requires_grad for p in model.encoder.embeddings.parameters())
    assert not any(p.requires_grad for p in model.encoder.encoder.layer[0].parameters())
    assert all(p.requires_grad for p in model.encoder.encoder.layer[1].parameters())
    model.train()
    assert not model.encoder.encoder.layer[0].training and model.encoder.encoder.layer[1].training
    ids, mask = model.tokenize(QUESTIONS)
    model.eval()
    with torch.no_grad():
        full = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        split = model.encode(ids, mask)
    assert torch.allclose(full, split, atol=1e-5)


def test_observation_mapping_gives_the_same_distribution(policy: RouterPolicy) -> None:
    batch = policy.make_batch(QUESTIONS)
    obs = {"input_ids": batch.input_ids.numpy(), "attention_mask": batch.attention_mask.numpy()}
    again = policy.as_batch(obs)  # links recomputed from the decoded token ids
    assert torch.equal(again.links, batch.links)
    assert torch.allclose(policy.distribution(obs).log_prob, policy.distribution(batch).log_prob, atol=1e-6)
    single = policy.as_batch({k: v[0] for k, v in obs.items()})
    assert single.input_ids.shape[0] == 1


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_question_is_refused(policy: RouterPolicy, bad: str) -> None:
    with pytest.raises(DataError, match=r"question:2: question is empty"):
        policy.make_batch(["list the categories", bad])


def test_overlong_question_is_refused_not_cut(graph: SchemaGraph, tok: Any) -> None:
    policy = RouterPolicy(tiny_model(tok, max_question_tokens=8), PathSpace(graph))
    with pytest.raises(DataError, match=r"question:1: question has \d+ tokens, more than the router's limit of 8"):
        policy.make_batch(["which products did alice martin order in the spring of last year"])


def test_set_space_retargets_to_another_graph(policy: RouterPolicy, graph: SchemaGraph) -> None:
    policy.set_space(PathSpace(SchemaGraph(graph.schema, max_hops=1)))
    dist = policy.distribution(policy.make_batch(QUESTIONS))
    assert dist.log_prob.shape == (3, 16)  # 6 single-table + 10 one-hop paths


def test_unsplittable_encoder_must_be_fully_frozen() -> None:
    from torch import nn

    class Flat(nn.Module):
        config = None

    cfg = RouterModelConfig(hidden_size=8, num_layers=2, trainable_layers=1, head_dim=4)
    with pytest.raises(ConfigError, match="trainable_layers"):
        RouterModel(cfg, Flat(), tokenizer=None)  # type: ignore[arg-type]


def test_batch_marks_the_tokens_that_name_each_table(policy: RouterPolicy) -> None:
    b = policy.make_batch(["list the order items of the customer alice"])
    assert b.mentions is not None and b.mentions.shape == (1, b.input_ids.shape[1], 6)
    tokens = policy.model.tokenizer.convert_ids_to_tokens(b.input_ids[0].tolist())
    idx = policy.space.table_index

    def named(table: str) -> list[str]:
        return [t for t, m in zip(tokens, b.mentions[0, :, idx[table]].tolist(), strict=True) if m]

    assert named("order items") == ["order", "items"]
    assert named("orders") == []  # "order" is inside the longer mention of "order items"
    assert named("customers") == ["customer"]


def prior_on_off(policy: RouterPolicy, batch: Any, name: str, weight: float = 4.0) -> tuple[Any, Any, Any]:
    """The distributions without the priors (what SFT and PPO optimise), with the prior ``name``
    at ``weight``, and with it at 0."""
    with torch.no_grad():
        off = policy.distribution(batch)
        setattr(policy.model.config, name, weight)
        on = policy.distribution(batch, with_anchor_prior=True)
        setattr(policy.model.config, name, 0.0)
        zero = policy.distribution(batch, with_anchor_prior=True)
    return off, on, zero


def test_anchor_prior_adds_its_weight_times_the_anchor_support_to_every_path(graph: SchemaGraph, tok: Any) -> None:
    from core.values import ValueIndex
    from router.text import anchor_support

    values = ValueIndex.from_values({("customers", "name"): ["Alice Martin"]})
    policy = RouterPolicy(tiny_model(tok), PathSpace(graph, values)).eval()
    questions = ["which products did alice martin order", "list the categories"]
    batch = policy.make_batch(questions)
    support = anchor_support(batch.links)
    idx = policy.space.table_index
    assert support[0, idx["customers"]] == 1.0 and support[0].sum() == 1.0  # the value's table only
    assert support[1, idx["categories"]] == 1.0 and support[1].sum() == 1.0  # no value: the named table
    off, on, zero = prior_on_off(policy, batch, "anchor_prior")
    assert torch.equal(zero.log_prob, off.log_prob)
    expected = (off.log_prob + 4.0 * support[:, policy.space.path_anchor]).log_softmax(-1)
    assert torch.allclose(on.log_prob, expected, atol=1e-5)
    assert on.anchor_log_prob[0, idx["customers"]] > off.anchor_log_prob[0, idx["customers"]]
    assert on.anchor_log_prob[1, idx["categories"]] > off.anchor_log_prob[1, idx["categories"]]


def test_who_prior_adds_its_weight_to_the_routes_ending_at_the_table_whose_verb_a_who_question_uses(
    graph: SchemaGraph, tok: Any
) -> None:
    from router.text import who_support

    policy = RouterPolicy(tiny_model(tok), PathSpace(graph)).eval()
    policy.model.config.anchor_prior = 0.0
    questions = ["who ordered the chai", "which customers ordered the chai", "who is in the categories"]
    batch = policy.make_batch(questions)
    support = who_support(batch.links)
    idx = policy.space.table_index
    assert support[0, idx["customers"]] == 1.0 and support[0].sum() == 1.0  # "who" + the customers' verb
    assert support[1].sum() == 0.0  # no "who"
    assert support[2].sum() == 0.0  # "who" without any table's verb
    off, on, zero = prior_on_off(policy, batch, "who_prior")
    assert torch.equal(zero.log_prob, off.log_prob)
    expected = (off.log_prob + 4.0 * support[:, policy.space.path_target]).log_softmax(-1)
    assert torch.allclose(on.log_prob, expected, atol=1e-5)
    assert torch.allclose(on.log_prob[1:], off.log_prob[1:])
    ends_at_customers = policy.space.path_target == idx["customers"]
    assert on.log_prob[0, ends_at_customers].logsumexp(0) > off.log_prob[0, ends_at_customers].logsumexp(0)


@pytest.mark.parametrize("name", ["anchor_prior", "who_prior"])
@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_priors_must_be_finite_non_negative_numbers(name: str, bad: float) -> None:
    with pytest.raises(ConfigError, match=name):
        RouterModelConfig(**{name: bad})
