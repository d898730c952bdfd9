"""``python -m evaluation.demo``: the whole route2sql chain on one database, in one command.

Steps (each is also its own command; their outputs land in ``--out``):

1. ``python -m data_pipeline.build``   -> ``OUT/data``        generated questions, paths, gold SQL
2. ``python -m router.train_sft``      -> ``OUT/router_sft``  SFT router (anchor/via/target + value head)
3. ``python -m router.train_ppo``      -> ``OUT/router_ppo``  PPO router, actor and critic from SFT
4. ``python -m evaluation.ab``         -> ``OUT/report``      A/B report: routing methods and SQL conditions

The defaults (Northwind, the offline multilingual-e5-small router encoder and the offline
SmolLM2-135M-Instruct generator, few-shot, compact schema) finish in about 8-9 minutes on 2
idle CPU cores (docs/results/demo.md); the budget flags below trade time for accuracy.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from data_pipeline.cli import parse, run_main
from data_pipeline.errors import ConfigError
from data_pipeline.io import ensure_writable_dir, write_json
from generator.prompt import check_schema_detail


@dataclass
class DemoConfig:
    """Options of the one-command demo."""

    db: str = "northwind"
    """Sample name (northwind, chinook, hospital, projects) or a path to a SQLite file; a bare sample name is the sample even when a file or folder of that name is in the working directory (write ./chinook for that one)."""
    descriptions: str | None = None
    """Optional description sidecar (JSON) for a database given by path."""
    out: str = "runs/demo"
    """Folder for every artefact of the run."""
    encoder: str = "multilingual-e5-small"
    """Router encoder: a built-in name or a Hugging Face encoder directory."""
    generator: str = "SmolLM2-135M-Instruct"
    """Generator: a built-in name, a causal-LM directory or a trained generator folder; empty skips SQL."""
    sft_epochs: int = 8
    """Router SFT epochs at most (early stopping on validation)."""
    ppo_updates: int = 12
    """Router PPO updates."""
    eval_samples: int = 0
    """Test questions routed by every method (0 = the whole test split)."""
    generation_samples: int = 8
    """Test questions the generator answers under each path condition (0 = all); generation is the slow step."""
    max_new_tokens: int = 192
    """Tokens per generated answer at most."""
    schema_detail: Literal["full", "compact"] | None = "compact"
    """Routed schema in the generator's prompts: compact (Table(col, ...) lines, ~3x fewer prompt tokens, keeps the demo under 15 minutes), full, or None for a trained generator's own setting."""
    seed: int = 0
    """Seed of every step."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""

    def __post_init__(self) -> None:
        if self.sft_epochs < 1:
            raise ConfigError(f"must be >= 1, got {self.sft_epochs}", where="--sft-epochs")
        if self.ppo_updates < 0:
            raise ConfigError(f"must be >= 0, got {self.ppo_updates}", where="--ppo-updates")
        check_schema_detail(self.schema_detail)


def run_demo(cfg: DemoConfig) -> dict:
    """Run the four steps; returns the A/B results with a ``timings_s`` entry per step."""
    from data_pipeline import build
    from evaluation import ab
    from router import train_ppo, train_sft

    out = ensure_writable_dir(cfg.out)
    data, sft, ppo, report = out / "data", out / "router_sft", out / "router_ppo", out / "report"
    threads = ["--threads", str(cfg.threads)] if cfg.threads else []
    timings: dict[str, float] = {}

    def step(name: str, fn, argv: list[str]) -> None:  # noqa: ANN001 - each module's main(argv)
        print(f"\n=== {name}: python -m {fn.__module__} {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        fn(argv)
        timings[name] = round(time.perf_counter() - t0, 1)
        print(f"=== {name} done in {timings[name]:.0f} s", flush=True)

    build_args = ["--db", cfg.db, "--out", str(data), "--seed", str(cfg.seed)]
    if cfg.descriptions:
        build_args += ["--descriptions", cfg.descriptions]
    step("build data", build.main, build_args)
    step("router SFT", train_sft.main, ["--data", str(data), "--out", str(sft), "--encoder", cfg.encoder,
                                         "--epochs", str(cfg.sft_epochs), "--seed", str(cfg.seed), *threads])  # fmt: skip
    methods = ["retrieval", "sft"]
    ab_args = ["--data", str(data), "--out", str(report), "--sft-router", str(sft), "--encoder", cfg.encoder,
               "--max-samples", str(cfg.eval_samples), "--generation-samples", str(cfg.generation_samples),
               "--max-new-tokens", str(cfg.max_new_tokens), "--seed", str(cfg.seed)]  # fmt: skip
    if cfg.ppo_updates > 0:
        step("router PPO", train_ppo.main, ["--init", str(sft), "--data", str(data), "--out", str(ppo),
                                             "--total-updates", str(cfg.ppo_updates), "--seed", str(cfg.seed),
                                             *threads])  # fmt: skip
        methods.append("ppo")
        ab_args += ["--ppo-router", str(ppo)]
    ab_args += ["--methods", *methods, "--generator", cfg.generator or ""]
    if cfg.schema_detail:
        ab_args += ["--schema-detail", cfg.schema_detail]
    if not cfg.generator:
        ab_args += ["--conditions"]
    step("A/B evaluation", ab.main, ab_args)
    results = json.loads((report / "ab_results.json").read_text(encoding="utf-8"))
    results["timings_s"] = timings | {"total": round(sum(timings.values()), 1)}
    write_json(report / "ab_results.json", results)
    print(f"\nwall time per step (s): {timings}  total {results['timings_s']['total']:.0f} s")
    print(f"report: {report / 'report.md'}")
    return results


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry point."""
    return run_demo(parse(DemoConfig, argv, description=__doc__))


if __name__ == "__main__":
    run_main(main)
