"""Adversarial inputs: a user's mistake is one ``error:`` line (exit 2), a hostile query never runs long or raises."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from data_pipeline.backends.sqlite import execute_readonly
from data_pipeline.build import main as build_main
from core.cli import run_main
from core.errors import ConfigError
from data_pipeline.pipeline import BuildConfig, build_dataset


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--max-hops", "-1"), ("--languages", ""), ("--samples-per-path", "0"), ("--timeout-s", "nan")],
)
def test_bad_flag_value_is_one_error_line(tiny_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_main(lambda: build_main(["--db", str(tiny_db), "--out", str(tmp_path / "out"), flag, value]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}: ")


def test_huge_samples_per_path_refused(tiny_db: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="samples-per-path"):
        BuildConfig(db=str(tiny_db), out=tmp_path / "o", samples_per_path=100_000_000)


def test_many_samples_per_path_reuses_templates(tiny_db: Path, tmp_path: Path) -> None:
    """40 per path needs more seed templates than a family has; it crashed with IndexError."""
    cfg = BuildConfig(db=str(tiny_db), out=tmp_path / "o", samples_per_path=40, max_hops=0, languages="en")
    ds, summary = build_dataset(cfg)
    assert summary["n_samples"] > 0 and len(ds.samples) == summary["n_samples"]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT " + "(" * 3000 + "1" + ")" * 3000, "nested too deeply"),
        ("SELECT 1;" * 10_000, "too long"),
        ("SELECT printf('%.*c', 2000000000, 'x')", "printf"),
        ("SELECT printf(name) FROM customers", "literal format"),
    ],
)
def test_hostile_query_rejected_fast(tiny_db: Path, sql: str, reason: str) -> None:
    before = _digest(tiny_db)
    start = time.perf_counter()
    res = execute_readonly(tiny_db, sql, timeout_s=1.0)
    assert not res.ok and res.error is not None and reason in res.error
    assert time.perf_counter() - start < 1.0
    assert _digest(tiny_db) == before


def test_printf_with_small_format_still_runs(tiny_db: Path) -> None:
    assert execute_readonly(tiny_db, "SELECT printf('%.2f', 1.234)").rows == [("1.23",)]


def test_nan_timeout_refused(tiny_db: Path) -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        execute_readonly(tiny_db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", timeout_s=float("nan"))


# ---------------------------------------------------------------- malformed data set folders and checkpoints


def _tiny_data(tiny_db: Path, out: Path) -> Path:
    build_dataset(BuildConfig(db=str(tiny_db), out=out, samples_per_path=3, max_hops=1, languages="en"))
    return out


def test_non_utf8_samples_line_names_the_line(tiny_db: Path, tmp_path: Path) -> None:
    from core.dataset import load_dataset
    from core.errors import DataError

    data = _tiny_data(tiny_db, tmp_path / "data")
    n = len((data / "samples.jsonl").read_text(encoding="utf-8").splitlines())
    with (data / "samples.jsonl").open("ab") as fh:
        fh.write(b'{"question": "\xff\xfe"}\n')  # it raised UnicodeDecodeError with a traceback
    with pytest.raises(DataError, match=rf"samples\.jsonl:{n + 1}: not UTF-8 text \(byte 0xff"):
        load_dataset(data)


@pytest.mark.parametrize(("content", "reason"), [(b"\xff{}", "utf-8"), (b'{"max_hops": "x"}', None)])
def test_malformed_schema_json_is_a_data_error(tiny_db: Path, tmp_path: Path, content: bytes, reason: str | None) -> None:
    """A non-UTF-8 schema.json and a non-integer max_hops raised UnicodeDecodeError / ValueError."""
    import json

    from core.dataset import load_dataset
    from core.errors import DataError

    data = _tiny_data(tiny_db, tmp_path / "data")
    if reason is None:  # a valid schema whose max_hops is not a number
        meta = json.loads((data / "schema.json").read_text(encoding="utf-8")) | {"max_hops": "x"}
        content = json.dumps(meta).encode()
    (data / "schema.json").write_bytes(content)
    with pytest.raises(DataError, match=r"schema\.json: malformed schema file"):
        load_dataset(data)


@pytest.mark.parametrize(("args", "field"), [(["--batch-size", "0"], "--batch-size"), (["q\udcff"], "questions")])
def test_route_bad_flag_or_undecodable_question(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str) -> None:
    """``--batch-size -1`` printed nothing and exited 0; a non-UTF-8 argv question crashed the tokenizer."""
    from core.cli import parse
    from router.route import RouteConfig

    extra = ["ok"] if args[0].startswith("--") else []
    with pytest.raises(SystemExit) as info:
        parse(RouteConfig, ["--router", str(tmp_path), *args, *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: ")


@pytest.mark.parametrize("size", [0, 1000])
def test_truncated_router_weights_are_a_checkpoint_error(tiny_db: Path, tmp_path: Path, size: int) -> None:
    """A truncated or empty model.safetensors raised SafetensorError with a traceback."""
    from core.dataset import load_dataset
    from core.errors import CheckpointError
    from router.model import PathSpace, RouterModel
    from router.policy import RouterPolicy
    from router.route import Router

    ds = load_dataset(_tiny_data(tiny_db, tmp_path / "data"))
    model = RouterModel.from_encoder("all-MiniLM-L6-v2", trainable_layers=1, head_dim=16)
    ckpt = Router(RouterPolicy(model, PathSpace(ds.graph))).save_pretrained(tmp_path / "router")
    weights = ckpt / "model.safetensors"
    with weights.open("r+b") as fh:
        fh.truncate(size)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        Router.from_pretrained(ckpt)


def test_a_router_with_nan_weights_or_a_broken_encoder_folder_is_a_checkpoint_error(tiny_db: Path, tmp_path: Path) -> None:
    """NaN weights loaded and routed with confidence nan; a garbage encoder tokenizer.json was a traceback."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from core.dataset import load_dataset
    from core.errors import CheckpointError
    from router.model import PathSpace, RouterModel
    from router.policy import RouterPolicy
    from router.route import Router

    ds = load_dataset(_tiny_data(tiny_db, tmp_path / "data"))
    model = RouterModel.from_encoder("all-MiniLM-L6-v2", trainable_layers=1, head_dim=16)
    ckpt = Router(RouterPolicy(model, PathSpace(ds.graph))).save_pretrained(tmp_path / "router")
    nan = shutil.copytree(ckpt, tmp_path / "nan")
    state = load_file(str(nan / "model.safetensors"))
    name = sorted(k for k, t in state.items() if t.is_floating_point())[0]
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, str(nan / "model.safetensors"))
    with pytest.raises(CheckpointError, match=f"weight {name} holds NaN"):
        Router.from_pretrained(nan)
    broken = shutil.copytree(ckpt, tmp_path / "broken")
    (broken / "encoder" / "tokenizer.json").write_text("xx", encoding="utf-8")
    with pytest.raises(CheckpointError, match="cannot rebuild the encoder"):
        Router.from_pretrained(broken)
    shutil.rmtree(broken / "encoder")
    with pytest.raises(CheckpointError, match="missing the encoder/ folder"):
        Router.from_pretrained(broken)


@pytest.mark.parametrize(("flag", "value"), [("--batch-size", "0"), ("--max-new-tokens", "0"), ("--timeout-s", "nan")])
def test_ab_bad_flag_value_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    """``--batch-size 0`` and ``--max-new-tokens 0`` crashed with ValueError; ``--timeout-s nan`` was accepted."""
    from core.cli import parse
    from evaluation.ab import ABConfig

    with pytest.raises(SystemExit) as info:
        parse(ABConfig, ["--data", str(tmp_path), "--out", str(tmp_path / "o"), flag, value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}: ")


def test_grpo_nan_learning_rate_refused(tmp_path: Path) -> None:
    """``--learning-rate nan`` passed the ``value <= 0`` check and GRPO started training."""
    from generator.config import GRPOConfig

    with pytest.raises(ConfigError, match="--learning-rate"):
        GRPOConfig(data=tmp_path, out=tmp_path / "o", learning_rate=float("nan"))


@pytest.mark.parametrize(("line", "message"), [
    ('{"question": ' + "[" * 50_000 + "]" * 50_000 + "}", r"q\.jsonl:2: not valid JSON \(nested too deep\)"),
    ('{"question": "\\ud800 alone"}', r"q\.jsonl:2: not valid Unicode text \(a lone surrogate"),
    ('{"question": "x", "meta": {"n": "\\udc80"}}', r"q\.jsonl:2: not valid Unicode text"),
    ('{"question": "x", "id": ' + "9" * 5000 + "}", r"q\.jsonl:2: not readable JSON \(Exceeds the limit \(4300 digits\)"),
], ids=["nested", "surrogate", "surrogate-in-meta", "huge-integer"])  # fmt: skip
def test_jsonl_nested_too_deep_or_with_a_lone_surrogate_is_one_line(tmp_path: Path, line: str, message: str) -> None:
    """Both raised later with a traceback: RecursionError while reading, UnicodeEncodeError in the
    featurizer (a lone "\\ud800" is valid JSON but no text); a surrogate pair (an emoji) still reads."""
    from core.errors import DataError
    from core.io import read_jsonl
    from envs.schema_routing_v1 import read_unlabelled

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "\\ud83c\\udf7a which customers?"}\n' + line + "\n", encoding="utf-8")
    for read in (read_jsonl, read_unlabelled):
        with pytest.raises(DataError, match=message) as info:
            read(f)
        assert "\n" not in str(info.value)
    f.write_text('{"question": "\\ud83c\\udf7a which customers?"}\n', encoding="utf-8")
    assert read_unlabelled(f) == ["🍺 which customers?"]


def test_a_jsonl_file_with_a_byte_order_mark_reads_and_keeps_its_line_numbers(tmp_path: Path) -> None:
    """Notepad writes UTF-8 with a byte-order mark; it was "q.jsonl:1: not valid JSON"."""
    from core.io import read_jsonl_lines

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "who?"}\n\n{"question": "\ufeffwhat?"}\n', encoding="utf-8-sig")
    assert read_jsonl_lines(f) == [(1, {"question": "who?"}), (3, {"question": "\ufeffwhat?"})]


def test_a_jsonl_file_with_old_mac_line_ends_is_named_as_such(tmp_path: Path) -> None:
    """Lone CR line ends make the file one line; it was "not valid JSON (Extra data)" and no hint."""
    from core.errors import DataError
    from core.io import read_jsonl

    f = tmp_path / "q.jsonl"
    f.write_bytes(b'{"question": "who?"}\r{"question": "what?"}\r')
    with pytest.raises(DataError, match=r"q.jsonl:1: not valid JSON \(Extra data\): its lines end in a lone CR"):
        read_jsonl(f)
    f.write_bytes(b'{"question": "who?"}\r\n{"question": "what?"}\r\n')  # CRLF reads
    assert read_jsonl(f) == [{"question": "who?"}, {"question": "what?"}]
    f.write_bytes(b'{"question": "who?"\n')  # a plain error keeps its plain message
    with pytest.raises(DataError) as info:
        read_jsonl(f)
    assert "lone CR" not in str(info.value)


@pytest.mark.parametrize(
    ("module", "args", "message"),
    [
        ("router.train_sft", ["--data", "{data}", "--out", "{data}"], "--out: {data} is --data {data}"),
        ("router.train_sft", ["--data", "{data}", "--out", "{tmp}/r", "--log-dir", "{data}/logs"], "--log-dir: {data}/logs is inside --data"),
        ("generator.train_sft", ["--data", "{data}", "--out", "{tmp}"], "--out: {tmp} holds --data {data}"),
        ("generator.train_grpo", ["--data", "{data}", "--out", "{tmp}/g", "--init", "{tmp}/g/checkpoint-2"], "--out: {tmp}/g holds --init"),
    ],
)
def test_an_output_over_an_input_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], module: str, args: list[str], message: str
) -> None:
    """Outputs are replaced whole: one pointing at (or around) an input would delete it."""
    import importlib

    data = tmp_path / "data"
    data.mkdir()
    (data / "schema.json").write_text("{}")
    fill = {"data": str(data), "tmp": str(tmp_path)}
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_info:
        run_main(lambda: main([a.format(**fill) for a in args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: " + message.format(**fill)), err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["data", "schema.json"]


def test_an_output_file_that_is_a_folder_or_a_pipe_is_refused_and_left_alone(tmp_path: Path) -> None:
    # generator.ask --out /dev/full replaced the device with a regular file; a folder failed
    # with IsADirectoryError after all the work was done
    import os

    from core.errors import Route2SQLError
    from core.io import atomic_write_text, ensure_writable_file

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for target, reason in ((pipe, "is not a regular file"), (tmp_path, "is a folder")):
        with pytest.raises(Route2SQLError, match=reason):
            ensure_writable_file(target)
        with pytest.raises(Route2SQLError, match=reason):
            atomic_write_text(target, "x")
    assert pipe.is_fifo()
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "missing.txt")
    atomic_write_text(link, "x")  # the link itself is replaced by the file
    assert link.read_text() == "x" and not link.is_symlink()
