"""Gymnasium environments of route2sql, registered by versioned id, and the reward-shaping wrapper.

``import envs`` registers:

=================================  ===================================================  ==========
id                                 what                                                 step limit
=================================  ===================================================  ==========
``route2sql/SchemaRouting-v0``     question -> legal join path; the router's sentence    none (one
                                   embedding as observation (``featurizer="encoder"``)   step, then
                                                                                         terminated)
``route2sql/SchemaRoutingHashed-   the same task with the offline hashed n-gram          none
v0``                               featurizer (no model needed)
``route2sql/SchemaRouting-v1``     v0 plus unlabelled questions (``unlabelled=FILE``,     none
                                   ``unlabelled_ratio``) paid by the label-free reward
                                   (:mod:`rewards.label_free`; a judged log's language-
                                   model judge); the env PPO trains in
``route2sql/SchemaRoutingHashed-   v1 with the hashed n-gram featurizer                  none
v1``
=================================  ===================================================  ==========

All take the data as ``graph=, samples=`` or ``data_dir=, split=`` (see
:class:`~envs.schema_routing.SchemaRoutingEnv` and :class:`~envs.schema_routing_v1.SchemaRoutingV1Env`).
Bump the version when the reward changes.

>>> import gymnasium as gym, envs
>>> sorted(i for i in gym.registry if i.startswith("route2sql/"))
['route2sql/SchemaRouting-v0', 'route2sql/SchemaRouting-v1', 'route2sql/SchemaRoutingHashed-v0', 'route2sql/SchemaRoutingHashed-v1']
"""

from gymnasium.envs.registration import register, registry

from envs.evidence import CachedRowCounter, QuestionEvidence, question_evidence
from envs.featurizers import EncoderFeaturizer, FeatureTable, HashedNgramFeaturizer, QuestionFeaturizer, TokenFeaturizer
from envs.schema_routing import SchemaRoutingEnv, resolve_featurizer
from envs.schema_routing_v1 import SchemaRoutingV1Env, read_judges, read_question_log, read_question_records, read_unlabelled
from envs.wrappers import RewardShapingWrapper, Transition

ENV_IDS = (
    "route2sql/SchemaRouting-v0",
    "route2sql/SchemaRouting-v1",
    "route2sql/SchemaRoutingHashed-v0",
    "route2sql/SchemaRoutingHashed-v1",
)

ENTRY_POINTS = {0: "envs.schema_routing:SchemaRoutingEnv", 1: "envs.schema_routing_v1:SchemaRoutingV1Env"}
"""Entry point of each version."""

for _id in ENV_IDS:
    if _id not in registry:  # importing twice (e.g. doctest collection) must not warn
        _kwargs = {"featurizer": "hashed" if "Hashed" in _id else "encoder"}
        register(id=_id, entry_point=ENTRY_POINTS[int(_id[-1])], kwargs=_kwargs, max_episode_steps=None)

__all__ = [
    "ENTRY_POINTS",
    "ENV_IDS",
    "CachedRowCounter",
    "QuestionEvidence",
    "SchemaRoutingV1Env",
    "question_evidence",
    "read_judges",
    "read_question_log",
    "read_question_records",
    "read_unlabelled",
    "EncoderFeaturizer",
    "FeatureTable",
    "HashedNgramFeaturizer",
    "QuestionFeaturizer",
    "RewardShapingWrapper",
    "SchemaRoutingEnv",
    "TokenFeaturizer",
    "Transition",
    "resolve_featurizer",
]
