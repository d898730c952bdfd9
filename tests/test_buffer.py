"""Rollout buffer and GAE, like SB3's tests/test_gae.py: a constant value head, hand-computed advantages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import ConfigError
from router.buffer import RolloutBuffer

OBS = {"x": ((2,), np.float32)}


def fill(buf: RolloutBuffer, rewards: np.ndarray, dones: np.ndarray, value: float) -> None:
    for t in range(buf.n_steps):
        obs = {"x": np.full((buf.n_envs, 2), t, dtype=np.float32)}
        buf.add(obs, np.full(buf.n_envs, t), rewards[t], dones[t], np.full(buf.n_envs, value), np.zeros(buf.n_envs))


def test_gae_by_hand_constant_value():
    # one env, 4 steps, the episode ends after step 1 and again after step 3; V(s) = 0.5 everywhere
    gamma, lam, v = 0.9, 0.8, 0.5
    buf = RolloutBuffer(4, 1, OBS, gamma=gamma, gae_lambda=lam)
    rewards = np.array([[1.0], [2.0], [0.0], [3.0]])
    dones = np.array([[0.0], [1.0], [0.0], [1.0]])
    fill(buf, rewards, dones, v)
    buf.compute_returns_and_advantage(last_values=np.array([100.0]))  # ignored: the last step is done
    # deltas: d3 = 3 - .5 = 2.5;  d2 = 0 + .9*.5 - .5 = -0.05;  d1 = 2 - .5 = 1.5;  d0 = 1 + .9*.5 - .5 = 0.95
    a3 = 2.5
    a2 = -0.05 + gamma * lam * a3  # 1.75
    a1 = 1.5  # episode boundary: nothing flows back from step 2
    a0 = 0.95 + gamma * lam * a1  # 2.03
    np.testing.assert_allclose(buf.advantages[:, 0], [a0, a1, a2, a3], rtol=1e-6)
    np.testing.assert_allclose(buf.returns[:, 0], np.array([a0, a1, a2, a3]) + v, rtol=1e-6)


def test_gae_bootstraps_from_last_value_when_not_done():
    buf = RolloutBuffer(2, 1, OBS, gamma=0.5, gae_lambda=1.0)
    fill(buf, np.array([[1.0], [1.0]]), np.array([[0.0], [0.0]]), value=0.0)
    buf.compute_returns_and_advantage(last_values=np.array([4.0]))
    # lambda = 1: advantage = discounted return (bootstrapped with V=4) minus V=0
    np.testing.assert_allclose(buf.advantages[:, 0], [1 + 0.5 * (1 + 0.5 * 4), 1 + 0.5 * 4])


def test_one_step_episodes_give_reward_minus_value():
    # the routing env: every step is a whole episode, so A = r - V whatever gamma and lambda are
    buf = RolloutBuffer(3, 2, OBS, gamma=0.99, gae_lambda=0.95)
    rewards = np.array([[2.0, 0.5], [1.1, -1.0], [0.0, 2.0]])
    fill(buf, rewards, np.ones((3, 2)), value=0.7)
    buf.compute_returns_and_advantage(last_values=np.array([9.0, 9.0]))
    np.testing.assert_allclose(buf.advantages, rewards - 0.7, rtol=1e-6)
    np.testing.assert_allclose(buf.returns, rewards, rtol=1e-6)


def test_minibatches_cover_the_rollout_once_and_follow_the_generator():
    buf = RolloutBuffer(3, 2, OBS)
    fill(buf, np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((3, 2)), value=0.0)
    buf.compute_returns_and_advantage(np.zeros(2))
    batches = list(buf.minibatches(4, torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [4, 2]
    idx = torch.cat([b.indices for b in batches])
    assert sorted(idx.tolist()) == list(range(6))
    for b in batches:  # flattened (step, env) -> step * n_envs + env; actions were the step number
        np.testing.assert_array_equal(b.actions.numpy(), (b.indices // 2).numpy())
        np.testing.assert_array_equal(b.observations["x"][:, 0].numpy(), (b.indices // 2).numpy())
        np.testing.assert_allclose(b.returns.numpy(), b.indices.numpy().astype(np.float32))
    again = list(buf.minibatches(4, torch.Generator().manual_seed(0)))
    assert torch.equal(torch.cat([b.indices for b in again]), idx)


def test_misuse_is_a_config_error():
    with pytest.raises(ConfigError, match="gae_lambda"):
        RolloutBuffer(2, 1, OBS, gae_lambda=1.5)
    buf = RolloutBuffer(1, 1, OBS)
    with pytest.raises(ConfigError, match="first"):
        next(buf.minibatches(1, torch.Generator()))
    with pytest.raises(ConfigError, match="rollout has 0 of 1 steps"):
        buf.compute_returns_and_advantage(np.zeros(1))
    fill(buf, np.ones((1, 1)), np.ones((1, 1)), value=0.0)
    with pytest.raises(ConfigError, match="buffer is full"):
        fill(buf, np.ones((1, 1)), np.ones((1, 1)), value=0.0)
    with pytest.raises(ConfigError, match=r"lacks key\(s\) \['x'\]"):
        RolloutBuffer(1, 1, OBS).add({}, [0], [0.0], [1.0], [0.0], [0.0])
