"""The smoke test GRPO runs before it trains (seed 000, pitfall 1).

Seed 000 trained all night with a wrong database path: the execution reward was 0 on every
completion while the proxy rewards (schema match, n-grams) rose, so the model learned to look
like SQL without ever running any. Here a few random training samples are generated for with
the very model, prompt format, sampling settings, reward function and database of the run, and
training refuses to start unless at least one completion earns a non-zero execution reward.

The same check catches a base model whose prompt does not show the answer format (SPEC
section 6: with a plain instruction SmolLM2-135M never wrote the ``<answer>`` tags, so every
reward was 0 and ``frac_reward_zero_std`` was 1 at every step).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from core.errors import DataError, Route2SQLError, SchemaError
from generator.sampling import sample_group
from rewards.sql import SQLRewardConfig, sql_reward_components
from rewards.sql_execution import ExecutionScorer


@dataclass(frozen=True)
class SmokeReport:
    """What the smoke test saw.

    Attributes:
        db_path: the database the SQL ran on.
        n_samples: prompts tried.
        n_completions: completions scored (``n_samples x generations``).
        execution_nonzero: completions whose execution reward was above 0.
        format_nonzero: completions in the exact answer format.
        syntax_nonzero: completions whose SQL parses.
        proxy_nonzero: completions with any non-zero proxy reward (format, syntax, schema, ngram).
        reasons: how many completions ended with each execution outcome (``"match"``,
            ``"no SQL in the completion (...)"``, SQLite's error...), most frequent first.
        first_completion: the first completion, cut to 300 characters, to show what was written.
        seconds: wall time.
    """

    db_path: str
    n_samples: int
    n_completions: int
    execution_nonzero: int
    format_nonzero: int
    syntax_nonzero: int
    proxy_nonzero: int
    reasons: dict[str, int] = field(default_factory=dict)
    first_completion: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when at least one completion earned execution reward."""
        return self.execution_nonzero > 0

    def describe(self) -> str:
        """One line: counts of each signal and the commonest execution outcomes."""
        top = ", ".join(f"{k!r} x{v}" for k, v in list(self.reasons.items())[:3])
        return (
            f"{self.execution_nonzero}/{self.n_completions} completions with non-zero execution reward "
            f"({self.n_samples} samples); format {self.format_nonzero}, syntax {self.syntax_nonzero}, any proxy "
            f"{self.proxy_nonzero}; execution outcomes: {top}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"ok": self.ok}


def run_smoke_test(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    gold_sql: Sequence[str],
    db_path: str | Path,
    reward: SQLRewardConfig,
    *,
    generations: int = 2,
    max_new_tokens: int = 128,
    temperature: float = 0.9,
    top_p: float = 1.0,
    scorer: ExecutionScorer | None = None,
) -> SmokeReport:
    """Generate for each prompt and score every completion exactly as training will.

    Args:
        model, tokenizer: the policy about to be trained.
        prompts: token ids of the smoke samples' prompts (built as training builds them).
        gold_sql: their gold queries.
        db_path: the database of the run.
        reward: the run's reward config.
        generations: completions per prompt.
        max_new_tokens, temperature, top_p: the run's sampling settings.
        scorer: the run's execution scorer (reused for its gold cache and worker processes); one
            is made from ``reward`` and closed at the end when None.

    Returns:
        A :class:`SmokeReport`; it does not raise when no reward was seen (see
        :func:`require_execution_signal`).

    Raises:
        Route2SQLError: naming ``db_path`` when the database is missing or not SQLite, or when
            the gold SQL itself fails on it (the wrong database); checked before generating.
    """
    t0 = time.perf_counter()
    if scorer is None:  # a scorer of our own: its worker processes stop with the smoke test
        with reward.make_scorer() as own:
            return run_smoke_test(model, tokenizer, prompts, gold_sql, db_path, reward, generations=generations,
                                  max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, scorer=own)  # fmt: skip
    for gold in gold_sql:  # the database first: a wrong path fails here, before any generation
        try:
            scorer.gold_result(db_path, gold)
        except (SchemaError, DataError) as exc:
            raise Route2SQLError(f"smoke test stopped the run before training: {exc.message}", where=str(db_path)) from exc
    n_exec = n_fmt = n_syn = n_proxy = n = 0
    reasons: dict[str, int] = {}
    first = ""
    for ids, gold in zip(prompts, gold_sql, strict=True):
        group = sample_group(model, tokenizer, ids, generations, max_new_tokens=max_new_tokens,
                             temperature=temperature, top_p=top_p)  # fmt: skip
        try:
            comps = sql_reward_components(group.texts, [gold] * generations, db_path, reward, scorer)
        except (SchemaError, DataError) as exc:
            raise Route2SQLError(
                f"smoke test stopped the run before training: {exc.message}", where=str(db_path)
            ) from exc
        if not first:
            first = group.texts[0][:300]
        for c in comps:
            n += 1
            n_exec += (c["execution"] or 0.0) > 0
            n_fmt += c["format"] > 0
            n_syn += c["syntax"] > 0
            n_proxy += any((c[k] or 0.0) > 0 for k in ("format", "syntax", "schema", "ngram"))
            reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1
    reasons = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return SmokeReport(str(db_path), len(prompts), n, n_exec, n_fmt, n_syn, n_proxy, reasons, first,
                       time.perf_counter() - t0)  # fmt: skip


def require_execution_signal(report: SmokeReport) -> None:
    """Refuse to train on a run whose execution reward is dead.

    Raises:
        Route2SQLError: naming the database and what was seen, when no completion of the smoke
            test earned execution reward.

    >>> require_execution_signal(SmokeReport("nw.sqlite", 10, 20, 0, 0, 0, 0, {"no SQL in the completion": 20}))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    core.errors.Route2SQLError: nw.sqlite: smoke test: 0/20 completions with non-zero execution reward ...
    """
    if report.ok:
        return
    hint = (
        "the model never wrote an <answer> the database could run: show the format with few-shot examples "
        "(--k-examples >= 1) or warm-start with generator.train_sft (--init)"
        if report.format_nonzero == 0
        else "the SQL runs but never returns the gold rows: is --db the database the data set was built from?"
    )
    raise Route2SQLError(
        f"smoke test: {report.describe()}; first completion: {report.first_completion[:160]!r}. "
        f"Refusing to train on proxy rewards only (seed 000, pitfall 1): {hint}, or pass --skip-smoke-test",
        where=report.db_path,
    )
