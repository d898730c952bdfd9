"""``python -m evaluation.demo``: the whole route2sql chain on one database, in one command.

Steps (each is also its own command; their outputs land in ``--out``):

1. ``python -m data_pipeline.build``     -> ``OUT/data``         generated questions, paths, gold SQL, value index
2. ``python -m router.train_sft``        -> ``OUT/router_sft``   SFT router (anchor/via/target + value head), also
                                                              on the question log's scored routes (pseudo-labels,
                                                              p >= 0.6; --sft-pseudo-labels False: without them)
3. ``python -m router.train_ppo``        -> ``OUT/router_ppo``   PPO router, actor and critic from SFT, also trained
                                                              on the sample's question log, whose routes a
                                                              language model scored (no gold routes needed);
   ``python -m router.calibrate``                              both routers' confidence calibrated on the sample's
                                                              human-written development questions (when it has them)
4. ``python -m generator.train_sft``     -> ``OUT/gen_sft``      generator warm start on gold SQL (LoRA)
5. ``python -m generator.train_grpo``    -> ``OUT/gen_grpo``     GRPO from the warm start (DAPO loss, KL 0.01,
                                                              execution reward, smoke test); ``OUT/generator`` is its final model
6. ``python -m evaluation.ab``           -> ``OUT/report/test``  routing methods, and the base / SFT / GRPO generators
   and ``OUT/report/human``                                   with the routed and the gold path, on the generated
                                                              test split and on the human-written questions

The generator writes SQL only (no reasoning), from the routed tables in compact form plus the
database values the question names, and its FROM ... JOIN clause is forced to the path
(route-constrained decoding); its column references are repaired before each query runs
(generator.repair). ``python -m generator.ask --router OUT/router_ppo --generator
OUT/generator "question"`` then answers questions with the trained chain. The budgets are the
options below; measured wall times are in the project's docs/results/e2e.md (15 to 32 minutes
on 2 cores, depending on how busy the machine is).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.cli import parse, run_main
from core.errors import ConfigError, Route2SQLError
from core.io import ensure_writable_dir, write_json


DEV_SETS = Path(__file__).with_name("dev_sets")
"""The sample databases' development questions (written for tuning; never an evaluation set)."""

JUDGED_LOGS = Path(__file__).resolve().parent.parent / "data_pipeline" / "unlabelled" / "judged"
"""The sample databases' question logs for training only, each route scored by the language-model
judge (``python -m generator.judge``); never evaluation questions."""

JUDGED_PPO = ["--unlabelled-ratio", "0.75", "--actor-lr", "3e-5", "--anneal-lr", "False"]
"""PPO settings with a judged question log (docs/results/ppo.md): three episodes in four on the
log, a constant actor learning rate."""


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
    """Base generator: a built-in name or a causal-LM directory; empty skips every SQL step."""
    sft_epochs: int = 8
    """Router SFT epochs at most (early stopping on validation)."""
    sft_pseudo_labels: bool = True
    """Also train the SFT router on the questions of the --ppo-questions file whose best route the language model scored p >= 0.6, labelled with that route (an unscored file adds nothing). On Northwind's development questions the PPO router it leads to was as good as without it, and on its human-written questions it routed 5 points more right."""
    ppo_updates: int = 72
    """Router PPO updates (0 skips PPO). 72 take about 6 minutes on 2 cores."""
    ppo_questions: str = "auto"
    """A file of questions without gold routes (your users' questions, one {"question": ...} per line) that PPO also trains on. Their routes are paid by rules that need no labels, or by a language model's scores once python -m generator.judge has added them to the file (--sft-pseudo-labels then trains SFT on them too). auto: the sample's own scored file when it has one (Northwind, Chinook, hospital); none: the generated questions only."""
    gen_sft_steps: int = 60
    """Generator warm-start steps (batches of --gen-batch-size gold answers; 0 skips generator training). 60 steps see about half of Northwind's training questions; after 30 (a quarter) the GRPO generator answered 22 of 48 generated test questions right, after 60 it answered 29."""
    gen_batch_size: int = 8
    """Gold answers per generator warm-start step."""
    grpo_steps: int = 4
    """GRPO steps after the warm start (0 skips GRPO; the warm start is then the final generator)."""
    calibration_questions: str = "auto"
    """Human-written questions with gold routes (JSONL, the format of the human sets) that the routers' confidence is calibrated on; auto: the sample's development questions when it has them (never its evaluation questions); none: keep the calibration on generated questions."""
    num_generations: int = 8
    """Completions per GRPO prompt (the group the advantage is computed over)."""
    eval_samples: int = 0
    """Test questions routed by every method (0 = the whole test split)."""
    generation_samples: int = 16
    """Test questions each generator answers under each path condition (0 = all)."""
    human_samples: int = 24
    """Human-written questions each generator answers under each path condition (0 = all of them; routing is scored on all)."""
    max_new_tokens: int = 128
    """Tokens per generated answer at most (SQL only: Northwind's longest gold query is about 100)."""
    seed: int = 0
    """Seed of every step."""
    threads: int = 0
    """Torch CPU threads (0: all cores)."""
    progress: bool = True
    """Show each step's progress: bars on a terminal, a line a minute with the rate and time left when the output goes to a file."""

    def __post_init__(self) -> None:
        if self.sft_epochs < 1:
            raise ConfigError(f"must be >= 1, got {self.sft_epochs}", where="--sft-epochs")
        for name in ("ppo_updates", "gen_sft_steps", "grpo_steps", "eval_samples", "generation_samples", "human_samples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"must be >= 0, got {getattr(self, name)}", where="--" + name.replace("_", "-"))
        for name in ("gen_batch_size", "num_generations", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", where="--" + name.replace("_", "-"))


PROMPT = ["--k-examples", "0", "--no-with-reasoning", "--schema-detail", "compact", "--value-linking"]
"""How the demo's generators are prompted and trained: SQL only, compact routed tables, linked values."""

BASE_PROMPT = "?k_examples=1&with_reasoning=false&schema_detail=compact&value_linking=true"
"""The base model is shown one example (it has never seen the answer format)."""


def run_demo(cfg: DemoConfig) -> dict:
    """Run the steps; returns ``{"test": results, "human": results, "timings_s": ...}``."""
    import shutil

    from data_pipeline import build
    from evaluation import ab
    from router import train_ppo, train_sft

    out = ensure_writable_dir(cfg.out)
    data, sft, ppo = out / "data", out / "router_sft", out / "router_ppo"
    gen_sft, gen_grpo, final = out / "gen_sft", out / "gen_grpo", out / "generator"
    threads = ["--threads", str(cfg.threads)] if cfg.threads else []
    quiet = [] if cfg.progress else ["--no-progress"]
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
    log = ppo_question_file(cfg)
    pseudo = ["--pseudo-labels", str(log)] if cfg.sft_pseudo_labels and log is not None else []
    step("router SFT", train_sft.main, ["--data", str(data), "--out", str(sft), "--encoder", cfg.encoder,
                                         "--epochs", str(cfg.sft_epochs), "--seed", str(cfg.seed), *pseudo,
                                         *quiet, *threads])  # fmt: skip
    methods, routers = ["retrieval", "sft"], ["--sft-router", str(sft)]
    if cfg.ppo_updates > 0:
        unlabelled = ["--unlabelled", str(log), *JUDGED_PPO] if log is not None else []
        step("router PPO", train_ppo.main, ["--init", str(sft), "--data", str(data), "--out", str(ppo),
                                             "--total-updates", str(cfg.ppo_updates), "--seed", str(cfg.seed),
                                             *unlabelled, *quiet, *threads])  # fmt: skip
        methods.append("ppo")
        routers += ["--ppo-router", str(ppo)]
    calibration = calibration_file(cfg)
    if calibration is not None:
        from router import calibrate

        for r in [sft] + ([ppo] if cfg.ppo_updates > 0 else []):
            step(f"calibrate {r.name}", calibrate.main, ["--router", str(r), "--data", str(data), "--questions",
                                                          str(calibration), *threads])  # fmt: skip
    generators: list[str] = []
    if cfg.generator:
        generators.append(f"base={cfg.generator}{BASE_PROMPT}")
        if cfg.gen_sft_steps > 0:
            from generator import train_grpo
            from generator import train_sft as gen_train_sft

            tthreads = threads or []
            step("generator SFT", gen_train_sft.main, ["--data", str(data), "--out", str(gen_sft), "--model", cfg.generator,
                                                       *PROMPT, "--max-steps", str(cfg.gen_sft_steps),
                                                       "--batch-size", str(cfg.gen_batch_size), "--learning-rate", "1e-3",
                                                       "--lora-target-modules", "q_proj", "k_proj", "v_proj", "o_proj",
                                                       "gate_proj", "up_proj", "down_proj",
                                                       "--seed", str(cfg.seed), *quiet, *tthreads])  # fmt: skip
            generators.append(f"sft={gen_sft}")
            grpo_ok = False
            if cfg.grpo_steps > 0:
                try:
                    step("generator GRPO", train_grpo.main, ["--data", str(data), "--init", str(gen_sft), "--out", str(gen_grpo),
                                                         *PROMPT, "--max-steps", str(cfg.grpo_steps),
                                                         "--num-generations", str(cfg.num_generations),
                                                         "--max-completion-length", str(cfg.max_new_tokens),
                                                         "--loss-type", "dapo", "--beta", "0.01", "--learning-rate", "5e-5",
                                                         "--dynamic-sampling-signal", "execution", "--smoke-samples", "6",
                                                         "--save-steps", str(cfg.grpo_steps), "--seed", str(cfg.seed),
                                                         *quiet, *tthreads])  # fmt: skip
                    grpo_ok = True
                except Route2SQLError as exc:  # the smoke test refused: too short a warm start for this database
                    print(f"=== generator GRPO skipped: {exc}", flush=True)
                    timings["generator GRPO"] = 0.0
            if final.exists():
                shutil.rmtree(final)
            shutil.copytree(gen_grpo / "final" if grpo_ok else gen_sft, final)
            if grpo_ok:
                generators.append(f"grpo={final}")
    results: dict = {}
    for split, n_gen in (("test", cfg.generation_samples), ("human", cfg.human_samples)):
        report = out / "report" / split
        ab_args = ["--data", str(data), "--out", str(report), "--split", split, *routers, "--encoder", cfg.encoder,
                   "--methods", *methods, "--max-samples", str(cfg.eval_samples if split == "test" else 0),
                   "--generation-samples", str(n_gen), "--max-new-tokens", str(cfg.max_new_tokens),
                   "--constrained", "--repair", "--seed", str(cfg.seed), *quiet]  # fmt: skip
        if generators:
            ab_args += ["--generators", *generators, "--conditions", "routed", "gold"]
        else:
            ab_args += ["--generator", "", "--conditions"]
        try:
            step(f"A/B {split}", ab.main, ab_args)
        except ConfigError as exc:  # a database without human-written questions
            if split == "human" and "has no samples" in exc.message:
                print(f"=== A/B human skipped: {cfg.db} has no human-written questions")
                continue
            raise
        results[split] = json.loads((report / "ab_results.json").read_text(encoding="utf-8"))
    results["timings_s"] = timings | {"total": round(sum(timings.values()), 1)}
    write_json(out / "report" / "demo_results.json", results)
    print(summary_table(results))
    print(f"\nwall time per step (s): {timings}  total {results['timings_s']['total']:.0f} s")
    print(f"reports: {out / 'report' / 'test' / 'report.md'} and {out / 'report' / 'human' / 'report.md'}")
    if cfg.generator:
        print(f"ask it: python -m generator.ask --router {ppo if cfg.ppo_updates else sft} --generator {final} \"your question\"")
    return results


def calibration_file(cfg: DemoConfig) -> Path | None:
    """The questions the routers are calibrated on: ``--calibration-questions``, or with ``auto``
    the sample database's development set (``evaluation/dev_sets/<sample>.jsonl``) when there is one.

    Raises:
        ConfigError: a file given by path that does not exist.
    """
    return _chosen_file(cfg.calibration_questions, DEV_SETS / f"{cfg.db}.jsonl", "--calibration-questions")


def ppo_question_file(cfg: DemoConfig) -> Path | None:
    """The question log PPO trains on beside the generated questions: ``--ppo-questions``, or with
    ``auto`` the sample database's judged log (:data:`JUDGED_LOGS`) when there is one.

    Raises:
        ConfigError: a file given by path that does not exist.
    """
    return _chosen_file(cfg.ppo_questions, JUDGED_LOGS / f"{cfg.db}.jsonl", "--ppo-questions")


def _chosen_file(choice: str, auto: Path, option: str) -> Path | None:
    """``none`` -> None; ``auto`` -> ``auto`` when that file exists, else None; else the path given.

    Raises:
        ConfigError: a path given that is not a file, naming ``option``.
    """
    if choice == "none":
        return None
    if choice == "auto":
        return auto if auto.is_file() else None
    path = Path(choice)
    if not path.is_file():
        raise ConfigError("file not found", where=f"{option} {choice}")
    return path


def summary_table(results: dict) -> str:
    """The demo's closing table: routing full-path accuracy and each generator's execution accuracy,
    on the generated test split and on the human-written questions, with what each row means."""
    lines = ["", "what each row means: route = the router's join path is exactly right; sql = the query's rows equal",
             "the gold query's (Spider's rule). base = the untrained model shown one example; sft = after the warm",
             "start; grpo = after GRPO; routed = the PPO router's path (else SFT's); gold = the labelled path.",
             "n = questions scored: route rows score every question of the split, sql rows only the first",
             "--generation-samples (test) and --human-samples (human) of them, as writing SQL on a CPU is slow.", "",
             f"{'':<22}{'test':>16}{'human':>16}"]  # fmt: skip
    splits = [s for s in ("test", "human") if s in results]

    def cell(split: str, section: str, key: str, metric: str) -> str:
        r = results.get(split, {}).get(section, {}).get(key)
        if not r:
            return f"{'-':>16}"
        n = r.get("n", 0)
        return f"{100 * r.get(metric, 0):>9.1f}% n={n:<4}"

    names = list(dict.fromkeys(k for s in splits for k in results[s].get("routing", {})))
    for m in names:
        lines.append(f"{'route ' + m:<22}" + "".join(cell(s, "routing", m, "full_path_acc") for s in ("test", "human")))
    conds = list(dict.fromkeys(k for s in splits for k in results[s].get("generation", {})))
    for c in conds:
        lines.append(f"{'sql ' + c:<22}" + "".join(cell(s, "generation", c, "execution_accuracy") for s in ("test", "human")))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry point."""
    return run_demo(parse(DemoConfig, argv, description=__doc__))


if __name__ == "__main__":
    run_main(main)
