"""A built data set on disk: the schema, its graph settings and the samples, in one folder.

Layout written by ``python -m data_pipeline.build --out DIR``::

    DIR/schema.json      SchemaGraph.to_dict() (the schema and "max_hops") plus {"db_path": str} ("" for a MongoDB
                         data set: its "backend" is "mongodb" and "source" the URI, password hidden)
    DIR/samples.jsonl    every generated Sample, each with its split (record schema in core.samples)
    DIR/human.jsonl      human-written evaluation questions (split "human"; same record schema), if any
    DIR/values.json      the value index of the database's text columns (core.values), if built
    DIR/summary.json     counts: per path, per hop, null-via share, language mix, splits

Human-written questions are kept apart from ``samples`` (``BuiltDataset.human``), so no code that
iterates a data set's samples can train on them; ``split("human")`` returns them.

Every trainer and evaluator starts from :func:`load_dataset`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import DataError, SchemaError
from core.graph import SchemaGraph
from core.io import write_json
from core.samples import Sample, load_samples, save_samples
from core.schema import Schema
from core.values import VALUE_INDEX_FILE, ValueIndex

HUMAN_FILE = "human.jsonl"
"""File name of the human-written evaluation questions inside a data set folder."""


@dataclass
class BuiltDataset:
    """A schema, its graph and its samples. ``db_path`` is the database the gold SQL runs on.

    Attributes:
        samples: the generated questions (splits ``train``, ``validation``, ``test``, ``test_heldout``).
        human: human-written evaluation questions (split ``human``), never among ``samples``.
        values: the database's value index (None for a data set built without one).
    """

    schema: Schema
    graph: SchemaGraph
    samples: list[Sample]
    db_path: Path
    human: list[Sample] = field(default_factory=list)
    values: ValueIndex | None = None

    def split(self, name: str) -> list[Sample]:
        """Samples of one split (``train``, ``validation``, ``test``, ``test_heldout``, ``human``)."""
        if name == "human":
            return list(self.human)
        return [s for s in self.samples if s.split == name]


def save_dataset(out_dir: str | Path, ds: BuiltDataset, summary: dict | None = None) -> Path:
    """Write ``ds`` (and an optional summary) into ``out_dir``; files are replaced atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    db_path = "" if ds.schema.backend == "mongodb" else str(ds.db_path)  # a MongoDB data set: schema "source"
    meta = ds.graph.to_dict() | {"db_path": db_path}
    write_json(out / "schema.json", meta)
    save_samples(out / "samples.jsonl", ds.samples)
    human = out / HUMAN_FILE
    if ds.human:
        save_samples(human, ds.human)
    elif human.exists():
        human.unlink()
    values = out / VALUE_INDEX_FILE
    if ds.values is not None:
        ds.values.save(values)
    elif values.exists():
        values.unlink()
    if summary is not None:
        write_json(out / "summary.json", summary)
    return out


def load_dataset(data_dir: str | Path, db_path: str | Path | None = None, *, sql_user: str | None = None) -> BuiltDataset:
    """Load a folder written by :func:`save_dataset`.

    Args:
        data_dir: the folder.
        db_path: override the database location recorded in ``schema.json``.
        sql_user: the caller executes SQL on the data set's database (e.g. ``"generator.train_grpo"``):
            a data set built on MongoDB is then refused unless ``db_path`` names a SQLite copy.

    Raises:
        DataError: the folder, ``schema.json`` or ``samples.jsonl`` is missing or malformed, a
            sample's path is not legal in the schema (file and line named), or ``sql_user`` is set
            and the data set was built on MongoDB without a ``db_path``; ``human.jsonl`` or
            ``values.json`` is malformed; ``schema.json``'s ``max_hops`` gives more than
            :data:`core.graph.MAX_LEGAL_PATHS` legal paths.
    """
    d = Path(data_dir)
    schema_file = d / "schema.json"
    if not schema_file.is_file():
        raise DataError("not a data set folder (no schema.json); build one with python -m data_pipeline.build", where=d)
    try:
        meta = json.loads(schema_file.read_text(encoding="utf-8"))
        graph = SchemaGraph.from_dict(meta)
        graph.legal_paths  # a max_hops that gives too many paths is this file's fault, said here
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DataError(f"malformed schema file ({exc})", where=schema_file) from exc
    except SchemaError as exc:
        raise DataError(str(exc), where=schema_file) from exc
    schema = graph.schema
    if sql_user is not None and schema.backend == "mongodb" and db_path is None:
        raise DataError(f"built on MongoDB, but {sql_user} executes SQL: build the data set on SQLite "
                        "(python -m data_pipeline.build --db ...) or pass --db with a SQLite copy", where=schema_file)  # fmt: skip
    samples_file = d / "samples.jsonl"
    samples = load_samples(samples_file)
    for i, s in enumerate(samples, 1):
        graph.check_path(s.path, where=str(samples_file), line=i)
        if s.split == "human":
            raise DataError(f"human-written questions belong in {HUMAN_FILE}, not in samples.jsonl", where=str(samples_file), line=i)
    human: list[Sample] = []
    human_file = d / HUMAN_FILE
    if human_file.is_file():
        human = load_samples(human_file)
        for i, s in enumerate(human, 1):
            graph.check_path(s.path, where=str(human_file), line=i)
            if s.split != "human":
                raise DataError(f"split must be 'human' in {HUMAN_FILE}, got {s.split!r}", where=str(human_file), line=i)
    values_file = d / VALUE_INDEX_FILE
    values = ValueIndex.load(values_file) if values_file.is_file() else None
    return BuiltDataset(schema, graph, samples, Path(db_path or meta.get("db_path", "")), human, values)
