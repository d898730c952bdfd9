"""router.train_ppo --unlabelled FILE: unlabelled questions in the rollouts, paid by the label-free reward."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from router.train_ppo import train
from tests.test_train_ppo import tiny_config, tiny_router  # noqa: F401  (the fixture)

FIXTURE = Path(__file__).parent / "fixtures" / "unlabelled_shop.jsonl"


def test_ppo_with_unlabelled_questions_logs_both_rewards(tiny_router, tmp_path):  # noqa: F811
    res = train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=2, n_envs=4, n_steps=8, minibatch_size=16,
                            unlabelled=FIXTURE, unlabelled_ratio=0.5))  # fmt: skip
    assert res.out is not None
    rows = [json.loads(x) for x in (tmp_path / "ppo.logs" / "metrics.jsonl").read_text().splitlines()]
    r = rows[1]
    assert 0.0 < r["rollout/reward/labelled"] < 1.0  # both kinds of question were drawn (32 answers at 0.5)
    for k in ("value_anchor", "rows", "detour", "target_evidence", "legal", "anchor_ok"):
        assert f"rollout/reward/label_free/{k}" in r, k
    assert 0.0 <= r["rollout/success_rate"] <= 1.0  # over the labelled answers only
    assert r["train/approx_kl"] >= 0.0


def test_unlabelled_options_are_checked(tiny_router, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match="--unlabelled-ratio"):
        tiny_config(tiny_router, tmp_path / "x", unlabelled=FIXTURE, unlabelled_ratio=1.5)
    with pytest.raises(ConfigError, match="--label-free-weight"):
        tiny_config(tiny_router, tmp_path / "x", label_free_weight=-1.0)


def test_a_question_too_long_for_the_router_names_the_unlabelled_file_and_line(tiny_router, tmp_path):  # noqa: F811
    """It named samples.jsonl and an ``unlabelled-<k>`` id (the k-th question, not the line)."""
    from core.errors import DataError

    log = tmp_path / "log.jsonl"
    log.write_text('{"question": "which customers?"}\n\n' + json.dumps({"question": "word " * 150}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"log\.jsonl:3: question has \d+ tokens, more than the router's limit") as info:
        train(tiny_config(tiny_router, tmp_path / "ppo", total_updates=1, n_envs=4, n_steps=8, minibatch_size=16,
                          unlabelled=log, unlabelled_ratio=0.5))  # fmt: skip
    assert "\n" not in str(info.value) and "samples.jsonl" not in str(info.value)
    assert not (tmp_path / "ppo").exists()
