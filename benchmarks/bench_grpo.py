"""One GRPO step, ours against TRL's ``GRPOTrainer``, on the same model, prompt and settings.

SPEC section 6's setting: SmolLM2-135M-Instruct in float32, one Northwind prompt of ~165 tokens,
8 generations of exactly 64 new tokens (``min_new_tokens`` = max), temperature 1.0, beta 0.01
(k3 KL to the reference), loss ``dapo``, one policy update per batch, the SQL reward of
``rewards.sql``. Each trainer runs in its own fresh process (so peak RSS is its own) for
``--warmup`` untimed steps and ``--steps`` timed ones, and the step is split into
generation / reference log-probs / reward / policy forward / backward + optimizer.

Two modes, each compared like for like:

- ``lora``: LoRA r=16 on q/k/v/o (dropout 0); the reference is the same network with adapters
  off, in both trainers (TRL does this too when given a ``peft_config``).
- ``full``: every weight trained; both trainers keep a second, frozen copy as the reference.

TRL's split comes from its own profiling hooks (``transformers.generate``,
``_calculate_rewards``, ``_get_per_token_logps_and_entropies`` inside ``_prepare_inputs`` for the
reference and inside ``compute_loss`` for the policy); backward + optimizer is the step's wall
time minus ``_prepare_inputs`` and ``compute_loss``.

TRL is an optional extra for this benchmark only: ``pip install -e ".[bench]"`` (pins trl 1.16.0)::

    python benchmarks/bench_grpo.py                      # both modes, both trainers
    python benchmarks/bench_grpo.py --modes lora --steps 3 --json-out grpo_step.json
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_pipeline.cli import parse, run_main

GENERATIONS = 8
NEW_TOKENS = 64
BETA = 0.01
TEMPERATURE = 1.0
LEARNING_RATE = 1e-6


@dataclass
class Args:
    """Options of the GRPO step benchmark."""

    data: Path | None = None
    """Built Northwind data set (python -m data_pipeline.build --db northwind); default: built into a temp folder."""
    modes: tuple[str, ...] = ("lora", "full")
    """Which training modes to compare: lora, full."""
    trainers: tuple[str, ...] = ("ours", "trl")
    """Which trainers to run: ours, trl."""
    steps: int = 2
    """Timed steps per trainer and mode."""
    warmup: int = 1
    """Untimed steps first (allocator and kernel warm-up)."""
    threads: int | None = None
    """torch threads in each child process; default: torch's choice."""
    parallel: bool = False
    """Run the trainers of a mode side by side (fair on a machine whose load changes; each then has less CPU)."""
    json_out: Path | None = None
    """Also write every result as JSON here."""
    child: str | None = None
    """(internal) run one trainer in this process: ours or trl."""
    payload: Path | None = None
    """(internal) the child's prompt file."""
    mode: str = "lora"
    """(internal) the child's mode."""


# --------------------------------------------------------------------------- the shared prompt


def bench_prompt(data: Path) -> dict[str, Any]:
    """The benchmark's prompt: the answer-format instruction, the route, the join skeleton and
    the question of the first one-join training sample (no schema listing: ~165 tokens)."""
    from data_pipeline.dataset import load_dataset
    from generator.prompt import system_message

    ds = load_dataset(data)
    sample = next(s for s in ds.split("train") if s.path.hops == 1 and s.language == "en")
    user = f"Route: {sample.path}\nJoin skeleton: {ds.graph.from_clause(sample.path)}\nQuestion: {sample.question}"
    messages = [{"role": "system", "content": system_message()}, {"role": "user", "content": user}]
    return {"messages": messages, "gold_sql": sample.sql, "db_path": str(ds.db_path), "sample_id": sample.id}


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


# --------------------------------------------------------------------------- our step


def run_ours(payload: dict[str, Any], mode: str, steps: int, warmup: int) -> dict[str, Any]:
    import torch
    from accelerate import Accelerator

    from data_pipeline.graph import JoinPath
    from data_pipeline.samples import Sample
    from generator.config import GRPOConfig
    from generator.generate import CompletionScorer, prompt_token_ids
    from generator.models import DEFAULT_GENERATOR, ModelConfig, load_generator, make_reference_model
    from generator.train_grpo import (
        CollectStats,
        Prompt,
        PromptStream,
        Rollout,
        assign_advantages,
        collect_groups,
        optimise,
        score_reference,
    )

    torch.manual_seed(0)
    mcfg = ModelConfig(model=DEFAULT_GENERATOR, use_lora=mode == "lora", lora_dropout=0.0)
    model, tok = load_generator(mcfg)
    ref_model = make_reference_model(mcfg) if mode == "full" else None
    cfg = GRPOConfig(data=Path("."), out=Path("."), model=mcfg, num_generations=GENERATIONS,
                     max_completion_length=NEW_TOKENS, temperature=TEMPERATURE, beta=BETA, loss_type="dapo",
                     dynamic_sampling="off", learning_rate=LEARNING_RATE, skip_smoke_test=True)  # fmt: skip
    accelerator = Accelerator(cpu=True)
    scorer_module = accelerator.prepare(CompletionScorer(model, TEMPERATURE))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE)
    sample = Sample("bench", "northwind", "q", "en", JoinPath("x", (), "x"), payload["gold_sql"])
    prompt = Prompt(sample, sample.path, prompt_token_ids(tok, payload["messages"]))
    ro = Rollout(model, tok, [prompt], PromptStream(1), cfg.reward.make_scorer(), Path(payload["db_path"]))
    model.train()
    rows = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        ro.stats = CollectStats()
        groups = collect_groups(ro, cfg, min_new_tokens=NEW_TOKENS)
        ref_s = score_reference(model, groups, TEMPERATURE, ref_model)
        assign_advantages(groups, cfg)
        opt = optimise(accelerator, scorer_module, groups, cfg, optimizer, params)
        total = time.perf_counter() - t0
        if i >= warmup:
            rows.append({"generation": ro.stats.generation_s, "reference": ref_s, "reward": ro.stats.reward_s,
                         "policy_forward": opt.forward_s, "backward_optimizer": opt.backward_s, "step": total,
                         "completion_tokens": int(groups[0].completions.mask.sum())})  # fmt: skip
    return {"prompt_tokens": len(prompt.ids), "rows": rows, "peak_rss_gb": _peak_rss_gb()}


# --------------------------------------------------------------------------- TRL's step


def run_trl(payload: dict[str, Any], mode: str, steps: int, warmup: int) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer
    from trl.extras import profiling

    from generator.models import DEFAULT_GENERATOR, ModelConfig, resolve_generator
    from rewards.sql import SQLRewardConfig, sql_rewards

    events: list[tuple[str, float, float]] = []  # (name, start, end)

    def record(self: Any, duration: float) -> None:
        end = time.perf_counter()
        events.append((self.name, end - duration, end))

    profiling.ProfilingContext._log_metrics = record  # type: ignore[method-assign]
    steps_t: list[tuple[float, float]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            steps_t.append((time.perf_counter(), 0.0))

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            steps_t[-1] = (steps_t[-1][0], time.perf_counter())

    reward_cfg = SQLRewardConfig()
    scorer = reward_cfg.make_scorer()
    db = payload["db_path"]

    def sql_reward(prompts, completions, gold_sql, **kw):  # noqa: ANN001, ANN003
        return sql_rewards(completions, gold_sql, db, reward_cfg, scorer)

    total_steps = warmup + steps
    data = Dataset.from_list([{"prompt": payload["messages"], "gold_sql": payload["gold_sql"]}] * total_steps)
    mcfg = ModelConfig()
    peft_config = None
    if mode == "lora":
        peft_config = LoraConfig(r=mcfg.lora_r, lora_alpha=mcfg.lora_alpha, lora_dropout=0.0,
                                 target_modules=list(mcfg.lora_target_modules), task_type="CAUSAL_LM")  # fmt: skip
    out = tempfile.mkdtemp(prefix="trl-bench-")
    args = TRLGRPOConfig(
        output_dir=out, max_steps=total_steps, per_device_train_batch_size=GENERATIONS, num_generations=GENERATIONS,
        max_completion_length=NEW_TOKENS, generation_kwargs={"min_new_tokens": NEW_TOKENS}, temperature=TEMPERATURE,
        top_k=0, beta=BETA, loss_type="dapo", learning_rate=LEARNING_RATE, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, bf16=False, shuffle_dataset=False, disable_dropout=True, seed=0,
        model_init_kwargs={"dtype": torch.float32},
    )  # fmt: skip
    trainer = GRPOTrainer(model=str(resolve_generator(DEFAULT_GENERATOR)), reward_funcs=sql_reward, args=args,
                          train_dataset=data, peft_config=peft_config, callbacks=[StepTimer()])  # fmt: skip
    prompt_tokens = len(trainer.processing_class.apply_chat_template(payload["messages"], add_generation_prompt=True,
                                                                     tokenize=True, return_dict=True)["input_ids"])  # fmt: skip
    trainer.train()

    def inside(name: str, window: tuple[float, float]) -> float:
        return sum(e - s for n, s, e in events if n.endswith(name) and s >= window[0] - 1e-6 and e <= window[1] + 1e-6)

    def windows(name: str, step: tuple[float, float]) -> list[tuple[float, float]]:
        return [(s, e) for n, s, e in events if n.endswith(name) and s >= step[0] and e <= step[1]]

    rows = []
    for i, step in enumerate(steps_t):
        if i < warmup:
            continue
        prep = windows("_prepare_inputs", step)
        loss = windows("compute_loss", step)
        prep_s = sum(e - s for s, e in prep)
        loss_s = sum(e - s for s, e in loss)
        rows.append({
            "generation": sum(inside("transformers.generate", w) for w in prep),
            "reference": sum(inside("_get_per_token_logps_and_entropies", w) for w in prep),
            "reward": sum(inside("_calculate_rewards", w) for w in prep),
            "policy_forward": loss_s,
            "backward_optimizer": (step[1] - step[0]) - prep_s - loss_s,
            "step": step[1] - step[0],
        })  # fmt: skip
    return {"prompt_tokens": prompt_tokens, "rows": rows, "peak_rss_gb": _peak_rss_gb(), "trl_version": trl.__version__}


# --------------------------------------------------------------------------- parent


PARTS = ("generation", "reference", "reward", "policy_forward", "backward_optimizer", "step")


def _machine(threads: int | None) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    n = threads or torch.get_num_threads()
    return f"{cpu}, {os.cpu_count()} logical cores, torch {torch.__version__} ({n} threads per process), Python {platform.python_version()}"


def _start(args: Args, trainer: str, mode: str, payload_file: Path) -> tuple[subprocess.Popen[str], float, float]:
    cmd = [sys.executable, __file__, "--child", trainer, "--mode", mode, "--payload", str(payload_file),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]  # fmt: skip
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, os.getloadavg()[0], time.perf_counter()


def _finish(run: tuple[subprocess.Popen[str], float, float], trainer: str, mode: str) -> dict[str, Any]:
    proc, load_before, t0 = run
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{trainer}/{mode} failed:\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    return result | {"trainer": trainer, "mode": mode, "wall_s": time.perf_counter() - t0, "load_before": load_before}


def _mean(rows: list[dict[str, float]], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def main() -> None:
    args = parse(Args, description=__doc__)
    if args.child is not None:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        assert args.payload is not None
        payload = json.loads(args.payload.read_text())
        run = run_ours if args.child == "ours" else run_trl
        print(json.dumps(run(payload, args.mode, args.steps, args.warmup)))
        return

    data = args.data
    if data is None:
        from data_pipeline.pipeline import BuildConfig, build_dataset

        data = Path(tempfile.mkdtemp(prefix="bench-grpo-")) / "northwind"
        build_dataset(BuildConfig(db="northwind", out=data, samples_per_path=3))
    payload = bench_prompt(data)
    payload_file = Path(tempfile.mkdtemp(prefix="bench-grpo-")) / "payload.json"
    payload_file.write_text(json.dumps(payload))
    machine = _machine(args.threads)
    print(f"machine: {machine}; load average {os.getloadavg()[0]:.1f}; trainers run "
          f"{'side by side' if args.parallel else 'one after the other'}")
    print(f"setting: SmolLM2-135M-Instruct fp32, 1 prompt x {GENERATIONS} generations x {NEW_TOKENS} new tokens, "
          f"beta {BETA}, loss dapo, temperature {TEMPERATURE}; {args.warmup} warm-up + {args.steps} timed steps each")  # fmt: skip
    results = []
    for mode in args.modes:
        if args.parallel:
            runs = [(t, _start(args, t, mode, payload_file)) for t in args.trainers]
            done = [_finish(run, t, mode) for t, run in runs]
        else:
            done = [_finish(_start(args, t, mode, payload_file), t, mode) for t in args.trainers]
        for r in done:
            results.append(r)
            trainer = r["trainer"]
            print(f"  {trainer}/{mode}: {_mean(r['rows'], 'step'):.2f} s/step, peak RSS {r['peak_rss_gb']:.2f} GB, "
                  f"prompt {r['prompt_tokens']} tokens, load average before {r['load_before']:.1f}", flush=True)  # fmt: skip

    header = "| trainer | mode | " + " | ".join(PARTS) + " | peak RSS (GB) |"
    lines = [header, "|" + "---|" * (len(PARTS) + 3)]
    for r in results:
        cells = " | ".join(f"{_mean(r['rows'], p):.2f}" for p in PARTS)
        lines.append(f"| {r['trainer']} | {r['mode']} | {cells} | {r['peak_rss_gb']:.2f} |")
    print("\nseconds per step (mean of timed steps)")
    print("\n".join(lines))
    for mode in args.modes:
        ours = next((r for r in results if r["trainer"] == "ours" and r["mode"] == mode), None)
        theirs = next((r for r in results if r["trainer"] == "trl" and r["mode"] == mode), None)
        if ours and theirs:
            speed = _mean(theirs["rows"], "step") / _mean(ours["rows"], "step")
            mem = theirs["peak_rss_gb"] / ours["peak_rss_gb"]
            print(f"{mode}: ours is {speed:.2f}x faster per step and uses {mem:.2f}x less peak RSS than TRL "
                  f"{theirs.get('trl_version', '?')}")  # fmt: skip
    if args.json_out:
        from data_pipeline.io import write_json

        write_json(args.json_out, {"machine": machine, "results": results})


if __name__ == "__main__":
    run_main(main)
