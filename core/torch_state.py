"""Reading training state written by ``torch.save`` without running code planted in it.

``torch.load(weights_only=False)`` unpickles anything, so a checkpoint folder someone else
wrote could run code on ``--resume``. :func:`load_state` allows only what a training run
saves: tensors, plain Python containers and numbers, and numpy arrays and scalars (numpy RNG
states pickle to them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_state(path: str | Path) -> Any:
    """``torch.load(path, weights_only=True)`` with numpy arrays and scalars allowed.

    Raises:
        pickle.UnpicklingError: the file holds anything else (a class, a function call).
        OSError, EOFError, RuntimeError: a missing, truncated or corrupt file.
    """
    import numpy as np
    import torch
    from numpy._core.multiarray import _reconstruct, scalar

    numpy_globals = [_reconstruct, scalar, np.ndarray, np.dtype, *(type(np.dtype(t)) for t in ("uint32", "int64", "float64", "float32"))]
    with torch.serialization.safe_globals(numpy_globals):
        return torch.load(path, weights_only=True)
