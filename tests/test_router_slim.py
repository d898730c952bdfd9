"""Slim router checkpoints: only what training changed is saved, on a base encoder named by the
sha256 of its weights; loading gives the very same network; full folders (exported, or version 3)
still load; a base encoder that hashes differently is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_shop
from safetensors.torch import load_file

from core.errors import CheckpointError
from core.graph import SchemaGraph
from core.schema import introspect
from data_pipeline.encoders import weights_sha256
from router.export import main as export_main
from router.model import PathSpace, RouterModel
from router.policy import RouterPolicy
from router.route import Router

ENCODER = "all-MiniLM-L6-v2"
QUESTIONS = ["which products did the customer Bob Chen buy", "list all customers in Berlin", "谁供应 Green Tea"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("slim")
    graph = SchemaGraph(introspect(make_tiny_shop(root / "shop.sqlite")), max_hops=2)
    torch.manual_seed(0)
    model = RouterModel.from_encoder(ENCODER, trainable_layers=2, head_dim=32)
    with torch.no_grad():  # as training would: every trained tensor moves, the frozen part does not
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    router = Router(RouterPolicy(model, PathSpace(graph)))
    out = router.save_pretrained(root / "slim", {"temperature": 1.3})
    return {"root": root, "graph": graph, "router": router, "out": out}


def _log_probs(router: Router) -> torch.Tensor:
    return torch.cat([d.log_prob for d in router.distributions(QUESTIONS)])


def test_slim_checkpoint_holds_only_the_trained_tensors(saved) -> None:
    router, out = saved["router"], saved["out"]
    model = router.policy.model
    state = load_file(str(out / "model.safetensors"))
    assert sorted(state) == sorted(model.trained_keys())
    assert not any(k.startswith(("encoder.embeddings.", "encoder.encoder.layer.0.", "_layers.")) for k in state)
    assert {"encoder.encoder.layer.5.output.dense.weight", "value_head.0.weight", "link.anchor.weight"} <= set(state)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["version"] == 4 and cfg["base_encoder"] == {"name": ENCODER, "sha256": weights_sha256(ENCODER)[1]}
    full = sum(v.numel() for v in model.state_dict().values())
    assert sum(v.numel() for v in state.values()) < full / 2


def test_slim_save_then_load_routes_identically(saved) -> None:
    again = Router.from_pretrained(saved["out"])
    torch.testing.assert_close(_log_probs(again), _log_probs(saved["router"]), atol=1e-6, rtol=0)
    a, b = saved["router"].policy.model.state_dict(), again.policy.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert again.temperature == 1.3 and again.schema.fingerprint() == saved["graph"].schema.fingerprint()


def test_exported_full_folder_and_version_3_folder_load_the_same(saved, capsys) -> None:
    root, out = saved["root"], saved["out"]
    full = export_main(["--router", str(out), "--out", str(root / "full")])
    assert "wrote" in capsys.readouterr().out
    cfg = json.loads((full / "config.json").read_text())
    assert cfg["base_encoder"] is None and (full / "schema.json").is_file()
    state = load_file(str(full / "model.safetensors"))
    assert set(state) == set(saved["router"].policy.model.state_dict())
    want = _log_probs(saved["router"])
    torch.testing.assert_close(_log_probs(Router.from_pretrained(full)), want, atol=1e-6, rtol=0)
    # an older full folder (version 3: no base_encoder, no link_features) loads and re-saves slim
    cfg["version"] = 3
    del cfg["base_encoder"], cfg["link_features"]
    (full / "config.json").write_text(json.dumps(cfg))
    old = Router.from_pretrained(full)
    torch.testing.assert_close(_log_probs(old), want, atol=1e-6, rtol=0)
    slim_again = export_main(["--router", str(full), "--out", str(root / "slim2"), "--slim"])
    assert set(load_file(str(slim_again / "model.safetensors"))) == set(old.policy.model.trained_keys())
    torch.testing.assert_close(_log_probs(Router.from_pretrained(slim_again)), want, atol=1e-6, rtol=0)


def test_a_base_encoder_that_hashes_differently_is_one_line(saved, tmp_path: Path) -> None:
    import shutil

    bad = shutil.copytree(saved["out"], tmp_path / "bad")
    cfg = json.loads((bad / "config.json").read_text())
    cfg["base_encoder"]["sha256"] = "0" * 64
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config.json: base encoder 'all-MiniLM-L6-v2' .* has weights sha256 "
                       r"[0-9a-f]{16}\.\.\., the router was trained on 0{16}\.\.\.; .*python -m router.export") as info:
        Router.from_pretrained(bad)
    assert "\n" not in str(info.value)
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match=r"model.safetensors: not a readable safetensors file"):
        Router.from_pretrained(bad)


def test_export_help_is_plain_words() -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "router.export", "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("usage: python -m router.export")
    assert "``" not in run.stdout and ":func:" not in run.stdout and "--slim" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "router.export", "--router", "x"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) <= 2


def test_export_refuses_an_out_folder_whose_replacement_would_lose_files(saved, tmp_path: Path) -> None:
    """--out holding the router (its parent), inside it, an existing file or a non-empty folder
    that is not a router checkpoint: one line, exit 2, nothing touched (before, --out PARENT
    deleted the router and everything beside it)."""
    import shutil

    from core.errors import ConfigError
    from router.export import export

    parent = tmp_path / "runs"
    router = shutil.copytree(saved["out"], parent / "r")
    (parent / "notes.txt").write_text("keep me")
    (tmp_path / "afile").write_text("keep me too")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("and me")
    for out, message in [(parent, "holds the --router folder"), (router / "sub", "is inside the --router folder"),
                         (tmp_path / "afile", "is an existing file"), (tmp_path / "data", "not empty and not a router checkpoint")]:  # fmt: skip
        with pytest.raises(SystemExit) as info:
            export_main(["--router", str(router), "--out", str(out)])
        assert info.value.code == 2
        with pytest.raises(ConfigError, match=message) as err:
            export(router, out)
        assert "\n" not in str(err.value)
    assert (parent / "notes.txt").read_text() == "keep me" and (router / "config.json").is_file() and not (router / "sub").exists()
    assert (tmp_path / "afile").read_text() == "keep me too" and (tmp_path / "data" / "x.txt").read_text() == "and me"


def test_export_of_a_bad_json_file_or_to_an_unwritable_place_is_one_line(saved, tmp_path: Path) -> None:
    import shutil

    from router.export import export

    router = shutil.copytree(saved["out"], tmp_path / "r")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="cannot write the exported router") as info:
        export(router, tmp_path / "afile" / "out", slim=True)  # a folder under a file
    assert "\n" not in str(info.value)
    (router / "eval.json").write_text("{bad")
    with pytest.raises(CheckpointError, match=r"eval.json: unreadable JSON file") as info:
        export(router, tmp_path / "out", slim=True)
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_weights_of_another_shape_are_one_line(saved, tmp_path: Path) -> None:
    import shutil

    bad = shutil.copytree(saved["out"], tmp_path / "bad")
    cfg = json.loads((bad / "config.json").read_text())
    cfg["model"]["head_dim"] = 16  # torch lists each mismatched tensor on its own line
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model.safetensors: weights do not fit the model \(size mismatch") as info:
        Router.from_pretrained(bad)
    assert "\n" not in str(info.value)


def test_a_failed_copy_during_export_leaves_the_previous_export_whole(saved, tmp_path: Path, monkeypatch) -> None:
    import shutil

    import router.model
    from router.export import export

    router_dir = shutil.copytree(saved["out"], tmp_path / "r")
    (router_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    out = export(router_dir, tmp_path / "out", slim=True)
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'

    def disk_full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(router.model.shutil, "copy2", disk_full)
    with pytest.raises(CheckpointError, match="cannot write the exported router"):
        export(router_dir, tmp_path / "out", slim=True)
    assert (tmp_path / "out" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (tmp_path / "out" / "config.json").is_file()
