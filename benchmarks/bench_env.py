"""Routing-env and router-PPO costs on this machine.

    python benchmarks/bench_env.py --data runs/data/northwind --init runs/sft/northwind
    python benchmarks/bench_env.py --data runs/data/northwind            # no router: env and SB3 rows only

Rows (best of ``--repeats`` unless said; the best is the least disturbed on a shared machine):

- ``reward path alone``: ``rewards.router.path_reward_components`` per call (no env);
- ``env step, precomputed features``: ``SchemaRoutingEnv`` reset + step with random actions,
  question features from its :class:`~envs.FeatureTable` (how training runs);
- ``env step, encoder per step``: the same, but the question is encoded by multilingual-e5-small
  inside every step (what precomputing saves); plus the one-off cost of the feature table;
- ``router PPO update``: ``time/update_s`` of ``python -m router.train_ppo`` (median over a few
  updates with the default fast preset: 16 envs x 8 steps, 2 epochs); needs ``--init``;
- ``SB3 PPO``: env steps per second of ``stable_baselines3.PPO("MultiInputPolicy")`` learning on
  the routing env (hashed features) vs ``PPO("MlpPolicy")`` on ``CartPole-v1``, same settings
  (n_steps 2048, batch 64, 10 epochs), updates included, and their ratio.

Prints a Markdown table headed by the machine, and writes ``--out`` JSON when given.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from core.dataset import load_dataset  # noqa: E402
from core.io import write_json  # noqa: E402
from envs import EncoderFeaturizer, FeatureTable, HashedNgramFeaturizer, SchemaRoutingEnv  # noqa: E402
from rewards.router import path_reward_components  # noqa: E402


@dataclass
class Args:
    data: Path
    """A data set folder (``python -m data_pipeline.build``); its train split is used."""
    init: Path | None = None
    """An SFT router checkpoint for the PPO update row (skipped when absent)."""
    repeats: int = 5
    """Timed repetitions per row (the best is reported)."""
    env_steps: int = 2000
    """Env steps per timing of the precomputed-feature env."""
    encoder_steps: int = 64
    """Env steps per timing with the encoder inside the step."""
    sb3_steps: int = 4096
    """SB3 PPO learn() steps per env (two rollouts of 2048)."""
    ppo_updates: int = 3
    """Router PPO updates timed."""
    encoder: bool = True
    """Time the encoder rows (loads multilingual-e5-small)."""
    out: Path | None = None
    """Write the results as JSON here."""


def best_rate(fn: Callable[[], int], repeats: int) -> float:
    """Largest items per second over ``repeats`` calls of ``fn`` (it returns the items it did)."""
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - t))
    return max(rates)


def env_loop(env: SchemaRoutingEnv, steps: int, rng: np.random.Generator) -> Callable[[], int]:
    def run() -> int:
        env.reset(seed=int(rng.integers(1 << 30)))
        for _ in range(steps):
            env.step(int(rng.integers(env.n_paths)))
            env.reset()
        return steps

    return run


class EncodeEveryStep(SchemaRoutingEnv):
    """The env with no feature table: the question is encoded inside every step (for timing only)."""

    def __init__(self, *a, encoder: EncoderFeaturizer, **kw):
        super().__init__(*a, **kw)
        self._encoder = encoder

    def observation_of(self, index: int) -> dict[str, np.ndarray]:
        return {"question": self._encoder([self.samples[index].question])["question"][0]}


def sb3_rate(env: gym.Env, policy: str, steps: int) -> float:
    from stable_baselines3 import PPO

    model = PPO(policy, env, n_steps=2048, batch_size=64, n_epochs=10, seed=0, verbose=0)
    t = time.perf_counter()
    model.learn(steps)
    return steps / (time.perf_counter() - t)


def main() -> None:
    args = parse(Args, description=__doc__.split("\n\n")[0])
    load_before = os.getloadavg()[0]
    ds = load_dataset(args.data)
    samples = ds.split("train")
    rng = np.random.default_rng(0)
    rows: list[tuple[str, str, str]] = []
    results: dict[str, float] = {}
    print(f"Machine: {machine()}, data {ds.schema.name} "
          f"({len(samples)} train questions); load average before {load_before:.1f}", flush=True)  # fmt: skip

    def add(what: str, result: str, notes: str) -> None:
        rows.append((what, result, notes))
        print(f"  {what}: {result} ({notes})", flush=True)

    paths, golds = ds.graph.legal_paths, [s.path for s in samples]

    def reward_only() -> int:
        for i in range(20_000):
            path_reward_components(paths[i % len(paths)], golds[i % len(golds)], ds.graph)
        return 20_000

    results["reward_calls_per_s"] = best_rate(reward_only, args.repeats)
    add("reward path alone", f"{results['reward_calls_per_s']:,.0f} calls/s", "path_reward_components, graph legality on")

    torch.set_num_threads(1)
    hashed = SchemaRoutingEnv(ds.graph, samples, featurizer=HashedNgramFeaturizer())
    results["env_steps_per_s_precomputed"] = best_rate(env_loop(hashed, args.env_steps, rng), args.repeats)
    add("env step, precomputed features", f"{results['env_steps_per_s_precomputed']:,.0f} steps/s",
                 f"reset + step, {len(samples)} questions, {hashed.n_paths} actions")  # fmt: skip

    if args.encoder:
        torch.set_num_threads(os.cpu_count() or 1)
        feat = EncoderFeaturizer.from_name()
        t = time.perf_counter()
        FeatureTable.build(feat, samples, use_disk_cache=False)
        results["encoder_table_build_s"] = time.perf_counter() - t
        enc_env = EncodeEveryStep(ds.graph, samples, encoder=feat, featurizer=HashedNgramFeaturizer(dim=8))
        results["env_steps_per_s_encoder"] = best_rate(env_loop(enc_env, args.encoder_steps, rng), args.repeats)
        add("env step, encoder per step", f"{results['env_steps_per_s_encoder']:,.1f} steps/s",
                     "multilingual-e5-small encodes the question in every step")  # fmt: skip
        add("feature table (once)", f"{results['encoder_table_build_s']:.1f} s",
                     f"e5 embeddings of all {len(samples)} train questions, batch 64")  # fmt: skip

    if args.init is not None:
        from router.train_ppo import PPOConfig, train

        cfg = PPOConfig(data=args.data, init=args.init, out=Path("unused"), total_updates=args.ppo_updates,
                        tensorboard=False, progress=False, eval_splits=("validation",))  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            cfg.out, cfg.log_dir, cfg.checkpoint_dir = Path(tmp) / "ppo", Path(tmp) / "logs", Path(tmp) / "ckpt"
            res = train(cfg)
        times = [r["time/update_s"] for r in res.history if "time/update_s" in r]
        results["router_ppo_update_s"] = statistics.median(times)
        results["router_ppo_update_s_min"] = min(times)
        add("router PPO update", f"{results['router_ppo_update_s']:.2f} s (min {min(times):.2f})",
            f"{cfg.preset} preset: {cfg.n_envs * cfg.n_steps} answers, {cfg.n_epochs} epochs of minibatches of "
            f"{cfg.minibatch_size} ({cfg.micro_batch_size} per backward), validation eval included")  # fmt: skip

    torch.set_num_threads(1)
    route_env = gym.make("route2sql/SchemaRoutingHashed-v0", graph=ds.graph, samples=samples, featurizer="hashed")
    results["sb3_routing_steps_per_s"] = sb3_rate(route_env, "MultiInputPolicy", args.sb3_steps)
    results["sb3_cartpole_steps_per_s"] = sb3_rate(gym.make("CartPole-v1"), "MlpPolicy", args.sb3_steps)
    results["sb3_ratio_routing_over_cartpole"] = results["sb3_routing_steps_per_s"] / results["sb3_cartpole_steps_per_s"]
    add("SB3 PPO on routing env", f"{results['sb3_routing_steps_per_s']:,.0f} steps/s", "MultiInputPolicy, 512-dim hashed features")
    add("SB3 PPO on CartPole-v1", f"{results['sb3_cartpole_steps_per_s']:,.0f} steps/s", "MlpPolicy, same PPO settings")
    add("ratio routing / CartPole", f"{results['sb3_ratio_routing_over_cartpole']:.2f}", "steps/s, updates included")

    print(f"\nMachine: {machine()}, data {ds.schema.name} "
          f"({len(samples)} train questions); load average before {load_before:.1f}, after {os.getloadavg()[0]:.1f} "
          "(other processes on the machine slow every number down)\n")  # fmt: skip
    print("| what | result | notes |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    if args.out is not None:
        write_json(args.out, {"machine": machine(), "load_before": load_before, **results})


if __name__ == "__main__":
    run_main(main)
