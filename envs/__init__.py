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
=================================  ===================================================  ==========

Both take the data as ``graph=, samples=`` or ``data_dir=, split=`` (see
:class:`~envs.schema_routing.SchemaRoutingEnv`). Bump the version when the reward changes.

>>> import gymnasium as gym, envs
>>> sorted(i for i in gym.registry if i.startswith("route2sql/"))
['route2sql/SchemaRouting-v0', 'route2sql/SchemaRoutingHashed-v0']
"""

from gymnasium.envs.registration import register, registry

from envs.featurizers import EncoderFeaturizer, FeatureTable, HashedNgramFeaturizer, QuestionFeaturizer, TokenFeaturizer
from envs.schema_routing import SchemaRoutingEnv, resolve_featurizer
from envs.wrappers import RewardShapingWrapper, Transition

ENV_IDS = ("route2sql/SchemaRouting-v0", "route2sql/SchemaRoutingHashed-v0")

_ENTRY_POINT = "envs.schema_routing:SchemaRoutingEnv"
_KWARGS = {ENV_IDS[0]: {"featurizer": "encoder"}, ENV_IDS[1]: {"featurizer": "hashed"}}

for _id in ENV_IDS:
    if _id not in registry:  # importing twice (e.g. doctest collection) must not warn
        register(id=_id, entry_point=_ENTRY_POINT, kwargs=_KWARGS[_id], max_episode_steps=None)

__all__ = [
    "ENV_IDS",
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
