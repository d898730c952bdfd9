"""The schema-routing env and the reward-shaping wrapper (like gymnasium's tests/envs/test_envs.py)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.error import InvalidAction, ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs
from data_pipeline import JoinPath, Sample, SchemaGraph, introspect
from core.errors import ConfigError, DataError
from envs import ENV_IDS, EncoderFeaturizer, FeatureTable, HashedNgramFeaturizer, RewardShapingWrapper, SchemaRoutingEnv

TEMPLATES = (
    "Which {t} belong to the {a} named {e}?",
    "List the {t} for {a} {e}",
    "{a} {e}: show its {t}",
    "for {a} {e} give me the {t} please",
)
ENTITIES = ("Alice", "Bob", "X-17", "Nordic")


def routing_samples(graph: SchemaGraph, templates=TEMPLATES, entities=ENTITIES) -> list[Sample]:
    """Templated questions naming the anchor and target table of every legal path."""
    out = []
    for p in graph.legal_paths:
        for tpl in templates:
            for e in entities:
                q = tpl.format(t=p.target, a=p.anchor, e=e)
                out.append(Sample(id=f"tiny-{len(out)}", db="shop", question=q, language="en", path=p, sql="SELECT 1"))
    return out


class FakeEncoder:
    """A stand-in sentence encoder: hashed features projected to 24 dims, L2-normalised."""

    hidden_size = 24

    def __init__(self) -> None:
        self.calls = 0
        self.proj = np.random.default_rng(0).normal(size=(64, 24))

    def encode(self, texts: list[str], prefix: str) -> torch.Tensor:
        self.calls += 1
        x = HashedNgramFeaturizer(dim=64)([prefix + t for t in texts])["question"] @ self.proj
        return torch.nn.functional.normalize(torch.tensor(x, dtype=torch.float32), dim=-1)


@pytest.fixture
def tiny_graph(tiny_db) -> SchemaGraph:
    return SchemaGraph(introspect(tiny_db), max_hops=3)


def make(env_id: str, graph: SchemaGraph, samples: list[Sample], **kw) -> gym.Env:
    # v0's default featurizer loads the real encoder; the fake one exercises the same class offline.
    if env_id in ("route2sql/SchemaRouting-v0", "route2sql/SchemaRouting-v1"):
        kw.setdefault("featurizer", EncoderFeaturizer(FakeEncoder(), prefix="query: "))
    return gym.make(env_id, graph=graph, samples=samples, disable_env_checker=True, **kw)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registered_envs_pass_both_checkers(env_id, tiny_graph):
    env = make(env_id, tiny_graph, routing_samples(tiny_graph))
    gym_check_env(env.unwrapped, skip_render_check=False)
    sb3_check_env(env.unwrapped, warn=True)
    assert env.action_space.n == 32
    assert env.observation_space["action_mask"].n == 32


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_rollout(env_id, tiny_graph):
    samples = routing_samples(tiny_graph)

    def rollout(seed: int) -> list[tuple]:
        env = make(env_id, tiny_graph, samples)
        env.action_space.seed(seed)
        out = []
        obs, info = env.reset(seed=seed)
        for _ in range(20):
            a = env.action_space.sample()
            obs2, r, term, trunc, info2 = env.step(a)
            out.append((info["sample_index"], int(a), r, term, trunc, obs["question"].tobytes()))
            obs, info = env.reset()
        return out

    a, b = rollout(3), rollout(3)
    assert a == b
    assert rollout(4) != a  # the seed matters
    assert len({x[0] for x in a}) > 5  # reset draws varied samples


def test_step_reward_and_info(tiny_graph):
    samples = routing_samples(tiny_graph)
    env = SchemaRoutingEnv(tiny_graph, samples, featurizer="hashed:64", render_mode="ansi")
    gold = JoinPath("customers", ("orders", "order items"), "products")
    i = next(k for k, s in enumerate(samples) if s.path == gold)
    obs, info = env.reset(options={"sample_index": i})
    assert info == {"sample_index": i, "sample_id": samples[i].id}
    assert env.render() == samples[i].question
    obs2, r, term, trunc, info = env.step(env.action_of(gold))
    # right path, non-null via: 0.5 anchor + 0.1 * 10 via + 0.5 target = 2.0 (at the clip)
    assert (r, term, trunc, info["is_success"], info["hops"]) == (2.0, True, False, True, 3)
    assert info["reward_components"] == {"anchor": 0.5, "via": 1.0, "target": 0.5, "legal": 0.0, "raw_total": 2.0, "total": 2.0}
    assert info["path"] == info["gold_path"] == gold
    assert env.render().startswith("OK ")
    np.testing.assert_array_equal(obs2["question"], obs["question"])

    env.reset(options={"sample_index": i})
    wrong = JoinPath("orders", ("order items",), "products")  # anchor wrong, via wrong, target right
    _, r, _, _, info = env.step(env.action_of(wrong))
    assert r == 0.5 and info["reward_components"]["via"] == 0.0 and not info["is_success"]


def test_step_misuse_raises(tiny_graph):
    env = SchemaRoutingEnv(tiny_graph, routing_samples(tiny_graph), featurizer="hashed:64")
    with pytest.raises(ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(InvalidAction, match=r"\[0, 32\)"):
        env.step(32)
    env.step(0)
    with pytest.raises(ResetNeeded):  # the episode is over after one step
        env.step(0)
    with pytest.raises(ConfigError, match="sample_index"):
        env.reset(options={"sample_index": 10_000})
    with pytest.raises(ConfigError, match="unknown reset option"):
        env.reset(options={"index": 1})


def test_constructor_errors_name_the_argument(tiny_graph, tmp_path):
    samples = routing_samples(tiny_graph)
    with pytest.raises(ConfigError, match="needs graph and samples, or data_dir"):
        SchemaRoutingEnv(tiny_graph)
    with pytest.raises(ConfigError, match="unknown featurizer 'bag'"):
        SchemaRoutingEnv(tiny_graph, samples, featurizer="bag")
    with pytest.raises(ConfigError, match="hashed:<dim>"):
        SchemaRoutingEnv(tiny_graph, samples, featurizer="hashed:big")
    with pytest.raises(ConfigError, match="render_mode"):
        SchemaRoutingEnv(tiny_graph, samples, featurizer="hashed:64", render_mode="human")
    bad = Sample(id="bad-1", db="shop", question="q", language="en", path=JoinPath("customers", (), "products"), sql="")
    with pytest.raises(DataError, match="sample bad-1: gold path customers -> products is not a legal"):
        SchemaRoutingEnv(tiny_graph, [bad], featurizer="hashed:64")
    table = FeatureTable.build(HashedNgramFeaturizer(dim=16), samples[:3], use_disk_cache=False)
    with pytest.raises(ConfigError, match="features hold 3 rows but there are 512 samples"):
        SchemaRoutingEnv(tiny_graph, samples, features=table)
    with pytest.raises(DataError, match="not a data set folder"):
        SchemaRoutingEnv(data_dir=tmp_path)


def test_features_computed_once_and_shared(tiny_graph, tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path))
    samples = routing_samples(tiny_graph)
    enc = FakeEncoder()
    feat = EncoderFeaturizer(enc, prefix="query: ", name="fake")
    calls_after_probe = enc.calls
    table = FeatureTable.build(feat, samples)
    assert enc.calls == calls_after_probe + math.ceil(len(samples) / feat.batch_size)
    FeatureTable.build(feat, samples)  # second build reads the disk cache
    assert enc.calls == calls_after_probe + math.ceil(len(samples) / feat.batch_size)
    assert len(list((tmp_path / "features").glob("*.npz"))) == 1
    e1 = SchemaRoutingEnv(tiny_graph, samples, features=table)
    e2 = SchemaRoutingEnv(tiny_graph, samples, features=table)
    o1, _ = e1.reset(options={"sample_index": 5})
    o2, _ = e2.reset(options={"sample_index": 5})
    np.testing.assert_array_equal(o1["question"], o2["question"])
    assert o1["question"].shape == (24,) and abs(np.linalg.norm(o1["question"]) - 1) < 1e-5
    o1["question"][:] = 0  # observations are copies: the table is untouched
    assert np.linalg.norm(e2.observation_of(5)["question"]) > 0.99


def test_hashed_featurizer_separates_tables_and_reads_chinese():
    f = HashedNgramFeaturizer(dim=256)
    x = f(["orders of customer Alice", "orders of customer Bob", "suppliers of category Seafood", "客户买过哪些产品", ""])["question"]
    cos = x @ x.T
    assert cos[0, 1] > cos[0, 2] + 0.2  # same tables, different entity: closer than other tables
    assert np.linalg.norm(x[3]) == pytest.approx(1.0, abs=1e-6)  # Chinese characters are features
    assert not x[4].any()  # the empty question is all zeros, not NaN
    with pytest.raises(ConfigError, match="ngram_range"):
        HashedNgramFeaturizer(ngram_range=(3, 2))


def _accuracy(model: PPO, env: SchemaRoutingEnv) -> float:
    ok = 0
    for i in range(len(env.samples)):
        obs, _ = env.reset(options={"sample_index": i})
        action, _ = model.predict(obs, deterministic=True)
        ok += int(action) == env.gold_actions[i]
    return ok / len(env.samples)


def test_sb3_ppo_learns_tiny_schema_unchanged(tiny_db):
    torch.set_num_threads(1)  # a 2-layer MLP is faster on one thread
    graph = SchemaGraph(introspect(tiny_db), max_hops=1)  # 16 paths: 6 single-table + 10 one-hop
    env = gym.make("route2sql/SchemaRoutingHashed-v0", graph=graph, samples=routing_samples(graph), featurizer="hashed:128")
    model = PPO("MultiInputPolicy", env, n_steps=128, batch_size=32, learning_rate=3e-3, seed=0, verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes an empty /tmp/SB3-<time> folder
    before = _accuracy(model, env.unwrapped)
    model.learn(512)
    after = _accuracy(model, env.unwrapped)
    # chance is 1/16; an untrained policy sits near it, 4 PPO updates lift it by 0.12-0.35 over seeds 0-5 (0.32 at seed 0)
    assert before < 0.2
    assert after > before + 0.1, (before, after)


# -- RewardShapingWrapper ---------------------------------------------------------------------


def _upright(t) -> float:
    return -abs(float(t.obs[2]))


def test_wrapper_records_components_on_cartpole():
    env = RewardShapingWrapper(
        gym.make("CartPole-v1"),
        {"upright": _upright, "left": lambda t: float(t.action == 0)},
        {"upright": 10.0, "left": 0.5},
    )
    obs, _ = env.reset(seed=1)
    for action in (0, 1, 0):
        obs, reward, *_, info = env.step(action)
        c = info["reward_components"]
        assert set(c) == {"upright", "left", "env_reward", "shaped"}
        assert c["upright"] == pytest.approx(-abs(obs[2]))
        assert c["left"] == float(action == 0)
        assert c["shaped"] == pytest.approx(10.0 * c["upright"] + 0.5 * c["left"])
        assert reward == c["env_reward"] == 1.0  # log-only by default: the reward is unchanged


def test_wrapper_replace_reward_and_scale():
    env = RewardShapingWrapper(gym.make("CartPole-v1"), {"upright": _upright}, {"upright": 2.0}, replace_reward=True, scale=0.5)
    env.reset(seed=0)
    obs, reward, *_, info = env.step(1)
    assert reward == pytest.approx(0.5 * 2.0 * -abs(obs[2]))
    assert info["reward_components"]["env_reward"] == 1.0


def test_wrapper_keeps_inner_components(tiny_graph):
    inner = SchemaRoutingEnv(tiny_graph, routing_samples(tiny_graph), featurizer="hashed:32")
    env = RewardShapingWrapper(inner, {"short": lambda t: -float(t.info["path"].hops)}, {"short": 0.1})
    env.reset(seed=0)
    _, reward, *_, info = env.step(31)  # the last legal path has 3 hops
    c = info["reward_components"]
    assert {"anchor", "via", "target", "legal", "total", "short", "env_reward", "shaped"} <= set(c)
    assert c["short"] == -3.0 and c["shaped"] == pytest.approx(-0.3) and reward == c["total"]


@pytest.mark.parametrize(
    ("components", "weights", "kw", "match"),
    [
        ({}, None, {}, "components: needs at least one"),
        ({"a": 3}, None, {}, r"components\['a'\]: must be callable"),
        ({"shaped": _upright}, None, {}, "reserved"),
        ({"a": _upright}, {"b": 1.0}, {}, r"weights\['b'\]: no component of that name \(components: \['a'\]\)"),
        ({"a": _upright}, {"a": float("nan")}, {}, r"weights\['a'\]: must be a finite number"),
        ({"a": _upright}, {"a": "1"}, {}, r"weights\['a'\]: must be a finite number"),
        ({"a": _upright}, {"a": 1.0}, {"scale": float("inf")}, "scale: must be a finite number"),
        ({"a": _upright}, {"a": 0.0}, {"replace_reward": True}, "reward constant"),
    ],
)
def test_wrapper_argument_errors(components, weights, kw, match):
    with pytest.raises(ConfigError, match=match):
        RewardShapingWrapper(gym.make("CartPole-v1"), components, weights, **kw)


def test_wrapper_rejects_bad_component_value():
    env = RewardShapingWrapper(gym.make("CartPole-v1"), {"bad": lambda t: float("nan")})
    env.reset(seed=0)
    with pytest.raises(ConfigError, match=r"components\['bad'\]: returned nan"):
        env.step(0)


def test_registry_ids_are_versioned():
    assert envs.ENV_IDS == tuple(sorted(i for i in gym.registry if i.startswith("route2sql/")))
    for env_id in envs.ENV_IDS:
        spec = gym.spec(env_id)
        assert spec.entry_point == envs.ENTRY_POINTS[spec.version]
        assert spec.max_episode_steps is None  # one step, then terminated


def test_token_featurizer_observations_pass_the_checkers(tiny_graph):
    from transformers import AutoTokenizer

    from envs import TokenFeaturizer
    from data_pipeline.encoders import MINILM, resolve_encoder

    tok = AutoTokenizer.from_pretrained(resolve_encoder(MINILM.name))
    samples = routing_samples(tiny_graph)
    env = SchemaRoutingEnv(tiny_graph, samples, featurizer=[HashedNgramFeaturizer(dim=32), TokenFeaturizer(tok, max_length=24)])
    gym_check_env(env)
    sb3_check_env(env)
    obs, info = env.reset(options={"sample_index": 0})
    assert set(obs) == {"question", "input_ids", "attention_mask", "action_mask"}
    n = int(obs["attention_mask"].sum())
    assert obs["input_ids"].shape == (24,) and obs["attention_mask"][:n].all() and not obs["attention_mask"][n:].any()
    assert tok.decode(obs["input_ids"][:n], skip_special_tokens=True) == samples[0].question.lower()
    with pytest.raises(ConfigError, match=r"observation key\(s\) \['question'\]"):
        SchemaRoutingEnv(tiny_graph, samples, featurizer=[HashedNgramFeaturizer(dim=32), HashedNgramFeaturizer(dim=16)])
