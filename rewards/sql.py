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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from data_pipeline.backends.sqlite import SQLiteExecutor
from data_pipeline.errors import ConfigError
from generator.parsing import completion_text, parse_answer
from rewards.sql_execution import ExecutionScorer, execution_reward, execution_scores
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
    """The format needs a <reasoning> block before <answer> (False for prompts built with with_reasoning=False)."""
    timeout_s: float = 5.0
    """Seconds each query may run before SQLite aborts it; a timed-out query scores 0."""
    max_rows: int = 10_000
    """Rows kept per result; a predicted query returning more scores 0."""

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

    @property
    def weights(self) -> dict[str, float]:
        """``{component: weight}`` in :data:`COMPONENTS` order."""
        return {name: float(getattr(self, f"{name}_weight")) for name in COMPONENTS}

    @property
    def max_total(self) -> float:
        """The largest possible total (every component 1.0): 3.8 with the defaults."""
        return sum(self.weights.values())

    def make_scorer(self, executor: SQLiteExecutor | None = None) -> ExecutionScorer:
        """An :class:`ExecutionScorer` with this config's limits (create one per run and reuse it)."""
        return ExecutionScorer(executor, timeout_s=self.timeout_s, max_rows=self.max_rows)

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
        executor: an :class:`ExecutionScorer` to reuse across calls (keeps gold results cached:
            create one with ``config.make_scorer()`` per run); a bare :class:`SQLiteExecutor`
            is wrapped for this call only (no gold cache across calls); None makes a new one.

    Returns:
        One dict per completion, shape ``(batch,)``, with keys ``execution``, ``format``,
        ``syntax``, ``schema``, ``ngram`` (raw scores in ``[0, 1]`` or None), ``total`` (float,
        :func:`weighted_total`), ``exact`` (1.0 when the result matches exactly under Spider's
        rule, else 0.0), ``reason`` (the execution outcome, e.g. ``"match"``,
        ``"rejected: expected one statement, got 2"``, ``"timed out after 5 s"``) and
        ``answer_reason`` (what the parser found: ``"ok"``, ``"answer tag not closed"``...).

    Raises:
        ValueError: lengths differ.
        DataError: a gold query fails on the database (wrong ``db_path``?).
        SchemaError: the database file is missing or not SQLite.
    """
    cfg = config or SQLRewardConfig()
    if isinstance(executor, ExecutionScorer):
        scorer = executor
    else:
        scorer = cfg.make_scorer(executor)
    executions = execution_scores(completions, gold_sql, db_path, scorer=scorer)
    # a GRPO group shares one gold query: read its names and n-grams once per call
    gold_names = {g: schema_tokens(g) for g in set(gold_sql) if g is not None}
    gold_grams = {g: ngrams(sql_tokens(g), cfg.ngram_n) for g in gold_names}
    out: list[dict[str, Any]] = []
    for c, gold, ex in zip(completions, gold_sql, executions, strict=True):
        parsed = parse_answer(completion_text(c), require_reasoning=cfg.require_reasoning)
        sql = parsed.sql
        schema: float | None = None
        ngram: float | None = None
        if gold is not None:
            schema = 0.0 if sql is None else jaccard(schema_tokens(sql), gold_names[gold])
            ngram = 0.0 if sql is None else counts_f1(ngrams(sql_tokens(sql), cfg.ngram_n), gold_grams[gold])
        comp: dict[str, Any] = {
            "execution": ex.f1,
            "format": 1.0 if parsed.well_formed else 0.0,
            "syntax": 1.0 if sql_parses(sql) else 0.0,
            "schema": schema,
            "ngram": ngram,
        }
        comp["total"] = weighted_total(comp, cfg)
        comp["exact"] = 1.0 if ex.exact else 0.0
        comp["reason"] = ex.reason
        comp["answer_reason"] = parsed.reason
        out.append(comp)
    return out


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
