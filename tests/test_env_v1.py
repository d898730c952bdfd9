"""route2sql/SchemaRouting-v1: labelled and unlabelled questions, the label-free reward, SB3 on v1 and v0.

The tiny shop database of conftest.py (6 tables) with a value index of its text columns and a
4-question unlabelled file (tests/fixtures/unlabelled_shop.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs  # noqa: F401  (registers the ids)
from core.errors import ConfigError, DataError
from core.graph import JoinPath, SchemaGraph
from core.schema import introspect
from core.values import ValueIndex
from envs import SchemaRoutingV1Env, read_judges, read_unlabelled
from tests.test_envs import routing_samples

FIXTURE = Path(__file__).parent / "fixtures" / "unlabelled_shop.jsonl"


@pytest.fixture
def shop(tiny_db):
    graph = SchemaGraph(introspect(tiny_db), max_hops=3)
    import sqlite3

    conn = sqlite3.connect(tiny_db)
    values = {}
    for table, col in (("customers", "name"), ("customers", "city"), ("categories", "name"), ("suppliers", "company"),
                       ("suppliers", "country"), ("products", "name")):  # fmt: skip
        values[(table, col)] = [r[0] for r in conn.execute(f'SELECT "{col}" FROM "{table}"')]
    conn.close()
    return graph, ValueIndex.from_values(values), tiny_db


def make_v1(shop, **kw) -> SchemaRoutingV1Env:
    graph, values, db = shop
    kw.setdefault("unlabelled", FIXTURE)
    kw.setdefault("featurizer", "hashed:64")
    return SchemaRoutingV1Env(graph, routing_samples(graph), values=values, db_path=db, **kw)


def test_v1_with_unlabelled_questions_passes_both_checkers(shop):
    env = make_v1(shop, unlabelled_ratio=0.5)
    gym_check_env(env, skip_render_check=False)
    sb3_check_env(env, warn=True)
    assert env.n_labelled == len(routing_samples(shop[0])) and len(env.unlabelled) == 4


def test_same_seed_same_rollout_and_the_mix_follows_the_ratio(shop):
    def rollout(seed: int, env: SchemaRoutingV1Env, n: int = 200) -> list[tuple]:
        env.action_space.seed(seed)
        out = []
        obs, info = env.reset(seed=seed)
        for _ in range(n):
            a = env.action_space.sample()
            _, r, _, _, step_info = env.step(a)
            out.append((info["sample_index"], info["labelled"], int(a), r, obs["question"].tobytes()))
            obs, info = env.reset()
        return out

    env = make_v1(shop, unlabelled_ratio=0.25)
    a, b = rollout(3, env), rollout(3, make_v1(shop, unlabelled_ratio=0.25))
    assert a == b and rollout(4, env) != a
    share = np.mean([not x[1] for x in a])
    assert 0.15 < share < 0.35, share  # 50 of 200 expected
    assert all(x[1] for x in rollout(0, make_v1(shop, unlabelled_ratio=0.0), 50))
    assert not any(x[1] for x in rollout(0, make_v1(shop, unlabelled_ratio=1.0), 50))


def test_unlabelled_question_is_paid_by_the_label_free_reward(shop):
    env = make_v1(shop, unlabelled_ratio=1.0)
    i = env.n_labelled  # "Which customers ordered Green Tea?"
    intended = JoinPath("products", ("order items", "orders"), "customers")
    rewards = {}
    for path in (intended, JoinPath("products", (), "products"), JoinPath("customers", (), "customers")):
        env.reset(options={"sample_index": i})
        _, r, term, trunc, info = env.step(env.action_of(path))
        rewards[path] = r
        comp = info["reward_components"]
        assert term and not trunc and not info["labelled"] and info["gold_path"] is None and not info["is_success"]
        assert comp["labelled"] == 0.0 and comp["anchor"] == comp["via"] == comp["target"] == 0.0
        assert r == pytest.approx(comp["label_free/value_anchor"] + comp["label_free/rows"] + comp["label_free/detour"]
                                  + comp["label_free/target_evidence"] + comp["label_free/legal"])  # fmt: skip
    assert rewards[intended] == pytest.approx(1.5)
    assert rewards[intended] > max(v for p, v in rewards.items() if p != intended)


def test_labelled_question_keeps_the_v0_reward_plus_the_optional_label_free_part(shop):
    graph = shop[0]
    env0 = gym.make("route2sql/SchemaRoutingHashed-v0", graph=graph, samples=routing_samples(graph), featurizer="hashed:64").unwrapped
    plain, mixed = make_v1(shop), make_v1(shop, label_free_weight=0.5)
    for index in (0, 17, len(env0.samples) - 1):
        for action in (0, int(env0.gold_actions[index])):
            env0.reset(options={"sample_index": index})
            _, r0, *_, info0 = env0.step(action)
            plain.reset(options={"sample_index": index})
            _, r1, *_, info1 = plain.step(action)
            mixed.reset(options={"sample_index": index})
            _, r2, *_, info2 = mixed.step(action)
            assert r1 == r0 and info1["is_success"] == info0["is_success"] and info1["labelled"]
            lf = info2["reward_components"]
            expected = min(2.0, max(-2.0, info0["reward_components"]["raw_total"] + 0.5 * (
                sum(lf[f"label_free/{k}"] for k in ("legal", "value_anchor", "rows", "detour", "target_evidence")))))
            assert r2 == pytest.approx(expected)


def test_info_components_have_the_same_keys_on_both_kinds(shop):
    env = make_v1(shop, unlabelled_ratio=0.5)
    keys = set()
    for index in (0, env.n_labelled):
        env.reset(options={"sample_index": index})
        keys.add(frozenset(env.step(0)[-1]["reward_components"]))
    assert len(keys) == 1 and {"anchor", "via", "label_free/value_anchor", "label_free/rows", "labelled", "total"} <= next(iter(keys))


def test_v1_without_unlabelled_questions_is_v0(shop):
    graph = shop[0]
    env = gym.make("route2sql/SchemaRoutingHashed-v1", graph=graph, samples=routing_samples(graph), featurizer="hashed:64")
    env.reset(seed=0)
    _, r, *_, info = env.step(0)
    assert env.unwrapped.unlabelled_ratio == 0.0 and info["labelled"] and "label_free/rows" in info["reward_components"]


def test_read_unlabelled_and_bad_files_name_the_line(tmp_path):
    assert read_unlabelled(FIXTURE)[0] == "Which customers ordered Green Tea?"
    bad = tmp_path / "log.jsonl"
    bad.write_text('{"question": "fine"}\n{"q": "no question field"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"log.jsonl:2: field 'question'"):
        read_unlabelled(bad)
    bad.write_text('{"question": "fine"}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"log.jsonl:2: not valid JSON"):
        read_unlabelled(bad)
    bad.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no questions"):
        read_unlabelled(bad)
    # the line named is the file's line, blank lines counted; an over-long question is refused
    bad.write_text('{"question": "fine"}\n\n{"question": ' + json.dumps("x" * 1001) + "}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"log.jsonl:3: question of 1001 characters \(at most 1000\)"):
        read_unlabelled(bad)
    bad.write_text('{"question": "fine"}\n\n{"q": 1}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"log.jsonl:3: field 'question'"):
        read_unlabelled(bad)


@pytest.mark.parametrize(("kw", "where"), [
    ({"unlabelled_ratio": 1.5}, "unlabelled_ratio"),
    ({"unlabelled": None, "unlabelled_ratio": 0.3}, "unlabelled_ratio"),
    ({"label_free_weight": -1.0}, "label_free_weight"),
    ({"db_path": None}, "db_path"),
])  # fmt: skip
def test_constructor_errors_name_the_argument(shop, kw, where):
    graph, values, db = shop
    kw = {"unlabelled": FIXTURE, "db_path": db} | kw
    with pytest.raises(ConfigError, match=where):
        SchemaRoutingV1Env(graph, routing_samples(graph), values=values, featurizer="hashed:64", **kw)


def test_data_dir_form_reads_values_and_database(tmp_path):
    from data_pipeline import BuildConfig, build_dataset
    from tests.conftest import make_tiny_shop

    db = make_tiny_shop(tmp_path / "shop.sqlite")
    ds, _ = build_dataset(BuildConfig(db=str(db), out=tmp_path / "data", max_hops=2, languages="en", seed=0))
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps({"question": q}) for q in ("Which customers ordered Green Tea?", "list all suppliers")), encoding="utf-8")
    env = gym.make("route2sql/SchemaRoutingHashed-v1", data_dir=tmp_path / "data", unlabelled=log, unlabelled_ratio=0.5).unwrapped
    assert env.count_rows is not None and len(env.evidence) == env.n_labelled + 2
    assert env.evidence[env.n_labelled].matches  # "Green Tea" is linked through the data set's values.json
    gym_check_env(env)


@pytest.mark.parametrize("env_id", ["route2sql/SchemaRoutingHashed-v0", "route2sql/SchemaRoutingHashed-v1"])
def test_sb3_ppo_runs_unchanged_on_v0_and_v1(shop, env_id):
    torch.set_num_threads(1)
    graph, values, db = shop
    kw = {"unlabelled": FIXTURE, "unlabelled_ratio": 0.5, "values": values, "db_path": db} if env_id.endswith("v1") else {}
    env = gym.make(env_id, graph=graph, samples=routing_samples(graph), featurizer="hashed:64", **kw)
    model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes an empty /tmp/SB3-<time> folder
    before = {k: v.detach().clone() for k, v in model.policy.state_dict().items()}
    model.learn(128)
    assert model.num_timesteps == 128
    moved = [k for k, v in model.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert moved, "no policy parameter changed"


class _Rows:
    """The part of an EncodedSplit the vector env reads: its samples."""

    def __init__(self, samples):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)


def test_ppo_rollout_envs_are_the_registered_v1_with_unlabelled_rows(shop):
    from envs import FeatureTable, HashedNgramFeaturizer
    from rewards.router import RewardConfig
    from router.rollout import ENV_ID, make_routing_envs, unlabelled_samples

    graph, values, db = shop
    labelled = routing_samples(graph)[:20]
    rows = labelled + unlabelled_samples(read_unlabelled(FIXTURE), graph)
    features = FeatureTable.build(HashedNgramFeaturizer(dim=32), rows)
    vec = make_routing_envs(graph, _Rows(rows), features, RewardConfig(), 3, n_labelled=20, unlabelled_ratio=1.0,
                            values=values, db_path=str(db))  # fmt: skip
    assert ENV_ID == "route2sql/SchemaRouting-v1" and all(e.unwrapped.spec.id == ENV_ID for e in vec.envs)
    obs, info = vec.reset(seed=0)
    assert set(obs) == {"question"} and (info["sample_index"] >= 20).all()
    _, rewards, term, _, info = vec.step(np.zeros(3, dtype=np.int64))
    final = info["final_info"]
    assert term.all() and not final["labelled"].any()
    assert np.allclose(rewards, final["reward_components"]["total"]) and (final["reward_components"]["anchor"] == 0).all()


def test_an_over_long_question_in_a_list_names_its_index(shop):
    graph, values, db = shop
    with pytest.raises(DataError, match=r"unlabelled\[1\]: question of 1001 characters \(at most 1000\)"):
        SchemaRoutingV1Env(graph, routing_samples(graph), values=values, db_path=db, featurizer="hashed:64",
                           unlabelled=["fine", "x" * 1001])  # fmt: skip


INTENDED = JoinPath("products", ("order items", "orders"), "customers")
LOOKUP = JoinPath("products", (), "products")


def _judged(tmp_path: Path, judge: object, line: int = 0) -> Path:
    """The fixture log with ``judge`` as line ``line``'s judge field (the other lines unjudged)."""
    recs = [json.loads(s) for s in FIXTURE.read_text(encoding="utf-8").splitlines()]
    recs[line]["judge"] = judge
    f = tmp_path / "judged.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return f


def test_a_judged_line_is_paid_the_judge_p_and_the_others_the_label_free_reward(shop, tmp_path):
    judge = {"routes": [{"path": INTENDED.to_dict(), "p": 0.25}, {"path": LOOKUP.to_dict(), "p": 0.75}]}
    env = make_v1(shop, unlabelled=_judged(tmp_path, judge), unlabelled_ratio=1.0)
    i = env.n_labelled  # "Which customers ordered Green Tea?", judged
    got = {}
    for path in (INTENDED, LOOKUP, JoinPath("customers", (), "customers")):
        env.reset(options={"sample_index": i})
        _, r, _, _, info = env.step(env.action_of(path))
        got[path] = (r, info["reward_components"]["label_free/judge"])
    assert got[INTENDED] == pytest.approx((0.25, 0.25)) and got[LOOKUP] == pytest.approx((0.75, 0.75))
    assert got[JoinPath("customers", (), "customers")] == (0.0, 0.0)  # not judged: nothing
    env.reset(options={"sample_index": i + 2})  # an unjudged line: the label-free reward as before
    _, r, _, _, info = env.step(env.action_of(JoinPath("customers", (), "customers")))
    assert info["reward_components"]["label_free/judge"] == 0.0 and r == pytest.approx(1.5)
    # the same judges given with a list of questions
    env2 = make_v1(shop, unlabelled=read_unlabelled(FIXTURE), judges=[{INTENDED: 0.25, LOOKUP: 0.75}, None, None, None])
    env2.reset(options={"sample_index": i})
    assert env2.step(env2.action_of(LOOKUP))[1] == pytest.approx(0.75)


@pytest.mark.parametrize(("judge", "message"), [
    ({"routes": []}, "non-empty list 'routes'"),
    ([1, 2], "non-empty list 'routes'"),
    ({"routes": [{"path": {"anchor": "products", "via": [], "target": "products"}, "p": 1.5}]}, r"p must be a number in \[0, 1\]"),
    ({"routes": [{"path": {"anchor": "products", "via": [], "target": "products"}, "p": True}]}, "p must be a number"),
    ({"routes": [{"path": {"anchor": "products"}, "p": 0.5}]}, "route 1: path field 'target' must be a table name, got None"),
    ({"routes": [{"path": {"anchor": None, "target": "products"}, "p": 0.5}]}, "path field 'anchor' must be a table name, got None"),
    ({"routes": [{"path": {"anchor": ["products"], "target": "products"}, "p": 0.5}]}, "path field 'anchor' must be a table name"),
    ({"routes": [{"path": {"anchor": "products", "via": False, "target": "products"}, "p": 0.5}]}, "'via' must be a list of table names or null, got False"),
    ({"routes": [{"path": {"anchor": "products", "via": {"a": 1}, "target": "products"}, "p": 0.5}]}, "'via' must be a list"),
    ({"routes": [{"path": "products", "p": 0.5}]}, "path must be an object"),
    ({"routes": [{"path": {"anchor": "products", "via": [], "target": "products"}, "p": 0.5},
                 {"path": {"anchor": "products", "via": None, "target": "products"}, "p": 0.5}]}, "route 2 repeats the path"),
    ({"routes": [{"path": {"anchor": "planets", "via": [], "target": "products"}, "p": 0.5}]}, r"table\(s\) \['planets'\]"),
    ({"routes": ["products"]}, "route 1 must be an object"),
])  # fmt: skip
def test_a_bad_judge_field_names_the_file_and_line(shop, tmp_path, judge, message):
    f = _judged(tmp_path, judge, line=2)
    with pytest.raises(DataError, match=rf"judged.jsonl:3: .*{message}"):
        read_judges(f, shop[0])
    with pytest.raises(DataError, match="judged.jsonl:3"):
        make_v1(shop, unlabelled=f)


def test_judges_must_match_the_questions(shop):
    with pytest.raises(ConfigError, match="judges hold 1 entries but there are 4"):
        make_v1(shop, unlabelled=read_unlabelled(FIXTURE), judges=[None])
    with pytest.raises(ConfigError, match="judges"):
        make_v1(shop, judges=[None] * 4)  # a file's judges come from its lines


def test_ppo_rollout_envs_pay_the_judge_on_judged_rows(shop):
    from envs import FeatureTable, HashedNgramFeaturizer
    from rewards.router import RewardConfig
    from router.rollout import make_routing_envs, unlabelled_samples

    graph, values, db = shop
    labelled = routing_samples(graph)[:20]
    questions = read_unlabelled(FIXTURE)
    rows = labelled + unlabelled_samples(questions, graph)
    features = FeatureTable.build(HashedNgramFeaturizer(dim=32), rows)
    action = graph.legal_paths.index(LOOKUP)
    vec = make_routing_envs(graph, _Rows(rows), features, RewardConfig(), 2, n_labelled=20, unlabelled_ratio=1.0,
                            values=values, db_path=str(db), judges=[{LOOKUP: 0.75}] * 4)  # fmt: skip
    vec.reset(seed=0)
    _, rewards, _, _, info = vec.step(np.full(2, action, dtype=np.int64))
    assert np.allclose(rewards, 0.75) and np.allclose(info["final_info"]["reward_components"]["label_free/judge"], 0.75)
    with pytest.raises(ValueError, match="judges hold 1 entries"):
        make_routing_envs(graph, _Rows(rows), features, RewardConfig(), 1, n_labelled=20, unlabelled_ratio=1.0,
                          values=values, db_path=str(db), judges=[None])  # fmt: skip
