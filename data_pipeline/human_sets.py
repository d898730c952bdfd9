"""Human-written evaluation questions: the packaged sets of the sample databases, or a user's file.

A human set is a JSONL file of questions written by people, one object per line with at least
``question``, ``path`` (``{"anchor", "via", "target"}``) and ``sql`` (``language`` defaults to
``en``, ``id`` to ``<db>-human-<line>``). :func:`load_human_questions` checks each route against
the schema graph and runs each gold SQL read-only, so a set that does not fit its database is
refused with the file and line named. The packaged sets (``data_pipeline/human/<sample>.jsonl``,
see the README there) are attached to every data set built from a sample database as the split
``human``; they are an evaluation set and are never trained on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import DataError, QueryTimeout
from core.graph import JoinPath, SchemaGraph
from core.samples import LANGUAGES, Sample

if TYPE_CHECKING:
    from data_pipeline.backends.registry import Backend

HUMAN_DIR = Path(__file__).with_name("human")
"""Folder of the packaged human-written sets, one ``<sample name>.jsonl`` each."""


def packaged_human_file(name: str) -> Path | None:
    """The packaged human-written set of sample ``name``, else None.

    >>> packaged_human_file("northwind").name
    'northwind.jsonl'
    >>> packaged_human_file("my_shop") is None
    True
    """
    path = HUMAN_DIR / f"{name}.jsonl"
    return path if path.is_file() else None


def load_human_questions(
    path: str | Path, graph: SchemaGraph, backend: Backend | None = None, *, db_name: str = "", timeout_s: float = 5.0
) -> list[Sample]:
    """Read a human-written set and check it against ``graph`` (and, with ``backend``, the data).

    Args:
        path: the JSONL file.
        graph: the schema graph its routes must be legal in.
        backend: when given, every gold SQL runs on it (read-only, ``timeout_s`` each) and must
            succeed; ``n_rows`` records its row count. A MongoDB backend does not run SQL, so
            the check is skipped there.
        db_name: schema name for ids and the ``db`` field.
        timeout_s: time limit of one gold query, seconds.

    Returns:
        Samples with split ``human`` and ``meta["human"] = True`` (plus the line's ``note``).

    Raises:
        DataError: naming the file and line: not JSON, a missing, empty or not Unicode ``question`` / ``sql`` /
            ``path``, an unknown language, a route that is not legal, or a gold SQL that fails.
        QueryTimeout: naming the file and line: a gold SQL ran past ``timeout_s``.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8-sig").split("\n")  # a byte-order mark (Windows editors) is no error; only "\n" ends a line (U+2028 inside a question does not)
    except FileNotFoundError as exc:
        raise DataError("human-written question file not found", where=p) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"unreadable ({exc})", where=p) from exc
    out: list[Sample] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
            raise DataError(f"not a JSON object ({exc.__class__.__name__})", where=p, line=i) from None
        if not isinstance(d, dict):
            raise DataError("not a JSON object", where=p, line=i)
        for key in ("question", "sql"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                raise DataError(f"field {key!r} must be a non-empty string", where=p, line=i)
            try:
                d[key].encode("utf-8")
            except UnicodeEncodeError:  # "\ud800" decodes to a lone surrogate
                raise DataError(f"field {key!r} is not valid Unicode text (a lone surrogate)", where=p, line=i) from None
        if "path" not in d:
            raise DataError("record lacks field 'path'", where=p, line=i)
        language = d.get("language", "en")
        if language not in LANGUAGES:
            raise DataError(f"field 'language' must be one of {LANGUAGES}, got {language!r}", where=p, line=i)
        route = JoinPath.from_dict(d["path"], where=str(p), line=i)
        graph.check_path(route, where=str(p), line=i)
        n_rows = 0
        if backend is not None and backend.kind == "sqlite":
            res = backend.execute(d["sql"], timeout_s=timeout_s)
            if res.timed_out:
                raise QueryTimeout(f"gold SQL ran past its limit of {timeout_s:g} s; make it cheaper or raise the limit",
                                   where=p, line=i)  # fmt: skip
            if not res.ok:
                raise DataError(f"gold SQL fails: {res.error}", where=p, line=i)
            n_rows = len(res.rows or [])
        meta_in = d.get("meta") if isinstance(d.get("meta"), dict) else {}
        note = d.get("note") or meta_in.get("note")
        meta = {"human": True} | ({"note": str(note)} if note else {})
        out.append(
            Sample(
                id=str(d.get("id") or f"{db_name or graph.schema.name}-human-{i}"),
                db=db_name or graph.schema.name,
                question=d["question"].strip(),
                language=language,
                path=route,
                sql=d["sql"],
                split="human",
                n_rows=n_rows,
                meta=meta,
            )
        )
    return out
