"""GRPO math against numbers worked out by hand (no model): advantages, zero-std groups, the
virtual full score, grpo / dapo / dr_grpo normalisation, clip-higher, the k3 KL, dynamic
sampling bookkeeping, the config's cross-field checks and the per-rank prompt stream."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.errors import ConfigError
from generator.config import GRPOConfig
from generator.grpo import (
    STD_EPS,
    clipped_surrogate,
    group_advantages,
    group_mean_std,
    grpo_loss,
    k3_kl,
    plan_dynamic_sampling,
    reduce_token_loss,
    zero_std_groups,
)
from generator.train_grpo import PromptStream


# --------------------------------------------------------------------------- advantages


def test_group_advantages_by_hand():
    # rewards [1, 0, 0, 0]: mean 0.25; unbiased var = (0.75^2 + 3 * 0.25^2) / 3 = 0.25, std 0.5
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + STD_EPS)
    torch.testing.assert_close(adv, expected)
    assert adv.tolist()[0] == pytest.approx(1.5, abs=1e-3)
    # rows are independent groups
    two = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]]))
    torch.testing.assert_close(two[0], expected)
    torch.testing.assert_close(two[1], torch.tensor([-0.5, -0.5, -0.5, 1.5]) / (1.0 + STD_EPS))


def test_unscaled_advantages_are_centred_rewards_only():
    # Dr. GRPO: r - mean, no division (a small-spread group keeps small advantages)
    adv = group_advantages(torch.tensor([0.3, 0.1]), scale_rewards=False)
    torch.testing.assert_close(adv, torch.tensor([0.1, -0.1]))


def test_zero_std_group_gets_zero_advantages_not_nan():
    rewards = torch.tensor([[0.8] * 8, [0.0, 0.0, 3.8, 0.0, 0.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards)
    assert not torch.isnan(adv).any()
    assert adv[0].tolist() == [0.0] * 8
    assert zero_std_groups(rewards).tolist() == [True, False]


def test_virtual_full_score_enters_mean_and_std_but_not_the_output():
    # seed 000's example: eight 0.8s plus the anchor 1.0 -> mean 0.822, std 0.067, advantage -0.33
    rewards = torch.tensor([0.8] * 8)
    mean, std = group_mean_std(rewards, virtual_full_score=1.0)
    assert mean.item() == pytest.approx(7.4 / 9, abs=1e-6)
    # unbiased: (8 * (0.8 - 7.4/9)^2 + (1 - 7.4/9)^2) / 8
    var = (8 * (0.8 - 7.4 / 9) ** 2 + (1.0 - 7.4 / 9) ** 2) / 8
    assert std.item() == pytest.approx(math.sqrt(var), abs=1e-6)
    adv = group_advantages(rewards, virtual_full_score=1.0)
    assert adv.shape == (8,)  # the anchor is not a completion: no advantage, no loss term
    assert adv.tolist() == pytest.approx([(0.8 - 7.4 / 9) / (math.sqrt(var) + STD_EPS)] * 8, abs=1e-5)
    assert adv[0].item() == pytest.approx(-0.33, abs=0.005)
    # a group already at the full score stays at 0 (nothing to push towards)
    assert group_advantages(torch.tensor([1.0] * 4), virtual_full_score=1.0).tolist() == [0.0] * 4


def test_virtual_anchor_shifts_a_mixed_group_down():
    r = torch.tensor([1.0, 0.0])
    plain = group_advantages(r)
    anchored = group_advantages(r, virtual_full_score=3.8)
    assert (anchored < plain).all()  # both fall below a far-away anchor
    assert anchored[0] > anchored[1]  # the ordering inside the group is kept


# --------------------------------------------------------------------------- loss normalisation


def _two_sequences() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # sequence 0 has 4 real tokens and advantage +1; sequence 1 has 1 real token and advantage -1
    logp = torch.full((2, 4), -1.0, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([1.0, -1.0])
    return logp, mask, adv


@pytest.mark.parametrize(
    ("loss_type", "value", "grad_seq0", "grad_seq1"),
    [
        # grpo: mean per sequence, then over sequences: (-1 + 1) / 2; token weights 1/(2*4), 1/(2*1)
        ("grpo", 0.0, -1 / 8, 1 / 2),
        # dapo: token-level, 5 real tokens: (-4 + 1) / 5; every token weight 1/5
        ("dapo", -0.6, -1 / 5, 1 / 5),
        # dr_grpo: constant normaliser 2 sequences * max length 4: (-4 + 1) / 8
        ("dr_grpo", -0.375, -1 / 8, 1 / 8),
    ],
)
def test_loss_normalisation_by_hand(loss_type, value, grad_seq0, grad_seq1):
    logp, mask, adv = _two_sequences()
    out = grpo_loss(logp, logp.detach(), None, adv, mask, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28,
                    beta=0.0, max_completion_length=4)  # fmt: skip
    assert out.loss.item() == pytest.approx(value)
    out.loss.backward()
    # d(-ratio * A)/d logp = -A at ratio 1, times the token's weight
    assert logp.grad[0].tolist() == pytest.approx([grad_seq0] * 4)
    assert logp.grad[1].tolist() == pytest.approx([grad_seq1, 0.0, 0.0, 0.0])
    assert out.n_tokens == 5 and out.clip_low_sum == 0 and out.clip_high_sum == 0


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_group_by_group_accumulation_equals_the_whole_batch(loss_type):
    torch.manual_seed(0)
    per_token = torch.rand(5, 6)
    mask = (torch.rand(5, 6) > 0.3).long()
    mask[:, 0] = 1
    whole = reduce_token_loss(per_token, mask, loss_type, max_completion_length=6)
    parts = sum(
        reduce_token_loss(per_token[s], mask[s], loss_type, max_completion_length=6, total_sequences=5,
                          total_tokens=int(mask.sum()))  # fmt: skip
        for s in (slice(0, 2), slice(2, 5))
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)


def test_unknown_loss_type_is_refused():
    with pytest.raises(ValueError, match="loss_type"):
        reduce_token_loss(torch.ones(1, 1), torch.ones(1, 1), "ppo", max_completion_length=1)  # type: ignore[arg-type]


def test_clip_higher_keeps_the_gradient_that_symmetric_clipping_drops():
    # a token whose probability rose by 25% (ratio 1.25) with a positive advantage:
    # symmetric eps 0.2 clips it (no gradient), DAPO's eps_high 0.28 does not
    old = torch.tensor([[math.log(0.4)]])
    new = torch.tensor([[math.log(0.5)]], requires_grad=True)
    adv = torch.tensor([1.0])
    loss, low, high = clipped_surrogate(new, old, adv, epsilon_low=0.2, epsilon_high=0.2)
    loss.sum().backward()
    assert high.item() and not low.item() and new.grad.item() == 0.0
    new.grad = None
    loss, low, high = clipped_surrogate(new, old, adv, epsilon_low=0.2, epsilon_high=0.28)
    loss.sum().backward()
    assert not high.item() and new.grad.item() == pytest.approx(-1.25)
    # the low side: ratio 0.7 with a negative advantage is clipped at 1 - 0.2
    loss, low, high = clipped_surrogate(torch.tensor([[math.log(0.28)]]), old, torch.tensor([-1.0]),
                                        epsilon_low=0.2, epsilon_high=0.28)  # fmt: skip
    assert low.item() and loss.item() == pytest.approx(0.8)


# --------------------------------------------------------------------------- KL


def test_k3_kl_is_zero_when_equal_and_never_negative():
    torch.manual_seed(0)
    a = torch.randn(64, 16) - 2
    assert k3_kl(a, a).abs().max().item() == 0.0
    assert (k3_kl(a, torch.randn(64, 16) - 2) >= 0).all()


def test_k3_kl_is_an_unbiased_estimate_of_kl():
    # tokens drawn from the policy p: the mean of k3 approaches KL(p || q)
    p = torch.tensor([0.5, 0.3, 0.1, 0.1])
    q = torch.tensor([0.25, 0.25, 0.25, 0.25])
    gen = torch.Generator().manual_seed(0)
    x = torch.multinomial(p, 200_000, replacement=True, generator=gen)
    est = k3_kl(p.log()[x], q.log()[x]).mean().item()
    exact = float((p * (p / q).log()).sum())
    assert est == pytest.approx(exact, rel=0.02)


def test_kl_term_adds_beta_times_k3_and_is_reported():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]])
    out = grpo_loss(logp, logp.detach(), ref, torch.tensor([0.0]), torch.ones(1, 2), loss_type="dapo",
                    epsilon_low=0.2, epsilon_high=0.28, beta=0.5, max_completion_length=2)  # fmt: skip
    k3 = math.exp(-0.5) + 0.5 - 1.0  # first token; the second has equal log-probs
    assert out.kl_sum == pytest.approx(k3)
    assert out.loss.item() == pytest.approx(0.5 * k3 / 2)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), None, torch.tensor([0.0]), torch.ones(1, 2), loss_type="dapo",
                  epsilon_low=0.2, epsilon_high=0.28, beta=0.5, max_completion_length=2)  # fmt: skip


# --------------------------------------------------------------------------- dynamic sampling, prompt stream


def test_dynamic_sampling_redoes_zero_std_groups_within_the_budget():
    assert plan_dynamic_sampling([False, False], 0, 5) == []
    assert plan_dynamic_sampling([True, False, True], 0, 5) == [0, 2]
    assert plan_dynamic_sampling([True, False, True], 1, 2) == [0]
    assert plan_dynamic_sampling([True, True], 2, 2) == []
    assert plan_dynamic_sampling([True], 0, 0) == []


def test_prompt_stream_shards_disjointly_and_resumes_exactly():
    streams = [PromptStream(10, rank=r, world=2, seed=3) for r in range(2)]
    epoch0 = [[s.next() for _ in range(5)] for s in streams]
    assert set(epoch0[0]).isdisjoint(epoch0[1]) and sorted(epoch0[0] + epoch0[1]) == list(range(10))
    a = streams[0]
    state = a.state_dict()
    ahead = [a.next() for _ in range(7)]  # crosses into the next epoch
    b = PromptStream(10, rank=0, world=2, seed=3)
    b.load_state_dict(state)
    assert [b.next() for _ in range(7)] == ahead


# --------------------------------------------------------------------------- config


def _cfg(**kw) -> GRPOConfig:
    return GRPOConfig(data=Path("d"), out=Path("o"), **kw)


def test_config_defaults_follow_each_loss_type():
    dapo = _cfg()
    assert (dapo.loss_type, dapo.epsilon, dapo.clip_high, dapo.scale) == ("dapo", 0.2, 0.28, True)
    assert (dapo.num_generations, dapo.beta) == (8, 0.01)
    assert dapo.anchor_score == pytest.approx(3.8)
    grpo = _cfg(loss_type="grpo")
    assert grpo.clip_high == 0.2 and grpo.scale is True
    dr = _cfg(loss_type="dr_grpo")
    assert dr.scale is False
    # derived values are not written back, so dataclasses.replace re-checks cleanly
    assert replace(dr, max_steps=3).scale is False and replace(dapo, out=Path("x")).clip_high == 0.28


@pytest.mark.parametrize(
    ("kwargs", "flag", "mentions"),
    [
        ({"epsilon": 0.2, "epsilon_high": 0.1}, "--epsilon-high", ["0.1", "0.2"]),
        ({"loss_type": "dr_grpo", "scale_rewards": True}, "--scale-rewards", ["dr_grpo", "True"]),
        ({"num_generations": 1}, "--num-generations", ["1"]),
        ({"full_score": 1.0}, "--full-score", ["1.0", "False"]),
        ({"top_p": 0.0}, "--top-p", ["0.0"]),
        ({"beta": -0.1}, "--beta", ["-0.1"]),
        ({"smoke_only": True, "skip_smoke_test": True}, "--smoke-only", ["--skip-smoke-test"]),
    ],
)
def test_config_checks_name_the_flag_and_both_values(kwargs, flag, mentions):
    with pytest.raises(ConfigError) as info:
        _cfg(**kwargs)
    assert info.value.where == flag
    for m in mentions:
        assert m in str(info.value)
