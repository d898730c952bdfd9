"""Copy a router checkpoint as a full standalone folder (or as a slim one): ``python -m router.export --router DIR --out DIR``.

A router checkpoint keeps only what training changed and names the pretrained encoder it sits
on by the sha256 of its weights; loading it needs that encoder. The full folder written here
holds every weight (about 560 MB for multilingual-e5-small) and loads on a machine that has no
encoder at all. With --slim, a full folder (such as one from an older version) becomes slim
again. Routing is the same either way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.errors import CheckpointError, ConfigError
from router.checkpoint import CONFIG_FILE, ENCODER_DIR, WEIGHTS_FILE
from router.model import RouterModel


@dataclass
class ExportConfig:
    """Options of ``python -m router.export``."""

    router: Path
    """The router checkpoint folder to copy."""
    out: Path
    """The folder to write (replaced in one step; it must not be the --router folder)."""
    slim: bool = False
    """Write a slim folder (only the trained weights, on the named base encoder) instead of a full one."""

    def __post_init__(self) -> None:
        check_out(self.router, self.out, where="--out")


def check_out(router: str | Path, out: str | Path, *, where: str | Path | None = None) -> None:
    """Refuse an ``out`` whose replacement would lose something: the ``router`` folder itself, a
    folder inside it or holding it, an existing file, or an existing folder that is neither empty
    nor a router checkpoint (``where`` names the option; default ``out``).

    Raises:
        ConfigError: one of those, in one line.
    """
    src, dst = Path(router).resolve(), Path(out).resolve()
    where = out if where is None else where
    if dst == src:
        raise ConfigError("must differ from --router", where=where)
    if dst in src.parents:
        raise ConfigError(f"holds the --router folder {router} (replacing it would delete the router); choose a new folder", where=where)
    if src in dst.parents:
        raise ConfigError(f"is inside the --router folder {router}; choose a folder outside it", where=where)
    if dst.exists() and not dst.is_dir():
        raise ConfigError("is an existing file, not a folder; choose a new folder", where=where)
    if dst.is_dir() and not (dst / CONFIG_FILE).is_file() and any(dst.iterdir()):
        raise ConfigError(
            "is a folder that is not empty and not a router checkpoint (it would be replaced); choose a new folder",
            where=where,
        )


def export(router: str | Path, out: str | Path, *, slim: bool = False) -> Path:
    """Write ``out``: the checkpoint ``router`` with every weight (or, with ``slim``, only the trained ones).

    Every other file of the folder (schema snapshots, value index, eval.json, metrics.jsonl)
    is copied as it is.

    Raises:
        CheckpointError: ``router`` cannot be loaded (as :meth:`RouterModel.from_pretrained`), or
            ``slim`` was asked for a network whose base encoder cannot be shown.
    """
    src = Path(router)
    check_out(src, out)
    model, checkpoint = RouterModel.from_pretrained(src)
    if slim and model.base_encoder() is None:
        raise CheckpointError(
            f"the frozen weights differ from the encoder {model.config.encoder!r} (or it is not available); "
            "it can only be exported full",
            where=src,
        )
    skip = {WEIGHTS_FILE, CONFIG_FILE, ENCODER_DIR}
    files: dict[str, Any] = {}
    for p in sorted(src.iterdir()):
        if p.name not in skip and p.suffix == ".json" and p.is_file():
            try:
                files[p.name] = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                raise CheckpointError(f"unreadable JSON file ({str(exc).splitlines()[0]}); copy the checkpoint again", where=p) from exc
    try:
        copies = [p for p in sorted(src.iterdir()) if p.name not in skip and p.suffix != ".json" and p.is_file()]
        dst = model.save_pretrained(out, checkpoint, files, full=not slim, copies=copies)
    except OSError as exc:
        raise CheckpointError(f"cannot write the exported router ({exc.strerror or exc})", where=out) from exc
    return dst


def main(args: Sequence[str] | None = None) -> Path:
    """Command-line entry point (see the module docstring)."""
    cfg = parse(ExportConfig, args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    out = export(cfg.router, cfg.out, slim=cfg.slim)
    size = (out / WEIGHTS_FILE).stat().st_size / 1e6
    print(f"wrote {out} ({'slim' if cfg.slim else 'full'}, {WEIGHTS_FILE} {size:.1f} MB)")
    return out


if __name__ == "__main__":
    run_main(main)
