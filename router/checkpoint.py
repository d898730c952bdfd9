"""The router checkpoint's metadata: one dataclass that saves, loads and binds (like transformers'
``PretrainedConfig``).

``config.json`` of a router checkpoint folder is :meth:`RouterCheckpointConfig.to_dict`::

    {"format": "route2sql-router", "version": 4,
     "model": RouterModelConfig,                  # the network's shape (router.model)
     "link_features": ["exact", ...],             # names of the lexical link features it reads
     "base_encoder": {"name", "sha256"} or null,  # what a slim model.safetensors sits on
     "schema_fingerprint", "schema_name", "max_hops"     # a router bound to one schema, or
     "schemas": [{"name", "fingerprint", "max_hops", "data"}, ...], "max_hops"   # several
     "temperature": 1.0, "training": {...}, "metrics": {...}, ...other keys (kept as extra)}

Beside it :meth:`RouterCheckpointConfig.save` writes the schema snapshot(s) the router routes over
by default (``schema.json``: :meth:`core.graph.SchemaGraph.to_dict`; ``schemas.json`` for several)
and the value index (``values.json``, one schema only).

:meth:`RouterCheckpointConfig.bind` is the one rule for routing over a schema: a recorded schema
(same fingerprint) binds; another one only with ``retarget`` (the heads score any schema's own
tables); the graph's ``max_hops`` is the caller's, else the graph's own, else the recorded one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from core.errors import CheckpointError, ConfigError, SchemaError
from core.graph import DEFAULT_MAX_HOPS, SchemaGraph
from core.io import write_json
from core.schema import Schema
from core.values import VALUE_INDEX_FILE, ValueIndex
from data_pipeline.encoders import DEFAULT_ENCODER
from router.text import LINK_FEATURES

CHECKPOINT_FORMAT = "route2sql-router"
CHECKPOINT_VERSION = 4
"""2: value-linking features and ``values.json`` beside the weights; 3: agent-verb and "who" features (11),
synonyms and verbs in table texts; 4: slim weights (only what training changed) on a base encoder named
by the sha256 of its weights, ``base_encoder`` and ``link_features`` in ``config.json``."""
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
ENCODER_DIR = "encoder"

SCHEMA_FILE = "schema.json"
"""Snapshot of the schema a one-schema router routes over by default."""
SCHEMAS_FILE = "schemas.json"
"""Snapshots of the schemas of a router trained on several (``router.train_sft --data`` a folder of data sets)."""
READABLE_VERSIONS = (3, 4)
"""Checkpoint versions this code loads (3: every weight in ``model.safetensors``)."""

_FIELDS = ("format", "version", "model", "link_features", "base_encoder", "schema_fingerprint", "schema_name", "max_hops", "schemas",
           "temperature", "training", "metrics", "retargeted")  # fmt: skip


@dataclass
class RouterModelConfig:
    """Shape of a router network (saved in ``config.json``; training options live elsewhere)."""

    encoder: str = DEFAULT_ENCODER
    """Encoder it was built from: a built-in name or a Hugging Face directory."""
    hidden_size: int = 384
    """Width of the encoder's token states (filled in from the encoder)."""
    num_layers: int = 12
    """Transformer layers of the encoder (filled in from the encoder)."""
    trainable_layers: int = 3
    """Top encoder layers that train; the embeddings and the layers below are frozen."""
    head_dim: int = 256
    """Width of the query and candidate vectors the heads compare."""
    max_via_len: int = 4
    """Longest via (tables) that gets its own position vector; longer ones reuse the last."""
    dropout: float = 0.1
    """Dropout in the heads' query networks."""
    max_question_tokens: int = 64
    """Questions longer than this (in tokens, prefix included) are refused, not cut."""
    max_table_tokens: int = 64
    """Table texts are cut at this many tokens."""
    query_prefix: str = "query: "
    """Put before every question (e5 expects "query: "; filled in from the encoder)."""
    passage_prefix: str = "passage: "
    """Put before every table text (filled in from the encoder)."""
    pooling: str = "mean"
    """Sentence pooling of the encoder (mean or cls)."""
    n_link_features: int = len(LINK_FEATURES)
    """Lexical link features per (question, table); see router.text.link_features."""
    anchor_prior: float = 4.0
    """Added to the score (in nats) of every route whose anchor the question supports by a value it mentions or by naming it, times that support in [0, 1] (router.text.anchor_support); 0 turns it off. A fixed prior, not trained."""
    who_prior: float = 4.0
    """Added to the score (in nats) of every route whose target the question asks for with "who" and that table's verb ("Who supplies Chai?"), times that support in [0, 1] (router.text.who_support); 0 turns it off. A fixed prior, not trained."""

    def __post_init__(self) -> None:
        if not 0 <= self.trainable_layers <= self.num_layers:
            raise ConfigError(
                f"trainable_layers must be in [0, num_layers={self.num_layers}], got {self.trainable_layers}",
                where="trainable_layers",
            )
        for name in ("head_dim", "max_via_len", "max_question_tokens", "max_table_tokens", "hidden_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", where=name)
        for name in ("anchor_prior", "who_prior"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError(f"must be a finite number >= 0, got {getattr(self, name)}", where=name)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"must be in [0, 1), got {self.dropout}", where="dropout")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RouterModelConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class BaseEncoder:
    """The pretrained encoder a slim checkpoint's weights sit on.

    Attributes:
        name: a built-in encoder name or a Hugging Face directory (``data_pipeline.encoders.resolve_encoder``).
        sha256: of its weights files (:func:`data_pipeline.encoders.weights_sha256`); loading refuses
            an encoder whose weights hash differently.
    """

    name: str
    sha256: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.sha256}


@dataclass(frozen=True)
class SchemaRecord:
    """One schema a router was trained on (or is bound to).

    Attributes:
        name: the schema's name.
        fingerprint: :meth:`core.schema.Schema.fingerprint` (16 hex digits).
        max_hops: longest legal path, in joins, it routed over.
        data: the data set folder it trained on ("" when not recorded).
    """

    name: str
    fingerprint: str
    max_hops: int = DEFAULT_MAX_HOPS
    data: str = ""

    @classmethod
    def of(cls, graph: SchemaGraph, data: str | Path = "") -> SchemaRecord:
        """The record of ``graph``'s schema and ``max_hops``."""
        return cls(graph.schema.name, graph.schema.fingerprint(), graph.max_hops, str(data))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint": self.fingerprint, "max_hops": self.max_hops, "data": self.data}


@dataclass(frozen=True)
class RouterCheckpointConfig:
    """What a router checkpoint records besides its weights (``config.json``; layout in the module docstring).

    Attributes:
        model: the network's shape.
        schemas: the schemas it was trained on; with ``multi`` False exactly one, the schema it is
            bound to and routes over by default.
        multi: trained on several schemas at once: no default schema, any recorded one binds.
        temperature: calibration temperature of the route probabilities (1.0: none).
        training: the training options (``SFTConfig``/``PPOConfig.to_dict()``).
        metrics: evaluation summary per split.
        extra: any other JSON keys (best epoch, timings, PPO update...), kept as they are.
        link_features: names of the link features the heads were trained on (``router.text.LINK_FEATURES``).
        base_encoder: the encoder a slim ``model.safetensors`` completes (None: the file holds every
            weight, as in version 3 and in exported full folders).
        version: checkpoint version (:data:`router.model.CHECKPOINT_VERSION` when saved by this code).
        graphs: the schema graphs whose snapshots :meth:`save` writes (not part of ``config.json``).
        values: the value index :meth:`save` writes for a one-schema checkpoint (None: none).
    """

    model: RouterModelConfig
    schemas: tuple[SchemaRecord, ...] = ()
    multi: bool = False
    temperature: float = 1.0
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    link_features: tuple[str, ...] = LINK_FEATURES
    base_encoder: BaseEncoder | None = None
    version: int = CHECKPOINT_VERSION
    graphs: tuple[SchemaGraph, ...] = field(default=(), compare=False, repr=False)
    values: ValueIndex | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------------ construction

    @classmethod
    def for_graphs(
        cls,
        model: RouterModelConfig,
        graphs: Sequence[SchemaGraph],
        *,
        multi: bool = False,
        data: Sequence[str | Path] = (),
        values: ValueIndex | None = None,
        **fields_: Any,
    ) -> RouterCheckpointConfig:
        """The metadata of a router trained on ``graphs`` (one, or several with ``multi``).

        ``data`` names each graph's data set folder; ``values`` is the one schema's value index;
        ``fields_`` set ``temperature``, ``training``, ``metrics``, ``extra``.

        Raises:
            CheckpointError: no graph, or several without ``multi``.
        """
        if not graphs or (len(graphs) > 1 and not multi):
            raise CheckpointError(f"a checkpoint records one schema, or several with multi (got {len(graphs)})", where="schemas")
        folders = list(data) + [""] * (len(graphs) - len(data))
        records = tuple(SchemaRecord.of(g, d) for g, d in zip(graphs, folders, strict=True))
        return cls(model, records, multi, graphs=tuple(graphs), values=None if multi else values, **fields_)

    def bound_to(self, graph: SchemaGraph, values: ValueIndex | None = None, **fields_: Any) -> RouterCheckpointConfig:
        """This metadata for a router bound to ``graph`` alone (e.g. saved after PPO on one of its schemas)."""
        return replace(self, schemas=(SchemaRecord.of(graph),), multi=False, graphs=(graph,), values=values, **fields_)

    def updated(self, metadata: dict[str, Any]) -> RouterCheckpointConfig:
        """A copy with ``temperature``/``training``/``metrics`` from ``metadata`` and its other keys in ``extra``."""
        known = {k: metadata[k] for k in ("temperature", "training", "metrics") if k in metadata}
        rest = {k: v for k, v in metadata.items() if k not in _FIELDS and k != "files"}
        return replace(self, extra=self.extra | rest, **known)

    # ------------------------------------------------------------------ properties

    @property
    def schema_fingerprint(self) -> str | None:
        """The fingerprint of the one schema it is bound to (None for a multi-schema router)."""
        return None if self.multi or not self.schemas else self.schemas[0].fingerprint

    @property
    def schema_name(self) -> str | None:
        return None if self.multi or not self.schemas else self.schemas[0].name

    @property
    def max_hops(self) -> int:
        """Longest path it routes over by default: the bound schema's, the largest of several."""
        return max((r.max_hops for r in self.schemas), default=DEFAULT_MAX_HOPS)

    # ------------------------------------------------------------------ binding

    def bind(
        self,
        target: Schema | SchemaGraph,
        *,
        retarget: bool = False,
        max_hops: int | None = None,
        where: str | Path = "router",
        hint: str = "pass retarget=True / --retarget to route over the new schema's tables",
    ) -> tuple[SchemaGraph, bool]:
        """The schema graph to route over ``target`` with, and whether it is a recorded schema.

        ``max_hops``: the caller's, else ``target``'s own (a :class:`SchemaGraph`), else the
        one recorded for that schema, else :attr:`max_hops`. ``hint`` ends the refusal's message
        (what the caller can do about it).

        Raises:
            CheckpointError: ``target``'s fingerprint is not recorded and ``retarget`` is False
                (both fingerprints and ``where`` named), or the recorded ``max_hops`` gives more
                than :data:`core.graph.MAX_LEGAL_PATHS` paths over it.
        """
        schema = target.schema if isinstance(target, SchemaGraph) else target
        fp = schema.fingerprint()
        recorded = {r.fingerprint: r for r in self.schemas}
        known = fp in recorded
        if not known and not retarget and self.schemas:
            if self.multi:
                trained = f"{len(recorded)} schemas (fingerprints {', '.join(sorted(recorded))})"
            else:
                trained = f"schema {self.schemas[0].name!r} (fingerprint {self.schemas[0].fingerprint})"
            raise CheckpointError(
                f"router was trained on {trained} but was given schema {schema.name!r} (fingerprint {fp}); {hint}",
                where=where,
            )
        if isinstance(target, SchemaGraph) and max_hops in (None, target.max_hops):
            return target, known
        hops = max_hops if max_hops is not None else recorded[fp].max_hops if known else self.max_hops
        graph = SchemaGraph(schema, max_hops=hops)
        if max_hops is None:  # the number came from config.json: say so if it cannot be routed over
            try:
                graph.legal_paths
            except SchemaError as exc:
                raise CheckpointError(f"{exc.message}; max_hops {hops} is recorded in {CONFIG_FILE}", where=where) from exc
        return graph, known

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """``config.json``'s contents (JSON-ready; layout in the module docstring)."""
        d: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "version": self.version, "model": self.model.to_dict(),
                             "link_features": list(self.link_features),
                             "base_encoder": self.base_encoder.to_dict() if self.base_encoder else None}  # fmt: skip
        if self.multi:
            d |= {"schemas": [r.to_dict() for r in self.schemas], "max_hops": self.max_hops}
        elif self.schemas:
            r = self.schemas[0]
            d |= {"schema_fingerprint": r.fingerprint, "schema_name": r.name, "max_hops": r.max_hops}
        return d | {"temperature": self.temperature, "training": self.training, "metrics": self.metrics} | self.extra

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str | Path = CONFIG_FILE) -> RouterCheckpointConfig:
        """Read :meth:`to_dict`'s output (or a version-3 ``config.json``).

        Raises:
            CheckpointError: another format, a version not in :data:`READABLE_VERSIONS`, a
                malformed field, or link features other than this code computes (``where`` named).
        """
        if not isinstance(d, dict) or d.get("format") != CHECKPOINT_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise CheckpointError(f"format is {got!r}, expected {CHECKPOINT_FORMAT!r}", where=where)
        if d.get("version") not in READABLE_VERSIONS:
            raise CheckpointError(
                f"router checkpoint version {d.get('version')!r} is not supported (this code reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}); retrain it with python -m router.train_sft",
                where=where,
            )
        try:
            model = RouterModelConfig.from_dict(d["model"])
            hops = int(d.get("max_hops", DEFAULT_MAX_HOPS))
            if "schemas" in d and not d.get("schema_fingerprint"):
                multi = True
                schemas = tuple(SchemaRecord(str(e["name"]), str(e["fingerprint"]), int(e.get("max_hops", hops)),
                                             str(e.get("data", ""))) for e in d["schemas"])  # fmt: skip
            else:
                multi = False
                fp = d.get("schema_fingerprint")
                schemas = (SchemaRecord(str(d.get("schema_name", "?")), str(fp), hops),) if fp else ()
            temperature = float(d.get("temperature", 1.0))
            links = tuple(str(x) for x in d.get("link_features", LINK_FEATURES))
            base = d.get("base_encoder")
            base_encoder = BaseEncoder(str(base["name"]), str(base["sha256"])) if base else None
            training, metrics = dict(d.get("training") or {}), dict(d.get("metrics") or {})
            if min((r.max_hops for r in schemas), default=hops) < 0:
                raise ValueError("max_hops must be >= 0")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"malformed router config ({exc})", where=where) from exc
        if links != LINK_FEATURES or model.n_link_features != len(LINK_FEATURES):
            raise CheckpointError(
                f"router reads the link features {list(links)[: model.n_link_features]}, this code computes "
                f"{list(LINK_FEATURES)}; retrain it with python -m router.train_sft",
                where=where,
            )
        extra = {k: v for k, v in d.items() if k not in _FIELDS}
        return cls(model, schemas, multi, temperature if 0 < temperature < math.inf else 1.0,
                   training, metrics, extra, links, base_encoder,
                   int(d["version"]))  # fmt: skip

    # ------------------------------------------------------------------ files

    def save(self, out_dir: str | Path) -> None:
        """Write ``config.json``, the schema snapshot(s) of :attr:`graphs` and ``values.json`` into ``out_dir``."""
        d = Path(out_dir)
        write_json(d / CONFIG_FILE, self.to_dict())
        if self.multi:
            write_json(d / SCHEMAS_FILE, [g.to_dict() for g in self.graphs])
        elif self.graphs:
            write_json(d / SCHEMA_FILE, self.graphs[0].to_dict())
        if self.values is not None and not self.multi:
            write_json(d / VALUE_INDEX_FILE, self.values.to_dict())

    @classmethod
    def load(cls, ckpt_dir: str | Path) -> RouterCheckpointConfig:
        """Read ``ckpt_dir/config.json`` (snapshots are read on demand: :meth:`snapshot`).

        Raises:
            CheckpointError: no or unreadable ``config.json``, or as :meth:`from_dict` (file named).
        """
        d = Path(ckpt_dir)
        cfg_file = d / CONFIG_FILE
        if not cfg_file.is_file():
            raise CheckpointError("not a router checkpoint (no config.json)", where=d)
        try:
            doc = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            raise CheckpointError(f"unreadable config ({exc})", where=cfg_file) from exc
        return cls.from_dict(doc, where=cfg_file)

    def snapshot(self, ckpt_dir: str | Path) -> SchemaGraph:
        """The schema graph a one-schema checkpoint routes over by default (its ``schema.json``).

        Raises:
            CheckpointError: a multi-schema checkpoint (no default schema), or ``schema.json``
                missing or malformed (file named).
        """
        d = Path(ckpt_dir)
        if self.multi:
            names = [r.name for r in self.schemas]
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise CheckpointError(f"router was trained on {len(names)} schemas ({shown}); pass the schema to route over", where=d)
        snap = d / SCHEMA_FILE
        if not snap.is_file():
            raise CheckpointError(f"missing {SCHEMA_FILE}; pass the schema to route over", where=d)
        try:
            return SchemaGraph.from_dict(json.loads(snap.read_text(encoding="utf-8")), max_hops=self.max_hops)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"malformed schema snapshot ({exc})", where=snap) from exc
