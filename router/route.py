"""Route questions with a trained router: ``python -m router.route --router DIR "question"``.

Python API::

    router = Router.from_pretrained("runs/sft")          # the schema it was trained on
    r = router.route("客户 Around the Horn 买过哪些产品？")
    r.path, r.prob, r.skeleton                            # JoinPath, joint probability, SQL skeleton

A checkpoint records the fingerprint of the schema it was trained on. Loading it with another
schema (``schema=`` / ``--db`` / ``--schema``) raises :class:`CheckpointError` naming both
fingerprints unless ``retarget=True`` (``--retarget``): the heads then score the new schema's
own tables and via options, since they have no fixed output units.

A router trained on several schemas at once (``python -m router.train_sft --data`` a folder of
data sets) records all of them (``schemas`` in ``config.json``) and no single fingerprint. It
has no default schema: pass the one to route over, and it binds to it without ``retarget`` when
that schema's fingerprint is one of the recorded ones (``retarget`` allows any other). Saving
such a bound router (e.g. after PPO on one schema) records only the schema it is bound to.

File mode: ``--file in.jsonl --out out.jsonl`` reads one ``{"question": ...}`` object per line
(optional ``id``, and a gold ``path`` that is checked against the schema and scored) and writes
one :meth:`RoutedPath.to_dict` per line.

MongoDB: ``--backend mongodb --uri mongodb://HOST:PORT/DATABASE`` routes over the schema read from
the server (:func:`~data_pipeline.backends.registry.open_backend`), with a value index built from
the server's own values (:meth:`core.values.ValueIndex.build`). A copy made by
``python -m data_pipeline.mongo_load`` has the SQLite schema's fingerprint, so a router trained on
the SQLite database loads on it without ``--retarget``. Each route's ``skeleton`` is then the
path's ``$lookup`` pipeline (JSON, :func:`~data_pipeline.backends.mongo_pipeline.skeleton_pipeline`)
instead of SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import torch
import tyro

from core.cli import check_text_arguments, parse, run_main
from core.errors import DataError
from core.graph import JoinPath, SchemaGraph
from core.io import ensure_writable_file, read_jsonl, terminal_safe, write_jsonl
from core.schema import Schema, introspect
from core.values import ValueIndex, load_value_index
from router.checkpoint import SCHEMA_FILE, SCHEMAS_FILE, RouterCheckpointConfig
from router.model import PathSpace, RouterModel
from router.policy import PathDistribution, RouterPolicy

__all__ = ["SCHEMA_FILE", "SCHEMAS_FILE", "RoutedPath", "Router", "load_schema"]


@dataclass(frozen=True)
class RoutedPath:
    """The router's answer for one question.

    Attributes:
        question: the question.
        path: the most probable legal path (joint decoding).
        prob: its joint probability.
        anchor_prob: p(anchor) (marginal over legal paths).
        via_prob: p(via | anchor).
        target_prob: p(target | anchor, via); ``prob == anchor_prob * via_prob * target_prob``.
        skeleton: executable join skeleton of ``path`` (``SELECT COUNT(*) FROM ... JOIN ...``;
            from ``python -m router.route --backend mongodb``, the same as an aggregation pipeline).
        top_k: the ``k`` most probable paths with their probabilities, best first
            (``top_k[0]`` is ``(path, prob)``).
        confidence: the calibrated probability that ``path`` is the right route (``prob`` after
            the checkpoint's temperature, fitted on held-out questions; :mod:`router.calibration`).
        uncertain: ``confidence`` is below the router's threshold: look at ``top_k`` too.
        top_k_confidence: the calibrated confidence of each path in ``top_k``, same order
            (``top_k_confidence[0] == confidence``); on the same scale as ``confidence``, unlike
            ``top_k``'s raw probabilities.
        values: the database values the question mentions (value linking), best first, as
            ``{table, column, value, score, start, end, exact}``.
    """

    question: str
    path: JoinPath
    prob: float
    anchor_prob: float
    via_prob: float
    target_prob: float
    skeleton: str
    top_k: tuple[tuple[JoinPath, float], ...] = field(default=())
    confidence: float = 1.0
    uncertain: bool = False
    values: tuple[dict[str, Any], ...] = field(default=())
    top_k_confidence: tuple[float, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "path": self.path.to_dict(),
            "prob": self.prob,
            "anchor_prob": self.anchor_prob,
            "via_prob": self.via_prob,
            "target_prob": self.target_prob,
            "skeleton": self.skeleton,
            "top_k": [{"path": p.to_dict(), "prob": q, "confidence": c}
                      for (p, q), c in zip(self.top_k, self.top_k_confidence or [q for _, q in self.top_k], strict=True)],
            "confidence": self.confidence,
            "uncertain": self.uncertain,
            "values": list(self.values),
        }


def load_schema(source: Schema | SchemaGraph | str | Path, descriptions: str | Path | None = None) -> Schema:
    """A schema from an object, a data set folder, a ``schema.json`` file or a SQLite database.

    Raises:
        SchemaError: a database that cannot be read.
        DataError: a ``schema.json`` that is malformed, or a path that is none of these.
    """
    if isinstance(source, SchemaGraph):
        return source.schema
    if isinstance(source, Schema):
        return source
    path = Path(source)
    if path.is_dir():
        path = path / SCHEMA_FILE
    if path.suffix == ".json":
        if not path.is_file():
            raise DataError("schema file not found", where=path)
        try:
            return Schema.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"malformed schema file ({exc})", where=path) from exc
    return introspect(path, descriptions=descriptions)


DEFAULT_MIN_CONFIDENCE = 0.6
"""Routes whose calibrated confidence is below this are marked uncertain (``RoutedPath.uncertain``)."""


class Router:
    """A trained router bound to one schema, for inference (no gradients, dropout off).

    PPO can train ``router.policy`` (a :class:`RouterPolicy`) in place and keep routing and
    saving through this object: candidate encodings follow the weights.

    Args:
        policy: the network and the schema's legal paths.
        checkpoint: the checkpoint's metadata (:class:`router.checkpoint.RouterCheckpointConfig`;
            None: a fresh one for ``policy``'s schema).
        min_confidence: routes whose calibrated confidence is below this are marked uncertain.
        retargeted: the schema is not one the checkpoint was trained on.
    """

    def __init__(
        self,
        policy: RouterPolicy,
        checkpoint: RouterCheckpointConfig | None = None,
        min_confidence: float = DEFAULT_MIN_CONFIDENCE,
        *,
        retargeted: bool = False,
    ):
        self.policy = policy.eval()
        self.checkpoint = checkpoint or RouterCheckpointConfig.for_graphs(policy.model.config, [policy.space.graph])
        self.retargeted = retargeted
        self.min_confidence = min_confidence
        self._cache: tuple[tuple[int, ...], Any] | None = None
        self._actor: list[torch.nn.Parameter] | None = None  # listed once: walking the modules costs a millisecond

    @property
    def meta(self) -> dict[str, Any]:
        """The checkpoint's ``config.json`` as a dict, plus ``retargeted``."""
        return self.checkpoint.to_dict() | {"retargeted": self.retargeted}

    @property
    def temperature(self) -> float:
        """The temperature the checkpoint was calibrated with (1.0 when it was not)."""
        return self.checkpoint.temperature

    def _candidates(self) -> Any:
        """The schema's candidate vectors, recomputed only when a weight changed in place
        (an optimizer step bumps every tensor's version counter), e.g. while PPO trains the policy."""
        if self._actor is None:
            self._actor = self.policy.actor_parameters()
        version = tuple(p._version for p in self._actor)
        if self._cache is None or self._cache[0] != version:
            with torch.no_grad():
                self._cache = (version, self.policy.candidates())
        return self._cache[1]

    def save_pretrained(
        self, out_dir: str | Path, metadata: dict[str, Any] | None = None, *, files: dict[str, Any] | None = None
    ) -> Path:
        """Save the network with this router's schema (fingerprint, snapshot, value index) and ``metadata``.

        The folder loads with :meth:`from_pretrained` like an SFT checkpoint. ``metadata`` sets
        ``temperature``, ``training`` and ``metrics`` and adds any other key (the loaded
        checkpoint's are kept unless replaced); ``files`` maps extra file names to JSON objects.
        """
        meta = dict(metadata or {})
        files = dict(files or {}) | dict(meta.pop("files", {}))
        checkpoint = self.checkpoint.bound_to(self.graph, self.policy.space.values).updated(meta)
        return self.policy.model.save_pretrained(out_dir, checkpoint, files)

    @classmethod
    def from_pretrained(
        cls,
        ckpt_dir: str | Path,
        schema: Schema | SchemaGraph | str | Path | None = None,
        *,
        retarget: bool = False,
        max_hops: int | None = None,
        descriptions: str | Path | None = None,
        values: ValueIndex | None = None,
    ) -> Router:
        """Load a checkpoint written by ``python -m router.train_sft`` (or PPO), offline.

        Args:
            ckpt_dir: the checkpoint folder.
            schema: route over this schema instead of the checkpoint's own snapshot: a
                :class:`Schema`/:class:`SchemaGraph`, a data set folder, a ``schema.json`` or a
                SQLite file.
            retarget: allow ``schema`` to differ from the training schema.
            max_hops: longest legal path (default: a graph's or data set's own, else the checkpoint's).
            descriptions: description sidecar for a SQLite ``schema``.
            values: the database's value index; by default a data set folder's ``values.json``,
                else the checkpoint's own when ``schema`` is the one it was trained on.

        A multi-schema checkpoint (module docstring) needs ``schema`` and accepts any of its
        recorded schemas without ``retarget``; binding follows
        :meth:`router.checkpoint.RouterCheckpointConfig.bind`.

        Raises:
            CheckpointError: missing or broken checkpoint files, a schema whose fingerprint
                differs from the checkpoint's (or from all of a multi-schema checkpoint's) while
                ``retarget`` is False (both named), or no ``schema`` for a multi-schema checkpoint.
        """
        model, checkpoint = RouterModel.from_pretrained(ckpt_dir)
        if schema is None:
            target: Schema | SchemaGraph = checkpoint.snapshot(ckpt_dir)
        elif isinstance(schema, (Schema, SchemaGraph)):
            target = schema
        else:
            target = load_schema(schema, descriptions)
            if max_hops is None:
                max_hops = _data_set_hops(Path(schema))
            if descriptions is None and not checkpoint.multi and target.fingerprint() == checkpoint.schema_fingerprint:
                # the database it was trained on, read again without the descriptions, synonyms and
                # Chinese names its data set had: route with those (the table texts it learned), on this file
                target = replace(checkpoint.snapshot(ckpt_dir).schema, source=target.source)
        graph, known = checkpoint.bind(target, retarget=retarget, max_hops=max_hops, where=ckpt_dir)
        values = values if values is not None else _values_for(ckpt_dir, schema, graph.schema, checkpoint)
        return cls(RouterPolicy(model, PathSpace(graph, values)), checkpoint, retargeted=not known)

    def for_schema(
        self, graph: SchemaGraph, *, retarget: bool = False, where: str | Path = "router", values: ValueIndex | None = None
    ) -> Router:
        """This router's network bound to another schema graph, checked as :meth:`from_pretrained`
        checks (so one loaded multi-schema router can route on each of its schemas in turn).
        ``values`` is that database's value index (None: no value linking).

        Raises:
            CheckpointError: as :meth:`from_pretrained`, naming ``where``.
        """
        graph, known = self.checkpoint.bind(graph, retarget=retarget, where=where)
        return Router(RouterPolicy(self.policy.model, PathSpace(graph, values)), self.checkpoint, self.min_confidence,
                      retargeted=not known)  # fmt: skip

    @property
    def graph(self) -> SchemaGraph:
        return self.policy.space.graph

    @property
    def schema(self) -> Schema:
        return self.policy.space.schema

    @torch.no_grad()
    def distributions(self, questions: Sequence[str], batch_size: int = 64) -> list[PathDistribution]:
        """The policy's distributions for ``questions``, in batches of ``batch_size`` (eval mode, no gradients).

        Raises:
            DataError: an empty or too long question (``line`` = its 1-based position).
        """
        was = self.policy.training
        if was:  # switching modes walks every module (7 ms for e5-small): only when PPO left it training
            self.policy.eval()
        try:
            return self._distributions(questions, batch_size)
        finally:
            if was:
                self.policy.train(True)

    def _distributions(self, questions: Sequence[str], batch_size: int) -> list[PathDistribution]:
        out = []
        for start in range(0, len(questions), batch_size):
            chunk = list(questions[start : start + batch_size])
            try:
                batch = self.policy.make_batch(chunk)
            except DataError as exc:
                raise DataError(exc.message, where="question", line=start + (exc.line or 1)) from exc
            out.append(self.policy.distribution(batch, candidates=self._candidates(), with_anchor_prior=True))
        return out

    def route_batch(self, questions: Sequence[str], top_k: int = 3, batch_size: int = 64) -> list[RoutedPath]:
        """Route every question; see :meth:`route`. ``len(result) == len(questions)``."""
        space = self.policy.space
        results: list[RoutedPath] = []
        k = max(1, min(top_k, space.n_paths))
        qi = 0
        values = space.values
        for dist in self.distributions(questions, batch_size):
            probs = dist.log_prob.exp()
            calibrated = torch.softmax(dist.log_prob / self.temperature, dim=-1)
            top_p, top_i = probs.topk(k, dim=-1)
            for row in range(probs.shape[0]):
                best = int(top_i[row, 0])
                pair = int(space.path_pair[best])
                anchor = int(space.path_anchor[best])
                path = space.paths[best]
                results.append(
                    RoutedPath(
                        question=questions[qi],
                        path=path,
                        prob=float(top_p[row, 0]),
                        anchor_prob=float(dist.anchor_log_prob[row, anchor].exp()),
                        via_prob=float(dist.via_log_prob[row, pair].exp()),
                        target_prob=float(dist.target_log_prob[row, best].exp()),
                        skeleton=self.graph.skeleton(path),
                        top_k=tuple(
                            (space.paths[int(i)], float(p)) for p, i in zip(top_p[row], top_i[row], strict=True)
                        ),
                        confidence=float(calibrated[row, best]),
                        uncertain=float(calibrated[row, best]) < self.min_confidence,
                        values=tuple(m.to_dict() for m in values.lookup(questions[qi])[:5]) if values is not None else (),
                        top_k_confidence=tuple(float(calibrated[row, int(i)]) for i in top_i[row]),
                    )
                )
                qi += 1
        return results

    def route(self, question: str, top_k: int = 3) -> RoutedPath:
        """The most probable legal path for ``question``, with head probabilities and ``top_k`` alternatives.

        Raises:
            DataError: the question is empty or longer than the router's token limit.
        """
        return self.route_batch([question], top_k=top_k)[0]

    def predict_paths(self, questions: Sequence[str]) -> list[JoinPath]:
        """Joint-decoded path per question (the :class:`router.evaluate.PathPredictor` protocol)."""
        space = self.policy.space
        return [space.paths[int(i)] for d in self.distributions(questions) for i in d.mode()]


def _values_for(ckpt_dir: str | Path, schema: Any, sch: Schema, checkpoint: RouterCheckpointConfig) -> ValueIndex | None:
    """The value index to route with: a data set folder's own, else the checkpoint's when it was
    saved for this very schema (same fingerprint), else None."""
    if isinstance(schema, (str, Path)) and Path(schema).is_dir():
        values = load_value_index(schema)
        if values is not None:
            return values
    return load_value_index(ckpt_dir) if checkpoint.schema_fingerprint == sch.fingerprint() else None


def _data_set_hops(path: Path) -> int | None:
    """``max_hops`` recorded in a data set's ``schema.json``, else None."""
    f = path / SCHEMA_FILE if path.is_dir() else path
    if f.suffix == ".json" and f.is_file():
        try:
            hops = json.loads(f.read_text(encoding="utf-8")).get("max_hops")
            return int(hops) if hops is not None else None
        except (ValueError, AttributeError, TypeError):
            return None
    return None


# --------------------------------------------------------------------------- command line


@dataclass
class RouteConfig:
    """Options of ``python -m router.route``."""

    router: Path
    """Router checkpoint folder (from python -m router.train_sft or PPO)."""
    questions: Annotated[tuple[str, ...], tyro.conf.Positional] = ()
    """Questions to route (or use --file)."""
    file: Path | None = None
    """JSONL input: one {"question": ...} per line (optional "id" and gold "path")."""
    out: Path | None = None
    """JSONL output for --file (default: print a table per question)."""
    db: Path | None = None
    """Route over this SQLite database's schema instead of the checkpoint's; with --backend mongodb, the database name when --uri names none."""
    schema: Path | None = None
    """Route over this schema: a data set folder or a schema.json (instead of --db)."""
    backend: str = "sqlite"
    """Where --db/--uri points: sqlite (a file) or mongodb (a server; the schema is read from it)."""
    uri: str | None = None
    """MongoDB URI for --backend mongodb, e.g. mongodb://127.0.0.1:27017/northwind."""
    descriptions: Path | None = None
    """Description sidecar for --db (or --uri)."""
    retarget: bool = False
    """Allow a schema that differs from the one the router was trained on."""
    max_hops: int | None = None
    """Longest path in joins (default: the checkpoint's)."""
    top_k: int = 3
    """Alternatives to show per question."""
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    """A route whose calibrated confidence is below this is marked uncertain and shown with its alternatives."""
    batch_size: int = 64
    """Questions per forward pass."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""

    def __post_init__(self) -> None:
        from core.errors import ConfigError

        from data_pipeline.backends.registry import check_backend_options

        check_backend_options(self.backend, self.db, self.uri, db_required=False)
        if (self.db is not None or self.uri is not None) and self.schema is not None:
            given = f"--db ({self.db})" if self.db is not None else "--uri"
            raise ConfigError(f"give {given} or --schema ({self.schema}), not both", where="schema")
        if not self.questions and self.file is None:
            raise ConfigError("give a question or --file", where="questions")
        if self.questions and self.file is not None:
            raise ConfigError("give questions or --file, not both", where="file")
        if self.top_k < 1:
            raise ConfigError(f"must be >= 1, got {self.top_k}", where="top_k")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ConfigError(f"must be between 0 and 1, got {self.min_confidence}", where="--min-confidence")
        if self.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {self.batch_size}", where="--batch-size")
        check_text_arguments(self.questions)


def _print_routes(routes: Sequence[RoutedPath], graph: SchemaGraph, calibrated: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table as RichTable

    console = Console()
    for r in routes:
        table = RichTable(title=escape(terminal_safe(r.question)), title_justify="left", show_lines=False)
        # one scale per column: the calibrated confidence when the router was calibrated, else p(path)
        last = "confidence" if calibrated else "p(path)"
        for col in ("#", "anchor", "via", "target", last):
            table.add_column(col, justify="right" if col in ("#", last) else "left")
        via = r.path.via_key
        shown = r.top_k_confidence if calibrated and r.top_k_confidence else tuple(q for _, q in r.top_k)
        table.add_row("1", f"{r.path.anchor} ({r.anchor_prob:.2f})", f"{via} ({r.via_prob:.2f})",
                      f"{r.path.target} ({r.target_prob:.2f})", f"{shown[0]:.3f}")  # fmt: skip
        for i, ((p, _), c) in enumerate(zip(r.top_k[1:], shown[1:], strict=True), 2):
            table.add_row(str(i), p.anchor, p.via_key, p.target, f"{c:.3f}")
        console.print(table)
        note = (f"p(path) {r.prob:.3f} recalibrated on questions people wrote; the head probabilities in brackets are not"
                if calibrated else "this router was not calibrated: confidence is p(path)")
        if r.uncertain:
            console.print(f"[bold yellow]uncertain:[/bold yellow] confidence {r.confidence:.2f} is below the threshold; check the alternatives ({note})")
        else:
            console.print(f"confidence {r.confidence:.2f} ({note})")
        if r.values:
            linked = ", ".join(f"{v['table']}.{v['column']} = {v['value']!r} ({v['score']:.2f})" for v in r.values[:3])
            console.print(f"[bold]values:[/bold] {escape(terminal_safe(linked))}")
        console.print(f"[bold]skeleton:[/bold] {escape(r.skeleton)}")  # a pipeline's JSON holds brackets


def _for_backend(cfg: RouteConfig, router: Router, routes: list[RoutedPath]) -> list[RoutedPath]:
    """On ``--backend mongodb``, each route's skeleton as its ``$lookup`` pipeline (JSON) instead of SQL."""
    if cfg.backend != "mongodb":
        return routes
    from data_pipeline.backends.mongo_pipeline import skeleton_pipeline

    return [replace(r, skeleton=skeleton_pipeline(router.graph, r.path).to_json()) for r in routes]


def main(args: Sequence[str] | None = None) -> list[RoutedPath]:
    """Command-line entry point (see the module docstring)."""
    cfg = parse(RouteConfig, args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    schema_src: Schema | Path | None = cfg.db if cfg.db is not None else cfg.schema
    values: ValueIndex | None = None
    if cfg.backend == "mongodb":
        from data_pipeline.backends.registry import open_backend

        with open_backend("mongodb", cfg.db, cfg.uri, descriptions=cfg.descriptions) as backend:
            schema_src = backend.introspect()
            values, _ = ValueIndex.build(backend, schema_src)  # value linking on the server's own values
    if cfg.out is not None:
        ensure_writable_file(cfg.out)  # fail before loading the router, not after routing
    router = Router.from_pretrained(
        cfg.router, schema_src, retarget=cfg.retarget, max_hops=cfg.max_hops, descriptions=cfg.descriptions,
        values=values,
    )  # fmt: skip
    router.min_confidence = cfg.min_confidence
    if cfg.file is None:
        routes = _for_backend(cfg, router, router.route_batch(list(cfg.questions), top_k=cfg.top_k, batch_size=cfg.batch_size))
        _print_routes(routes, router.graph, calibrated=router.temperature != 1.0)
        return routes
    records = read_jsonl(cfg.file)
    questions, golds = [], []
    for line, rec in enumerate(records, 1):
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise DataError("record needs a non-empty string field 'question'", where=cfg.file, line=line)
        questions.append(q)
        gold = None
        if rec.get("path") is not None:
            gold = JoinPath.from_dict(rec["path"], where=str(cfg.file), line=line)
            router.graph.check_path(gold, where=str(cfg.file), line=line)
        golds.append(gold)
    try:
        routes = _for_backend(cfg, router, router.route_batch(questions, top_k=cfg.top_k, batch_size=cfg.batch_size))
    except DataError as exc:
        raise DataError(exc.message, where=cfg.file, line=exc.line) from exc
    out_records = []
    for rec, r, gold in zip(records, routes, golds, strict=True):
        d = ({"id": rec["id"]} if "id" in rec else {}) | r.to_dict()
        if gold is not None:
            d["gold"] = gold.to_dict()
            d["correct"] = r.path == gold
        out_records.append(d)
    if cfg.out is not None:
        write_jsonl(cfg.out, out_records)
        scored = [d["correct"] for d in out_records if "correct" in d]
        msg = f"wrote {cfg.out} ({len(out_records)} questions"
        if scored:
            msg += f", full-path accuracy {sum(scored) / len(scored):.3f} on {len(scored)} labelled"
        print(msg + ")")
    else:
        _print_routes(routes, router.graph, calibrated=router.temperature != 1.0)
    return routes


if __name__ == "__main__":
    run_main(main)
