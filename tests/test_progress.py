"""core.progress: tqdm bars on a terminal, whole lines with rate and ETA in a log file."""

from __future__ import annotations

import io

from core import progress
from core.progress import progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_file_gets_whole_lines_with_rate_and_eta(monkeypatch) -> None:
    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)  # a line per update, so the test needs no minute
    log = io.StringIO()
    for _ in progress_bar(range(3), desc="steps", stream=log, unit="step"):
        pass
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[-1].startswith("steps: 100%") and "3/3" in lines[-1]
    assert all("step" in line for line in lines)
    assert len(lines) == len(set(lines))  # the end is written once, not again on close
    assert any("<" in line for line in lines)  # tqdm's "elapsed<remaining" (the ETA)


def test_log_file_waits_a_minute_between_lines() -> None:
    log = io.StringIO()
    bar = progress_bar(range(500), desc="fast", stream=log)
    for i in bar:
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}")  # the training loops do this every step
        bar.set_description("fast")
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2  # the start and the end, nothing in between within a minute
    assert lines[0].startswith("fast:   0%") and lines[1].startswith("fast: 100%")


def test_disabled_writes_nothing() -> None:
    log = io.StringIO()
    assert list(progress_bar(range(4), enabled=False, stream=log)) == [0, 1, 2, 3]
    assert log.getvalue() == ""


def test_terminal_gets_a_redrawn_bar() -> None:
    term = _Terminal()
    for _ in progress_bar(range(3), desc="bar", stream=term):
        pass
    assert "\r" in term.getvalue()  # tqdm redraws in place


def test_a_closed_stream_or_a_caller_setting_is_no_crash() -> None:
    closed = io.StringIO()
    closed.close()  # isatty() raises on a closed stream
    assert list(progress_bar(range(3), stream=closed)) == [0, 1, 2]
    log = io.StringIO()
    assert list(progress_bar(range(3), stream=log, ncols=50, mininterval=0)) == [0, 1, 2]  # the caller's settings win
    assert max(len(line) for line in log.getvalue().splitlines()) <= 50
