"""The schema graph: foreign keys as edges, legal join paths, and the join skeleton of a path.

A *path* is the route a question takes through the schema (seed 002):

- ``anchor``: the table the question starts from (where its filter entity lives),
- ``via``: the ordered tables in between (``()`` is the "null" via),
- ``target``: the table whose data is finally asked for.

A path is *legal* when consecutive tables are joined by a foreign key (either direction) and no
table repeats. Single-table paths (``anchor == target``, ``via == ()``) are legal too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import networkx as nx

from core.errors import DataError, SchemaError
from core.schema import ForeignKey, Schema
from core.sqlite import quote_ident, sql_ident

DEFAULT_MAX_HOPS = 3

MAX_LEGAL_PATHS = 200_000
"""Most legal paths a graph enumerates; more (a dense schema with a large ``max_hops``, or a
hostile ``max_hops`` in a config file) is a :class:`~core.errors.SchemaError`, not hours of
enumeration and gigabytes of paths (the most among the 166 Spider schemas at 3 joins: 537)."""


@dataclass(frozen=True, order=True)
class JoinPath:
    """A route ``anchor -> via... -> target``.

    >>> p = JoinPath("Customers", ("Orders",), "Order Details")
    >>> str(p), p.hops, p.tables
    ('Customers -> Orders -> Order Details', 2, ('Customers', 'Orders', 'Order Details'))
    >>> JoinPath("Orders", (), "Orders").hops
    0
    """

    anchor: str
    via: tuple[str, ...]
    target: str

    def __post_init__(self) -> None:
        if not isinstance(self.via, tuple):
            object.__setattr__(self, "via", tuple(self.via))

    @property
    def tables(self) -> tuple[str, ...]:
        """Tables in route order; a single-table path has one entry."""
        if self.anchor == self.target and not self.via:
            return (self.anchor,)
        return (self.anchor, *self.via, self.target)

    @property
    def hops(self) -> int:
        """Number of joins: ``len(tables) - 1``."""
        return len(self.tables) - 1

    @property
    def via_key(self) -> str:
        """The via as one label: ``"null"`` or the tables joined by ``" -> "``."""
        return " -> ".join(self.via) if self.via else "null"

    def __str__(self) -> str:
        return " -> ".join(self.tables)

    def to_dict(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "via": list(self.via), "target": self.target}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str | None = None, line: int | None = None) -> JoinPath:
        """Read ``{"anchor": ..., "via": [...], "target": ...}`` (``via`` may also be ``"A -> B"``,
        ``"null"`` or absent). DataError names the file and line: a field missing, an anchor or
        target that is not a non-empty string, a via that is not a list of table names."""
        got = repr(d)[:120]
        if not isinstance(d, dict):
            raise DataError(f"path must be an object with anchor, via, target (got {got})", where=where, line=line)
        via = d.get("via") or []
        if isinstance(via, str):
            via = [] if via in ("", "null") else [v.strip() for v in via.split("->")]
        ends = (d.get("anchor"), d.get("target"))
        if not all(isinstance(t, str) and t for t in ends) or not isinstance(via, (list, tuple)) \
                or not all(isinstance(v, str) and v for v in via):
            raise DataError(f"path needs fields anchor, via, target as table names (got {got})", where=where, line=line)
        return cls(d["anchor"], tuple(via), d["target"])


class SchemaGraph:
    """The foreign-key graph of a :class:`Schema` (undirected, one node per table).

    Edges carry every foreign key between the two tables (``data["fks"]``); self-references
    (``Employees.ReportsTo``) are kept on the schema but are not edges, since a path never
    repeats a table.

    Args:
        schema: the schema.
        max_hops: longest path, in joins, that :attr:`legal_paths` enumerates (default 3).
    """

    def __init__(self, schema: Schema, max_hops: int = DEFAULT_MAX_HOPS):
        if max_hops < 0:
            raise SchemaError(f"max_hops must be >= 0, got {max_hops}", where="max_hops")
        self.schema = schema
        self.max_hops = max_hops
        g = nx.Graph()
        g.add_nodes_from(schema.table_names)
        for fk in schema.foreign_keys:
            if fk.table == fk.ref_table:
                continue
            if g.has_edge(fk.table, fk.ref_table):
                g.edges[fk.table, fk.ref_table]["fks"].append(fk)
            else:
                g.add_edge(fk.table, fk.ref_table, fks=[fk])
        self.graph = g

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: :meth:`Schema.to_dict` plus ``max_hops`` (round-trips through :meth:`from_dict`)."""
        return self.schema.to_dict() | {"max_hops": self.max_hops}

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, max_hops: int | None = None) -> SchemaGraph:
        """Inverse of :meth:`to_dict`. ``max_hops`` wins over the recorded one; without either,
        :data:`DEFAULT_MAX_HOPS`.

        Raises:
            KeyError, TypeError, ValueError: a malformed dict (callers name their file).
            SchemaError: a negative ``max_hops``.

        >>> from core.schema import Schema, Table, Column
        >>> g = SchemaGraph(Schema("s", (Table("a", (Column("id"),)),), ()), max_hops=2)
        >>> SchemaGraph.from_dict(g.to_dict()).max_hops, SchemaGraph.from_dict(g.to_dict(), max_hops=1).max_hops
        (2, 1)
        """
        hops = max_hops if max_hops is not None else int(d.get("max_hops", DEFAULT_MAX_HOPS))
        return cls(Schema.from_dict(d), max_hops=hops)

    @cached_property
    def legal_paths(self) -> tuple[JoinPath, ...]:
        """All legal paths up to ``max_hops`` joins, sorted by (hops, anchor, via, target).

        Includes one single-table path per table and, for every ordered pair of distinct tables,
        every simple FK path between them: ``(a, (), t)`` and ``(t, (), a)`` are different routes.

        Raises:
            SchemaError: more than :data:`MAX_LEGAL_PATHS` paths (``max_hops`` named).
        """
        names = self.schema.table_names
        paths = [JoinPath(t, (), t) for t in names]
        if self.max_hops > 0:
            for a in names:
                # one search per anchor towards every other table: each step of it yields a path,
                # so the cap below also bounds the time (a search per pair would first walk every
                # simple path of the component looking for a table it cannot reach)
                for nodes in nx.all_simple_paths(self.graph, a, set(names) - {a}, cutoff=self.max_hops):
                    paths.append(JoinPath(nodes[0], tuple(nodes[1:-1]), nodes[-1]))
                    if len(paths) > MAX_LEGAL_PATHS:
                        raise SchemaError(
                            f"schema {self.schema.name!r} has more than {MAX_LEGAL_PATHS:,} legal paths of up to "
                            f"{self.max_hops} joins; use a smaller max_hops (3 is the default)",
                            where="max_hops",
                        )
        return tuple(sorted(paths, key=lambda p: (p.hops, p.anchor, p.via, p.target)))

    @cached_property
    def junction_tables(self) -> frozenset[str]:
        """Tables that only link others: at least two foreign keys to other tables, and every
        column a primary key or a foreign key (Northwind's ``EmployeeTerritories``, Chinook's
        ``PlaylistTrack``). People ask about the tables they link, rarely about their rows.

        >>> from core.schema import Schema, Table, Column, ForeignKey
        >>> s = Schema("s", (Table("a", (Column("id", primary_key=True),)), Table("b", (Column("id", primary_key=True),)),
        ...     Table("ab", (Column("id", primary_key=True), Column("a_id"), Column("b_id"))),
        ...     Table("c", (Column("a_id"), Column("b_id"), Column("note")))),
        ...     (ForeignKey("ab", "a_id", "a", "id"), ForeignKey("ab", "b_id", "b", "id"),
        ...      ForeignKey("c", "a_id", "a", "id"), ForeignKey("c", "b_id", "b", "id")))
        >>> sorted(SchemaGraph(s).junction_tables)
        ['ab']
        """
        out = set()
        for t in self.schema.tables:
            fk_cols = {c for fk in self.schema.foreign_keys if fk.table == t.name and fk.ref_table != t.name for c in fk.columns}
            if len(fk_cols) >= 2 and all(c.primary_key or c.name in fk_cols for c in t.columns):
                out.add(t.name)
        return frozenset(out)

    @cached_property
    def path_index(self) -> dict[JoinPath, int]:
        """Position of each legal path in :attr:`legal_paths`."""
        return {p: i for i, p in enumerate(self.legal_paths)}

    @cached_property
    def via_options(self) -> tuple[tuple[str, ...], ...]:
        """Distinct via tuples over the legal paths, ``()`` (null) first."""
        return tuple(sorted({p.via for p in self.legal_paths}, key=lambda v: (len(v), v)))

    def is_legal(self, path: JoinPath) -> bool:
        """True when ``path`` is one of :attr:`legal_paths`."""
        return path in self.path_index

    def check_path(self, path: JoinPath, *, where: str | None = None, line: int | None = None) -> JoinPath:
        """Return ``path`` if legal; else DataError naming the unknown table or the missing join."""
        for t in path.tables:
            if not self.schema.has_table(t):
                raise DataError(f"unknown table {t!r} in path {path}", where=where, line=line)
        if not self.is_legal(path):
            raise DataError(f"path {path} is not a legal join path (max {self.max_hops} hops)", where=where, line=line)
        return path

    def edge_fk(self, a: str, b: str) -> ForeignKey:
        """The foreign key used to join ``a`` and ``b`` (the first by column name when several exist)."""
        if not self.graph.has_edge(a, b):
            raise SchemaError(f"no foreign key between {a!r} and {b!r}", where=self.schema.source or self.schema.name)
        return sorted(self.graph.edges[a, b]["fks"], key=lambda f: (f.table, f.column))[0]

    def join_conditions(self, path: JoinPath) -> list[tuple[str, str, ForeignKey]]:
        """``(left_table, right_table, fk)`` for each join along ``path``."""
        t = path.tables
        return [(t[i], t[i + 1], self.edge_fk(t[i], t[i + 1])) for i in range(len(t) - 1)]

    def from_clause(self, path: JoinPath, *, quote_all: bool = False) -> str:
        """The ``FROM ... JOIN ... ON ...`` clause that walks ``path``, identifiers quoted only where
        SQLite needs it (:func:`core.sqlite.sql_ident`), or every one with ``quote_all`` (as the
        gold queries of data sets built before 2026-12-03 wrote them).

        >>> from core.schema import Schema, Table, Column, ForeignKey
        >>> s = Schema("s", (Table("a", (Column("id", primary_key=True),)),
        ...                  Table("b", (Column("id"), Column("a_id")))), (ForeignKey("b", "a_id", "a", "id"),))
        >>> SchemaGraph(s).from_clause(JoinPath("a", (), "b"))
        'FROM a JOIN b ON b.a_id = a.id'
        >>> SchemaGraph(s).from_clause(JoinPath("a", (), "b"), quote_all=True)
        'FROM "a" JOIN "b" ON "b"."a_id" = "a"."id"'
        """
        ident = quote_ident if quote_all else sql_ident
        t = path.tables
        parts = [f"FROM {ident(t[0])}"]
        for _left, right, fk in self.join_conditions(path):
            cond = " AND ".join(
                f"{ident(fk.table)}.{ident(c)} = {ident(fk.ref_table)}.{ident(rc)}" for c, rc in fk.pairs
            )
            parts.append(f"JOIN {ident(right)} ON {cond}")
        return " ".join(parts)

    def skeleton(self, path: JoinPath) -> str:
        """An executable join skeleton: ``SELECT COUNT(*) <from_clause>``."""
        return f"SELECT COUNT(*) {self.from_clause(path)}"

    def hop_histogram(self) -> dict[int, int]:
        """Number of legal paths per hop count."""
        hist: dict[int, int] = {}
        for p in self.legal_paths:
            hist[p.hops] = hist.get(p.hops, 0) + 1
        return dict(sorted(hist.items()))
