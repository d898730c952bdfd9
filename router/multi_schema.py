"""One router trained on several schemas: the data set folders behind ``--data`` and pooled metrics.

``python -m router.train_sft`` and ``python -m router.train_ppo`` both accept, as ``--data``, a
folder of data set folders (``python -m evaluation.spider_data --out`` writes one per database).
Each schema gets its own :class:`router.policy.RouterPolicy` over the one shared network; these
helpers find the folders and pool what the per-schema policies measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from core.errors import ConfigError, DataError
from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from rewards.router import RewardConfig
from router.calibration import fit_temperature
from router.evaluate import path_metrics


def question_logs(log: Path | None, folders: Sequence[Path], option: str = "--unlabelled") -> list[Path | None]:
    """The question log of each data set folder: ``log`` itself for one data set; for several,
    ``log/<data set folder name>.jsonl`` (None for a data set without one). ``option`` is
    the command-line option that gave ``log``, named in errors (``router.train_ppo
    --unlabelled``, ``router.train_sft --pseudo-labels``).

    Raises:
        ConfigError: one data set and ``log`` is a folder; several data sets and
            ``log`` is not a folder, holds no log named after any of them, or holds a
            ``<name>.jsonl`` that is not a regular file.
    """
    if log is None:
        return [None] * len(folders)
    if len(folders) == 1:
        if Path(log).is_dir():
            raise ConfigError(
                f"{log} is a folder, but --data is one data set: give its question log file "
                f"(a folder of <data set folder name>.jsonl logs goes with a --data folder of several data sets)",
                where=option,
            )
        return [Path(log)]
    d = Path(log)
    if not d.is_dir():
        raise ConfigError(
            f"with {len(folders)} data sets {option} is a folder holding <data set folder name>.jsonl "
            f"(e.g. {folders[0].name}.jsonl), got {d}",
            where=option,
        )
    logs = [d / f"{f.name}.jsonl" for f in folders]
    if odd := [p for p in logs if p.exists() and not p.is_file()]:
        raise ConfigError(f"{odd[0]} is not a regular file (a question log is a JSONL file)", where=option)
    if not any(p.is_file() for p in logs):
        raise ConfigError(f"{d} holds no question log named after a data set (e.g. {folders[0].name}.jsonl)", where=option)
    return [p if p.is_file() else None for p in logs]


def fit_temperature_pooled(log_probs: Sequence[torch.Tensor], gold: Sequence[torch.Tensor]) -> float:
    """One temperature for several schemas' validation questions: each ``(n_i, N_i)`` log-prob
    matrix is scored against its ``(n_i,)`` gold paths; :func:`router.calibration.fit_temperature`
    on their concatenation (padded with ``-inf`` to the widest ``N``)."""
    width = max((lp.shape[1] for lp in log_probs), default=1)
    rows = [torch.nn.functional.pad(lp, (0, width - lp.shape[1]), value=float("-inf")) for lp in log_probs]
    return fit_temperature(torch.cat(rows), torch.cat(list(gold))) if rows else 1.0


def data_set_folders(data: str | Path) -> list[Path]:
    """The data set folders behind ``--data``: itself, or the data set folders directly under it.

    ``data`` is a data set folder when it holds ``schema.json`` (or does not exist: then
    :func:`~core.dataset.load_dataset` names the problem); otherwise every sub-folder
    holding a ``schema.json``, sorted by name (``python -m evaluation.spider_data --out`` writes one
    per database).

    Raises:
        DataError: ``data`` is a folder with neither ``schema.json`` nor data set folders under it,
            or a ``schema.json`` under it is not a regular file.
    """
    d = Path(data)
    if not d.is_dir() or (d / "schema.json").is_file():
        return [d]
    subs = sorted(p for p in d.iterdir() if p.is_dir() and (p / "schema.json").exists())
    if odd := [p / "schema.json" for p in subs if not (p / "schema.json").is_file()]:
        raise DataError("not a regular file (a data set's schema.json is a JSON file)", where=odd[0])
    if not subs:
        raise DataError(
            "not a data set folder (no schema.json) and no data set folders under it; "
            "build one with python -m data_pipeline.build",
            where=d,
        )
    return subs


def require_distinct_names(names: Sequence[str], folders: Sequence[Path], where: str | Path) -> None:
    """Refuse two data sets with the same schema name: one router tells its schemas apart by name.

    Raises:
        DataError: naming the schema and both data set folders.
    """
    for i, name in enumerate(names):
        if name in names[:i]:
            first = folders[names.index(name)]
            raise DataError(
                f"data sets {first.name} and {folders[i].name} have the same schema name {name!r}; one router needs distinct names",
                where=where,
            )


def pooled_metrics(
    per_part: Sequence[tuple[list[JoinPath], list[Sample], SchemaGraph]], reward: RewardConfig
) -> dict[str, Any]:
    """:func:`router.evaluate.path_metrics` of several schemas' predictions pooled, plus ``by_schema``.

    ``mean_reward`` and ``legal_rate`` are the sample-weighted means of the schemas' own (each
    scored on its graph); ``by_schema`` maps each schema name to its own metrics.
    """
    preds = [p for ps, _, _ in per_part for p in ps]
    samples = [s for _, ss, _ in per_part for s in ss]
    out = path_metrics(preds, samples, None, reward)
    by = {g.schema.name: path_metrics(ps, ss, g, reward) for ps, ss, g in per_part}
    n = sum(m["n"] for m in by.values())
    for key in ("mean_reward", "legal_rate"):
        if n:
            out[key] = sum(m[key] * m["n"] for m in by.values() if key in m) / n
    out["by_schema"] = by
    return out
