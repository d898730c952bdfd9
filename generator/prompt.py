"""The generator's prompt: question, routed path, path schema, join skeleton, few-shot examples.

:func:`build_prompt` returns chat messages (``[{"role": ..., "content": ...}, ...]``) for
``tokenizer.apply_chat_template``:

1. ``system``: the task and the answer format, written out literally::

       <reasoning>
       which tables, joins and filters
       </reasoning>
       <answer>
       SELECT ...
       </answer>

2. One ``user``/``assistant`` pair per example (up to ``k``, the most similar one last, next to
   the real question): the example's question (and its route and join skeleton when a path is
   given), answered by :func:`render_completion` of its gold SQL. SPEC section 6: with a plain
   instruction the base SmolLM2 never wrote the tags; assistant turns that show them are what
   a small model copies.
3. ``user``: the schema, the route and skeleton, and the question.

Two conditions (SPEC section 7 compares them):

- **routed** (``path`` given): only the tables on the path, one line per column with its type,
  key flag, description (plus the Chinese name for a Chinese question) and, for text columns,
  a few sample values; then the ``FROM ... JOIN ... ON ...`` skeleton of the path
  (:meth:`~core.graph.SchemaGraph.from_clause`).
- **no path** (``path=None``): every table in one compact line (``Table(col, col, ...)``) plus
  the foreign keys, and no skeleton.

``schema_detail="compact"`` shows the routed tables in the no-path form instead (names only).

Prompt sizes measured on Northwind's test split with the SmolLM2 tokenizer (chat template
included; median / max tokens): routed full k=3 1870 / 2846, routed full k=0 1169 / 2016,
no path k=3 1123 / 1403. A completion (reasoning + gold SQL) is ~116 tokens. Chinese text
costs SmolLM2 two to three tokens a character, and Northwind's tables have up to 18 columns.

The prompt is deterministic: same inputs, same messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tyro

from core.errors import ConfigError
from core.graph import JoinPath, SchemaGraph
from core.samples import Sample
from core.schema import Column, Schema, Table
from core.sqlite import sql_ident
from core.values import ValueMatch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from core.dataset import BuiltDataset
    from generator.retrieval import ExampleRetriever

SAMPLE_VALUES_SHOWN = 3
"""Sample values listed per column in the routed schema."""

SAMPLE_VALUE_CHARS = 24
"""Longer sample values are cut to this many characters (plus an ellipsis)."""

SCHEMA_DETAILS = ("full", "compact")
"""Values of ``build_prompt(schema_detail=...)``."""


def check_schema_detail(value: str | None) -> None:
    """Refuse a ``--schema-detail`` outside :data:`SCHEMA_DETAILS` (None: "use the default").

    Raises:
        ConfigError: naming ``--schema-detail``.
    """
    if value is not None and value not in SCHEMA_DETAILS:
        raise ConfigError(f"must be one of {', '.join(SCHEMA_DETAILS)}, got {value!r}", where="--schema-detail")

Message = dict[str, str]

def render_completion(sql: str, reasoning: str | None) -> str:
    """The target text for one answer: the exact format :func:`generator.parsing.parse_answer` reads.

    Args:
        sql: the query (trailing semicolons and whitespace are dropped).
        reasoning: the reasoning text, or None for the answer-only format.

    >>> print(render_completion("SELECT 1;", "trivial"))
    <reasoning>
    trivial
    </reasoning>
    <answer>
    SELECT 1
    </answer>
    >>> render_completion("SELECT 1", None)
    '<answer>\\nSELECT 1\\n</answer>'
    """
    body = sql.strip().rstrip(";").rstrip()
    answer = f"<answer>\n{body}\n</answer>"
    if reasoning is None:
        return answer
    return f"<reasoning>\n{reasoning.strip()}\n</reasoning>\n{answer}"


def path_reasoning(path: JoinPath) -> str:
    """A one-line reasoning for an example, derived from its gold path (no model needed).

    >>> path_reasoning(JoinPath("Customers", ("Orders",), "Order Details"))
    'Start at Customers, reach Order Details; join Customers -> Orders -> Order Details.'
    >>> path_reasoning(JoinPath("Orders", (), "Orders"))
    'Everything needed is in Orders; no join.'
    """
    if path.hops == 0:
        return f"Everything needed is in {path.anchor}; no join."
    return f"Start at {path.anchor}, reach {path.target}; join {path}."


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        text = value if len(value) <= SAMPLE_VALUE_CHARS else value[:SAMPLE_VALUE_CHARS] + "..."
        return "'" + text.replace("'", "''").replace("\n", " ") + "'"
    return repr(value)


_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def question_language(question: str) -> str:
    """``"zh"`` when the question holds a CJK character, else ``"en"``.

    >>> question_language("列出饮料类别的产品"), question_language("List all beverages")
    ('zh', 'en')
    """
    return "zh" if _CJK.search(question) else "en"


def _column_line(column: Column, language: str) -> str:
    parts = [f"  - {sql_ident(column.name)} {column.type or 'ANY'}"]
    if column.primary_key:
        parts.append(" primary key")
    words = [column.description] + ([column.zh] if language == "zh" else [])
    if any(words):
        parts.append(": " + "; ".join(w for w in words if w))
    if column.samples and column.is_text:
        shown = ", ".join(_format_value(v) for v in column.samples[:SAMPLE_VALUES_SHOWN])
        parts.append(f" (e.g. {shown})")
    return "".join(parts)


def render_table(table: Table, language: str = "en") -> str:
    """One table in the routed schema: a header line, then one line per column.

    Chinese names (``zh``) are shown only for Chinese questions, and sample values only for
    text columns (the values a question names; ids and amounts say little and cost tokens).

    >>> from core.schema import Column, Table
    >>> t = Table("Order Details", (Column("OrderID", "INTEGER", primary_key=True, samples=(10248, 10249)),
    ...                             Column("Quantity", "INTEGER", description="units ordered", zh="数量"),
    ...                             Column("Note", "TEXT", samples=("rush",))), 2155, zh="订单明细")
    >>> print(render_table(t))
    Table "Order Details" (2155 rows)
      - OrderID INTEGER primary key
      - Quantity INTEGER: units ordered
      - Note TEXT (e.g. 'rush')
    >>> print(render_table(t, "zh").splitlines()[2])
      - Quantity INTEGER: units ordered; 数量
    """
    about = "; ".join(w for w in (table.description, table.zh if language == "zh" else "") if w)
    header = f"Table {sql_ident(table.name)}" + (f": {about}" if about else "") + f" ({table.row_count} rows)"
    return "\n".join([header, *(_column_line(c, language) for c in table.columns)])


def render_path_schema(schema: Schema, path: JoinPath, language: str = "en") -> str:
    """The tables of ``path``, in route order, each as :func:`render_table`."""
    return "\n".join(render_table(schema.table(t), language) for t in path.tables)


def render_compact_schema(schema: Schema, tables: Sequence[str] | None = None) -> str:
    """Each table on one line, then the foreign keys among them (the no-path condition).

    ``tables`` limits it to those tables, in that order (the routed prompt with
    ``schema_detail="compact"``); None shows every table.

    >>> from core.schema import Column, ForeignKey, Schema, Table
    >>> s = Schema("s", (Table("a", (Column("id"),)), Table("b c", (Column("id"), Column("a_id")))),
    ...            (ForeignKey("b c", "a_id", "a", "id"),))
    >>> print(render_compact_schema(s))
    a(id)
    "b c"(id, a_id)
    Foreign keys: "b c".a_id -> a.id
    """
    shown = schema.tables if tables is None else tuple(schema.table(t) for t in tables)
    names = {t.name for t in shown}
    lines = [f"{sql_ident(t.name)}({', '.join(sql_ident(c.name) for c in t.columns)})" for t in shown]
    keys = [fk for fk in schema.foreign_keys if fk.table in names and fk.ref_table in names]
    if keys:
        fks = ", ".join(
            " and ".join(
                f"{sql_ident(fk.table)}.{sql_ident(c)} -> {sql_ident(fk.ref_table)}.{sql_ident(rc)}" for c, rc in fk.pairs
            )
            for fk in keys
        )
        lines.append(f"Foreign keys: {fks}")
    return "\n".join(lines)


def system_message(with_reasoning: bool = True) -> str:
    """The instruction, with the answer format shown literally."""
    if with_reasoning:
        fmt = render_completion("SELECT ...", "which tables, joins and filters answer the question")
    else:
        fmt = render_completion("SELECT ...", None)
    return (
        "You are an expert data analyst. Write one SQLite SELECT query that answers the question, "
        "using only the tables and columns given. Reply in exactly this format and nothing else:\n" + fmt
    )


@dataclass(frozen=True)
class PromptSettings:
    """How a generator's prompts are built: one contract for training, evaluation and ``generator.ask``.

    ``generator.train_sft`` takes these on its command line (the defaults below are its defaults)
    and every trained generator folder records the settings it was trained with (its meta's
    ``prompt``); :meth:`from_recorded` reads them back, so a model is always asked the way it was
    taught. Commands that use a trained generator take :class:`PromptOverrides` instead.

    Raises:
        ConfigError: ``k_examples < 0`` or an unknown ``schema_detail``.
    """

    k_examples: int = 1
    """Retrieved few-shot examples in each prompt (from the training split; a sample is never its own example)."""
    with_reasoning: bool = True
    """Ask for <reasoning>...</reasoning> before <answer>...</answer> (False: the answer alone, shorter and cheaper)."""
    schema_detail: Literal["full", "compact"] = "full"
    """Routed tables with types, descriptions and sample values (full), or as Table(col, ...) lines (compact, ~3x fewer tokens)."""
    value_linking: bool = True
    """List the database values the question names (the data set's value index) as the literals to use."""
    quote_all_identifiers: tyro.conf.Suppress[bool] = False
    """Write every name in the join skeleton (in the prompt, and the forced FROM clause) double-quoted.
    Not an option: ``generator.train_sft`` sets it when the data set's gold queries quote every name
    (data sets built before 2026-12-03), so the model is asked in the style it learned; a folder
    that records no value predates the change, so it stays on."""

    def __post_init__(self) -> None:
        if self.k_examples < 0:
            raise ConfigError(f"must be >= 0, got {self.k_examples}", where="--k-examples")
        check_schema_detail(self.schema_detail)

    def to_dict(self) -> dict[str, Any]:
        """The settings as the JSON object a generator folder records."""
        return asdict(self)

    @classmethod
    def from_recorded(cls, recorded: dict[str, Any], **overrides: Any) -> PromptSettings:
        """Settings from a generator folder's recorded ``prompt`` dict; ``overrides`` that are not
        None win. A folder that records no ``value_linking`` predates it, so it stays off (and one
        without ``quote_all_identifiers`` was trained on fully quoted SQL, so it stays on); any
        other key the folder does not record takes the dataclass default; unknown keys (such as
        ``path``) are ignored."""
        known = {f.name for f in fields(cls)}
        values = {"value_linking": False, "quote_all_identifiers": True} | {k: v for k, v in recorded.items() if k in known}
        values |= {k: v for k, v in overrides.items() if v is not None and k in known}
        return cls(**values)


UNTRAINED_PROMPT = PromptSettings(k_examples=2)
"""How a model that was not trained by this project is prompted unless told otherwise: two
retrieved examples (a base model needs them to write the answer tags), reasoning, the full
routed schema, linked values."""


@dataclass(frozen=True)
class PromptOverrides:
    """Prompt settings given to a command that uses a generator (GRPO, generate, the A/B
    evaluation); each one left at None is what the generator was trained with (its folder's
    recorded :class:`PromptSettings`), or :data:`UNTRAINED_PROMPT`'s for a base model.

    Raises:
        ConfigError: ``k_examples < 0`` or an unknown ``schema_detail``.
    """

    k_examples: int | None = None
    """Retrieved few-shot examples in each prompt; default: as the generator was trained (a base model: 2)."""
    with_reasoning: bool | None = None
    """Ask for <reasoning> before <answer>; default: as the generator was trained (a base model: yes)."""
    schema_detail: Literal["full", "compact"] | None = None
    """full or compact routed schema; default: as the generator was trained (a base model: full)."""
    value_linking: bool | None = None
    """List the values each question names as literals; default: as the generator was trained (a base model: yes)."""

    def __post_init__(self) -> None:
        if self.k_examples is not None and self.k_examples < 0:
            raise ConfigError(f"must be >= 0, got {self.k_examples}", where="--k-examples")
        check_schema_detail(self.schema_detail)

    def given(self) -> dict[str, Any]:
        """The settings that were given (not None)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def apply(self, settings: PromptSettings) -> PromptSettings:
        """``settings`` with every given override in place.

        >>> PromptOverrides(k_examples=0).apply(PromptSettings(k_examples=3, with_reasoning=False))
        PromptSettings(k_examples=0, with_reasoning=False, schema_detail='full', value_linking=True, quote_all_identifiers=False)
        """
        return replace(settings, **self.given())


_QUOTED_TABLE = re.compile(r'\b(?:FROM|JOIN)\s+"([A-Za-z_][A-Za-z0-9_]*)"', re.IGNORECASE)


def quotes_every_identifier(sqls: Iterable[str]) -> bool:
    """True when the gold queries ``sqls`` double-quote names that need no quotes (``FROM "Orders"``),
    as data sets built before 2026-12-03 wrote them; their generators keep that style
    (:attr:`PromptSettings.quote_all_identifiers`).

    >>> quotes_every_identifier(['SELECT "a"."x" FROM "a"']), quotes_every_identifier(['SELECT x FROM "Order Details"'])
    (True, False)
    """
    return any(sql_ident(m) == m for sql in sqls for m in _QUOTED_TABLE.findall(sql))


MAX_VALUES_SHOWN = 3
"""Linked values listed in a prompt at most (best first)."""


@dataclass(frozen=True)
class LinkedLiteral:
    """A value the question names, as the ``table.column = 'value'`` filter a prompt shows.

    ``table`` is a table of the route: the value's own table, or a table whose foreign key
    column references the value's column (the customer id ``'VICTE'`` of ``Customers`` shown as
    ``CustomerCustomerDemo.CustomerID`` when only the junction table is on the route).
    """

    table: str
    column: str
    value: str
    match: ValueMatch

    def render(self) -> str:
        """``Table.column = 'value'``, names quoted only where SQLite needs it."""
        return f"{sql_ident(self.table)}.{sql_ident(self.column)} = {_format_literal(self.value)}"


def route_values(values: Sequence[ValueMatch], path: JoinPath | None, schema: Schema | None = None) -> list[LinkedLiteral]:
    """The literals a prompt lists for ``values`` on ``path`` (value linking), best first.

    Only values stored in a table of ``path`` are kept (all of them without a path), or, given
    ``schema``, values whose column a foreign key of a route table references: they are shown
    as that referencing column. One literal per mention: a match whose words overlap those of
    a better one already kept is left out ("Pavlova Ltd" is the supplier ``Pavlova, Ltd.``, not
    also the product ``Pavlova``; "Simons bistro" is the customer, not also an order's ship
    name). ``values`` come best first, as :meth:`core.values.ValueIndex.lookup` returns them.
    At most :data:`MAX_VALUES_SHOWN`.
    """
    refs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    if schema is not None and path is not None:
        for fk in schema.foreign_keys:
            if fk.table in path.tables:
                for c, rc in fk.pairs:
                    refs.setdefault((fk.ref_table, rc), []).append((fk.table, c))
    kept: list[LinkedLiteral] = []
    for m in values:
        if path is None or m.table in path.tables:
            where = (m.table, m.column)
        elif refs.get((m.table, m.column)):
            where = refs[(m.table, m.column)][0]
        else:
            continue
        if any(m.start < k.match.end and k.match.start < m.end for k in kept):  # the same words, read another way
            continue
        kept.append(LinkedLiteral(where[0], where[1], m.value, m))
        if len(kept) == MAX_VALUES_SHOWN:
            break
    return kept


def render_values(values: Sequence[ValueMatch], path: JoinPath | None, schema: Schema | None = None) -> str:
    """The prompt line of :func:`route_values`: ``Values in the question: T.c = 'v'; ...``, or ``""``.

    >>> from core.values import ValueMatch
    >>> m = ValueMatch("Products", "ProductName", "Tunnbröd", 0.9, 0, 8, False)
    >>> render_values([m], JoinPath("Products", ("Order Details", "Orders"), "Customers"))
    "Values in the question: Products.ProductName = 'Tunnbröd'"
    >>> render_values([m], JoinPath("Orders", (), "Orders"))
    ''
    """
    linked = route_values(values, path, schema)
    if not linked:
        return ""
    return "Values in the question: " + "; ".join(v.render() for v in linked)


def _format_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _question_block(
    question: str, path: JoinPath | None, graph: SchemaGraph, values: Sequence[ValueMatch] = (), quote_all: bool = False
) -> str:
    linked = render_values(values, path, graph.schema)
    lines = [] if path is None else [f"Route: {path}", f"Join skeleton: {graph.from_clause(path, quote_all=quote_all)}"]
    if linked:
        lines.append(linked)
    lines.append(f"Question: {question}")
    return "\n".join(lines)


def build_prompt(
    question: str,
    path: JoinPath | None,
    schema: Schema,
    graph: SchemaGraph,
    examples: Sequence[Sample],
    *,
    k: int = 3,
    with_reasoning: bool = True,
    schema_detail: str = "full",
    values: Sequence[ValueMatch] = (),
    quote_all: bool = False,
) -> list[Message]:
    """Chat messages asking for the SQL of ``question`` (layout in the module docstring).

    Args:
        question: the user's question (English or Chinese).
        path: the routed (or gold) join path; None for the no-path condition.
        schema: the database schema.
        graph: its schema graph (gives the join skeletons).
        examples: similar solved questions, most similar first (e.g. from
            :class:`generator.retrieval.ExampleRetriever`); the first ``k`` are shown.
        k: how many examples to show (0 for none).
        with_reasoning: ask for ``<reasoning>`` before ``<answer>``; when False the format is
            ``<answer>SQL</answer>`` alone (parse with ``require_reasoning=False``).
        schema_detail: ``"full"`` (types, descriptions, sample values: the SPEC prompt) or
            ``"compact"`` (the path's tables as ``Table(col, ...)`` lines, ~8x fewer tokens on
            Northwind, for cheap CPU runs). Ignored for ``path=None``, which is always compact.
        values: the database values the question names (:meth:`core.values.ValueIndex.lookup`),
            listed as the literals to use (:func:`render_values`); examples get none.
        quote_all: write every name in the join skeletons double-quoted
            (:attr:`PromptSettings.quote_all_identifiers`).

    Returns:
        ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``: one system
        message, ``2 * min(k, len(examples))`` example messages, then the final user message.

    Raises:
        ConfigError: ``k < 0`` or an unknown ``schema_detail``.
        SchemaError: ``path`` names a table the schema lacks or a join the graph lacks.
    """
    if k < 0:
        raise ConfigError(f"k must be >= 0, got {k}", where="k")
    if schema_detail not in SCHEMA_DETAILS:
        raise ConfigError(f"must be one of {SCHEMA_DETAILS}, got {schema_detail!r}", where="schema_detail")
    messages: list[Message] = [{"role": "system", "content": system_message(with_reasoning)}]
    shown = list(examples[:k])[::-1]  # the most similar example sits next to the real question
    for ex in shown:
        ex_path = ex.path if path is not None else None
        messages.append({"role": "user", "content": _question_block(ex.question, ex_path, graph, quote_all=quote_all)})
        reasoning = path_reasoning(ex.path) if with_reasoning else None
        messages.append({"role": "assistant", "content": render_completion(ex.sql, reasoning)})
    if path is None:
        context = f"Database {schema.name}, all tables:\n{render_compact_schema(schema)}"
    elif schema_detail == "compact":
        context = f"Tables on the route:\n{render_compact_schema(schema, path.tables)}"
    else:
        context = f"Tables on the route:\n{render_path_schema(schema, path, question_language(question))}"
    messages.append({"role": "user", "content": f"{context}\n\n{_question_block(question, path, graph, values, quote_all)}"})
    return messages


# --------------------------------------------------------------------------- a sample's prompt tokens


def prompt_token_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> list[int]:
    """Token ids of a chat prompt, ending with the assistant turn's opening (generation prompt)."""
    enc = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(enc["input_ids"])


def sample_messages(
    sample: Sample,
    ds: BuiltDataset,
    retriever: ExampleRetriever | None,
    *,
    path: JoinPath | None,
    prompt: PromptSettings,
) -> list[Message]:
    """The prompt of one sample, built as ``prompt`` says: its question, ``path`` (routed, gold or
    None), ``prompt.k_examples`` examples retrieved from the training split (never the sample
    itself; none without a ``retriever``), the schema in ``prompt.schema_detail`` (as in
    :func:`build_prompt`) and, with ``prompt.value_linking``, the values the data set's value
    index finds in the question as the literals to use."""
    k = prompt.k_examples
    examples = retriever.for_sample(sample, k) if retriever is not None and k > 0 else []
    values = ds.values.lookup(sample.question) if prompt.value_linking and ds.values is not None else []
    return build_prompt(sample.question, path, ds.schema, ds.graph, examples, k=k, with_reasoning=prompt.with_reasoning,
                        schema_detail=prompt.schema_detail, values=values, quote_all=prompt.quote_all_identifiers)  # fmt: skip


def route_paths(samples: Sequence[Sample], router_dir: Path | None, ds: BuiltDataset) -> list[JoinPath]:
    """The path each prompt is conditioned on: the router's prediction when ``router_dir`` is
    given, else each sample's gold path.

    Raises:
        CheckpointError: ``router_dir`` is not a router checkpoint, or was trained on another
            schema (see :meth:`router.route.Router.from_pretrained`).
    """
    if router_dir is None:
        return [s.path for s in samples]
    from router.route import Router  # imported here: only runs with a router pay for its modules

    router = Router.from_pretrained(router_dir, schema=ds.graph, values=ds.values)
    return list(router.predict_paths([s.question for s in samples]))
