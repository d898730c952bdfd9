"""Pseudo-labels from a judged question log: self-training the router on the judge's best routes.

A judged log (``python -m generator.judge``) holds questions people wrote, without gold routes,
each with a ``judge`` field: the language-model judge's probability ``p`` of each of the router's
best routes. :func:`pseudo_labelled_samples` turns every question whose best judged route has
``p >= min_p`` into a training sample labelled with that route, so SFT fits the judge's choice on
the kind of question people ask (self-training from a stronger teacher, as in Yarowsky 1995 and
the "noisy student" of Xie et al. 2020; here the teacher is the reranker, not the router itself).

PPO with the judge's reward (``router.train_ppo --unlabelled``) uses the same scores as a reward;
this is the supervised alternative it should beat.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ConfigError
from core.graph import SchemaGraph
from core.samples import Sample
from envs.evidence import read_judge
from envs.schema_routing_v1 import read_question_records

PSEUDO_TEMPLATE_ID = "pseudo_label"
"""``template_id`` of a pseudo-labelled sample (``meta["pseudo_label"]`` holds the log and p)."""


def _language(question: str, lang: object) -> str:
    """``lang`` when it is ``"en"`` or ``"zh"``, else ``"zh"`` for a question with a CJK character."""
    if lang in ("en", "zh"):
        return str(lang)
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in question) else "en"


def pseudo_labelled_samples(log: str | Path, graph: SchemaGraph, db: str = "", min_p: float = 0.6) -> list[Sample]:
    """The questions of a judged log whose best judged route has ``p >= min_p``, as training samples.

    Args:
        log: a JSONL question log; a line with a ``judge`` field (:func:`envs.evidence.read_judge`)
            may become a sample, a line without one is skipped.
        graph: the schema the routes must belong to; a judged route that is not one of its legal
            paths is skipped (a log judged against an older schema).
        db: the samples' ``db`` field.
        min_p: the least judge probability of the best route, in ``[0, 1]``.

    Returns:
        Samples with split ``train``, the best judged route as ``path``, no SQL, id
        ``<db>-pseudo-<line>``, and ``meta["pseudo_label"] = {"log", "line", "p"}``, in file order.

    Raises:
        ConfigError: ``min_p`` is outside ``[0, 1]``.
        DataError: the log is missing or malformed (file and line named; as
            :func:`envs.schema_routing_v1.read_question_records` and :func:`envs.evidence.read_judge`).
    """
    if not 0.0 <= min_p <= 1.0:
        raise ConfigError(f"must be in [0, 1], got {min_p}", where="--pseudo-min-p")
    legal = set(graph.legal_paths)
    out: list[Sample] = []
    for line, rec in read_question_records(log):
        judge = read_judge(rec, graph, log, line)
        if not judge:
            continue
        path, p = max(judge.items(), key=lambda kv: kv[1])
        if p < min_p or path not in legal:
            continue
        q = rec["question"].strip()
        out.append(Sample(
            id=f"{db or graph.schema.name}-pseudo-{line}", db=db or graph.schema.name, question=q,
            language=_language(q, rec.get("lang", rec.get("language"))), path=path, sql="",
            template_id=PSEUDO_TEMPLATE_ID, split="train",
            meta={"pseudo_label": {"log": str(log), "line": line, "p": round(p, 6)}},
        ))  # fmt: skip
    return out
