"""How often the label-free reward singles out the gold route, on questions that have one.

For each question of a split, every legal path of the schema is scored by
:func:`rewards.label_free.label_free_components` (value matches from the data set's value index,
target evidence from ``data_pipeline.mentions.mention_spans``, row counts on the data set's database), and the
gold path's score is compared with the best one. The labels are read only to judge the reward;
nothing is trained. Printed per split (at most ``--limit`` questions each):

- ``target_top``: the gold target is among the tables with the highest target evidence;
- ``gold_is_max``: the gold path has the highest label-free reward (ties allowed);
- ``gold_unique_max``: ... and no other legal path has it (a PPO signal that points at the gold route).

    python examples/label_free_agreement.py --data /tmp/r5/northwind --splits train human --limit 300
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from core.cli import parse, run_main


@dataclass
class Args:
    data: Path
    """Data set folder (python -m data_pipeline.build) with values.json and a SQLite database."""
    splits: tuple[str, ...] = ("train", "human")
    """Splits scored."""
    limit: int = 300
    """Questions per split at most (the first ones)."""


def main() -> dict:
    from core.dataset import load_dataset
    from envs.evidence import CachedRowCounter, question_evidence
    from rewards.label_free import label_free_components

    args = parse(Args, description=__doc__.split("\n\n")[0])
    ds = load_dataset(args.data)
    count = CachedRowCounter(ds.db_path)
    out = {}
    for split in args.splits:
        c: Counter[str] = Counter()
        for s in ds.split(split)[: args.limit]:
            qe = question_evidence(s.question, ds.graph, ds.values)
            best = max(qe.evidence.values(), default=0.0)
            c["target_top"] += best > 0 and qe.evidence.get(s.path.target, 0.0) == best
            scores = {p: label_free_components(p, ds.graph, qe.matches, qe.evidence, count)["total"] for p in ds.graph.legal_paths}
            top = max(scores.values())
            c["gold_is_max"] += scores[s.path] == top
            c["gold_unique_max"] += scores[s.path] == top and sum(v == top for v in scores.values()) == 1
            c["n"] += 1
        n = max(c["n"], 1)
        out[split] = {"n": c["n"]} | {k: round(c[k] / n, 3) for k in ("target_top", "gold_is_max", "gold_unique_max")}
        print(f"{ds.schema.name} {split}: {out[split]}")
    return out


if __name__ == "__main__":
    run_main(main)
