"""One GRPO step, ours against TRL's ``GRPOTrainer``: step time and peak memory at G = 8 and 16.

Both trainers get the same model, the same prompt and the same settings, each in a fresh child
process per configuration; the parent reads the child's peak RSS from ``os.wait4`` (the child
and its own children, nothing else), so configurations never contaminate each other. Each child
runs ``--warmup`` untimed steps and ``--steps`` timed ones and splits the step into generation /
reference log-probs / reward / policy forward / backward + optimizer.

Settings (``--settings``), both taken from the code they describe:

- ``demo``: what ``python -m evaluation.demo`` trains with (``evaluation.demo.PROMPT``): SQL-only
  answers, compact routed tables, no retrieved examples, linked values, LoRA r=16 on every linear
  layer, ``max_new_tokens`` 128, DAPO, beta 0.01, temperature 0.9.
- ``defaults``: every default of ``python -m generator.train_grpo`` (full schema, 2 retrieved
  examples, reasoning, linked values, LoRA on q/k/v/o, 192 new tokens, DAPO, beta 0.01).

The prompt is a Northwind training question's, built with the setting's prompt options
(``--prompt longest``: the longest training prompt, the memory worst case; ``median``: a typical
one). Completions have exactly the setting's number of new tokens (``min_new_tokens`` = max), so
both trainers do the same work; LoRA dropout is 0 in both (TRL turns dropout off). ``--modes
full`` trains every weight instead, with a second frozen copy as the reference in both trainers.

TRL's split comes from its own profiling hooks (``transformers.generate``,
``_calculate_rewards``, ``_get_per_token_logps_and_entropies`` inside ``_prepare_inputs`` for the
reference and inside ``compute_loss`` for the policy); backward + optimizer is the step's wall
time minus ``_prepare_inputs`` and ``compute_loss``. On ``--device cuda`` each child also reports
its peak GPU memory (``torch.cuda.max_memory_allocated``), which the ratios then use.

TRL is an optional extra for this benchmark only: ``pip install -e ".[bench]"`` (pins trl 1.16.0)::

    python benchmarks/bench_grpo.py --data /tmp/nw                        # demo settings, G 8 and 16
    python benchmarks/bench_grpo.py --data /tmp/nw --settings defaults --trainers ours
    python benchmarks/bench_grpo.py --model Qwen2.5-Coder-1.5B-Instruct --device cuda --load-in-4bit True \
        --dtype bfloat16 --generations 8        # QLoRA on one GPU (benchmarks/gpu_check.sh)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from core.errors import ConfigError  # noqa: E402

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SETTINGS = ("demo", "defaults")
PARTS = ("generation", "reference", "reward", "policy_forward", "backward_optimizer", "step")


@dataclass
class Args:
    """Options of the GRPO step benchmark."""

    data: Path | None = None
    """Built Northwind data set (python -m data_pipeline.build --db northwind); default: built into a temp folder."""
    settings: tuple[str, ...] = ("demo",)
    """Which settings to run: demo (evaluation.demo's GRPO), defaults (generator.train_grpo's defaults)."""
    generations: tuple[int, ...] = (8, 16)
    """Group sizes G to run (completions per prompt)."""
    modes: tuple[str, ...] = ("lora",)
    """lora (the setting's LoRA, reference = adapters off) and/or full (every weight, a frozen copy as reference)."""
    trainers: tuple[str, ...] = ("ours", "trl")
    """Which trainers to run: ours, trl."""
    prompt: str = "longest"
    """Which training prompt: longest (the memory worst case) or median."""
    model: str = "SmolLM2-135M-Instruct"
    """Generator both trainers train: a built-in name (SmolLM2-135M-Instruct, Qwen2.5-Coder-1.5B-Instruct) or a HF causal-LM directory."""
    device: str = "cpu"
    """Where both trainers run: cpu or cuda (one GPU, cuda:0)."""
    load_in_4bit: bool = False
    """Load the base weights in bitsandbytes NF4 (QLoRA; lora mode only)."""
    dtype: str = "float32"
    """Weight dtype, and compute dtype in 4-bit: float32, bfloat16 or float16."""
    new_tokens: int | None = None
    """New tokens per completion (exactly); default: the setting's max completion length."""
    micro_batch: int | None = None
    """Ours: completions per forward/backward pass; default: generator.train_grpo's default."""
    prompt_chunk: int | None = None
    """Ours: prompt tokens per recomputed chunk of the prompt's backward; default: generator.train_grpo's default."""
    trl_gradient_checkpointing: bool = True
    """TRL's gradient checkpointing (its GRPOConfig default, on)."""
    steps: int = 2
    """Timed steps per configuration."""
    warmup: int = 1
    """Untimed steps first (allocator and kernel warm-up)."""
    threads: int | None = None
    """torch threads in each child process; default: torch's choice."""
    json_out: Path | None = None
    """Also write every result as JSON here."""
    child: str | None = None
    """(internal) run one trainer in this process: ours or trl."""
    payload: Path | None = None
    """(internal) the child's prompt and settings file."""
    mode: str = "lora"
    """(internal) the child's mode."""

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"must be cpu or cuda, got {self.device!r}", where="--device")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"must be float32, bfloat16 or float16, got {self.dtype!r}", where="--dtype")
        for name, values, allowed in (("--settings", self.settings, SETTINGS), ("--modes", self.modes, ("lora", "full")),
                                      ("--trainers", self.trainers, ("ours", "trl"))):  # fmt: skip
            for v in values:
                if v not in allowed:
                    raise ConfigError(f"unknown value {v!r}; choose from {', '.join(allowed)}", where=name)
        if self.prompt not in ("longest", "median"):
            raise ConfigError(f"must be longest or median, got {self.prompt!r}", where="--prompt")
        if self.load_in_4bit and "full" in self.modes:
            raise ConfigError("4-bit weights cannot be trained; use --modes lora with --load-in-4bit", where="--modes")
        if any(g < 2 for g in self.generations):
            raise ConfigError(f"each must be >= 2 (a group needs two completions), got {self.generations}",
                              where="--generations")  # fmt: skip
        if self.new_tokens is not None and self.new_tokens < 1:
            raise ConfigError(f"must be >= 1, got {self.new_tokens}", where="--new-tokens")
        if self.steps < 1 or self.warmup < 0:
            raise ConfigError(f"need --steps >= 1 and --warmup >= 0, got {self.steps} and {self.warmup}", where="--steps")
        if self.device == "cuda" and self.child is None:
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("no CUDA device is visible to torch (torch.cuda.is_available() is False)", where="--device")


# --------------------------------------------------------------------------- settings and prompt


def setting_config(name: str, data: Path, generations: int) -> Any:
    """The :class:`generator.config.GRPOConfig` of setting ``name`` with ``generations`` per group."""
    from evaluation.demo import PROMPT, DemoConfig
    from generator.config import GRPOConfig
    from generator.models import ModelConfig
    from generator.prompt import PromptOverrides

    if name == "defaults":
        return GRPOConfig(data=data, out=Path("."), num_generations=generations)
    assert name == "demo"
    # evaluation.demo passes PROMPT to both generator trainers; its GRPO call adds DAPO, beta 0.01,
    # learning rate 5e-5, --max-completion-length DemoConfig.max_new_tokens, and --init from the
    # warm start, whose LoRA covers every linear layer
    k = int(PROMPT[PROMPT.index("--k-examples") + 1])
    schema = PROMPT[PROMPT.index("--schema-detail") + 1]
    prompt = PromptOverrides(k_examples=k, with_reasoning="--no-with-reasoning" not in PROMPT,
                             schema_detail=schema, value_linking="--value-linking" in PROMPT)  # type: ignore[arg-type]
    return GRPOConfig(data=data, out=Path("."), model=ModelConfig(lora_target_modules=ALL_LINEAR), prompt=prompt,
                      num_generations=generations,
                      max_completion_length=DemoConfig(db="northwind").max_new_tokens, loss_type="dapo", beta=0.01,
                      learning_rate=5e-5)  # fmt: skip


def bench_prompt(data: Path, setting: str, pick: str) -> dict[str, Any]:
    """The messages, gold SQL and token count of one training prompt built as ``setting`` builds
    them: the longest one within ``max_prompt_tokens`` or the median one (``pick``)."""
    from core.dataset import load_dataset
    from generator.prompt import UNTRAINED_PROMPT, prompt_token_ids, sample_messages
    from generator.models import load_tokenizer, resolve_generator
    from generator.retrieval import ExampleRetriever

    cfg = setting_config(setting, data, 8)
    ds = load_dataset(data)
    train = ds.split("train")
    tok = load_tokenizer(resolve_generator(cfg.model.model))
    prompt = cfg.prompt.apply(UNTRAINED_PROMPT)  # the setting starts from the base model (no --init)
    retriever = ExampleRetriever(train) if prompt.k_examples > 0 else None

    def messages(s):  # noqa: ANN001, ANN202
        return sample_messages(s, ds, retriever, path=s.path, prompt=prompt)

    sized = sorted((len(prompt_token_ids(tok, messages(s))), i) for i, s in enumerate(train))
    sized = [x for x in sized if x[0] <= cfg.max_prompt_tokens]
    n_tokens, i = sized[-1] if pick == "longest" else sized[len(sized) // 2]
    sample = train[i]
    return {"messages": messages(sample), "gold_sql": sample.sql, "db_path": str(ds.db_path), "sample_id": sample.id,
            "prompt_tokens": n_tokens, "setting": setting}  # fmt: skip


def _peak_gpu_gb(device: str) -> float | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated() / 1024**3


def _child_config(payload: dict[str, Any], mode: str, args: Args, generations: int) -> Any:
    from dataclasses import replace

    cfg = setting_config(payload["setting"], Path("."), generations)
    model = replace(cfg.model, model=args.model, use_lora=mode == "lora", lora_dropout=0.0,
                    load_in_4bit=args.load_in_4bit, dtype=args.dtype)  # fmt: skip
    memory = {k: v for k, v in (("micro_batch", args.micro_batch), ("prompt_chunk", args.prompt_chunk)) if v is not None}
    return replace(cfg, model=model, max_completion_length=args.new_tokens or cfg.max_completion_length,
                   dynamic_sampling="off", skip_smoke_test=True, **memory)  # fmt: skip


# --------------------------------------------------------------------------- our step


def run_ours(payload: dict[str, Any], mode: str, args: Args, generations: int) -> dict[str, Any]:
    import torch
    from accelerate import Accelerator

    from core.graph import JoinPath
    from core.samples import Sample
    from generator.prompt import prompt_token_ids
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

    cfg = _child_config(payload, mode, args, generations)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=args.device == "cpu")
    model, tok = load_generator(cfg.model)
    model.to(accelerator.device)  # as generator.train_grpo does (a 4-bit model is already there)
    ref_model = make_reference_model(cfg.model).to(accelerator.device) if mode == "full" else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate)
    sample = Sample("bench", "northwind", "q", "en", JoinPath("x", (), "x"), payload["gold_sql"])
    prompt = Prompt(sample, sample.path, prompt_token_ids(tok, payload["messages"]))
    ro = Rollout(model, tok, [prompt], PromptStream(1), cfg.reward.make_scorer(), Path(payload["db_path"]))
    model.train()
    rows = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        ro.stats = CollectStats()
        groups = collect_groups(ro, cfg, min_new_tokens=cfg.max_completion_length)
        ref_s = score_reference(model, groups, cfg.temperature, ref_model, micro_batch=cfg.micro_batch,
                                prompt_chunk=cfg.prompt_chunk)  # fmt: skip
        assign_advantages(groups, cfg)
        opt = optimise(accelerator, model, groups, cfg, optimizer, params)
        total = time.perf_counter() - t0
        if i >= args.warmup:
            rows.append({"generation": ro.stats.generation_s, "reference": ref_s, "reward": ro.stats.reward_s,
                         "policy_forward": opt.forward_s, "backward_optimizer": opt.backward_s, "step": total,
                         "completion_tokens": int(groups[0].completions.mask.sum())})  # fmt: skip
        del groups
    ro.scorer.close()
    return {"prompt_tokens": len(prompt.ids), "rows": rows, "peak_gpu_gb": _peak_gpu_gb(args.device),
            "micro_batch": cfg.micro_batch, "prompt_chunk": cfg.prompt_chunk}  # fmt: skip


# --------------------------------------------------------------------------- TRL's step


def run_trl(payload: dict[str, Any], mode: str, args: Args, generations: int) -> dict[str, Any]:
    import torch  # noqa: F401 - before trl, as trl expects
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig, TrainerCallback
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer
    from trl.extras import profiling

    from generator.models import keep_4bit_trainable_on_cpu, resolve_generator
    from rewards.sql import sql_rewards

    cfg = _child_config(payload, mode, args, generations)
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

    scorer = cfg.reward.make_scorer()
    db = payload["db_path"]

    def sql_reward(prompts, completions, gold_sql, **kw):  # noqa: ANN001, ANN003
        return sql_rewards(completions, gold_sql, db, cfg.reward, scorer)

    total_steps = args.warmup + args.steps
    data = Dataset.from_list([{"prompt": payload["messages"], "gold_sql": payload["gold_sql"]}] * total_steps)
    mcfg = cfg.model
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
        output_dir=out, max_steps=total_steps, per_device_train_batch_size=generations, num_generations=generations,
        max_completion_length=cfg.max_completion_length, generation_kwargs={"min_new_tokens": cfg.max_completion_length},
        temperature=cfg.temperature, top_k=0, beta=cfg.beta, loss_type=cfg.loss_type, epsilon=cfg.epsilon,
        epsilon_high=cfg.clip_high, learning_rate=cfg.learning_rate, logging_steps=1, report_to="none",
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
    scorer.close()

    def inside(name: str, window: tuple[float, float]) -> float:
        return sum(e - s for n, s, e in events if n.endswith(name) and s >= window[0] - 1e-6 and e <= window[1] + 1e-6)

    def windows(name: str, step: tuple[float, float]) -> list[tuple[float, float]]:
        return [(s, e) for n, s, e in events if n.endswith(name) and s >= step[0] and e <= step[1]]

    rows = []
    for i, step in enumerate(steps_t):
        if i < args.warmup:
            continue
        prep, loss = windows("_prepare_inputs", step), windows("compute_loss", step)
        prep_s, loss_s = sum(e - s for s, e in prep), sum(e - s for s, e in loss)
        rows.append({
            "generation": sum(inside("transformers.generate", w) for w in prep),
            "reference": sum(inside("_get_per_token_logps_and_entropies", w) for w in prep),
            "reward": sum(inside("_calculate_rewards", w) for w in prep),
            "policy_forward": loss_s,
            "backward_optimizer": (step[1] - step[0]) - prep_s - loss_s,
            "step": step[1] - step[0],
        })  # fmt: skip
    return {"prompt_tokens": prompt_tokens, "rows": rows, "peak_gpu_gb": _peak_gpu_gb(args.device),
            "trl_version": trl.__version__}  # fmt: skip


# --------------------------------------------------------------------------- parent


def _load() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run_child(args: Args, trainer: str, mode: str, generations: int, payload_file: Path) -> dict[str, Any]:
    """Run one configuration in a fresh process; its peak RSS is the child's own (``os.wait4``).

    Raises:
        SystemExit: the child failed (its stderr's tail is shown).
    """
    cmd = [sys.executable, __file__, "--child", trainer, "--mode", mode, "--payload", str(payload_file),
           "--generations", str(generations), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--model", args.model, "--device", args.device, "--load-in-4bit", str(args.load_in_4bit),
           "--dtype", args.dtype, "--modes", mode,
           "--trl-gradient-checkpointing", str(args.trl_gradient_checkpointing)]  # fmt: skip
    for flag, value in (("--threads", args.threads), ("--new-tokens", args.new_tokens),
                        ("--micro-batch", args.micro_batch), ("--prompt-chunk", args.prompt_chunk)):  # fmt: skip
        if value is not None:
            cmd += [flag, str(value)]
    load_before = _load()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"{trainer}/{mode}/G={generations} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    return result | {"trainer": trainer, "mode": mode, "generations": generations, "wall_s": wall,
                     "load_before": load_before, "peak_rss_gb": usage.ru_maxrss / 1024**2}  # fmt: skip


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
        print(json.dumps(run(payload, args.mode, args, args.generations[0])))
        return

    data = args.data
    if data is None:
        from data_pipeline.pipeline import BuildConfig, build_dataset

        data = Path(tempfile.mkdtemp(prefix="bench-grpo-")) / "northwind"
        build_dataset(BuildConfig(db="northwind", out=data))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    host = platform.node()
    print(f"machine: {host}: {machine()}")
    print(f"load average at start: {_load()}")
    weights = f"NF4 4-bit, compute {args.dtype}" if args.load_in_4bit else args.dtype
    results = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-grpo-"))
    for setting in args.settings:
        payload = bench_prompt(data, setting, args.prompt)
        payload_file = tmp / f"{setting}.json"
        payload_file.write_text(json.dumps(payload))
        cfg = setting_config(setting, data, 8)
        tokens = args.new_tokens or cfg.max_completion_length
        print(f"\nsetting {setting}: {args.model} {weights} on {args.device}, {args.prompt} training prompt "
              f"({payload['prompt_tokens']} tokens, sample {payload['sample_id']}), exactly {tokens} new tokens, "
              f"LoRA on {', '.join(cfg.model.lora_target_modules)}, loss {cfg.loss_type}, beta {cfg.beta}, "
              f"temperature {cfg.temperature}; {args.warmup} warm-up + {args.steps} timed steps per configuration; "
              f"TRL gradient checkpointing {'on' if args.trl_gradient_checkpointing else 'off'}", flush=True)  # fmt: skip
        for g in args.generations:
            for mode in args.modes:
                for trainer in args.trainers:
                    r = run_child(args, trainer, mode, g, payload_file) | {"setting": setting}
                    results.append(r)
                    gpu = f", peak GPU {r['peak_gpu_gb']:.2f} GB" if r.get("peak_gpu_gb") is not None else ""
                    print(f"  {trainer}/{mode}/G={g}: {_mean(r['rows'], 'step'):.2f} s/step, peak RSS "
                          f"{r['peak_rss_gb']:.2f} GB{gpu}, load before {r['load_before']}", flush=True)  # fmt: skip

    on_gpu = args.device == "cuda"
    print(f"\nmachine: {host}: {machine()}; load average at end: {_load()}")
    print("seconds per step (mean of the timed steps); peak RSS of each configuration's own process")
    header = ("| setting | G | trainer | mode | " + " | ".join(PARTS) + " | peak RSS (GB) |"
              + (" peak GPU (GB) |" if on_gpu else "") + " load before |")  # fmt: skip
    lines = [header, "|" + "---|" * (len(PARTS) + 6 + on_gpu)]
    for r in results:
        cells = " | ".join(f"{_mean(r['rows'], p):.2f}" for p in PARTS)
        gpu = f" {r['peak_gpu_gb']:.2f} |" if on_gpu else ""
        name = r["trainer"] if r["trainer"] == "ours" else f"TRL {r.get('trl_version', '?')}"
        lines.append(f"| {r['setting']} | {r['generations']} | {name} | {r['mode']} | {cells} | "
                     f"{r['peak_rss_gb']:.2f} |{gpu} {r['load_before']} |")  # fmt: skip
    print("\n".join(lines))
    key, what = ("peak_gpu_gb", "peak GPU memory") if on_gpu else ("peak_rss_gb", "peak RSS")
    ratio_lines = []
    for setting in args.settings:
        for g in args.generations:
            for mode in args.modes:
                pick = {r["trainer"]: r for r in results if (r["setting"], r["generations"], r["mode"]) == (setting, g, mode)}
                if "ours" in pick and "trl" in pick:
                    speed = _mean(pick["trl"]["rows"], "step") / _mean(pick["ours"]["rows"], "step")
                    mem = pick["trl"][key] / pick["ours"][key]
                    ratio_lines.append(f"| {setting} | {g} | {mode} | {speed:.2f}x | {mem:.2f}x |")
    if ratio_lines:
        print(f"\nratios measured in this run (TRL / ours; above 1 favours ours)\n"
              f"| setting | G | mode | step time | {what} |\n|---|---|---|---|---|")
        print("\n".join(ratio_lines))
    if args.json_out:
        from core.io import write_json

        write_json(args.json_out, {"machine": f"{host}: {machine()}", "load_end": _load(), "results": results})


if __name__ == "__main__":
    run_main(main)
