"""``router.train_sft --resume`` after SIGKILL equals an uninterrupted run (issue 14 item 7).

A tiny config (the smallest real encoder, 2 trainable layers, 12 questions) trains for 6 epochs
in a subprocess that is killed with SIGKILL as soon as its second epoch's state is on disk,
wherever it is then; ``--resume`` then finishes it. Its saved weights, metric rows (all but the
wall-clock column) and evaluation equal those of the same run never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_shop
from safetensors.torch import load_file
from test_router_sft import ENCODER, write_data_set

from core.errors import CheckpointError, ConfigError
from router.sft_resume import INFO_FILE, RESUME_DIR
from router.train_sft import main as sft_main

ARGS = ["--encoder", ENCODER, "--trainable-layers", "2", "--head-dim", "32", "--epochs", "6", "--patience", "6",
        "--batch-size", "4", "--lr", "3e-3", "--encoder-lr", "2e-4", "--value-calibration-epochs", "5", "--threads", "1",
        "--no-progress", "--eval-splits", "validation", "--seed", "7"]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sft_resume")
    return write_data_set(make_tiny_shop(root / "shop.sqlite"), root / "data")


def _metrics(out: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(next(out.glob("*.safetensors"))))


def test_resume_after_sigkill_equals_an_uninterrupted_run(data: Path, tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    sft_main(["--data", str(data), "--out", str(straight), *ARGS])
    assert not (Path(str(straight) + ".logs") / RESUME_DIR).exists()  # removed when the run finished

    killed = tmp_path / "killed"
    logs = Path(str(killed) + ".logs")
    proc = subprocess.Popen([sys.executable, "-m", "router.train_sft", "--data", str(data), "--out", str(killed), *ARGS],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    info = logs / RESUME_DIR / INFO_FILE
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if info.is_file() and json.loads(info.read_text())["epoch"] >= 2:
            break
        time.sleep(0.005)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not killed.exists()  # it really died before the end
    epoch_done = json.loads(info.read_text())["epoch"]
    assert 2 <= epoch_done < 6

    with pytest.raises(ConfigError, match="holds an interrupted run .*pass --resume True"):
        sft_main(["--data", str(data), "--out", str(killed), *ARGS])  # would throw the epochs away
    with pytest.raises(CheckpointError, match=r"cannot resume with different options \(lr: 0.003 -> 0.001\)"):
        sft_main(["--data", str(data), "--out", str(killed), *ARGS, "--resume", "True", "--lr", "1e-3"])
    resumed = sft_main(["--data", str(data), "--out", str(killed), *ARGS, "--resume", "True"])
    assert resumed.out == killed and not (logs / RESUME_DIR).exists()
    assert not [p for p in logs.iterdir() if p.name.startswith(".")]  # no half-written state left behind

    a, b = _weights(straight), _weights(killed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert _metrics(straight) == _metrics(killed)
    assert json.loads((straight / "eval.json").read_text()) == json.loads((killed / "eval.json").read_text())


def test_an_unwritable_log_folder_is_one_error_line(data: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "router.train_sft", "--data", str(data), "--out", str(tmp_path / "o"),
                           "--log-dir", str(blocker / "logs"), *ARGS], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "logs" in lines[0] and "not writable" in lines[0]
