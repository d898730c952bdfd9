"""Judge a question log's routes with the language-model reranker: a label-free reward for PPO.

    python -m generator.judge --router R --data D --questions log.jsonl --out judged.jsonl
    python -m router.train_ppo --init R --data D --unlabelled judged.jsonl ...

Each question of ``--questions`` (one ``{"question": ...}`` object per line, as a user's question
log; other fields are kept) is routed by ``--router`` and its ``--rerank.top-k`` best routes are
rescored by the causal LM of :mod:`generator.rerank` (the router's log-prob, log p(route |
question) and log p(question | route)). The output file is the input with a ``judge`` field added
to every line::

    {"question": "...", "judge": {"temperature": 2.7, "forward_weight": 0.5, "channel_weight": 2.0,
     "model": "...", "routes": [{"path": {"anchor": ..., "via": [...], "target": ...},
     "p": 0.71, "router_logp": ..., "forward_logp": ..., "channel_logp": ...}, ...]}}

``p`` is the reranked confidence of each route (softmax of the combined score over the rescored
routes at ``--rerank.temperature``; they sum to 1). ``route2sql/SchemaRouting-v1`` pays an
unlabelled question's route ``judge_weight x p`` (:func:`rewards.label_free.judge_reward`), so PPO
moves the router towards the routes the LM prefers, on the questions its users ask, with no gold
route. The LM never sees a gold label, only the schema, its descriptions, the values the question
mentions and a few generated training questions as examples.

Scoring takes seconds per question on a CPU (about 25 s with the default 1.5B model and ten
routes on one core), so the file is written atomically every ``--save-every`` questions and a
rerun with the same ``--out`` continues where the last one stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.errors import ConfigError, DataError
from core.io import read_jsonl_lines, write_jsonl
from generator.rerank import CandidateScore, RerankConfig, confidences


@dataclass
class JudgeConfig:
    """Options of ``python -m generator.judge``."""

    router: Path | None = None
    """Router folder (python -m router.train_sft or router.train_ppo --out) whose best routes are judged."""
    data: Path | None = None
    """Data set folder (python -m data_pipeline.build): its schema, values and training questions (the prompt's examples)."""
    questions: Path | None = None
    """Question log: one JSON object with a "question" string per line (no gold route needed)."""
    out: Path | None = None
    """Output file: the question log with a "judge" field on every line. An unfinished file of an earlier run is continued."""
    rerank: RerankConfig = field(default_factory=RerankConfig)
    """How the routes are rescored."""
    save_every: int = 10
    """Write the output file after this many newly judged questions."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    progress: bool = True
    """Show a progress bar with rate and ETA."""

    def __post_init__(self) -> None:
        for name in ("router", "data", "questions", "out"):
            if getattr(self, name) is None:
                raise ConfigError("is required", where=f"--{name}")
        if self.save_every < 1:
            raise ConfigError(f"must be at least 1, got {self.save_every}", where="--save-every")
        if self.threads < 0:
            raise ConfigError(f"must be >= 0, got {self.threads}", where="--threads")


def judge_record(record: dict[str, Any], scores: Sequence[CandidateScore], config: RerankConfig) -> dict[str, Any]:
    """``record`` with a ``judge`` field: every candidate's path, reranked confidence ``p`` and log-probs.

    ``scores`` are the rescored candidates of ``record["question"]`` (router order); ``p`` is
    :func:`generator.rerank.confidences` at ``config``'s weights and temperature, rounded to 6
    decimals (log-probs, in nats, to 4).
    """
    p = confidences(scores, config.forward_weight, config.channel_weight, config.temperature)
    routes = [{"path": c.path.to_dict(), "p": round(pc, 6), "router_logp": round(c.router_logp, 4),
               "forward_logp": round(c.forward_logp, 4), "channel_logp": round(c.channel_logp, 4)}
              for c, pc in zip(scores, p, strict=True)]
    return {**record, "judge": {"model": config.model, "forward_weight": config.forward_weight,
                                "channel_weight": config.channel_weight, "temperature": config.temperature,
                                "routes": routes}}


def read_questions(path: Path) -> list[dict[str, Any]]:
    """The question log's objects (file order).

    Raises:
        DataError: missing or malformed file, a line without a non-empty string ``question``
            (file and line named), or no line at all.
    """
    out = []
    for line, rec in read_jsonl_lines(path):
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise DataError("field 'question' must be a non-empty string", where=path, line=line)
        out.append(rec)
    if not out:
        raise DataError("no questions", where=path)
    return out


def finished_part(out: Path, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The judged lines of an earlier run's ``out`` (empty when it does not exist).

    Raises:
        DataError: ``out`` holds lines that are not the first questions of ``records`` in order
            (it was written for another question log), or lines without a ``judge`` field.
    """
    if not out.exists():
        return []
    done = [rec for _, rec in read_jsonl_lines(out)]
    for i, rec in enumerate(done):
        if i >= len(records) or rec.get("question") != records[i]["question"] or "judge" not in rec:
            raise DataError(f"line {i + 1} is not the judged question {i + 1} of the question log; "
                            "remove the file or pick another --out", where=out)
    return done


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point (module docstring); returns ``{"n": questions, "judged": newly judged,
    "seconds_per_question": float, "changed": questions whose best judged route is not the router's}``.

    Raises:
        ConfigError: a missing option or a scoring model that cannot be loaded.
        DataError: a malformed question log or an output file of another log.
        CheckpointError: the router folder is broken or was trained on another schema.
    """
    cfg = parse(JudgeConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    assert cfg.router and cfg.data and cfg.questions and cfg.out  # checked in __post_init__
    records = read_questions(cfg.questions)
    done = finished_part(cfg.out, records)

    import torch

    from core.dataset import load_dataset
    from core.io import ensure_writable_dir
    from core.progress import progress_bar
    from data_pipeline.encoders import quiet_loading
    from generator.rerank import RouteReranker, route_and_rerank
    from router.route import Router

    ensure_writable_dir(cfg.out.parent)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    todo = records[len(done):]
    per_q, changed = 0.0, sum(1 for r in done if r["judge"]["routes"] and _best(r) != 0)
    if todo:
        ds = load_dataset(cfg.data)
        router = Router.from_pretrained(cfg.router, ds.graph, values=ds.values)
        with quiet_loading():
            reranker = RouteReranker.from_pretrained(router, cfg.rerank, examples=ds.split("train"))
        bar = progress_bar(total=len(records), desc="judge", unit="q", enabled=cfg.progress)
        bar.update(len(done))
        seconds = 0.0
        for start in range(0, len(todo), cfg.save_every):
            chunk = todo[start:start + cfg.save_every]
            _, reranked, per = route_and_rerank(router, reranker, [r["question"] for r in chunk],
                                                progress=lambda i: bar.update(1))
            seconds += per * len(chunk)
            for rec, rr in zip(chunk, reranked, strict=True):
                done.append(judge_record(rec, rr.candidates, cfg.rerank))
                changed += int(rr.changed)
            write_jsonl(cfg.out, done)  # atomic: a stopped run leaves the last whole chunk
        bar.close()
        per_q = seconds / len(todo)
    print(f"judged {len(done)} questions ({len(todo)} now, {per_q:.1f} s each); the judge's best route is not "
          f"the router's first for {changed}; wrote {cfg.out}", file=sys.stderr)
    return {"n": len(done), "judged": len(todo), "seconds_per_question": per_q, "changed": changed}


def _best(record: dict[str, Any]) -> int:
    """Index (router order) of the judged route with the highest ``p``."""
    ps = [r["p"] for r in record["judge"]["routes"]]
    return max(range(len(ps)), key=lambda j: (ps[j], -j))


if __name__ == "__main__":
    run_main(main)
