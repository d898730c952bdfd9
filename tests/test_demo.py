"""The one-command demo's choices of inputs: which questions SFT and PPO train on beside the generated ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from evaluation.demo import JUDGED_LOGS, JUDGED_PPO, DemoConfig, ppo_question_file, run_demo


def test_ppo_trains_on_the_samples_judged_question_log(tmp_path: Path) -> None:
    for sample in ("northwind", "chinook", "hospital"):
        got = ppo_question_file(DemoConfig(db=sample))
        assert got == JUDGED_LOGS / f"{sample}.jsonl" and got.is_file()
        assert '"judge"' in got.read_text(encoding="utf-8").splitlines()[0]
    assert ppo_question_file(DemoConfig(db="projects")) is None  # its log has no judged routes
    assert ppo_question_file(DemoConfig(db=str(tmp_path / "mine.sqlite"))) is None
    assert ppo_question_file(DemoConfig(db="northwind", ppo_questions="none")) is None
    own = tmp_path / "log.jsonl"
    own.write_text('{"question": "Who supplies Chai?"}\n', encoding="utf-8")
    assert ppo_question_file(DemoConfig(db="northwind", ppo_questions=str(own))) == own
    with pytest.raises(ConfigError, match="--ppo-questions"):
        ppo_question_file(DemoConfig(db="northwind", ppo_questions=str(tmp_path / "missing.jsonl")))


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("db", "judged", "pseudo"), [("northwind", True, None), ("northwind", True, False),
                                                     ("projects", False, True)])
def test_the_demo_passes_the_log_and_its_settings_to_sft_and_ppo(db: str, judged: bool, pseudo: bool | None,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """None: the default, which trains the SFT router on the judged log's pseudo-labels."""
    from data_pipeline import build
    from router import train_ppo, train_sft

    seen: list[list[str]] = []
    sft_seen: list[list[str]] = []

    def ppo_main(argv: list[str]) -> None:
        seen.append(argv)
        raise _Stop

    monkeypatch.setattr(build, "main", lambda argv: None)
    monkeypatch.setattr(train_sft, "main", sft_seen.append)
    monkeypatch.setattr(train_ppo, "main", ppo_main)
    with pytest.raises(_Stop):
        run_demo(DemoConfig(db=db, out=str(tmp_path / "demo"), progress=False,
                            **({} if pseudo is None else {"sft_pseudo_labels": pseudo})))
    (sft_argv,) = sft_seen
    if judged and pseudo is not False:
        assert sft_argv[sft_argv.index("--pseudo-labels") + 1] == str(JUDGED_LOGS / f"{db}.jsonl")
    else:
        assert "--pseudo-labels" not in sft_argv
    (argv,) = seen
    assert argv[argv.index("--total-updates") + 1] == "72"
    if judged:
        assert argv[argv.index("--unlabelled") + 1] == str(JUDGED_LOGS / f"{db}.jsonl")
        i = argv.index(JUDGED_PPO[0])
        assert argv[i : i + len(JUDGED_PPO)] == JUDGED_PPO
    else:
        assert "--unlabelled" not in argv and JUDGED_PPO[0] not in argv
