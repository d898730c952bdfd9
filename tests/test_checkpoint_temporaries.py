"""Interrupted saves leave no folders behind for long (issue 14 item 8).

A save killed inside :func:`core.io.atomic_directory` left ``.checkpoint-N.tmp-*``
folders (28 MB for PPO, 7 MB for GRPO) that resume never removed. The next save in the same
folder (and ``--resume``) now removes those of dead processes and puts back a previous copy a
kill between the two renames had moved aside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from core.io import atomic_directory, remove_stale_temporaries


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_save_killed_half_way_is_cleaned_up_by_the_next_save(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from core.io import atomic_directory
        with atomic_directory(Path({str(tmp_path)!r}) / "checkpoint-1") as tmp:
            (tmp / "model.safetensors").write_bytes(b"x" * (1 << 20))
            print("saving", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "saving"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(f".checkpoint-1.tmp-{proc.pid}-")  # what the kill leaves
    with atomic_directory(tmp_path / "checkpoint-2") as tmp:
        (tmp / "model.safetensors").write_bytes(b"y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]


def test_a_copy_moved_aside_by_a_killed_save_is_put_back(tmp_path: Path) -> None:
    pid = dead_pid()
    aside = tmp_path / f".checkpoint-3.old-{pid}"  # killed between "move the old copy away" and "move the new one in"
    aside.mkdir()
    (aside / "state.pt").write_text("good")
    orphan = tmp_path / f".checkpoint-3.tmp-{pid}-x1y2"
    orphan.mkdir()
    assert remove_stale_temporaries(tmp_path) == sorted([aside, orphan])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3"]
    assert (tmp_path / "checkpoint-3" / "state.pt").read_text() == "good"


def test_a_save_in_progress_and_other_files_are_left_alone(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = tmp_path / f".final.tmp-{sleeper.pid}-abcd"
        live.mkdir()
        mine = tmp_path / f".final.tmp-{os.getpid()}-efgh"
        mine.mkdir()
        legacy = tmp_path / ".checkpoint-1.tmp-k3j2h1g0"  # written before the process id was in the name
        legacy.mkdir()
        keep = [tmp_path / ".hidden", tmp_path / "notes.tmp-1"]
        keep[0].mkdir()
        keep[1].write_text("x")
        assert remove_stale_temporaries(tmp_path) == [legacy]
        assert live.is_dir() and mine.is_dir() and all(k.exists() for k in keep)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert remove_stale_temporaries(tmp_path) == [live]  # its process is gone now
