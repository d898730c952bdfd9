"""Fit a trained router's confidence to questions people wrote, with their gold routes, so that a
route reported as 70% sure is right about 70% of the time (``python -m router.calibrate``).

A router fits its temperature on generated validation questions (``router.train_sft``), where it
is right nine times in ten. On questions people write it is right about half the time while
still 60-90% confident, so the confidence it reports (and the "uncertain" mark of
``router.route``) says little there. This command fits the temperature again, on a file of
human-written questions with their gold routes (the format of the human sets: one JSON object
per line with ``question``, ``path`` and ``sql``), and writes it into the router's
``config.json``. Only the reported probability changes: the route is the same arg-max.

    python -m router.calibrate --router runs/nw/router_sft --data runs/nw/data \\
        --questions evaluation/dev_sets/northwind.jsonl

Run it last: ``router.train_ppo`` fits the temperature of the router it writes again on generated
validation questions. Use questions that you will not evaluate on: the sample databases' development sets
(``evaluation/dev_sets/``) serve for the built-in samples, never the ``human`` split. The
method is temperature scaling (Guo et al., "On Calibration of Modern Neural Networks",
ICML 2017); what was fitted, on how many questions, and the expected calibration error before and
after on those questions are recorded under ``calibration`` in ``config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.cli import parse, run_main
from core.errors import CheckpointError, ConfigError, DataError

CONFIG_FILE = "config.json"

MIN_QUESTIONS = 10
"""Fewest questions a temperature is fitted on."""

T_RANGE = (0.05, 20.0)
"""The temperatures searched. A fit at the low end is refused (every question routed right, so the fit
would make the router sure of everything); one at the high end is kept (a router that knows nothing
about these questions gets nearly uniform probabilities)."""


@dataclass(frozen=True)
class CalibrationResult:
    """What :func:`calibrate` fitted.

    Attributes:
        n: questions the temperature was fitted on.
        accuracy: share of them routed right (full path).
        temperature_before / temperature: the checkpoint's temperature, and the fitted one.
        nll_before / nll: mean negative log-likelihood of the gold routes (nats) with each.
        ece_before / ece: expected calibration error (10 bins) of the route confidence with each.
    """

    n: int
    accuracy: float
    temperature_before: float
    temperature: float
    nll_before: float
    nll: float
    ece_before: float
    ece: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def calibrate(router: Any, questions: Sequence[str], gold: Sequence[Any]) -> CalibrationResult:
    """Fit the temperature of ``router`` (a :class:`router.route.Router`) on labelled questions.

    Args:
        router: the router, bound to the schema the gold routes belong to.
        questions: ``n`` question strings.
        gold: ``n`` gold :class:`core.graph.JoinPath` routes, legal on the router's schema.

    Returns:
        The fit; ``router.checkpoint.temperature`` is left unchanged (see :func:`save_temperature`).

    Raises:
        DataError: fewer than :data:`MIN_QUESTIONS` questions, ``questions`` and ``gold`` of
            different lengths, a gold route that is not a legal path of the router's schema or a
            question the router cannot read (``line`` = its 1-based position), or a fit that ran
            to the low end of :data:`T_RANGE` (every question routed right: nothing to fit).
    """
    import torch

    from router.calibration import expected_calibration_error, fit_temperature

    if isinstance(questions, str) or len(questions) != len(gold):
        n = "a string" if isinstance(questions, str) else f"{len(questions)} questions"
        raise DataError(f"{n} but {len(gold)} gold routes; give one route per question", where="questions")
    if len(questions) < MIN_QUESTIONS:
        raise DataError(f"{len(questions)} questions; a temperature needs at least {MIN_QUESTIONS}", where="questions")
    space = router.policy.space
    rows = [space.index(path, where="questions", line=i) for i, path in enumerate(gold, 1)]
    log_prob = torch.cat([d.log_prob for d in router.distributions(list(questions))]).double()
    target = torch.tensor(rows)
    correct = log_prob.argmax(-1) == target

    def stats(t: float) -> tuple[float, float]:
        lp = torch.log_softmax(log_prob / t, -1)
        nll = float(-lp.gather(1, target.view(-1, 1)).mean())
        return nll, expected_calibration_error(lp.exp().max(-1).values, correct)

    before = router.temperature
    lo, hi = T_RANGE
    fitted = fit_temperature(log_prob, target, lo, hi)
    if fitted < lo * 1.01:  # only when every question is routed right: sure of everything, which no one should be
        raise DataError(f"the temperature ran to the low end of its range ({fitted:.3g}): every question is routed "
                        f"right; calibrate on more questions, harder ones", where="questions")  # fmt: skip
    nll_before, ece_before = stats(before)
    nll, ece = stats(fitted)
    return CalibrationResult(len(rows), float(correct.double().mean()), before, fitted, nll_before, nll, ece_before, ece)


def save_temperature(router_dir: str | Path, result: CalibrationResult, source: str) -> Path:
    """Write ``result.temperature`` into ``router_dir/config.json`` (atomically), with the fit's
    record under ``calibration`` (``source`` names the questions). Returns the file's path.

    Raises:
        CheckpointError: ``config.json`` is missing or not a JSON object, or cannot be written.
    """
    from core.io import write_json

    path = Path(router_dir) / CONFIG_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CheckpointError("not a router folder (no config.json)", where=router_dir) from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"unreadable config.json ({exc.__class__.__name__})", where=path) from exc
    if not isinstance(doc, dict):
        raise CheckpointError("config.json is not a JSON object", where=path)
    doc["temperature"] = round(result.temperature, 4)
    doc["calibration"] = {"questions": source, "method": "temperature scaling"} | result.to_dict()
    try:
        write_json(path, doc)
    except OSError as exc:
        raise CheckpointError(f"cannot write config.json ({exc.strerror or exc.__class__.__name__})", where=path) from None
    return path


@dataclass
class CalibrateConfig:
    """Options of ``python -m router.calibrate``."""

    router: Path
    """Router folder (from python -m router.train_sft or router.train_ppo); its config.json gets the new temperature."""
    questions: Path
    """Human-written questions with gold routes, one JSON object per line with question, path and sql (the format of the human sets). Do not use the questions you evaluate on."""
    data: Path | None = None
    """Data set folder of the router's database (its schema and value index); default: the router's own copy."""
    retarget: bool = False
    """Allow a data set of another schema than the router was trained on (its temperature is then fitted there)."""
    dry_run: bool = False
    """Print the fit without writing it."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ConfigError(f"must be >= 0, got {self.threads}", where="--threads")


def main(argv: Sequence[str] | None = None) -> CalibrationResult:
    """Command-line entry point (module docstring).

    Raises:
        CheckpointError: a broken router folder, or one trained on another schema.
        DataError: a malformed question file (file and line named), or a gold route that is not legal.
    """
    import torch

    from data_pipeline.human_sets import load_human_questions
    from router.route import Router

    cfg = parse(CalibrateConfig, argv, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    router = Router.from_pretrained(cfg.router, cfg.data, retarget=cfg.retarget)
    samples = load_human_questions(cfg.questions, router.graph)
    try:
        result = calibrate(router, [s.question for s in samples], [s.path for s in samples])
    except DataError as exc:  # name the file, and the line a question's position stands for
        lines = [i for i, text in enumerate(cfg.questions.read_text(encoding="utf-8").splitlines(), 1) if text.strip()]
        line = lines[exc.line - 1] if exc.line is not None and exc.line <= len(lines) else None
        raise DataError(exc.message, where=cfg.questions, line=line) from None
    print(f"{result.n} questions, routed right {result.accuracy:.1%}")
    print(f"temperature {result.temperature_before:.3f} -> {result.temperature:.3f}")
    print(f"negative log-likelihood of the gold routes {result.nll_before:.3f} -> {result.nll:.3f} nats")
    print(f"expected calibration error (10 bins) {result.ece_before:.3f} -> {result.ece:.3f} (on these questions)")
    if result.ece > result.ece_before and result.nll < result.nll_before:
        print(f"  the fit minimises the negative log-likelihood, not the ECE; with {result.n} questions in 10 bins the ECE is"
              " noisy, so judge the temperature by its ECE on other questions (python -m router.evaluate --splits human)")
    if not cfg.dry_run:
        print(f"wrote {save_temperature(cfg.router, result, str(cfg.questions))}")
    return result


if __name__ == "__main__":
    run_main(main)
