"""Copy a router checkpoint as a full standalone folder (or as a slim one): ``python -m router.export --router DIR --out DIR``.

A router checkpoint keeps only what training changed and names the pretrained encoder it sits
on by the sha256 of its weights; loading it needs that encoder. The full folder written here
holds every weight (about 560 MB for multilingual-e5-small) and loads on a machine that has no
encoder at all. With --slim, a full folder (such as one from an older version) becomes slim
again. Routing is the same either way.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
        if Path(self.out).resolve() == Path(self.router).resolve():
            raise ConfigError("must differ from --router", where="--out")


def export(router: str | Path, out: str | Path, *, slim: bool = False) -> Path:
    """Write ``out``: the checkpoint ``router`` with every weight (or, with ``slim``, only the trained ones).

    Every other file of the folder (schema snapshots, value index, eval.json, metrics.jsonl)
    is copied as it is.

    Raises:
        CheckpointError: ``router`` cannot be loaded (as :meth:`RouterModel.from_pretrained`), or
            ``slim`` was asked for a network whose base encoder cannot be shown.
    """
    src = Path(router)
    model, checkpoint = RouterModel.from_pretrained(src)
    if slim and model.base_encoder() is None:
        raise CheckpointError(
            f"the frozen weights differ from the encoder {model.config.encoder!r} (or it is not available); "
            "it can only be exported full",
            where=src,
        )
    skip = {WEIGHTS_FILE, CONFIG_FILE, ENCODER_DIR}
    files = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(src.iterdir())
             if p.name not in skip and p.suffix == ".json" and p.is_file()}  # fmt: skip
    dst = model.save_pretrained(out, checkpoint, files, full=not slim)
    for p in sorted(src.iterdir()):
        if p.name not in skip and p.suffix != ".json" and p.is_file():
            shutil.copy2(p, dst / p.name)
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
