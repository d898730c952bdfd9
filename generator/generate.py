"""``python -m generator.generate``: write the SQL for every question of a data split and score it.

The pieces it runs live where their job is: prompts and their tokens in :mod:`generator.prompt`,
trained folders in :mod:`generator.folders`, decoding in :mod:`generator.sampling`, per-token
log-probs in :mod:`generator.logprobs` and :mod:`generator.grpo_logprobs`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from core.cli import parse, run_main
from core.dataset import load_dataset
from core.errors import ConfigError
from core.graph import JoinPath
from core.io import write_json, write_jsonl
from generator.folders import load_policy, prompt_settings_for
from generator.prompt import prompt_token_ids, route_paths, sample_messages
from generator.retrieval import ExampleRetriever
from generator.sampling import generate_answers


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m generator.generate``: answer a split, score each answer, write JSONL + summary.

    Returns:
        The summary dict (also written next to ``--out`` as ``<stem>.summary.json``).
    """
    from generator.config import GenerateConfig
    from rewards.sql import sql_reward_components

    cfg = parse(GenerateConfig, argv, description=__doc__)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    ds = load_dataset(cfg.data, db_path=cfg.db, sql_user="generator.generate")
    samples = ds.split(cfg.split)
    if cfg.limit is not None and cfg.limit < len(samples):
        keep = sorted(random.Random(cfg.seed).sample(range(len(samples)), cfg.limit))
        samples = [samples[i] for i in keep]
    if not samples:
        raise ConfigError(f"split {cfg.split!r} of {cfg.data} has no samples", where="--split")
    model, tokenizer, _ = load_policy(cfg.model, cfg.generator)
    prompt = prompt_settings_for(cfg.generator, cfg.prompt)  # as --generator was trained, unless told otherwise
    reward = cfg.reward if prompt.with_reasoning else replace(cfg.reward, require_reasoning=False)
    retriever = ExampleRetriever(ds.split("train")) if prompt.k_examples > 0 else None
    paths: list[JoinPath | None] = [None] * len(samples) if cfg.no_path else list(route_paths(samples, cfg.router, ds))
    prompts = []
    for s, p in zip(samples, paths, strict=True):
        ids = prompt_token_ids(tokenizer, sample_messages(s, ds, retriever, path=p, prompt=prompt))
        prompts.append(ids[-cfg.max_prompt_tokens :])
    t0 = time.perf_counter()
    answers = generate_answers(model, tokenizer, prompts, max_new_tokens=cfg.max_new_tokens,
                               batch_size=cfg.batch_size, temperature=cfg.temperature, progress=cfg.progress)
    gen_s = time.perf_counter() - t0
    with reward.make_scorer() as scorer:  # worker processes: every answer under a hard deadline
        comps = sql_reward_components(answers, [s.sql for s in samples], ds.db_path, reward, scorer)
    records = []
    for s, p, a, c in zip(samples, paths, answers, comps, strict=True):
        records.append({"id": s.id, "question": s.question, "path": None if p is None else str(p),
                        "gold_sql": s.sql, "completion": a, **c})  # fmt: skip
    n = len(records)
    summary = {
        "split": cfg.split,
        "n": n,
        "generator": str(cfg.generator) if cfg.generator else cfg.model.model,
        "path_source": "none" if cfg.no_path else ("router" if cfg.router else "gold"),
        **prompt.to_dict(),
        "max_new_tokens": cfg.max_new_tokens,
        "truncated_rate": sum(1 for r in records if "</answer>" not in r["completion"]) / n,
        "execution_accuracy": sum(r["exact"] for r in records) / n,
        "execution_f1": sum(r["execution"] or 0.0 for r in records) / n,
        "execution_nonzero": sum(1 for r in records if (r["execution"] or 0.0) > 0) / n,
        "format_rate": sum(r["format"] for r in records) / n,
        "syntax_rate": sum(r["syntax"] for r in records) / n,
        "mean_total_reward": sum(r["total"] for r in records) / n,
        "generation_seconds": round(gen_s, 1),
    }
    for key in ("easy", "medium", "hard"):
        sub = [r for r, s in zip(records, samples, strict=True) if s.difficulty == key]
        if sub:
            summary[f"execution_accuracy/{key}"] = sum(r["exact"] for r in sub) / len(sub)
    out = Path(cfg.out)
    write_jsonl(out, records)
    write_json(out.with_name(out.stem + ".summary.json"), summary)
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    run_main(main)
