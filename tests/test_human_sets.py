"""Human-written evaluation sets: each packaged set fits its database, is carried as split ``human``,
is kept apart from the generated samples, and never overlaps them; generated data sets are
realistic enough (value named alone) and their labels learnable (masked-route ambiguity)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_pipeline.backends.registry import load_backend
from core.dataset import load_dataset
from core.errors import DataError
from core.graph import SchemaGraph
from data_pipeline.human_sets import load_human_questions, packaged_human_file
from data_pipeline.pipeline import BuildConfig, build_dataset
from data_pipeline.quality import route_ambiguity
from evaluation.gold_paths import derive_gold_path

SETS = {"northwind": (80, 90), "chinook": (50, 60), "hospital": (50, 60), "projects": (30, 40)}


@pytest.mark.parametrize("name", sorted(SETS))
def test_packaged_set_fits_its_database(name: str) -> None:
    lo, n = SETS[name]
    with load_backend("sqlite", name) as backend:
        graph = SchemaGraph(backend.introspect())
        questions = load_human_questions(packaged_human_file(name), graph, backend, db_name=name)
    assert len(questions) == n >= lo
    zh = sum(q.language == "zh" for q in questions)
    assert zh >= 0.4 * n, f"{zh} of {n} in Chinese"
    assert all(q.split == "human" and q.meta["human"] and q.n_rows > 0 for q in questions)
    # the label follows the same rule as derive_gold_path, except for two COUNT(*) over a join
    disagree = [q.id for q in questions if derive_gold_path(q.sql, graph).path != q.path]
    assert len(disagree) <= 1, disagree


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("northwind", "hospital"):
        folder = tmp_path_factory.mktemp(name)
        build_dataset(BuildConfig(out=folder, db=name))
        out[name] = folder
    return out


def test_human_split_is_kept_apart_and_never_overlaps_training(built: dict[str, Path]) -> None:
    ds = load_dataset(built["northwind"])
    assert len(ds.human) == 90 and all(s.split == "human" for s in ds.human)
    assert not any(s.split == "human" for s in ds.samples)
    assert ds.split("human") == ds.human
    generated = {" ".join(s.question.lower().split()) for s in ds.samples}
    human = {" ".join(s.question.lower().split()) for s in ds.human}
    assert generated.isdisjoint(human)
    assert (built["northwind"] / "human.jsonl").is_file() and (built["northwind"] / "values.json").is_file()


@pytest.mark.parametrize("name", ["northwind", "hospital"])
def test_generated_questions_name_values_alone_and_routes_are_learnable(built: dict[str, Path], name: str) -> None:
    summary = json.loads((built[name] / "summary.json").read_text(encoding="utf-8"))
    assert summary["natural_share"] >= 0.40, summary["natural_share"]
    ds = load_dataset(built[name])
    assert route_ambiguity(ds.samples)["by_table"] <= 0.02
    assert summary["route_ambiguity"]["by_table"] <= 0.02


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])  # a byte-order mark, as Windows editors write, is no error
def test_a_users_own_human_file(tmp_path: Path, encoding: str) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text(
        json.dumps({"question": "谁供应 Chai？", "language": "zh", "sql": "SELECT s.CompanyName FROM Products p JOIN Suppliers s "
                    "ON p.SupplierID = s.SupplierID WHERE p.ProductName = 'Chai'",
                    "path": {"anchor": "Products", "via": [], "target": "Suppliers"}}, ensure_ascii=False) + "\n",
        encoding=encoding,
    )  # fmt: skip
    ds, summary = build_dataset(BuildConfig(out=tmp_path / "out", db="northwind", human=f, samples_per_path=3))
    assert [s.question for s in ds.human] == ["谁供应 Chai？"] and summary["splits"]["human"] == 1


def test_a_line_separator_inside_a_question_ends_no_line(tmp_path: Path) -> None:
    """json.dumps(ensure_ascii=False) writes U+2028 and U+0085 raw; str.splitlines() split the
    record there ("mine.jsonl:1: not a JSON object")."""
    rec = {"question": "Who supplies\u2028Chai?\u0085", "sql": "SELECT CompanyName FROM Suppliers",
           "path": {"anchor": "Suppliers", "via": [], "target": "Suppliers"}}  # fmt: skip
    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps(rec, ensure_ascii=False) + "\n" + json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    with load_backend("sqlite", "northwind") as backend:
        got = load_human_questions(f, SchemaGraph(backend.introspect()), backend)
    assert [s.question for s in got] == [rec["question"].strip()] * 2


BAD = [
    ("not json\n", "mine.jsonl:1: not a JSON object"),
    ('{"question": "q", "sql": "SELECT 1"}\n', "mine.jsonl:1: record lacks field 'path'"),
    ('{"question": "", "sql": "SELECT 1", "path": {"anchor": "Orders", "target": "Orders"}}\n', "field 'question'"),
    ('{"question": "q", "sql": "SELECT 1", "path": {"anchor": "Nope", "target": "Orders"}}\n', "unknown table 'Nope'"),
    ('{"question": "q", "sql": "SELECT 1", "path": {"anchor": "Customers", "target": "Products"}}\n', "not a legal join path"),
    ('{"question": "q", "sql": "SELECT nope FROM Orders", "path": {"anchor": "Orders", "target": "Orders"}}\n', "gold SQL fails"),
    ('{"question": "q", "sql": "DELETE FROM Orders", "path": {"anchor": "Orders", "target": "Orders"}}\n', "gold SQL fails"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_human_file_names_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text(text, encoding="utf-8")
    with load_backend("sqlite", "northwind") as backend:
        graph = SchemaGraph(backend.introspect(), max_hops=2)
        with pytest.raises(DataError, match=message):
            load_human_questions(f, graph, backend)


def test_human_split_in_samples_jsonl_is_refused(built: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "ds"
    shutil.copytree(built["northwind"], folder)
    lines = (folder / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[0]) | {"split": "human"}
    (folder / "samples.jsonl").write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="samples.jsonl:1: human-written questions belong in human.jsonl"):
        load_dataset(folder)
