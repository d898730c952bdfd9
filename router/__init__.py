"""The join-path router: encoder + anchor / via / target heads + value head (SPEC section 4).

Verbs::

    python -m router.train_sft --data DIR --out CKPT      # supervised fine-tuning
    python -m router.route --router CKPT "question"       # route a question
    python -m router.evaluate --router CKPT --data DIR    # accuracy on the test splits
    python -m router.export --router CKPT --out DIR       # a full standalone copy of a slim checkpoint

    from router.route import Router
    Router.from_pretrained(CKPT).route("客户 Around the Horn 买过哪些产品？")

(The command-line modules ``router.route``, ``router.train_sft`` and ``router.evaluate`` are not
imported here, so that ``python -m`` runs them without a double import.)

Modules: :mod:`data_pipeline.encoders` (encoders), :mod:`router.text` (what the router reads about a
schema), :mod:`router.model` (the network and its weights), :mod:`router.checkpoint` (the
checkpoint's metadata and schema binding), :mod:`router.sft_data` (what SFT and PPO share),
:mod:`router.policy` (the
actor-critic over legal paths that PPO trains), :mod:`router.train_sft`, :mod:`router.route`,
:mod:`router.evaluate`.
"""

from router.model import PathSpace, RouterModel, RouterModelConfig
from router.policy import PathDistribution, RouterBatch, RouterPolicy

__all__ = [
    "PathDistribution",
    "PathSpace",
    "RouterBatch",
    "RouterModel",
    "RouterModelConfig",
    "RouterPolicy",
]
