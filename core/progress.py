"""Progress for long work: a tqdm bar on a terminal, one plain line a minute in a log file.

A tqdm bar redrawn in place is what a person at a terminal wants; written to a file or a pipe it
becomes one long line of carriage returns that no one can follow. :func:`progress_bar` keeps
tqdm (its rate and ETA) in both cases and only changes how often and how it writes: on a
terminal as usual, elsewhere at most once every ``LOG_INTERVAL_S`` seconds, each update on its
own line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm

LOG_INTERVAL_S = 60.0
"""Seconds between two progress lines when the output is not a terminal."""


class _Lines:
    """A file-like object that turns tqdm's in-place redraws into whole lines on ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        if line and line != self.last:  # closing a finished bar redraws its last line
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last = line
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class _LogBar(tqdm):
    """A tqdm bar whose postfix and description changes wait for the next timed line (a
    terminal bar redraws on each; a log file would get a line per step)."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:  # noqa: ARG002
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:  # noqa: ARG002
        super().set_description(desc, refresh=False)


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool = True, stream: TextIO | None = None,
                 **kwargs: Any) -> tqdm:  # fmt: skip
    """A tqdm bar over ``iterable`` (or with ``total=``) that suits where it is written.

    Args:
        iterable: what to iterate over, or None and ``total=`` with :meth:`tqdm.update`.
        enabled: False shows nothing (``--no-progress``).
        stream: where to write (default ``sys.stderr``). When it is not a terminal, the bar is
            written as one line with the rate and ETA at most every :data:`LOG_INTERVAL_S`
            seconds, and once at the end.
        **kwargs: passed to tqdm (``desc``, ``total``, ``unit``, ``initial``, ...).

    Returns:
        the tqdm object (``update``, ``set_postfix``, ``close`` as usual).
    """
    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return tqdm(iterable, disable=True, **kwargs)
    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream: not a terminal
        terminal = False
    if terminal:
        return tqdm(iterable, file=stream, **kwargs)
    # miniters=1: the time is checked at every update, and tqdm's monitor thread never redraws a
    # stale line between two updates (it does so only for bars with miniters > 1)
    settings = {"mininterval": LOG_INTERVAL_S, "miniters": 1, "ncols": 100, "ascii": True, "dynamic_ncols": False}
    return _LogBar(iterable, **(settings | kwargs | {"file": _Lines(stream)}))
