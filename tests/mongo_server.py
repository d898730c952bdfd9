"""A real MongoDB wire-protocol server on 127.0.0.1 for tests and benchmarks (never a mock).

:class:`MongoServer` starts one of the PyPI servers that speak the protocol (SPEC section 8) as a
child process on a free port, waits until it answers ``ping``, and stops it (only that process)
on :meth:`MongoServer.stop`:

- ``secantus`` (default): ``python -m secantus`` from the ``secantusdb`` package (GPL-2.0, run as
  a separate process; the product never imports it), storage ``:memory:``;
- ``nx-27017``: the ``nx-27017`` command (MIT), ``--db memory``. Not installed by CI: version
  0.8.1 refuses collection names with spaces (Northwind's ``Order Details``), and in a probe it
  returned no rows for a ``$lookup`` on a nested ``localField`` (every hop after the first) and
  10 documents for a ``$gte`` that matches 5.

``R2S_MONGO_URI`` (``mongodb://host:port/``) points the tests at a server that is already
running (a real ``mongod``, say) instead; ``R2S_MONGO_SERVER`` picks the kind to start.

:func:`server_unavailable` is the policy the tests follow: under CI (``CI=true``) a server that
cannot start fails the run; elsewhere the tests skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pymongo
from pymongo.errors import PyMongoError

SERVER_KINDS = ("secantus", "nx-27017")
"""Servers :class:`MongoServer` knows how to start."""

START_TIMEOUT_S = 30.0
"""Longest wait, seconds, for a started server to answer ``ping``."""


class ServerUnavailable(RuntimeError):
    """The server could not be started or reached; the message says why."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(kind: str, port: int, workdir: Path) -> list[str]:
    if kind == "secantus":
        return [
            sys.executable, "-m", "secantus", "--host", "127.0.0.1", "--port", str(port),
            "--storage-path", ":memory:", "--standalone", "--log-level", "ERROR",
        ]  # fmt: skip
    if kind == "nx-27017":
        exe = shutil.which("nx-27017")
        if exe is None:
            raise ServerUnavailable("nx-27017 is not installed (pip install nx-27017)")
        return [
            exe, "--db", "memory", "--host", "127.0.0.1", "-p", str(port),
            "--log-file", str(workdir / "nx.log"), "--pid-file", str(workdir / "nx.pid"),
        ]  # fmt: skip
    raise ServerUnavailable(f"unknown server kind {kind!r}; known: {', '.join(SERVER_KINDS)}")


def _installed(kind: str) -> bool:
    if kind == "secantus":
        import importlib.util

        return importlib.util.find_spec("secantus") is not None
    return shutil.which("nx-27017") is not None


class MongoServer:
    """A wire-protocol server for one test session; use as a context manager.

    Args:
        kind: one of :data:`SERVER_KINDS`; default ``R2S_MONGO_SERVER`` or ``secantus``.
        uri: use this running server instead of starting one (default ``R2S_MONGO_URI``).

    Attributes (after :meth:`start`): ``uri`` (``mongodb://127.0.0.1:PORT/``), ``port``, ``pid``
    (the child's process id, None for an external server), ``start_s`` (seconds until ``ping``
    answered), ``version`` (what the server reports), ``kind``.

    Raises (from :meth:`start`): :class:`ServerUnavailable` when the package is missing, the child
    exits, or it does not answer within :data:`START_TIMEOUT_S` seconds.
    """

    def __init__(self, kind: str | None = None, uri: str | None = None) -> None:
        self.kind = kind or os.environ.get("R2S_MONGO_SERVER") or "secantus"
        self.external_uri = uri if uri is not None else os.environ.get("R2S_MONGO_URI")
        self.uri = ""
        self.port = 0
        self.pid: int | None = None
        self.start_s = 0.0
        self.version = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> MongoServer:
        """Start (or reach) the server and wait for ``ping``; returns self."""
        t0 = time.perf_counter()
        if self.external_uri:
            self.uri = self.external_uri
            self.kind = "external"
            self._wait(t0, None)
            return self
        if self.kind not in SERVER_KINDS:
            raise ServerUnavailable(f"unknown server kind {self.kind!r}; known: {', '.join(SERVER_KINDS)}")
        if not _installed(self.kind):
            pkg = "secantusdb" if self.kind == "secantus" else self.kind
            raise ServerUnavailable(f"{self.kind} server is not installed (pip install {pkg})")
        self._workdir = tempfile.TemporaryDirectory(prefix="r2s-mongo-")
        self.port = free_port()
        cmd = _command(self.kind, self.port, Path(self._workdir.name))
        log = open(Path(self._workdir.name) / "server.err", "wb")  # noqa: SIM115 - closed in stop()
        # TMPDIR inside our folder: the server's ":memory:" storage lands there, so stop() can
        # kill the child outright and still leave nothing behind.
        env = {**os.environ, "TMPDIR": self._workdir.name}
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, cwd=self._workdir.name, env=env)
        self._log = log
        self.pid = self._proc.pid
        self.uri = f"mongodb://127.0.0.1:{self.port}/"
        try:
            self._wait(t0, self._proc)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, t0: float, proc: subprocess.Popen[bytes] | None) -> None:
        last = ""
        while time.perf_counter() - t0 < START_TIMEOUT_S:
            if proc is not None and proc.poll() is not None:
                raise ServerUnavailable(f"{self.kind} exited with status {proc.returncode}: {self._stderr_tail()}")
            try:
                with pymongo.MongoClient(self.uri, serverSelectionTimeoutMS=300, directConnection=True) as client:
                    client.admin.command("ping")
                    self.version = str(client.server_info().get("version", "?"))
                self.start_s = time.perf_counter() - t0
                return
            except PyMongoError as exc:
                last = str(exc).splitlines()[0][:200]
                time.sleep(0.1)
        raise ServerUnavailable(f"{self.kind} at {self.uri} did not answer ping within {START_TIMEOUT_S:g} s ({last})")

    def _stderr_tail(self) -> str:
        if self._workdir is None:
            return ""
        self._log.flush()
        text = (Path(self._workdir.name) / "server.err").read_text(errors="replace").strip()
        return text[-500:] or "(no output)"

    def client(self, **kwargs: object) -> pymongo.MongoClient:
        """A new client for this server (``directConnection=True``); the caller closes it."""
        return pymongo.MongoClient(self.uri, directConnection=True, **kwargs)  # type: ignore[arg-type]

    def db_uri(self, database: str) -> str:
        """The URI of one database on this server: ``mongodb://127.0.0.1:PORT/<database>``."""
        return self.uri.rstrip("/") + "/" + database

    def stop(self) -> None:
        """Stop the child this object started (SIGKILL: its data is in memory and its files in our
        temporary folder, removed here); idempotent. An external server is left running."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if self._workdir is not None:
            self._log.close()
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> MongoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def in_ci() -> bool:
    """True when the environment says this is CI (``CI=true`` or ``CI=1``)."""
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def server_unavailable(reason: str) -> None:
    """Fail (under CI) or skip (elsewhere) the calling test with ``reason``; never returns."""
    import pytest

    message = f"MongoDB wire-protocol server unavailable: {reason}"
    if in_ci():
        pytest.fail(message + " (CI=true: the mongo tests must run)", pytrace=False)
    pytest.skip(message)


def running_server() -> Iterator[MongoServer]:
    """Body of the tests' ``server`` fixtures: a started server, stopped afterwards (else fail/skip)."""
    try:
        srv = MongoServer().start()
    except ServerUnavailable as exc:
        server_unavailable(str(exc))
    yield srv
    srv.stop()
