"""Reward wrappers that work on any gymnasium environment.

:class:`RewardShapingWrapper` is seed 002's configurable wrapper made generic: named reward
components computed from each transition, logged into ``info["reward_components"]`` so training
can chart them, and optionally combined (weighted sum times ``scale``) into the reward the agent
is trained on.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym

from core.errors import ConfigError

RESERVED_NAMES = ("env_reward", "shaped")


@dataclass(frozen=True)
class Transition:
    """One ``step`` as a component function sees it: the action taken and what the env returned."""

    obs: Any
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any]


ComponentFn = Callable[[Transition], float]


class RewardShapingWrapper(gym.Wrapper[Any, Any, Any, Any]):
    """Compute named reward components each step, log them, and optionally train on their weighted sum.

    Each step, for every ``name, fn`` in ``components``, ``fn(Transition(obs, action, reward,
    terminated, truncated, info))`` gives one float. Then::

        shaped = scale * sum(weights[name] * value[name])
        info["reward_components"] = {**inner_components, **value, "env_reward": reward, "shaped": shaped}
        reward = shaped if replace_reward else reward    # log-only by default

    ``inner_components`` are those an inner env or wrapper already put under
    ``info["reward_components"]`` (e.g. the routing env's anchor/via/target), kept so nothing is
    lost. To *add* shaping to the env reward, include a component ``lambda t: t.reward`` with
    weight 1 and set ``replace_reward=True``.

    Args:
        env: any gymnasium environment.
        components: ``name -> fn(transition) -> float``; names must not be ``env_reward`` or ``shaped``.
        weights: ``name -> weight`` for a subset of ``components`` (missing names weigh 0).
        replace_reward: train on ``shaped`` instead of the env reward.
        scale: multiplies the weighted sum.

    Raises:
        ConfigError (constructor): no components, a reserved or non-string name, a component
            that is not callable, a weight for an unknown component, a weight or scale that is
            not a finite number, or ``replace_reward`` with every weight zero (the agent would
            learn from a constant).
        ConfigError (step): a component returned something that is not a finite number.

    Example (CartPole; the pole angle is ``obs[2]``):

    >>> import gymnasium as gym
    >>> env = RewardShapingWrapper(
    ...     gym.make("CartPole-v1"),
    ...     components={"upright": lambda t: -abs(float(t.obs[2])), "alive": lambda t: t.reward},
    ...     weights={"upright": 10.0, "alive": 1.0},
    ...     replace_reward=True,
    ... )
    >>> obs, _ = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(0)
    >>> sorted(info["reward_components"])
    ['alive', 'env_reward', 'shaped', 'upright']
    >>> c = info["reward_components"]
    >>> c["env_reward"], round(c["shaped"], 6) == round(10 * c["upright"] + c["alive"], 6), reward == c["shaped"]
    (1.0, True, True)
    >>> RewardShapingWrapper(gym.make("CartPole-v1"), {"upright": lambda t: 0.0}, {"uprite": 1.0})
    Traceback (most recent call last):
    ...
    core.errors.ConfigError: weights['uprite']: no component of that name (components: ['upright'])
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        components: Mapping[str, ComponentFn],
        weights: Mapping[str, float] | None = None,
        *,
        replace_reward: bool = False,
        scale: float = 1.0,
    ):
        if not isinstance(components, Mapping) or not components:
            raise ConfigError("needs at least one name -> function", where="components")
        for name, fn in components.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"component names must be non-empty strings, got {name!r}", where="components")
            if name in RESERVED_NAMES:
                raise ConfigError(f"{name!r} is reserved for the wrapper's own entries", where=f"components[{name!r}]")
            if not callable(fn):
                raise ConfigError(f"must be callable, got {type(fn).__name__}", where=f"components[{name!r}]")
        weights = dict(weights or {})
        for name, w in weights.items():
            if name not in components:
                raise ConfigError(f"no component of that name (components: {sorted(components)})", where=f"weights[{name!r}]")
            if not _is_finite_number(w):
                raise ConfigError(f"must be a finite number, got {w!r}", where=f"weights[{name!r}]")
        if not _is_finite_number(scale):
            raise ConfigError(f"must be a finite number, got {scale!r}", where="scale")
        if replace_reward and (scale == 0 or not any(weights.values())):
            raise ConfigError("replace_reward=True with all weights (or scale) zero makes the reward constant", where="weights")
        super().__init__(env)
        self.components = dict(components)
        self.weights = {name: float(weights.get(name, 0.0)) for name in self.components}
        self.replace_reward = replace_reward
        self.scale = float(scale)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        t = Transition(obs, action, float(reward), bool(terminated), bool(truncated), info)
        values: dict[str, float] = {}
        for name, fn in self.components.items():
            v = fn(t)
            if not _is_finite_number(v):
                raise ConfigError(f"returned {v!r}, expected a finite number", where=f"components[{name!r}]")
            values[name] = float(v)
        shaped = self.scale * sum(self.weights[n] * v for n, v in values.items())
        info = dict(info)
        info["reward_components"] = {**info.get("reward_components", {}), **values, "env_reward": float(reward), "shaped": shaped}
        return obs, (shaped if self.replace_reward else reward), terminated, truncated, info


def _is_finite_number(x: object) -> bool:
    """A real number (Python or numpy, not a bool or a string) that is neither inf nor nan."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
