"""Sampling from the generator: ``n`` completions of one prompt for GRPO, and batch inference.

- :func:`sample_group`: ``n`` completions of one prompt. The prompt is prefilled once (batch 1)
  and its KV cache written ``n`` times into a preallocated (static) cache before
  ``model.generate`` decodes with it, instead of prefilling the same prompt ``n`` times; LoRA
  adapters are merged into the base weights while it decodes (:func:`merged_lora`), so each
  decoding step runs plain linear layers.
- :func:`generate_answers`: greedy (or sampled) answers for many prompts, left-padded in
  batches of similar length, optionally route-constrained (:mod:`generator.constrained`).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from peft import PeftModel, PeftType
from transformers import DynamicCache, PreTrainedTokenizerBase, StaticCache


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


def _mergeable_lora(model: torch.nn.Module) -> bool:
    """A peft LoRA model whose base weights are plain floating-point tensors (not quantized)."""
    if not isinstance(model, PeftModel) or model.active_peft_config.peft_type != PeftType.LORA:
        return False
    base = model.get_base_model()
    return getattr(base, "hf_quantizer", None) is None


@contextlib.contextmanager
def merged_lora(model: torch.nn.Module) -> Iterator[bool]:
    """Inside the block, a LoRA model's adapters are folded into its base weights.

    ``W <- W + scale * B @ A`` on entry (peft's ``merge_adapter``) and the same delta subtracted
    on exit (``unmerge_adapter``), as TRL does before it hands weights to vLLM. A decoding step
    then runs one matmul per linear layer instead of three plus the adapter's bookkeeping
    (``benchmarks/bench_sampling.py`` measures what it saves). Exact in eval mode (dropout off) up
    to float rounding: the restored weights differ from the originals by about one ulp. Models
    that are not LoRA, or whose base weights are quantized (merging into 4-bit weights would
    re-quantize them), are left as they are. Use only without grad: merged weights are not what
    the optimizer sees.

    Yields:
        True when the adapters were merged.
    """
    merge = _mergeable_lora(model)
    if merge:
        model.merge_adapter()
    try:
        yield merge
    finally:
        if merge:
            model.unmerge_adapter()


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


def _prefill(model: torch.nn.Module, prompt: torch.Tensor, n: int, max_cache_len: int | None) -> DynamicCache | StaticCache:
    """The KV cache of ``prompt`` (shape ``(1, P)``), run once and repeated ``n`` times.

    With ``max_cache_len`` the repeated cache is a preallocated
    :class:`~transformers.StaticCache` of that many positions, which writes each new token's keys
    and values in place; the dynamic cache (``None``) concatenates the whole cache on every
    decoding step (about a tenth of a step at 16 completions on a 2-core CPU,
    ``benchmarks/bench_sampling.py``).
    """
    prompt_cache = DynamicCache(config=model.config)
    model(input_ids=prompt, use_cache=True, logits_to_keep=1, **{cache_kwarg(model): prompt_cache})
    if max_cache_len is None:
        if n > 1:
            prompt_cache.batch_repeat_interleave(n)
        return prompt_cache
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    for i, layer in enumerate(prompt_cache.layers):
        cache.update(layer.keys.repeat_interleave(n, dim=0), layer.values.repeat_interleave(n, dim=0), i)
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
    merge_lora: bool = True,
    static_cache: bool = True,
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
        merge_lora: decode with LoRA adapters merged into the base weights (:func:`merged_lora`);
            False decodes through the adapters (the same distribution, slower).
        static_cache: decode into a preallocated KV cache; False uses the growing dynamic cache
            (the same samples, slower on CPU; kept for ``benchmarks/bench_sampling.py``).

    Returns:
        :class:`Completions`.
    """
    t0 = time.perf_counter()
    device = model_device(model)
    prompt = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    merging = merged_lora(model) if merge_lora else contextlib.nullcontext()
    with eval_mode(model), merging:
        cache_len = prompt.shape[1] + max_new_tokens if static_cache else None
        cache = _prefill(model, prompt[:, :-1], n, cache_len) if prompt.shape[1] > 1 else None
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
            disable_compile=True,  # a static cache would otherwise compile the model on GPUs
        )
    completion_ids = out[:, prompt.shape[1] :]
    mask = completion_mask(completion_ids, _eos_ids(model, tokenizer))
    texts = tokenizer.batch_decode(completion_ids * mask + tokenizer.pad_token_id * (1 - mask), skip_special_tokens=True)
    return Completions(prompt[0], completion_ids, mask, texts, time.perf_counter() - t0)


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
    seed: int | None = None,
) -> list[str]:
    """Answer many prompts, ``batch_size`` at a time, grouped by length (left padding).

    Args:
        prompts: token ids per prompt (:func:`generator.prompt.prompt_token_ids`).
        max_new_tokens: per answer at most.
        batch_size: prompts per ``generate`` call.
        temperature: 0 for greedy decoding, else sampling.
        progress: show a tqdm bar.
        join_clauses: per prompt, the routed path's ``FROM ... JOIN`` clause to force once the
            answer writes ``FROM`` (:class:`generator.constrained.JoinSkeletonProcessor`), or None
            (for one prompt or for all) to decode freely.
        seed: with sampling, draw from a generator seeded with this (the same answers on every
            run; torch's global random state is left as it was); None: torch's global state.

    Returns:
        One decoded answer per prompt, in the input order. With greedy decoding a prompt that
        repeats an earlier one with the same join clause is answered once and its answer copied
        (an A/B's routed and gold conditions share every question whose route is right).
    """
    if temperature == 0 and len(prompts) > 1:
        first: dict[tuple[tuple[int, ...], str | None], int] = {}
        keys = [(tuple(p), join_clauses[i] if join_clauses is not None else None) for i, p in enumerate(prompts)]
        unique = [first.setdefault(k, len(first)) for k in keys]
        if len(first) < len(prompts):
            once = generate_answers(model, tokenizer, [list(k[0]) for k in first], max_new_tokens=max_new_tokens,
                                    batch_size=batch_size, progress=progress,
                                    join_clauses=None if join_clauses is None else [k[1] for k in first])  # fmt: skip
            return [once[u] for u in unique]
    if temperature > 0 and seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return generate_answers(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                    temperature=temperature, progress=progress, join_clauses=join_clauses)  # fmt: skip
    from core.progress import progress_bar

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[str] = [""] * len(prompts)
    pad = tokenizer.pad_token_id
    eos = _eos_ids(model, tokenizer)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with eval_mode(model):
        for batch in progress_bar(batches, desc="generate", enabled=progress, unit="batch"):
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attn = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                p = list(prompts[i])
                ids[row, width - len(p) :] = torch.tensor(p)
                attn[row, width - len(p) :] = 1
            kwargs: dict[str, Any] = {"do_sample": False}
            if temperature > 0:
                kwargs |= {"do_sample": True, "temperature": temperature, "top_k": 0}
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
