"""The router's path reward: conditional, dynamically weighted, clipped (seed 002, section 7).

Components of a predicted path against the gold path:

- ``anchor``: ``anchor_weight`` when the anchor is right, else 0.
- ``via``: **conditional** — only paid when the anchor is right (seed 002, pitfall 2: "via right
  by luck with anchor wrong"); **dynamic weight** — a correct non-null via pays
  ``via_weight * via_nonnull_multiplier`` (10x by default), a correct null via ``via_weight``
  (pitfall 1: 80% of via labels are null, so "always null" must not pay as much as a real route).
- ``target``: ``target_weight`` when the target is right.
- ``legal``: ``illegal_penalty`` (negative) when the path is not a legal path of the schema graph.
- ``total``: the sum, clipped to ``[-clip, clip]`` (seed 002: clip to [-2, 2]).

>>> from core.graph import JoinPath
>>> gold = JoinPath("Customers", ("Orders",), "Order Details")
>>> path_reward_components(gold, gold)["total"]
2.0
>>> path_reward_components(JoinPath("Customers", (), "Order Details"), gold)["total"]  # "always null"
1.0
>>> path_reward_components(JoinPath("Employees", ("Orders",), "Order Details"), gold)["total"]  # via by luck
0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph

COMPONENTS = ("anchor", "via", "target", "legal")


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the router reward (defaults follow seed 002)."""

    anchor_weight: float = 0.5
    """Paid when the predicted anchor equals the gold anchor."""
    via_weight: float = 0.1
    """Paid for a correct via when the anchor is also correct (null via)."""
    via_nonnull_multiplier: float = 10.0
    """A correct *non-null* via pays via_weight times this (10x by default: most via labels are null, 40-80% depending on the database, so a router that always says null would score high)."""
    target_weight: float = 0.5
    """Paid when the predicted target equals the gold target."""
    illegal_penalty: float = -1.0
    """Added when the predicted path is not legal in the schema graph (must be <= 0)."""
    conditional_via: bool = True
    """No via credit when the anchor is wrong (a right via by luck must not pay). Off only for ablations."""
    clip: float = 2.0
    """The total is clipped to [-clip, clip] (2 by default)."""

    def __post_init__(self) -> None:
        for name in ("anchor_weight", "via_weight", "target_weight", "clip"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", where=name)
        if self.via_nonnull_multiplier < 1:
            raise ConfigError(f"must be >= 1, got {self.via_nonnull_multiplier}", where="via_nonnull_multiplier")
        if self.illegal_penalty > 0:
            raise ConfigError(f"must be <= 0, got {self.illegal_penalty}", where="illegal_penalty")

    @property
    def max_reward(self) -> float:
        """Reward of a correct path with a non-null via, after clipping."""
        raw = self.anchor_weight + self.via_weight * self.via_nonnull_multiplier + self.target_weight
        return min(raw, self.clip)

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


def path_reward_components(
    predicted: JoinPath,
    gold: JoinPath,
    graph: SchemaGraph | None = None,
    config: RewardConfig | None = None,
) -> dict[str, float]:
    """Every reward component of one prediction, by name, plus ``raw_total`` and ``total``.

    Args:
        predicted: the router's path.
        gold: the labelled path.
        graph: when given, an illegal ``predicted`` path gets ``illegal_penalty``; when None,
            legality is not checked (``legal`` is 0).
        config: weights; ``RewardConfig()`` when None.

    Returns:
        ``{"anchor", "via", "target", "legal", "raw_total", "total"}`` as floats.
    """
    cfg = config or RewardConfig()
    anchor_ok = predicted.anchor == gold.anchor
    via_ok = predicted.via == gold.via
    comp = {
        "anchor": cfg.anchor_weight if anchor_ok else 0.0,
        "via": 0.0,
        "target": cfg.target_weight if predicted.target == gold.target else 0.0,
        "legal": 0.0,
    }
    if via_ok and (anchor_ok or not cfg.conditional_via):
        comp["via"] = cfg.via_weight * (cfg.via_nonnull_multiplier if gold.via else 1.0)
    if graph is not None and not graph.is_legal(predicted):
        comp["legal"] = cfg.illegal_penalty
    raw = sum(comp[k] for k in COMPONENTS)
    comp["raw_total"] = raw
    comp["total"] = max(-cfg.clip, min(cfg.clip, raw))
    return comp


def path_rewards(
    predicted: Sequence[JoinPath],
    gold: Sequence[JoinPath],
    graph: SchemaGraph | None = None,
    config: RewardConfig | None = None,
) -> list[float]:
    """Batch form: one clipped total per (predicted, gold) pair, shape ``(batch,)``.

    Raises:
        ValueError: when the two sequences differ in length.
    """
    if len(predicted) != len(gold):
        raise ValueError(f"predicted has {len(predicted)} paths but gold has {len(gold)}")
    return [path_reward_components(p, g, graph, config)["total"] for p, g in zip(predicted, gold, strict=True)]
