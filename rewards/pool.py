"""Worker processes that score a batch in parallel, each item under a hard wall-clock deadline.

:class:`WorkerPool` starts ``workers`` child processes (``python -m rewards.pool``, so the
parent's ``__main__`` and its torch are never imported again) and sends them calls of
module-level functions; each worker keeps its own read-only SQLite connections, gate verdicts
and gold results between calls. Items are dealt out to whichever worker is free: one at a
time for a batch of up to 8 per worker (a GRPO group), in shrinking chunks for bigger ones
(:func:`chunk_size`), so a slow query holds up at most the rest of its chunk, never the other
workers.

Guarantees on top of the in-process executor's (read-only gate, authorizer, ``mode=ro``,
timeout inside SQLite, row and byte caps), which every worker keeps:

- **a hard deadline**: an item still running ``budget_s`` seconds after it started has its
  worker killed (``SIGKILL``); the item's :class:`Outcome` says ``killed`` and the other items
  of that chunk whose replies had not arrived are sent again to another worker. This stops what
  SQLite cannot interrupt (one ``instr`` over two megabyte strings ran 7.7 s past a 0.5 s
  timeout). Each worker writes the id and start time of the item it is running into one 64-bit
  shared-memory word before it starts it (:func:`pack_progress`; one word, so the parent never
  reads the id of one item with the start of another, or a half-written time), and the parent
  times and blames the right item while the replies themselves travel in batches.
- **bounded memory**: each worker's address space is capped at ``memory_mb``
  (``RLIMIT_AS``) and SQLite's heap at half of it (``PRAGMA hard_heap_limit``); a query that
  needs more fails with "out of memory" (the worker is then replaced) instead of swapping.
- **warm-up per worker**: items may name a ``key`` whose warm-up call (a gold query) must have
  run on a worker before the item is sent there, so an item's budget covers only its own query.

A killed worker is replaced at once (it starts in the background); :meth:`WorkerPool.close`
stops them all. Messages are pickles framed by their length on the worker's stdin/stdout (the
worker's own prints go to its stderr).
"""

from __future__ import annotations

import math
import mmap
import os
import pickle
import selectors
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError

DEFAULT_MEMORY_MB = 1024
"""Address-space cap of one worker, MiB (Python, sqlglot and the executor need about 70 MiB)."""

START_TIMEOUT_S = 30.0
"""Longest wait for a new worker's first reply before the pool gives up."""

MAX_CHUNK = 32
"""Most items sent to one worker at once."""

SINGLE_ITEMS_PER_WORKER = 8
"""While this many items per worker (or fewer) are left, they are sent one at a time."""

FLUSH_S = 0.01
"""A worker sends its replies together, at the end of a chunk or once the oldest unsent one is this old
(the parent learns which item runs from shared memory, so batching never makes it blame the wrong one)."""

_HEADER = struct.Struct("!Q")
_PROGRESS = struct.Struct("@Q")
"""The progress record: one native, aligned 64-bit word. The worker stores it through a
``memoryview`` cast to ``"Q"`` and the parent loads it with ``unpack_from``: each is one 8-byte
``memcpy`` in CPython, a single store or load on 64-bit CPUs, so the parent never sees half a
write. (``struct.pack_into`` zero-fills its target before it writes: with the earlier record of
two fields, an id and a float start, the parent read a start of 0.0 about once in 22,000 quick
items on 2 busy cores and killed a worker whose query had just begun.)"""

TICK_S = 1e-4
"""Resolution of the start time in the progress word, seconds (a deadline may fire up to one tick early)."""

_LOW32 = 0xFFFFFFFF


def pack_progress(job: int | None, start: float) -> int:
    """The progress word for ``job`` (None: nothing running) started at ``start`` (``time.monotonic()``, s).

    High 32 bits: ``job + 1`` modulo 2**32 (0: none); low 32 bits: the start in :data:`TICK_S`
    ticks modulo 2**32 (the clock wraps every 4.97 days; :func:`unpack_progress` undoes that).

    >>> tag, start = unpack_progress(pack_progress(41, 1234.5678), now=1240.0)
    >>> tag, 1234.5678 - TICK_S < start <= 1234.5678
    (42, True)
    """
    tag = 0 if job is None else (job + 1) & _LOW32
    return (tag << 32) | (math.floor(start / TICK_S) & _LOW32)


def unpack_progress(word: int, now: float) -> tuple[int, float]:
    """``(tag, start)`` of a progress word read at ``now`` (same clock): ``tag`` is ``job + 1``
    modulo 2**32 (0: none), ``start`` the latest tick <= ``now`` with the stored low 32 bits, in
    seconds (the true start rounded down to a tick, for a job that started less than 4.97 days ago)."""
    now_ticks = math.floor(now / TICK_S)
    start_ticks = now_ticks - ((now_ticks - (word & _LOW32)) & _LOW32)
    return word >> 32, start_ticks * TICK_S


@dataclass
class Outcome:
    """What became of one item.

    Attributes:
        value: the function's return value (None when it raised, was killed or was skipped).
        error: the exception it raised, when it did.
        killed: the worker was killed at the item's deadline, or died while running it.
        skipped: the outcome of the item's warm-up call when that failed and the item was not
            sent (see ``skip_if`` of :meth:`WorkerPool.map`); None otherwise.
        seconds: wall time of the call on its worker (for a killed item: from when the parent
            last heard from that worker to the kill).
    """

    value: Any = None
    error: BaseException | None = None
    killed: bool = False
    skipped: Outcome | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.killed and self.skipped is None


def _write_frame(fh: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_HEADER.pack(len(data)) + data)
    fh.flush()


def _read_exactly(fh: Any, n: int) -> bytes | None:
    chunks = []
    while n:
        got = fh.read(n)
        if not got:
            return None
        chunks.append(got)
        n -= len(got)
    return b"".join(chunks)


def chunk_size(pending: int, workers: int) -> int:
    """Items to send a free worker: one at a time while at most ``SINGLE_ITEMS_PER_WORKER`` per
    worker are left (a GRPO group: two slow queries never share a worker while another one idles),
    else a quarter of a fair share, at most :data:`MAX_CHUNK` (fewer messages for big batches).

    >>> chunk_size(16, 2), chunk_size(64, 2), chunk_size(1000, 2)
    (1, 8, 32)
    """
    if pending <= SINGLE_ITEMS_PER_WORKER * workers:
        return 1
    return max(1, min(MAX_CHUNK, math.ceil(pending / (4 * workers))))


class _Worker:
    """One child process and the parent's view of it."""

    def __init__(self, memory_mb: int, preload: Sequence[str]) -> None:
        fd, self.progress_path = tempfile.mkstemp(prefix="r2s-pool-", suffix=".progress",
                                                  dir="/dev/shm" if os.path.isdir("/dev/shm") else None)  # fmt: skip
        os.write(fd, _PROGRESS.pack(pack_progress(None, 0.0)))
        self.progress = mmap.mmap(fd, _PROGRESS.size)
        os.close(fd)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rewards.pool", str(memory_mb), self.progress_path, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.buffer = bytearray()
        self.inflight: deque[int] = deque()  # job ids in the order the worker runs them
        self.sent_at = 0.0  # time.monotonic() when the chunk in flight was sent, or its last reply came
        self.warmed: set[Hashable] = set()
        self.dead = False
        self.ready = False  # the worker has imported its modules and said so
        self.spawned_at = time.monotonic()

    def forget_progress_file(self) -> None:
        """Unlink the shared-memory file once both sides have it mapped (nothing stays behind)."""
        try:
            os.unlink(self.progress_path)
        except FileNotFoundError:
            pass

    def running(self) -> tuple[int | None, float]:
        """``(job id, start)`` of the job in flight the worker is running now (from shared memory),
        or ``(None, sent_at)`` when it has not started the next one yet (``sent_at`` is then when
        the chunk was sent or its last reply arrived: the next job starts after that)."""
        (word,) = _PROGRESS.unpack_from(self.progress, 0)
        tag, start = unpack_progress(word, time.monotonic())
        for job in self.inflight:
            if (job + 1) & _LOW32 == tag:
                return job, start
        return None, self.sent_at

    def send(self, jobs: list[tuple[int, Callable[..., Any], tuple[Any, ...]]]) -> None:
        _write_frame(self.stdin, jobs)

    def read_replies(self) -> list[tuple[Any, ...]] | None:
        """Replies available now; None when the worker closed its end (died)."""
        while True:
            try:
                got = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not got:
                self.dead = True
                break
            self.buffer += got
        out = []
        while len(self.buffer) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + n:
                break
            out.append(pickle.loads(bytes(self.buffer[_HEADER.size : _HEADER.size + n])))
            del self.buffer[: _HEADER.size + n]
        if self.dead and not out:
            return None
        return out

    def kill(self) -> None:
        self.dead = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for fh in (self.proc.stdin, self.proc.stdout):
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass
        if not self.progress.closed:
            self.progress.close()
        self.forget_progress_file()

    def close(self) -> None:
        """Ask the worker to exit (closing its stdin), then make sure it did."""
        try:
            self.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


class WorkerPool:
    """``workers`` processes that run module-level functions with a deadline per item.

    Args:
        workers: number of processes (>= 1); started on first use (or by :meth:`start`).
        memory_mb: address-space cap of each worker, MiB.
        preload: modules each worker imports before it takes work, so no budget pays for imports.

    Raises:
        ConfigError: ``workers < 1`` or ``memory_mb < 128``.

    >>> with WorkerPool(2) as pool:
    ...     [o.value for o in pool.map(pow, [(2, 3), (3, 2), (10, 0)], budget_s=10)]
    [8, 9, 1]
    """

    def __init__(self, workers: int, *, memory_mb: int = DEFAULT_MEMORY_MB, preload: Sequence[str] = ()) -> None:
        if workers < 1:
            raise ConfigError(f"must be >= 1, got {workers}", where="workers")
        if memory_mb < 128:
            raise ConfigError(f"must be >= 128 MiB, got {memory_mb}", where="worker_memory_mb")
        self.n = workers
        self.memory_mb = memory_mb
        self.preload = tuple(preload)
        self._workers: list[_Worker | None] = [None] * workers
        self.kills = 0
        """Workers killed at an item's deadline or lost, over the pool's life."""
        self._seq = 0  # the next job id

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers (for tests and memory checks)."""
        return [w.proc.pid for w in self._workers if w is not None and not w.dead]

    def _worker(self, i: int) -> _Worker:
        w = self._workers[i]
        if w is None or w.dead:
            w = self._workers[i] = _Worker(self.memory_mb, self.preload)
        return w

    def start(self, *, wait: bool = False) -> WorkerPool:
        """Start every worker now (they import ``preload`` in the background); returns self.

        Args:
            wait: block until every worker has said it is ready.

        Raises:
            RuntimeError: ``wait`` and a worker exited or did not start within :data:`START_TIMEOUT_S`.
        """
        workers = [self._worker(i) for i in range(self.n)]
        while wait and not all(w.ready for w in workers):
            sel = selectors.DefaultSelector()
            try:
                for w in workers:
                    if not w.ready:
                        sel.register(w.fd, selectors.EVENT_READ, w)
                for key, _ in sel.select(timeout=1.0):
                    w = key.data
                    replies = w.read_replies()
                    if replies is None:
                        raise RuntimeError(f"a scoring worker exited while starting (status {w.proc.poll()})")
                    if ("ready",) in replies:
                        w.ready = True
                        w.forget_progress_file()
            finally:
                sel.close()
            if any(not w.ready and time.monotonic() > w.spawned_at + START_TIMEOUT_S for w in workers):
                raise RuntimeError(f"a scoring worker did not start within {START_TIMEOUT_S:g} s")
        return self

    def map(  # noqa: C901 - one dispatch loop, read top to bottom
        self,
        fn: Callable[..., Any],
        items: Sequence[tuple[Any, ...]],
        *,
        budget_s: float,
        keys: Sequence[Hashable | None] | None = None,
        warm: Callable[[Hashable], tuple[Callable[..., Any], tuple[Any, ...]]] | None = None,
        skip_if: Callable[[Outcome], bool] | None = None,
    ) -> list[Outcome]:
        """``fn(*item)`` for every item on the workers, in parallel; outcomes in item order.

        Args:
            fn: a module-level function (it is pickled by reference) and ``items`` its arguments.
            budget_s: seconds an item may run on its worker before the worker is killed.
            keys: per item, the key of the warm-up call it needs (None: none).
            warm: ``key -> (function, args)`` of the warm-up call, run once on each worker
                before the first item with that key it gets (in the same message), under the
                same budget. The item's function must itself cope with a warm-up that failed
                in the same message (the gold jobs of :mod:`rewards.sql_execution` do).
            skip_if: given a warm-up's outcome, True when the items with that key should not be
                sent (they get ``Outcome(skipped=warm_outcome)``); default: skip when the
                warm-up raised or was killed.

        Returns:
            One :class:`Outcome` per item. A raised exception is returned, not raised.

        Raises:
            RuntimeError: a worker could not be started.
        """
        n = len(items)
        outcomes: list[Outcome | None] = [None] * n
        if n == 0:
            return []
        keys = list(keys) if keys is not None else [None] * n
        skip = skip_if or (lambda o: not o.ok)
        warm_done: dict[Hashable, Outcome] = {}
        pending: deque[int] = deque(range(n))
        # job ids are unique over the pool's life (a worker's shared-memory record may still name a
        # job of an earlier call): this call's items are base..base+n-1, its warm-ups come after
        base = self._seq
        self._seq += n
        warm_of: dict[int, Hashable] = {}
        active = [self._worker(i) for i in range(self.n)]
        sel = selectors.DefaultSelector()
        for i, w in enumerate(active):
            sel.register(w.fd, selectors.EVENT_READ, i)
        try:
            while pending or any(w.inflight for w in active):
                # ---- deal a chunk to each idle worker: items, each after the warm-ups it still needs
                for i, w in enumerate(active):
                    if w.inflight or not w.ready or not pending:
                        continue
                    size = chunk_size(len(pending), self.n)
                    jobs = []
                    taken = 0
                    adding: set[Hashable] = set()
                    while pending and taken < size:
                        j = pending.popleft()
                        k = keys[j]
                        if k is not None and k in warm_done and skip(warm_done[k]):
                            outcomes[j] = Outcome(skipped=warm_done[k])
                            continue
                        if k is not None and warm is not None and k not in w.warmed and k not in adding:
                            warm_of[self._seq] = k
                            jobs.append((self._seq, *warm(k)))
                            self._seq += 1
                            adding.add(k)
                        jobs.append((base + j, fn, items[j]))
                        taken += 1
                    if not jobs:
                        continue
                    try:
                        w.send(jobs)
                    except (BrokenPipeError, OSError):
                        pending.extendleft(reversed([job[0] - base for job in jobs if job[0] not in warm_of]))
                        self._replace(i, active, sel)
                        continue
                    w.inflight.extend(job[0] for job in jobs)
                    w.sent_at = time.monotonic()
                if not pending and not any(w.inflight for w in active):
                    break  # the last items were skipped while dealing: nothing left to wait for
                # ---- wait for replies, a worker becoming ready, or the nearest deadline
                deadlines = [w.running()[1] + budget_s for w in active if w.inflight]
                deadlines += [w.spawned_at + START_TIMEOUT_S for w in active if not w.ready]
                wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                for key, _ in sel.select(timeout=wait):
                    i = key.data
                    w = active[i]
                    for reply in w.read_replies() or []:
                        if reply == ("ready",):
                            w.ready = True
                            w.forget_progress_file()
                            continue
                        job_id, ok, value, seconds = reply
                        if job_id not in w.inflight:
                            continue  # a reply to a job not in flight: ignore
                        w.inflight.remove(job_id)
                        w.sent_at = time.monotonic()
                        got = Outcome(value=value if ok else None, error=None if ok else value, seconds=seconds)
                        if job_id in warm_of:
                            k = warm_of[job_id]
                            w.warmed.add(k)
                            warm_done.setdefault(k, got)
                        else:
                            outcomes[job_id - base] = got
                    if w.dead:
                        self._lose(i, active, sel, outcomes, pending, base, warm_of, warm_done)
                # ---- kill a worker whose current item is past its budget
                now = time.monotonic()
                for i, w in enumerate(active):
                    if w.inflight and now > w.running()[1] + budget_s:
                        self._lose(i, active, sel, outcomes, pending, base, warm_of, warm_done)
                    elif not w.ready and now > w.spawned_at + START_TIMEOUT_S:
                        raise RuntimeError(f"a scoring worker did not start within {START_TIMEOUT_S:g} s")
        finally:
            sel.close()
        return [o if o is not None else Outcome(error=RuntimeError("lost")) for o in outcomes]

    def _replace(self, i: int, active: list[_Worker], sel: selectors.BaseSelector) -> None:
        old = active[i]
        try:
            sel.unregister(old.fd)
        except (KeyError, ValueError):
            pass
        old.kill()
        self._workers[i] = None
        active[i] = self._worker(i)
        sel.register(active[i].fd, selectors.EVENT_READ, i)

    def _lose(self, i: int, active: list[_Worker], sel: selectors.BaseSelector, outcomes: list[Outcome | None],
              pending: deque[int], base: int, warm_of: dict[int, Hashable], warm_done: dict[Hashable, Outcome]) -> None:  # fmt: skip
        """Kill (or bury) worker ``i``: the job it was running is ``killed``; its other jobs in
        flight (their replies lost with it) go back to the front of the queue."""
        w = active[i]
        if not w.ready:
            code = w.proc.poll()
            w.kill()
            raise RuntimeError(f"a scoring worker exited while starting (status {code}); its error is above")
        job, start = w.running()
        if job is None and w.inflight:
            job = w.inflight[0]
        seconds = time.monotonic() - start
        inflight = list(w.inflight)
        w.inflight.clear()
        self.kills += 1
        if job is not None:
            lost = Outcome(killed=True, seconds=seconds)
            if job in warm_of:
                warm_done.setdefault(warm_of[job], lost)
            else:
                outcomes[job - base] = lost
        pending.extendleft(reversed([j - base for j in inflight if j not in warm_of and j != job]))
        self._replace(i, active, sel)

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        workers, self._workers = self._workers, [None] * self.n
        for w in workers:
            if w is not None:
                w.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _limit_memory(memory_mb: int) -> None:
    import resource

    cap = memory_mb << 20
    try:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (ValueError, OSError):
        pass
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute(f"PRAGMA hard_heap_limit = {cap // 2}")
    conn.close()


def _serve(memory_mb: int, progress_path: str, preload: Sequence[str]) -> None:
    """The worker loop: import ``preload``, say ready, then read a chunk of calls and run each,
    recording in ``progress_path`` which one runs since when; exit at EOF."""
    import importlib

    with open(progress_path, "r+b") as fh:
        progress = memoryview(mmap.mmap(fh.fileno(), _PROGRESS.size)).cast("Q")
    proto_in = sys.stdin.buffer
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints go to stderr, never into the protocol
    for name in preload:
        importlib.import_module(name)
    _limit_memory(memory_mb)
    _write_frame(proto_out, ("ready",))
    while True:
        head = _read_exactly(proto_in, _HEADER.size)
        if head is None:
            return
        body = _read_exactly(proto_in, _HEADER.unpack(head)[0])
        if body is None:
            return
        jobs = pickle.loads(body)
        unsent: list[bytes] = []
        since = time.perf_counter()
        for k, (job_id, fn, args) in enumerate(jobs):
            fatal = False
            progress[0] = pack_progress(job_id, time.monotonic())
            t0 = time.perf_counter()
            try:
                ok, value = True, fn(*args)
            except MemoryError:
                ok, value, fatal = False, MemoryError("out of memory"), True
            except BaseException as exc:  # noqa: BLE001 - returned to the parent
                ok, value = False, exc
            try:
                data = pickle.dumps((job_id, ok, value, time.perf_counter() - t0), protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                data = pickle.dumps((job_id, False, RuntimeError(f"unpicklable reply: {exc}"), time.perf_counter() - t0))
            unsent.append(_HEADER.pack(len(data)) + data)
            now = time.perf_counter()
            # replies go out together, at the end of the chunk or FLUSH_S after the first of them
            if fatal or k == len(jobs) - 1 or now - since > FLUSH_S:
                proto_out.write(b"".join(unsent))
                proto_out.flush()
                unsent, since = [], now
            if fatal:
                return


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
