"""router.train_ppo on several schemas: --data a folder of data sets, one router, one schema per update."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from core.errors import CheckpointError, ConfigError
from router.model import RouterModel
from router.multi_schema import question_logs
from router.train_ppo import PPOConfig, schema_for_update, train
from router.train_sft import SFTConfig
from router.train_sft import train as train_sft
from tests.test_train_ppo import _assert_same_run

FIXTURE = Path(__file__).parent / "fixtures" / "unlabelled_shop.jsonl"

SCHOOL = """
CREATE TABLE teachers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, office TEXT);
CREATE TABLE courses (id INTEGER PRIMARY KEY, title TEXT NOT NULL, teacher_id INTEGER REFERENCES teachers(id));
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT NOT NULL, year INTEGER);
CREATE TABLE enrollments (id INTEGER PRIMARY KEY, student_id INTEGER REFERENCES students(id),
    course_id INTEGER REFERENCES courses(id), grade TEXT);
INSERT INTO teachers VALUES (1, 'Dr Weber', 'A12'), (2, 'Dr Sato', 'B3'), (3, 'Dr Okafor', 'C7');
INSERT INTO courses VALUES (1, 'Algebra', 1), (2, 'Poetry', 2), (3, 'Chemistry', 3);
INSERT INTO students VALUES (1, 'Anna Berg', 2), (2, 'Omar Haddad', 3), (3, 'Lena Vogt', 1);
INSERT INTO enrollments VALUES (1, 1, 1, 'A'), (2, 2, 1, 'B'), (3, 2, 2, 'A'), (4, 3, 3, 'C');
"""


@pytest.fixture(scope="module")
def two_schemas(tmp_path_factory) -> dict[str, Path]:
    """The tiny shop and a school as two data sets under one folder, and a tiny router SFT-trained on both."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from conftest import make_tiny_shop
    from data_pipeline.build import main as build
    from data_pipeline.encoders import MINILM, resolve_encoder

    root = tmp_path_factory.mktemp("ppo_multi")
    shop = make_tiny_shop(root / "shop.sqlite")
    school = root / "school.sqlite"
    with sqlite3.connect(school) as conn:
        conn.executescript(SCHOOL)
    for name, db in (("shop", shop), ("school", school)):
        build(["--db", str(db), "--out", str(root / "data" / name), "--samples-per-path", "4", "--languages", "en"])
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    BertModel(cfg, add_pooling_layer=False).save_pretrained(root / "enc")
    AutoTokenizer.from_pretrained(resolve_encoder(MINILM.name)).save_pretrained(root / "enc")
    sft = dict(encoder=str(root / "enc"), trainable_layers=1, head_dim=16, epochs=2, value_calibration_epochs=3,
               progress=False, tensorboard=False, threads=1)  # fmt: skip
    train_sft(SFTConfig(data=root / "data", out=root / "sft", **sft))
    train_sft(SFTConfig(data=root / "data" / "shop", out=root / "sft_shop", **sft))
    return {"root": root, "data": root / "data", "sft": root / "sft", "sft_shop": root / "sft_shop", "shop_db": shop, "school_db": school}


def multi_config(paths: dict[str, Path], out: Path, **kw) -> PPOConfig:
    base = dict(
        data=paths["data"], init=paths["sft"], out=out, total_updates=6, n_envs=4, n_steps=4, minibatch_size=8,
        micro_batch_size=4, n_epochs=2, threads=1, tensorboard=False, progress=False, eval_splits=("validation", "test"),
        actor_lr=1e-3, critic_lr=1e-3,
    )  # fmt: skip
    return PPOConfig(**(base | kw))


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (Path(str(out) + ".logs") / "metrics.jsonl").read_text().splitlines()]


def test_one_router_trains_on_both_schemas_and_records_them(two_schemas, tmp_path):
    from core.dataset import load_dataset
    from router.route import Router

    before, _ = RouterModel.from_pretrained(two_schemas["sft"])
    res = train(multi_config(two_schemas, tmp_path / "ppo", eval_splits=("validation", "test", "train")))
    assert res.out is not None
    train_n = sum(len(load_dataset(two_schemas["data"] / name).split("train")) for name in ("school", "shop"))
    assert res.metrics["train"]["sft"]["n"] == res.metrics["train"]["ppo"]["n"] == train_n
    rows = _rows(tmp_path / "ppo")[1:]
    # school (index 0, folders sorted by name) and shop (1) each rolled out some of the 6 updates
    assert sorted({r["rollout/schema_index"] for r in rows}) == [0, 1]
    after, meta = RouterModel.from_pretrained(res.out)
    moved = [k for k, v in after.state_dict().items() if not torch.equal(v, before.state_dict()[k])]
    assert any(k.startswith("encoder.") for k in moved) and any("value" in k for k in moved)
    sizes = {name: len(load_dataset(two_schemas["data"] / name).split("validation")) for name in ("school", "shop")}
    val = res.metrics["validation"]
    assert {k: v["n"] for k, v in val["ppo"]["by_schema"].items()} == sizes
    assert val["ppo"]["n"] == val["sft"]["n"] == sum(sizes.values())
    assert meta.multi and sorted(r.name for r in meta.schemas) == ["school", "shop"]
    assert [s["name"] for s in json.loads((res.out / "schemas.json").read_text())] == ["school", "shop"]
    # the saved PPO router binds each schema without --retarget
    for db in (two_schemas["shop_db"], two_schemas["school_db"]):
        router = Router.from_pretrained(res.out, db)
        assert router.meta["retargeted"] is False and router.route("who teaches the course Algebra").path is not None


def test_each_update_draws_a_schema_in_proportion_to_its_questions():
    draws = [schema_for_update([30, 10], u, seed=0) for u in range(1, 2001)]
    assert abs(draws.count(0) / 2000 - 0.75) < 0.03
    assert draws == [schema_for_update([30, 10], u, seed=0) for u in range(1, 2001)]  # resumable: a function of (seed, update)
    assert draws != [schema_for_update([30, 10], u, seed=1) for u in range(1, 2001)]


def test_multi_schema_resume_equals_straight_run(two_schemas, tmp_path):
    cfg = dict(checkpoint_every=1, total_updates=5, eval_splits=("validation",))
    train(multi_config(two_schemas, tmp_path / "straight", **cfg))
    stopped = train(multi_config(two_schemas, tmp_path / "resumed", stop_after=3, **cfg))
    assert stopped.out is None and stopped.updates_done == 3
    train(multi_config(two_schemas, tmp_path / "resumed", resume=True, **cfg))
    _assert_same_run(tmp_path / "straight", tmp_path / "resumed")


def test_unlabelled_logs_are_a_folder_named_by_data_set(two_schemas, tmp_path):
    folders = [two_schemas["data"] / "school", two_schemas["data"] / "shop"]
    with pytest.raises(ConfigError, match=r"--unlabelled: with 2 data sets --unlabelled is a folder holding <data set folder name>.jsonl \(e.g. school.jsonl\)"):
        question_logs(FIXTURE, folders)
    (tmp_path / "logs").mkdir()
    with pytest.raises(ConfigError, match=r"holds no question log named after a data set"):
        question_logs(tmp_path / "logs", folders)
    shutil.copy(FIXTURE, tmp_path / "logs" / "shop.jsonl")
    assert question_logs(tmp_path / "logs", folders) == [None, tmp_path / "logs" / "shop.jsonl"]
    assert question_logs(FIXTURE, folders[1:]) == [FIXTURE]
    # the shop's updates mix its log in; the school's have no unlabelled questions
    train(multi_config(two_schemas, tmp_path / "ppo", unlabelled=tmp_path / "logs", unlabelled_ratio=0.5, n_steps=8,
                       minibatch_size=16, total_updates=4, eval_splits=("validation",)))  # fmt: skip
    rows = _rows(tmp_path / "ppo")[1:]
    labelled = {int(r["rollout/schema_index"]): r["rollout/reward/labelled"] for r in rows}
    assert labelled.get(0, 1.0) == 1.0 and 0.0 < labelled.get(1, 0.5) < 1.0
    assert 1 in labelled


def test_a_router_of_one_schema_is_refused_for_the_other(two_schemas, tmp_path):
    with pytest.raises(CheckpointError, match=r"sft_shop: router was trained on schema 'shop' .* but was given schema 'school'"):
        train(multi_config(two_schemas, tmp_path / "ppo", init=two_schemas["sft_shop"]))


def test_odd_data_and_log_folders_are_named_not_skipped(two_schemas, tmp_path):
    from core.errors import DataError
    from router.multi_schema import data_set_folders

    folders = [two_schemas["data"] / "school", two_schemas["data"] / "shop"]
    with pytest.raises(ConfigError, match=r"--unlabelled: .* is a folder, but --data is one data set: give its question log file"):
        question_logs(tmp_path, folders[1:])
    (tmp_path / "logs" / "shop.jsonl").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"logs/shop.jsonl is not a regular file"):
        question_logs(tmp_path / "logs", folders)
    (tmp_path / "sets" / "a" / "schema.json").mkdir(parents=True)
    with pytest.raises(DataError, match=r"a/schema.json: not a regular file"):
        data_set_folders(tmp_path / "sets")
    # the same schema under two folders: one router cannot tell them apart
    shutil.copytree(two_schemas["data"] / "shop", tmp_path / "twice" / "shop")
    shutil.copytree(two_schemas["data"] / "shop", tmp_path / "twice" / "shop_copy")
    with pytest.raises(DataError, match=r"data sets shop and shop_copy have the same schema name 'shop'"):
        train(multi_config(two_schemas, tmp_path / "ppo", data=tmp_path / "twice"))
