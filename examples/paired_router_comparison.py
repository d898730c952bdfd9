"""Two routers on the same questions, paired: full-path accuracy, the 2x2 counts, exact McNemar p.

For each data set (``--data``) the baseline router (``--a``) and the candidate (``--b``) route the
questions of ``--splits`` with :meth:`router.route.Router.route_batch` (value linking on, as
``python -m router.evaluate`` does), and every question is scored right or wrong on its full path.
The pairs of all data sets are pooled into one union per split, on which the exact McNemar test
(two-sided binomial test on the discordant pairs, McNemar 1947; exact form: Edwards 1948) is run:

    b = questions A gets right and B gets wrong, c = the other way round,
    p = min(1, 2 * P[X <= min(b, c)]),  X ~ Binomial(b + c, 1/2)   (p = 1 when b + c = 0)

    python examples/paired_router_comparison.py --data /tmp/r5/northwind /tmp/r5/chinook \\
        --a /tmp/r5/r_northwind /tmp/r5/r_chinook --b /tmp/ppo17/nw /tmp/ppo17/ch --splits human test

``--a`` and ``--b`` list one router folder per data set, in the same order. ``--questions`` adds
one file of questions with gold routes per data set (the development sets of
``evaluation/dev_sets``), pooled as the split ``questions``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.cli import parse, run_main
from core.errors import ConfigError
from evaluation.paired import exact_mcnemar


@dataclass
class Args:
    data: tuple[Path, ...]
    """Data set folders (python -m data_pipeline.build), one per router pair."""
    a: tuple[Path, ...]
    """Baseline router folders (e.g. SFT), one per data set, same order."""
    b: tuple[Path, ...]
    """Candidate router folders (e.g. PPO), one per data set, same order."""
    splits: tuple[str, ...] = ("human", "test")
    """Splits scored (each pooled over the data sets)."""
    questions: tuple[Path, ...] = ()
    """Files of questions with gold routes (one JSON object per line, as evaluation/dev_sets), one per data set, same order; scored as the split "questions"."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    out: Path | None = None
    """Also write the per-split and per-data-set counts as JSON here."""

    def __post_init__(self) -> None:
        if not (len(self.data) == len(self.a) == len(self.b)) or not self.data:
            raise ConfigError(f"--data ({len(self.data)}), --a ({len(self.a)}) and --b ({len(self.b)}) must list the same number of folders", where="--a")
        if self.questions and len(self.questions) != len(self.data):
            raise ConfigError(f"must list one file per --data folder ({len(self.data)}), got {len(self.questions)}", where="--questions")


def main(argv: Sequence[str] | None = None) -> dict:
    """Print a table per split (each data set and the union) and return the counts."""
    import torch

    from core.dataset import load_dataset
    from data_pipeline.human_sets import load_human_questions
    from router.route import Router

    args = parse(Args, argv, description=__doc__.split("\n\n")[0])
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict = {}
    for split in (*args.splits, *(("questions",) if args.questions else ())):
        rows, union = [], {"n": 0, "a": 0, "b": 0, "both": 0, "a_only": 0, "b_only": 0, "neither": 0}
        for i, (data, ra, rb) in enumerate(zip(args.data, args.a, args.b, strict=True)):
            ds = load_dataset(data)
            samples = (load_human_questions(args.questions[i], ds.graph, db_name=ds.schema.name) if split == "questions"
                       else ds.split(split))
            if not samples:
                continue
            qs = [s.question for s in samples]
            right = []
            for folder in (ra, rb):
                router = Router.from_pretrained(folder, ds.graph, values=ds.values)
                right.append([r.path == s.path for r, s in zip(router.route_batch(qs), samples, strict=True)])
            c = {"n": len(samples), "a": sum(right[0]), "b": sum(right[1]),
                 "both": sum(x and y for x, y in zip(*right)), "a_only": sum(x and not y for x, y in zip(*right)),
                 "b_only": sum(y and not x for x, y in zip(*right)), "neither": sum(not x and not y for x, y in zip(*right))}  # fmt: skip
            rows.append((ds.schema.name, c))
            for k in union:
                union[k] += c[k]
        rows.append(("union", union))
        print(f"== {split} ==")
        print("| data | n | A right | B right | B - A | both | A only | B only | neither | exact McNemar p |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, c in rows:
            p = exact_mcnemar(c["a_only"], c["b_only"])
            n = max(c["n"], 1)
            print(f"| {name} | {c['n']} | {c['a']} ({100 * c['a'] / n:.1f}) | {c['b']} ({100 * c['b'] / n:.1f}) | "
                  f"{c['b'] - c['a']:+d} ({100 * (c['b'] - c['a']) / n:+.1f} pt) | {c['both']} | {c['a_only']} | {c['b_only']} | "
                  f"{c['neither']} | {p:.4g} |")  # fmt: skip
            c["mcnemar_p"] = p
        results[split] = dict(rows)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


if __name__ == "__main__":
    run_main(main)
