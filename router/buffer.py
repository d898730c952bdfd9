"""The PPO rollout buffer and generalized advantage estimation (in the manner of SB3's ``RolloutBuffer``).

A rollout is ``n_steps`` steps of ``n_envs`` environments. Everything is stored with shape
``(n_steps, n_envs, ...)`` and flattened to ``(n_steps * n_envs, ...)`` for the update.

Advantages are GAE(gamma, lambda) (Schulman et al., 2016, "High-Dimensional Continuous Control
Using Generalized Advantage Estimation", https://arxiv.org/abs/1506.02438)::

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    R_t     = A_t + V(s_t)          (the value target, "returns")

where ``done_t`` says the episode *ended* with step ``t`` (termination). Truncated episodes
should be bootstrapped by the caller (add ``gamma * V(final_obs)`` to ``r_t`` and mark the step
done), as SB3 does. For the routing env every episode is one step, so ``done_t = 1`` always and
``A_t = r_t - V(s_t)``, ``R_t = r_t``; the general form is kept so the buffer serves any env.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from core.errors import ConfigError


@dataclass(frozen=True)
class RolloutBatch:
    """One minibatch for the PPO update (flattened over steps and envs).

    Attributes:
        observations: key -> ``(batch, ...)`` tensor, as stored.
        actions: ``(batch,)`` long.
        old_values: ``(batch,)`` value estimates at collection time.
        old_log_prob: ``(batch,)`` log-probability of the action at collection time.
        advantages: ``(batch,)`` GAE advantages (not normalised).
        returns: ``(batch,)`` value targets ``advantages + old_values``.
        indices: ``(batch,)`` long positions in the flattened buffer.
    """

    observations: Mapping[str, torch.Tensor]
    actions: torch.Tensor
    old_values: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    indices: torch.Tensor

    def __len__(self) -> int:
        return int(self.actions.shape[0])


class RolloutBuffer:
    """Fixed-size storage of one rollout; :meth:`compute_returns_and_advantage` fills in GAE.

    Args:
        n_steps: steps per environment per rollout.
        n_envs: parallel environments.
        observation_shapes: key -> ``(shape, dtype)`` of one env's observation entry; stored as
            ``(n_steps, n_envs, *shape)`` arrays.
        gamma: discount in ``[0, 1]``.
        gae_lambda: GAE lambda in ``[0, 1]`` (1 = Monte Carlo returns minus the value, 0 = TD(0)).

    Raises:
        ConfigError: a size below 1 or gamma / lambda outside ``[0, 1]``.
    """

    def __init__(
        self,
        n_steps: int,
        n_envs: int,
        observation_shapes: Mapping[str, tuple[tuple[int, ...], np.dtype | type]],
        gamma: float = 1.0,
        gae_lambda: float = 1.0,
    ):
        for name, v in (("n_steps", n_steps), ("n_envs", n_envs)):
            if v < 1:
                raise ConfigError(f"must be >= 1, got {v}", where=name)
        for name, v in (("gamma", gamma), ("gae_lambda", gae_lambda)):
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"must be in [0, 1], got {v}", where=name)
        self.n_steps, self.n_envs = n_steps, n_envs
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.observations = {
            k: np.zeros((n_steps, n_envs, *shape), dtype=dtype) for k, (shape, dtype) in observation_shapes.items()
        }
        shape2 = (n_steps, n_envs)
        self.actions = np.zeros(shape2, dtype=np.int64)
        self.rewards = np.zeros(shape2, dtype=np.float32)
        self.dones = np.zeros(shape2, dtype=np.float32)
        self.values = np.zeros(shape2, dtype=np.float32)
        self.log_probs = np.zeros(shape2, dtype=np.float32)
        self.advantages = np.zeros(shape2, dtype=np.float32)
        self.returns = np.zeros(shape2, dtype=np.float32)
        self.pos = 0
        self._computed = False

    @property
    def full(self) -> bool:
        return self.pos == self.n_steps

    def reset(self) -> None:
        """Start a new rollout (arrays are overwritten in place)."""
        self.pos = 0
        self._computed = False

    def add(
        self,
        observations: Mapping[str, np.ndarray],
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        values: np.ndarray,
        log_probs: np.ndarray,
    ) -> None:
        """Store one step of every env; each argument has leading shape ``(n_envs,)``.

        Raises:
            ConfigError: the buffer is full, or an observation key is missing.
        """
        if self.full:
            raise ConfigError(f"buffer is full ({self.n_steps} steps); call reset()", where="RolloutBuffer.add")
        missing = set(self.observations) - set(observations)
        if missing:
            raise ConfigError(f"observation lacks key(s) {sorted(missing)}", where="RolloutBuffer.add")
        p = self.pos
        for k, arr in self.observations.items():
            arr[p] = np.asarray(observations[k])
        self.actions[p] = np.asarray(actions).reshape(self.n_envs)
        self.rewards[p] = np.asarray(rewards).reshape(self.n_envs)
        self.dones[p] = np.asarray(dones).reshape(self.n_envs)
        self.values[p] = np.asarray(values).reshape(self.n_envs)
        self.log_probs[p] = np.asarray(log_probs).reshape(self.n_envs)
        self.pos += 1
        self._computed = False

    def compute_returns_and_advantage(self, last_values: np.ndarray) -> None:
        """GAE over the stored rollout (formula in the module docstring).

        Args:
            last_values: ``(n_envs,)`` value of the observation after the last stored step
                (ignored where that step was done).

        Raises:
            ConfigError: the buffer is not full.
        """
        if not self.full:
            raise ConfigError(f"rollout has {self.pos} of {self.n_steps} steps", where="compute_returns_and_advantage")
        last_gae = np.zeros(self.n_envs, dtype=np.float32)
        next_values = np.asarray(last_values, dtype=np.float32).reshape(self.n_envs)
        for t in reversed(range(self.n_steps)):
            non_terminal = 1.0 - self.dones[t]
            delta = self.rewards[t] + self.gamma * next_values * non_terminal - self.values[t]
            last_gae = delta + self.gamma * self.gae_lambda * non_terminal * last_gae
            self.advantages[t] = last_gae
            next_values = self.values[t]
        self.returns[:] = self.advantages + self.values
        self._computed = True

    def minibatches(self, batch_size: int, generator: torch.Generator) -> Iterator[RolloutBatch]:
        """Shuffled minibatches covering the rollout once; the last may be smaller.

        Args:
            batch_size: samples per minibatch (``>= 1``).
            generator: the shuffling RNG (saved with checkpoints, so a resumed run shuffles alike).

        Raises:
            ConfigError: advantages were not computed, or ``batch_size < 1``.
        """
        if not self._computed:
            raise ConfigError("call compute_returns_and_advantage() first", where="RolloutBuffer.minibatches")
        if batch_size < 1:
            raise ConfigError(f"must be >= 1, got {batch_size}", where="batch_size")
        n = self.n_steps * self.n_envs
        order = torch.randperm(n, generator=generator)
        flat_obs = {k: torch.as_tensor(v.reshape(n, *v.shape[2:])) for k, v in self.observations.items()}
        flat = {
            name: torch.as_tensor(getattr(self, name).reshape(n))
            for name in ("actions", "values", "log_probs", "advantages", "returns")
        }
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            yield RolloutBatch(
                observations={k: v[idx] for k, v in flat_obs.items()},
                actions=flat["actions"][idx],
                old_values=flat["values"][idx],
                old_log_prob=flat["log_probs"][idx],
                advantages=flat["advantages"][idx],
                returns=flat["returns"][idx],
                indices=idx,
            )
