"""The router's side of the gym env: what the policy observes, the vector env, and observation -> batch.

The PPO trainer runs :class:`envs.SchemaRoutingEnv` unchanged. Its observation for the router is
what :meth:`router.policy.RouterPolicy.as_batch` reads, precomputed once per split:

- ``input_ids``: ``Box(0, vocab-1, (L,), int64)``, the question's tokens (encoder prefix included),
  right-padded to the split's longest question ``L``;
- ``attention_mask``: ``Box(0, 1, (L,), int64)``;
- ``links``: ``Box(0, 1, (T, F), float32)``, lexical links to the schema's ``T`` tables.

The frozen lower encoder layers of every question were already run once, and its token-names-table
indicators (``mentions``) computed once (:func:`router.train_sft.encode_split`); :func:`policy_batch`
attaches both to the observed rows by ``sample_index`` (the env's ``info``), so a rollout step only
runs the trainable top layers. That is an optimisation, not a different input: both are pure
functions of the question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from core.graph import SchemaGraph
from envs.featurizers import FeatureTable
from envs.schema_routing import SchemaRoutingEnv
from rewards.router import RewardConfig
from router.policy import RouterBatch
from router.sft_data import EncodedSplit

OBS_KEYS = ("input_ids", "attention_mask", "links")


def routing_features(split: EncodedSplit, vocab_size: int) -> FeatureTable:
    """The env's observation table for ``split`` (rows in sample order; shapes in the module docstring)."""
    n = len(split)
    width = max((len(t) for t in split.ids), default=1)
    ids = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    for i, t in enumerate(split.ids):
        ids[i, : len(t)] = t.numpy()
        mask[i, : len(t)] = 1
    links = split.links.numpy().astype(np.float32)
    table_spaces = {
        "input_ids": spaces.Box(0, vocab_size - 1, shape=(width,), dtype=np.int64),
        "attention_mask": spaces.Box(0, 1, shape=(width,), dtype=np.int64),
        "links": spaces.Box(0.0, 1.0, shape=links.shape[1:], dtype=np.float32),
    }
    return FeatureTable(table_spaces, {"input_ids": ids, "attention_mask": mask, "links": links}, n)


def make_routing_envs(
    graph: SchemaGraph,
    split: EncodedSplit,
    features: FeatureTable,
    reward_config: RewardConfig,
    n_envs: int,
) -> gym.vector.SyncVectorEnv:
    """``n_envs`` routing envs over ``split``'s samples sharing one feature table.

    ``SAME_STEP`` autoreset: a step returns the next question's observation and its
    ``info["sample_index"]`` at once, with the answered step's info under ``info["final_info"]``
    (every step ends an episode, so the default next-step autoreset would waste every other step).
    """

    def make() -> SchemaRoutingEnv:
        return SchemaRoutingEnv(graph, split.samples, features=features, reward_config=reward_config, include_action_mask=False)

    return gym.vector.SyncVectorEnv([make for _ in range(n_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def policy_batch(observations: Mapping[str, np.ndarray | torch.Tensor], sample_index: Sequence[int], split: EncodedSplit) -> RouterBatch:
    """A :class:`RouterBatch` from observed rows ``(batch, ...)`` plus their cached frozen-layer states.

    Padding columns beyond the longest real question of the batch are dropped.
    """
    ids = torch.as_tensor(np.asarray(observations["input_ids"]), dtype=torch.long)
    mask = torch.as_tensor(np.asarray(observations["attention_mask"]), dtype=torch.long)
    links = torch.as_tensor(np.asarray(observations["links"]), dtype=torch.float32)
    width = max(int(mask.sum(1).max()), 1)
    ids, mask = ids[:, :width], mask[:, :width]
    idx = [int(i) for i in sample_index]
    hidden = split.lower[idx[0]].shape[-1]
    lower = torch.zeros(len(idx), width, hidden)
    mentions = None if split.mentions is None else torch.zeros(len(idx), width, links.shape[1])
    for row, i in enumerate(idx):
        n = len(split.lower[i])
        lower[row, :n] = split.lower[i]
        if mentions is not None:
            mentions[row, :n] = split.mentions[i]
    return RouterBatch(ids, mask, links, mentions=mentions, lower=lower)


def env_rng_states(envs: gym.vector.SyncVectorEnv) -> list[dict]:
    """Each sub-env's ``np_random`` state (for checkpoints)."""
    return [e.unwrapped.np_random.bit_generator.state for e in envs.envs]


def restore_envs(envs: gym.vector.SyncVectorEnv, rng_states: list[dict], pending: Sequence[int]) -> tuple[dict, dict]:
    """Put every sub-env back on its pending question and RNG state; returns ``reset``'s ``(obs, info)``."""
    obs, info = envs.reset(options=None)  # allocates; overwritten below
    rows = []
    for env, state, index in zip(envs.envs, rng_states, pending, strict=True):
        o, _ = env.reset(options={"sample_index": int(index)})
        env.unwrapped.np_random.bit_generator.state = state
        rows.append(o)
    obs = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    info = {"sample_index": np.asarray(pending, dtype=np.int64)}
    return obs, info
