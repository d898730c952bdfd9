"""Data pipeline: introspect a schema, build its graph, enumerate legal paths, generate samples.

The verbs a user needs are exported here::

    from data_pipeline import introspect, SchemaGraph, JoinPath, load_dataset
"""

from data_pipeline.pipeline import BuildConfig, build_dataset
from core.dataset import BuiltDataset, load_dataset, save_dataset
from core.graph import JoinPath, SchemaGraph
from core.samples import Entity, Sample, load_samples, save_samples
from core.schema import Column, ForeignKey, Schema, Table, introspect, quote_ident

__all__ = [
    "BuildConfig",
    "BuiltDataset",
    "Column",
    "Entity",
    "ForeignKey",
    "JoinPath",
    "Sample",
    "Schema",
    "SchemaGraph",
    "Table",
    "build_dataset",
    "introspect",
    "load_dataset",
    "load_samples",
    "quote_ident",
    "save_dataset",
    "save_samples",
]
