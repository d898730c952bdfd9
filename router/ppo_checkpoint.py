"""Resumable PPO checkpoints: the router weights plus everything needed to continue the same run.

Layout of a checkpoint folder (replaced in one rename by :func:`core.io.atomic_directory`,
so a run killed while saving leaves the previous checkpoint intact)::

    CKPT/model/             RouterModel.save_pretrained (loadable on its own)
    CKPT/trainer_state.pt   TrainerState below (torch.save; optimizer, scheduler, RNG states)
    CKPT/config.json        the PPO config of the run (to refuse resuming with another one)
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import CheckpointError
from core.io import atomic_directory, write_json
from core.torch_state import load_state
from router.checkpoint import RouterCheckpointConfig
from router.model import RouterModel

STATE_FILE = "trainer_state.pt"
CONFIG_FILE = "config.json"
MODEL_DIR = "model"


@dataclass
class TrainerState:
    """What a resumed run needs besides the weights.

    Attributes:
        update: PPO updates completed.
        global_step: env steps collected (``update * n_steps * n_envs``).
        actor_optimizer, critic_optimizer, actor_scheduler, critic_scheduler: ``state_dict()`` s.
        shuffle_rng: state of the minibatch-shuffling ``torch.Generator``.
        torch_rng, numpy_rng, python_rng: global RNG states (action sampling uses torch's).
        env_rng: per data set (one, or one per schema), each sub-env's ``np_random`` state;
            ``pending``: per data set, the question each of its envs shows.
        history: metrics rows logged so far.
        extra: anything else (e.g. the starting validation accuracy).
    """

    update: int
    global_step: int
    actor_optimizer: dict[str, Any]
    critic_optimizer: dict[str, Any]
    actor_scheduler: dict[str, Any]
    critic_scheduler: dict[str, Any]
    shuffle_rng: torch.Tensor
    env_rng: list[list[dict[str, Any]]]
    pending: list[list[int]]
    history: list[dict[str, float]]
    torch_rng: torch.Tensor = field(default_factory=torch.get_rng_state)
    numpy_rng: dict[str, Any] = field(default_factory=lambda: np.random.get_state(legacy=False))
    python_rng: Any = field(default_factory=random.getstate)
    extra: dict[str, Any] = field(default_factory=dict)

    def restore_global_rngs(self) -> None:
        """Set torch, numpy and python global RNGs to the saved states."""
        torch.set_rng_state(self.torch_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)


def save_checkpoint(
    ckpt_dir: str | Path, model: RouterModel, checkpoint: RouterCheckpointConfig, state: TrainerState, config: dict[str, Any]
) -> Path:
    """Write ``ckpt_dir`` atomically (layout in the module docstring); ``checkpoint`` is the router's metadata."""
    with atomic_directory(ckpt_dir) as tmp:
        model.save_pretrained(tmp / MODEL_DIR, checkpoint)
        torch.save(state.__dict__, tmp / STATE_FILE)
        write_json(tmp / CONFIG_FILE, config)
    return Path(ckpt_dir)


def load_checkpoint(ckpt_dir: str | Path) -> tuple[RouterModel, TrainerState, dict[str, Any], RouterCheckpointConfig]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Returns:
        ``(model, state, config, checkpoint)``: the router, the trainer state, the PPO options
        and the router's metadata.

    The trainer state is unpickled with ``torch.load(weights_only=True)``: tensors, plain Python
    containers and numpy RNG states only, so a planted ``trainer_state.pt`` cannot run code.

    Raises:
        CheckpointError: a missing or unreadable file (named), including a state whose fields
            are not of the types a run saves, or a ``config.json`` that is not a JSON object.
    """
    d = Path(ckpt_dir)
    for name in (MODEL_DIR, STATE_FILE, CONFIG_FILE):
        if not (d / name).exists():
            raise CheckpointError(f"not a PPO checkpoint (no {name})", where=d)
    model, checkpoint = RouterModel.from_pretrained(d / MODEL_DIR)
    try:
        raw = load_state(d / STATE_FILE)  # tensors, plain containers and numpy RNG states only
        if not isinstance(raw, dict):
            raise TypeError(f"holds a {type(raw).__name__}, not a dict")
        state = TrainerState(**raw)
        if state.pending and not isinstance(state.pending[0], list):  # saved before several schemas: one data set
            state.env_rng, state.pending = [state.env_rng], [state.pending]
        _check_types(state)
    except Exception as exc:  # any unpickling failure (truncated file, foreign pickle, wrong fields) is one error
        raise CheckpointError(f"unreadable trainer state ({type(exc).__name__}: {exc})".splitlines()[0], where=d / STATE_FILE) from exc
    try:
        config = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"unreadable ({exc})", where=d / CONFIG_FILE) from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"holds a JSON {type(config).__name__}, not an object of PPO options", where=d / CONFIG_FILE)
    return model, state, config, checkpoint


def _check_types(state: TrainerState) -> None:
    """Raise TypeError naming the first field of a loaded state whose type is not what a run saves."""
    expected: dict[str, type | tuple[type, ...]] = {
        "update": int, "global_step": int, "actor_optimizer": dict, "critic_optimizer": dict,
        "actor_scheduler": dict, "critic_scheduler": dict, "shuffle_rng": torch.Tensor, "torch_rng": torch.Tensor,
        "numpy_rng": dict, "python_rng": tuple, "env_rng": list, "pending": list, "history": list, "extra": dict,
    }
    for name, kind in expected.items():
        value = getattr(state, name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(f"field {name} is a {type(value).__name__}")
    if state.update < 0 or state.global_step < 0:
        raise TypeError(f"negative update {state.update} or global_step {state.global_step}")
    if not all(isinstance(row, dict) for row in state.history):
        raise TypeError("field history holds a row that is not a dict")
    if not all(isinstance(x, list) for x in (*state.env_rng, *state.pending)):
        raise TypeError("fields env_rng and pending must hold one list per data set")
