"""Splits: train / validation / test stratified by (path, difficulty), plus ``test_heldout``.

- A sample whose template id is held out (:func:`~data_pipeline.templates.heldout_template_ids`)
  goes to ``test_heldout``; no other split ever holds one of those phrasings.
- The other samples move as *groups*: a seed question and its paraphrases (``meta["seed"]``)
  always land in the same split, so no wording of a test question is trained on.
- Within each (path, difficulty) stratum, groups are shuffled and each split gets
  ``floor(ratio * n_groups)`` of them; the groups left over go one by one to the split furthest
  below its share of all samples assigned so far. Each stratum is thus split in proportion and
  the totals come out close to the ratios even when strata are small.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Collection

from core.errors import ConfigError
from core.samples import Sample

SPLIT_NAMES = ("train", "validation", "test")
DEFAULT_RATIOS = (0.70, 0.15, 0.15)


def assign_splits(
    samples: list[Sample],
    heldout_templates: Collection[str],
    ratios: tuple[float, float, float] = DEFAULT_RATIOS,
    seed: int = 0,
) -> list[Sample]:
    """Return ``samples`` (same order) with ``split`` set.

    Args:
        samples: samples with ``path``, ``difficulty``, ``template_id`` and ``meta["seed"]``.
        heldout_templates: template ids reserved for ``test_heldout``.
        ratios: train/validation/test shares of the non-held-out samples (sum 1).
        seed: shuffling seed.

    Raises:
        ConfigError: a ratio is negative or they do not sum to 1.
    """
    if any(r < 0 for r in ratios) or not math.isclose(sum(ratios), 1.0, abs_tol=1e-6):
        raise ConfigError(f"split ratios must be >= 0 and sum to 1, got {ratios}", where="ratios")
    rng = random.Random(f"{seed}:splits")
    groups: dict[str, list[int]] = defaultdict(list)
    split_of: dict[int, str] = {}
    for i, s in enumerate(samples):
        if s.template_id in heldout_templates:
            split_of[i] = "test_heldout"
        else:
            groups[str(s.meta.get("seed", s.id))].append(i)
    strata: dict[tuple[int, str, str], list[str]] = defaultdict(list)
    for gid, members in groups.items():
        first = samples[members[0]]
        strata[(first.path.hops, str(first.path), first.difficulty)].append(gid)
    assigned = dict.fromkeys(SPLIT_NAMES, 0)

    def put(gid: str, split: str) -> None:
        for i in groups[gid]:
            split_of[i] = split
        assigned[split] += len(groups[gid])

    for key in sorted(strata):
        gids = strata[key]
        rng.shuffle(gids)
        quotas = [math.floor(r * len(gids)) for r in ratios]
        pos = 0
        for split, q in zip(SPLIT_NAMES, quotas, strict=True):
            for gid in gids[pos : pos + q]:
                put(gid, split)
            pos += q
        for gid in gids[pos:]:
            total = sum(assigned.values()) + len(groups[gid])
            deficit = {sp: r * total - assigned[sp] for sp, r in zip(SPLIT_NAMES, ratios, strict=True)}
            put(gid, max(SPLIT_NAMES, key=lambda sp: (deficit[sp], -SPLIT_NAMES.index(sp))))
    return [s.with_split(split_of[i]) for i, s in enumerate(samples)]
