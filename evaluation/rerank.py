"""Rerank a router's candidate routes with a causal LM, and compare with the router alone on the same questions.

    python -m evaluation.rerank --router runs/demo/router_sft --data runs/demo/data --splits human
    python -m evaluation.rerank --router R --data D --questions my_questions.jsonl --scores-out s.jsonl
    python -m evaluation.rerank --grid s.jsonl          # full-path accuracy for other weights, no model run
    python -m evaluation.rerank --grid s.jsonl --grid-top-k 5 10   # and for fewer candidates than were scored
    python -m evaluation.rerank --grid dev.jsonl                  # also fits --rerank.temperature on these questions
    python -m evaluation.rerank --grid test.jsonl --rerank.temperature 2.5   # the ECE at a temperature fitted elsewhere

Every question is routed by the router (its ``top_k`` best routes) and rescored by the language
model (generator/rerank.py: the router's log-probability plus weighted log p(route | question)
and log p(question | route)). The table gives, per group of questions, the full-path accuracy of
the router alone and reranked, the questions each gets right that the other does not, the exact
McNemar p of that difference, the expected calibration error of the router's and of the reranked
route's confidence, and the seconds spent rescoring per question. ``--scores-out``
keeps every candidate's three log-probabilities, so ``--grid`` can try other weights without
running the model again; choose weights on questions you do not report. The reranked route's
confidence is a softmax of the combined scores over the candidates at ``--rerank.temperature``;
``--grid`` also fits that temperature to the saved questions (:func:`calibration_report`) and
prints the expected calibration error (ECE, 10 bins) at the given and the fitted temperature.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.errors import ConfigError, DataError
from core.graph import JoinPath
from evaluation.paired import exact_mcnemar
from generator.rerank import CandidateScore, RerankConfig, rank

GRID_FORWARD = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
GRID_CHANNEL = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)


@dataclass
class RerankEvalConfig:
    """Options of ``python -m evaluation.rerank``."""

    router: Path | None = None
    """Router folder (python -m router.train_sft or router.train_ppo --out)."""
    data: Path | None = None
    """Data set folder (python -m data_pipeline.build): its splits are scored, and its training questions are the prompt's examples."""
    splits: tuple[str, ...] = ("human",)
    """Splits of --data scored, each on its own."""
    questions: tuple[Path, ...] = ()
    """Files of questions with gold routes (one JSON object per line, as the human-written sets) scored too, each as its own group."""
    rerank: RerankConfig = field(default_factory=RerankConfig)
    """How the routes are rescored."""
    scores_out: Path | None = None
    """Write every question's candidates with their three log-probabilities here (one JSON object per line)."""
    grid: tuple[Path, ...] = ()
    """Score files written by --scores-out: print the full-path accuracy for a grid of weights and stop (no model is loaded)."""
    grid_top_k: tuple[int, ...] = ()
    """With --grid: one table per number, each rescoring only the router's first that many candidates of every question (empty: every saved candidate)."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    progress: bool = True
    """Show a progress bar with rate and ETA."""

    def __post_init__(self) -> None:
        if not self.grid and (self.router is None or self.data is None):
            raise ConfigError("needs --router and --data (or --grid with score files)", where="--router")
        if self.threads < 0:
            raise ConfigError(f"must be >= 0, got {self.threads}", where="--threads")
        if any(k < 1 for k in self.grid_top_k):
            raise ConfigError(f"every number must be at least 1, got {list(self.grid_top_k)}", where="--grid-top-k")


def read_scores(path: str | Path) -> list[tuple[JoinPath, list[CandidateScore]]]:
    """Read a ``--scores-out`` file: per question, its gold path and its candidates.

    Raises:
        DataError: naming the file and line: not JSON, or a field missing.
    """
    p = Path(path)
    out = []
    try:
        lines = p.read_text(encoding="utf-8").split("\n")  # as core.io: U+2028 inside a string ends no line
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"unreadable ({exc})", where=p) from exc
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            gold = JoinPath.from_dict(d["gold"], where=str(p), line=i)
            cands = [CandidateScore(JoinPath.from_dict(c["path"], where=str(p), line=i), float(c["router_logp"]),
                                    float(c["forward_logp"]), float(c["channel_logp"])) for c in d["candidates"]]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise DataError(f"not a score record ({exc.__class__.__name__}: {exc})", where=p, line=i) from None
        if not cands:
            raise DataError("no candidates", where=p, line=i)
        out.append((gold, cands))
    return out


def pick(candidates: Sequence[CandidateScore], forward_weight: float, channel_weight: float) -> JoinPath:
    """The candidate with the highest combined score (the router's order breaks ties)."""
    return candidates[rank(candidates, forward_weight, channel_weight)[0]].path


def grid_table(records: Sequence[tuple[JoinPath, list[CandidateScore]]], top_k: int | None = None) -> str:
    """Full-path accuracy (count right) for every pair of weights in the grid, as a text table.

    Args:
        records: per question, its gold path and its candidates in the router's order
            (:func:`read_scores`).
        top_k: rescore only each question's first ``top_k`` candidates (what a run with
            ``--rerank.top-k top_k`` would have picked: a candidate's three log-probs do not depend
            on the others); ``None``: all of them.
    """
    if top_k is not None:
        records = [(gold, cands[:top_k]) for gold, cands in records]
    n = len(records)
    oracle = sum(any(c.path == gold for c in cands) for gold, cands in records)
    lines = [f"{n} questions; right first by the router: "
             f"{sum(cands[0].path == gold for gold, cands in records)}; gold among the candidates: {oracle}",
             "rows: forward weight, columns: channel weight",
             "forward  " + "".join(f"{c:>7g}" for c in GRID_CHANNEL)]
    for f in GRID_FORWARD:
        right = [sum(pick(cands, f, c) == gold for gold, cands in records) for c in GRID_CHANNEL]
        lines.append(f"{f:>7g}  " + "".join(f"{r:>7d}" for r in right))
    return "\n".join(lines)


def calibration_report(records: Sequence[tuple[JoinPath, list[CandidateScore]]], config: RerankConfig) -> dict[str, float]:
    """How well the reranked confidence (:func:`generator.rerank.confidences`) matches accuracy.

    Each question's first ``config.top_k`` candidates are ranked at the config's weights; the
    chosen route's confidence is scored against whether it is the gold route.

    Returns:
        ``{n, right, ece, temperature, fitted_temperature, fitted_ece}``: the ECE (10 bins) at
        ``config.temperature``, and the temperature minimising the log loss of the chosen route's
        confidence on these questions (:func:`router.calibration.fit_confidence_temperature`)
        with its ECE (in-sample: apply it to other questions).
    """
    import torch

    from router.calibration import fit_confidence_temperature

    fw, cw = config.forward_weight, config.channel_weight
    cut = [(gold, cands[: config.top_k]) for gold, cands in records]
    width = max((len(c) for _, c in cut), default=1)
    totals = torch.full((len(cut), width), float("-inf"), dtype=torch.float64)
    for i, (_, cands) in enumerate(cut):
        totals[i, : len(cands)] = torch.tensor([c.total(fw, cw) for c in cands], dtype=torch.float64)
    right = torch.tensor([pick(cands, fw, cw) == gold for gold, cands in cut], dtype=torch.bool)

    def ece(temperature: float) -> float:  # the chosen route's confidence: generator.rerank.confidences, row-wise
        return _ece(torch.softmax(totals / temperature, dim=-1).max(dim=-1).values.tolist(), right.tolist())

    fitted = fit_confidence_temperature(totals, right)
    return {"n": len(cut), "right": int(right.sum()), "temperature": config.temperature, "ece": ece(config.temperature),
            "fitted_temperature": fitted, "fitted_ece": ece(fitted)}


def _ece(confidence: Sequence[float], correct: Sequence[bool]) -> float:
    import torch

    from router.calibration import expected_calibration_error

    return expected_calibration_error(torch.tensor(confidence, dtype=torch.float64), torch.tensor(correct, dtype=torch.bool))


def compare(gold: Sequence[JoinPath], router_paths: Sequence[JoinPath], reranked_paths: Sequence[JoinPath]) -> dict[str, Any]:
    """Paired counts of the router and the reranked routes on the same questions.

    Returns:
        ``{n, router_right, reranked_right, won, lost, mcnemar_p}`` (``won``: right only when reranked).
    """
    r = [p == g for p, g in zip(router_paths, gold, strict=True)]
    k = [p == g for p, g in zip(reranked_paths, gold, strict=True)]
    won = sum(b and not a for a, b in zip(r, k, strict=True))
    lost = sum(a and not b for a, b in zip(r, k, strict=True))
    return {"n": len(gold), "router_right": sum(r), "reranked_right": sum(k), "won": won, "lost": lost,
            "mcnemar_p": exact_mcnemar(won, lost)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point (module docstring); returns ``{group: counts}`` (or ``{"grid": table}``).

    Raises:
        DataError: a data set folder, question file or score file is missing or malformed.
        CheckpointError: the router folder is broken or was trained on another schema.
        ConfigError: the scoring model is neither a built-in name nor a causal-LM directory.
    """
    cfg = parse(RerankEvalConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if cfg.grid:
        records = [r for f in cfg.grid for r in read_scores(f)]
        tables = [grid_table(records, k) for k in cfg.grid_top_k] if cfg.grid_top_k else [grid_table(records)]
        heads = [f"first {k} candidates of the router" for k in cfg.grid_top_k] or [""]
        table = "\n\n".join((f"{h}\n{t}" if h else t) for h, t in zip(heads, tables, strict=True))
        print(table)
        cal = calibration_report(records, cfg.rerank)
        r = cfg.rerank
        print(f"\nreranked confidence at weights {r.forward_weight:g} / {r.channel_weight:g}, first {r.top_k} candidates "
              f"({cal['right']} of {cal['n']} right): ECE {cal['ece']:.3f} at temperature {cal['temperature']:g}; "
              f"the temperature fitted to these questions, {cal['fitted_temperature']:.3g}, gives {cal['fitted_ece']:.3f}")
        return {"grid": table, "calibration": cal}

    import torch

    from core.dataset import load_dataset
    from core.io import ensure_writable_file
    from core.progress import progress_bar
    from data_pipeline.encoders import quiet_loading
    from data_pipeline.human_sets import load_human_questions
    from generator.rerank import RouteReranker, route_and_rerank, save_scores
    from router.route import Router

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.scores_out is not None:  # fail now, not after the questions have been scored
        ensure_writable_file(cfg.scores_out)
    assert cfg.router is not None and cfg.data is not None  # checked in __post_init__
    ds = load_dataset(cfg.data)
    router = Router.from_pretrained(cfg.router, ds.graph, values=ds.values)
    groups = {name: ds.split(name) for name in cfg.splits}
    for f in cfg.questions:
        groups[f.name] = load_human_questions(f, ds.graph, db_name=ds.schema.name)
    groups = {k: v for k, v in groups.items() if v}
    if not groups:
        raise DataError(f"no questions in splits {', '.join(cfg.splits)} or --questions", where=cfg.data)
    with quiet_loading():  # the table, not a weight-loading bar, is what this command prints
        reranker = RouteReranker.from_pretrained(router, cfg.rerank, examples=ds.split("train"))
    results: dict[str, Any] = {}
    every_question, every_reranked = [], []
    print(f"{'group':<16}{'n':>5}{'router':>9}{'reranked':>10}{'won':>6}{'lost':>6}{'McNemar p':>11}"
          f"{'ECE router':>12}{'ECE reranked':>14}{'s/question':>12}")
    for name, samples in groups.items():
        bar = progress_bar(total=len(samples), desc=f"rerank {name}", unit="q", enabled=cfg.progress)
        routes, reranked, per_q = route_and_rerank(router, reranker, [s.question for s in samples],
                                                   progress=lambda i: bar.update(1))
        bar.close()
        m = compare([s.path for s in samples], [r.path for r in routes], [r.route.path for r in reranked])
        m["seconds_per_question"] = per_q
        m["ece_router"] = _ece([r.confidence for r in routes], [r.path == s.path for r, s in zip(routes, samples, strict=True)])
        m["ece_reranked"] = _ece([r.route.confidence for r in reranked],
                                 [r.route.path == s.path for r, s in zip(reranked, samples, strict=True)])
        results[name] = m
        every_question += samples
        every_reranked += reranked
        print(f"{name:<16}{m['n']:>5}{m['router_right']:>9}{m['reranked_right']:>10}{m['won']:>6}{m['lost']:>6}"
              f"{m['mcnemar_p']:>11.3f}{m['ece_router']:>12.3f}{m['ece_reranked']:>14.3f}{per_q:>12.2f}")
    if cfg.scores_out is not None:
        save_scores(cfg.scores_out, every_question, every_reranked)
        print(f"wrote {cfg.scores_out}", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main)
