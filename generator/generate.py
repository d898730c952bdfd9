"""Running the generator: sampling groups for GRPO, scoring completions, batch inference.

Three jobs, all built so no work is done twice:

- :func:`sample_group`: ``n`` completions of one prompt. The prompt is prefilled once (batch 1)
  and its KV cache repeated ``n`` times before ``model.generate`` decodes with the cache, instead
  of prefilling the same prompt ``n`` times.
- :func:`completion_logprobs`: per-token log-probs of ``n`` completions of one prompt, in one
  differentiable pass. The prompt runs once (batch 1, only its last position's logits are made),
  its cache is repeated for the ``n`` completions, and logits exist only for completion tokens.
  Gradients flow through the shared prompt exactly as through ``n`` copies of it. The same
  function under :func:`generator.models.reference_logits_context` gives the KL reference.
- :func:`generate_answers`: greedy (or sampled) answers for many prompts, left-padded in
  batches of similar length; ``python -m generator.generate`` runs it over a data split and
  reports execution accuracy.

A trained generator folder (written by :func:`save_generator`) holds the LoRA adapter (or full
weights), the tokenizer and ``route2sql_generator.json`` naming the base model;
:func:`load_policy` reads it back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from core.cli import parse, run_main
from core.dataset import BuiltDataset, load_dataset
from core.errors import CheckpointError, ConfigError
from core.graph import JoinPath
from core.io import atomic_directory, write_json, write_jsonl
from core.samples import Sample
from generator.models import DEFAULT_GENERATOR, ModelConfig, load_generator
from generator.prompt import Message, build_prompt
from generator.retrieval import ExampleRetriever

GENERATOR_META = "route2sql_generator.json"
"""File in a trained generator folder naming its base model and how it was trained."""


# --------------------------------------------------------------------------- prompts


def prompt_token_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> list[int]:
    """Token ids of a chat prompt, ending with the assistant turn's opening (generation prompt)."""
    enc = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(enc["input_ids"])


def sample_messages(
    sample: Sample,
    ds: BuiltDataset,
    retriever: ExampleRetriever | None,
    *,
    path: JoinPath | None,
    k: int,
    with_reasoning: bool = True,
    schema_detail: str = "full",
    value_linking: bool = False,
) -> list[Message]:
    """The prompt of one sample: its question, ``path`` (routed, gold or None) and ``k`` retrieved
    examples from the training split (never the sample itself); ``schema_detail`` as in
    :func:`generator.prompt.build_prompt`; with ``value_linking`` the values the data set's value
    index finds in the question are listed as the literals to use."""
    examples = retriever.for_sample(sample, k) if retriever is not None and k > 0 else []
    values = ds.values.lookup(sample.question) if value_linking and ds.values is not None else []
    return build_prompt(sample.question, path, ds.schema, ds.graph, examples, k=k, with_reasoning=with_reasoning,
                        schema_detail=schema_detail, values=values)  # fmt: skip


def route_paths(samples: Sequence[Sample], router_dir: Path | None, ds: BuiltDataset) -> list[JoinPath]:
    """The path each prompt is conditioned on: the router's prediction when ``router_dir`` is
    given, else each sample's gold path.

    Raises:
        CheckpointError: ``router_dir`` is not a router checkpoint, or was trained on another
            schema (see :meth:`router.route.Router.from_pretrained`).
    """
    if router_dir is None:
        return [s.path for s in samples]
    from router.route import Router  # imported here: only runs with a router pay for its modules

    router = Router.from_pretrained(router_dir, schema=ds.graph, values=ds.values)
    return list(router.predict_paths([s.question for s in samples]))


# --------------------------------------------------------------------------- model folders


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
        return model, tokenizer, eff
    adapter = json.loads(adapter_cfg_file.read_text(encoding="utf-8"))
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
    result = set_peft_model_state_dict(model, load_file(str(weights)))
    if result.unexpected_keys:
        raise CheckpointError(f"adapter weights do not fit the model: {result.unexpected_keys[:3]}", where=weights)
    from generator.models import load_tokenizer

    return model, load_tokenizer(init), eff


# --------------------------------------------------------------------------- GRPO-side primitives


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Eval mode (no dropout) and no grad inside the block; the previous mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def completion_mask(completion_ids: torch.Tensor, eos_token_ids: Sequence[int]) -> torch.Tensor:
    """1 on every generated token up to and including the first end-of-sequence token.

    Tokens after it are padding (for SmolLM2 the pad id *is* EOS, so ids alone cannot tell
    padding from a real EOS; position can).

    Args:
        completion_ids: ``(n, T)``.
        eos_token_ids: ids that end a completion.

    Returns:
        ``(n, T)`` long tensor of 0/1.

    >>> completion_mask(torch.tensor([[5, 2, 2], [5, 6, 7]]), [2]).tolist()
    [[1, 1, 0], [1, 1, 1]]
    """
    is_eos = torch.zeros_like(completion_ids, dtype=torch.bool)
    for e in eos_token_ids:
        is_eos |= completion_ids == e
    seen_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    return (seen_before == 0).long()


def _eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    return [int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])]


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (where its inputs must go)."""
    return next(model.parameters()).device


def cache_kwarg(model: torch.nn.Module) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` in recent transformers 5.x,
    ``past_key_values`` before (deprecated since)."""
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def _prefill(model: torch.nn.Module, prompt: torch.Tensor, n: int) -> DynamicCache:
    """The KV cache of ``prompt`` (shape ``(1, P)``), run once and repeated ``n`` times."""
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{cache_kwarg(model): cache})
    if n > 1:
        cache.batch_repeat_interleave(n)
    return cache


@dataclass(frozen=True)
class Completions:
    """``n`` sampled completions of one prompt.

    Attributes:
        prompt_ids: ``(P,)`` the prompt's token ids.
        completion_ids: ``(n, T)`` generated ids, right-padded (``T`` = longest completion).
        mask: ``(n, T)`` 1 on real tokens (through the first EOS), 0 on padding.
        texts: the decoded completions (special tokens dropped).
        seconds: wall time of the generation.
    """

    prompt_ids: torch.Tensor
    completion_ids: torch.Tensor
    mask: torch.Tensor
    texts: list[str]
    seconds: float

    @property
    def lengths(self) -> torch.Tensor:
        """``(n,)`` completion lengths in tokens."""
        return self.mask.sum(dim=1)


def sample_group(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[int],
    n: int,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    min_new_tokens: int = 0,
) -> Completions:
    """Sample ``n`` completions of one prompt with the KV cache (prompt prefilled once).

    Runs in eval mode without grad; the model's train/eval mode is restored after.

    Args:
        model: a causal LM (peft-wrapped or not).
        tokenizer: its tokenizer (decodes the texts).
        prompt_ids: the prompt, from :func:`prompt_token_ids`.
        n: completions to draw.
        max_new_tokens: per completion at most.
        temperature: sampling temperature (> 0).
        top_p: nucleus mass.
        min_new_tokens: suppress EOS before this many tokens (benchmarks use it for fixed lengths).

    Returns:
        :class:`Completions`.
    """
    t0 = time.perf_counter()
    device = model_device(model)
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    with eval_mode(model):
        cache = _prefill(model, prompt[:, :-1], n) if prompt.shape[1] > 1 else None
        out = model.generate(
            input_ids=prompt.expand(n, -1),
            attention_mask=torch.ones(n, prompt.shape[1], dtype=torch.long, device=device),
            **{cache_kwarg(model): cache},
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            min_new_tokens=min_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    completion_ids = out[:, prompt.shape[1] :]
    mask = completion_mask(completion_ids, _eos_ids(model, tokenizer))
    texts = tokenizer.batch_decode(completion_ids * mask + tokenizer.pad_token_id * (1 - mask), skip_special_tokens=True)
    return Completions(prompt[0], completion_ids, mask, texts, time.perf_counter() - t0)


def selective_log_softmax(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., ids]`` without materialising the whole log-softmax.

    Args:
        logits: ``(n, T, V)``.
        ids: ``(n, T)``.

    Returns:
        ``(n, T)`` log-probabilities.
    """
    picked = torch.gather(logits, -1, ids.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def completion_logprobs(
    model: torch.nn.Module, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Per-token log-probs of ``n`` completions of one prompt, the prompt computed once.

    Differentiable when called with grad enabled. Equal (to float rounding) to running the
    ``n`` full sequences ``prompt + completion`` and reading the completion positions.

    Args:
        model: a causal LM (or a peft model; call it under ``reference_logits_context`` for the
            reference).
        prompt_ids: ``(P,)`` with ``P >= 1``.
        completion_ids: ``(n, T)``, right-padded (padding positions get values too; mask them).
        temperature: logits are divided by it (the sampling temperature).

    Returns:
        ``(n, T)`` float log-probs.
    """
    n, t = completion_ids.shape
    cache = DynamicCache(config=model.config)
    kw = cache_kwarg(model)
    first = model(input_ids=prompt_ids[None, :], use_cache=True, logits_to_keep=1, **{kw: cache}).logits
    first = first[:, -1:, :].expand(n, 1, -1)
    if t > 1:
        cache.batch_repeat_interleave(n)
        rest = model(input_ids=completion_ids[:, :-1], use_cache=True, **{kw: cache}).logits
        logits = torch.cat([first, rest], dim=1)
    else:
        logits = first
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return selective_log_softmax(logits, completion_ids)


class CompletionScorer(torch.nn.Module):
    """:func:`completion_logprobs` as a module, so ``accelerator.prepare`` can wrap it in DDP
    (one forward per backward; the gradient all-reduce hooks see every trainable parameter).

    Args:
        model: the policy.
        temperature: the sampling temperature.
    """

    def __init__(self, model: torch.nn.Module, temperature: float = 1.0) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature

    def forward(self, prompt_ids: torch.Tensor, completion_ids: torch.Tensor) -> torch.Tensor:
        """``(P,)``, ``(n, T)`` -> ``(n, T)`` log-probs."""
        return completion_logprobs(self.model, prompt_ids, completion_ids, self.temperature)


# --------------------------------------------------------------------------- batch inference


def generate_answers(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    batch_size: int = 4,
    temperature: float = 0.0,
    progress: bool = False,
    join_clauses: Sequence[str | None] | None = None,
) -> list[str]:
    """Answer many prompts, ``batch_size`` at a time, grouped by length (left padding).

    Args:
        prompts: token ids per prompt (:func:`prompt_token_ids`).
        max_new_tokens: per answer at most.
        batch_size: prompts per ``generate`` call.
        temperature: 0 for greedy decoding, else sampling.
        progress: show a tqdm bar.
        join_clauses: per prompt, the routed path's ``FROM ... JOIN`` clause to force once the
            answer writes ``FROM`` (:class:`generator.constrained.JoinSkeletonProcessor`), or None
            (for one prompt or for all) to decode freely.

    Returns:
        One decoded answer per prompt, in the input order.
    """
    from tqdm.auto import tqdm

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[str] = [""] * len(prompts)
    pad = tokenizer.pad_token_id
    eos = _eos_ids(model, tokenizer)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with eval_mode(model):
        for batch in tqdm(batches, desc="generate", disable=not progress, unit="batch"):
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attn = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                p = list(prompts[i])
                ids[row, width - len(p) :] = torch.tensor(p)
                attn[row, width - len(p) :] = 1
            kwargs: dict[str, Any] = {"do_sample": False}
            if temperature > 0:
                kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0}
            if join_clauses is not None and any(join_clauses[i] for i in batch):
                from transformers import LogitsProcessorList

                from generator.constrained import JoinSkeletonProcessor

                proc = JoinSkeletonProcessor(tokenizer, [join_clauses[i] for i in batch], prompt_width=width)
                kwargs["logits_processor"] = LogitsProcessorList([proc])
            device = model_device(model)
            out = model.generate(input_ids=ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new_tokens, pad_token_id=pad,
                                 **kwargs)  # fmt: skip
            comp = out[:, width:].cpu()
            mask = completion_mask(comp, eos)
            texts = tokenizer.batch_decode(comp * mask + pad * (1 - mask), skip_special_tokens=True)
            for row, i in enumerate(batch):
                answers[i] = texts[row]
    return answers


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """``python -m generator.generate``: answer a split, score each answer, write JSONL + summary.

    Returns:
        The summary dict (also written next to ``--out`` as ``<stem>.summary.json``).
    """
    from generator.config import GenerateConfig
    from rewards.sql import sql_reward_components

    cfg = parse(GenerateConfig, argv, description=__doc__)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    ds = load_dataset(cfg.data, db_path=cfg.db, sql_user="generator.generate")
    samples = ds.split(cfg.split)
    if cfg.limit is not None and cfg.limit < len(samples):
        keep = sorted(random.Random(cfg.seed).sample(range(len(samples)), cfg.limit))
        samples = [samples[i] for i in keep]
    if not samples:
        raise ConfigError(f"split {cfg.split!r} of {cfg.data} has no samples", where="--split")
    model, tokenizer, _ = load_policy(cfg.model, cfg.generator)
    detail = cfg.schema_detail or trained_prompt(cfg.generator).get("schema_detail", "full")
    linking = cfg.value_linking if cfg.value_linking is not None else bool(trained_prompt(cfg.generator).get("value_linking", False))
    retriever = ExampleRetriever(ds.split("train")) if cfg.k_examples > 0 else None
    paths: list[JoinPath | None] = [None] * len(samples) if cfg.no_path else list(route_paths(samples, cfg.router, ds))
    prompts = []
    for s, p in zip(samples, paths, strict=True):
        ids = prompt_token_ids(tokenizer, sample_messages(s, ds, retriever, path=p, k=cfg.k_examples,
                                                          with_reasoning=cfg.with_reasoning, schema_detail=detail,
                                                          value_linking=linking))  # fmt: skip
        prompts.append(ids[-cfg.max_prompt_tokens :])
    t0 = time.perf_counter()
    answers = generate_answers(model, tokenizer, prompts, max_new_tokens=cfg.max_new_tokens,
                               batch_size=cfg.batch_size, temperature=cfg.temperature, progress=cfg.progress)
    gen_s = time.perf_counter() - t0
    with cfg.reward.make_scorer() as scorer:  # worker processes: every answer under a hard deadline
        comps = sql_reward_components(answers, [s.sql for s in samples], ds.db_path, cfg.reward, scorer)
    records = []
    for s, p, a, c in zip(samples, paths, answers, comps, strict=True):
        records.append({"id": s.id, "question": s.question, "path": None if p is None else str(p),
                        "gold_sql": s.sql, "completion": a, **c})  # fmt: skip
    n = len(records)
    summary = {
        "split": cfg.split,
        "n": n,
        "generator": str(cfg.generator) if cfg.generator else cfg.model.model,
        "path_source": "none" if cfg.no_path else ("router" if cfg.router else "gold"),
        "k_examples": cfg.k_examples,
        "schema_detail": detail,
        "max_new_tokens": cfg.max_new_tokens,
        "truncated_rate": sum(1 for r in records if "</answer>" not in r["completion"]) / n,
        "execution_accuracy": sum(r["exact"] for r in records) / n,
        "execution_f1": sum(r["execution"] or 0.0 for r in records) / n,
        "execution_nonzero": sum(1 for r in records if (r["execution"] or 0.0) > 0) / n,
        "format_rate": sum(r["format"] for r in records) / n,
        "syntax_rate": sum(r["syntax"] for r in records) / n,
        "mean_total_reward": sum(r["total"] for r in records) / n,
        "generation_seconds": round(gen_s, 1),
    }
    for key in ("easy", "medium", "hard"):
        sub = [r for r, s in zip(records, samples, strict=True) if s.difficulty == key]
        if sub:
            summary[f"execution_accuracy/{key}"] = sum(r["exact"] for r in sub) / len(sub)
    out = Path(cfg.out)
    write_jsonl(out, records)
    write_json(out.with_name(out.stem + ".summary.json"), summary)
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    run_main(main)
