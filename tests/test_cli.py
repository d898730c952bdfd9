"""``core.cli.parse``: ``--no-FLAG`` / bare ``--FLAG`` are short for ``--FLAG False`` / ``--FLAG True`` on every boolean field."""

from __future__ import annotations

import dataclasses

import pytest

from core.cli import parse


@dataclasses.dataclass
class _Inner:
    use_x: bool = True
    """Inner switch."""


@dataclasses.dataclass
class _Config:
    progress: bool = True
    """Show a progress bar."""
    no_cache: bool = True
    """A field whose own name starts with no."""
    dry_run: bool = False
    """A switch that is off by default."""
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    """Nested options."""


def test_no_flag_sets_false() -> None:
    cfg = parse(_Config, ["--no-progress", "--no-inner.use-x"])
    assert cfg.progress is False and cfg.inner.use_x is False and cfg.no_cache is True


def test_explicit_boolean_still_parses() -> None:
    cfg = parse(_Config, ["--progress", "False", "--no-cache", "False"])
    assert cfg.progress is False and cfg.no_cache is False


def test_bare_boolean_flag_sets_true() -> None:
    cfg = parse(_Config, ["--progress", "False", "--dry-run", "--no-cache", "False"])
    assert cfg.progress is False and cfg.dry_run is True and cfg.no_cache is False
    assert parse(_Config, ["--progress", "False", "--dry-run"]).dry_run is True


def test_no_flag_of_a_non_boolean_is_still_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(_Config, ["--no-inner"])
    assert exc.value.code == 2


def test_train_sft_accepts_no_progress(tmp_path) -> None:
    from router.train_sft import SFTConfig

    cfg = parse(SFTConfig, ["--data", str(tmp_path), "--out", str(tmp_path / "o"), "--no-progress", "--no-tensorboard"])
    assert cfg.progress is False and cfg.tensorboard is False
