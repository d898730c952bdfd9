"""Routing accuracy: per head, full path, and broken down by hop count, language, split and entity kind.

:func:`path_metrics` is the pure part (predicted paths vs samples); :func:`evaluate_router`
runs any router that can :meth:`predict_paths` first. PPO and the A/B evaluation reuse both.

Command line: ``python -m router.evaluate --router DIR [DIR ...] --data DIR`` scores saved
routers (SFT or PPO folders) on splits of a data set and prints :func:`format_table` per router
and split. ``--exclude`` drops questions another data set already holds (:func:`seed_key`), so a
data set built with another ``--seed`` and more ``--samples-per-path`` becomes a larger test set
of questions the router never trained on::

    python -m data_pipeline.build --db northwind --out /tmp/nw_s1 --seed 1 --samples-per-path 30
    python -m router.evaluate --router runs/sft runs/ppo --data /tmp/nw_s1 --exclude runs/data \\
        --splits train+validation+test test_heldout

Metrics of a group of samples:

- ``anchor_acc`` / ``via_acc`` / ``target_acc``: share of samples whose predicted anchor / via
  tuple / target equals the gold one (each head judged on its own);
- ``full_path_acc``: share whose whole predicted path equals the gold path;
- ``nonnull_via_acc``: ``via_acc`` on the samples whose gold via is not null (the 10x case);
- ``legal_rate``: share of predictions that are legal paths of the graph (1.0 for this router);
- ``mean_reward``: mean of :func:`rewards.router.path_reward_components` ``total``.

The command line adds, per router and split, ``ece`` (expected calibration error of the route
confidence, 10 bins), ``wrong`` (routes not exactly right) and ``uncertain_wrong`` /
``uncertain_right`` (wrong / right routes whose confidence is below the router's threshold, 0.6,
so ``router.route`` marks them uncertain).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from core.cli import parse, run_main
from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph
from core.samples import SPLITS, Sample
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

    >>> from core.samples import Sample
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
    if "ece" in metrics:
        lines.append(f"expected calibration error (10 bins) of the route confidence: {metrics['ece']:.3f}")
    if "uncertain_wrong" in metrics:
        lines.append(f"marked uncertain: {metrics['uncertain_wrong']} of {metrics['wrong']} wrong routes, "
                     f"{metrics['uncertain_right']} of {metrics['n'] - metrics['wrong']} right ones")
    return "\n".join(lines)


def seed_key(sample: Sample) -> tuple[str, str, tuple[tuple[str, str, str], ...]]:
    """What makes two samples the same question however paraphrased: gold path, template, entity values.

    Paraphrases of one seed question share all three (their surfaces and fuzzing differ), so a
    sample whose key occurs in a router's training data is not a new question for it.

    >>> from core.samples import Entity
    >>> e = Entity("Customers", "City", "Berlin", "berlin")
    >>> a = Sample("1", "db", "Orders of customers in berlin?", "en", JoinPath("Customers", (), "Orders"), "", (e,),
    ...            template_id="filter.join.en.0")
    >>> seed_key(a)
    ('Customers -> Orders', 'filter.join.en.0', (('Customers', 'City', 'Berlin'),))
    """
    return str(sample.path), sample.template_id, tuple((e.table, e.column, str(e.value)) for e in sample.entities)


@dataclass
class EvalConfig:
    """Options of ``python -m router.evaluate``."""

    router: tuple[Path, ...]
    """Router checkpoint folders (router.train_sft / router.train_ppo --out); each is scored."""
    data: Path
    """Data set folder (python -m data_pipeline.build) whose questions are routed."""
    splits: tuple[str, ...] = ("test", "test_heldout", "human")
    """Splits scored, each on its own; a+b scores splits a and b together as one group; human is the human-written set (when the data set has one)."""
    exclude: tuple[Path, ...] = ()
    """Data set folders whose questions are not scored: a question of --data is dropped when one of theirs has the same template, path and values (e.g. the router's training data, for --data built with another --seed)."""
    failures: bool = False
    """Also print every wrongly routed question with its gold and predicted path."""
    retarget: bool = False
    """Allow routers trained on another schema (Router.from_pretrained(retarget=True))."""
    anchor_prior: float | None = None
    """Score every router with this anchor prior instead of its own (see router.train_sft --anchor-prior; 0 turns it off), to measure what it changes without training again."""
    who_prior: float | None = None
    """Score every router with this "who" prior instead of its own (a bonus for the table whose verb a who-question uses, e.g. Suppliers for "Who supplies Chai?"; 0 turns it off)."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    out: Path | None = None
    """Also write {router: {group: metrics}} as JSON here."""

    def __post_init__(self) -> None:
        if not self.router:
            raise ConfigError("give at least one router folder", where="--router")
        for group in self.splits:
            for name in group.split("+"):
                if name not in SPLITS:
                    raise ConfigError(f"unknown split {name!r} in {group!r}; splits are {', '.join(SPLITS)}", where="--splits")
        if self.threads < 0:
            raise ConfigError(f"must be >= 0, got {self.threads}", where="--threads")
        for name in ("anchor_prior", "who_prior"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"must be a finite number >= 0, got {value}", where="--" + name.replace("_", "-"))


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """Command-line entry point (module docstring); returns ``{router: {group: metrics}}``.

    Raises:
        DataError: a data set folder is missing or malformed.
        CheckpointError: a router folder is broken or was trained on another schema (without ``--retarget``).
    """
    import torch

    from core.dataset import load_dataset
    from core.io import ensure_writable_file, write_json
    from router.calibration import expected_calibration_error
    from router.route import Router

    cfg = parse(EvalConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.out is not None:
        ensure_writable_file(cfg.out)  # before the evaluation, not after it
    ds = load_dataset(cfg.data)
    seen = {seed_key(s) for d in cfg.exclude for s in load_dataset(d).samples}
    groups: dict[str, list[Sample]] = {}
    every = ds.samples + ds.human
    for group in cfg.splits:
        names = group.split("+")
        kept = [s for s in every if s.split in names and seed_key(s) not in seen]
        dropped = sum(1 for s in every if s.split in names) - len(kept)
        if dropped:
            print(f"{group}: {dropped} questions dropped (in --exclude), {len(kept)} kept", file=sys.stderr)
        if not kept:
            print(f"{group}: no questions in {cfg.data} (splits there: {', '.join(sorted({s.split for s in every}))}); "
                  "nothing to evaluate", file=sys.stderr)  # fmt: skip
        groups[group] = kept
    results: dict[str, dict[str, Any]] = {}
    for ckpt in cfg.router:
        router = Router.from_pretrained(ckpt, ds.graph, retarget=cfg.retarget, values=ds.values)
        if cfg.anchor_prior is not None:
            router.policy.model.config.anchor_prior = cfg.anchor_prior
        if cfg.who_prior is not None:
            router.policy.model.config.who_prior = cfg.who_prior
        results[str(ckpt)] = {}
        for group, samples in groups.items():
            if not samples:
                continue
            routes = router.route_batch([s.question for s in samples])
            predicted = [r.path for r in routes]
            m = path_metrics(predicted, samples, ds.graph)
            right = [p == s.path for p, s in zip(predicted, samples, strict=True)]
            m["ece"] = expected_calibration_error(torch.tensor([r.confidence for r in routes]), torch.tensor(right))
            m["wrong"] = right.count(False)
            m["uncertain_wrong"] = sum(r.uncertain and not ok for r, ok in zip(routes, right, strict=True))
            m["uncertain_right"] = sum(r.uncertain and ok for r, ok in zip(routes, right, strict=True))
            results[str(ckpt)][group] = m
            print(format_table(m, title=f"== {ckpt}: {group} =="))
            if cfg.failures:
                for p, s in zip(predicted, samples, strict=True):
                    if p != s.path:
                        print(f"  [{s.language}] {s.template_id} {s.id}: {s.question}\n      gold {s.path}\n      pred {p}")
    if cfg.out is not None:
        write_json(cfg.out, results)
    return results


if __name__ == "__main__":
    run_main(main)
