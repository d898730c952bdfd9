"""What flows from the data pipeline to every trainer: one labelled :class:`Sample` per question.

JSONL record schema (one object per line, written by ``python -m data_pipeline.build``):

============== ======================================================================
field          meaning
============== ======================================================================
id             unique string, ``<db>-<n>``
db             schema name (e.g. ``northwind``)
question       the question text
language       ``"en"`` or ``"zh"``
path           ``{"anchor": str, "via": [str, ...], "target": str}`` (gold route)
sql            gold SQL; runs on a read-only connection
entities       list of ``{"table", "column", "value", "surface", "kind", "fuzz"}``: ``value`` is the
               database value the SQL uses, ``surface`` what the question says
entity_kind    ``"real"`` (surface == value), ``"fuzzy"`` (partial, case, typo, synonym) or ``"none"``
difficulty     ``"easy"``, ``"medium"`` or ``"hard"`` (hops, aggregation, filters)
template_id    id of the phrasing template (held-out split uses unseen ones)
split          ``"train"``, ``"validation"``, ``"test"``, ``"test_heldout"``, or ``"human"`` (a
               human-written evaluation question; kept in ``human.jsonl``, never trained on)
n_rows         rows the gold SQL returned when the sample was built
============== ======================================================================
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from core.errors import DataError
from core.graph import JoinPath
from core.io import read_jsonl, write_jsonl

SPLITS = ("train", "validation", "test", "test_heldout", "human")
GENERATED_SPLITS = ("train", "validation", "test", "test_heldout")
"""The splits of generated questions (``samples.jsonl``); ``human`` is the human-written evaluation split."""
LANGUAGES = ("en", "zh")
DIFFICULTIES = ("easy", "medium", "hard")


@dataclass(frozen=True)
class Entity:
    """A filter value in a question. ``value`` is in the database; ``surface`` is what the user typed."""

    table: str
    column: str
    value: Any
    surface: str
    kind: str = "real"
    fuzz: str | None = None


@dataclass(frozen=True)
class Sample:
    """One labelled question (see the module docstring for each field)."""

    id: str
    db: str
    question: str
    language: str
    path: JoinPath
    sql: str
    entities: tuple[Entity, ...] = ()
    entity_kind: str = "none"
    difficulty: str = "easy"
    template_id: str = ""
    split: str = "train"
    n_rows: int = 0
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def with_split(self, split: str) -> Sample:
        return replace(self, split=split)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = self.path.to_dict()
        d["entities"] = [asdict(e) for e in self.entities]
        if not d["meta"]:
            d.pop("meta")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str | None = None, line: int | None = None) -> Sample:
        """Parse one JSONL record; DataError names the file, line and missing or bad field."""
        for key in ("id", "question", "path", "sql"):
            if key not in d:
                raise DataError(f"record lacks field {key!r}", where=where, line=line)
        if not isinstance(d["question"], str) or not d["question"].strip():
            raise DataError("field 'question' must be a non-empty string", where=where, line=line)
        lang = d.get("language", "en")
        if lang not in LANGUAGES:
            raise DataError(f"field 'language' must be one of {LANGUAGES}, got {lang!r}", where=where, line=line)
        split = d.get("split", "train")
        if split not in SPLITS:
            raise DataError(f"field 'split' must be one of {SPLITS}, got {split!r}", where=where, line=line)
        try:
            entities = tuple(Entity(**e) for e in d.get("entities", []))
        except TypeError as exc:
            raise DataError(f"bad entity ({exc})", where=where, line=line) from exc
        return cls(
            id=str(d["id"]),
            db=str(d.get("db", "")),
            question=d["question"],
            language=lang,
            path=JoinPath.from_dict(d["path"], where=where, line=line),
            sql=d["sql"],
            entities=entities,
            entity_kind=d.get("entity_kind", "none"),
            difficulty=d.get("difficulty", "easy"),
            template_id=str(d.get("template_id", "")),
            split=split,
            n_rows=int(d.get("n_rows", 0)),
            meta=dict(d.get("meta", {})),
        )


def save_samples(path: str | Path, samples: list[Sample]) -> int:
    """Atomically write samples as JSONL; returns the count."""
    return write_jsonl(path, (s.to_dict() for s in samples))


def load_samples(path: str | Path, split: str | None = None) -> list[Sample]:
    """Read a JSONL sample file (optionally only one split).

    Raises:
        DataError: naming the file and line of the first bad record.
    """
    out = []
    for i, rec in enumerate(read_jsonl(path), 1):
        s = Sample.from_dict(rec, where=str(path), line=i)
        if split is None or s.split == split:
            out.append(s)
    return out
