"""Router speed on this machine: SFT wall time on Northwind, routing latency and batch throughput.

    python -m data_pipeline.build --db northwind --out /tmp/nw      # once
    python benchmarks/bench_router.py --data /tmp/nw
    python benchmarks/bench_router.py --data /tmp/nw --router /tmp/nw-router   # skip SFT, time routing only

SFT runs ``python -m router.train_sft`` with its defaults (the multilingual-e5-small encoder)
and reports the wall time from start to saved checkpoint, split into encoding (model load,
tokenizing, running the frozen layers once) and training (epochs, value calibration, final
evaluation). Routing loads the checkpoint with :meth:`router.route.Router.from_pretrained` and
times ``route(question)`` one question at a time (p50 / p95 over the test questions, after a
warm-up) and ``route_batch`` on batches of 64 (questions per second, median over rounds).
Right after each ``route`` call the same question goes through a bare encoder forward (the
router's own tokenizer and encoder, ``query_prefix`` + question, ``torch.inference_mode``): the
least any encoder-based router must spend, so ``ratio route/encoder`` (p50 over p50, measured
under the same load) says what the routing logic costs on top.
The load average at start is printed with the results: other processes on a 2-core machine
slow every wall time down; the SFT's process CPU time (user + system, all threads) does not
depend on them and, with ``--threads 1``, is what the wall time would be on an idle core.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main  # noqa: E402
from core.dataset import load_dataset  # noqa: E402
from router.route import Router  # noqa: E402
from router.train_sft import SFTConfig, train  # noqa: E402


@dataclass
class Args:
    """Options of the router benchmark."""

    data: Path
    """Data set folder (``python -m data_pipeline.build --db northwind --out DIR``)."""
    router: Path | None = None
    """An already trained router: skip the SFT measurement."""
    encoder: str = "multilingual-e5-small"
    """Encoder for the SFT run."""
    threads: int = 0
    """Torch threads (0: all cores)."""
    single_questions: int = 100
    """Questions timed one at a time (after 5 warm-up calls)."""
    batch_rounds: int = 5
    """Batches of 64 timed."""
    out: Path | None = None
    """Also write the results as JSON here."""


def main() -> dict:
    args = parse(Args, description=__doc__.split("\n\n")[0] if __doc__ else None)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    results: dict = {"machine": machine(), "load_average_1min_at_start": round(load, 2)}
    ds = load_dataset(args.data)
    tmp = None
    ckpt = args.router
    if ckpt is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-router-")
        ckpt = Path(tmp.name) / "router"
        t0 = time.perf_counter()
        res = train(SFTConfig(data=args.data, out=ckpt, encoder=args.encoder, threads=args.threads, progress=False,
                              tensorboard=False))  # fmt: skip
        wall = time.perf_counter() - t0
        meta = json.loads((ckpt / "config.json").read_text())
        results["sft"] = {
            "train_samples": len(ds.split("train")),
            "wall_s": round(wall, 1),
            "encode_s": meta["timing_s"]["encode"],
            "train_s": meta["timing_s"]["train"],
            "cpu_s": meta["timing_s"]["cpu"],
            "epochs_run": len(res.history),
            "best_epoch": res.best_epoch,
            "s_per_epoch": round(statistics.median(
                b["time/elapsed_s"] - a["time/elapsed_s"] for a, b in zip(res.history, res.history[1:], strict=False)
            ), 1) if len(res.history) > 1 else None,
            "full_path_acc": {k: round(v["full_path_acc"], 4) for k, v in res.metrics.items() if k != "value"},
        }  # fmt: skip

    t0 = time.perf_counter()
    router = Router.from_pretrained(ckpt)
    results["load_s"] = round(time.perf_counter() - t0, 2)
    # the first load also imports transformers' model and tokenizer modules (seconds of Python
    # imports that every process pays once); a second load shows the checkpoint's own cost
    t0 = time.perf_counter()
    router = Router.from_pretrained(ckpt)
    results["reload_s"] = round(time.perf_counter() - t0, 2)
    questions = [s.question for s in ds.split("test") + ds.split("test_heldout")] or [s.question for s in ds.samples]
    for q in questions[:5]:
        router.route(q)
    model = router.policy.model
    tokenizer, encoder, prefix = model.tokenizer, model.encoder, model.config.query_prefix

    def encoder_forward(question: str) -> None:
        with torch.inference_mode():
            batch = tokenizer([prefix + question], return_tensors="pt", return_token_type_ids=False)
            encoder(**batch)

    for q in questions[:5]:
        encoder_forward(q)
    lat, enc = [], []
    for i in range(args.single_questions):  # interleaved, so both see the same load
        q = questions[i % len(questions)]
        t0 = time.perf_counter()
        router.route(q)
        t1 = time.perf_counter()
        encoder_forward(q)
        lat.append(1000 * (t1 - t0))
        enc.append(1000 * (time.perf_counter() - t1))

    def pct(xs: list[float]) -> dict[str, float]:
        xs = sorted(xs)
        return {"p50": round(statistics.median(xs), 2), "p95": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 2),
                "n": len(xs)}  # fmt: skip

    results["route_one_ms"] = pct(lat)
    results["encoder_one_ms"] = pct(enc)
    results["ratio_route_encoder"] = round(results["route_one_ms"]["p50"] / results["encoder_one_ms"]["p50"], 2)
    results["ratio_p95_p50"] = round(results["route_one_ms"]["p95"] / results["route_one_ms"]["p50"], 2)
    rates = []
    for r in range(args.batch_rounds):
        batch = [questions[(r * 64 + i) % len(questions)] for i in range(64)]
        t0 = time.perf_counter()
        router.route_batch(batch)
        rates.append(64 / (time.perf_counter() - t0))
    results["batch64_questions_per_s"] = round(statistics.median(rates), 1)
    if tmp is not None:
        tmp.cleanup()

    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"machine: {platform.node()}: {results['machine']} (1-min load average at start: "
          f"{results['load_average_1min_at_start']}, at end: {results['load_average_at_end'][0]})")
    print("| measure | value |\n|---|---|")
    if "sft" in results:
        s = results["sft"]
        print(f"| SFT wall time, Northwind ({s['train_samples']} train samples) | {s['wall_s']} s "
              f"(encode {s['encode_s']} s, train {s['train_s']} s, {s['epochs_run']} epochs, {s['s_per_epoch']} s/epoch) |")
        print(f"| SFT process CPU time (all threads) | {s['cpu_s']} s |")  # fmt: skip
        print(f"| full-path accuracy after SFT | {s['full_path_acc']} |")
    print(f"| router load, first in the process (transformers imports included) | {results['load_s']} s |")
    print(f"| router load, second in the process (the checkpoint alone) | {results['reload_s']} s |")
    print(f"| route one question, p50 / p95 | {results['route_one_ms']['p50']} / {results['route_one_ms']['p95']} ms |")
    print(f"| bare encoder forward of the same question, p50 / p95 | {results['encoder_one_ms']['p50']} / "
          f"{results['encoder_one_ms']['p95']} ms |")
    print(f"| ratio route/encoder | {results['ratio_route_encoder']:.2f}x |")
    print(f"| ratio route p95/p50 | {results['ratio_p95_p50']:.2f}x |")
    print(f"| route_batch(64) throughput | {results['batch64_questions_per_s']} questions/s |")
    if args.out is not None:
        from core.io import write_json

        write_json(args.out, results)
    return results


if __name__ == "__main__":
    run_main(main)
