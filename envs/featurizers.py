"""Question featurizers: what a routing environment shows the agent of a question.

A featurizer turns a batch of question strings into named fixed-shape arrays, one row per question,
and declares the gymnasium space of one row of each. The environment precomputes them once per
sample set (:class:`FeatureTable`), so a step is an array lookup.

Three kinds ship here:

- :class:`HashedNgramFeaturizer`: offline, dependency-free, deterministic across processes: a
  signed hashed bag of character n-grams and words, L2-normalised (the "hashing trick" of
  Weinberger et al., 2009, https://arxiv.org/abs/0902.2206). Works for Chinese too, since its
  unigrams and bigrams are characters. Used by the tests and benchmarks.
- :class:`EncoderFeaturizer`: the router's own sentence embedding (any object with
  ``encode(texts, prefix) -> (n, hidden)`` L2-normalised, e.g. ``data_pipeline.encoders.TextEncoder``).
- :class:`TokenFeaturizer`: token ids and attention mask from a Hugging Face tokenizer, for
  policies that run their own encoder.

>>> f = HashedNgramFeaturizer(dim=16)
>>> x = f(["Which orders did Alice Martin place?", "客户买过哪些产品？"])["question"]
>>> x.shape, x.dtype.name, bool(abs((x ** 2).sum(axis=1) - 1).max() < 1e-5)
((2, 16), 'float32', True)
>>> bool((f(["Which orders did Alice Martin place?"])["question"] == x[:1]).all())
True
"""

from __future__ import annotations

import hashlib
import io
import unicodedata
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from core.errors import ConfigError, DataError
from core.io import atomic_write_bytes, cache_dir
from core.samples import Sample


@runtime_checkable
class QuestionFeaturizer(Protocol):
    """The contract of a featurizer.

    Attributes:
        cache_key: a string that identifies the featurizer *and its weights* (so equal keys mean
            equal features for equal text), or None when features must not be cached on disk.
    """

    cache_key: str | None

    def spaces(self) -> dict[str, spaces.Box]:
        """The space of one question's features, by observation key."""
        ...

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Features of ``texts``: each array has shape ``(len(texts), *space.shape)``."""
        ...


def _stable_hash(s: str) -> int:
    """A 32-bit hash that is the same in every process (unlike ``hash()``)."""
    return zlib.crc32(s.encode("utf-8"))


@dataclass(frozen=True)
class HashedNgramFeaturizer:
    """Signed hashed bag of character n-grams plus words, L2-normalised: ``{"question": (dim,)}``.

    Text is NFKC-normalised and lower-cased; each character n-gram (``ngram_range`` inclusive,
    taken over the text padded with one space each side) and each whitespace word adds +-1 to
    bucket ``crc32(feature) % dim``, the sign from another bit of the same hash, so collisions
    cancel on average instead of piling up. Counts are log-scaled (``sign * log1p(|count|)``)
    and the row is L2-normalised, so every value lies in ``[-1, 1]``. An empty text is all zeros.

    Args:
        dim: output width (>= 8).
        ngram_range: smallest and largest n-gram length, ``1 <= lo <= hi``.

    Raises:
        ConfigError: for a bad ``dim`` or ``ngram_range``.
    """

    dim: int = 512
    ngram_range: tuple[int, int] = (1, 4)

    def __post_init__(self) -> None:
        if self.dim < 8:
            raise ConfigError(f"must be >= 8, got {self.dim}", where="dim")
        lo, hi = self.ngram_range
        if not 1 <= lo <= hi:
            raise ConfigError(f"needs 1 <= lo <= hi, got {self.ngram_range}", where="ngram_range")

    @property
    def cache_key(self) -> None:
        """Never cached on disk: hashing is faster than reading a file back."""
        return None

    def spaces(self) -> dict[str, spaces.Box]:
        return {"question": spaces.Box(-1.0, 1.0, shape=(self.dim,), dtype=np.float32)}

    def _features(self, text: str) -> list[str]:
        t = unicodedata.normalize("NFKC", text).lower().strip()
        if not t:
            return []
        padded = f" {t} "
        lo, hi = self.ngram_range
        grams = [padded[i : i + n] for n in range(lo, hi + 1) for i in range(len(padded) - n + 1)]
        return grams + [f"w:{w}" for w in t.split()]

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                h = _stable_hash(feat)
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        out = np.sign(out) * np.log1p(np.abs(out))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        return {"question": np.clip(out, -1.0, 1.0).astype(np.float32)}


class EncoderFeaturizer:
    """A sentence encoder's embedding: ``{"question": (hidden,)}`` in ``[-1, 1]``.

    Args:
        encoder: an object with ``encode(texts, prefix) -> (n, hidden)`` returning L2-normalised
            rows (numpy array or torch tensor) and a ``hidden_size``; ``data_pipeline.encoders.TextEncoder``
            is one.
        prefix: prepended to every text; None takes ``encoder.spec.query_prefix`` when the
            encoder has one (e5: ``"query: "``), else ``""``.
        name: identifies the encoder's weights for the on-disk feature cache; None disables it.
        batch_size: texts per ``encode`` call.

    Raises:
        ConfigError: ``encoder`` has no ``encode`` method.
    """

    def __init__(self, encoder: Any, prefix: str | None = None, name: str | None = None, batch_size: int = 64):
        if not callable(getattr(encoder, "encode", None)):
            raise ConfigError("encoder needs an encode(texts, prefix) method", where="encoder")
        self.encoder = encoder
        if prefix is None:
            prefix = str(getattr(getattr(encoder, "spec", None), "query_prefix", "") or "")
        self.prefix = prefix
        self.batch_size = batch_size
        self.cache_key = None if name is None else f"encoder-{name}-{prefix!r}"
        hidden = getattr(encoder, "hidden_size", None)
        self.hidden_size = int(hidden) if hidden else int(self._encode(["probe"]).shape[1])

    @classmethod
    def from_name(cls, name_or_path: str | None = None) -> EncoderFeaturizer:
        """``data_pipeline.encoders.TextEncoder.from_pretrained(name_or_path)`` (its default when None).

        The disk-cache key holds the model directory and the size and mtime of its files, so a
        directory overwritten by new weights gets new features.

        Raises:
            ConfigError, DownloadError, CheckpointError: as ``TextEncoder.from_pretrained``.
        """
        from data_pipeline.encoders import DEFAULT_ENCODER, TextEncoder  # torch and transformers load only when asked for

        encoder = TextEncoder.from_pretrained(name_or_path or DEFAULT_ENCODER)
        d = Path(encoder.spec.path)
        stamp = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir()) if p.is_file()]
        digest = hashlib.sha256(repr((str(d), stamp)).encode()).hexdigest()[:16]
        return cls(encoder, name=f"{d.name}-{digest}")

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        x = self.encoder.encode(list(texts), prefix=self.prefix)
        if hasattr(x, "detach"):
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.float32)

    def spaces(self) -> dict[str, spaces.Box]:
        return {"question": spaces.Box(-1.0, 1.0, shape=(self.hidden_size,), dtype=np.float32)}

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        parts = [self._encode(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        x = np.concatenate(parts) if parts else np.zeros((0, self.hidden_size), np.float32)
        return {"question": np.clip(x, -1.0, 1.0)}


class TokenFeaturizer:
    """Token ids and attention mask: ``{"input_ids": (max_length,) int64, "attention_mask": (max_length,) int64}``.

    Args:
        tokenizer: a Hugging Face tokenizer (callable with ``padding``/``truncation``/``max_length``).
        max_length: tokens per question; longer questions are truncated, shorter ones padded.
        prefix: prepended to every text.
        name: identifies the tokenizer for the on-disk cache; None disables it.
    """

    def __init__(self, tokenizer: Callable[..., Any], max_length: int = 64, prefix: str = "", name: str | None = None):
        if max_length < 2:
            raise ConfigError(f"must be >= 2, got {max_length}", where="max_length")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.prefix = prefix
        self.cache_key = None if name is None else f"tokens-{name}-{max_length}-{prefix!r}"
        self.vocab_size = int(len(tokenizer))  # type: ignore[arg-type]

    def spaces(self) -> dict[str, spaces.Box]:
        return {
            "input_ids": spaces.Box(0, self.vocab_size - 1, shape=(self.max_length,), dtype=np.int64),
            "attention_mask": spaces.Box(0, 1, shape=(self.max_length,), dtype=np.int64),
        }

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        enc = self.tokenizer(
            [self.prefix + t for t in texts],
            padding="max_length",
            truncation=True,
            max_length=self.max_length,
            return_tensors="np",
        )
        return {k: np.asarray(enc[k], dtype=np.int64) for k in ("input_ids", "attention_mask")}


@dataclass(frozen=True)
class FeatureTable:
    """Precomputed features of a sample set: ``arrays[key]`` has shape ``(n_samples, *space.shape)``.

    Build it once and share it between the environments of a vector env; rows follow the order of
    the samples it was built from.
    """

    spaces: Mapping[str, spaces.Box]
    arrays: Mapping[str, np.ndarray]
    n: int

    @classmethod
    def build(
        cls,
        featurizer: QuestionFeaturizer | Sequence[QuestionFeaturizer],
        samples: Sequence[Sample],
        use_disk_cache: bool = True,
    ) -> FeatureTable:
        """Featurize every question once (several featurizers merge their keys).

        When a featurizer has a ``cache_key`` and ``use_disk_cache`` is on, its arrays are kept in
        ``cache_dir("features")`` under a hash of the key and the questions, written atomically.

        Raises:
            ConfigError: two featurizers produce the same key, or an array does not fit its space.
            DataError: ``samples`` is empty.
        """
        if not samples:
            raise DataError("no samples to featurize", where="samples")
        featurizers = [featurizer] if isinstance(featurizer, QuestionFeaturizer) else list(featurizer)
        texts = [s.question for s in samples]
        all_spaces: dict[str, spaces.Box] = {}
        arrays: dict[str, np.ndarray] = {}
        for f in featurizers:
            f_spaces = f.spaces()
            clash = set(f_spaces) & set(all_spaces)
            if clash:
                raise ConfigError(f"two featurizers produce observation key(s) {sorted(clash)}", where="featurizer")
            f_arrays = _cached_call(f, texts) if use_disk_cache and f.cache_key else f(texts)
            for key, space in f_spaces.items():
                a = np.asarray(f_arrays[key], dtype=space.dtype)
                if a.shape != (len(texts), *space.shape):
                    raise ConfigError(
                        f"featurizer gave {key!r} of shape {a.shape}, expected {(len(texts), *space.shape)}",
                        where="featurizer",
                    )
                arrays[key] = a
            all_spaces.update(f_spaces)
        return cls(all_spaces, arrays, len(texts))

    def row(self, i: int) -> dict[str, np.ndarray]:
        """Features of sample ``i`` (copies, so callers may modify them)."""
        return {k: a[i].copy() for k, a in self.arrays.items()}


def _cached_call(f: QuestionFeaturizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    h = hashlib.sha256(str(f.cache_key).encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    path = cache_dir("features") / f"{h.hexdigest()[:32]}.npz"
    if path.is_file():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    arrays = f(texts)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())
    return arrays
