"""The unlabelled question logs (data_pipeline/unlabelled/) stay apart from every evaluation set."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNLABELLED = sorted((ROOT / "data_pipeline" / "unlabelled").glob("*.jsonl"))
EVALUATION = sorted((ROOT / "data_pipeline" / "human").glob("*.jsonl")) + sorted(
    (ROOT / "evaluation" / "dev_sets").glob("*.jsonl"))


def normalise(question: str) -> str:
    """Case, full-width forms, spaces and punctuation removed: 'Who is X?' == 'who is x'."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", question).casefold())


def questions(path: Path) -> list[str]:
    return [json.loads(line)["question"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_sample_database_has_a_log() -> None:
    assert [p.stem for p in UNLABELLED] == ["chinook", "hospital", "northwind", "projects"]
    assert len(EVALUATION) >= 8


@pytest.mark.parametrize("path", UNLABELLED, ids=lambda p: p.stem)
def test_no_unlabelled_question_is_an_evaluation_question(path: Path) -> None:
    held = {normalise(q) for e in EVALUATION for q in questions(e)}
    shared = [q for q in questions(path) if normalise(q) in held]
    assert shared == []


@pytest.mark.parametrize("path", UNLABELLED, ids=lambda p: p.stem)
def test_log_is_valid_and_has_no_duplicates(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 100
    assert {r["lang"] for r in rows} == {"en", "zh"}
    normalised = [normalise(r["question"]) for r in rows]
    assert len(set(normalised)) == len(normalised)


def test_normalise_matches_what_a_person_would_call_the_same_question() -> None:
    assert normalise("Which artist has the most albums?") == normalise("which artist  has the most ALBUMS")
    assert normalise("心内科有哪些医生？") == normalise("心内科有哪些医生?")
    assert normalise("Who supplies Tofu?") != normalise("Who supplies Konbu?")


JUDGED = sorted((ROOT / "data_pipeline" / "unlabelled" / "judged").glob("*.jsonl"))


@pytest.mark.parametrize("path", JUDGED, ids=lambda p: p.stem)
def test_a_judged_log_is_its_log_line_for_line_with_a_distribution_over_routes(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    log = [json.loads(line) for line in (path.parent.parent / path.name).read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [{k: v for k, v in r.items() if k != "judge"} for r in rows] == log
    for r in rows:
        routes = r["judge"]["routes"]
        assert len(routes) == 5 and sum(c["p"] for c in routes) == pytest.approx(1.0, abs=1e-5)
        assert all(set(c["path"]) == {"anchor", "via", "target"} and 0.0 <= c["p"] <= 1.0 for c in routes)


def test_the_judged_logs_are_those_of_the_three_databases_ppo_is_measured_on() -> None:
    assert [p.stem for p in JUDGED] == ["chinook", "hospital", "northwind"]
