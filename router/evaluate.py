"""Routing accuracy: per head, full path, and broken down by hop count, language, split and entity kind.

:func:`path_metrics` is the pure part (predicted paths vs samples); :func:`evaluate_router`
runs any router that can :meth:`predict_paths` first. PPO and the A/B evaluation reuse both.

Metrics of a group of samples:

- ``anchor_acc`` / ``via_acc`` / ``target_acc``: share of samples whose predicted anchor / via
  tuple / target equals the gold one (each head judged on its own);
- ``full_path_acc``: share whose whole predicted path equals the gold path;
- ``nonnull_via_acc``: ``via_acc`` on the samples whose gold via is not null (the 10x case);
- ``legal_rate``: share of predictions that are legal paths of the graph (1.0 for this router);
- ``mean_reward``: mean of :func:`rewards.router.path_reward_components` ``total``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from data_pipeline.graph import JoinPath, SchemaGraph
from data_pipeline.samples import Sample
from rewards.router import RewardConfig, path_reward_components


class PathPredictor(Protocol):
    """Anything that routes questions: :class:`router.route.Router`, :class:`router.policy.RouterPolicy`."""

    def predict_paths(self, questions: Sequence[str]) -> list[JoinPath]: ...


def _group(pairs: list[tuple[JoinPath, Sample]]) -> dict[str, float | int]:
    n = len(pairs)
    if n == 0:
        return {"n": 0}
    nonnull = [(p, s) for p, s in pairs if s.path.via]
    out: dict[str, float | int] = {
        "n": n,
        "anchor_acc": sum(p.anchor == s.path.anchor for p, s in pairs) / n,
        "via_acc": sum(p.via == s.path.via for p, s in pairs) / n,
        "target_acc": sum(p.target == s.path.target for p, s in pairs) / n,
        "full_path_acc": sum(p == s.path for p, s in pairs) / n,
    }
    if nonnull:
        out["nonnull_via_acc"] = sum(p.via == s.path.via for p, s in nonnull) / len(nonnull)
    return out


def _by(pairs: list[tuple[JoinPath, Sample]], key: Callable[[Sample], Any]) -> dict[str, dict[str, float | int]]:
    groups: dict[str, list[tuple[JoinPath, Sample]]] = {}
    for p, s in pairs:
        groups.setdefault(str(key(s)), []).append((p, s))
    return {k: _group(v) for k, v in sorted(groups.items())}


def path_metrics(
    predicted: Sequence[JoinPath],
    samples: Sequence[Sample],
    graph: SchemaGraph | None = None,
    reward_config: RewardConfig | None = None,
) -> dict[str, Any]:
    """Accuracy of ``predicted`` against the gold paths of ``samples`` (same order).

    Returns:
        The overall metrics (module docstring) plus ``by_hops``, ``by_language``, ``by_split``
        and ``by_entity_kind``: ``{group: {"n", "anchor_acc", ...}}``.

    Raises:
        ValueError: the two sequences differ in length.

    >>> from data_pipeline.samples import Sample
    >>> gold = JoinPath("Customers", ("Orders",), "Order Details")
    >>> s = [Sample("1", "db", "q", "en", gold, "SELECT 1"), Sample("2", "db", "q", "zh", gold, "SELECT 1")]
    >>> m = path_metrics([gold, JoinPath("Customers", (), "Orders")], s)
    >>> m["full_path_acc"], m["anchor_acc"], m["by_language"]["zh"]["full_path_acc"]
    (0.5, 1.0, 0.0)
    """
    if len(predicted) != len(samples):
        raise ValueError(f"{len(predicted)} predictions for {len(samples)} samples")
    pairs = list(zip(predicted, samples, strict=True))
    out: dict[str, Any] = dict(_group(pairs))
    if pairs:
        rewards = [path_reward_components(p, s.path, graph, reward_config)["total"] for p, s in pairs]
        out["mean_reward"] = sum(rewards) / len(rewards)
        if graph is not None:
            out["legal_rate"] = sum(graph.is_legal(p) for p, _ in pairs) / len(pairs)
    out["by_hops"] = _by(pairs, lambda s: s.path.hops)
    out["by_language"] = _by(pairs, lambda s: s.language)
    out["by_split"] = _by(pairs, lambda s: s.split)
    out["by_entity_kind"] = _by(pairs, lambda s: s.entity_kind)
    return out


def evaluate_router(
    router: PathPredictor,
    samples: Sequence[Sample],
    graph: SchemaGraph | None = None,
    reward_config: RewardConfig | None = None,
) -> dict[str, Any]:
    """Route every sample's question with ``router`` and score it with :func:`path_metrics`.

    Args:
        router: has ``predict_paths(questions) -> list[JoinPath]``.
        samples: labelled questions.
        graph: the schema graph (legality and the legality penalty of the reward).
        reward_config: weights of ``mean_reward``.
    """
    predicted = router.predict_paths([s.question for s in samples]) if samples else []
    return path_metrics(predicted, samples, graph, reward_config)


def format_table(metrics: dict[str, Any], title: str = "") -> str:
    """A plain-text table of the overall row and every breakdown (for logs and reports).

    >>> print(format_table({"n": 2, "anchor_acc": 1.0, "via_acc": 0.5, "target_acc": 1.0, "full_path_acc": 0.5,
    ...                     "by_hops": {"1": {"n": 2, "anchor_acc": 1.0, "via_acc": 0.5, "target_acc": 1.0,
    ...                                       "full_path_acc": 0.5}}}))
    group               n  anchor     via  target    path
    all                 2   100.0    50.0   100.0    50.0
    hops=1              2   100.0    50.0   100.0    50.0
    """
    cols = ("anchor_acc", "via_acc", "target_acc", "full_path_acc")
    lines = [title] if title else []
    lines.append(f"{'group':<16}{'n':>5}{'anchor':>8}{'via':>8}{'target':>8}{'path':>8}")

    def row(name: str, m: dict[str, Any]) -> str:
        vals = "".join(f"{100 * m[c]:>8.1f}" if c in m else f"{'-':>8}" for c in cols)
        return f"{name:<16}{m.get('n', 0):>5}{vals}"

    lines.append(row("all", metrics))
    breakdowns = (("by_hops", "hops"), ("by_language", "lang"), ("by_split", "split"), ("by_entity_kind", "entity"))
    for key, label in breakdowns:
        for name, m in metrics.get(key, {}).items():
            lines.append(row(f"{label}={name}", m))
    return "\n".join(lines)
