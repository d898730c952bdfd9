"""``python -m generator.ask``: a question in, its route, SQL and rows out.

    python -m generator.ask --router runs/demo/router_ppo --generator runs/demo/generator "谁供应 Chai？"
    python -m generator.ask --router R --generator G --file questions.jsonl --out answers.jsonl
    python -m generator.ask --router R --generator G --interactive

The chain the project is about, for one question at a time or a file of them:

1. the router predicts the join path and says how sure it is (calibrated confidence, the
   alternatives when it is unsure) and which database values the question names; with
   ``--rerank-model`` a language model rescores its ten best routes (:mod:`generator.rerank`);
2. the generator writes the SQL from a prompt built as it was trained (:class:`~generator.prompt.PromptSettings`
   recorded in its folder), with the linked values as literals; by default the ``FROM ... JOIN``
   clause is the routed path's (:mod:`generator.constrained`), and with ``--samples N`` the
   answer is voted among N sampled queries by their results (:mod:`generator.consistency`);
   before a query runs, column references the schema rules out are repaired, and a few question
   words are honoured: a bound's strictness, a name for "who", a sum of quantities for "how many
   units" (:mod:`generator.repair`; ``--no-repair`` leaves the query as written);
3. the query runs read-only (one SELECT, a hard timeout, capped rows) and the first rows are shown.

``--file`` reads one JSON object per line with a ``question`` (other fields are kept: ``id``);
``--out`` gets one object per line with ``question``, ``path`` (``{anchor, via, target}``),
``confidence``, ``uncertain``, ``alternatives``, ``values``, ``sql``, ``repairs``, ``columns``, ``rows``
(a list of lists, at most ``--max-rows``), ``truncated`` (the query returned more rows than that)
and ``error`` (None, or a one-line reason: no SQL written, the query was refused, failed or timed
out).

``--interactive`` loads the models once and answers each line typed at the ``question>`` prompt
(or piped in) as it comes, until the input ends (Ctrl-D).

In Python: ``AskPipeline.from_pretrained(router_dir, generator_dir).ask("...")``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Annotated, Any

import torch
import tyro

from data_pipeline.backends.sqlite import ExecutionResult
from core.cli import check_text_arguments, parse, run_main
from core.errors import CheckpointError, ConfigError, DataError, SchemaError
from core.graph import JoinPath
from core.io import ensure_writable_file, read_jsonl_lines, terminal_safe, write_jsonl
from data_pipeline.encoders import quiet_loading
from generator.consistency import vote
from generator.folders import GENERATOR_META, load_policy, prompt_settings_for
from generator.prompt import prompt_token_ids
from generator.sampling import generate_answers
from generator.models import ModelConfig
from generator.prompt import PromptOverrides, PromptSettings, build_prompt
from generator.rerank import RerankConfig, RouteReranker, training_examples
from generator.repair import repair_sql
from rewards.answer import parse_answer
from rewards.sql_execution import ExecutionScorer

SHOWN_ROWS = 10
"""Rows printed per answer on the command line."""

FILE_CHUNK = 8
"""Questions answered at a time with --file; the answers file is rewritten (atomically) after each chunk."""

MAX_SAMPLES = 64
"""Most candidate queries per question with self-consistency (OmniSQL votes over 8)."""


@dataclass
class Answer:
    """What :meth:`AskPipeline.ask` returns for one question.

    Attributes:
        question: the question.
        path: the routed join path (None when routing failed: see ``error``).
        confidence: the router's calibrated confidence in ``path``, in ``[0, 1]`` (with a
            reranker: the reranked confidence, :func:`generator.rerank.confidences`).
        uncertain: ``confidence`` is below the router's threshold.
        alternatives: the next most probable paths with their calibrated confidence (the same
            scale as ``confidence``).
        values: the database values the question names (table, column, value, score, ...).
        sql: the generated query (None when the generator wrote none).
        columns: result column names (None unless the query ran).
        rows: the first result rows, each a list (``[]`` unless the query ran).
        truncated: the query returned more rows than ``rows`` holds (``max_rows`` were kept).
        error: None, or a one-line reason the question got no rows.
        candidates: queries considered (1, or ``samples`` with self-consistency).
        repairs: the column references :func:`generator.repair.repair_sql` changed in ``sql``
            (``"Orders.UnitPrice -> \"Order Details\".UnitPrice (requalified)"``), or ``[]``.
    """

    question: str
    path: JoinPath | None = None
    confidence: float = 0.0
    uncertain: bool = True
    alternatives: list[tuple[JoinPath, float]] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)
    sql: str | None = None
    columns: list[str] | None = None
    rows: list[list[Any]] = field(default_factory=list)
    truncated: bool = False
    error: str | None = None
    candidates: int = 1
    repairs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "path": None if self.path is None else self.path.to_dict(),
            "confidence": round(self.confidence, 4),
            "uncertain": self.uncertain,
            "alternatives": [{"path": p.to_dict(), "confidence": round(q, 4)} for p, q in self.alternatives],
            "values": self.values,
            "sql": self.sql,
            "columns": self.columns,
            "rows": [[_jsonable(v) for v in r] for r in self.rows],
            "truncated": self.truncated,
            "error": self.error,
            "candidates": self.candidates,
            "repairs": self.repairs,
        }


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return v


class AskPipeline:
    """A router and a generator bound to one database: questions in, answers with rows out.

    Args:
        router: a :class:`router.route.Router` (its schema is the database's).
        model, tokenizer: the generator (a trained folder loaded by :func:`generator.folders.load_policy`).
        db_path: the SQLite database the queries run on (read-only).
        prompt: how the generator's prompts are built (as it was trained).
        constrained: force the routed path's ``FROM ... JOIN`` clause (:mod:`generator.constrained`).
        repair: repair each query from the schema, the question's linked values and its words
            before it runs (:mod:`generator.repair`).
        samples: candidate queries per question; above 1, sampled at ``temperature`` and voted
            by result (:mod:`generator.consistency`), the greedy answer among them.
        temperature: sampling temperature for the extra candidates.
        seed: seed of the extra candidates' sampling (each :meth:`ask_batch` call draws the same ones).
        max_new_tokens: tokens per generated answer at most.
        timeout_s: seconds each query may run (it runs in a worker process, killed at the deadline).
        max_rows: rows kept per answer.
        reranker: when given, the router's best routes are rescored by this language model
            (:class:`generator.rerank.RouteReranker`) and the query follows its pick.
    """

    def __init__(self, router: Any, model: torch.nn.Module, tokenizer: Any, db_path: str | Path, *,
                 prompt: PromptSettings | None = None, constrained: bool = True, repair: bool = True, samples: int = 1,
                 temperature: float = 0.7, seed: int = 0, max_new_tokens: int = 192, timeout_s: float = 5.0,
                 max_rows: int = 100, reranker: Any = None) -> None:  # fmt: skip
        if samples < 1:
            raise ConfigError(f"must be >= 1, got {samples}", where="--samples")
        self.router = router
        self.model = model
        self.tokenizer = tokenizer
        self.db_path = Path(db_path)
        self.prompt = prompt or PromptSettings(k_examples=0)
        self.constrained = constrained
        self.repair = repair
        self.samples = samples
        self.temperature = temperature
        self.seed = seed
        self.max_new_tokens = max_new_tokens
        self.max_rows = max_rows
        self.reranker = reranker
        # queries run in a worker process killed at the deadline: SQLite cannot interrupt every call
        self.executor = ExecutionScorer(timeout_s=timeout_s, max_rows=max_rows, workers=1).start()

    @classmethod
    def from_pretrained(cls, router_dir: str | Path, generator_dir: str | Path, db: str | Path | None = None,
                        rerank: RerankConfig | None = None, **options: Any) -> AskPipeline:  # fmt: skip
        """Load a router folder and a trained generator folder (or a base model name) for ``db``.

        ``db`` defaults to the database the router's schema was read from. ``rerank``, when
        given, loads its language model to rescore the router's routes (the prompt's examples
        are the router's training questions when their folder is still there). ``options`` go to
        the constructor; ``prompt`` defaults to the generator folder's recorded settings.

        Raises:
            CheckpointError: a folder is not a router / generator, or the router was trained on
                another schema than ``db``'s.
            SchemaError: the database is missing or not SQLite.
        """
        from data_pipeline.datasets import resolve_database
        from router.route import Router

        db_path = resolve_database(str(db)) if db is not None else None
        router = Router.from_pretrained(router_dir, db_path if db_path is not None else None)
        if db_path is None:
            source = router.schema.source
            if not source or not Path(source).is_file():
                raise SchemaError("the router does not record a database file; pass --db", where=router_dir)
            db_path = Path(source)
        gen = Path(generator_dir)
        with quiet_loading():  # no "Loading weights" bar above a one-line answer or error
            if (gen / GENERATOR_META).is_file():
                model, tokenizer, _ = load_policy(ModelConfig(), gen)
            else:  # a base model: a name or a causal-LM folder
                model, tokenizer, _ = load_policy(ModelConfig(model=str(generator_dir)))
            if rerank is not None:
                try:
                    options["reranker"] = RouteReranker.from_pretrained(router, rerank, training_examples(router))
                except ConfigError as exc:
                    raise ConfigError(exc.message, where="--rerank-model") from exc
        # as the generator was trained, without retrieved examples (ask has no training split to draw from)
        options.setdefault("prompt", prompt_settings_for(gen, PromptOverrides(k_examples=0)))
        return cls(router, model, tokenizer, db_path, **options)

    def close(self) -> None:
        """Release the database connections and stop the query worker."""
        self.executor.close()

    def __enter__(self) -> AskPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ask(self, question: str) -> Answer:
        """Route, write and run the SQL of ``question`` (see :class:`Answer`). Never raises for a
        bad question or a bad query: the reason is in ``Answer.error``."""
        return self.ask_batch([question])[0]

    def ask_batch(self, questions: Sequence[str]) -> list[Answer]:
        """:meth:`ask` for many questions; routing and generation run in batches."""
        answers = [Answer(question=q) for q in questions]
        ok = [i for i, q in enumerate(questions) if isinstance(q, str) and q.strip()]
        for i in set(range(len(questions))) - set(ok):
            answers[i].error = "empty question"
        routable = []
        for i in ok:
            try:
                self.router.policy.model.tokenize([questions[i]])
                routable.append(i)
            except DataError as exc:
                answers[i].error = exc.message
        if not routable:
            return answers
        k = 3 if self.reranker is None else max(3, self.reranker.config.top_k)
        routes = self.router.route_batch([questions[i] for i in routable], top_k=k)
        if self.reranker is not None:
            routes = [r.route for r in self.reranker.rerank(routes)]
        values = self.router.policy.space.values
        prompts, clauses, owners = [], [], []
        matches: dict[int, list[Any]] = {}
        for i, r in zip(routable, routes, strict=True):
            a = answers[i]
            a.path, a.confidence, a.uncertain = r.path, r.confidence, r.uncertain
            a.alternatives = [(p, c) for (p, _), c in zip(r.top_k[1:3], r.top_k_confidence[1:3], strict=True)]
            a.values = list(r.values)
            wanted = values is not None and (self.prompt.value_linking or self.repair)
            matches[i] = values.lookup(questions[i]) if wanted else []
            linked = matches[i] if self.prompt.value_linking else []
            messages = build_prompt(questions[i], r.path, self.router.schema, self.router.graph, [], k=0,
                                    with_reasoning=self.prompt.with_reasoning, schema_detail=self.prompt.schema_detail,
                                    values=linked, quote_all=self.prompt.quote_all_identifiers)  # fmt: skip
            ids = prompt_token_ids(self.tokenizer, messages)
            clause = self.router.graph.from_clause(r.path, quote_all=self.prompt.quote_all_identifiers) if self.constrained else None
            for _ in range(self.samples):
                prompts.append(ids)
                clauses.append(clause)
                owners.append(i)
        greedy = generate_answers(self.model, self.tokenizer, prompts[:: self.samples], max_new_tokens=self.max_new_tokens,
                                  join_clauses=clauses[:: self.samples])  # fmt: skip
        texts: dict[int, list[str]] = {i: [t] for i, t in zip(owners[:: self.samples], greedy, strict=True)}
        if self.samples > 1:
            extra_p = [p for k, p in enumerate(prompts) if k % self.samples]
            extra_c = [c for k, c in enumerate(clauses) if k % self.samples]
            extra_o = [o for k, o in enumerate(owners) if k % self.samples]
            sampled = generate_answers(self.model, self.tokenizer, extra_p, max_new_tokens=self.max_new_tokens,
                                       temperature=self.temperature, join_clauses=extra_c, seed=self.seed)  # fmt: skip
            for o, t in zip(extra_o, sampled, strict=True):
                texts[o].append(t)
        for i, cands in texts.items():
            self._finish(answers[i], cands, matches[i])
        return answers

    def _finish(self, answer: Answer, completions: list[str], matches: Sequence[Any]) -> None:
        sqls = [parse_answer(c, require_reasoning=self.prompt.with_reasoning).sql for c in completions]
        fixes: list[tuple[str, ...]] = [() for _ in sqls]
        if self.repair:
            target = answer.path.target if answer.path is not None else None
            repaired = [repair_sql(q, self.router.schema, matches, answer.question, target) if q else None for q in sqls]
            sqls = [r.sql if r is not None else None for r in repaired]
            fixes = [tuple(map(str, r.repairs)) if r is not None else () for r in repaired]
        answer.candidates = len(sqls)
        results = [self.executor.execute(self.db_path, s) if s else None for s in sqls]
        pick = vote([r for r in results if r is not None]) if len(sqls) > 1 else None
        if pick is not None:
            idx = [k for k, r in enumerate(results) if r is not None][pick]
        else:
            idx = 0
        answer.sql = sqls[idx]
        answer.repairs = list(fixes[idx])
        res: ExecutionResult | None = results[idx]
        if answer.sql is None or res is None:
            answer.error = "the generator wrote no SQL"
            return
        if not res.ok:
            answer.error = str(res.error)
            return
        answer.columns = list(res.columns or [])
        answer.rows = [list(r) for r in (res.rows or [])[: self.max_rows]]
        answer.truncated = bool(res.truncated) or len(res.rows or []) > self.max_rows


# --------------------------------------------------------------------------- command line


@dataclass
class AskConfig:
    """Answer questions over a database: route, write SQL, run it read-only."""

    router: Path
    """Router folder (python -m router.train_sft or router.train_ppo --out)."""
    generator: str
    """Trained generator folder (python -m generator.train_grpo --out .../final), or a base model name or folder."""
    questions: Annotated[tuple[str, ...], tyro.conf.Positional] = ()
    """Questions to answer (or use --file)."""
    db: str | None = None
    """SQLite database the queries run on (a sample name or a file); default: the one the router was trained on."""
    file: Path | None = None
    """JSONL input: one {"question": ...} per line."""
    out: Path | None = None
    """JSONL output for --file (one answer per line; rewritten after every 8 questions, so a stopped run keeps the answers so far)."""
    samples: int = 1
    """Candidate queries per question; above 1, sampled and voted by their results (self-consistency; at most 64)."""
    seed: int = 0
    """Random seed of the sampled candidates (with --samples above 1): the same seed gives the same answers."""
    constrained: bool = True
    """Make the query's FROM ... JOIN clause the routed path's."""
    repair: bool = True
    """Before a query runs, fix column references the schema rules out: a column written under the wrong table of its joins, a misspelt column name, a value from the question filtered on a column that does not hold it; and follow the question's words where the query does not: "above 80" is > 80 and "at least 80" is >= 80, "who" is answered by a name, "how many units" by a sum of the quantity column."""
    max_new_tokens: int = 192
    """Tokens per generated answer at most."""
    max_rows: int = 100
    """Rows kept per answer."""
    timeout_s: float = 5.0
    """Seconds each query may run."""
    rerank_model: str | None = None
    """Rescore the router's ten best routes with this language model before writing the query: Qwen2.5-Coder-1.5B-Instruct, SmolLM2-135M-Instruct or a local model folder (slower: about 25 seconds per question on one CPU core)."""
    rerank_describe: bool = True
    """With --rerank-model: show the database's table and column descriptions to that model (helps where names are abbreviations; False: names only, faster)."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    interactive: bool = False
    """Load the models once, then answer each question typed (or piped in) one per line, until the input ends (Ctrl-D)."""

    def __post_init__(self) -> None:
        if self.interactive and (self.questions or self.file is not None):
            raise ConfigError("reads its questions as they are typed; give no questions or --file with it", where="--interactive")
        if not self.questions and self.file is None and not self.interactive:
            raise ConfigError("give a question, --file or --interactive", where="questions")
        if self.questions and self.file is not None:
            raise ConfigError("give questions or --file, not both", where="file")
        if self.file is not None and self.out is None:
            raise ConfigError("--file needs --out for the answers", where="--out")
        for i, q in enumerate(self.questions, 1):
            if not q.strip():
                raise ConfigError(f"question {i} is empty", where="questions")
        check_text_arguments(self.questions)
        if self.file is not None and self.out is not None and Path(self.out).resolve() == Path(self.file).resolve():
            raise ConfigError(f"is the question file {self.file}; writing the answers there would replace the questions",
                              where="--out")  # fmt: skip
        if self.samples < 1:
            raise ConfigError(f"must be >= 1, got {self.samples}", where="--samples")
        if self.samples > MAX_SAMPLES:
            raise ConfigError(f"at most {MAX_SAMPLES} candidates per question, got {self.samples}", where="--samples")
        if not 0 <= self.seed < 2**64:
            raise ConfigError(f"must be a whole number from 0 to 2**64 - 1, got {self.seed}", where="--seed")
        if not (self.timeout_s > 0 and self.timeout_s != float("inf")):
            raise ConfigError(f"must be a positive number of seconds, got {self.timeout_s}", where="--timeout-s")
        if self.max_rows < 1 or self.max_new_tokens < 1:
            raise ConfigError("must be >= 1", where="--max-rows/--max-new-tokens")


def typed_questions(stream: IO[bytes] | None = None) -> Iterator[str]:
    """The questions of ``--interactive``: each non-blank line of ``stream`` (standard input),
    stripped, as it arrives. On a terminal (no ``stream`` given) each is read at a ``question>``
    prompt with line editing. Bytes that are not UTF-8 become U+FFFD, so no line ends the session.
    """
    if stream is None and sys.stdin.isatty():
        import readline  # noqa: F401  (arrow keys and history for input())

        while True:
            try:
                line = input("question> ")
            except EOFError:
                print(file=sys.stderr)
                return
            if line.strip():
                yield line.strip()
    else:
        for raw in stream if stream is not None else sys.stdin.buffer:
            line = raw.decode("utf-8", errors="replace").strip()
            if line:
                yield line


def _print(answer: Answer) -> None:
    """Show one answer; control characters from the question, the model or the data are escaped."""
    _say(f"\nQ: {answer.question}")
    if answer.path is not None:
        flag = "  (uncertain: see the alternatives)" if answer.uncertain else ""
        _say(f"route: {answer.path}  confidence {answer.confidence:.2f}{flag}")
        if answer.uncertain and answer.alternatives:
            for p, q in answer.alternatives:
                _say(f"   or: {p}  confidence {q:.2f}")
    if answer.values:
        _say("values: " + "; ".join(f"{v['table']}.{v['column']} = {v['value']!r}" for v in answer.values[:3]))
    _say(f"SQL: {answer.sql}")
    if answer.repairs:
        _say("repaired: " + "; ".join(answer.repairs))
    if answer.error:
        _say(f"error: {answer.error}")
        return
    _say(" | ".join(answer.columns or []))
    for r in answer.rows[:SHOWN_ROWS]:
        _say(" | ".join(str(v) for v in r))
    _say(_rows_line(answer))


def _say(text: str) -> None:
    print(terminal_safe(text))


def _rows_line(answer: Answer) -> str:
    """How many of the rows were shown, e.g. ``(10 of 11 rows shown)``; with a capped result,
    ``(10 of the first 100 rows shown; the query returned more)``."""
    shown = min(len(answer.rows), SHOWN_ROWS)
    if answer.truncated:
        return f"({shown} of the first {len(answer.rows)} rows shown; the query returned more)"
    if len(answer.rows) > SHOWN_ROWS:
        return f"({shown} of {len(answer.rows)} rows shown)"
    return "(1 row)" if len(answer.rows) == 1 else f"({len(answer.rows)} rows)"


def main(argv: Sequence[str] | None = None) -> list[Answer]:
    """Command-line entry point (module docstring)."""
    cfg = parse(AskConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    if cfg.out is not None:
        ensure_writable_file(cfg.out)
    records: list[dict[str, Any]] = []
    if cfg.file is not None:
        numbered = read_jsonl_lines(cfg.file)
        for line, rec in numbered:  # the file's own line numbers: blank lines are skipped, not counted out
            if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or not rec["question"].strip():
                raise DataError("record needs a non-empty string field 'question'", where=cfg.file, line=line)
        records = [rec for _, rec in numbered]
    questions = [r["question"] for r in records] if records else list(cfg.questions)
    try:
        rerank = RerankConfig(model=cfg.rerank_model, describe=cfg.rerank_describe) if cfg.rerank_model is not None else None
        pipe = AskPipeline.from_pretrained(cfg.router, cfg.generator, cfg.db, rerank=rerank, constrained=cfg.constrained, repair=cfg.repair,
                                           samples=cfg.samples, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens,
                                           timeout_s=cfg.timeout_s, max_rows=cfg.max_rows)  # fmt: skip
    except CheckpointError as exc:
        raise CheckpointError(exc.message, where=exc.where or cfg.router) from exc
    answers: list[Answer] = []
    with pipe:
        if cfg.interactive:
            for q in typed_questions():
                answers.append(pipe.ask(q))
                _print(answers[-1])
            return answers
        if cfg.out is None:
            answers = pipe.ask_batch(questions)
        else:  # a few at a time: progress with rate and ETA, and the answers so far are on disk after each chunk
            from core.progress import progress_bar

            with progress_bar(total=len(questions), desc="answer", unit="question", enabled=len(questions) > FILE_CHUNK) as bar:
                for i in range(0, len(questions), FILE_CHUNK):
                    answers += pipe.ask_batch(questions[i : i + FILE_CHUNK])
                    write_jsonl(cfg.out, ({k: v for k, v in rec.items() if k != "question"} | a.to_dict()
                                          for rec, a in zip(records or [{}] * len(questions), answers, strict=False)))  # fmt: skip
                    bar.update(len(answers) - bar.n)
            print(f"wrote {len(answers)} answers to {cfg.out}", file=sys.stderr)
    if cfg.out is None:
        for a in answers:
            _print(a)
    return answers


if __name__ == "__main__":
    run_main(main)

