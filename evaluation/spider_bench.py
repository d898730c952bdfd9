"""Spider dev routing benchmark: ``python -m evaluation.spider_bench --data DIR --router DIR --out DIR``.

Routers are trained only on data generated from the 20 dev schemas
(``python -m evaluation.spider_data``, then ``python -m router.train_sft --data`` that folder);
this benchmark routes Spider's 1034 **human-written** dev questions, which no router ever saw.
Each question's gold route comes from its gold SQL by the documented rule of
:func:`evaluation.gold_paths.derive_gold_path`, over the same schema graph the router routes on
(the data set folder ``DIR/<db_id>``, so ``max_hops`` is the one trained with).

Metrics per method, overall, by gold hop count, by database and for the questions whose gold
route the rule derived without a choice (``clear``) vs the others (``ambiguous``):

- ``table_set_acc``: the predicted path's set of tables equals the set of tables the gold SQL
  names (nested queries included), direction-blind;
- ``full_path_acc``: the predicted path equals the derived gold path (anchor, via in order, target);
- ``anchor_acc`` / ``target_acc``: each end on its own;
- ``latency_ms``: routing time per question.

Methods: ``router`` (the trained checkpoint, bound to each schema in turn with
:meth:`router.route.Router.for_schema`), ``retrieval``
(:class:`evaluation.baselines.RetrievalRouter`: the same pretrained encoder, no training) and,
with ``--reference``, ``reference``: a second checkpoint routed the same way (e.g. the SFT router
a PPO router started from), compared with ``router`` question by question (both right, one
only, neither; exact McNemar p, :func:`evaluation.paired.exact_mcnemar`) on full path and table set.
The rule's ambiguity reasons are counted over all questions; gold paths longer than
``max_hops`` (which no router here can output) are counted too.

Outputs in ``--out``: ``spider_results.json``, ``report.md`` (Markdown tables), ``by_hops.png``
and ``predictions.jsonl`` (one line per question: gold SQL, derived route, reasons, each method's path).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.dataset import load_dataset
from core.errors import ConfigError
from core.graph import JoinPath
from core.io import atomic_write_bytes, atomic_write_text, ensure_writable_dir, write_json, write_jsonl
from evaluation.gold_paths import SpiderGold, derive_gold_path
from evaluation.report import _md_table, _pct
from data_pipeline.encoders import DEFAULT_ENCODER

METHODS = ("router", "retrieval", "reference")
SCORE_COLS = ("table_set_acc", "full_path_acc", "anchor_acc", "target_acc")


@dataclass
class SpiderBenchConfig:
    """Route Spider's human-written dev questions with a trained router and the retrieval baseline."""

    data: Path
    """Folder written by python -m evaluation.spider_data --out (one data set folder per database)."""
    router: Path | None = None
    """Router checkpoint (e.g. python -m router.train_sft --data the same folder); needed by method router."""
    reference: Path | None = None
    """A second router checkpoint (e.g. the SFT router a PPO router started from), compared with --router question by question."""
    out: Path = Path("runs/spider_bench")
    """Folder for spider_results.json, report.md, by_hops.png and predictions.jsonl."""
    methods: tuple[str, ...] = ("router", "retrieval")
    """Methods to run (router, retrieval; reference is added when --reference is given)."""
    encoder: str = DEFAULT_ENCODER
    """Encoder of the untrained retrieval baseline."""
    retarget: bool = False
    """Let a router trained on other schemas route these (it is refused otherwise)."""
    db_ids: str = ""
    """Comma-separated database ids to evaluate (default: every dev database)."""
    max_question_tokens: int = 128
    """Raise the router's question length limit to this many tokens (a longer question is refused, not cut)."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""

    def __post_init__(self) -> None:
        for m in self.methods:
            if m not in METHODS:
                raise ConfigError(f"unknown method {m!r}; choose from {', '.join(METHODS)}", where="methods")
        if self.reference is not None and "reference" not in self.methods:
            self.methods = (*self.methods, "reference")
        if "reference" in self.methods and self.reference is None:
            raise ConfigError("method 'reference' needs --reference", where="reference")
        if "router" in self.methods and self.router is None:
            raise ConfigError("method 'router' needs --router (or pass --methods retrieval)", where="router")
        if self.max_question_tokens < 8:
            raise ConfigError(f"must be >= 8, got {self.max_question_tokens}", where="max_question_tokens")


# --------------------------------------------------------------------------- scoring (pure)


def _group(pairs: list[tuple[JoinPath, SpiderGold]]) -> dict[str, float | int]:
    n = len(pairs)
    if n == 0:
        return {"n": 0}
    return {
        "n": n,
        "table_set_acc": sum(set(p.tables) == set(g.tables) for p, g in pairs) / n,
        "full_path_acc": sum(g.path is not None and p == g.path for p, g in pairs) / n,
        "anchor_acc": sum(g.path is not None and p.anchor == g.path.anchor for p, g in pairs) / n,
        "target_acc": sum(g.path is not None and p.target == g.path.target for p, g in pairs) / n,
    }


def hop_label(gold: SpiderGold) -> str:
    """Gold hop count as a group name (``"none"`` when the SQL did not parse)."""
    return "none" if gold.path is None else str(gold.path.hops)


def score_routes(
    predicted: Sequence[JoinPath], golds: Sequence[SpiderGold], db_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """Table-set and full-path match of ``predicted`` against derived gold routes (same order).

    Returns:
        ``n``, ``table_set_acc``, ``full_path_acc``, ``anchor_acc``, ``target_acc`` overall, and
        the same per group in ``by_hops`` (gold hop count), ``by_ambiguity`` (``clear`` /
        ``ambiguous``) and, with ``db_ids``, ``by_db``. A gold without a path counts as wrong for
        every path metric; its table set is still judged.

    Raises:
        ValueError: the sequences differ in length.

    >>> g = SpiderGold(frozenset({"a", "b"}), JoinPath("a", (), "b"))
    >>> m = score_routes([JoinPath("b", (), "a"), JoinPath("a", (), "b")], [g, g])
    >>> m["table_set_acc"], m["full_path_acc"], m["by_hops"]["1"]["n"]
    (1.0, 0.5, 2)
    """
    if len(predicted) != len(golds) or (db_ids is not None and len(db_ids) != len(golds)):
        raise ValueError(f"{len(predicted)} predictions for {len(golds)} gold routes")
    pairs = list(zip(predicted, golds, strict=True))
    out: dict[str, Any] = dict(_group(pairs))
    keys = {
        "by_hops": [hop_label(g) for g in golds],
        "by_ambiguity": ["ambiguous" if g.ambiguous else "clear" for g in golds],
    }
    if db_ids is not None:
        keys["by_db"] = list(db_ids)
    for name, labels in keys.items():
        groups: dict[str, list[tuple[JoinPath, SpiderGold]]] = {}
        for label, pair in zip(labels, pairs, strict=True):
            groups.setdefault(label, []).append(pair)
        order = sorted(groups, key=_hop_order) if name == "by_hops" else sorted(groups)
        out[name] = {k: _group(groups[k]) for k in order}
    return out


def _hop_order(label: str) -> tuple[int, str]:
    return (int(label), "") if label.isdigit() else (10**9, label)


def ambiguity_counts(golds: Sequence[SpiderGold]) -> dict[str, Any]:
    """``{"questions", "ambiguous", "by_reason": {reason: questions}}``; a question may have several reasons.

    >>> ambiguity_counts([SpiderGold(frozenset(), None, ("parse_error",)), SpiderGold(frozenset({"a"}),
    ...                   JoinPath("a", (), "a"))])
    {'questions': 2, 'ambiguous': 1, 'by_reason': {'parse_error': 1}}
    """
    reasons = Counter(r for g in golds for r in set(g.ambiguous))
    return {
        "questions": len(golds),
        "ambiguous": sum(bool(g.ambiguous) for g in golds),
        "by_reason": dict(reasons.most_common()),
    }


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class SpiderQuestion:
    """One dev question with its derived gold route and whether a router can output that route."""

    db_id: str
    question: str
    sql: str
    gold: SpiderGold
    gold_legal: bool


def load_questions(cfg: SpiderBenchConfig) -> tuple[dict[str, list[SpiderQuestion]], dict[str, Any]]:
    """Spider dev questions grouped by database, with gold routes over each data set's graph.

    Returns:
        ``({db_id: questions}, {db_id: BuiltDataset})``.

    Raises:
        DataError: a database has no data set folder under ``cfg.data``. DownloadError: no Spider files.
        ConfigError: ``--db-ids`` names no dev database.
    """
    from data_pipeline.datasets import spider_dev

    dev = spider_dev()
    wanted = [x.strip() for x in cfg.db_ids.split(",") if x.strip()]
    known = sorted({str(q["db_id"]) for q in dev})
    for w in wanted:
        if w not in known:
            raise ConfigError(f"{w!r} is not a Spider dev database", where="db_ids")
    ids = wanted or known
    datasets = {db: load_dataset(Path(cfg.data) / db) for db in ids}
    by_db: dict[str, list[SpiderQuestion]] = {db: [] for db in ids}
    for q in dev:
        db = str(q["db_id"])
        if db not in datasets:
            continue
        graph = datasets[db].graph
        gold = derive_gold_path(str(q["query"]), graph)
        legal = gold.path is not None and graph.is_legal(gold.path)
        by_db[db].append(SpiderQuestion(db, str(q["question"]), str(q["query"]), gold, legal))
    return by_db, datasets


def run(cfg: SpiderBenchConfig) -> dict[str, Any]:
    """Route every selected question with every method, score, and write the outputs; returns the results.

    Raises:
        ConfigError, DataError, CheckpointError, DownloadError: bad options, data, checkpoint or files.
    """
    import torch

    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    out = ensure_writable_dir(cfg.out)
    by_db, datasets = load_questions(cfg)
    questions = [q for qs in by_db.values() for q in qs]
    golds = [q.gold for q in questions]
    db_of = [q.db_id for q in questions]
    predictions: dict[str, list[JoinPath]] = {}
    seconds: dict[str, float] = {}
    for method in cfg.methods:
        preds: list[JoinPath] = []
        elapsed = 0.0
        if method in ("router", "reference"):
            from router.route import Router

            checkpoint = cfg.router if method == "router" else cfg.reference
            assert checkpoint is not None
            first = next(iter(datasets.values()))
            base = Router.from_pretrained(checkpoint, first.graph, retarget=cfg.retarget, values=first.values)
            limit = base.policy.model.config.max_question_tokens
            base.policy.model.config.max_question_tokens = max(limit, cfg.max_question_tokens)
            for db, qs in by_db.items():
                router = base.for_schema(datasets[db].graph, retarget=cfg.retarget, where=checkpoint, values=datasets[db].values)
                t0 = time.perf_counter()
                preds += router.predict_paths([q.question for q in qs])
                elapsed += time.perf_counter() - t0
        else:
            from evaluation.baselines import RetrievalRouter
            from data_pipeline.encoders import TextEncoder

            encoder = TextEncoder.from_pretrained(cfg.encoder)
            for db, qs in by_db.items():
                baseline = RetrievalRouter(datasets[db].graph, encoder)
                t0 = time.perf_counter()
                preds += baseline.predict_paths([q.question for q in qs])
                elapsed += time.perf_counter() - t0
        predictions[method] = preds
        seconds[method] = elapsed
    scores = {}
    for method, preds in predictions.items():
        scores[method] = score_routes(preds, golds, db_of)
        scores[method]["latency_ms"] = 1000 * seconds[method] / max(1, len(questions))
    hops = Counter(hop_label(g) for g in golds)
    results: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "questions": len(questions),
        "databases": len(by_db),
        "gold_hops": {k: hops[k] for k in sorted(hops, key=_hop_order)},
        "gold_beyond_max_hops": sum(not q.gold_legal for q in questions),
        "ambiguity": ambiguity_counts(golds),
        "scores": scores,
    }
    if "router" in predictions and "reference" in predictions:
        results["paired"] = paired_counts(predictions["router"], predictions["reference"], golds)
    write_json(out / "spider_results.json", results)
    write_jsonl(out / "predictions.jsonl", [
        {"db_id": q.db_id, "question": q.question, "sql": q.sql,
         "gold_path": None if q.gold.path is None else q.gold.path.to_dict(), "gold_tables": sorted(q.gold.tables),
         "ambiguous": list(q.gold.ambiguous), "gold_legal": q.gold_legal}
        | {m: predictions[m][i].to_dict() for m in predictions}
        for i, q in enumerate(questions)
    ])  # fmt: skip
    atomic_write_text(out / "report.md", report_markdown(results))
    atomic_write_bytes(out / "by_hops.png", plot_by_hops(results))
    return results


def paired_counts(a: Sequence[JoinPath], b: Sequence[JoinPath], golds: Sequence[SpiderGold]) -> dict[str, dict[str, Any]]:
    """Routes ``a`` (method router) against ``b`` (reference) on the same questions, per measure
    (``full_path``, ``table_set``): ``both``, ``a_only``, ``b_only``, ``neither`` right and the
    exact McNemar p of the discordant counts.

    >>> from core.graph import JoinPath as P
    >>> gold = SpiderGold(frozenset({"t"}), P("t", (), "t"))
    >>> paired_counts([P("t", (), "t"), P("t", (), "t")], [P("u", (), "u"), P("t", (), "t")], [gold, gold])["full_path"]
    {'both': 1, 'a_only': 1, 'b_only': 0, 'neither': 0, 'p': 1.0}
    """
    from evaluation.paired import exact_mcnemar

    if not len(a) == len(b) == len(golds):
        raise ValueError(f"{len(a)} and {len(b)} routes for {len(golds)} gold routes")
    checks = {
        "full_path": lambda p, g: g.path is not None and p == g.path,
        "table_set": lambda p, g: set(p.tables) == set(g.tables),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, right in checks.items():
        c = Counter((right(x, g), right(y, g)) for x, y, g in zip(a, b, golds, strict=True))
        n = {"both": c[True, True], "a_only": c[True, False], "b_only": c[False, True], "neither": c[False, False]}
        out[name] = n | {"p": exact_mcnemar(n["a_only"], n["b_only"])}
    return out


# --------------------------------------------------------------------------- report


def report_markdown(results: dict[str, Any]) -> str:
    """The Markdown report: overall, by hop count, clear vs ambiguous, by database, ambiguity reasons."""
    scores = results["scores"]
    methods = list(scores)
    parts = [
        "# Spider dev routing benchmark", "",
        f"{results['questions']} human-written dev questions over {results['databases']} databases; "
        f"gold routes derived from the gold SQL ({results['ambiguity']['ambiguous']} ambiguous by the rule, "
        f"{results['gold_beyond_max_hops']} longer than the routers' max_hops).", "",
        "## Overall", "",
        _md_table(["method", "n", "table set", "full path", "anchor", "target", "ms/question"],
                  [[m, str(s["n"]), *(_pct(s.get(c)) for c in SCORE_COLS), f"{s['latency_ms']:.1f}"]
                   for m, s in scores.items()]),
        "",
    ]  # fmt: skip
    for key, title in (("by_hops", "By gold hop count"), ("by_ambiguity", "Clear vs ambiguous gold routes"),
                       ("by_db", "By database")):  # fmt: skip
        groups = list(next(iter(scores.values()), {}).get(key, {}))
        rows = []
        for g in groups:
            n = scores[methods[0]][key][g]["n"]
            cells = [f"{_pct(scores[m][key][g].get('table_set_acc'))} / {_pct(scores[m][key][g].get('full_path_acc'))}"
                     for m in methods]  # fmt: skip
            rows.append([g, str(n), *cells])
        header = ["hops" if key == "by_hops" else "group", "n", *(f"{m}: table set / full path" for m in methods)]
        parts += [f"## {title}", "", _md_table(header, rows), ""]
    if "paired" in results:
        rows = [[k.replace("_", " "), str(v["both"]), str(v["a_only"]), str(v["b_only"]), str(v["neither"]), f"{v['p']:.3g}"]
                for k, v in results["paired"].items()]  # fmt: skip
        parts += ["## router against reference, question by question", "",
                  _md_table(["measure", "both right", "router only", "reference only", "neither", "exact McNemar p"], rows), ""]  # fmt: skip
    amb = results["ambiguity"]
    parts += ["## Gold-route rule: ambiguous questions by reason", "",
              _md_table(["reason", "questions"], [[r, str(n)] for r, n in amb["by_reason"].items()]), "",
              f"{amb['ambiguous']} of {amb['questions']} questions have at least one reason.", ""]  # fmt: skip
    return "\n".join(parts)


def plot_by_hops(results: dict[str, Any]) -> bytes:
    """PNG bytes: table-set (solid) and full-path (hatched) match by gold hop count, one colour per method."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = results["scores"]
    hops = [h for h in next(iter(scores.values()), {}).get("by_hops", {}) if h.isdigit()]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(1, 2 * len(scores))
    for i, (name, m) in enumerate(scores.items()):
        for j, (col, hatch) in enumerate((("table_set_acc", ""), ("full_path_acc", "//"))):
            x = [k + (2 * i + j) * width for k in range(len(hops))]
            vals = [100 * m["by_hops"][h].get(col, 0.0) for h in hops]
            label = f"{name}: {'table set' if j == 0 else 'full path'}"
            ax.bar(x, vals, width=width, color=f"C{i}", hatch=hatch, alpha=1.0 if j == 0 else 0.6, label=label)
    n = {h: next(iter(scores.values()))["by_hops"][h]["n"] for h in hops}
    ax.set_xticks([k + width * (2 * len(scores) - 1) / 2 for k in range(len(hops))],
                  [f"{h} hops (n={n[h]})" for h in hops])  # fmt: skip
    ax.set_ylabel("% of questions")
    ax.set_ylim(0, 105)
    ax.set_title(f"Spider dev, {results['questions']} human-written questions")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry: run, print the overall table and where the report is."""
    cfg = parse(SpiderBenchConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    results = run(cfg)
    for m, s in results["scores"].items():
        print(f"{m:<10} n={s['n']}  table set {_pct(s['table_set_acc'])}%  full path {_pct(s['full_path_acc'])}%")
    print(f"report: {Path(cfg.out) / 'report.md'}")
    return results


if __name__ == "__main__":
    run_main(main)
