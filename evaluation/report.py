"""Writing the A/B results: JSON, a Markdown report with tables, PNG plots and a failures CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from core.graph import JoinPath
from core.io import atomic_write_bytes, atomic_write_text, write_json
from core.samples import Sample

ROUTE_COLS = ("anchor_acc", "via_acc", "target_acc", "full_path_acc", "table_set_acc", "nonnull_via_acc")
EXEC_COLS = ("execution_success", "execution_accuracy", "execution_f1", "empty_result_rate")


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}" if isinstance(v, int | float) else "-"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def routing_table(results: dict[str, Any]) -> str:
    """Markdown table: one row per routing method, accuracies in percent, latency in ms."""
    rows = []
    for name, m in results["routing"].items():
        rows.append([name, str(m.get("n", 0)), *(_pct(m.get(c)) for c in ROUTE_COLS), f"{m.get('latency_ms', 0):.1f}"])
    return _md_table(["method", "n", "anchor", "via", "target", "full path", "table set", "non-null via", "ms/question"], rows)


def routing_by_hops_table(results: dict[str, Any]) -> str:
    """Markdown table of full-path accuracy by hop count, one column per method."""
    methods = list(results["routing"])
    hops = sorted({h for m in results["routing"].values() for h in m.get("by_hops", {})}, key=int)
    rows = []
    for h in hops:
        cells = []
        for name in methods:
            g = results["routing"][name].get("by_hops", {}).get(h, {})
            cells.append(f"{_pct(g.get('full_path_acc'))} (n={g.get('n', 0)})")
        rows.append([h, *cells])
    return _md_table(["hops", *methods], rows)


def execution_table(results: dict[str, Any]) -> str:
    """Markdown table: one row per generation condition."""
    rows = []
    for name, m in results["generation"].items():
        rows.append([name, str(m.get("n", 0)), *(_pct(m.get(c)) for c in EXEC_COLS), f"{m.get('latency_ms', 0):.0f}"])
    return _md_table(["condition", "n", "runs", "execution accuracy", "row F1", "empty result", "ms/question"], rows)


def breakdown_table(results: dict[str, Any], section: str, key: str, metric: str) -> str:
    """Markdown table of ``metric`` by ``key`` (``by_language``, ``by_entity_kind``...), one column per method."""
    names = list(results[section])
    groups = sorted({g for m in results[section].values() for g in m.get(key, {})})
    rows = [[g, *(_pct(results[section][n].get(key, {}).get(g, {}).get(metric)) for n in names)] for g in groups]
    return _md_table([key.removeprefix("by_"), *names], rows)


def headline_table(results: dict[str, Any]) -> str:
    """The few numbers printed at the end of a run (plain text)."""
    lines = [f"data set {results['dataset']['name']}, split {results['dataset']['split']}, n={results['dataset']['n']}"]
    for name, m in results["routing"].items():
        lines.append(f"  route  {name:<10} full path {_pct(m.get('full_path_acc')):>5}%  table set "
                     f"{_pct(m.get('table_set_acc')):>5}%  non-null via {_pct(m.get('nonnull_via_acc')):>5}%")  # fmt: skip
    for name, m in results["generation"].items():
        lines.append(f"  sql    {name:<10} execution accuracy {_pct(m.get('execution_accuracy')):>5}%  runs "
                     f"{_pct(m.get('execution_success')):>5}%  empty {_pct(m.get('empty_result_rate')):>5}%")  # fmt: skip
    return "\n".join(lines)


def _plot(results: dict[str, Any]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    routing = results["routing"]
    if routing:
        hops = sorted({h for m in routing.values() for h in m.get("by_hops", {})}, key=int)
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(1, len(routing))
        for i, (name, m) in enumerate(routing.items()):
            vals = [100 * m.get("by_hops", {}).get(h, {}).get("full_path_acc", 0.0) for h in hops]
            ax.bar([int(h) + i * width for h in hops], vals, width=width, label=name)
        counts = {h: max(m.get("by_hops", {}).get(h, {}).get("n", 0) for m in routing.values()) for h in hops}
        ax.set_xticks([int(h) + width * (len(routing) - 1) / 2 for h in hops], [f"{h} hops\nn={counts[h]}" for h in hops])
        ax.set_ylabel("full-path accuracy (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"Routing on {results['dataset']['name']} ({results['dataset']['split']}, n={results['dataset']['n']})")
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        out["routing.png"] = buf.getvalue()
    gen = results["generation"]
    if gen:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(gen)
        x = range(len(names))
        for j, (col, label) in enumerate((("execution_success", "runs"), ("execution_accuracy", "execution accuracy"),
                                          ("empty_result_rate", "empty result"))):  # fmt: skip
            ax.bar([i + 0.27 * j for i in x], [100 * gen[n].get(col, 0.0) for n in names], width=0.27, label=label)
        ax.set_xticks([i + 0.27 for i in x], [f"{n}\nn={gen[n].get('n', 0)}" for n in names])
        ax.set_ylabel("% of questions")
        ax.set_ylim(0, 105)
        ax.set_title("Generated SQL by path condition")
        ax.legend()
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        plt.close(fig)
        out["execution.png"] = buf.getvalue()
    return out


def failures_csv(samples: list[Sample], predictions: dict[str, list[JoinPath]], gen_rows: dict[str, list[dict[str, Any]]]) -> str:
    """One CSV row per wrong route (kind ``route``) or wrong result (kind ``sql``), for error analysis."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["kind", "method", "id", "language", "entity_kind", "hops", "question", "gold_path", "predicted_path",
                "gold_sql", "predicted_sql", "reason"])  # fmt: skip
    for method, preds in predictions.items():
        for s, p in zip(samples, preds, strict=True):
            if p != s.path:
                w.writerow(["route", method, s.id, s.language, s.entity_kind, s.path.hops, s.question, str(s.path),
                            str(p), s.sql, "", "wrong path"])  # fmt: skip
    for condition, rows in gen_rows.items():
        for r in rows:
            if not r["exact"]:
                w.writerow(["sql", condition, r["id"], r["language"], r["entity_kind"], r["hops"], r["question"],
                            r["gold_path"], r["path"], r["gold_sql"], r["pred_sql"], r["reason"]])  # fmt: skip
    return buf.getvalue()


def write_report(
    out: Path,
    results: dict[str, Any],
    samples: list[Sample],
    predictions: dict[str, list[JoinPath]],
    gen_rows: dict[str, list[dict[str, Any]]],
) -> None:
    """Write ab_results.json, report.md, routing.png / execution.png and failures.csv into ``out``."""
    write_json(out / "ab_results.json", results)
    for name, data in _plot(results).items():
        atomic_write_bytes(out / name, data)
    atomic_write_text(out / "failures.csv", failures_csv(samples, predictions, gen_rows))
    ds = results["dataset"]
    parts = [f"# A/B evaluation: {ds['name']}, split `{ds['split']}`", "",
             f"{ds['n']} questions routed; {ds.get('n_generation', 0)} sent to the generator "
             f"`{', '.join(results['config'].get('generators') or []) or results['config'].get('generator') or '-'}`.", ""]  # fmt: skip
    if results["routing"]:
        parts += ["## Routing", "", routing_table(results), "", "### Full-path accuracy by hop count", "",
                  routing_by_hops_table(results), "", "### Full-path accuracy by language", "",
                  breakdown_table(results, "routing", "by_language", "full_path_acc"), "",
                  "### Full-path accuracy by entity (real value vs fuzzy mention)", "",
                  breakdown_table(results, "routing", "by_entity_kind", "full_path_acc"), "",
                  "![routing](routing.png)", ""]  # fmt: skip
    if results["generation"]:
        routed_by = results.get("generation_routed_by", "-")
        parts += ["## Generated SQL", "", f"Routed condition uses: `{routed_by}`. Prompt: {prompt_line(results)}.", "",
                  execution_table(results), "", "### Execution accuracy by hop count", "",
                  breakdown_table(results, "generation", "by_hops", "execution_accuracy"), "",
                  "![execution](execution.png)", ""]  # fmt: skip
    if results["notes"]:
        parts += ["## Notes", "", *(f"- {n}" for n in results["notes"]), ""]
    parts += ["Per-sample failures: `failures.csv`. Raw numbers: `ab_results.json`.", ""]
    atomic_write_text(out / "report.md", "\n".join(parts))
    json.dumps(results)  # fail loudly here, not in a reader, if something is not JSON-able


def prompt_line(results: dict[str, Any]) -> str:
    """How the generators' prompts were built, e.g. ``3 retrieved examples, full schema, with reasoning``
    (one clause per generator when several ran) and the decoding options."""
    prompts = results.get("generation_prompt")
    if not prompts:
        return "-"
    if "k_examples" in prompts:  # a single generator's settings (older results)
        prompts = {"generator": prompts}

    def one(p: dict[str, Any]) -> str:
        return (f"{p['k_examples']} retrieved examples, {p['schema_detail']} schema, "
                f"{'with' if p['with_reasoning'] else 'without'} reasoning"
                + (", linked values" if p.get("value_linking") else ""))  # fmt: skip

    text = "; ".join(f"{name}: {one(p)}" if len(prompts) > 1 else one(p) for name, p in prompts.items())
    opts = results.get("generation_options") or {}
    if opts.get("constrained"):
        text += "; joins forced to the path (route-constrained decoding)"
    if opts.get("repair"):
        text += "; column references repaired from the schema and linked values"
    if opts.get("samples", 1) > 1:
        text += f"; self-consistency over {opts['samples']} queries"
    return text
