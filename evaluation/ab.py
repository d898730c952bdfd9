"""``python -m evaluation.ab``: every routing method and generation condition on one test split.

Routing methods (each predicts a path per question; table-set and full-path match are scored):

- ``retrieval``: :class:`evaluation.baselines.RetrievalRouter`, untrained encoder similarity;
- ``sft``: the router trained by ``python -m router.train_sft`` (``--sft-router``);
- ``ppo``: the router fine-tuned by ``python -m router.train_ppo`` (``--ppo-router``).

Generation conditions (the generator writes SQL for every question, which is then executed):

- ``no_path``: the whole schema, no route (what a plain text-to-SQL LLM sees);
- ``routed``: the best available router's path (PPO, else SFT, else retrieval);
- ``gold``: the labelled path (the upper bound routing can reach).

The prompts are built as a trained ``--generator`` folder records it was trained (retrieved
examples, schema detail, reasoning, value linking), else, for a base model, with 2 retrieved
examples, reasoning, the full routed schema and linked values; ``--k-examples``,
``--with-reasoning``, ``--schema-detail`` and ``--value-linking`` override either.

Metrics, per method or condition, overall and by hop count / language / entity kind:
``anchor_acc``, ``via_acc``, ``target_acc``, ``full_path_acc``, ``table_set_acc`` (routing);
``execution_success`` (the query runs without error), ``execution_accuracy`` (Spider test-suite
rule: rows as a multiset, order only when the gold query has ORDER BY), ``execution_f1`` (soft
row F1), ``empty_result_rate`` (the query runs and returns nothing) and ``latency_ms`` per
question. Outputs in ``--out``: ``ab_results.json``, ``report.md``, ``routing.png``,
``execution.png`` and ``failures.csv`` (one row per wrong route or wrong result).

MongoDB: ``--backend mongodb --uri mongodb://HOST:PORT/DATABASE`` reads the schema from the server,
checks that it is the data set's (same fingerprint) and routes over it. The generator writes SQL,
scored on SQLite, so generation is refused there and for a data set built with ``--backend
mongodb``: pass ``--generator ""`` to run the routing methods only, e.g.::

    python -m evaluation.ab --data runs/data/nw-mongo --backend mongodb \\
        --uri mongodb://127.0.0.1:27017/northwind --sft-router runs/router_sft --methods sft --generator ""
"""

from __future__ import annotations

import time
from itertools import zip_longest
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import tyro

from data_pipeline.backends.registry import check_backend_options, open_backend
from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import ConfigError, Route2SQLError
from core.graph import JoinPath, SchemaGraph
from core.io import ensure_writable_dir
from core.samples import SPLITS, Sample
from generator.prompt import PromptOverrides, PromptSettings
from router.evaluate import PathPredictor, path_metrics

ROUTING_METHODS = ("retrieval", "sft", "ppo")
CONDITIONS = ("no_path", "routed", "gold")


@dataclass
class ABConfig:
    """Options of the A/B evaluation."""

    data: str
    """Data set folder written by python -m data_pipeline.build."""
    backend: str = "sqlite"
    """Database the routers read the schema from: sqlite (the data set's own schema) or mongodb (--uri; must hold the data set's schema)."""
    uri: str | None = None
    """MongoDB URI for --backend mongodb, e.g. mongodb://127.0.0.1:27017/northwind."""
    out: str = "runs/ab"
    """Folder for ab_results.json, report.md, the plots and failures.csv."""
    split: str = "test"
    """Split to evaluate on: test, test_heldout, validation, train, or human (the human-written questions of the data set)."""
    sft_router: str | None = None
    """Router folder from python -m router.train_sft (method sft)."""
    ppo_router: str | None = None
    """Router folder from python -m router.train_ppo (method ppo)."""
    encoder: str = "multilingual-e5-small"
    """Encoder of the untrained retrieval baseline."""
    methods: tuple[str, ...] = ROUTING_METHODS
    """Routing methods to run; those without a checkpoint are skipped with a note."""
    generator: str | None = "SmolLM2-135M-Instruct"
    """Generator: a model name, a causal-LM directory or a trained generator folder; empty skips generation."""
    generators: tuple[str, ...] = ()
    """Several generators side by side as NAME=MODEL_OR_FOLDER (e.g. base=SmolLM2-135M-Instruct sft=runs/gen_sft); replaces --generator; results are NAME/condition. A generator's own prompt settings may follow a ?, e.g. base=SmolLM2-135M-Instruct?k_examples=1&with_reasoning=false&schema_detail=compact&value_linking=true."""
    conditions: tuple[str, ...] = CONDITIONS
    """Generation conditions to run."""
    max_samples: int = 0
    """Evaluate at most this many samples of the split (0 = all), taken evenly across paths."""
    generation_samples: int = 0
    """Of those, generate SQL for at most this many (0 = all); generation is the slow part."""
    max_new_tokens: int = 192
    """Tokens per generated answer at most."""
    batch_size: int = 8
    """Prompts per generate call."""
    prompt: Annotated[PromptOverrides, tyro.conf.OmitArgPrefixes] = field(default_factory=PromptOverrides)
    """Prompt settings for every generator; each one not given is what that generator was trained with (a base model: 2 examples, reasoning, full schema, linked values)."""
    constrained: bool = False
    """Route-constrained decoding: once a query writes FROM, its FROM ... JOIN clause is the path's (no_path is never constrained)."""
    rerank_model: str | None = None
    """Also route with the PPO router (else the SFT one) whose ten best routes a language model rescores (method rerank; the routed condition then uses it): Qwen2.5-Coder-1.5B-Instruct, SmolLM2-135M-Instruct or a local model folder. Slow: about 25 seconds per question on one CPU core."""
    rerank_describe: bool = True
    """With --rerank-model: show the database's table and column descriptions to that model (helps where names are abbreviations; False: names only, faster)."""
    repair: bool = False
    """Repair each generated query from the schema, the question's linked values and its words before it runs (a column written under the wrong joined table, a misspelt column name, a linked value filtered on the wrong column; "above 80" as > 80, a name for "who", a sum of quantities for "how many units")."""
    samples: int = 1
    """Candidate queries per question; above 1, N-1 more are sampled (temperature 0.7) and the answer is voted by result (self-consistency)."""
    timeout_s: float = 5.0
    """Seconds each query may run."""
    seed: int = 0
    """Seed for sample selection and generation."""
    progress: bool = True
    """Show progress: a bar on a terminal, a line a minute with the rate and time left in a log file."""

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"must be one of {', '.join(SPLITS)}, got {self.split!r}", where="--split")
        for m in self.methods:
            if m not in ROUTING_METHODS:
                raise ConfigError(f"unknown method {m!r}; choose from {', '.join(ROUTING_METHODS)}", where="--methods")
        for c in self.conditions:
            if c not in CONDITIONS:
                raise ConfigError(f"unknown condition {c!r}; choose from {', '.join(CONDITIONS)}", where="--conditions")
        if self.max_samples < 0 or self.generation_samples < 0:
            raise ConfigError("must be >= 0", where="--max-samples/--generation-samples")
        if self.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {self.batch_size}", where="--batch-size")
        if self.max_new_tokens < 1:
            raise ConfigError(f"must be >= 1, got {self.max_new_tokens}", where="--max-new-tokens")
        if self.samples < 1:
            raise ConfigError(f"must be >= 1, got {self.samples}", where="--samples")
        for g in self.generators:
            name, sep, path = g.partition("=")
            if not sep or not name or not path or "/" in name:
                raise ConfigError(f"expected NAME=MODEL_OR_FOLDER, got {g!r}", where="--generators")
            generator_prompt(path)  # the settings after ? must parse
        if not self.timeout_s > 0 or self.timeout_s == float("inf"):  # also refuses NaN
            raise ConfigError(f"must be a positive number of seconds, got {self.timeout_s}", where="--timeout-s")
        check_backend_options(self.backend, None, self.uri, db_required=False)
        if self.backend == "mongodb" and self.generates:
            raise ConfigError(NO_GENERATION_ON_MONGODB, where="--generator")

    @property
    def generates(self) -> bool:
        """Whether SQL generation runs (a generator and at least one condition)."""
        return bool((self.generator or self.generators) and self.conditions)

    def generator_list(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(name, model or folder, prompt overrides)`` of each generator to run; one unnamed ("") for --generator."""
        if self.generators:
            out = []
            for g in self.generators:
                name, _, spec = g.partition("=")
                path, overrides = generator_prompt(spec)
                out.append((name, path, overrides))
            return out
        return [("", self.generator, {})] if self.generator else []


def generator_prompt(spec: str) -> tuple[str, dict[str, Any]]:
    """Split ``MODEL?key=value&...`` into the model and its prompt overrides (PromptSettings fields).

    >>> generator_prompt("SmolLM2-135M-Instruct?k_examples=1&with_reasoning=false")
    ('SmolLM2-135M-Instruct', {'k_examples': 1, 'with_reasoning': False})
    >>> generator_prompt("runs/gen")
    ('runs/gen', {})

    Raises:
        ConfigError: an unknown key or a value of the wrong kind (``where="--generators"``).
    """
    from dataclasses import fields

    path, _, query = spec.partition("?")
    types = {f.name: f.type for f in fields(PromptSettings)}
    out: dict[str, Any] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        if key not in types:
            raise ConfigError(f"unknown prompt setting {key!r}; settings are {', '.join(types)}", where="--generators")
        if key == "k_examples":
            if not value.isdigit():
                raise ConfigError(f"k_examples must be a whole number, got {value!r}", where="--generators")
            out[key] = int(value)
        elif key in ("with_reasoning", "value_linking"):
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ConfigError(f"{key} must be true or false, got {value!r}", where="--generators")
            out[key] = value.lower() in ("true", "1", "yes")
        else:
            out[key] = value
    return path, out


NO_GENERATION_ON_MONGODB = (
    'the generator writes SQL, scored on SQLite; on MongoDB pass --generator "" to evaluate the routing methods only'
)


def server_dataset(cfg: ABConfig, ds: BuiltDataset) -> BuiltDataset:
    """``ds`` with the schema read from ``cfg.uri`` (``--backend mongodb``), or ``ds`` itself for sqlite;
    its samples, human split and value index are kept.

    Raises:
        ConfigError: the server's schema has another fingerprint than the data set's
            (``where="--uri"``). SchemaError: the server cannot be reached.
    """
    if cfg.backend != "mongodb":
        return ds
    with open_backend("mongodb", None, cfg.uri) as backend:
        schema = backend.introspect()
    if schema.fingerprint() != ds.schema.fingerprint():
        raise ConfigError(
            f"the server's schema {schema.name!r} (fingerprint {schema.fingerprint()}) is not the data set's "
            f"{ds.schema.name!r} (fingerprint {ds.schema.fingerprint()}) in {cfg.data}",
            where="--uri",
        )
    return replace(ds, schema=schema, graph=SchemaGraph(schema, max_hops=ds.graph.max_hops))  # its human split and value index kept


def select_samples(samples: Sequence[Sample], n: int) -> list[Sample]:
    """At most ``n`` samples (all when ``n == 0``), round-robin over paths so every path keeps a share.

    The paths take turns by hop count (first 0-hop path, first 1-hop path, ..., second 0-hop
    path, ...), so a small ``n`` covers every hop count even when the split is sorted by path.

    >>> from core.graph import JoinPath
    >>> mk = lambda i, a, t=None: Sample(str(i), "db", "q", "en", JoinPath(a, (), t or a), "SELECT 1")
    >>> [s.id for s in select_samples([mk(0, "a"), mk(1, "a"), mk(2, "b"), mk(3, "b")], 2)]
    ['0', '2']
    >>> [s.id for s in select_samples([mk(0, "a"), mk(1, "b"), mk(2, "c"), mk(3, "a", "b")], 2)]
    ['0', '3']
    """
    if n == 0 or n >= len(samples):
        return list(samples)
    by_path: dict[JoinPath, list[Sample]] = {}
    for s in samples:
        by_path.setdefault(s.path, []).append(s)
    by_hops: dict[int, list[list[Sample]]] = {}
    for path, queue in by_path.items():
        by_hops.setdefault(path.hops, []).append(queue)
    turns = zip_longest(*(by_hops[h] for h in sorted(by_hops)))
    queues = [q for turn in turns for q in turn if q is not None]
    out: list[Sample] = []
    i = 0
    while len(out) < n:
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return sorted(out, key=lambda s: samples.index(s))


def table_set_acc(predicted: Sequence[JoinPath], samples: Sequence[Sample]) -> float:
    """Share of predictions whose set of tables equals the gold path's (direction-blind)."""
    if not samples:
        return 0.0
    return sum(set(p.tables) == set(s.path.tables) for p, s in zip(predicted, samples, strict=True)) / len(samples)


def load_routers(
    cfg: ABConfig, ds: BuiltDataset, extra: dict[str, PathPredictor] | None = None
) -> dict[str, Callable[[], PathPredictor]]:
    """Loaders of the routing methods that can run, in the order of ``cfg.methods``, then ``extra``."""
    loaders: dict[str, Callable[[], PathPredictor]] = {}
    for m in cfg.methods:
        if m == "retrieval":
            from evaluation.baselines import RetrievalRouter

            loaders[m] = lambda: RetrievalRouter(ds.graph, cfg.encoder)
        elif m in ("sft", "ppo"):
            ckpt = cfg.sft_router if m == "sft" else cfg.ppo_router
            if ckpt:
                from router.route import Router

                loaders[m] = lambda ckpt=ckpt: Router.from_pretrained(ckpt, ds.graph, values=ds.values)
    for name, predictor in (extra or {}).items():
        loaders[name] = lambda predictor=predictor: predictor
    return loaders


def reranked_router(cfg: ABConfig, ds: BuiltDataset) -> PathPredictor:
    """The PPO router (else the SFT one) reranked by ``cfg.rerank_model``, with the data set's
    training questions as the prompt's examples.

    Raises:
        ConfigError: no router folder is given, or the model is not a causal LM.
    """
    from generator.rerank import RerankConfig, RerankedRouter, RouteReranker
    from router.route import Router

    ckpt = cfg.ppo_router or cfg.sft_router
    if not ckpt:
        raise ConfigError("needs --ppo-router or --sft-router to rerank", where="--rerank-model")
    router = Router.from_pretrained(ckpt, ds.graph, values=ds.values)
    try:
        reranker = RouteReranker.from_pretrained(router, RerankConfig(model=cfg.rerank_model, describe=cfg.rerank_describe),
                                                 ds.split("train"))
    except ConfigError as exc:
        raise ConfigError(exc.message, where="--rerank-model") from exc
    return RerankedRouter(reranker)


def run_routing(
    cfg: ABConfig, ds: BuiltDataset, samples: list[Sample], extra: dict[str, PathPredictor] | None = None
) -> tuple[dict[str, Any], dict[str, list[JoinPath]]]:
    """Route ``samples`` with every available method; returns (metrics by method, predictions by method)."""
    metrics: dict[str, Any] = {}
    predictions: dict[str, list[JoinPath]] = {}
    questions = [s.question for s in samples]
    for name, load in load_routers(cfg, ds, extra).items():
        predictor = load()
        t0 = time.perf_counter()
        preds = predictor.predict_paths(questions)
        elapsed = time.perf_counter() - t0
        m = path_metrics(preds, samples, ds.graph)
        m["table_set_acc"] = table_set_acc(preds, samples)
        m["latency_ms"] = 1000 * elapsed / max(1, len(samples))
        metrics[name] = m
        predictions[name] = preds
    return metrics, predictions


def best_routing_method(predictions: dict[str, list[JoinPath]]) -> str | None:
    """The routed condition uses the reranked router when present, else PPO, else SFT, else the
    first method that ran."""
    for m in ("rerank", "ppo", "sft"):
        if m in predictions:
            return m
    return next(iter(predictions), None)


def _group_exec(rows: list[dict[str, Any]]) -> dict[str, float | int]:
    n = len(rows)
    if n == 0:
        return {"n": 0}
    return {
        "n": n,
        "execution_success": sum(r["ran"] for r in rows) / n,
        "execution_accuracy": sum(r["exact"] for r in rows) / n,
        "execution_f1": sum(r["f1"] for r in rows) / n,
        "empty_result_rate": sum(r["empty"] for r in rows) / n,
        "latency_ms": sum(r["latency_ms"] for r in rows) / n,
    }


def execution_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate per-sample execution rows (keys ran, exact, f1, empty, latency_ms, hops, language,
    entity_kind) into the overall metrics and ``by_hops`` / ``by_language`` / ``by_entity_kind``.

    >>> r = [dict(ran=True, exact=True, f1=1.0, empty=False, latency_ms=10.0, hops=1, language="en", entity_kind="real"),
    ...      dict(ran=False, exact=False, f1=0.0, empty=False, latency_ms=30.0, hops=2, language="zh", entity_kind="fuzzy")]
    >>> m = execution_metrics(r)
    >>> m["execution_accuracy"], m["execution_success"], m["by_hops"]["2"]["execution_accuracy"], m["latency_ms"]
    (0.5, 0.5, 0.0, 20.0)
    """
    out: dict[str, Any] = dict(_group_exec(rows))
    for key in ("hops", "language", "entity_kind"):
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(str(r[key]), []).append(r)
        out[f"by_{key}"] = {k: _group_exec(v) for k, v in sorted(groups.items())}
    return out


def prompt_settings(cfg: ABConfig, generator: str | None = None, overrides: dict[str, Any] | None = None) -> PromptSettings:
    """The prompt settings for ``generator`` (default: ``cfg.generator``): each option given on the
    command line, else the generator's own ``overrides`` (the settings after ``?`` in
    ``--generators``), else what the trained generator folder records it was trained with (a
    generator trained on compact k=0 prompts is evaluated on compact k=0 prompts), else
    :data:`generator.prompt.UNTRAINED_PROMPT`.

    Raises:
        ConfigError: the generator names a folder whose ``route2sql_generator.json`` is unreadable,
            or an override is out of range.
    """
    from generator.folders import prompt_settings_for

    generator = cfg.generator if generator is None else generator
    try:
        settings = prompt_settings_for(generator or None, PromptOverrides(**(overrides or {})))
    except Route2SQLError as exc:
        raise ConfigError(exc.message, where="--generator") from exc
    return cfg.prompt.apply(settings)


def run_generation(
    cfg: ABConfig, ds: BuiltDataset, samples: list[Sample], paths_by_condition: dict[str, list[JoinPath | None]],
    ps: PromptSettings, generator: str | None = None,
) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Generate, execute and score SQL for every condition with ``generator`` (default
    ``cfg.generator``), prompting as ``ps`` says; returns (metrics, per-sample rows) by condition.

    With ``cfg.constrained`` a routed or gold path's ``FROM ... JOIN`` clause is forced
    (:mod:`generator.constrained`); with ``cfg.samples > 1`` each question gets ``samples - 1``
    sampled queries beside the greedy one and the answer is voted by result (:mod:`generator.consistency`);
    with ``cfg.repair`` each query is repaired first (:mod:`generator.repair`).
    The greedy answers of all conditions come from one pass, in which a prompt repeated across
    conditions (a routed path equal to the gold one) is answered once; ``latency_ms`` counts the
    generation time per distinct prompt.
    """
    import torch

    from generator.consistency import vote
    from generator.folders import GENERATOR_META, load_policy
    from generator.prompt import prompt_token_ids, sample_messages
    from generator.repair import repair_sql
    from generator.sampling import generate_answers
    from generator.models import ModelConfig
    from generator.retrieval import ExampleRetriever
    from rewards.answer import parse_answer
    from rewards.sql_execution import ExecutionScore, ExecutionScorer

    torch.manual_seed(cfg.seed)
    generator = cfg.generator if generator is None else generator
    assert generator  # checked by the caller
    is_trained = (Path(generator) / GENERATOR_META).is_file()
    try:  # the model options are this command's --generator, not the generator commands' --model
        model_cfg = ModelConfig(model=generator if not is_trained else ModelConfig().model, use_lora=False)
        model, tokenizer, _ = load_policy(model_cfg, generator if is_trained else None)
    except ConfigError as exc:
        raise ConfigError(exc.message, where="--generator") from exc
    retriever = ExampleRetriever(ds.split("train")) if ps.k_examples > 0 else None
    scorer = ExecutionScorer(timeout_s=cfg.timeout_s)
    # a model-written query runs first in a worker process that is killed at its deadline: one
    # SQLite function call (instr or trim over megabyte strings) is not stopped by the timeout
    executor = ExecutionScorer(timeout_s=cfg.timeout_s, workers=1)
    metrics: dict[str, Any] = {}
    rows_by_condition: dict[str, list[dict[str, Any]]] = {}
    linked_by_question: dict[str, list[Any]] = {}
    prompts_by_condition = {
        c: [prompt_token_ids(tokenizer, sample_messages(s, ds, retriever, path=p, prompt=ps)) for s, p in zip(samples, paths, strict=True)]
        for c, paths in paths_by_condition.items()
    }  # fmt: skip
    clauses_by_condition = {
        c: [ds.graph.from_clause(p, quote_all=ps.quote_all_identifiers) if cfg.constrained and p is not None else None
            for p in paths]
        for c, paths in paths_by_condition.items()
    }
    # one greedy pass over every condition: a question whose routed path is the gold one has the
    # same prompt in both conditions and is answered once (generate_answers drops repeats)
    all_prompts = [p for ids in prompts_by_condition.values() for p in ids]
    all_clauses = [c for cs in clauses_by_condition.values() for c in cs]
    t0 = time.perf_counter()
    greedy = generate_answers(model, tokenizer, all_prompts, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size,
                              progress=cfg.progress, join_clauses=all_clauses)  # fmt: skip
    n_distinct = len(set(zip(map(tuple, all_prompts), all_clauses, strict=True)))
    greedy_ms = 1000 * (time.perf_counter() - t0) / max(1, n_distinct)
    for k, (condition, paths) in enumerate(paths_by_condition.items()):
        prompts, clauses = prompts_by_condition[condition], clauses_by_condition[condition]
        answers = greedy[k * len(samples) : (k + 1) * len(samples)]
        t0 = time.perf_counter()
        candidates = [[a] for a in answers]
        if cfg.samples > 1:
            extra = generate_answers(model, tokenizer, [p for p in prompts for _ in range(cfg.samples - 1)],
                                     max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, temperature=0.7,
                                     join_clauses=[c for c in clauses for _ in range(cfg.samples - 1)])  # fmt: skip
            for i in range(len(prompts)):
                candidates[i] += extra[i * (cfg.samples - 1) : (i + 1) * (cfg.samples - 1)]
        gen_ms = greedy_ms + 1000 * (time.perf_counter() - t0) / max(1, len(samples))
        rows = []
        for s, p, cands in zip(samples, paths, candidates, strict=True):
            sqls = [parse_answer(a, require_reasoning=ps.with_reasoning).sql for a in cands]
            if cfg.repair:
                if s.question not in linked_by_question:  # once per question, not per condition
                    linked_by_question[s.question] = ds.values.lookup(s.question) if ds.values is not None else []
                linked = linked_by_question[s.question]
                target = p.target if p is not None else None
                sqls = [repair_sql(q, ds.schema, linked, s.question, target).sql if q else q for q in sqls]
            pick = 0
            if len(sqls) > 1:
                ran = [(k, executor.execute(ds.db_path, q)) for k, q in enumerate(sqls) if q]
                won = vote([r for _, r in ran])
                pick = ran[won][0] if won is not None else 0
            sql = sqls[pick]
            t1 = time.perf_counter()
            first = executor.execute(ds.db_path, sql) if sql else None
            if first is not None and first.timed_out:
                score = ExecutionScore(0.0, False, str(first.error), first)
            else:  # it finishes: scored here, with the gold query's rows
                score = scorer.score(ds.db_path, sql, s.sql)
            exec_ms = 1000 * (time.perf_counter() - t1)
            ran = score.pred is not None and score.pred.ok
            rows.append({
                "condition": condition, "id": s.id, "question": s.question, "language": s.language,
                "hops": s.path.hops, "entity_kind": s.entity_kind, "path": "" if p is None else str(p),
                "gold_path": str(s.path), "gold_sql": s.sql, "pred_sql": sql or "", "ran": ran,
                "exact": bool(score.exact), "f1": float(score.f1 or 0.0),
                "empty": bool(ran and not (score.pred.rows or [])), "reason": score.reason,
                "latency_ms": gen_ms + exec_ms,
            })  # fmt: skip
        metrics[condition] = execution_metrics(rows)
        rows_by_condition[condition] = rows
    executor.close()
    return metrics, rows_by_condition


def evaluate(cfg: ABConfig, extra_methods: dict[str, PathPredictor] | None = None) -> dict[str, Any]:
    """Run the whole A/B evaluation of ``cfg`` and write its outputs; returns the results dict.

    Args:
        cfg: the options.
        extra_methods: more routing methods to compare (name -> anything with ``predict_paths``).

    Raises:
        ConfigError: the split is empty. DataError / CheckpointError: as the loaders raise.
    """
    from evaluation.report import write_report

    out = ensure_writable_dir(cfg.out)
    ds = load_dataset(cfg.data)
    if ds.schema.backend == "mongodb" and cfg.generates:
        raise ConfigError(f"{cfg.data} was built on MongoDB; {NO_GENERATION_ON_MONGODB}", where="--generator")
    ds = server_dataset(cfg, ds)
    samples = select_samples(ds.split(cfg.split), cfg.max_samples)
    if not samples:
        raise ConfigError(f"split {cfg.split!r} of {cfg.data} has no samples", where="--split")
    if cfg.rerank_model is not None:
        extra_methods = (extra_methods or {}) | {"rerank": reranked_router(cfg, ds)}
    routing, predictions = run_routing(cfg, ds, samples, extra_methods)
    results: dict[str, Any] = {
        "config": asdict(cfg),
        "dataset": {"name": ds.schema.name, "split": cfg.split, "n": len(samples), "db_path": str(ds.db_path),
                    "backend": cfg.backend, "schema_source": ds.schema.source},
        "routing": routing,
        "generation": {},
        "notes": [],
    }
    for m in cfg.methods:
        if m not in routing:
            results["notes"].append(f"routing method {m!r} skipped: no checkpoint given")
    gen_rows: dict[str, list[dict[str, Any]]] = {}
    if cfg.generates:
        gen_samples = select_samples(samples, cfg.generation_samples)
        index = {s.id: i for i, s in enumerate(samples)}
        best = best_routing_method(predictions)
        paths: dict[str, list[JoinPath | None]] = {}
        for c in cfg.conditions:
            if c == "no_path":
                paths[c] = [None] * len(gen_samples)
            elif c == "gold":
                paths[c] = [s.path for s in gen_samples]
            elif best is not None:
                paths[c] = [predictions[best][index[s.id]] for s in gen_samples]
                results["generation_routed_by"] = best
            else:
                results["notes"].append("condition 'routed' skipped: no routing method ran")
        results["generation_prompt"] = {}
        for name, generator, overrides in cfg.generator_list():
            ps = prompt_settings(cfg, generator, overrides)
            metrics, rows = run_generation(cfg, ds, gen_samples, paths, ps, generator)
            prefix = f"{name}/" if name else ""
            results["generation_prompt"][name or "generator"] = ps.to_dict()
            results["generation"] |= {prefix + c: m for c, m in metrics.items()}
            gen_rows |= {prefix + c: [r | {"condition": prefix + c} for r in rs] for c, rs in rows.items()}
        results["generation_options"] = {"constrained": cfg.constrained, "samples": cfg.samples, "repair": cfg.repair}
        results["dataset"]["n_generation"] = len(gen_samples)
    write_report(out, results, samples, predictions, gen_rows)
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command-line entry point; prints the headline table and where the report is."""
    from evaluation.report import headline_table

    cfg = parse(ABConfig, argv, description=__doc__)
    results = evaluate(cfg)
    print(headline_table(results))
    print(f"report: {Path(cfg.out) / 'report.md'}")
    return results


if __name__ == "__main__":
    run_main(main)
