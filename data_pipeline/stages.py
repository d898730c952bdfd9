"""The question-generation stages, applied in order like sqlglot's optimizer rules.

Each stage takes the batch of samples so far and a :class:`StageContext` and returns a new
batch (the contract is :class:`Stage`); :data:`STAGES` lists them in order:

1. :func:`seed_questions` — for every usable legal path, ``max(3, ceil(n / 2))`` seed questions,
   where ``n`` is the path's share of the budget (:func:`path_budgets`), from the templates
   (families in turn, languages in turn, phrasings drawn at random), worded with the sidecar's
   table/column names. Entity slots ``{E1}``/``{E2}`` stay open.
2. :func:`paraphrase` — more wordings of each seed (rule-based, or an LLM endpoint), up to
   ``n`` per path; a variant keeps its seed's template id and plan.
3. :func:`fill_entities` — a real value for ``{E1}`` from the anchor table (drawn among values
   that reach the target through the path, so the gold SQL returns rows) and for ``{E2}``; the
   gold SQL; execution of the backend's gold query (the SQL itself on SQLite, its aggregation
   pipeline on MongoDB) read-only (samples with no rows are dropped and counted);
   then about ``1 - real_fraction`` of each language's samples get a fuzzy surface instead (a
   partial surface always names one value of its column: :func:`~data_pipeline.entities.fuzz`).
4. :func:`grade_difficulty` — ``easy``/``medium``/``hard`` (rule in :func:`difficulty`).

Between stages, ``Sample.meta`` carries ``seed`` (the id of the seed question a variant comes
from), ``plan`` (:class:`~data_pipeline.gold.Plan` as a dict) and ``paraphrase`` (the rules
applied, None for a seed); on MongoDB also ``pipeline``, the gold aggregation (JSON text, see
:mod:`data_pipeline.backends.mongo_pipeline`) that ran on the server, whose SQL twin is ``sql``.
These stay in the written records.

Stages read the database only through ``ctx.backend`` (a
:class:`~data_pipeline.backends.registry.Backend`), so they run unchanged on SQLite and MongoDB.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from data_pipeline.backends.mongo_pipeline import Condition
from data_pipeline.entities import TableProfile, fuzz, fuzzable
from data_pipeline.gold import Plan, gold_sql
from core.graph import JoinPath, SchemaGraph
from data_pipeline.paraphrase import Paraphraser
from data_pipeline.relations import Verb, agent_verb, agent_verbs, is_event, is_person, short_nouns, table_synonyms
from core.samples import Entity, Sample
from core.schema import Schema, Table, humanize
from core.sqlite import quote_ident
from core.values import name_halves
from data_pipeline.templates import (
    AGG_WORDS,
    FAMILIES_BY_SCOPE,
    Template,
    UNFILTERED_FAMILIES_BY_SCOPE,
    bare_template,
    column_words,
    plural,
    table_words,
    templates_for,
    tidy,
)

if TYPE_CHECKING:
    from data_pipeline.backends.registry import Backend

MIN_SEEDS_PER_PATH = 3
"""Every usable path gets at least this many seed questions."""

ASK_WORD_SHARE = 0.35
"""Share of single-row lookups that ask for a price or a place when the table has one (so that
"How much does X cost?" and "Where is X?" are generated, not only "What is the name of X?")."""

FULL_NAME_SHARE = 0.5
"""Share of the natural-style questions naming a person by one half of a name split over two
columns (``FirstName``, ``LastName``; 名, 姓) that give the whole name instead, as people write
it ("Frank Harris", not "Harris"), when that half names one person (:func:`_full_name`)."""

MAX_SAMPLES_PER_PATH = 1000
"""Most questions one path may get, whatever its budget, and the most ``--samples-per-path`` may ask
for (more only repeats the templates and fills memory)."""

MAX_VALUE_CHARS = 48
"""Longest filter value a question names, in characters: nobody types a 110-character composer
list, and a question built around one can exceed a router's 64-token limit (``train_sft`` then stops)."""

MEASURE_SHARE = 0.7
"""Share of the aggregates over a join whose target has a measure column (:func:`measure_kind`)
that total it, so that "How many units has X bought?" is generated and not only averages of
whichever number comes first."""

DATE_SHARE = 0.4
"""Share of the aggregates whose target has a date column (:func:`date_columns`) that ask for its
earliest or latest date (``MIN``/``MAX``): "When was Ipoh Coffee last ordered?" is among the
commonest questions people ask of a table with dates, and the sums and averages never taught it.
Half of them take the table's own date (:func:`main_date`) when it has one, so that the question
can leave the date unnamed."""

BARE_SHARE = 0.7
"""Share of the list questions over a join whose phrasing can drop its request for the column
(:func:`~data_pipeline.templates.bare_template`) that do, and so ask for the target's rows without
naming a column ("Which customers ordered Chai?", "谁订购过 Chai？"), answered with the
target's name column (:func:`answer_columns`). People rarely say which column they want; before,
every generated list question ended with "Give the {column}", and a generator trained on them
answered "Which customers ..." with the customers' ids. 0.7 and not 1 so that a question that
does name the column is still seen with it."""

HELDOUT_WEIGHT = 0.5
"""Draw weight of a held-out phrasing relative to a training one: with 2 of 8 phrasings per group
held out, about 1 seed in 7 (and its paraphrases) goes to ``test_heldout``."""


@dataclass
class StageContext:
    """Everything a stage may read, plus counters it may add to.

    Attributes:
        schema, graph: the schema and its graph.
        db_name: schema name used in sample ids (``northwind``).
        backend: the database, read-only (:func:`~data_pipeline.backends.registry.load_backend`).
        paths: the legal paths questions are generated for (paths through empty tables removed).
        profiles: column roles of every non-empty table (:func:`~data_pipeline.entities.profile_table`).
        languages: ``("en", "zh")`` or a subset.
        samples_per_path: wanted samples per path after paraphrasing: exactly that with
            ``hop_balance`` 0, on average with 1 (each path's own number: :meth:`samples_for`).
        hop_balance: how far the budget moves from join counts with many paths to those with few
            (:func:`path_budgets`); 0 here gives every path ``samples_per_path`` (``BuildConfig``'s
            default is 1).
        real_fraction: share of samples whose entity is the exact database value.
        paraphraser: the paraphrase function (rule-based or LLM).
        seed: the random seed; each stage draws from its own generator (:meth:`rng`).
        timeout_s: limit for one gold query, seconds.
        unfiltered_share: share of each path's seed questions (and so of its paraphrases) written
            without a filter value (:data:`~data_pipeline.templates.UNFILTERED_FAMILIES_BY_SCOPE`).
        natural_share: share of the seed questions that can be phrased in a natural style
            (:data:`~data_pipeline.templates.NATURAL_STYLES`: the entity named by its value
            alone, relation verbs, question words) that are; 0 writes only the classic phrasings.
        seed_share: share of each path's budget written as seed questions (the rest paraphrases).
        copy_columns: ``(table, column)`` pairs whose values copy another table's column
            (Northwind's ``Orders.ShipName`` holds customer names): never the name a question
            gives a row of that table.
        counters: ``dropped/<reason>``, ``paraphrase/shortfall`` and similar counts.
    """

    schema: Schema
    graph: SchemaGraph
    db_name: str
    backend: Backend
    paths: tuple[JoinPath, ...]
    profiles: dict[str, TableProfile]
    languages: tuple[str, ...]
    samples_per_path: int
    real_fraction: float
    paraphraser: Paraphraser
    seed: int = 0
    timeout_s: float = 5.0
    unfiltered_share: float = 0.0
    natural_share: float = 0.0
    seed_share: float = 0.5
    copy_columns: frozenset[tuple[str, str]] = frozenset()
    hop_balance: float = 0.0
    counters: Counter[str] = field(default_factory=Counter)
    _values: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict, repr=False)
    _budgets: dict[JoinPath, int] = field(init=False, repr=False)

    def rng(self, stage: str) -> random.Random:
        """A generator for ``stage`` seeded from ``(seed, stage)``: stages do not disturb each other."""
        return random.Random(f"{self.seed}:{stage}")

    def __post_init__(self) -> None:
        # derived from the fields once, so dataclasses.replace(ctx, paths=...) recomputes it
        self._budgets = path_budgets(self.paths, self.samples_per_path, self.hop_balance)

    def samples_for(self, path: JoinPath) -> int:
        """Questions wanted for ``path`` after paraphrasing (its entry of :func:`path_budgets`)."""
        return self._budgets.get(path, self.samples_per_path)

    def seeds_for(self, path: JoinPath) -> int:
        """Seed questions for ``path``: ``seed_share`` of its budget (rounded up), at least
        :data:`MIN_SEEDS_PER_PATH`."""
        return max(MIN_SEEDS_PER_PATH, math.ceil(self.samples_for(path) * self.seed_share - 1e-9))


def path_budgets(paths: Sequence[JoinPath], samples_per_path: int, hop_balance: float) -> dict[JoinPath, int]:
    """Questions per path, so that long routes do not outnumber short ones by their count alone.

    A schema has more legal paths with two or three joins than tables (Northwind: 13 paths without
    a join, 24 / 30 / 28 with one / two / three), so the same number of questions per path makes a
    training set in which most questions need several joins (Northwind: 14% single-table, 61% with
    two or three joins), and a router that learns to prefer long routes; people mostly ask about one
    or two tables. A path with ``h`` joins, one of ``n_h`` such paths among ``P``
    paths that have ``H`` different join counts, gets

        ``round(samples_per_path * (P / (H * n_h)) ** hop_balance)``

    questions, between :data:`MIN_SEEDS_PER_PATH` and :data:`MAX_SAMPLES_PER_PATH`: with
    ``hop_balance`` 0 every path gets ``samples_per_path``; with 1 every join count gets the same
    share of the questions (``P * samples_per_path / H`` each, so the total stays about the same,
    plus what the minimum of 3 adds); above 1 rare join counts get more than an equal share.

    >>> from core.graph import JoinPath
    >>> ps = [JoinPath("A", (), "A"), JoinPath("B", (), "B"), JoinPath("A", (), "B"), JoinPath("B", (), "A"),
    ...       JoinPath("A", ("B",), "C"), JoinPath("C", ("B",), "A")]
    >>> sorted(set(path_budgets(ps, 20, 1.0).values())), sorted(set(path_budgets(ps, 20, 0.0).values()))
    ([20], [20])
    >>> b = path_budgets(ps[:5], 20, 1.0); b[ps[0]], b[ps[2]], b[ps[4]]
    (17, 17, 33)

    Raises:
        ValueError: ``hop_balance`` is negative, infinite or NaN.
    """
    if not (math.isfinite(hop_balance) and hop_balance >= 0):
        raise ValueError(f"hop_balance must be a finite number >= 0, got {hop_balance}")
    count = Counter(p.hops for p in paths)
    total, kinds = len(paths), len(count)
    return {
        p: min(MAX_SAMPLES_PER_PATH, max(MIN_SEEDS_PER_PATH, round(samples_per_path * (total / (kinds * count[p.hops])) ** hop_balance)))
        for p in paths
    }


class Stage(Protocol):
    """A stage: ``(samples, context) -> samples``. It must not mutate its input samples."""

    __name__: str

    def __call__(self, samples: list[Sample], ctx: StageContext) -> list[Sample]: ...


# ---------------------------------------------------------------------------- 1. seeds


def _pick(options: tuple[str, ...] | list[str], rng: random.Random, top: int = 2) -> str:
    """One of the first ``top`` options, the first twice as likely as each other."""
    head = list(options[:top])
    weights = [2.0] + [1.0] * (len(head) - 1)
    return rng.choices(head, weights=weights)[0]


def _unnamed_entity(table: str, ctx: StageContext) -> str:
    """The column that identifies a row of a table without a name column: its own short text
    (not a copy of another table's, not a foreign key), else its primary key ("order 10248"),
    else the profile's first entity column."""
    refs = {c for fk in ctx.schema.foreign_keys if fk.table == table for c in fk.columns}
    prof = ctx.profiles[table]
    pk = ctx.schema.table(table).primary_key
    for c in prof.entity:
        col = ctx.schema.table(table).column(c)
        if col.is_text and c not in refs and (table, c) not in ctx.copy_columns and not col.primary_key:
            return c
    if len(pk) == 1 and pk[0] in prof.entity:
        return pk[0]
    return prof.entity[0]


_NAME_LIKE = re.compile(r"(^|_)name$|title$|名称$|mc$", re.IGNORECASE)


def answer_columns(ctx: StageContext, table: str) -> tuple[str, ...]:
    """The columns that answer "which {table}" when the question names none (empty: none do).

    The table's best name-like column (:attr:`TableProfile.names`: ``CompanyName``, ``title``)
    that does not copy another table's values, or both halves of a name split over two columns
    (first name, then last name: "Who sold Chai?" means the employees' full names); else a
    descriptive column named like a name (``name``, ``..._name``, ``title``, ``...mc``); else
    its single primary key ("Which orders did X place?" means order ids).
    """
    prof = ctx.profiles[table]
    names = [c for c in prof.names if (table, c) not in ctx.copy_columns]
    halves = name_halves(names)
    if halves is not None:
        return halves
    if names:
        return (names[0],)
    named = [c for c in prof.descriptive if _NAME_LIKE.search(c) and (table, c) not in ctx.copy_columns]
    if named:
        return (named[0],)
    pk = ctx.schema.table(table).primary_key
    return (pk[0],) if len(pk) == 1 else ()


def plan_question(family: str, path: JoinPath, ctx: StageContext, rng: random.Random) -> Plan | None:
    """A plan for ``family`` on ``path``, or None when the tables lack the columns it needs.

    Join scope: the entity comes from the anchor's best name-like columns, the asked-for column
    from the target's descriptive ones. Self scope: ``lookup`` filters by a name; ``count``,
    ``agg`` and ``filter`` filter by a category column (city, country) when there is one.
    """
    a, t = ctx.profiles[path.anchor], ctx.profiles[path.target]
    scope = "self" if path.hops == 0 else "join"
    names = [c for c in a.names if (path.anchor, c) not in ctx.copy_columns]
    if scope == "join" or family == "lookup":
        entity = _pick(names, rng) if names else _unnamed_entity(path.anchor, ctx)
    else:
        entity = rng.choice(a.categories) if a.categories else a.entity[0]
    asked = [c for c in t.descriptive if not (scope == "self" and c == entity)]
    if family == "lookup" and asked and rng.random() < ASK_WORD_SHARE:
        # what people ask of one row by a question word: its price ("how much"), place ("where"), person ("who")
        table = ctx.schema.table(path.target)
        plain = [c for c in asked if not _is_key(ctx.schema, path.target, c)]
        worded = [c for c in plain if _PLACE.search(_column_text(ctx.schema, path.target, c))
                  or _PERSON.search(_column_text(ctx.schema, path.target, c))
                  or _PRICE.search(_column_text(ctx.schema, path.target, c)) and table.column(c).is_numeric]  # fmt: skip
        if worded:
            return Plan(family, scope, entity, ask_column=rng.choice(worded))
    if family in ("list", "lookup"):
        return Plan(family, scope, entity, ask_column=_pick(asked, rng, 3)) if asked else None
    if family == "count":
        count_col = t.count_key if scope == "join" else None
        return Plan(family, scope, entity, agg="COUNT", count_column=count_col)
    if family == "agg":
        nums = [c for c in t.numeric if c != entity]
        measures = [c for c in nums if measure_kind(ctx.schema, path.target, c)] if scope == "join" else []
        if measures and rng.random() < MEASURE_SHARE:
            return Plan(family, scope, entity, num_column=rng.choice(measures), agg="SUM")
        dates = [c for c in date_columns(ctx.schema, path.target) if c != entity]
        if dates and (not nums or rng.random() < DATE_SHARE):
            own = [c for c in dates if main_date(ctx.schema, path.target, c)]  # the date "the latest order" means
            column = rng.choice(own if own and rng.random() < 0.5 else dates)
            return Plan(family, scope, entity, num_column=column, agg=rng.choice(("MIN", "MAX")))
        if not nums:
            return None
        return Plan(family, scope, entity, num_column=rng.choice(nums), agg=rng.choice(("SUM", "AVG")))
    if family == "filter":
        if not asked:
            return None
        ask = asked[0]
        nums = [c for c in t.numeric if c not in (entity, ask)]
        cats = [c for c in t.categories if c not in (entity, ask)]
        if nums:
            return Plan(family, scope, entity, ask_column=ask, filter_column=rng.choice(nums), filter_op=">=")
        if cats:
            return Plan(family, scope, entity, ask_column=ask, filter_column=cats[0], filter_op="=")
        return None
    raise ValueError(f"unknown family {family!r}")


def target_rows_unique(graph: SchemaGraph, path: JoinPath) -> bool:
    """True when each row of ``path``'s target appears at most once in the joined rows: at every
    join the table nearer the target holds the foreign key (an order line joins one order, one
    product), so ``COUNT(*)`` counts target rows even without a one-column key to count.

    >>> from core.schema import Schema, Table, Column, ForeignKey
    >>> s = Schema("s", (Table("lines", (Column("o"), Column("n"))), Table("ships", (Column("o"), Column("n")))),
    ...            (ForeignKey("ships", "o", "lines", "o", (("n", "n"),)),))
    >>> target_rows_unique(SchemaGraph(s), JoinPath("lines", (), "ships")), target_rows_unique(SchemaGraph(s), JoinPath("ships", (), "lines"))
    (True, False)
    """
    return all(fk.table == right and fk.ref_table == left for left, right, fk in graph.join_conditions(path))


def _counts_target_rows(ctx: StageContext, path: JoinPath, plan: Plan, sql: str, count: Any) -> bool:
    """False for a ``COUNT(*)`` over a join whose rows repeat a target row (the target has no
    one-column key to count distinct and the join fans out: a line counted once per shipment of
    it). Checked on SQLite by counting the distinct target keys; another backend keeps only joins
    that cannot repeat (:func:`target_rows_unique`)."""
    if plan.family != "count" or path.hops == 0 or plan.count_column is not None or target_rows_unique(ctx.graph, path):
        return True
    if ctx.backend.kind != "sqlite" or not sql.startswith("SELECT COUNT(*) "):
        return False
    table = ctx.schema.table(path.target)
    keys = table.primary_key or tuple(c.name for c in table.columns)
    cols = ", ".join(f"{quote_ident(path.target)}.{quote_ident(c)}" for c in keys)
    distinct = sql.replace("SELECT COUNT(*) ", f"SELECT COUNT(*) FROM (SELECT DISTINCT {cols} ", 1) + ")"
    res = ctx.backend.execute(distinct, timeout_s=ctx.timeout_s)
    return res.ok and bool(res.rows) and res.rows[0][0] == count


def plan_unfiltered(family: str, path: JoinPath, ctx: StageContext, rng: random.Random) -> Plan | None:
    """A plan without a filter value for ``family`` on ``path``, or None when the tables lack its columns.

    ``all_count`` counts the target's ``count_key`` over a join (None without one: ``COUNT(*)`` over a
    join would make the anchor the gold route's target); ``all_list`` asks for a descriptive target
    column; ``all_pairs`` adds the anchor's best name-like column; ``all_agg`` sums or averages a
    numeric column, or asks for the earliest or latest date (single table only).
    """
    a, t = ctx.profiles[path.anchor], ctx.profiles[path.target]
    scope = "self" if path.hops == 0 else "join"
    entity = _pick(a.names, rng) if a.names else a.entity[0]
    asked = [c for c in t.descriptive if not (path.anchor == path.target and c == entity)]
    if family == "all_count":
        if scope == "join" and t.count_key is None:
            return None
        return Plan(family, scope, entity, agg="COUNT", count_column=t.count_key if scope == "join" else None)
    if family in ("all_list", "all_pairs"):
        return Plan(family, scope, entity, ask_column=_pick(asked, rng, 3)) if asked else None
    if family == "all_agg":
        dates = date_columns(ctx.schema, path.target)
        if dates and (not t.numeric or rng.random() < DATE_SHARE):  # "What is the latest order date of all orders?"
            return Plan(family, scope, entity, num_column=rng.choice(dates), agg=rng.choice(("MIN", "MAX")))
        return Plan(family, scope, entity, num_column=rng.choice(t.numeric), agg=rng.choice(("SUM", "AVG"))) if t.numeric else None
    if family == "top":
        names = [c for c in t.names if (path.target, c) not in ctx.copy_columns] or list(asked[:1])
        if scope != "join" or a.count_key is None or t.count_key is None or not names:
            return None
        return Plan(family, scope, entity, ask_column=names[0], count_column=a.count_key, group_column=t.count_key)
    raise ValueError(f"unknown family {family!r}")


def _noun(table: Table, language: str, noun_index: int, tables: tuple[Table, ...] = ()) -> tuple[str, str]:
    """``(singular, plural)`` for a table: its usual words, or (``noun_index`` % 3 == 2) another
    noun people use for it: the short noun of a longer name (:func:`~data_pipeline.relations.short_nouns`
    over ``tables``: "prescriptions" for outpatient prescriptions, 处方 for 门诊处方), else a
    synonym (:func:`~data_pipeline.relations.table_synonyms`: "songs" for Track)."""
    usual = table_words(table, language)
    if noun_index % 3 != 2:
        return usual
    short_en, short_zh = short_nouns(tables).get(table.name, ((), ())) if tables else ((), ())
    syn_en, syn_zh = table_synonyms(table)
    if language == "zh":
        other = (*short_zh, *syn_zh)
        return (other[0], other[0]) if other else usual
    singles = [w for w in (*short_en, *syn_en) if not w.endswith("s") or " " in w]
    return (singles[0], plural(singles[0])) if singles else usual


def _target_column_words(table: Table, column: str, language: str, short: bool) -> str:
    """Words for a column of the target: :func:`~data_pipeline.templates.column_words`, or with
    ``short`` in Chinese without the table's name in front, as people write it once the table is
    clear ("Federal Shipping 的电话", not "的承运商电话"; the sidecar names the column 承运商电话).

    >>> from core.schema import Column
    >>> t = Table("Shippers", (Column("Phone", zh="承运商电话"), Column("Name", zh="名称")), zh="承运商")
    >>> [_target_column_words(t, c, "zh", short) for c in ("Phone", "Name") for short in (True, False)]
    ['电话', '承运商电话', '名称', '名称']
    >>> _target_column_words(t, "Phone", "en", True)
    'phone'
    """
    text = column_words(table.column(column), language)
    if short and language == "zh" and table.zh and text.startswith(table.zh) and len(text) - len(table.zh) >= 2:
        return text[len(table.zh) :]
    return text


def words_for(
    plan: Plan, path: JoinPath, schema: Schema, language: str, style: str = "classic", verb_index: int = 0,
    noun_index: int = 0,
) -> dict[str, str]:
    """Values for the template placeholders (see :mod:`data_pipeline.templates`); ``style``
    picks whose verb ``{v_*}`` is: the target's for ``agent``/``agent_event``/``who``, the anchor's for
    :data:`ANCHOR_VERB_STYLES`; ``verb_index`` which of its verbs (:func:`~data_pipeline.relations.agent_verbs`, modulo their number);
    ``noun_index`` whether the target is called by another noun (:func:`_noun`)."""
    a, t = schema.table(path.anchor), schema.table(path.target)
    a_sg, a_pl = table_words(a, language)
    t_sg, t_pl = _noun(t, language, noun_index, tuple(schema.tables))
    words = {"a": a_sg, "a_pl": a_pl, "t": t_sg, "t_pl": t_pl, "acol": column_words(a.column(plan.entity_column), language)}
    short = style != "classic" and noun_index % 3 != 0  # two thirds of the natural phrasings
    if plan.ask_column:
        words["tcol"] = _target_column_words(t, plan.ask_column, language, short)
    if plan.num_column:
        words["ncol"] = _target_column_words(t, plan.num_column, language, short)
    if plan.agg in AGG_WORDS[language]:
        words["agg"] = AGG_WORDS[language][plan.agg]
    verbs = _style_verbs(style, a, t)
    verb = verbs[verb_index % len(verbs)] if verbs else None
    if verb is not None:
        words |= {"v_base": verb.base, "v_past": verb.past, "v_zh": verb.zh}
    # the event nearest the target carries the relation: employees handled *orders*, not order details
    event = next((schema.table(v) for v in reversed(path.via) if is_event(schema.table(v))), None)
    if event is not None:
        words["ev"], words["ev_pl"] = table_words(event, language)
    if path.via:
        vias = [table_words(schema.table(v), language) for v in path.via]
        if language == "zh":
            words["via_zh"] = "的" + "的".join(sg for sg, _ in vias) + "的"
        else:
            words["via_en"] = " ".join(f"the {pl} of" for _, pl in reversed(vias)) + f" the {a_sg}"
    return words


def protected_words(
    plan: Plan, path: JoinPath, schema: Schema, language: str, style: str = "classic", verb_index: int = 0,
    noun_index: int = 0,
) -> list[str]:
    """Table and column words (and verbs) a paraphrase must keep (routing cues)."""
    w = words_for(plan, path, schema, language, style, verb_index, noun_index)
    return [v for k, v in w.items() if k not in ("agg", "via_en", "via_zh")]


ANCHOR_VERB_STYLES = frozenset({"actor", "units_actor", "money_actor"})
"""Natural styles whose ``{v_*}`` is the anchor's verb (the others take the target's)."""

VERB_STYLES = frozenset({"agent", "agent_event", "who"}) | ANCHOR_VERB_STYLES
"""Natural styles that fill a verb."""

_MEASURE_VERBS = {
    "units_actor": frozenset({"buy", "order", "purchase", "sell", "supply", "provide", "ship", "deliver", "prescribe"}),
    "money_actor": frozenset({"sell", "supply", "provide", "prescribe"}),
}
"""Anchor verbs that can take a quantity or a sum of money as object ("sold 40 units", "prescribed
300 yuan"); not "visited" or "recorded"."""

_BUYER_VERBS = frozenset({"buy", "purchase"})


def _style_verbs(style: str, anchor: Table, target: Table) -> tuple[Verb, ...]:
    """The verbs a style may fill ``{v_*}`` with: the anchor's for :data:`ANCHOR_VERB_STYLES`
    (those a quantity or amount can follow for the measure styles), else the target's."""
    if style not in ANCHOR_VERB_STYLES:
        return agent_verbs(target)
    verbs = agent_verbs(anchor)
    allowed = _MEASURE_VERBS.get(style)
    return verbs if allowed is None else tuple(v for v in verbs if v.base in allowed)


_PRICE = re.compile(r"price|cost|amount|fee|charge|单价|价格|金额|费用|价", re.IGNORECASE)
_PLACE = re.compile(r"city|country|address|region|state|province|location|城市|国家|地址|地区|省份|位置", re.IGNORECASE)
_WHEN = re.compile(r"\bdate\b|日期", re.IGNORECASE)  # on humanized names: "order date", not "candidate"
_PERSON = re.compile(r"contact|manager|representative|person|联系人|负责人|经理|代表", re.IGNORECASE)


_QUANTITY = re.compile(r"quantity|qty|数量", re.IGNORECASE)
_NOT_QUANTITY = re.compile(r"stock|on order|reorder|per unit|库存|在途", re.IGNORECASE)
_MONEY = re.compile(r"total|amount|金额|总额", re.IGNORECASE)
_UNIT_PRICE = re.compile(r"unit price|单价", re.IGNORECASE)
_HOURS = re.compile(r"\bhours?\b|工时|小时", re.IGNORECASE)


def _column_text(schema: Schema, table: str, column: str) -> str:
    c = schema.table(table).column(column)
    return " ".join((humanize(c.name), c.description, c.zh))


_DATE_TYPE = re.compile(r"DATE|TIME", re.IGNORECASE)


def date_columns(schema: Schema, table: str) -> list[str]:
    """Columns of ``table`` that hold dates and are no key: a declared DATE, DATETIME, TIME or
    TIMESTAMP type, or a name or description that says date (``OrderDate``, ``visit_date``, 日期).
    Numeric columns are left out (a year or a Unix time has no earliest "day" to ask for).

    >>> from core.schema import Column, Table
    >>> s = Schema("s", (Table("Orders", (Column("OrderID", "INTEGER", primary_key=True), Column("OrderDate", "DATETIME"),
    ...     Column("ship_date", "TEXT"), Column("Candidate", "TEXT"), Column("Year", "INTEGER"))),), ())
    >>> date_columns(s, "Orders")
    ['OrderDate', 'ship_date']
    """
    t = schema.table(table)
    return [c.name for c in t.columns
            if not c.is_numeric and not _is_key(schema, table, c.name)
            and (_DATE_TYPE.search(c.type) or _WHEN.search(_column_text(schema, table, c.name)))]  # fmt: skip


def main_date(schema: Schema, table: str, column: str) -> bool:
    """True when ``column`` is the date a question means by the table's rows alone ("the latest
    order"): the table's only date column (:func:`date_columns`), or one named after the table
    (``OrderDate`` of ``Orders``; not ``ShippedDate``, not an employee's ``HireDate``)."""
    dates = date_columns(schema, table)
    if column not in dates:
        return False
    if len(dates) == 1:
        return True
    noun = table_words(schema.table(table), "en")[0].lower()
    return noun in humanize(column).lower().split()


def _is_key(schema: Schema, table: str, column: str) -> bool:
    """A primary or foreign key, or a column named like one (``RegionID``): what it holds is no place or price."""
    c = schema.table(table).column(column)
    h = humanize(column)
    refs = any(fk.table == table and column in fk.columns for fk in schema.foreign_keys)
    return c.primary_key or refs or h == "id" or h.endswith(" id")


def _column_kind(schema: Schema, table: str, column: str) -> str | None:
    """What one numeric column measures, before the uniqueness test of :func:`measure_kind`."""
    c = schema.table(table).column(column)
    if not c.is_numeric or _is_key(schema, table, column):
        return None
    text = _column_text(schema, table, column)
    if _QUANTITY.search(text) and not _NOT_QUANTITY.search(text):
        return "units"
    if _MONEY.search(text) and not _UNIT_PRICE.search(text):
        return "money"
    if _HOURS.search(text):
        return "hours"
    return None


def measure_kind(schema: Schema, table: str, column: str) -> str | None:
    """What a total of ``table.column`` is asked as: ``"units"`` (a quantity, not a stock level),
    ``"money"`` (what a transaction is worth: an amount, a total; not a unit price, and not a
    fee or freight, which nobody means by "how much did X spend"), ``"hours"``, or None.

    None as well when another table has a column of the same kind: then "How much in total for
    X?" does not say which table it means (the hospital's prescription amount and registration
    fee), and such a question would be the same words for two routes.

    >>> from core.schema import Column
    >>> s = Schema("s", (Table("lines", (Column("id", "INTEGER", primary_key=True), Column("Quantity", "INTEGER"),
    ...                                  Column("UnitPrice", "REAL"))),
    ...                  Table("invoices", (Column("id", "INTEGER", primary_key=True), Column("Total", "REAL")))), ())
    >>> [measure_kind(s, "lines", c) for c in ("id", "Quantity", "UnitPrice")], measure_kind(s, "invoices", "Total")
    ([None, 'units', None], 'money')
    """
    kind = _column_kind(schema, table, column)
    if kind is None:
        return None
    for t in schema.tables:
        if t.name != table and any(_column_kind(schema, t.name, c.name) == kind for c in t.columns):
            return None
    return kind


def _unique_column(schema: Schema, table: str, column: str) -> bool:
    """True when no other table has a column of the same readable name or Chinese name, so the
    column alone says which table a question asks about (``OrderDate``; not ``UnitPrice``, which
    Products and Order Details both have)."""
    c = schema.table(table).column(column)
    if c.primary_key or column.lower().endswith("id"):
        return False
    name, zh = humanize(c.name), c.zh
    for t in schema.tables:
        if t.name == table:
            continue
        for o in t.columns:
            if humanize(o.name) == name or (zh and o.zh == zh):
                return False
    return True


def canonical_paths(paths: tuple[JoinPath, ...] | list[JoinPath]) -> frozenset[JoinPath]:
    """The route a question means when its words name no intermediate table: for each (anchor,
    target) pair the shortest legal path, ties broken by the via's table names (alphabetical).

    >>> ps = [JoinPath("c", ("t",), "s"), JoinPath("c", ("e", "s2"), "s"), JoinPath("c", ("d",), "s"), JoinPath("c", (), "c")]
    >>> sorted(str(p) for p in canonical_paths(ps))
    ['c', 'c -> d -> s']
    """
    best: dict[tuple[str, str], JoinPath] = {}
    for p in paths:
        key = (p.anchor, p.target)
        if key not in best or (p.hops, p.via) < (best[key].hops, best[key].via):
            best[key] = p
    return frozenset(best.values())


def natural_styles(family: str, path: JoinPath, plan: Plan, ctx: StageContext, language: str) -> list[tuple[str, float]]:
    """The natural styles (:data:`~data_pipeline.templates.NATURAL_STYLES`) that fit a seed, with draw weights.

    Value-alone styles need a named entity (a name-like text column of the anchor, or a place for
    the single-table counts: "How many customers are in London?"); verb styles need an agent
    (:mod:`data_pipeline.relations`); question-word styles need a price, place or date column
    asked for; the measure styles (units, money, hours) need a total of a column only the target
    has of its kind (:func:`measure_kind`). Only styles with templates for ``(family, scope,
    language)`` are returned.
    """
    schema = ctx.schema
    a, t = schema.table(path.anchor), schema.table(path.target)
    names = {c for c in ctx.profiles[path.anchor].names if (path.anchor, c) not in ctx.copy_columns}
    named = plan.entity_column in names
    place = bool(_PLACE.search(_column_text(schema, path.anchor, plan.entity_column)))
    # "When was the latest order of X?": the date left unnamed is the table's own
    own_date = plan.agg in ("MIN", "MAX") and main_date(schema, path.target, str(plan.num_column))
    out: list[tuple[str, float]] = []
    if path.hops == 0:
        if family == "lookup" and named:
            out.append(("value", 1.0))
            col = str(plan.ask_column)
            asked = "" if _is_key(schema, path.target, col) else _column_text(schema, path.target, col)  # no "where" for RegionID
            if _PRICE.search(asked) and schema.table(path.target).column(col).is_numeric:
                out.append(("howmuch", 1.5))
            elif _PLACE.search(asked):
                out.append(("where", 1.5))
            elif _WHEN.search(asked):
                out.append(("when", 1.0))
            elif _PERSON.search(asked):
                out.append(("who", 1.5))
        elif family in ("count", "agg", "filter") and place:
            out.append(("value", 1.0))
            if own_date:
                out.append(("date", 3.0))
    elif named:
        out.append(("value", 1.0))
        asked_col = plan.ask_column or plan.num_column
        if asked_col and _unique_column(schema, path.target, asked_col):
            out.append(("column", 1.0))
        target_verb, anchor_verb = agent_verb(t), agent_verb(a)
        if target_verb is not None and not is_event(t):
            out.append(("agent", 1.0))
            if any(is_event(schema.table(v)) for v in path.via):
                out.append(("agent_event", 1.2))
            if is_person(t):
                out.append(("who", 0.6))
        elif anchor_verb is not None:
            out.append(("actor", 1.2))
        kind = measure_kind(schema, path.target, plan.num_column) if family == "agg" and plan.agg == "SUM" else None
        if kind is not None:
            # a total of what the target measures implies the target: "How many units has X bought?"
            out.append((kind, 6.0))
            if kind != "hours" and _style_verbs(f"{kind}_actor", a, t):
                out.append((f"{kind}_actor", 6.0))
            if kind == "money" and any(v.base in _BUYER_VERBS for v in agent_verbs(a)):
                out.append(("spend", 6.0))
        if own_date:
            out.append(("date", 3.0))
    scope = "self" if path.hops == 0 else "join"
    return [(st, w) for st, w in out if templates_for(family, scope, language, st)]


class _Slots(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render(text: str, words: dict[str, str], language: str) -> str:
    """Fill a template's word placeholders; ``{E1}``/``{E2}`` stay. First letter upper-cased in English."""
    out = tidy(text.format_map(_Slots(words)), language)
    return out[0].upper() + out[1:] if language == "en" and out and out[0].islower() else out


def _counts_one_named_row(plan: Plan, path: JoinPath, ctx: StageContext) -> bool:
    """True for a single-table count, aggregate or filter whose filter is the row's own name
    rather than a category ("Count the products whose product name is Konbu", "the total unit
    price of products named Maxilaku"): nobody asks that of one named row, so
    :func:`seed_questions` gives those seeds to lookups ("How much does Konbu cost?")."""
    return plan.family != "lookup" and plan.entity_column not in ctx.profiles[path.anchor].categories


def seed_questions(samples: list[Sample], ctx: StageContext) -> list[Sample]:
    """Stage 1: ``ctx.seeds_for(path)`` seed questions for every path in ``ctx.paths`` (input ignored).

    With ``ctx.unfiltered_share`` > 0, the last ``round(share * seeds)`` seeds of a path
    (half rounded up) come from the families without a filter value, when the path has any.
    """
    rng = ctx.rng("seed_questions")
    canonical = canonical_paths(ctx.paths)
    out: list[Sample] = []
    for path in ctx.paths:
        scope = "self" if path.hops == 0 else "join"
        n_seeds = ctx.seeds_for(path)
        # a longer route between the same two tables is only meant when its via is named
        via_named = scope == "join" and path not in canonical
        plans: dict[str, Plan] = {}
        for family in FAMILIES_BY_SCOPE[scope]:
            plan = plan_question(family, path, ctx, rng)
            if plan is not None:
                plans[family] = plan
        if scope == "self" and "lookup" in plans:
            plans = {f: p for f, p in plans.items() if not _counts_one_named_row(p, path, ctx)}
        families = list(plans)
        rng.shuffle(families)
        if "agg" in plans and plans["agg"].agg == "SUM" and measure_kind(ctx.schema, path.target, plans["agg"].num_column):
            families.insert(0, families.pop(families.index("agg")))  # totals of a measure come first
        lang_start = rng.randrange(len(ctx.languages))
        used: set[str] = set()
        unfiltered: dict[str, Plan] = {}
        n_unfiltered = 0
        if ctx.unfiltered_share > 0 and not via_named:
            for family in UNFILTERED_FAMILIES_BY_SCOPE[scope]:
                plan = plan_unfiltered(family, path, ctx, rng)
                if plan is not None:
                    unfiltered[family] = plan
            if unfiltered:
                n_unfiltered = min(n_seeds, math.floor(ctx.unfiltered_share * n_seeds + 0.5))
            u_families = list(unfiltered)
            rng.shuffle(u_families)
        for i in range(n_seeds):
            language = ctx.languages[(lang_start + i) % len(ctx.languages)]
            j = i - (n_seeds - n_unfiltered)
            if j < 0:
                family = families[i % len(families)]
                # a fresh plan for repeated families, so the columns vary too
                plan = plans[family] if i < len(families) else plan_question(family, path, ctx, rng) or plans[family]
            else:
                family = u_families[j % len(u_families)]
                plan = unfiltered[family] if j < len(u_families) else plan_unfiltered(family, path, ctx, rng) or unfiltered[family]
            style = "classic"
            if j < 0 and via_named and templates_for(family, scope, language, "via"):
                style = "via"
            elif j < 0 and ctx.natural_share > 0:
                styles = natural_styles(family, path, plan, ctx, language)
                if styles and rng.random() < ctx.natural_share:
                    style = rng.choices([st for st, _ in styles], weights=[w for _, w in styles])[0]
            # once every template of the group is used (many samples per path), reuse them
            group: tuple[Template, ...] = templates_for(family, scope, language, style)
            options = [t for t in group if t.id not in used] or list(group)
            tpl = rng.choices(options, weights=[HELDOUT_WEIGHT if t.heldout else 1.0 for t in options])[0]
            used.add(tpl.id)
            text_tpl, bare = tpl.text, False
            if family == "list" and scope == "join" and style != "column":
                answer = answer_columns(ctx, path.target)
                stripped = bare_template(tpl.text, language) if answer else None
                if stripped is not None and rng.random() < BARE_SHARE:
                    extra = answer[1] if len(answer) > 1 else None
                    plan, text_tpl, bare = replace(plan, ask_column=answer[0], extra_column=extra), stripped, True
            sid = f"{ctx.db_name}-s{len(out)}"
            verb_index = rng.randrange(6) if style in VERB_STYLES else 0
            noun_index = rng.randrange(3) if style != "classic" else 0
            text = render(text_tpl, words_for(plan, path, ctx.schema, language, style, verb_index, noun_index), language)
            out.append(
                Sample(
                    id=sid,
                    db=ctx.db_name,
                    question=text,
                    language=language,
                    path=path,
                    sql="",
                    template_id=tpl.id,
                    meta={"seed": sid, "plan": plan.to_dict(), "paraphrase": None, "style": style, "verb": verb_index,
                          "noun": noun_index, "bare": bare},
                )
            )
    return out


# ---------------------------------------------------------------------------- 2. paraphrases


def paraphrase(samples: list[Sample], ctx: StageContext) -> list[Sample]:
    """Stage 2: add paraphrases of each seed until its path has ``ctx.samples_for(path)`` samples.

    The extra variants of a path are spread over its seeds in turn. A paraphraser that cannot
    find enough distinct wordings leaves the path short; ``paraphrase/shortfall`` counts it.
    """
    rng = ctx.rng("paraphrase")
    by_path: dict[JoinPath, list[Sample]] = defaultdict(list)
    for s in samples:
        by_path[s.path].append(s)
    out: list[Sample] = []
    for path, seeds in by_path.items():
        extra = max(0, ctx.samples_for(path) - len(seeds))
        for j, seed in enumerate(seeds):
            out.append(seed)
            want = extra // len(seeds) + (1 if j < extra % len(seeds) else 0)
            if want == 0:
                continue
            plan = Plan.from_dict(seed.meta["plan"])
            keep = protected_words(plan, path, ctx.schema, seed.language, seed.meta.get("style", "classic"),
                                   seed.meta.get("verb", 0), seed.meta.get("noun", 0))
            variants = ctx.paraphraser(seed.question, seed.language, want, rng, keep)
            ctx.counters["paraphrase/shortfall"] += want - len(variants)
            for k, (text, rule) in enumerate(variants):
                out.append(
                    replace(seed, id=f"{seed.id}-p{k}", question=text, meta={**seed.meta, "paraphrase": rule})
                )
    return out


# ---------------------------------------------------------------------------- 3. entities


def _candidates(ctx: StageContext, path: JoinPath, plan: Plan, value: Any = None) -> list[Any]:
    """Distinct anchor values that reach a non-null target value through ``path`` (sorted).

    With ``value``, the distinct values of the plan's filter column for that anchor value.
    Values longer than :data:`MAX_VALUE_CHARS` are left out (filtered once, then cached).
    """
    needed = [c for c in (plan.ask_column, plan.extra_column, plan.num_column, plan.count_column) if c]
    key = (path, plan.entity_column, tuple(needed), plan.filter_column if value is not None else None, value)
    if key in ctx._values:
        return ctx._values[key]
    t = len(path.tables) - 1
    where = [Condition(0, plan.entity_column, "IS NOT NULL")] + [Condition(t, c, "IS NOT NULL") for c in needed]
    if value is None:
        column = (0, plan.entity_column)
    else:
        column = (t, str(plan.filter_column))
        where += [Condition(0, plan.entity_column, "=", value), Condition(t, str(plan.filter_column), "IS NOT NULL")]
    values = [v for v in ctx.backend.distinct_values(ctx.graph, path, column, where) if len(_show(v)) <= MAX_VALUE_CHARS]
    ctx._values[key] = values
    return values


def _column_values(ctx: StageContext, table: str, column: str) -> list[str]:
    """The distinct non-null values of ``table.column`` as text (cached in the context)."""
    key = ("column", table, column)
    if key not in ctx._values:
        ctx._values[key] = ctx.backend.column_values(table, column)
    return ctx._values[key]


def _show(value: Any) -> str:
    """How a value reads in a question: ``18.0`` -> ``18``."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _condition_words(plan: Plan, path: JoinPath, schema: Schema, language: str, value: Any) -> str:
    fcol = column_words(schema.table(path.target).column(str(plan.filter_column)), language)
    if plan.filter_op == ">=":
        return f"{fcol}不低于{_show(value)}" if language == "zh" else f"{fcol} of at least {_show(value)}"
    return f"{fcol}为 {_show(value)} " if language == "zh" else f"{fcol} {_show(value)}"


def _entity_words(s: Sample, entity: Entity, schema: Schema) -> str:
    """The text for ``{E1}``: the surface, qualified by its column for numbers and codes
    ("order detail with quantity 12") unless the question already names the column or is in a
    natural style (there the value stands alone, as people write it)."""
    if fuzzable(entity.value) or s.meta.get("style", "classic") != "classic":
        return entity.surface
    words = column_words(schema.table(entity.table).column(entity.column), s.language)
    if words.lower() in s.question.lower():
        return entity.surface
    return f"（{words} {entity.surface}）" if s.language == "zh" else f"with {words} {entity.surface}"


_CJK = re.compile(r"[\u3400-\u9fff]")


def _full_name(ctx: StageContext, entity: Entity, asked: Sequence[str | None] = ()) -> str | None:
    """The whole name of the one person whose first or last name ``entity`` is, in the order
    people write it ("Frank Harris"; 张伟 for 姓 张 and 名 伟), or None: the entity's column is
    no half of a name split over two columns of its table, the other half is among the
    ``asked`` columns (the whole name would give the answer away), or that half names more than
    one person (then the gold query's filter on the half would not be the person meant)."""
    halves = name_halves([c.name for c in ctx.schema.table(entity.table).columns])
    if halves is None or entity.column not in halves or not isinstance(entity.value, str):
        return None
    other = halves[1] if entity.column == halves[0] else halves[0]
    if other in asked:
        return None
    got = ctx.backend.distinct_values(ctx.graph, JoinPath(entity.table, (), entity.table), (0, other),
                                      [Condition(0, entity.column, "=", entity.value)])  # fmt: skip
    if len(got) != 1 or not isinstance(got[0], str) or not got[0].strip():
        return None
    given, family = (entity.value, got[0]) if entity.column == halves[0] else (got[0], entity.value)
    return f"{family}{given}" if _CJK.search(given + family) else f"{given} {family}"


def _asked_of(s: Sample, table: str) -> tuple[str | None, ...]:
    """The columns of ``table`` that ``s`` asks for (its plan's ask and extra columns when its
    target is ``table``)."""
    plan = s.meta["plan"]
    return (plan.get("ask_column"), plan.get("extra_column")) if s.path.target == table else ()


def _threshold(value: Any) -> Any:
    """A round lower bound that keeps ``value`` itself: ``18.75`` -> ``18``, ``0.15`` -> ``0.15``."""
    if not isinstance(value, float):
        return value
    if abs(value) < 10:
        return math.floor(value * 100) / 100
    return math.floor(value)


def fill_entities(samples: list[Sample], ctx: StageContext) -> list[Sample]:
    """Stage 3: entity values, gold SQL, execution check, then real/fuzzy surfaces.

    A sample is dropped (counted under ``dropped/<reason>``) when its path offers no value
    (``no_values``; values longer than :data:`MAX_VALUE_CHARS` are not offered), its gold SQL fails (``sql_error``), returns no rows (``no_rows``), or
    aggregates to NULL or 0 (``empty_aggregate``). A fuzzy surface is drawn with the values of
    its column at hand, so that a partial one matches no other value; when a value offers no
    fuzzy surface, another sample is fuzzed instead (``fuzzy/shortfall`` counts what is missing).
    A plan without a filter value (``plan.filtered`` False) gets no entity, ``entity_kind`` ``none``
    and a WHERE-less gold SQL; the fuzzy share is taken over the samples with an entity. In a
    natural style, :data:`FULL_NAME_SHARE` of the real values that are one half of a person's
    name are written as the whole name (:func:`_full_name`); the gold SQL keeps the half.
    """
    rng = ctx.rng("fill_entities")
    kept: list[Sample] = []
    for s in samples:
        plan = Plan.from_dict(s.meta["plan"])
        entities: list[Entity] = []
        if not plan.filtered:
            sql = gold_sql(ctx.graph, s.path, plan)
        else:
            values = _candidates(ctx, s.path, plan)
            if not values:
                ctx.counters["dropped/no_values"] += 1
                continue
            value = rng.choice(values)
            second = None
            entities = [Entity(s.path.anchor, plan.entity_column, value, _show(value), "real", None)]
            if plan.filter_column is not None:
                options = _candidates(ctx, s.path, plan, value)
                if not options:
                    ctx.counters["dropped/no_values"] += 1
                    continue
                # not the smallest value: a threshold at the minimum would filter nothing
                raw = rng.choice(options[1:] if plan.filter_op == ">=" and len(options) > 1 else options)
                second = _threshold(raw) if plan.filter_op == ">=" else raw
                entities.append(Entity(s.path.target, plan.filter_column, second, _show(second), "real", None))
            sql = gold_sql(ctx.graph, s.path, plan, value, second)
        draft = replace(s, sql=sql, entities=tuple(entities))
        query = ctx.backend.gold_query(draft, ctx.graph)
        res = ctx.backend.execute(query, timeout_s=ctx.timeout_s)
        if not res.ok:
            ctx.counters["dropped/sql_error"] += 1
            continue
        if not res.rows:
            ctx.counters["dropped/no_rows"] += 1
            continue
        if plan.aggregates and res.rows[0][0] in (None, 0):
            ctx.counters["dropped/empty_aggregate"] += 1
            continue
        if not _counts_target_rows(ctx, s.path, plan, sql, res.rows[0][0]):
            ctx.counters["dropped/count_repeats_rows"] += 1
            continue
        meta = s.meta if query == sql else {**s.meta, "pipeline": query}
        kept.append(replace(draft, entity_kind="real" if entities else "none", n_rows=len(res.rows), meta=meta))

    # fuzzy surfaces: per language, about (1 - real_fraction) of the samples, drawn among fuzzable ones
    fuzzy_at: dict[int, tuple[str, str]] = {}
    for language in ctx.languages:
        idx = [i for i, s in enumerate(kept) if s.language == language and s.entities]
        want = round((1.0 - ctx.real_fraction) * len(idx))
        pool = [i for i in idx if fuzzable(kept[i].entities[0].value)]
        rng.shuffle(pool)
        got = 0
        for i in pool:
            if got >= want:
                break
            first = kept[i].entities[0]
            out = fuzz(first.value, rng, _column_values(ctx, first.table, first.column))
            if out is not None:
                fuzzy_at[i] = out
                got += 1
        ctx.counters["fuzzy/shortfall"] += want - got

    out: list[Sample] = []
    for i, s in enumerate(kept):
        if not s.entities:
            out.append(replace(s, question=tidy(s.question, s.language)))
            continue
        first = s.entities[0]
        if i in fuzzy_at:
            surface, kind = fuzzy_at[i]
            first = replace(first, surface=surface, kind="fuzzy", fuzz=kind)
        elif s.meta.get("style", "classic") != "classic" and (
            whole := _full_name(ctx, first, _asked_of(s, first.table))
        ) is not None:
            # a classic template names the column ("whose last name is {E1}"): only natural styles give the whole name
            if rng.random() < FULL_NAME_SHARE:
                first = replace(first, surface=whole)
        ents = (first, *s.entities[1:])
        question = s.question.replace("{E1}", _entity_words(s, first, ctx.schema))
        if len(ents) > 1:
            plan = Plan.from_dict(s.meta["plan"])
            question = question.replace("{E2}", _condition_words(plan, s.path, ctx.schema, s.language, ents[1].value))
        out.append(replace(s, question=tidy(question, s.language), entities=ents, entity_kind=first.kind))
    return out


# ---------------------------------------------------------------------------- 4. difficulty


def difficulty(hops: int, aggregates: bool, extra_filter: bool) -> str:
    """Grade from points = hops + 1 if the SQL aggregates + 1 if it has a second filter.

    ``easy`` for 0-1 points, ``medium`` for 2, ``hard`` for 3 or more: a plain 3-hop question is
    hard, a 2-hop count is hard, a 1-hop count is medium, a single-table count is easy.

    >>> difficulty(0, True, False), difficulty(1, False, False), difficulty(2, False, False), difficulty(2, True, False)
    ('easy', 'easy', 'medium', 'hard')
    """
    points = hops + int(aggregates) + int(extra_filter)
    return "easy" if points <= 1 else "medium" if points == 2 else "hard"


def grade_difficulty(samples: list[Sample], ctx: StageContext) -> list[Sample]:
    """Stage 4: set ``difficulty`` from the path's hops and the plan (rule in :func:`difficulty`)."""
    out = []
    for s in samples:
        plan = Plan.from_dict(s.meta["plan"])
        out.append(replace(s, difficulty=difficulty(s.path.hops, plan.aggregates, plan.extra_filter)))
    return out


STAGES: tuple[Stage, ...] = (seed_questions, paraphrase, fill_entities, grade_difficulty)
"""The stages in the order :func:`run_stages` applies them."""


def run_stages(ctx: StageContext, stages: tuple[Stage, ...] = STAGES) -> list[Sample]:
    """Apply ``stages`` in order, starting from an empty batch."""
    samples: list[Sample] = []
    for stage in stages:
        samples = stage(samples, ctx)
    return samples
