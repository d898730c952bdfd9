"""Per-token log-probs of ``n`` completions of one prompt, in one differentiable pass.

The prompt runs once (batch 1, only its last position's logits are made), its cache is repeated
for the ``n`` completions, and logits exist only for completion tokens. Gradients flow through
the shared prompt exactly as through ``n`` copies of it. The same function under
:func:`generator.models.reference_logits_context` gives the KL reference. GRPO's training step
uses the bounded-memory form in :mod:`generator.grpo_logprobs`; this one is the reference it is
tested against.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from generator.sampling import cache_kwarg


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
