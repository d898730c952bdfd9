"""A sample name is the sample, whatever the working directory holds (issue 14 item 6).

``cd $(mktemp -d) && python -m data_pipeline.build --db chinook --out chinook`` failed with
"not a SQLite database (it is a folder)": build creates ``--out`` before it reads ``--db``, and a
file or folder named like a sample shadowed it. The rule now: a bare sample name is the sample;
``./chinook`` or ``chinook.sqlite`` is a path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_pipeline.backends.registry import SQLiteBackend
from core.errors import SchemaError
from data_pipeline.sample_databases import description_file, is_sample_name, load_sample, resolve_database, sample_of


@pytest.fixture
def crowded_cwd(tmp_path: Path, monkeypatch) -> Path:
    """A working directory holding a folder ``chinook`` and a text file ``northwind``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chinook").mkdir()
    (tmp_path / "northwind").write_text("not a database\n")
    return tmp_path


def test_a_bare_sample_name_is_never_shadowed(crowded_cwd: Path) -> None:
    assert resolve_database("chinook") == load_sample("chinook")
    assert resolve_database("northwind") == load_sample("northwind")
    # written as a path, the same names mean the things in the working directory
    with pytest.raises(SchemaError, match="it is a folder"):
        resolve_database("./chinook")
    with pytest.raises(SchemaError, match="bad header"):
        resolve_database("./northwind")
    with pytest.raises(SchemaError, match="bad header"):
        resolve_database(Path("northwind"))  # a Path object is always a path
    with pytest.raises(SchemaError, match="for the sample give the bare name projects"):
        resolve_database("./projects")


@pytest.mark.parametrize(("db", "sample"), [("chinook", True), ("./chinook", False), ("chinook.sqlite", False),
                                             ("data/chinook", False), ("Chinook", False), ("", False)])  # fmt: skip
def test_the_rule(db: str, sample: bool) -> None:
    assert is_sample_name(db) is sample


def test_the_backend_keeps_the_samples_name_and_descriptions(crowded_cwd: Path) -> None:
    with SQLiteBackend("chinook") as backend:
        assert backend.name == "chinook" and backend.descriptions == description_file("chinook")
        assert backend.path == load_sample("chinook")
    # the resolved cache file is still known as the sample (the build passes it on resolved)
    assert sample_of(load_sample("chinook")) == "chinook" and sample_of(crowded_cwd / "chinook") is None
    with SQLiteBackend(load_sample("northwind")) as backend:
        assert backend.name == "northwind" and backend.descriptions == description_file("northwind")


def test_build_with_out_named_like_the_sample(crowded_cwd: Path, tmp_path_factory) -> None:
    from data_pipeline.build import main

    args = ["--db", "chinook", "--samples-per-path", "3", "--languages", "en"]
    main([*args, "--out", "chinook"])  # the folder exists already, and build creates it anyway
    elsewhere = tmp_path_factory.mktemp("clean") / "out"
    main([*args, "--out", str(elsewhere)])
    shadowed = json.loads((crowded_cwd / "chinook" / "schema.json").read_text(encoding="utf-8"))
    clean = json.loads((elsewhere / "schema.json").read_text(encoding="utf-8"))
    assert shadowed["name"] == "chinook" and shadowed == clean  # same database, same descriptions
    assert any(t.get("description") for t in shadowed["tables"])
    assert (crowded_cwd / "chinook" / "samples.jsonl").read_text() == (elsewhere / "samples.jsonl").read_text()


@pytest.mark.parametrize("module", ["data_pipeline.mongo_load", "evaluation.demo"])
def test_help_states_the_rule(module: str, capsys) -> None:
    import importlib

    with pytest.raises(SystemExit):
        importlib.import_module(module).main(["--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "a bare sample name is the sample" in text.lower() and "./chinook" in text


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="needs /dev/null")
def test_a_device_is_not_called_a_folder() -> None:
    """``--db /dev/zero`` said "it is a folder"."""
    with pytest.raises(SchemaError, match=r"/dev/null: not a SQLite database \(it is not a regular file"):
        resolve_database("/dev/null")
