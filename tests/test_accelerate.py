"""Two CPU processes under ``accelerate launch`` (gloo): GRPO completes with identical parameters
on both ranks, rewards are gathered from both, and a rank that meets a runaway query holds the
other back no longer than the SQL timeout.

One launch serves every test here (process start-up dominates on 2 cores). On a CPU-only
machine accelerate starts several processes only with ``--multi_gpu``; the trainer then asks for
``Accelerator(cpu=True)``, which makes accelerate pick gloo.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from generator.models import DEFAULT_GENERATOR, resolve_generator
from test_generator_train import make_tiny_data, make_tiny_llama

SQL_TIMEOUT_S = 1.0

SCRIPT = textwrap.dedent(
    '''
    """Run by each rank: a runaway query on rank 0, then two GRPO steps."""
    import json, sys, threading, time
    from pathlib import Path

    import torch
    from accelerate import PartialState
    from accelerate.utils import gather_object

    from generator.config import GRPOConfig
    from generator.models import ModelConfig
    from generator.prompt import PromptOverrides, render_completion
    from generator.train_grpo import score_completions, train
    from rewards.sql import SQLRewardConfig

    out, data, model, big_db, timeout = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
    state = PartialState(cpu=True)
    rank = state.process_index
    reward = SQLRewardConfig(timeout_s=timeout)
    scorer = reward.make_scorer().start(wait=True)  # its worker processes are up before the timed part
    gold = "SELECT count(*) FROM t"
    score_completions([render_completion(gold, "r")], gold, big_db, reward, scorer)  # warm the gold caches
    pred = "SELECT count(*) FROM t a, t b, t c" if rank == 0 else gold  # 8e9-row cartesian product on rank 0
    threads_before = threading.active_count()
    state.wait_for_everyone()
    t0 = time.perf_counter()
    comps, totals = score_completions([render_completion(pred, "r")], gold, big_db, reward, scorer)
    scored = time.perf_counter() - t0
    gathered = gather_object([{"rank": rank, "execution": comps[0]["execution"], "reason": comps[0]["reason"]}])
    waited = time.perf_counter() - t0
    (out / f"runaway-{rank}.json").write_text(json.dumps({
        "scored_s": scored, "waited_s": waited, "gathered": gathered,
        "threads_before": threads_before, "threads_after": threading.active_count()}))

    cfg = GRPOConfig(data=Path(data), out=out / "run", model=ModelConfig(model=model, lora_r=4, lora_dropout=0.0),
                     num_generations=2, max_completion_length=5, prompt=PromptOverrides(k_examples=0), max_steps=2, learning_rate=1e-2,
                     skip_smoke_test=True, dynamic_sampling="off", virtual_full_score=True, save_steps=1,
                     progress=False, threads=1)
    result = train(cfg)
    params = {n: p.detach().clone() for n, p in result.model.named_parameters() if p.requires_grad}
    torch.save(params, out / f"params-{rank}.pt")
    '''
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("accelerate")
    model = make_tiny_llama(root / "tiny", resolve_generator(DEFAULT_GENERATOR))
    data = make_tiny_data(root)
    big = root / "big.sqlite"
    conn = sqlite3.connect(big)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2000)])
    conn.commit()
    conn.close()
    script = root / "rank.py"
    script.write_text(SCRIPT)
    out = root / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()),
           str(script), str(out), str(data), str(model), str(big), str(SQL_TIMEOUT_S)]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_two_processes_end_with_identical_parameters_that_moved(launched):
    p0, p1 = (torch.load(launched / f"params-{r}.pt") for r in (0, 1))
    assert p0.keys() == p1.keys() and len(p0) > 0
    for name in p0:
        assert torch.equal(p0[name], p1[name]), name
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in p0.items())  # training moved them (B starts at 0)


def test_rewards_and_metrics_are_gathered_from_both_ranks(launched):
    lines = [json.loads(x) for x in (launched / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    assert all(x["num_completions"] == 4.0 for x in lines)  # 2 ranks x 1 prompt x 2 generations
    assert (launched / "run" / "final" / "adapter_model.safetensors").is_file()


def test_a_runaway_query_on_one_rank_stalls_the_other_no_longer_than_the_timeout(launched):
    r0, r1 = (json.loads((launched / f"runaway-{r}.json").read_text()) for r in (0, 1))
    runaway = next(g for g in r0["gathered"] if g["rank"] == 0)
    assert runaway["execution"] == 0.0 and "timed out" in runaway["reason"]
    assert SQL_TIMEOUT_S <= r0["scored_s"] <= SQL_TIMEOUT_S + 0.5  # aborted inside SQLite, on time
    assert r1["scored_s"] < 0.5  # the other rank's own query was quick...
    assert r1["waited_s"] <= SQL_TIMEOUT_S + 1.0  # ...and it waited at the gather only for the timeout
    assert r0["threads_after"] == r0["threads_before"]  # no thread left running the query
