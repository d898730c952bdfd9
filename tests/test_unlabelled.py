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
