"""Files: the cache directory, atomic writes, and JSONL with line-numbered errors.

Everything that persists (checkpoints, data sets, reports) is written through
:func:`atomic_write_text`, :func:`atomic_write_bytes` or :func:`atomic_directory`, so a run killed
half-way never leaves a truncated file where a good one was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from core.errors import ConfigError, DataError, Route2SQLError


def cache_dir(*parts: str) -> Path:
    """The user's cache directory for route2sql, created on demand.

    ``$ROUTE2SQL_CACHE`` wins, then ``$XDG_CACHE_HOME/route2sql``, then ``~/.cache/route2sql``.

    Raises:
        Route2SQLError: when the directory cannot be created.
    """
    root = os.environ.get("ROUTE2SQL_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "route2sql")
    path = Path(root, *parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Route2SQLError(f"cannot create cache directory: {exc.strerror}", where=path) from exc
    return path


def ensure_writable_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and check that files can be written there.

    Raises:
        Route2SQLError: naming the folder when it cannot be created or written.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise Route2SQLError(f"output folder is not writable ({exc.strerror})", where=path) from exc
    return path


def check_output_file(path: str | Path) -> Path:
    """Refuse an output file path that is an existing folder, device, pipe or socket (writing
    there would replace it, or fail only after the work is done); a missing file, a regular
    file or a symbolic link (the link itself is replaced) is fine. Returns the path.

    Raises:
        Route2SQLError: naming the path.
    """
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise Route2SQLError(f"cannot write this file ({exc.strerror})", where=path) from exc
    if stat.S_ISDIR(mode):
        raise Route2SQLError("is a folder; give a file name for the output", where=path)
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise Route2SQLError("is not a regular file (a device, pipe or socket); refusing to replace it", where=path)
    return path


def ensure_writable_file(path: str | Path) -> Path:
    """:func:`check_output_file`, then :func:`ensure_writable_dir` of its folder: call before the
    work whose result goes there, so a bad path fails at once. Returns the path.

    Raises:
        Route2SQLError: naming the file or its folder.
    """
    path = check_output_file(path)
    ensure_writable_dir(path.parent)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    Raises:
        Route2SQLError: ``path`` is a folder, device, pipe or socket (:func:`check_output_file`).
    """
    path = check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a finished file gets the usual mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text (UTF-8) version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented UTF-8 JSON."""
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<rest>.*)$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Clean up after :func:`atomic_directory` calls that were killed half-way in ``folder``.

    An interrupted save leaves ``.<name>.tmp-<pid>-*`` (the half-written folder; 28 MB for a
    PPO checkpoint, 7 MB for GRPO) and, when killed between its two renames,
    ``.<name>.old-<pid>`` (the previous good copy, moved aside). For every such entry whose
    process is gone: a temporary folder is removed; a moved-aside copy is put back as
    ``<name>`` when ``<name>`` is missing, else removed. Entries of a live process (a save in
    progress) are left alone; a ``.tmp-`` folder without a process id (older versions) counts
    as stale. Called before every :func:`atomic_directory` save, and on ``--resume``.

    Returns:
        The entries removed or restored, sorted.
    """
    folder = Path(folder)
    done: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return done
    for entry in entries:
        m = _TEMPORARY.match(entry.name)
        if m is None or not entry.is_dir():
            continue
        pid_text = m.group("rest").split("-", 1)[0]
        if pid_text.isdigit() and _pid_alive(int(pid_text)):
            continue
        target = folder / m.group("name")
        if m.group("kind") == "old" and not target.exists():
            try:
                os.replace(entry, target)
            except OSError:
                continue
        else:
            shutil.rmtree(entry, ignore_errors=True)
        done.append(entry)
    return sorted(done)


def refuse_overlap(outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None]) -> None:
    """Refuse output paths that would replace an input, or one another, before anything is written.

    Outputs are replaced whole (:func:`atomic_directory`), so an output that is an input, lies
    inside one or holds one would silently delete it; two outputs that overlap would delete each
    other's files. ``None`` entries are skipped; paths are compared after ``resolve()``, so a
    symbolic link or ``..`` does not hide an overlap. Keys are the option names used in the error.

    Raises:
        ConfigError: naming both options and the path, e.g.
            ``--out: runs/ppo is inside --data runs/data; it would be replaced``.

    >>> refuse_overlap({"--out": "runs/a"}, {"--data": "runs/b"})
    >>> refuse_overlap({"--out": "runs/b/x"}, {"--data": "runs/b"})
    Traceback (most recent call last):
    ...
    core.errors.ConfigError: --out: runs/b/x is inside --data runs/b; writing it would change the input
    """

    def relation(a: Path, b: Path) -> str | None:
        if a == b:
            return "is"
        if b in a.parents:
            return "is inside"
        if a in b.parents:
            return "holds"
        return None

    outs = [(k, Path(v)) for k, v in outputs.items() if v is not None]
    ins = [(k, Path(v)) for k, v in inputs.items() if v is not None]
    for i, (name, path) in enumerate(outs):
        for other, other_path in ins + outs[i + 1:]:
            rel = relation(path.resolve(), other_path.resolve())
            if rel is not None:
                what = "writing it would change the input" if (other, other_path) in ins else "one would replace the other"
                raise ConfigError(f"{path} {rel} {other} {other_path}; {what}", where=name)


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``path`` in one rename.

    Used for ``save_pretrained``-style checkpoints: readers see the old directory or the new
    one, never a half-written mix. On error the temporary folder is removed and ``path`` is
    left as it was. The temporary folder (``.<name>.tmp-<pid>-*``) and the moved-aside old copy
    (``.<name>.old-<pid>``) carry the process id, so the next save in the same folder removes
    what a killed save left behind (:func:`remove_stale_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-{os.getpid()}-"))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes 0700; a finished directory gets the usual mode
    try:
        yield tmp
        file_mode = 0o666 & ~_umask()
        for f in tmp.rglob("*"):  # writers that go through mkstemp (safetensors) leave 0600
            if f.is_file() and not f.is_symlink() and f.stat().st_mode & 0o777 == 0o600:
                f.chmod(file_mode)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            if old.exists():
                shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Atomically write one JSON object per line; returns the number of lines."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return len(lines)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate (``\\ud800``): valid only as half of a pair."""


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file; blank lines and a leading UTF-8 byte-order mark are skipped
    (:func:`read_jsonl_lines` keeps each object's line number).

    Raises:
        DataError: naming the file and line of the first line that is not UTF-8 or not a JSON
            object (nested too deep included; lines ended by a lone CR are named as such), that
            holds a lone surrogate escape (``"\\ud800"``: a string no encoder, tokenizer or
            database takes), or when the file does not exist.
    """
    return [obj for _, obj in read_jsonl_lines(path)]


def read_jsonl_lines(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_jsonl` with the 1-based line number of each object (blank lines hold none).

    Raises:
        DataError: as :func:`read_jsonl`.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", where=path)
    out: list[tuple[int, dict[str, Any]]] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})", where=path, line=lineno) from exc
            if lineno == 1:
                line = line.removeprefix("\ufeff")  # the byte-order mark some Windows editors write
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if "\r" in line.rstrip("\r\n"):  # the whole file is one "line": old Mac line ends
                    raise DataError(f"not valid JSON ({exc.msg}): its lines end in a lone CR (carriage return); "
                                    "save it with LF or CRLF line ends", where=path, line=lineno) from exc  # fmt: skip
                raise DataError(f"not valid JSON ({exc.msg})", where=path, line=lineno) from exc
            except RecursionError as exc:
                raise DataError("not valid JSON (nested too deep)", where=path, line=lineno) from exc
            except ValueError as exc:  # e.g. an integer of more than 4300 digits
                raise DataError(f"not readable JSON ({str(exc).split(';')[0]})", where=path, line=lineno) from exc
            if not isinstance(obj, dict):
                raise DataError("each line must be a JSON object", where=path, line=lineno)
            if _SURROGATE_ESCAPE.search(line):  # "\ud800" alone is valid JSON but no text: it cannot be encoded
                try:
                    json.dumps(obj, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise DataError(f"not valid Unicode text (a lone surrogate {exc.object[exc.start]!r})", where=path, line=lineno) from exc
            out.append((lineno, obj))
    return out


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: object) -> str:
    r"""``str(text)`` with control characters other than newline and tab written as escapes, so
    that a printed database value, question or model answer cannot clear the screen, move the
    cursor or retitle the terminal.

    >>> terminal_safe("a\x1b[2Jb\tc")
    'a\\x1b[2Jb\tc'
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
