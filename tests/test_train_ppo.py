"""Router PPO: a tiny router (2-layer BERT, 32 wide) on the tiny shop, a few updates each (like TRL's test_train)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.errors import CheckpointError, ConfigError
from router.checkpoint import SchemaRecord
from router.model import RouterModel
from router.policy import RouterPolicy
from router.train_ppo import PPOConfig, train
from router.train_sft import SFTConfig
from router.train_sft import train as train_sft

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_router(tmp_path_factory) -> dict[str, Path]:
    """Tiny shop data set, a random tiny encoder and a 3-epoch SFT checkpoint on it."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from conftest import make_tiny_shop
    from data_pipeline.build import main as build
    from data_pipeline.encoders import MINILM, resolve_encoder

    root = tmp_path_factory.mktemp("ppo")
    db = make_tiny_shop(root / "shop.sqlite")
    build(["--db", str(db), "--out", str(root / "data"), "--samples-per-path", "4", "--languages", "en"])
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    BertModel(cfg, add_pooling_layer=False).save_pretrained(root / "enc")
    AutoTokenizer.from_pretrained(resolve_encoder(MINILM.name)).save_pretrained(root / "enc")
    train_sft(SFTConfig(data=root / "data", out=root / "sft", encoder=str(root / "enc"), trainable_layers=1, head_dim=16,
                        epochs=3, value_calibration_epochs=5, progress=False, tensorboard=False, threads=1))  # fmt: skip
    return {"data": root / "data", "sft": root / "sft", "root": root}


def tiny_config(paths: dict[str, Path], out: Path, **kw) -> PPOConfig:
    base = dict(
        data=paths["data"], init=paths["sft"], out=out, total_updates=4, n_envs=4, n_steps=4, minibatch_size=8,
        micro_batch_size=4, n_epochs=2, threads=1, tensorboard=False, progress=False, eval_splits=("validation", "test"),
    )  # fmt: skip
    return PPOConfig(**(base | kw))


def test_ppo_moves_every_actor_parameter_and_logs(tiny_router, tmp_path):
    before, _ = RouterModel.from_pretrained(tiny_router["sft"])
    res = train(tiny_config(tiny_router, tmp_path / "ppo", actor_lr=1e-3, critic_lr=1e-3, total_updates=2, tensorboard=True))
    after, meta = RouterModel.from_pretrained(tmp_path / "ppo")
    b, a = before.state_dict(), after.state_dict()
    trainable = {n for n, p in after.named_parameters() if p.requires_grad}
    unchanged = [n for n in trainable if torch.equal(a[n], b[n])]
    assert unchanged == []  # every actor and critic parameter moved
    frozen = [n for n, p in after.named_parameters() if not p.requires_grad]
    assert frozen and all(torch.equal(a[n], b[n]) for n in frozen)  # the frozen encoder part did not
    assert meta.training["phase"] == "ppo" and meta.schema_name == "shop" and meta.extra["ppo_update"] == 2

    rows = [json.loads(x) for x in (tmp_path / "ppo.logs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2]
    for key in ("train/approx_kl", "train/clip_fraction", "train/entropy_loss", "train/value_loss", "train/explained_variance",
                "rollout/reward_mean", "rollout/reward/anchor", "rollout/reward/via", "rollout/reward/target",
                "rollout/reward/legal", "route/full_path_acc", "train/actor_lr", "train/critic_lr"):  # fmt: skip
        assert key in rows[1], key
    assert rows[1]["rollout/reward/legal"] == 0.0  # every action of the env is a legal path
    assert rows[1]["train/actor_lr"] == pytest.approx(1e-3)  # cosine decay: the peak for the first update...
    assert rows[2]["train/actor_lr"] == pytest.approx(0.0, abs=1e-12)  # ... down to zero after the last
    assert rows[1]["global_step"] == 16 and rows[2]["global_step"] == 32
    # one-step episodes: the rollout's reward components add up to its raw total
    r = rows[1]
    assert r["rollout/reward/raw_total"] == pytest.approx(
        r["rollout/reward/anchor"] + r["rollout/reward/via"] + r["rollout/reward/target"] + r["rollout/reward/legal"]
    )
    assert (tmp_path / "ppo.logs" / "training_curve.png").stat().st_size > 10_000
    assert list((tmp_path / "ppo.logs" / "tensorboard").glob("events.out.tfevents.*"))
    ev = json.loads((tmp_path / "ppo" / "eval.json").read_text())
    assert set(ev) == {"validation", "test", "summary"} and set(ev["test"]) == {"sft", "ppo"}
    assert ev["validation"]["sft"]["full_path_acc"] == rows[0]["route/full_path_acc"]
    assert res.metrics["summary"]["start_val_acc"] == rows[0]["route/full_path_acc"]


def test_without_annealing_the_learning_rates_stay_at_their_peak(tiny_router, tmp_path):
    train(tiny_config(tiny_router, tmp_path / "ppo", actor_lr=1e-3, critic_lr=2e-3, total_updates=2, anneal_lr=False))
    rows = [json.loads(x) for x in (tmp_path / "ppo.logs" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["train/actor_lr"], r["train/critic_lr"]) for r in rows[1:]] == [(1e-3, 2e-3), (1e-3, 2e-3)]


def test_value_loss_never_reaches_the_actor(tiny_router):
    model, _ = RouterModel.from_pretrained(tiny_router["sft"])
    from data_pipeline import load_dataset
    from router.model import PathSpace

    ds = load_dataset(tiny_router["data"])
    policy = RouterPolicy(model, PathSpace(ds.graph))
    batch = policy.make_batch([s.question for s in ds.split("train")[:6]])
    values, log_prob, _ = policy.evaluate_actions(batch, torch.zeros(6, dtype=torch.long))
    (values - 5.0).pow(2).mean().backward()
    assert all(p.grad is None or not p.grad.any() for p in policy.actor_parameters())
    assert all(p.grad is not None and p.grad.any() for p in policy.critic_parameters()[:1])
    assert not {id(p) for p in policy.actor_parameters()} & {id(p) for p in policy.critic_parameters()}


def test_kl_stop_skips_the_step_and_the_remaining_epochs(tiny_router, tmp_path):
    train(tiny_config(tiny_router, tmp_path / "ppo", actor_lr=5e-3, target_kl=1e-7, total_updates=1, n_epochs=3))
    row = [json.loads(x) for x in (tmp_path / "ppo.logs" / "metrics.jsonl").read_text().splitlines()][1]
    # the first minibatch has ratio 1 (KL 0) and steps; the second sees KL > 1e-7 and stops the update
    assert row["train/kl_stop"] == 1.0
    assert row["train/epochs"] == 0
    assert row["train/approx_kl"] == pytest.approx(0.0, abs=1e-6)  # mean over the minibatches that stepped


def _final_state(out: Path) -> dict[str, torch.Tensor]:
    model, _ = RouterModel.from_pretrained(out)
    return model.state_dict()


def _rows(out: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
        for x in (Path(str(out) + ".logs") / "metrics.jsonl").read_text().splitlines()
    ]


def _assert_same_run(a: Path, b: Path) -> None:
    sa, sb = _final_state(a), _final_state(b)
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], atol=1e-6, rtol=1e-5, msg=k)
    ra, rb = _rows(a), _rows(b)
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6, nan_ok=True), k


def test_resume_equals_straight_run(tiny_router, tmp_path):
    kw = dict(actor_lr=1e-3, critic_lr=1e-3, checkpoint_every=1)
    train(tiny_config(tiny_router, tmp_path / "straight", **kw))
    stopped = train(tiny_config(tiny_router, tmp_path / "resumed", stop_after=2, **kw))
    assert stopped.out is None and stopped.updates_done == 2
    assert not (tmp_path / "resumed").exists()
    train(tiny_config(tiny_router, tmp_path / "resumed", resume=True, **kw))
    _assert_same_run(tmp_path / "straight", tmp_path / "resumed")


def test_resume_with_the_kl_penalty_equals_straight_run(tiny_router, tmp_path):
    """The penalty's reference is the --init router on resume too, not the checkpoint's weights."""
    kw = dict(actor_lr=1e-3, critic_lr=1e-3, checkpoint_every=1, kl_coef=1.0)
    train(tiny_config(tiny_router, tmp_path / "straight", **kw))
    train(tiny_config(tiny_router, tmp_path / "resumed", stop_after=2, **kw))
    train(tiny_config(tiny_router, tmp_path / "resumed", resume=True, **kw))
    _assert_same_run(tmp_path / "straight", tmp_path / "resumed")
    assert abs(_rows(tmp_path / "resumed")[-1]["rollout/kl_to_reference"]) > 1e-4  # the penalty was paid (a sampled estimate: either sign)


def test_a_checkpoint_saved_before_several_schemas_resumes(tiny_router, tmp_path):
    """Checkpoints once held one data set's env states as flat lists; they resume to the same run."""
    kw = dict(actor_lr=1e-3, critic_lr=1e-3, checkpoint_every=1)
    train(tiny_config(tiny_router, tmp_path / "straight", **kw))
    train(tiny_config(tiny_router, tmp_path / "resumed", stop_after=2, **kw))
    state_file = tmp_path / "resumed.ckpt" / "trainer_state.pt"
    raw = torch.load(state_file, weights_only=False)
    assert len(raw["pending"]) == 1 and len(raw["pending"][0]) == 4  # one data set, its 4 envs
    raw["env_rng"], raw["pending"] = raw["env_rng"][0], raw["pending"][0]  # the old layout
    torch.save(raw, state_file)
    train(tiny_config(tiny_router, tmp_path / "resumed", resume=True, **kw))
    _assert_same_run(tmp_path / "straight", tmp_path / "resumed")


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_result(tiny_router, tmp_path):
    """A real SIGKILL mid-run (after the first checkpoint), then --resume: same weights as a straight run."""
    kw = dict(total_updates=4, actor_lr=1e-3, critic_lr=1e-3, checkpoint_every=1, eval_splits=("validation",))
    train(tiny_config(tiny_router, tmp_path / "straight", **kw))
    args = ["--data", str(tiny_router["data"]), "--init", str(tiny_router["sft"]), "--total-updates", "4",
            "--n-envs", "4", "--n-steps", "4", "--minibatch-size", "8", "--micro-batch-size", "4", "--n-epochs", "2",
            "--threads", "1", "--tensorboard", "False", "--progress", "False", "--eval-splits", "validation",
            "--actor-lr", "1e-3", "--critic-lr", "1e-3", "--checkpoint-every", "1", "--out", str(tmp_path / "killed")]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "router.train_ppo", *args]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "killed.ckpt" / "trainer_state.pt"
    deadline = time.time() + 300
    while not state.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists() and not (tmp_path / "killed").exists()  # killed before the end, checkpoint intact
    rerun = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert rerun.returncode == 2 and "pass --resume" in rerun.stderr  # never silently restarts over a checkpoint
    subprocess.run([*cmd, "--resume", "True"], check=True, env=env, cwd=ROOT, capture_output=True)
    _assert_same_run(tmp_path / "straight", tmp_path / "killed")


def test_resume_refuses_other_options(tiny_router, tmp_path):
    train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=2, stop_after=1))
    with pytest.raises(CheckpointError, match=r"clip_range: saved 0.1 vs now 0.2"):
        train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=2, resume=True, clip_range=0.2))


def test_config_checks_and_presets(tiny_router, tmp_path):
    paths = tiny_router
    with pytest.raises(ConfigError, match="--micro-batch-size 16 is larger than --minibatch-size 8"):
        tiny_config(paths, tmp_path / "x", micro_batch_size=16)
    with pytest.raises(ConfigError, match=r"larger than a rollout \(n_envs 4 x n_steps 4 = 16\)"):
        tiny_config(paths, tmp_path / "x", minibatch_size=32, micro_batch_size=4)
    with pytest.raises(ConfigError, match="--actor-lr"):
        tiny_config(paths, tmp_path / "x", actor_lr=0.0)
    with pytest.warns(UserWarning, match="not a multiple of --minibatch-size 6"):
        tiny_config(paths, tmp_path / "x", minibatch_size=6)
    golden = tiny_config(paths, tmp_path / "x", preset="golden")
    assert (golden.actor_lr, golden.critic_lr, golden.clip_range, golden.target_kl) == (1e-6, 5e-6, 0.1, 0.1)
    assert tiny_config(paths, tmp_path / "x", preset="golden", actor_lr=2e-6).actor_lr == 2e-6  # a flag wins
    fast = tiny_config(paths, tmp_path / "x")
    assert (fast.actor_lr, fast.critic_lr) == (5e-6, 1e-4) and fast.critic_lr > fast.actor_lr
    # a value given explicitly wins even when it equals another preset's (or the fast default)
    assert tiny_config(paths, tmp_path / "x", preset="golden", actor_lr=5e-6).actor_lr == 5e-6


def test_preset_on_the_command_line_keeps_an_explicit_flag(tmp_path):
    from core.cli import parse

    base = ["--data", str(tmp_path), "--init", str(tmp_path), "--out", str(tmp_path / "o")]
    cfg = parse(PPOConfig, [*base, "--preset", "golden", "--actor-lr", "5e-6"])
    assert (cfg.actor_lr, cfg.critic_lr, cfg.total_updates) == (5e-6, 5e-6, 30)  # the flag, then the preset
    cfg = parse(PPOConfig, [*base, "--preset", "golden"])
    assert (cfg.actor_lr, cfg.critic_lr) == (1e-6, 5e-6)
    cfg = parse(PPOConfig, [*base, "--critic-lr", "1e-4", "--total-updates", "3"])
    assert (cfg.preset, cfg.actor_lr, cfg.critic_lr, cfg.total_updates) == ("fast", 5e-6, 1e-4, 3)


def test_the_reward_is_clipped_by_one_knob(tiny_router, tmp_path):
    from dataclasses import fields

    from rewards.router import RewardConfig

    assert "reward_clip" not in {f.name for f in fields(PPOConfig)}
    res = train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=1, reward=RewardConfig(clip=0.1)))
    row = res.history[1]
    assert row["rollout/reward_mean"] <= 0.1 + 1e-9  # the env pays the clipped total
    assert row["rollout/reward/raw_total"] > 0.1  # an SFT router earns more than that before the clip


def test_init_for_another_schema_is_refused(tiny_router, tmp_path):
    from data_pipeline import load_dataset

    model, meta = RouterModel.from_pretrained(tiny_router["sft"])
    model.save_pretrained(tmp_path / "other", replace(meta, schemas=(SchemaRecord("other", "0" * 16, 3),)))
    with pytest.raises(CheckpointError, match=r"other: router was trained on schema 'other' \(fingerprint 0{16}\) but was given schema 'shop'.*python -m router.train_sft"):
        train(tiny_config(tiny_router, tmp_path / "ppo", init=tmp_path / "other"))
    # a router trained on several schemas (router.train_sft --data a folder of data sets) must know this one
    several = (SchemaRecord("a", "0" * 16, 3), SchemaRecord("b", "1" * 16, 3))
    model.save_pretrained(tmp_path / "several", replace(meta, schemas=several, multi=True))
    with pytest.raises(CheckpointError, match=r"trained on 2 schemas \(fingerprints 0{16}, 1{16}\) but was given schema 'shop'"):
        train(tiny_config(tiny_router, tmp_path / "ppo", init=tmp_path / "several"))
    assert meta.schema_fingerprint == load_dataset(tiny_router["data"]).schema.fingerprint()


def test_outputs_that_would_replace_an_input_are_refused(tiny_router, tmp_path):
    data, sft = tiny_router["data"], tiny_router["sft"]
    before = sorted(p.name for p in data.iterdir())
    cases = [
        (dict(out=data), r"--out: .* is --data "),
        (dict(log_dir=data / "logs"), r"--log-dir: .* is inside --data "),
        (dict(checkpoint_dir=data.parent), r"--checkpoint-dir: .* holds --data "),
        (dict(out=sft), r"--out: .* is --init "),
        (dict(log_dir=tmp_path / "ppo" / "logs"), r"--out: .* holds --log-dir .*one would replace the other"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            train(tiny_config(tiny_router, **({"out": tmp_path / "ppo"} | kw)))
    assert sorted(p.name for p in data.iterdir()) == before and not (tmp_path / "ppo").exists()


def test_a_checkpoint_moved_aside_by_a_killed_save_is_put_back_on_resume(tiny_router, tmp_path):
    """Killed between a save's two renames, the last checkpoint sits at .NAME.old-PID; --resume continues it."""
    kw = dict(actor_lr=1e-3, critic_lr=1e-3, checkpoint_every=1)
    train(tiny_config(tiny_router, tmp_path / "ppo", stop_after=2, **kw))
    (tmp_path / "ppo.ckpt").rename(tmp_path / ".ppo.ckpt.old-999999999")  # no such process: the save was killed
    res = train(tiny_config(tiny_router, tmp_path / "ppo", stop_after=1, resume=True, **kw))
    assert res.updates_done == 3  # updates 1-2 kept, not restarted from --init
    assert (tmp_path / "ppo.ckpt" / "trainer_state.pt").exists() and not (tmp_path / ".ppo.ckpt.old-999999999").exists()


def test_a_hostile_or_broken_trainer_state_is_one_checkpoint_error(tiny_router, tmp_path):
    from conftest import PlantedPickle
    from router.ppo_checkpoint import load_checkpoint

    train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=2, stop_after=1))
    ckpt = tmp_path / "ppo.ckpt"
    state_file, good = ckpt / "trainer_state.pt", (ckpt / "trainer_state.pt").read_bytes()
    raw = torch.load(state_file, weights_only=False)
    planted = tmp_path / "pwned"
    for bad, match in [
        (raw | {"extra": PlantedPickle(planted)}, r"trainer_state.pt: unreadable trainer state \(UnpicklingError"),
        (raw | {"history": {"a": 1}}, r"unreadable trainer state \(TypeError: field history is a dict\)"),
        (raw | {"update": -1}, r"negative update -1"),
        ([1, 2], r"holds a list, not a dict"),
        ({k: v for k, v in raw.items() if k != "update"}, r"TypeError"),
    ]:
        torch.save(bad, state_file)
        with pytest.raises(CheckpointError, match=match):
            load_checkpoint(ckpt)
    assert not planted.exists()  # the pickle was never run
    state_file.write_bytes(good[: len(good) // 2])  # truncated by a full disk
    with pytest.raises(CheckpointError, match=r"trainer_state.pt: unreadable trainer state"):
        load_checkpoint(ckpt)
    state_file.write_bytes(good)
    for text, match in [("[1, 2]", r"config.json: holds a JSON list, not an object"), ("{", r"config.json: unreadable")]:
        (ckpt / "config.json").write_text(text)
        with pytest.raises(CheckpointError, match=match):
            train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=2, resume=True))


def test_resume_refuses_a_data_set_changed_since_the_checkpoint(tiny_router, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_router["data"], data)
    train(tiny_config(tiny_router, tmp_path / "ppo", data=data, total_updates=2, stop_after=1))
    lines = (data / "samples.jsonl").read_text().splitlines()
    first_train = next(i for i, x in enumerate(lines) if json.loads(x).get("split") == "train")
    (data / "samples.jsonl").write_text("\n".join(lines[:first_train] + lines[first_train + 1:]) + "\n")
    with pytest.raises(CheckpointError, match=r"--data changed since this checkpoint was saved \(data: saved .*'train_questions': (\d+)\} vs now .*'train_questions': (?!\1)"):
        train(tiny_config(tiny_router, tmp_path / "ppo", data=data, total_updates=2, resume=True))


def test_options_must_be_finite_and_in_range(tiny_router, tmp_path):
    from core.cli import parse
    from rewards.router import RewardConfig

    for kw, match in [
        (dict(actor_lr=float("nan")), r"--actor-lr: must be a finite number, got nan"),
        (dict(max_grad_norm=float("inf")), r"--max-grad-norm: must be a finite number, got inf"),
        (dict(vf_coef=-0.5), r"--vf-coef: must be >= 0, got -0.5"),
        (dict(seed=-1), r"--seed: must be >= 0, got -1"),
        (dict(threads=-2), r"--threads: must be >= 0"),
        (dict(gamma=1.5), r"--gamma: must be in \[0, 1\]"),
        (dict(reward=RewardConfig(clip=float("nan"))), r"--reward.clip: must be a finite number"),
    ]:
        with pytest.raises(ConfigError, match=match):
            tiny_config(tiny_router, tmp_path / "x", **kw)
    base = ["--data", str(tmp_path), "--init", str(tmp_path), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):  # the command line prints the same message as one line
        parse(PPOConfig, [*base, "--ent-coef", "nan"])


def _mean_kl_to_start(out: Path, paths: dict[str, Path]) -> float:
    """Exact KL(pi || pi_SFT) over legal paths, averaged over the validation questions (nats)."""
    from data_pipeline import load_dataset
    from rewards.router import RewardConfig
    from router.model import PathSpace
    from router.sft_data import RewardTable, encode_split

    ds = load_dataset(paths["data"])
    policies = []
    for folder in (out, paths["sft"]):
        model, _ = RouterModel.from_pretrained(folder)
        policy = RouterPolicy(model, PathSpace(ds.graph, ds.values))
        policy.eval()
        policies.append(policy)
    split = encode_split(policies[0], ds.split("validation"), RewardTable(policies[0].space, RewardConfig()), "samples.jsonl")
    with torch.no_grad():
        batch = split.batch(range(len(split)))
        lp, lq = (p.distribution(batch).log_prob for p in policies)
        kls = (lp.exp() * (lp - lq)).sum(-1)
    return float(kls.mean())


def test_the_kl_penalty_holds_the_router_near_its_sft_start(tiny_router, tmp_path):
    kw = dict(actor_lr=3e-3, critic_lr=1e-3, total_updates=6, anneal_lr=False, eval_splits=("validation",))
    free = train(tiny_config(tiny_router, tmp_path / "free", **kw))
    held = train(tiny_config(tiny_router, tmp_path / "held", kl_coef=2.0, **kw))
    rows = held.history[1:]
    assert rows[0]["rollout/kl_to_reference"] == pytest.approx(0.0, abs=1e-5)  # the first rollout's policy is the SFT router
    assert abs(rows[-1]["rollout/kl_to_reference"]) > 1e-4  # moved: a sampled estimate, either sign
    for r in rows:
        assert r["rollout/objective"] == pytest.approx(r["rollout/reward_mean"] - 2.0 * r["rollout/kl_to_reference"])
    assert "rollout/kl_to_reference" not in free.history[1]
    assert _mean_kl_to_start(tmp_path / "held", tiny_router) < 0.5 * _mean_kl_to_start(tmp_path / "free", tiny_router)
