"""Trained generator folders, in the manner of ``save_pretrained`` / ``from_pretrained``.

A folder written by :func:`save_generator` holds the LoRA adapter (or full weights), the tokenizer
and ``route2sql_generator.json`` naming the base model, how it was trained and its prompt settings
(:class:`generator.prompt.PromptSettings`); :func:`load_policy` reads it back onto its base model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from core.errors import CheckpointError, ConfigError
from core.io import atomic_directory, write_json
from generator.models import DEFAULT_GENERATOR, ModelConfig, load_generator
from generator.prompt import UNTRAINED_PROMPT, PromptOverrides, PromptSettings

GENERATOR_META = "route2sql_generator.json"
"""File in a trained generator folder naming its base model and how it was trained."""


def write_generator(folder: str | Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                    meta: dict[str, Any]) -> None:  # fmt: skip
    """Write the files of a trained generator folder into ``folder`` (not atomic by itself; see
    :func:`save_generator`): the adapter (or full model), the tokenizer and the meta file.

    Args:
        folder: an existing folder, usually a temporary one about to be renamed.
        model: a :class:`peft.PeftModel` (only the adapter is saved) or a full model.
        tokenizer: saved alongside.
        meta: JSON-able facts (base model, config, metrics); ``base_model`` is required for an
            adapter, so :func:`load_policy` knows what to put it on.

    Raises:
        ConfigError: an adapter without ``meta["base_model"]``.
    """
    if isinstance(model, PeftModel) and not meta.get("base_model"):
        raise ConfigError("meta must name base_model for a LoRA adapter", where="base_model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_json(Path(folder) / GENERATOR_META, {"format": "route2sql-generator", "version": 1, **meta})


def save_generator(
    out_dir: str | Path, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, meta: dict[str, Any]
) -> Path:
    """:func:`write_generator` into ``out_dir``, replaced in one rename (readers never see half).

    Raises:
        ConfigError: an adapter without ``meta["base_model"]``.
    """
    with atomic_directory(out_dir) as tmp:
        write_generator(tmp, model, tokenizer, meta)
    return Path(out_dir)


def read_generator_meta(path: str | Path) -> dict[str, Any]:
    """The ``route2sql_generator.json`` of a trained generator folder.

    Raises:
        CheckpointError: the folder or its meta file is missing or unreadable.
    """
    meta_file = Path(path) / GENERATOR_META
    if not meta_file.is_file():
        raise CheckpointError(f"not a trained generator folder (no {GENERATOR_META})", where=path)
    try:
        return json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"unreadable ({exc})", where=meta_file) from exc


def trained_prompt(path: str | Path | None) -> dict[str, Any]:
    """The prompt settings a trained generator folder was trained with (its meta's ``prompt``
    entry, e.g. ``{"k_examples": 1, "schema_detail": "compact"}``); ``{}`` for None or a folder
    that does not record them.

    Raises:
        CheckpointError: ``path`` is not a trained generator folder.
    """
    if path is None:
        return {}
    meta = read_generator_meta(path)
    prompt = meta.get("prompt")
    if isinstance(prompt, dict):
        return prompt
    cfg = meta.get("config")
    return {k: cfg[k] for k in ("k_examples", "with_reasoning", "schema_detail") if k in cfg} if isinstance(cfg, dict) else {}


def prompt_settings_for(generator: str | Path | None, overrides: PromptOverrides | None = None) -> PromptSettings:
    """The settings to prompt ``generator`` with: what a trained generator folder records it was
    trained with, else :data:`~generator.prompt.UNTRAINED_PROMPT` (a base model's name or
    folder, or None for the default base model); every setting given in ``overrides`` wins.

    Raises:
        CheckpointError: ``generator`` is a generator folder whose meta cannot be read.
    """
    trained = generator is not None and (Path(generator) / GENERATOR_META).is_file()
    settings = PromptSettings.from_recorded(trained_prompt(generator)) if trained else UNTRAINED_PROMPT
    return (overrides or PromptOverrides()).apply(settings)


def load_policy(cfg: ModelConfig, init: str | Path | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, ModelConfig]:
    """Load the generator to train or run: the base ``cfg.model``, or a trained folder ``init``.

    A folder with a LoRA adapter is loaded onto the base model its meta names, with the
    adapter's own rank, alpha, dropout and target modules (they override ``cfg``'s) and its
    weights restored, still trainable. A folder with full weights is loaded as the model itself.

    Returns:
        ``(model, tokenizer, effective_cfg)``.

    Raises:
        CheckpointError: ``init`` is not a trained generator folder or its weights do not fit.
        ConfigError, DownloadError: as :func:`generator.models.load_generator`.
    """
    if init is None:
        model, tokenizer = load_generator(cfg)
        return model, tokenizer, cfg
    init = Path(init)
    meta = read_generator_meta(init)
    adapter_cfg_file = init / "adapter_config.json"
    if not adapter_cfg_file.is_file():
        eff = dataclasses.replace(cfg, model=str(init), use_lora=cfg.use_lora)
        model, tokenizer = load_generator(eff)
        check_tokenizer_fits(model, tokenizer, init)
        return model, tokenizer, eff
    try:
        adapter = json.loads(adapter_cfg_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"is not valid JSON ({exc})", where=adapter_cfg_file) from None
    if not isinstance(adapter, dict):
        raise CheckpointError("must hold a JSON object", where=adapter_cfg_file)
    base = str(meta.get("base_model") or DEFAULT_GENERATOR)
    if cfg.model not in (DEFAULT_GENERATOR, base):
        raise ConfigError(f"--model {cfg.model} differs from the base model {base} the adapter in {init} was trained on",
                          where="--model")  # fmt: skip
    targets = adapter.get("target_modules") or list(cfg.lora_target_modules)
    eff = dataclasses.replace(
        cfg,
        model=base,
        use_lora=True,
        lora_r=int(adapter.get("r", cfg.lora_r)),
        lora_alpha=int(adapter.get("lora_alpha", cfg.lora_alpha)),
        lora_dropout=float(adapter.get("lora_dropout", cfg.lora_dropout)),
        lora_target_modules=tuple(sorted(targets)),
    )
    model, _ = load_generator(eff)
    weights = init / "adapter_model.safetensors"
    if not weights.is_file():
        raise CheckpointError("missing adapter_model.safetensors", where=init)
    try:
        state = load_file(str(weights))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError (truncated, not safetensors)
        raise CheckpointError(f"is not a readable safetensors file ({str(exc)[:200]})", where=weights) from None
    try:
        result = set_peft_model_state_dict(model, state)
    except RuntimeError as exc:  # shapes of another base model
        first = str(exc).strip().splitlines()[-1].strip()
        raise CheckpointError(f"adapter weights do not fit the base model {base} ({first})", where=weights) from None
    if result.unexpected_keys:
        raise CheckpointError(f"adapter weights do not fit the model: {result.unexpected_keys[:3]}", where=weights)
    from generator.models import load_tokenizer

    tokenizer = load_tokenizer(init)
    check_tokenizer_fits(model, tokenizer, init)
    return model, tokenizer, eff


def check_tokenizer_fits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, where: str | Path) -> None:
    """Refuse a generator folder whose tokenizer belongs to another model: it has more tokens than
    the model's input embedding has rows (``(vocab, hidden)``), so its ids would index past it.

    Raises:
        CheckpointError: naming the folder, both sizes and what to do.
    """
    rows = int(model.get_input_embeddings().weight.shape[0])
    if len(tokenizer) > rows:
        raise CheckpointError(
            f"its tokenizer has {len(tokenizer)} tokens but the model's embedding has {rows} rows: the tokenizer "
            "belongs to another model; copy the base model's tokenizer files into the folder or retrain",
            where=where,
        )
