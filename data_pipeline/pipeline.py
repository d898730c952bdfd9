"""Build a labelled question data set from a database: the :func:`build_dataset` verb.

The database is read (read-only) and its legal join paths enumerated; the stages in
:data:`data_pipeline.stages.STAGES` write, paraphrase, fill and grade questions for every path;
:func:`~data_pipeline.splits.assign_splits` splits them; the folder gets ``schema.json``,
``samples.jsonl`` (record schema in :mod:`core.samples`) and ``summary.json``. The same
seed gives the same files. The command line is ``python -m data_pipeline.build``
(:mod:`data_pipeline.build`), which prints the summary too.

Tables without rows: by default (``synthesize_empty``) the database is copied to
``<out>/database.sqlite`` and its empty tables filled with synthetic rows
(:func:`~data_pipeline.synthesize.synthesize_rows`; the user's file is never modified); the build
then runs on the copy, ``schema.json`` records the copy as ``db_path``, the summary lists
``synthesized_tables`` and a warning names them. With ``synthesize_empty=False``
(``--no-synthesize-empty``), or for paths whose joins still match no rows, a path that cannot have
a question whose gold SQL returns rows is skipped with a warning naming it.

MongoDB (``backend="mongodb"``, ``--backend mongodb --uri mongodb://HOST:PORT/DATABASE``): the
schema is read from the server (:func:`~data_pipeline.backends.mongodb.introspect_mongodb`), the
stages read values with aggregations, and every sample's gold aggregation pipeline runs on the
server (its JSON is ``meta["pipeline"]``, its SQL twin ``sql``; see :mod:`data_pipeline.stages`).
The server is only read, so empty collections are not filled: paths through them are skipped with
a warning (copy a built data set instead, ``python -m data_pipeline.mongo_load --db DATA_DIR``,
to have its synthetic rows). ``schema.json`` records ``backend`` and ``source`` (the URI without
its password) and an empty ``db_path``. A copy of a SQLite database made by
:mod:`data_pipeline.mongo_load` gives the same samples as a build on that SQLite file with the
same options (same schema, values, order of candidates and gold answers).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from data_pipeline.backends.registry import Backend, check_backend_options, load_backend, open_backend
from core.dataset import BuiltDataset, save_dataset
from data_pipeline.datasets import SAMPLE_NAMES, description_file, resolve_database
from data_pipeline.entities import profile_columns
from core.errors import ConfigError, DataError
from core.graph import DEFAULT_MAX_HOPS, JoinPath, SchemaGraph
from data_pipeline.human_sets import load_human_questions, packaged_human_file
from core.io import cache_dir, ensure_writable_dir
from data_pipeline.paraphrase import LLMParaphraser, Paraphraser, RuleParaphraser
from data_pipeline.quality import route_ambiguity
from core.samples import DIFFICULTIES, GENERATED_SPLITS, LANGUAGES
from data_pipeline.splits import assign_splits
from data_pipeline.stages import MAX_SAMPLES_PER_PATH, StageContext, run_stages
from data_pipeline.synthesize import ROWS_PER_TABLE, synthesize_rows
from data_pipeline.templates import heldout_template_ids
from core.values import ValueIndex, ValueIndexConfig, copy_columns

SYNTHESIZED_DB = "database.sqlite"
"""File name, inside the output folder, of the copy whose empty tables got synthetic rows."""


@dataclass
class BuildConfig:
    """Generate routing questions with gold paths and gold SQL for one database."""

    out: Path
    """Output folder (created; schema.json, samples.jsonl and summary.json are replaced)."""
    db: str | None = None
    """Sample name (northwind, chinook, hospital, projects) or path to a SQLite file; with --backend mongodb, the database name on the server when --uri names none."""
    backend: str = "sqlite"
    """Database kind: sqlite (--db) or mongodb (--uri); gold queries are SQL or aggregation pipelines that run on it."""
    uri: str | None = None
    """MongoDB URI for --backend mongodb, e.g. mongodb://127.0.0.1:27017/northwind (the server is only read)."""
    descriptions: Path | None = None
    """Description sidecar JSON (English/Chinese names); samples use their packaged one."""
    max_hops: int = DEFAULT_MAX_HOPS
    """Longest join path, in joins, to ask questions about."""
    seed: int = 0
    """Random seed; the same seed gives the same data set."""
    samples_per_path: int = 20
    """Questions per legal path after paraphrasing: exactly that with --hop-balance 0, on average with 1 (at least 3 seeds each); 20 routed people's questions better than 10 (Northwind: 70% vs 50% of a development set)."""
    hop_balance: float = 1.0
    """How far questions move from join counts with many paths to join counts with few, between 0 and 4: 0 gives every path the same number; 1 gives every join count (0, 1, 2, 3 joins) the same share of the questions, about as many in total; above 1 the rare join counts get more than an equal share and the total grows. Schemas such as Northwind have more paths with two or three joins than tables, so without it most training questions need several joins and the router leans to long routes (Northwind development questions: 18 of 30 routed right without, 21 with)."""
    languages: str = "en,zh"
    """Comma-separated question languages: en, zh or both."""
    real_fraction: float = 0.6
    """Share of questions naming the exact database value; the rest use a fuzzy spelling."""
    llm_base_url: str | None = None
    """OpenAI-compatible endpoint (e.g. http://localhost:8000/v1) to paraphrase instead of the offline rules."""
    llm_model: str | None = None
    """Model name for --llm-base-url."""
    timeout_s: float = 5.0
    """Time limit of one gold query, seconds."""
    synthesize_empty: bool = True
    """Fill tables without rows with synthetic rows in a copy, OUT/database.sqlite (the input is never modified), so every legal path is usable; --no-synthesize-empty skips the paths through them instead."""
    synthetic_rows: int = ROWS_PER_TABLE
    """Synthetic rows per empty table (with --synthesize-empty)."""
    human: Path | None = None
    """JSONL file of human-written evaluation questions (question, language, path, sql per line) kept as the split human and never trained on; sample databases bring their own set."""
    value_index: bool = True
    """Index the distinct values of the text columns (OUT/values.json) so routers and prompts can link the values a question names."""
    max_values_per_column: int = ValueIndexConfig.max_values_per_column
    """Most distinct values indexed per column (the rest are left out, with a warning)."""
    unfiltered_share: float = 0.2
    """Share of each path's seed questions (and so of its paraphrases) written without a filter value ("How many singers are there?", "Which customer has the most orders?": no entity, gold SQL without WHERE), rounded per path: 0.2 of 5 seeds is 1. SQLite only (0 on MongoDB)."""
    natural_share: float = 0.95
    """Share of the seed questions that can be phrased as people ask (the value named alone, a relation verb, a question word such as who / where / how much) that are; the rest name the entity's table ("the product Chai"). 0 writes the classic phrasings only."""
    seed_share: float = 0.5
    """Share of each path's questions that are written fresh (a template, its style and its columns drawn anew); the rest are rule or LLM paraphrases of them. 1 writes every question fresh, with no paraphrases."""
    far_junction_targets: bool = False
    """Also ask questions whose route ends at a junction table (one that only links others by foreign keys, such as EmployeeTerritories) that is not one join from where the route starts. Off by default: nobody asks for the playlist entries of a genre, and such questions taught routers to stop at the junction ("songs of the genre Bossa" means tracks)."""

    def __post_init__(self) -> None:
        check_backend_options(self.backend, self.db, self.uri)
        langs = self.language_list
        bad = [x for x in langs if x not in LANGUAGES]
        if bad or not langs:
            raise ConfigError(f"languages must be a comma-separated subset of {','.join(LANGUAGES)}, got {self.languages!r}", where="--languages")
        if not 0.0 <= self.real_fraction <= 1.0:
            raise ConfigError(f"must be between 0 and 1, got {self.real_fraction}", where="--real-fraction")
        if not 3 <= self.samples_per_path <= MAX_SAMPLES_PER_PATH:
            raise ConfigError(f"must be between 3 (three seed questions per path) and {MAX_SAMPLES_PER_PATH}, got {self.samples_per_path}", where="--samples-per-path")
        if self.max_hops < 0:
            raise ConfigError(f"must be >= 0, got {self.max_hops}", where="--max-hops")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ConfigError(f"must be a positive number of seconds, got {self.timeout_s}", where="--timeout-s")
        if not (math.isfinite(self.hop_balance) and 0.0 <= self.hop_balance <= 4.0):
            raise ConfigError(f"must be between 0 and 4, got {self.hop_balance}", where="--hop-balance")
        if not 0.0 <= self.unfiltered_share <= 1.0:
            raise ConfigError(f"must be between 0 and 1, got {self.unfiltered_share}", where="--unfiltered-share")
        if not 0.0 <= self.natural_share <= 1.0:
            raise ConfigError(f"must be between 0 and 1, got {self.natural_share}", where="--natural-share")
        if not 0.0 < self.seed_share <= 1.0:
            raise ConfigError(f"must be above 0 and at most 1, got {self.seed_share}", where="--seed-share")
        if self.max_values_per_column < 1:
            raise ConfigError(f"must be at least 1, got {self.max_values_per_column}", where="--max-values-per-column")
        if self.synthetic_rows < 1:
            raise ConfigError(f"must be at least 1, got {self.synthetic_rows}", where="--synthetic-rows")
        if (self.llm_base_url is None) != (self.llm_model is None):
            given, missing = ("--llm-base-url", "--llm-model") if self.llm_model is None else ("--llm-model", "--llm-base-url")
            raise ConfigError(f"{given} is set but {missing} is not; give both or neither", where=missing)

    @property
    def language_list(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(x.strip() for x in self.languages.split(",") if x.strip()))


def usable_paths(
    graph: SchemaGraph, backend: Backend, far_junction_targets: bool = False
) -> tuple[list[JoinPath], list[dict[str, str]], list[str]]:
    """Split the legal paths into usable ones and skipped ones (with reasons), plus warnings.

    A path is skipped when a table on it has no rows, or when its joins match no row
    (``backend.has_rows``), or, unless ``far_junction_targets``, when it ends at a junction table
    (:attr:`core.graph.SchemaGraph.junction_tables`) that is not one join from where it starts
    (listed in the summary's skipped paths, no warning):
    "How many tracks are in the playlist Grunge?" may end at ``PlaylistTrack``, but a question
    about the playlist entries of a genre, or about a junction's own key values, is not one people
    ask ("songs of the genre Bossa" means ``Track``).
    """
    empty = [t.name for t in graph.schema.tables if t.row_count == 0]
    usable, skipped, notes = [], [], []
    for p in graph.legal_paths:
        hit = [t for t in p.tables if t in empty]
        if hit:
            skipped.append({"path": str(p), "reason": f"empty table {', '.join(hit)}"})
            continue
        if not far_junction_targets and p.target in graph.junction_tables and p.hops != 1:
            skipped.append({"path": str(p), "reason": f"ends at the junction table {p.target} {p.hops} joins from its anchor"})
            continue
        if not backend.has_rows(graph, p):
            skipped.append({"path": str(p), "reason": "joins match no rows"})
            continue
        usable.append(p)
    if empty:
        n = sum(1 for s in skipped if s["reason"].startswith("empty"))
        notes.append(f"tables without rows: {', '.join(empty)}; skipped {n} paths through them")
    no_join = [s["path"] for s in skipped if s["reason"] == "joins match no rows"]
    if no_join:
        notes.append(f"{len(no_join)} paths whose joins match no rows skipped: {'; '.join(no_join)}")
    return usable, skipped, notes


def _paraphraser(cfg: BuildConfig) -> Paraphraser:
    if cfg.llm_base_url and cfg.llm_model:
        return LLMParaphraser(cfg.llm_base_url, cfg.llm_model)
    return RuleParaphraser()


def build_dataset(cfg: BuildConfig) -> tuple[BuiltDataset, dict[str, Any]]:
    """Build the data set described by ``cfg``, write it to ``cfg.out``, return it with its summary.

    Returns:
        ``(dataset, summary)``; the summary is also ``cfg.out/summary.json`` (see :func:`summarize`).

    Raises:
        Route2SQLError: ``cfg.out`` cannot be written (checked before any work).
        SchemaError: the database is missing, not SQLite, has no tables, or is an unknown sample;
            the MongoDB server cannot be reached or the database has no collections.
        DataError: the sidecar is malformed, or no legal path has rows to ask about.
        ConfigError: the LLM endpoint cannot be reached (only with ``--llm-base-url``); a
            malformed MongoDB URI.

    Warns (UserWarning): a schema without foreign keys; tables without rows (filled with
    synthetic rows in ``cfg.out/database.sqlite``, or with ``synthesize_empty=False`` or on
    MongoDB the paths skipped); ambiguous inferred MongoDB references.
    """
    start = time.perf_counter()
    out = ensure_writable_dir(cfg.out)
    backend, name, notes, synthesized, source = _open(cfg, out)
    schema = backend.introspect()
    graph = SchemaGraph(schema, max_hops=cfg.max_hops)
    try:
        paths, skipped, path_notes = usable_paths(graph, backend, cfg.far_junction_targets)
        notes += path_notes
        if not paths:
            raise DataError("no legal path has rows to ask about (every table on them is empty)", where=backend.location)
        values = None
        if cfg.value_index:
            values, value_notes = ValueIndex.build(backend, schema, ValueIndexConfig(max_values_per_column=cfg.max_values_per_column))
            notes += value_notes
        human_file = cfg.human if cfg.human is not None else packaged_human_file(name) if _is_sample(cfg, name, source) else None
        human = load_human_questions(human_file, graph, backend, db_name=name, timeout_s=cfg.timeout_s) if human_file else []
        profiles = {t.name: profile_columns(t, backend.column_stats(schema, t)) for t in schema.tables if t.row_count > 0}
        ctx = StageContext(
            schema=schema,
            graph=graph,
            db_name=name,
            backend=backend,
            paths=tuple(paths),
            profiles=profiles,
            languages=cfg.language_list,
            samples_per_path=cfg.samples_per_path,
            real_fraction=cfg.real_fraction,
            paraphraser=_paraphraser(cfg),
            seed=cfg.seed,
            timeout_s=cfg.timeout_s,
            unfiltered_share=cfg.unfiltered_share if backend.kind == "sqlite" else 0.0,
            natural_share=cfg.natural_share,
            seed_share=cfg.seed_share,
            hop_balance=cfg.hop_balance,
            copy_columns=copy_columns(values, schema) if values is not None else frozenset(),
        )
        samples = run_stages(ctx)
    finally:
        backend.close()
    if not samples:
        raise DataError("no question's gold query returned rows; nothing to write", where=backend.location)
    samples = [replace(s, id=f"{name}-{i}") for i, s in enumerate(samples)]
    samples = assign_splits(samples, heldout_template_ids(), seed=cfg.seed)
    db_path = Path(backend.location) if backend.kind == "sqlite" else Path()
    ds = BuiltDataset(schema, graph, samples, db_path, human, values)
    summary = summarize(
        ds, cfg, skipped, ctx.counters, notes, time.perf_counter() - start, synthesized=synthesized, source_db=source,
        location=backend.location,
    )
    save_dataset(out, ds, summary)
    for note in notes:
        warnings.warn(note, UserWarning, stacklevel=2)
    return ds, summary


def _open(cfg: BuildConfig, out: Path) -> tuple[Backend, str, list[str], dict[str, int], str]:
    """The backend the build reads, with ``(backend, name, notes, synthesized rows, source)``.

    SQLite: a sample name or file, its sidecar, and (with ``synthesize_empty``) a copy in ``out``
    with synthetic rows in empty tables. MongoDB: the server's database, read as it is.
    Introspection warnings become notes.
    """
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cfg.backend == "mongodb":
            backend: Backend = open_backend("mongodb", cfg.db, cfg.uri, descriptions=cfg.descriptions)
        else:
            db_path = resolve_database(str(cfg.db))
            is_sample = str(cfg.db) in SAMPLE_NAMES and not Path(str(cfg.db)).exists()
            name = str(cfg.db) if is_sample else db_path.stem
            sidecar = cfg.descriptions if cfg.descriptions is not None else (description_file(name) if is_sample else None)
            backend = load_backend("sqlite", db_path, descriptions=sidecar, name=name)
        try:
            schema = backend.introspect()
        except BaseException:
            backend.close()
            raise
    notes += [str(w.message) for w in caught]
    source = backend.location
    empty = [t.name for t in schema.tables if t.row_count == 0]
    if backend.kind == "mongodb":
        if empty:
            notes.append(
                f"collections without documents: {', '.join(empty)}; the server is only read, so paths through them are "
                "skipped (python -m data_pipeline.mongo_load --db DATA_DIR copies a built data set with synthetic rows)"
            )
        return backend, schema.name, notes, {}, source
    if not (empty and cfg.synthesize_empty):
        return backend, schema.name, notes, {}, source
    backend.close()
    copy = out / SYNTHESIZED_DB
    report = synthesize_rows(source, copy, tables=empty, rows_per_table=cfg.synthetic_rows, seed=cfg.seed)
    filled = ", ".join(f"{t} {n}" for t, n in report.rows.items())
    notes.append(
        f"tables without rows: {', '.join(empty)}; synthetic rows ({filled}) written to a copy, {copy} "
        f"(the input {source} is unchanged)"
    )
    notes += [f"synthetic rows: {n}" for n in report.notes]
    if report.fk_violations:
        notes.append(f"synthetic rows break foreign keys: {report.fk_violations}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # already reported for the input
        backend = load_backend("sqlite", copy, descriptions=sidecar, name=name)
        backend.introspect()
    return backend, name, notes, dict(report.rows), source


def _is_sample(cfg: BuildConfig, name: str, source: str) -> bool:
    """True when the build reads a packaged sample database (its cached SQLite build), not a user's file."""
    if cfg.backend != "sqlite" or name not in SAMPLE_NAMES:
        return False
    src = Path(source)
    return src.name == f"{name}.sqlite" and src.parent.resolve() == cache_dir("data").resolve()


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def summarize(
    ds: BuiltDataset,
    cfg: BuildConfig,
    skipped: list[dict[str, str]],
    counters: Counter[str],
    notes: list[str],
    elapsed_s: float,
    *,
    synthesized: dict[str, int] | None = None,
    source_db: str | Path | None = None,
    location: str | None = None,
) -> dict[str, Any]:
    """The numbers saved as ``summary.json`` and printed by the command.

    Keys: ``n_samples``; ``paths`` (legal, used, covered, skipped with reasons); ``per_path``
    (samples per path, plus min/median/max); ``hops`` (paths and samples per hop count);
    ``null_via_share`` (of paths and of samples); ``languages``; ``entity_kinds`` (real/fuzzy/none),
    ``fuzzy_share`` (of the questions with an entity) and ``fuzz_kinds``; ``difficulty``; ``families``; ``splits``; ``templates`` (used, held out);
    ``dropped`` (total and by reason); ``gold_sql`` (min rows, share with rows);
    ``route_ambiguity`` (:func:`~data_pipeline.quality.route_ambiguity`); ``natural_share`` (share
    of questions in a natural style: value named alone, relation verb, question word);
    ``value_index`` (columns, values, capped columns); ``warnings``;
    ``config``; ``elapsed_s``; ``backend``; ``db_path`` (the database the gold queries run on:
    ``location`` when given, e.g. a MongoDB URI, else ``ds.db_path``), ``source_db`` (the
    database given) and ``synthesized_tables`` (table -> synthetic rows; empty when ``db_path``
    is ``source_db``).
    """
    samples = ds.samples
    n = len(samples)
    per_path = Counter(str(s.path) for s in samples)
    per_path_full = {str(p): per_path.get(str(p), 0) for p in ds.graph.legal_paths}
    used = [p for p in ds.graph.legal_paths if str(p) not in {s["path"] for s in skipped}]
    covered = [p for p in used if per_path.get(str(p), 0) > 0]
    counts = [per_path_full[str(p)] for p in used]
    hops_paths = ds.graph.hop_histogram()
    hops_samples = Counter(s.path.hops for s in samples)
    dropped = {k.split("/", 1)[1]: v for k, v in sorted(counters.items()) if k.startswith("dropped/")}
    heldout = heldout_template_ids()
    templates_used = sorted({s.template_id for s in samples})
    train_templates = {s.template_id for s in samples if s.split != "test_heldout"}
    return {
        "db": ds.schema.name,
        "backend": ds.schema.backend,
        "db_path": location if location is not None else str(ds.db_path),
        "source_db": str(source_db if source_db is not None else (location or ds.db_path)),
        "synthesized_tables": dict(synthesized or {}),
        "schema_fingerprint": ds.schema.fingerprint(),
        "n_samples": n,
        "paths": {
            "legal": len(ds.graph.legal_paths),
            "used": len(used),
            "covered": len(covered),
            "skipped": skipped,
        },
        "per_path": {
            "min": min(counts) if counts else 0,
            "median": statistics.median(counts) if counts else 0,
            "max": max(counts) if counts else 0,
            "counts": per_path_full,
        },
        "hops": {
            str(h): {"paths": hops_paths.get(h, 0), "samples": hops_samples.get(h, 0)}
            for h in range(max(hops_paths) + 1)
        },
        "null_via_share": {
            "paths": _share(sum(1 for p in ds.graph.legal_paths if not p.via), len(ds.graph.legal_paths)),
            "samples": _share(sum(1 for s in samples if not s.path.via), n),
        },
        "languages": {lang: sum(1 for s in samples if s.language == lang) for lang in LANGUAGES},
        "entity_kinds": dict(sorted(Counter(s.entity_kind for s in samples).items())),
        "fuzzy_share": _share(sum(1 for s in samples if s.entity_kind == "fuzzy"), sum(1 for s in samples if s.entities)),
        "fuzz_kinds": dict(sorted(Counter(s.entities[0].fuzz for s in samples if s.entity_kind == "fuzzy").items())),
        "difficulty": {d: sum(1 for s in samples if s.difficulty == d) for d in DIFFICULTIES},
        "families": dict(sorted(Counter(s.template_id.split(".")[0] for s in samples).items())),
        "splits": {sp: sum(1 for s in samples if s.split == sp) for sp in GENERATED_SPLITS} | {"human": len(ds.human)},
        "route_ambiguity": route_ambiguity(samples),
        "natural_share": _share(sum(1 for s in samples if s.meta.get("style", "classic") != "classic"), n),
        "value_index": None if ds.values is None else {
            "columns": len(ds.values.columns),
            "values": len(ds.values),
            "capped": [f"{c.table}.{c.column}" for c in ds.values.columns if c.capped],
        },
        "templates": {
            "used": len(templates_used),
            "heldout_used": sum(1 for t in templates_used if t in heldout),
            "heldout_in_other_splits": sorted(train_templates & heldout),
        },
        "dropped": {"total": sum(dropped.values()), **dropped},
        "paraphrase_shortfall": counters.get("paraphrase/shortfall", 0),
        "fuzzy_shortfall": counters.get("fuzzy/shortfall", 0),
        "gold_sql": {
            "min_rows": min(s.n_rows for s in samples) if samples else 0,
            "share_with_rows": _share(sum(1 for s in samples if s.n_rows > 0), n),
        },
        "warnings": notes,
        "config": {
            "backend": cfg.backend,
            "seed": cfg.seed,
            "max_hops": cfg.max_hops,
            "samples_per_path": cfg.samples_per_path,
            "hop_balance": cfg.hop_balance,
            "languages": list(cfg.language_list),
            "real_fraction": cfg.real_fraction,
            "paraphraser": "llm" if cfg.llm_base_url else "rules",
            "synthesize_empty": cfg.synthesize_empty,
            "synthetic_rows": cfg.synthetic_rows,
        },
        "elapsed_s": round(elapsed_s, 3),
    }
