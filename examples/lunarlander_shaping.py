"""Seed 002's LunarLander warm-up: SB3 PPO with the env reward (log-only) vs a custom shaped reward.

Both runs wrap ``LunarLander-v3`` in :class:`envs.RewardShapingWrapper` with the seed's six
components (distance to the pad, speed, tilt, legs down, main and side engine use). The
"log_only" run trains on the env reward and only logs the components; "custom" trains on the
seed's weighted sum instead (``replace_reward=True``). Each trained policy is then scored on the
*env* reward (``info["reward_components"]["env_reward"]``), so the two are comparable.

Needs Box2D: ``pip install box2d pygame`` (a Box2D 2.3.10 wheel installs offline here).

    python examples/lunarlander_shaping.py --timesteps 100000 --out runs/lunarlander
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from core.cli import parse, run_main
from core.errors import ConfigError
from core.io import write_json
from envs import RewardShapingWrapper


@dataclass
class Args:
    timesteps: int = 100_000
    """PPO environment steps per run."""
    eval_episodes: int = 10
    """Episodes scored (deterministic policy) after training."""
    seed: int = 42
    """Seed of PPO and of the evaluation episodes."""
    out: Path = Path("runs/lunarlander")
    """Folder for results.json and the two saved models."""


# LunarLander-v3 observation: x, y, vx, vy, angle, angular velocity, left leg, right leg.
# Actions: 0 noop, 1 left engine, 2 main engine, 3 right engine.
COMPONENTS = {
    "distance": lambda t: -float(np.hypot(t.obs[0], t.obs[1])),
    "velocity": lambda t: -float(np.hypot(t.obs[2], t.obs[3])),
    "angle": lambda t: -abs(float(t.obs[4])),
    "legs": lambda t: float((t.obs[6] > 0.5) + (t.obs[7] > 0.5)),
    "main_engine": lambda t: -float(int(t.action) == 2),
    "side_engine": lambda t: -float(int(t.action) in (1, 3)),
}
CONFIGS: dict[str, dict] = {
    # seed 002 "log_only": train on the env reward, log the components
    "log_only": {"weights": {}, "replace_reward": False},
    # seed 002 "custom": steady, slow, frugal (its weights), replacing the env reward
    "custom": {
        "weights": {"distance": 100.0, "velocity": 150.0, "angle": 50.0, "legs": 10.0, "main_engine": 0.3, "side_engine": 0.03},
        "replace_reward": True,
    },
}


def make_env(config: dict) -> gym.Env:
    return RewardShapingWrapper(gym.make("LunarLander-v3"), COMPONENTS, **config)


def evaluate(model: PPO, config: dict, episodes: int, seed: int) -> dict[str, float]:
    """Mean env return, shaped return and landing rate over ``episodes`` deterministic episodes."""
    env = make_env(config)
    env_returns, shaped_returns, landed = [], [], 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + 1000 + ep)
        done, r_env, r_shaped, info = False, 0.0, 0.0, {}
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            r_env += info["reward_components"]["env_reward"]
            r_shaped += info["reward_components"]["shaped"]
            done = terminated or truncated
        env_returns.append(r_env)
        shaped_returns.append(r_shaped)
        landed += int(terminated and info["reward_components"]["env_reward"] == 100.0)  # +100 = came to rest
    return {
        "env_return_mean": float(np.mean(env_returns)),
        "env_return_std": float(np.std(env_returns)),
        "shaped_return_mean": float(np.mean(shaped_returns)),
        "landed_fraction": landed / episodes,
    }


def main() -> None:
    args = parse(Args, description=__doc__)
    if args.timesteps < 2048:
        raise ConfigError(f"must be >= 2048 (one PPO rollout), got {args.timesteps}", where="--timesteps")
    try:
        import Box2D  # noqa: F401
    except ImportError as exc:
        raise ConfigError("LunarLander needs Box2D: pip install box2d pygame", where="LunarLander-v3") from exc
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, config in CONFIGS.items():
        model = PPO("MlpPolicy", make_env(config), seed=args.seed, verbose=0)
        model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's default makes an empty /tmp/SB3-<time> folder
        untrained = evaluate(model, config, args.eval_episodes, args.seed)
        start = time.perf_counter()
        model.learn(args.timesteps)
        seconds = time.perf_counter() - start
        model.save(args.out / f"ppo_{name}")
        results[name] = {
            "untrained": untrained,
            "trained": evaluate(model, config, args.eval_episodes, args.seed),
            "train_seconds": seconds,
            "steps_per_second": args.timesteps / seconds,
        }
        t = results[name]["trained"]
        print(
            f"{name:9s} env return {untrained['env_return_mean']:8.1f} -> {t['env_return_mean']:8.1f} "
            f"(+-{t['env_return_std']:.1f}), landed {t['landed_fraction']:.0%}, "
            f"{args.timesteps} steps in {seconds:.0f} s"
        )
    write_json(args.out / "results.json", {"args": {k: str(v) for k, v in vars(args).items()}, "results": results})
    print(json.dumps({k: v["trained"]["env_return_mean"] for k, v in results.items()}))


if __name__ == "__main__":
    run_main(main)
