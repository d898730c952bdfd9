"""``router.train_sft --resume``: the per-epoch state a killed SFT run continues from.

After every epoch :func:`save_epoch_state` replaces ``LOG_DIR/resume/`` in one rename
(:func:`core.io.atomic_directory`) with everything the next epoch depends on:

- the trained weights (every parameter that trains, and the value head);
- the optimizer's and the LR scheduler's state;
- every random state: torch's global generator (dropout), the epoch-shuffling generator,
  NumPy's and Python's;
- early stopping: the best (full-path accuracy, NLL) so far, its epoch and weights, the epochs
  without improvement, whether it has stopped, and the metric rows so far.

:func:`load_epoch_state` gives it back, so a run killed at any moment and started again with
``--resume`` ends with the same weights and metrics as an uninterrupted run with the same seed
(only the wall-clock columns differ). The folder is removed when the run finishes; a run
started without ``--resume`` over an interrupted one stops with an error rather than throw
its epochs away. The options must be the ones of the interrupted run (except those in
:data:`RESUME_FREE`).
"""

from __future__ import annotations

import json
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import CheckpointError, ConfigError
from core.io import atomic_directory, ensure_writable_dir, remove_stale_temporaries

RESUME_DIR = "resume"
"""Folder under the log folder holding the last finished epoch's state."""

STATE_FILE = "state.pt"
INFO_FILE = "epoch.json"

RESUME_FREE = ("resume", "progress", "threads", "tensorboard", "log_dir", "eval_splits")
"""Options that may differ between the interrupted run and the one that resumes it."""


@dataclass
class EpochState:
    """Where training stood after ``epoch`` finished (see the module docstring)."""

    epoch: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    torch_rng: torch.Tensor
    shuffle_rng: torch.Tensor
    numpy_rng: tuple[Any, ...]
    python_rng: tuple[Any, ...]
    best: tuple[float, float]
    best_epoch: int
    best_state: dict[str, torch.Tensor] | None
    bad_epochs: int
    stopped: bool
    history: list[dict[str, float]]


def prepare_log_dir(log_dir: Path) -> Path:
    """Create the log folder (one error naming it when it cannot be written) and clean up after
    saves a kill interrupted there.

    Raises:
        Route2SQLError: the folder cannot be created or written.
    """
    log_dir = ensure_writable_dir(log_dir)
    remove_stale_temporaries(log_dir)
    return log_dir


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in RESUME_FREE}


def find_epoch_state(log_dir: Path, config: dict[str, Any], resume: bool) -> Path | None:
    """The state folder to resume from, or None to start at epoch 1.

    Raises:
        ConfigError: an interrupted run's state is there but ``resume`` is False (``--resume``).
        CheckpointError: the state was made with other options, naming them.
    """
    folder = log_dir / RESUME_DIR
    info_file = folder / INFO_FILE
    if not info_file.is_file():
        if resume:
            warnings.warn(f"--resume: no interrupted run in {folder}; starting at epoch 1", stacklevel=3)
        return None
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
        epoch, saved = int(info["epoch"]), dict(info["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"unreadable resume state ({exc})", where=info_file) from None
    if not resume:
        raise ConfigError(
            f"{folder} holds an interrupted run (epoch {epoch} done); pass --resume True to continue it or remove it",
            where="--resume",
        )
    ours, theirs = _comparable(config), _comparable(saved)
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differ:
        pairs = ", ".join(f"{k}: {theirs.get(k)!r} -> {ours.get(k)!r}" for k in differ)
        raise CheckpointError(f"cannot resume with different options ({pairs})", where=folder)
    return folder


def save_epoch_state(log_dir: Path, config: dict[str, Any], state: EpochState) -> None:
    """Replace ``log_dir/resume`` with ``state`` in one rename."""
    np_state = state.numpy_rng
    payload = {
        "epoch": state.epoch,
        "model": state.model,
        "optimizer": state.optimizer,
        "scheduler": state.scheduler,
        "torch_rng": state.torch_rng,
        "shuffle_rng": state.shuffle_rng,
        "numpy_rng": [np_state[0], torch.from_numpy(np.asarray(np_state[1]).astype(np.int64)), *np_state[2:]],
        "python_rng": [state.python_rng[0], list(state.python_rng[1]), state.python_rng[2]],
        "best": list(state.best),
        "best_epoch": state.best_epoch,
        "best_state": state.best_state,
        "bad_epochs": state.bad_epochs,
        "stopped": state.stopped,
        "history": state.history,
    }
    with atomic_directory(log_dir / RESUME_DIR) as tmp:
        torch.save(payload, tmp / STATE_FILE)
        (tmp / INFO_FILE).write_text(json.dumps({"epoch": state.epoch, "config": config}, indent=2), encoding="utf-8")


def load_epoch_state(folder: Path) -> EpochState:
    """Read what :func:`save_epoch_state` wrote.

    Raises:
        CheckpointError: the state file is missing or unreadable.
    """
    path = folder / STATE_FILE
    try:
        p = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(f"unreadable resume state ({str(exc).splitlines()[0][:200]})", where=path) from None
    np_rng = p["numpy_rng"]
    return EpochState(
        epoch=int(p["epoch"]),
        model=p["model"],
        optimizer=p["optimizer"],
        scheduler=p["scheduler"],
        torch_rng=p["torch_rng"],
        shuffle_rng=p["shuffle_rng"],
        numpy_rng=(np_rng[0], np_rng[1].numpy().astype(np.uint32), *np_rng[2:]),
        python_rng=(p["python_rng"][0], tuple(p["python_rng"][1]), p["python_rng"][2]),
        best=(float(p["best"][0]), float(p["best"][1])),
        best_epoch=int(p["best_epoch"]),
        best_state=p["best_state"],
        bad_epochs=int(p["bad_epochs"]),
        stopped=bool(p["stopped"]),
        history=list(p["history"]),
    )


def capture_rngs(shuffle: torch.Generator) -> dict[str, Any]:
    """The random states an epoch draws from, as :class:`EpochState` fields."""
    return {"torch_rng": torch.get_rng_state(), "shuffle_rng": shuffle.get_state(), "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate()}  # fmt: skip


def restore_rngs(state: EpochState, shuffle: torch.Generator) -> None:
    """Set every random state back to where ``state`` left it."""
    torch.set_rng_state(state.torch_rng)
    shuffle.set_state(state.shuffle_rng)
    np.random.set_state(state.numpy_rng)
    random.setstate(state.python_rng)


def finish(log_dir: Path) -> None:
    """The run is done: its resume state is no longer needed."""
    shutil.rmtree(log_dir / RESUME_DIR, ignore_errors=True)
