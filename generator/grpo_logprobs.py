"""Per-token log-probs of a GRPO group in bounded memory, with the loss's backward folded in.

One group is ``n`` completions of one prompt. :func:`group_logprobs` returns their ``(n, T)``
log-probs (and, given a loss, accumulates its gradient into the parameters) without ever holding
what the straightforward computation holds at once:

- **No ``(n, T, V)`` logits.** The decoder's hidden states go through the output layer a few
  rows at a time (:func:`token_logprobs`): the chosen token's logit minus the row's logsumexp.
  For a frozen output layer (LoRA) the forward also stores ``d logp / d hidden`` per token, a
  ``(rows, hidden)`` tensor, so the backward needs no second pass over the vocabulary.
- **Completions in micro-batches.** The prompt's KV cache is computed once without a graph and
  becomes a leaf; ``micro_batch`` completions at a time attend to it, compute their loss and
  run their backward, which leaves the cache's gradient on the leaf.
- **The prompt backward in chunks.** Last, the prompt is recomputed ``prompt_chunk`` tokens at a
  time from the last chunk to the first (each with the cache of the tokens before it as a leaf)
  and back-propagated with the gradient its cache received; dropout masks are replayed from the
  RNG state of the first pass, so the recomputed chunk is the one the completions saw.

Peak memory then grows with ``micro_batch x T`` and ``prompt_chunk`` instead of ``n x T`` and the
prompt length; the price is one more forward of the prompt. The result equals (to float rounding)
a single forward and backward of the whole group (``tests/test_grpo_logprobs.py``).

Models: the decoder + plain linear head of the model types in :data:`PLAIN_HEAD_MODEL_TYPES`
(SmolLM2 is ``llama``, Qwen2.5-Coder ``qwen2``), LoRA-wrapped or not; other models keep the
micro-batches but compute full logits per micro-batch (their heads may scale or cap logits).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from core.errors import ConfigError

PLAIN_HEAD_MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})
"""Model types whose logits are exactly ``lm_head(final hidden state)`` (no scaling, no cap)."""

LOGITS_PER_CHUNK = 1 << 23
"""Logits materialised at once by :func:`token_logprobs` (8M floats: 32 MB in float32)."""


class _TokenLogProbs(torch.autograd.Function):
    """``log_softmax(hidden @ weight.T / temperature)[ids]`` a few rows at a time."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids, inv_temp, rows):  # noqa: ANN001, ANN205
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        n = hidden.shape[0]
        out = hidden.new_empty(n, dtype=torch.float32)
        lse = hidden.new_empty(n, dtype=torch.float32)
        jac = hidden.new_empty(hidden.shape, dtype=torch.float32) if need_h and not need_w else None
        for s in range(0, n, rows):
            e = min(s + rows, n)
            logits = torch.nn.functional.linear(hidden[s:e], weight, bias).float() * inv_temp
            lse[s:e] = torch.logsumexp(logits, dim=-1)
            out[s:e] = logits.gather(-1, ids[s:e, None]).squeeze(-1) - lse[s:e]
            if jac is not None:  # d out / d hidden = (w[id] - softmax @ w) / temperature
                probs = torch.exp(logits.sub_(lse[s:e, None])).to(weight.dtype)
                jac[s:e] = (weight[ids[s:e]] - probs @ weight).float() * inv_temp
        if jac is not None:
            ctx.save_for_backward(jac)
        else:
            ctx.save_for_backward(hidden, weight, bias, ids, lse)
        ctx.jac, ctx.inv_temp, ctx.rows, ctx.h_dtype = jac is not None, inv_temp, rows, hidden.dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        if ctx.jac:
            (jac,) = ctx.saved_tensors
            return (grad_out[:, None] * jac).to(ctx.h_dtype), None, None, None, None, None
        hidden, weight, bias, ids, lse = ctx.saved_tensors
        grad_h = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        grad_w = torch.zeros_like(weight) if ctx.needs_input_grad[1] else None
        grad_b = torch.zeros_like(bias) if bias is not None and ctx.needs_input_grad[2] else None
        for s in range(0, hidden.shape[0], ctx.rows):
            e = min(s + ctx.rows, hidden.shape[0])
            logits = torch.nn.functional.linear(hidden[s:e], weight, bias).float() * ctx.inv_temp
            g = -torch.exp(logits.sub_(lse[s:e, None])) * grad_out[s:e, None]  # d/d logit of -lse
            g.scatter_add_(-1, ids[s:e, None], grad_out[s:e, None])  # + d/d logit of the picked logit
            g = (g * ctx.inv_temp).to(weight.dtype)
            if grad_h is not None:
                grad_h[s:e] = g @ weight
            if grad_w is not None:
                grad_w += g.T @ hidden[s:e]
            if grad_b is not None:
                grad_b += g.sum(0)
        return grad_h, grad_w, grad_b, None, None, None


def token_logprobs(hidden: torch.Tensor, head: torch.nn.Linear, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each chosen token under ``softmax(head(hidden) / temperature)``.

    Equal to ``log_softmax(head(hidden).float() / temperature).gather(-1, ids)`` but only
    :data:`LOGITS_PER_CHUNK` logits exist at a time, in the forward and in the backward.

    Args:
        hidden: ``(..., H)`` final hidden states.
        head: the output layer (``V`` outputs).
        ids: ``(...)`` chosen token ids.
        temperature: logits are divided by it.

    Returns:
        ``(...)`` float32 log-probs, differentiable in ``hidden`` (and in the head's weight when
        it requires grad).

    >>> head = torch.nn.Linear(4, 10, bias=False)
    >>> h, ids = torch.randn(2, 3, 4), torch.randint(0, 10, (2, 3))
    >>> full = torch.log_softmax(head(h) / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    >>> torch.allclose(token_logprobs(h, head, ids, 0.7), full, atol=1e-6)
    True
    """
    shape = ids.shape
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    rows = max(1, LOGITS_PER_CHUNK // head.out_features)
    out = _TokenLogProbs.apply(flat_h, head.weight, head.bias, ids.reshape(-1), 1.0 / temperature, rows)
    return out.reshape(shape)


def _logits_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float() / temperature
    return logits.gather(-1, ids[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


class _LM:
    """The two halves of a causal LM: features per position, and log-probs of tokens from them.

    For a plain-head model the features are the decoder's final hidden states and the log-probs
    come from :func:`token_logprobs`; otherwise the features are the model's own logits.
    """

    def __init__(self, model: torch.nn.Module, temperature: float) -> None:
        hf = model.get_base_model() if isinstance(model, PeftModel) else model
        head = hf.get_output_embeddings()
        self.plain = hf.config.model_type in PLAIN_HEAD_MODEL_TYPES and type(head) is torch.nn.Linear
        self.model, self.config, self.temperature = model, hf.config, temperature
        self.decoder, self.head = (hf.base_model, head) if self.plain else (model, None)
        params = inspect.signature(type(self.decoder).forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"

    def features(self, input_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        out = self.decoder(input_ids=input_ids, use_cache=True, **{self.cache_kw: cache})
        return out.last_hidden_state if self.plain else out.logits

    def logprobs(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if self.plain:
            assert self.head is not None
            return token_logprobs(features, self.head, ids, self.temperature)
        return _logits_logprobs(features, ids, self.temperature)


def _layers(cache: DynamicCache) -> list[DynamicLayer]:
    layers = list(cache.layers)
    if not all(type(layer) is DynamicLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        raise ConfigError(f"GRPO here needs a model whose KV cache keeps every position (no sliding-window layers); "
                          f"this one uses {kinds}", where="--model")
    return layers


def _cache_of(config: object, kv: list[tuple[torch.Tensor, torch.Tensor]], batch: int) -> DynamicCache:
    """A cache holding ``kv`` (each ``(1, heads, L, d)``) repeated ``batch`` times."""
    cache = DynamicCache(config=config)
    for i, (k, v) in enumerate(kv):
        cache.update(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1), i)
    return cache


def _rng_devices(device: torch.device) -> list[torch.device]:
    return [device] if device.type == "cuda" else []


def _get_rng(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


@dataclass
class GroupPass:
    """What :func:`group_logprobs` returns.

    Attributes:
        logp: ``(n, T)`` detached float32 log-probs (padding positions have values too: mask them).
        forward_s: wall seconds in forward passes (and the loss).
        backward_s: wall seconds in backward passes (the prompt's recompute included).
    """

    logp: torch.Tensor
    forward_s: float = 0.0
    backward_s: float = 0.0


LossFn = Callable[[slice, torch.Tensor], torch.Tensor]


def group_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    *,
    temperature: float = 1.0,
    micro_batch: int | None = None,
    prompt_chunk: int | None = None,
    loss_fn: LossFn | None = None,
    backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
) -> GroupPass:
    """Per-token log-probs of ``n`` completions of one prompt, and the backward of a loss on them.

    Without ``loss_fn`` nothing keeps a graph (call it for the reference, e.g. inside
    :func:`generator.models.reference_logits_context`). With ``loss_fn``, every micro-batch's
    ``loss_fn(rows, logp_rows)`` is back-propagated (``backward(loss)``), so the parameters'
    ``.grad`` end up holding the gradient of the sum of the micro-batch losses, as if the whole
    group had been one forward and one backward. The model's train/eval mode is left as it is.

    Args:
        model: a causal LM, peft-wrapped or not.
        prompt_ids: ``(P,)`` with ``P >= 1``.
        completion_ids: ``(n, T)`` right-padded completions (``T >= 1``).
        temperature: logits are divided by it (the sampling temperature).
        micro_batch: completions per forward/backward pass; None: all ``n`` at once.
        prompt_chunk: prompt tokens per recomputed chunk of the prompt's backward; None: the
            whole prompt in one chunk.
        loss_fn: ``(rows, logp)`` -> scalar loss of completions ``rows`` (a slice of ``range(n)``)
            from their ``(len(rows), T)`` differentiable log-probs; None: no gradient.
        backward: how to back-propagate a micro-batch loss (e.g. ``accelerator.backward``).

    Returns:
        :class:`GroupPass`.

    Raises:
        ValueError: ``micro_batch`` or ``prompt_chunk`` below 1, or an empty prompt or completion.
        ConfigError: the model's KV cache has sliding-window layers (a one-line error naming --model).
    """
    n, t = completion_ids.shape
    p = prompt_ids.shape[0]
    if p < 1 or t < 1:
        raise ValueError(f"need a prompt and completions of at least one token, got P={p}, T={t}")
    m = n if micro_batch is None else micro_batch
    chunk = p if prompt_chunk is None else prompt_chunk
    if m < 1 or chunk < 1:
        raise ValueError(f"micro_batch and prompt_chunk must be >= 1, got {micro_batch} and {prompt_chunk}")
    lm = _LM(model, temperature)
    device = prompt_ids.device
    grad = loss_fn is not None
    res = GroupPass(torch.empty(n, t, dtype=torch.float32, device=device))
    bounds = [(s, min(s + chunk, p)) for s in range(0, p, chunk)]

    # 1. the prompt without a graph: its KV cache and the features of its last position
    t0 = time.perf_counter()
    rng_states = []
    with torch.no_grad():
        cache = DynamicCache(config=lm.config)
        for s, e in bounds:
            rng_states.append(_get_rng(device))
            feats = lm.features(prompt_ids[None, s:e], cache)
        last = feats[:, -1].detach().requires_grad_(grad)  # (1, F)
        kv = [(layer.keys.requires_grad_(grad), layer.values.requires_grad_(grad)) for layer in _layers(cache)]
        del cache, feats
    res.forward_s += time.perf_counter() - t0

    # 2. the completions, micro_batch at a time, each attending to the prompt's cache
    for r0 in range(0, n, m):
        rows = slice(r0, min(r0 + m, n))
        ids = completion_ids[rows]
        t0 = time.perf_counter()
        with torch.enable_grad() if grad else torch.no_grad():
            logp = lm.logprobs(last.expand(ids.shape[0], -1)[:, None], ids[:, :1])
            if t > 1:
                mb_cache = _cache_of(lm.config, kv, ids.shape[0])
                rest = lm.logprobs(lm.features(ids[:, :-1], mb_cache), ids[:, 1:])
                del mb_cache
                logp = torch.cat([logp, rest], dim=1)
            res.logp[rows] = logp.detach()
            loss = loss_fn(rows, logp) if loss_fn is not None else None
        t1 = time.perf_counter()
        res.forward_s += t1 - t0
        if loss is not None:
            backward(loss)
            res.backward_s += time.perf_counter() - t1
        del logp, loss

    if not grad:
        return res

    # 3. the prompt's backward, last chunk first, each chunk recomputed with the dropout it had
    t0 = time.perf_counter()
    dkv = [(k.grad if k.grad is not None else torch.zeros_like(k), v.grad if v.grad is not None else torch.zeros_like(v))
           for k, v in kv]  # fmt: skip
    dlast = last.grad if last.grad is not None else torch.zeros_like(last)
    for j in reversed(range(len(bounds))):
        s, e = bounds[j]
        with torch.random.fork_rng(devices=_rng_devices(device)), torch.enable_grad():
            _set_rng(rng_states[j], device)
            prefix = [(k[:, :, :s].detach().requires_grad_(), v[:, :, :s].detach().requires_grad_()) for k, v in kv]
            chunk_cache = _cache_of(lm.config, prefix, 1) if s > 0 else DynamicCache(config=lm.config)
            feats = lm.features(prompt_ids[None, s:e], chunk_cache)
            outs, grads = [], []
            for layer, (dk, dv) in zip(_layers(chunk_cache), dkv, strict=True):
                outs += [layer.keys, layer.values]
                grads += [dk[:, :, :e], dv[:, :, :e]]
            if j == len(bounds) - 1:
                outs.append(feats[:, -1])
                grads.append(dlast)
            torch.autograd.backward(outs, grads)
            if s > 0:  # what the earlier tokens' cache receives: from later chunks, completions and this chunk
                for (dk, dv), (pk, pv) in zip(dkv, prefix, strict=True):
                    dk[:, :, :s] = pk.grad
                    dv[:, :, :s] = pv.grad
            del chunk_cache, feats, outs, grads, prefix
    res.backward_s += time.perf_counter() - t0
    for k, v in kv:
        k.grad = v.grad = None
    return res
