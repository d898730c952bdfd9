"""Question logs for PPO from generated data: fresh generated questions, labels dropped.

A data set built again with more questions per path (``--samples-per-path``, same seed, so the
same database and synthetic rows) holds questions the router's own data set does not. This
script keeps those, in every split, drops their gold paths, and writes one question log per data
set, as ``python -m router.train_ppo --unlabelled FOLDER`` reads them with a folder of data sets
as ``--data``. No human-written question is read: the logs stand in for a user's question log
where none exists (the Spider dev benchmark of docs/results/ppo.md).

    python -m evaluation.spider_data --out runs/spider/data
    python -m evaluation.spider_data --out runs/spider/data20 --samples-per-path 20
    python examples/fresh_question_logs.py --data runs/spider/data --fresh runs/spider/data20 \\
        --out runs/spider/unlabelled --per-data-set 100
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from core.cli import parse, run_main


@dataclass
class Args:
    data: Path
    """The router's data set folder, or a folder of them: their questions are left out."""
    fresh: Path
    """The same data sets built again with more questions per path (same layout as --data)."""
    out: Path
    """Folder for the logs: one <data set folder name>.jsonl per data set."""
    per_data_set: int = 100
    """Questions per log at most (drawn at random when there are more)."""
    seed: int = 0
    """Seed of that draw."""


def main() -> dict[str, int]:
    from core.dataset import load_dataset
    from core.errors import DataError
    from core.io import write_jsonl
    from router.multi_schema import data_set_folders

    args = parse(Args, description=__doc__.split("\n\n")[0])
    rng = random.Random(args.seed)
    written: dict[str, int] = {}
    for folder in data_set_folders(args.data):
        fresh_folder = Path(args.fresh) / folder.name if folder != Path(args.data) else Path(args.fresh)
        if not (fresh_folder / "schema.json").is_file():
            raise DataError(f"no data set {folder.name!r} under --fresh", where=args.fresh)
        seen = {s.question for s in load_dataset(folder).samples}
        fresh = sorted({s.question for s in load_dataset(fresh_folder).samples} - seen)
        picked = sorted(rng.sample(fresh, min(args.per_data_set, len(fresh))))
        lang = ["zh" if any("\u3400" <= ch <= "\u9fff" for ch in q) else "en" for q in picked]
        write_jsonl(Path(args.out) / f"{folder.name}.jsonl", [{"question": q, "lang": g} for q, g in zip(picked, lang, strict=True)])
        written[folder.name] = len(picked)
        print(f"{folder.name}: {len(picked)} of {len(fresh)} fresh questions ({len(seen)} in the router's data)")
    return written


if __name__ == "__main__":
    run_main(main)
