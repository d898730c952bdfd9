"""The generator's GRPO reward: execution correctness plus four proxy rewards, weighted.

=========== ======= ======================================================================
component   weight  what it pays (one module each)
=========== ======= ======================================================================
execution   3.0     soft row F1 against the gold result (``rewards/sql_execution.py``)
format      0.1     the exact ``<reasoning>...</reasoning><answer>SQL</answer>`` format
                    (``rewards/sql_format.py``)
syntax      0.2     the SQL parses as one read-only query (``rewards/sql_syntax.py``)
schema      0.3     Jaccard of table/column names against the gold SQL (``rewards/sql_schema.py``)
ngram       0.2     bigram F1 against the gold SQL (``rewards/sql_ngram.py``)
=========== ======= ======================================================================

Weights are seed 000's (SPEC section 6). Each component is in ``[0, 1]`` (None when it does not
apply, e.g. no gold SQL); ``total = sum(weight * component)`` with None counted as 0, so the
total lies in ``[0, 3.8]`` with the defaults. Seed 000's worked example, a query on the wrong
tables in the wrong format::

    total = 3.0 x 0 + 0.1 x 0 + 0.2 x 1 + 0.3 x 0.2 + 0.2 x 0.15 = 0.29

>>> round(weighted_total({"execution": 0.0, "format": 0.0, "syntax": 1.0, "schema": 0.2, "ngram": 0.15}), 10)
0.29

The execution weight must exceed the proxy weights together (checked in
:class:`SQLRewardConfig`): seed 000's proxies rose all night while execution stayed 0, and a
policy must never be able to earn more by looking like the gold query than by being right.

**A refused statement totals 0.** An answer whose SQL the executor's gate refuses as unsafe (a
write, a schema change, ``ATTACH``/``PRAGMA``, several statements, a denied function) or as
beyond its limits (longer than 20,000 characters, nested too deeply) scores 0 in every
component, format included (:func:`rewards.answer.refused_outright`): before, a refused
``INSERT`` or ``DROP`` totalled 0.25 and a refused ``DELETE`` 0.1, so writing paid more than
writing nothing. Text that is merely not SQL keeps its format and partial-name credit.

**Never an exception from a completion.** Whatever the text (deep nesting, megabytes, any
unicode), every component is a finite number in ``[0, 1]`` or None and the total is in
``[0, max_total]``; only a wrong database or a failing gold query raises.

**Parallel scoring.** ``config.make_scorer()`` gives a scorer with ``score_workers`` worker
processes (:mod:`rewards.pool`); :func:`sql_reward_components` then scores a batch's completions
in parallel, every one under a hard deadline of ``timeout_s + 0.3`` seconds and a memory cap,
so one slow query no longer holds up the batch. ``score_workers = 0`` scores in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from data_pipeline.backends.sqlite import MAX_RESULT_BYTES, SQLiteExecutor
from core.errors import ConfigError
from rewards.answer import ParsedAnswer, completion_text, parse_answer, refused_outright
from rewards.pool import DEFAULT_MEMORY_MB, Outcome
from rewards.sql_execution import (
    ExecutionScore,
    ExecutionScorer,
    Limits,
    execution_reward,
    gold_timed_out_here,
    local_scorer,
    log_worker_score,
)
from rewards.sql_execution import logger as _exec_logger
from rewards.sql_format import format_reward
from rewards.sql_ngram import counts_f1, ngrams, sql_tokens
from rewards.sql_ngram import ngram_reward
from rewards.sql_schema import jaccard, schema_match_reward, schema_tokens
from rewards.sql_syntax import sql_parses, syntax_reward

COMPONENTS = ("execution", "format", "syntax", "schema", "ngram")
"""Component names, in the order they are logged (``rewards/<name>/mean``)."""


@dataclass(frozen=True)
class SQLRewardConfig:
    """Weights and execution limits of the generator reward (defaults: seed 000, SPEC section 6)."""

    execution_weight: float = 3.0
    """Weight of the soft row F1 against the gold result; must exceed the four proxy weights together."""
    format_weight: float = 0.1
    """Weight of the exact <reasoning>...</reasoning><answer>...</answer> format."""
    syntax_weight: float = 0.2
    """Weight of "the SQL parses as one read-only query" (sqlglot, SQLite dialect)."""
    schema_weight: float = 0.3
    """Weight of the Jaccard of table/column names against the gold SQL."""
    ngram_weight: float = 0.2
    """Weight of the token n-gram F1 against the gold SQL."""
    ngram_n: int = 2
    """n of the n-gram reward (2: bigrams)."""
    require_reasoning: bool = True
    """The format needs a <reasoning> block before <answer>; the generator commands set it to False when their prompts ask for SQL only (--no-with-reasoning)."""
    timeout_s: float = 5.0
    """Seconds each query may run before SQLite aborts it; a timed-out query scores 0."""
    max_rows: int = 10_000
    """Rows kept per result; a predicted query returning more scores 0."""
    max_bytes: int = MAX_RESULT_BYTES
    """Bytes kept per result (text and blobs, as marshal measures them); a predicted query returning more scores 0."""
    score_workers: int = 2
    """Worker processes that score a batch in parallel, each query under a hard deadline (timeout + 0.3 s); 0 scores in this process."""
    worker_memory_mb: int = DEFAULT_MEMORY_MB
    """Memory cap of each scoring worker process, MiB."""

    def __post_init__(self) -> None:
        for name in ("format_weight", "syntax_weight", "schema_weight", "ngram_weight"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", where=name)
        proxies = self.format_weight + self.syntax_weight + self.schema_weight + self.ngram_weight
        if self.execution_weight <= proxies:
            raise ConfigError(
                f"execution_weight ({self.execution_weight}) must exceed the proxy weights together "
                f"({proxies:g} = format {self.format_weight} + syntax {self.syntax_weight} + schema "
                f"{self.schema_weight} + ngram {self.ngram_weight}): execution is the only ground truth "
                "(seed 000, pitfall 1)",
                where="execution_weight",
            )
        if self.ngram_n < 1:
            raise ConfigError(f"must be >= 1, got {self.ngram_n}", where="ngram_n")
        if self.timeout_s <= 0:
            raise ConfigError(f"must be positive, got {self.timeout_s}", where="timeout_s")
        if self.max_rows < 1:
            raise ConfigError(f"must be >= 1, got {self.max_rows}", where="max_rows")
        if self.max_bytes < 1:
            raise ConfigError(f"must be >= 1, got {self.max_bytes}", where="max_bytes")
        if self.score_workers < 0:
            raise ConfigError(f"must be >= 0, got {self.score_workers}", where="score_workers")
        if self.worker_memory_mb < 128:
            raise ConfigError(f"must be >= 128, got {self.worker_memory_mb}", where="worker_memory_mb")

    @property
    def weights(self) -> dict[str, float]:
        """``{component: weight}`` in :data:`COMPONENTS` order."""
        return {name: float(getattr(self, f"{name}_weight")) for name in COMPONENTS}

    @property
    def max_total(self) -> float:
        """The largest possible total (every component 1.0): 3.8 with the defaults."""
        return sum(self.weights.values())

    def make_scorer(self, executor: SQLiteExecutor | None = None, *, workers: int | None = None) -> ExecutionScorer:
        """An :class:`ExecutionScorer` with this config's limits and ``score_workers`` workers
        (``workers`` overrides); create one per run, reuse it, and close it at the end."""
        return ExecutionScorer(executor, timeout_s=self.timeout_s, max_rows=self.max_rows, max_bytes=self.max_bytes,
                               workers=self.score_workers if workers is None else workers,
                               worker_memory_mb=self.worker_memory_mb)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def weighted_total(components: Mapping[str, float | None], config: SQLRewardConfig | None = None) -> float:
    """``sum(weight * value)`` over :data:`COMPONENTS`; a None or missing value counts as 0.

    Keys other than the component names (``total``, ``reason``...) are ignored.
    """
    weights = (config or SQLRewardConfig()).weights
    return sum(w * float(components.get(name) or 0.0) for name, w in weights.items())


def sql_reward_components(
    completions: Sequence[Any],
    gold_sql: Sequence[str | None],
    db_path: str | Path | Sequence[str | Path],
    config: SQLRewardConfig | None = None,
    executor: ExecutionScorer | SQLiteExecutor | None = None,
) -> list[dict[str, Any]]:
    """Every reward component of every completion, its weighted total and the reasons.

    Args:
        completions: generated texts, or TRL-style message lists (the last message is read).
        gold_sql: one gold query per completion; None where there is none (execution, schema
            and ngram are then None).
        db_path: the SQLite file the gold SQL runs on, one for all or one per completion.
        config: weights and limits; ``SQLRewardConfig()`` when None.
        executor: an :class:`ExecutionScorer` to reuse across calls (keeps gold results cached
            and its worker processes running: create one with ``config.make_scorer()`` per run
            and close it at the end); a bare :class:`SQLiteExecutor` is wrapped for this call
            only (no gold cache across calls); None makes a new one. A wrapped or new scorer
            scores in this process: worker processes are never started for a single call.

    Returns:
        One dict per completion, shape ``(batch,)``, with keys ``execution``, ``format``,
        ``syntax``, ``schema``, ``ngram`` (raw scores in ``[0, 1]`` or None), ``total`` (float,
        :func:`weighted_total`), ``exact`` (1.0 when the result matches exactly under Spider's
        rule, else 0.0), ``reason`` (the execution outcome, e.g. ``"match"``,
        ``"rejected: expected one statement, got 2"``, ``"timed out after 5 s"``) and
        ``answer_reason`` (what the parser found: ``"ok"``, ``"answer tag not closed"``...).
        Never raises for any completion text (module docstring).

    Raises:
        ValueError: lengths differ.
        DataError: a gold query fails on the database (wrong ``db_path``?).
        SchemaError: the database file is missing or not SQLite.
    """
    cfg = config or SQLRewardConfig()
    n = len(completions)
    if n != len(gold_sql):
        raise ValueError(f"{n} completions but {len(gold_sql)} gold queries")
    dbs = _per_item(db_path, n, "db_path")
    own = executor is None  # a scorer made here is closed here; a caller's executor stays open
    scorer = executor if isinstance(executor, ExecutionScorer) else cfg.make_scorer(executor, workers=0)
    texts = [completion_text(c) for c in completions]
    try:
        if scorer.workers < 1:
            return [completion_components(t, g, db, cfg, scorer) for t, g, db in zip(texts, gold_sql, dbs, strict=True)]
        out: list[dict[str, Any] | None] = [None] * n
        sent = [i for i in range(n) if gold_sql[i] is not None]
        for i in range(n):
            if gold_sql[i] is None:
                out[i] = completion_components(texts[i], None, dbs[i], cfg, scorer)
        outcomes = scorer.map_in_workers(_components_job, [(cfg, texts[i], gold_sql[i], dbs[i]) for i in sent],
                                         [(dbs[i], gold_sql[i]) for i in sent])  # fmt: skip
        for i, o in zip(sent, outcomes, strict=True):
            if o.ok:
                out[i] = o.value
                if o.value["execution"] == 0.0:
                    log_worker_score(ExecutionScore(0.0, False, o.value["reason"], o.value.pop("_pred", None)),
                                     parse_answer(texts[i]).sql)  # fmt: skip
            else:
                out[i] = _components_after(o, texts[i], gold_sql[i], cfg, scorer)
            out[i].pop("_pred", None)
        return [c for c in out if c is not None]
    finally:
        if own:
            scorer.close()


def _per_item(value: str | Path | Sequence[str | Path], n: int, name: str) -> list[str | Path]:
    if isinstance(value, str | Path):
        return [value] * n
    items = list(value)
    if len(items) != n:
        raise ValueError(f"{n} completions but {len(items)} values of {name}")
    return items


def completion_components(text: str, gold: str | None, db: str | Path, config: SQLRewardConfig,
                          scorer: ExecutionScorer) -> dict[str, Any]:  # fmt: skip
    """:func:`sql_reward_components` of one completion's text, scored in this process.

    Raises:
        DataError, SchemaError: the gold query fails on ``db`` / ``db`` is not a SQLite file.
    """
    parsed = parse_answer(text, require_reasoning=config.require_reasoning)
    ex = scorer.score(db, parsed.sql, gold)
    return components_of(parsed, gold, ex, config)


def _components_job(limits: Limits, config: SQLRewardConfig, text: str, gold: str, db: str | Path) -> dict[str, Any]:
    """Worker: :func:`completion_components` on this worker's scorer (its connections and gold
    cache), with the predicted query's outcome, rows left out, under ``"_pred"`` for the parent's log."""
    parsed = parse_answer(text, require_reasoning=config.require_reasoning)
    ex = gold_timed_out_here(limits, db, gold) or local_scorer(limits).score(db, parsed.sql, gold)
    comp = components_of(parsed, gold, ex, config)
    if comp["execution"] == 0.0 and ex.pred is not None:
        comp["_pred"] = replace(ex.pred, rows=None, columns=None)
    return comp


def _components_after(o: Outcome, text: str, gold: str | None, config: SQLRewardConfig,
                      scorer: ExecutionScorer) -> dict[str, Any]:  # fmt: skip
    """Components of a completion whose worker was stopped (or ran out of memory), or whose gold timed out."""
    parsed = parse_answer(text, require_reasoning=config.require_reasoning)
    return components_of(parsed, gold, scorer.outcome_score(o, parsed.sql), config)


def components_of(parsed: ParsedAnswer, gold: str | None, ex: ExecutionScore, config: SQLRewardConfig) -> dict[str, Any]:
    """The component dict of one parsed completion given its execution score (pure; never raises).

    A completion whose SQL is :func:`~rewards.answer.refused_outright` scores 0 in every
    component that applies (module docstring); any RecursionError left in a parser makes the
    completion score the same way, with reason ``"answer nested too deeply to read"``.
    """
    sql = parsed.sql
    refusal = refused_outright(sql)
    try:
        schema: float | None = None
        ngram: float | None = None
        if gold is not None:
            schema = 0.0 if sql is None or refusal else jaccard(schema_tokens(sql), schema_tokens(gold))
            ngram = 0.0 if sql is None or refusal else counts_f1(
                ngrams(sql_tokens(sql), config.ngram_n), ngrams(sql_tokens(gold), config.ngram_n))
        syntax = 1.0 if sql_parses(sql) else 0.0
    except RecursionError:
        refusal = "answer nested too deeply to read"
        schema = ngram = None if gold is None else 0.0
        syntax = 0.0
    reason = ex.reason
    if sql is None and ex.f1 == 0.0:
        reason = f"no SQL in the completion ({parsed.reason})"
        _exec_logger.debug("predicted SQL scored 0 (%s)", reason)
    execution = ex.f1
    if refusal is not None:
        execution = None if ex.f1 is None else 0.0
        if not reason.startswith("rejected"):
            reason = f"rejected: {refusal}"
    comp: dict[str, Any] = {
        "execution": execution,
        "format": 1.0 if parsed.well_formed and refusal is None else 0.0,
        "syntax": 0.0 if refusal is not None else syntax,
        "schema": schema,
        "ngram": ngram,
    }
    comp["total"] = weighted_total(comp, config)
    comp["exact"] = 1.0 if ex.exact and refusal is None else 0.0
    comp["reason"] = reason
    comp["answer_reason"] = parsed.reason
    return comp


def sql_rewards(
    completions: Sequence[Any],
    gold_sql: Sequence[str | None],
    db_path: str | Path | Sequence[str | Path],
    config: SQLRewardConfig | None = None,
    executor: ExecutionScorer | SQLiteExecutor | None = None,
) -> list[float]:
    """Only the totals of :func:`sql_reward_components`, shape ``(batch,)``."""
    return [c["total"] for c in sql_reward_components(completions, gold_sql, db_path, config, executor)]


RewardFunc = Callable[..., list[float | None]]


def reward_functions(
    config: SQLRewardConfig | None = None, scorer: ExecutionScorer | None = None
) -> tuple[list[RewardFunc], list[float]]:
    """The five components as separate TRL-style reward functions, and their weights.

    For TRL's ``GRPOTrainer`` (the reference the benchmarks compare against)::

        funcs, weights = reward_functions(cfg, cfg.make_scorer())
        GRPOTrainer(..., reward_funcs=funcs, args=GRPOConfig(..., reward_weights=weights))

    The data set needs the columns ``gold_sql`` and ``db_path``. Each function is named after
    its component (``execution``, ``format``, ``syntax``, ``schema``, ``ngram``), so TRL logs
    ``rewards/<name>/mean`` as we do. The execution function reuses ``scorer`` (made from
    ``config`` when None), so gold results stay cached across steps.

    Returns:
        ``(functions, weights)`` in :data:`COMPONENTS` order.
    """
    cfg = config or SQLRewardConfig()
    shared = scorer or cfg.make_scorer()

    def execution(completions: Sequence[Any], gold_sql: Sequence[str | None], db_path: Any,
                  **kwargs: Any) -> list[float | None]:  # fmt: skip
        return execution_reward(completions, gold_sql, db_path, scorer=shared)

    def format(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:  # noqa: A001 (TRL logs the name)
        return list(format_reward(completions, require_reasoning=cfg.require_reasoning))

    def syntax(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return list(syntax_reward(completions))

    def schema(completions: Sequence[Any], gold_sql: Sequence[str | None], **kwargs: Any) -> list[float | None]:
        return schema_match_reward(completions, gold_sql)

    def ngram(completions: Sequence[Any], gold_sql: Sequence[str | None], **kwargs: Any) -> list[float | None]:
        return ngram_reward(completions, gold_sql, n=cfg.ngram_n)

    funcs: list[RewardFunc] = [execution, format, syntax, schema, ngram]
    return funcs, [cfg.weights[f.__name__] for f in funcs]
