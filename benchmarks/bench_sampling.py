"""GRPO's sampling: seconds per group of G completions, one way of generating against another.

Every variant samples G completions of the same training prompt with exactly the same number of
new tokens (``min_new_tokens`` = max), on the model and LoRA of ``bench_grpo.py``'s setting, in
one process, the variants interleaved round by round so that a change of load hits them alike:

- ``plain generate``: ``model.generate`` on the prompt repeated G times, adapters applied in every
  layer, the default dynamic cache: what a trainer that does nothing special does (TRL's
  ``GRPOTrainer`` without vLLM). The reference of the ratios.
- ``shared prefill``: :func:`generator.sampling.sample_group` with the prompt prefilled once and
  its cache repeated, dynamic cache, adapters applied.
- ``+ merged LoRA``: the same with the adapters merged into the base weights while it decodes.
- ``+ static cache``: the same with a preallocated KV cache instead (adapters applied).
- ``sample_group default``: both (what ``generator.train_grpo`` runs).

Example::

    python benchmarks/bench_sampling.py                      # demo setting, G = 8, 128 new tokens
    python benchmarks/bench_sampling.py --generations 16 --rounds 3
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from core.errors import ConfigError  # noqa: E402

VARIANTS = ("plain generate", "shared prefill", "+ merged LoRA", "+ static cache", "sample_group default")


@dataclass
class Args:
    """Options of the sampling benchmark."""

    data: Path | None = None
    """Built Northwind data set (python -m data_pipeline.build --db northwind); default: built into a temp folder."""
    setting: str = "demo"
    """Model, LoRA and prompt options: demo (evaluation.demo's GRPO) or defaults (generator.train_grpo's defaults)."""
    generations: int = 8
    """Completions per group (G)."""
    new_tokens: int | None = None
    """New tokens per completion (exactly); default: the setting's max completion length."""
    prompt: str = "longest"
    """Which training prompt: longest or median."""
    rounds: int = 2
    """Timed rounds; each round runs every variant once (the table shows the median)."""
    threads: int | None = None
    """torch threads; default: torch's choice."""

    def __post_init__(self) -> None:
        if self.setting not in ("demo", "defaults"):
            raise ConfigError(f"must be demo or defaults, got {self.setting!r}", where="--setting")
        if self.prompt not in ("longest", "median"):
            raise ConfigError(f"must be longest or median, got {self.prompt!r}", where="--prompt")
        if self.generations < 1 or self.rounds < 1:
            raise ConfigError(f"need --generations >= 1 and --rounds >= 1, got {self.generations} and {self.rounds}",
                              where="--generations")  # fmt: skip
        if self.new_tokens is not None and self.new_tokens < 1:
            raise ConfigError(f"must be >= 1, got {self.new_tokens}", where="--new-tokens")


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    args = parse(Args, description=__doc__)
    import torch
    from dataclasses import replace

    from bench_grpo import bench_prompt, setting_config
    from generator.models import load_generator
    from generator.prompt import prompt_token_ids
    from generator.sampling import eval_mode, sample_group

    if args.threads:
        torch.set_num_threads(args.threads)
    data = args.data
    if data is None:
        from data_pipeline.pipeline import BuildConfig, build_dataset

        data = Path(tempfile.mkdtemp(prefix="bench-sampling-")) / "northwind"
        build_dataset(BuildConfig(db="northwind", out=data))
    cfg = setting_config(args.setting, data, args.generations)
    payload = bench_prompt(data, args.setting, args.prompt)
    torch.manual_seed(0)
    model, tok = load_generator(replace(cfg.model, lora_dropout=0.0))
    ids = prompt_token_ids(tok, payload["messages"])
    n, t = args.generations, args.new_tokens or cfg.max_completion_length
    sampling = dict(max_new_tokens=t, min_new_tokens=t, temperature=cfg.temperature, top_p=cfg.top_p)

    def plain() -> float:
        t0 = time.perf_counter()
        prompt = torch.tensor([ids] * n)
        with eval_mode(model):
            model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=True, top_k=0,
                           pad_token_id=tok.pad_token_id, **sampling)  # fmt: skip
        return time.perf_counter() - t0

    def grouped(merge: bool, static: bool) -> float:
        return sample_group(model, tok, ids, n, merge_lora=merge, static_cache=static, **sampling).seconds

    runs = {VARIANTS[0]: plain, VARIANTS[1]: lambda: grouped(False, False), VARIANTS[2]: lambda: grouped(True, False),
            VARIANTS[3]: lambda: grouped(False, True), VARIANTS[4]: lambda: grouped(True, True)}  # fmt: skip
    print(f"machine: {machine()}")
    print(f"setting {args.setting}: {len(ids)}-token prompt (sample {payload['sample_id']}), G = {n}, exactly {t} new "
          f"tokens, LoRA on {', '.join(cfg.model.lora_target_modules)}; load average at start: {_load()}", flush=True)  # fmt: skip
    grouped(True, True)  # warm-up (allocator, first-call costs)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for name, fn in runs.items():
            seconds[name].append(fn())
            print(f"  round {r + 1}: {name}: {seconds[name][-1]:.2f} s (load {_load()})", flush=True)
    ref = statistics.median(seconds[VARIANTS[0]])
    print(f"\nseconds per group (median of {args.rounds} rounds); load average at end: {_load()}")
    print("| variant | s per group | ms per decoding step (G tokens) | speed vs plain generate |\n|---|---:|---:|---:|")
    for name in VARIANTS:
        s = statistics.median(seconds[name])
        print(f"| {name} | {s:.2f} | {1000 * s / t:.1f} | {ref / s:.2f}x |")


if __name__ == "__main__":
    run_main(main)
