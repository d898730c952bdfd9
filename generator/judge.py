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
routes on one core), so the file is written atomically every ``--save-every`` questions and when
the run is stopped (Ctrl-C, SIGTERM), and a rerun with the same ``--out`` continues where the last
one stopped; it refuses to continue a file judged with other ``--rerank`` settings.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.dataset import load_dataset
from core.graph import SchemaGraph
from core.errors import ConfigError, DataError
from core.io import read_jsonl_lines, write_jsonl
from envs.evidence import read_judge
from envs.schema_routing_v1 import read_question_records
from generator.rerank import CandidateScore, RerankConfig, confidences

SETTINGS = ("model", "forward_weight", "channel_weight", "temperature", "top_k")
"""The ``--rerank`` settings recorded in every ``judge`` field; a run continues only a file judged
with the same ones (a file without ``top_k``, written before it was recorded, is not checked for it)."""


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
    retarget: bool = False
    """Allow a router trained on another schema to route over this data set's tables."""
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
        assert self.out is not None and self.questions is not None
        for name in ("questions", "out"):
            if getattr(self, name).is_dir():
                raise ConfigError(f"{getattr(self, name)} is a folder; give a file's path", where=f"--{name}")
        if self.out.resolve() == self.questions.resolve():
            raise ConfigError("must not be the question log itself (it would be overwritten); pick another file",
                              where="--out")


def settings(config: RerankConfig) -> dict[str, Any]:
    """The :data:`SETTINGS` of ``config`` as they are recorded in a ``judge`` field."""
    return {name: getattr(config, name) for name in SETTINGS}


def judge_record(record: dict[str, Any], scores: Sequence[CandidateScore], config: RerankConfig) -> dict[str, Any]:
    """``record`` with a ``judge`` field: the :data:`SETTINGS` and every candidate's path,
    reranked confidence ``p`` and log-probs.

    ``scores`` are the rescored candidates of ``record["question"]`` (router order); ``p`` is
    :func:`generator.rerank.confidences` at ``config``'s weights and temperature, rounded to 6
    decimals (log-probs, in nats, to 4).
    """
    p = confidences(scores, config.forward_weight, config.channel_weight, config.temperature)
    routes = [{"path": c.path.to_dict(), "p": round(pc, 6), "router_logp": round(c.router_logp, 4),
               "forward_logp": round(c.forward_logp, 4), "channel_logp": round(c.channel_logp, 4)}
              for c, pc in zip(scores, p, strict=True)]
    return {**record, "judge": {**settings(config), "routes": routes}}


def finished_part(out: Path, records: Sequence[dict[str, Any]], config: RerankConfig,
                  graph: SchemaGraph | None = None) -> list[dict[str, Any]]:
    """The judged lines of an earlier run's ``out`` (empty when it does not exist).

    Raises:
        DataError: ``out`` holds lines that are not the first questions of ``records`` in order
            (it was written for another question log) or more lines than ``records``, a line
            without a well-formed ``judge`` field (:func:`envs.evidence.read_judge`; routes of
            ``graph``'s tables when given), or one judged with other :data:`SETTINGS` than
            ``config``'s (file and line named).
    """
    if not out.exists():
        return []
    now = settings(config)
    done = []
    for i, (line, rec) in enumerate(read_jsonl_lines(out)):
        if i >= len(records):
            raise DataError(f"more judged lines than the question log's {len(records)} questions; this file was "
                            "judged from another log: remove it or pick another --out", where=out, line=line)
        if rec.get("question") != records[i]["question"]:
            raise DataError(f"not the question on line {i + 1} of the question log; this file was judged from "
                            "another log: remove it or pick another --out", where=out, line=line)
        if read_judge(rec, graph, out, line) is None:
            raise DataError("no 'judge' field; remove the file or pick another --out", where=out, line=line)
        diff = [k for k in SETTINGS if k in rec["judge"] and rec["judge"][k] != now[k]]
        if diff:
            pairs = ", ".join(f"{k} {rec['judge'][k]!r} (now {now[k]!r})" for k in diff)
            raise DataError(f"judged with other --rerank settings: {pairs}; rerun with those or pick another --out",
                            where=out, line=line)
        done.append(rec)
    return done


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (so the finished questions are saved)."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point (module docstring); returns ``{"n": questions, "judged": newly judged,
    "seconds_per_question": float, "changed": questions whose best judged route is not the router's}``.

    Raises:
        ConfigError: a missing option or a scoring model that cannot be loaded.
        DataError: a malformed question log (:func:`envs.schema_routing_v1.read_question_records`), a
            question longer than the router reads, or an
            output file of another log or other settings.
        CheckpointError: the router folder is broken or was trained on another schema.
        KeyboardInterrupt: Ctrl-C or SIGTERM, after the questions judged so far are written.
    """
    cfg = parse(JudgeConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    assert cfg.router and cfg.data and cfg.questions and cfg.out  # checked in __post_init__
    lines, records = zip(*read_question_records(cfg.questions), strict=True)
    ds = load_dataset(cfg.data)
    done = finished_part(cfg.out, records, cfg.rerank, ds.graph)

    import torch

    from core.io import ensure_writable_file
    from core.progress import progress_bar
    from data_pipeline.encoders import quiet_loading
    from generator.rerank import RouteReranker, route_and_rerank
    from router.model import check_question_lengths
    from router.route import Router

    ensure_writable_file(cfg.out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    todo = records[len(done):]
    per_q, changed = 0.0, sum(1 for r in done if _best(r) != 0)
    if todo:
        router = Router.from_pretrained(cfg.router, ds.graph, values=ds.values, retarget=cfg.retarget)
        check_question_lengths(router.policy.model, [r["question"] for r in todo], cfg.questions, lines[len(done):])
        with quiet_loading():
            reranker = RouteReranker.from_pretrained(router, cfg.rerank, examples=ds.split("train"))
        bar = progress_bar(total=len(records), desc="judge", unit="q", enabled=cfg.progress)
        bar.update(len(done))
        seconds, unsaved = 0.0, 0
        try:
            with _sigterm_as_interrupt():
                for rec in todo:
                    _, (rr,), per = route_and_rerank(router, reranker, [rec["question"]])
                    done.append(judge_record(rec, rr.candidates, cfg.rerank))
                    seconds, changed, unsaved = seconds + per, changed + int(rr.changed), unsaved + 1
                    bar.update(1)
                    if unsaved >= cfg.save_every:
                        write_jsonl(cfg.out, done)  # atomic: a killed run leaves the last whole file
                        unsaved = 0
        except KeyboardInterrupt:
            write_jsonl(cfg.out, done)
            bar.close()
            print(f"stopped: {len(done)} of {len(records)} questions judged, saved to {cfg.out}; "
                  "run the same command again to continue", file=sys.stderr)
            raise
        if unsaved:
            write_jsonl(cfg.out, done)
        bar.close()
        per_q = seconds / len(todo)
    print(f"judged {len(done)} questions ({len(todo)} now, {per_q:.1f} s each); the judge's best route is not "
          f"the router's first for {changed}; wrote {cfg.out}", file=sys.stderr)
    return {"n": len(done), "judged": len(todo), "seconds_per_question": per_q, "changed": changed}


def _best(record: dict[str, Any]) -> int:
    """Index (router order) of the judged route with the highest ``p`` (the routes are checked by
    :func:`finished_part` or written by :func:`judge_record`)."""
    ps = [r["p"] for r in record["judge"]["routes"]]
    return max(range(len(ps)), key=lambda j: (ps[j], -j))


if __name__ == "__main__":
    run_main(main)
