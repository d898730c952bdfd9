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

Other models and devices (``--model``, ``--device``, ``--load-in-4bit``, ``--dtype``,
``--generations``, ``--new-tokens``): on ``--device cuda`` each child also reports its peak GPU
memory (``torch.cuda.max_memory_allocated``), which the table and the ratios then use. In 4-bit
(bitsandbytes NF4, QLoRA) both trainers load the same NF4 base (ours through
:func:`generator.models.load_generator`, TRL through its ``quantization_config`` argument);
``full`` mode is refused there (4-bit weights cannot be trained).

TRL is an optional extra for this benchmark only: ``pip install -e ".[bench]"`` (pins trl 1.16.0)::

    python benchmarks/bench_grpo.py                      # both modes, both trainers
    python benchmarks/bench_grpo.py --modes lora --steps 3 --json-out grpo_step.json
    python benchmarks/bench_grpo.py --model Qwen2.5-Coder-1.5B-Instruct --device cuda --load-in-4bit \
        --dtype bfloat16 --modes lora          # QLoRA on one GPU (benchmarks/gpu_check.sh)
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

from core.cli import parse, run_main
from core.errors import ConfigError

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
    model: str = "SmolLM2-135M-Instruct"
    """Generator both trainers train: a built-in name (SmolLM2-135M-Instruct, Qwen2.5-Coder-1.5B-Instruct) or a HF causal-LM directory."""
    device: str = "cpu"
    """Where both trainers run: cpu or cuda (one GPU, cuda:0)."""
    load_in_4bit: bool = False
    """Load the base weights in bitsandbytes NF4 (QLoRA; lora mode only)."""
    dtype: str = "float32"
    """Weight dtype, and compute dtype in 4-bit: float32, bfloat16 or float16."""
    generations: int = GENERATIONS
    """Completions per prompt (the GRPO group size G)."""
    new_tokens: int = NEW_TOKENS
    """New tokens per completion (exactly: min_new_tokens = max_new_tokens)."""
    trl_gradient_checkpointing: bool = True
    """TRL's gradient checkpointing (its GRPOConfig default, on); False matches ours, which never recomputes activations."""
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

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"must be cpu or cuda, got {self.device!r}", where="--device")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"must be float32, bfloat16 or float16, got {self.dtype!r}", where="--dtype")
        for m in self.modes:
            if m not in ("lora", "full"):
                raise ConfigError(f"unknown mode {m!r}; choose from lora, full", where="--modes")
        for t in self.trainers:
            if t not in ("ours", "trl"):
                raise ConfigError(f"unknown trainer {t!r}; choose from ours, trl", where="--trainers")
        if self.load_in_4bit and "full" in self.modes:
            raise ConfigError("4-bit weights cannot be trained; use --modes lora with --load-in-4bit", where="--modes")
        if self.generations < 2:
            raise ConfigError(f"must be >= 2 (a group needs two completions), got {self.generations}", where="--generations")
        if self.new_tokens < 1:
            raise ConfigError(f"must be >= 1, got {self.new_tokens}", where="--new-tokens")
        if self.steps < 1 or self.warmup < 0:
            raise ConfigError(f"need --steps >= 1 and --warmup >= 0, got {self.steps} and {self.warmup}", where="--steps")
        if self.device == "cuda" and self.child is None:
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("no CUDA device is visible to torch (torch.cuda.is_available() is False)", where="--device")


# --------------------------------------------------------------------------- the shared prompt


def bench_prompt(data: Path) -> dict[str, Any]:
    """The benchmark's prompt: the answer-format instruction, the route, the join skeleton and
    the question of the first one-join training sample (no schema listing: ~165 tokens)."""
    from core.dataset import load_dataset
    from generator.prompt import system_message

    ds = load_dataset(data)
    sample = next(s for s in ds.split("train") if s.path.hops == 1 and s.language == "en")
    user = f"Route: {sample.path}\nJoin skeleton: {ds.graph.from_clause(sample.path)}\nQuestion: {sample.question}"
    messages = [{"role": "system", "content": system_message()}, {"role": "user", "content": user}]
    return {"messages": messages, "gold_sql": sample.sql, "db_path": str(ds.db_path), "sample_id": sample.id}


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def _peak_gpu_gb(device: str) -> float | None:
    """Peak memory torch allocated on the GPU in this process, GB (None on the CPU)."""
    if device != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated() / 1024**3


def _model_config(args: Args, mode: str):  # noqa: ANN202
    from generator.models import ModelConfig

    return ModelConfig(model=args.model, use_lora=mode == "lora", lora_dropout=0.0, load_in_4bit=args.load_in_4bit,
                       dtype=args.dtype)  # fmt: skip


# --------------------------------------------------------------------------- our step


def run_ours(payload: dict[str, Any], mode: str, args: Args) -> dict[str, Any]:
    import torch
    from accelerate import Accelerator

    from core.graph import JoinPath
    from core.samples import Sample
    from generator.config import GRPOConfig
    from generator.generate import CompletionScorer, prompt_token_ids
    from generator.models import load_generator, make_reference_model
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

    steps, warmup, new_tokens = args.steps, args.warmup, args.new_tokens
    torch.manual_seed(0)
    mcfg = _model_config(args, mode)
    accelerator = Accelerator(cpu=args.device == "cpu")
    model, tok = load_generator(mcfg)
    model.to(accelerator.device)  # as generator.train_grpo does (a 4-bit model is already there)
    ref_model = make_reference_model(mcfg).to(accelerator.device) if mode == "full" else None
    cfg = GRPOConfig(data=Path("."), out=Path("."), model=mcfg, num_generations=args.generations,
                     max_completion_length=new_tokens, temperature=TEMPERATURE, beta=BETA, loss_type="dapo",
                     dynamic_sampling="off", learning_rate=LEARNING_RATE, skip_smoke_test=True)  # fmt: skip
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
        groups = collect_groups(ro, cfg, min_new_tokens=new_tokens)
        ref_s = score_reference(model, groups, TEMPERATURE, ref_model)
        assign_advantages(groups, cfg)
        opt = optimise(accelerator, scorer_module, groups, cfg, optimizer, params)
        total = time.perf_counter() - t0
        if i >= warmup:
            rows.append({"generation": ro.stats.generation_s, "reference": ref_s, "reward": ro.stats.reward_s,
                         "policy_forward": opt.forward_s, "backward_optimizer": opt.backward_s, "step": total,
                         "completion_tokens": int(groups[0].completions.mask.sum())})  # fmt: skip
    return {"prompt_tokens": len(prompt.ids), "rows": rows, "peak_rss_gb": _peak_rss_gb(),
            "peak_gpu_gb": _peak_gpu_gb(args.device)}  # fmt: skip


# --------------------------------------------------------------------------- TRL's step


def run_trl(payload: dict[str, Any], mode: str, args: Args) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig, TrainerCallback
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer
    from trl.extras import profiling

    from generator.models import keep_4bit_trainable_on_cpu, resolve_generator
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

    steps, warmup, n_gen, new_tokens = args.steps, args.warmup, args.generations, args.new_tokens
    total_steps = warmup + steps
    data = Dataset.from_list([{"prompt": payload["messages"], "gold_sql": payload["gold_sql"]}] * total_steps)
    mcfg = _model_config(args, mode)
    quantization = None
    if mcfg.load_in_4bit:  # the same NF4 setting as generator.models.load_generator
        quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_compute_dtype=mcfg.torch_dtype)  # fmt: skip
    peft_config = None
    if mode == "lora":
        peft_config = LoraConfig(r=mcfg.lora_r, lora_alpha=mcfg.lora_alpha, lora_dropout=0.0,
                                 target_modules=list(mcfg.lora_target_modules), task_type="CAUSAL_LM")  # fmt: skip
    out = tempfile.mkdtemp(prefix="trl-bench-")
    trl_args = TRLGRPOConfig(
        output_dir=out, max_steps=total_steps, per_device_train_batch_size=n_gen, num_generations=n_gen,
        max_completion_length=new_tokens, generation_kwargs={"min_new_tokens": new_tokens}, temperature=TEMPERATURE,
        top_k=0, beta=BETA, loss_type="dapo", learning_rate=LEARNING_RATE, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=args.device == "cpu", bf16=mcfg.dtype == "bfloat16", fp16=mcfg.dtype == "float16",
        shuffle_dataset=False, disable_dropout=True, seed=0, model_init_kwargs={"dtype": mcfg.torch_dtype},
        gradient_checkpointing=args.trl_gradient_checkpointing,
    )  # fmt: skip
    trainer = GRPOTrainer(model=str(resolve_generator(args.model)), reward_funcs=sql_reward, args=trl_args,
                          train_dataset=data, peft_config=peft_config, quantization_config=quantization,
                          callbacks=[StepTimer()])  # fmt: skip
    if mcfg.load_in_4bit:
        keep_4bit_trainable_on_cpu(trainer.model)  # the same CPU fix as ours (no-op on a GPU)
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
    return {"prompt_tokens": prompt_tokens, "rows": rows, "peak_rss_gb": _peak_rss_gb(),
            "peak_gpu_gb": _peak_gpu_gb(args.device), "trl_version": trl.__version__}  # fmt: skip


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
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return f"{cpu}, {os.cpu_count()} logical cores{gpu}, torch {torch.__version__} ({n} threads per process), Python {platform.python_version()}"


def _start(args: Args, trainer: str, mode: str, payload_file: Path) -> tuple[subprocess.Popen[str], float, float]:
    cmd = [sys.executable, __file__, "--child", trainer, "--mode", mode, "--payload", str(payload_file),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model, "--device", args.device,
           "--load-in-4bit", str(args.load_in_4bit), "--dtype", args.dtype, "--generations", str(args.generations),
           "--new-tokens", str(args.new_tokens), "--modes", mode,
           "--trl-gradient-checkpointing", str(args.trl_gradient_checkpointing)]  # fmt: skip
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
        print(json.dumps(run(payload, args.mode, args)))
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
    weights = f"NF4 4-bit, compute {args.dtype}" if args.load_in_4bit else args.dtype
    print(f"setting: {args.model} {weights} on {args.device}, 1 prompt x {args.generations} generations x "
          f"{args.new_tokens} new tokens, beta {BETA}, loss dapo, temperature {TEMPERATURE}; "
          f"{args.warmup} warm-up + {args.steps} timed steps each; TRL gradient checkpointing "
          f"{'on' if args.trl_gradient_checkpointing else 'off'}")  # fmt: skip
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
            gpu = f", peak GPU {r['peak_gpu_gb']:.2f} GB" if r.get("peak_gpu_gb") is not None else ""
            print(f"  {trainer}/{mode}: {_mean(r['rows'], 'step'):.2f} s/step, peak RSS {r['peak_rss_gb']:.2f} GB{gpu}, "
                  f"prompt {r['prompt_tokens']} tokens, load average before {r['load_before']:.1f}", flush=True)  # fmt: skip

    on_gpu = args.device == "cuda"
    header = "| trainer | mode | " + " | ".join(PARTS) + " | peak RSS (GB) |" + (" peak GPU (GB) |" if on_gpu else "")
    lines = [header, "|" + "---|" * (len(PARTS) + 3 + on_gpu)]
    for r in results:
        cells = " | ".join(f"{_mean(r['rows'], p):.2f}" for p in PARTS)
        gpu = f" {r['peak_gpu_gb']:.2f} |" if on_gpu else ""
        lines.append(f"| {r['trainer']} | {r['mode']} | {cells} | {r['peak_rss_gb']:.2f} |{gpu}")
    print("\nseconds per step (mean of timed steps)")
    print("\n".join(lines))
    for mode in args.modes:
        ours = next((r for r in results if r["trainer"] == "ours" and r["mode"] == mode), None)
        theirs = next((r for r in results if r["trainer"] == "trl" and r["mode"] == mode), None)
        if ours and theirs:
            speed = _mean(theirs["rows"], "step") / _mean(ours["rows"], "step")
            key, what = ("peak_gpu_gb", "peak GPU memory") if on_gpu else ("peak_rss_gb", "peak RSS")
            mem = theirs[key] / ours[key]
            print(f"{mode}: ours is {speed:.2f}x faster per step and uses {mem:.2f}x less {what} than TRL "
                  f"{theirs.get('trl_version', '?')} (ratios above 1 favour ours)")  # fmt: skip
    if args.json_out:
        from core.io import write_json

        write_json(args.json_out, {"machine": machine, "results": results})


if __name__ == "__main__":
    run_main(main)
