"""The router's side of the gym env: what the policy observes, the vector env, and observation -> batch.

The PPO trainer collects its rollouts through the registered env ``route2sql/SchemaRouting-v1``
(:class:`envs.SchemaRoutingV1Env`, made by ``gym.make``): the generated labelled questions, and
when given the unlabelled questions of a question log mixed in at ``unlabelled_ratio``, paid by
the label-free reward (:mod:`rewards.label_free`). Only the observation differs from the id's
default featurizer: it is what :meth:`router.policy.RouterPolicy.as_batch` reads, precomputed
once per split (passed as the env's ``features``):

- ``input_ids``: ``Box(0, vocab-1, (L,), int64)``, the question's tokens (encoder prefix included),
  right-padded to the split's longest question ``L``;
- ``attention_mask``: ``Box(0, 1, (L,), int64)``;
- ``links``: ``Box(0, 1, (T, F), float32)``, lexical links to the schema's ``T`` tables.

The frozen lower encoder layers of every question were already run once, and its token-names-table
indicators (``mentions``) computed once (:func:`router.sft_data.encode_split`); :func:`policy_batch`
attaches both to the observed rows by ``sample_index`` (the env's ``info``), so a rollout step only
runs the trainable top layers. That is an optimisation, not a different input: both are pure
functions of the question.

Unlabelled questions enter the encoded split as :func:`unlabelled_samples` (rows after the
labelled ones; their placeholder ``path`` is never read: the env pays them without a label). The
label-free target evidence reads the same table mentions as the router's link features (:func:`data_pipeline.mentions.mention_spans`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.values import ValueIndex
import envs  # noqa: F401  (registers the ids)
from envs.evidence import CachedRowCounter, question_evidence
from envs.featurizers import FeatureTable
from rewards.label_free import LabelFreeConfig, RowCounter
from rewards.router import RewardConfig
from router.policy import RouterBatch
from router.sft_data import EncodedSplit

OBS_KEYS = ("input_ids", "attention_mask", "links")

ENV_ID = "route2sql/SchemaRouting-v1"
"""The registered env PPO collects its rollouts through."""


def unlabelled_samples(questions: Sequence[str], graph: SchemaGraph, db: str = "") -> list[Sample]:
    """Unlabelled questions as rows of an encoded split: id ``unlabelled-<k>``, ``meta["unlabelled"]``,
    a placeholder ``path`` (the graph's first legal path) that nothing reads."""
    placeholder = graph.legal_paths[0]
    return [
        Sample(id=f"unlabelled-{k}", db=db, question=q, language="zh" if any("\u3400" <= ch <= "\u9fff" for ch in q) else "en",
               path=placeholder, sql="", meta={"unlabelled": True})
        for k, q in enumerate(questions)
    ]  # fmt: skip


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
    *,
    n_labelled: int | None = None,
    unlabelled_ratio: float = 0.0,
    label_free: LabelFreeConfig | None = None,
    label_free_weight: float = 0.0,
    values: ValueIndex | None = None,
    db_path: str | None = None,
    count_rows: RowCounter | None = None,
    judges: Sequence[Mapping[JoinPath, float] | None] | None = None,
) -> gym.vector.SyncVectorEnv:
    """``n_envs`` copies of ``route2sql/SchemaRouting-v1`` over ``split``'s rows sharing one feature table.

    Args:
        graph, split, features, reward_config, n_envs: the schema graph, the encoded questions
            (labelled first), their observation table (:func:`routing_features`), the labelled
            reward and the number of envs.
        n_labelled: rows of ``split`` that are labelled; the rest are :func:`unlabelled_samples`
            (None: all labelled).
        unlabelled_ratio: probability that an episode draws an unlabelled question.
        label_free, label_free_weight: the label-free reward's weights and its weight on labelled questions.
        values, db_path, count_rows: the value index and the database the label-free reward links
            and counts on (``count_rows`` overrides ``db_path``); needed when it is paid.
        judges: per unlabelled row, the language-model judge's ``{route: p}`` (a judged question
            log, ``envs.schema_routing_v1.read_judges``) or None; such a row is paid the judge's reward.

    The label-free evidence (value matches, target evidence) is computed once for every row and
    shared, as is the row counter's cache. ``SAME_STEP`` autoreset: a step returns the next
    question's observation and its ``info["sample_index"]`` at once, with the answered step's info
    under ``info["final_info"]`` (every step ends an episode, so the default next-step autoreset
    would waste every other step).
    """
    n_lab = len(split) if n_labelled is None else n_labelled
    labelled, questions = split.samples[:n_lab], [s.question for s in split.samples[n_lab:]]
    needs_label_free = bool(questions) or label_free_weight > 0
    if needs_label_free and count_rows is None and db_path:
        count_rows = CachedRowCounter(db_path)
    evidence = [question_evidence(s.question, graph, values) for s in split.samples] if needs_label_free else None
    if judges is not None and evidence is not None:
        if len(judges) != len(questions):
            raise ValueError(f"judges hold {len(judges)} entries but there are {len(questions)} unlabelled rows")
        evidence[n_lab:] = [dataclasses.replace(e, judge=None if j is None else dict(j)) for e, j in zip(evidence[n_lab:], judges, strict=True)]
    kwargs = {
        "graph": graph, "samples": labelled, "unlabelled": questions, "unlabelled_ratio": unlabelled_ratio,
        "features": features, "reward_config": reward_config, "label_free": label_free,
        "label_free_weight": label_free_weight, "count_rows": count_rows, "evidence": evidence,
        "include_action_mask": False, "disable_env_checker": True,
    }  # fmt: skip

    def make() -> gym.Env:
        return gym.make(ENV_ID, **kwargs)

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
    lower, mentions = split.frozen_states([int(i) for i in sample_index], width)
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
