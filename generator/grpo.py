"""GRPO math as pure tensor functions: group advantages, the clipped token loss in its three
normalisations (``grpo``, ``dapo``, ``dr_grpo``), the k3 KL estimator, the virtual-full-score
anchor and the dynamic-sampling budget.

Nothing here touches a model, a tokenizer or a file; :mod:`generator.train_grpo` composes these
functions into a training step, and ``tests/test_grpo.py`` checks each one against numbers worked
out by hand.

Shapes used throughout: ``G`` generations per prompt (a *group*), ``B`` completions in a batch,
``T`` completion tokens (right-padded, ``mask`` is 1 on real tokens).

References:
    - GRPO: Shao et al., *DeepSeekMath* (arXiv 2402.03300), group-relative advantages.
    - DAPO: Yu et al. (arXiv 2503.14476), token-level loss, clip-higher, dynamic sampling.
    - Dr. GRPO: Liu et al., *Understanding R1-Zero-Like Training* (arXiv 2503.20783), no std
      scaling and a constant normaliser.
    - k3 KL estimator: J. Schulman, *Approximating KL Divergence* (2020).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

LossType = Literal["grpo", "dapo", "dr_grpo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "dapo", "dr_grpo")

#: Added to the group std before dividing, as TRL does; a zero-std group gets advantages 0, not NaN.
STD_EPS = 1e-4


def group_mean_std(rewards: torch.Tensor, virtual_full_score: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (unbiased, Bessel-corrected) std of each group of rewards.

    Args:
        rewards: ``(..., G)`` rewards, one group per row (a 1-D tensor is one group).
        virtual_full_score: when given, a reward of this value is appended to every group before
            the statistics are taken (seed 000's "virtual full score": it enters mean and std,
            never the loss).

    Returns:
        ``(mean, std)``, each of shape ``(...)``.

    >>> m, s = group_mean_std(torch.tensor([0.8] * 8), virtual_full_score=1.0)
    >>> round(m.item(), 3), round(s.item(), 3)
    (0.822, 0.067)
    """
    if virtual_full_score is not None:
        anchor = torch.full((*rewards.shape[:-1], 1), float(virtual_full_score), dtype=rewards.dtype)
        rewards = torch.cat([rewards, anchor], dim=-1)
    if rewards.shape[-1] < 2:
        return rewards.mean(dim=-1), torch.zeros(rewards.shape[:-1], dtype=rewards.dtype)
    return rewards.mean(dim=-1), rewards.std(dim=-1)


def group_advantages(
    rewards: torch.Tensor, *, scale_rewards: bool = True, virtual_full_score: float | None = None
) -> torch.Tensor:
    """Group-relative advantages ``(r - mean) / (std + 1e-4)`` (or ``r - mean`` when not scaled).

    Args:
        rewards: ``(..., G)`` rewards of the real completions of each group.
        scale_rewards: divide by the group std (``grpo``, ``dapo``); Dr. GRPO turns it off.
        virtual_full_score: append this reward to each group for the statistics only; the
            returned advantages cover the ``G`` real completions, never the anchor.

    Returns:
        ``(..., G)`` advantages; a group whose rewards are all equal (and no anchor) gets zeros.

    >>> [round(a, 4) for a in group_advantages(torch.tensor([1.0, 0.0])).tolist()]
    [0.707, -0.707]
    >>> group_advantages(torch.tensor([0.5, 0.5, 0.5])).tolist()
    [0.0, 0.0, 0.0]
    """
    mean, std = group_mean_std(rewards, virtual_full_score)
    centred = rewards - mean.unsqueeze(-1)
    # equal rewards give exactly 0: float rounding of the mean divided by STD_EPS would not
    flat = zero_std_groups(rewards)
    if virtual_full_score is not None:
        flat = flat & ((rewards - float(virtual_full_score)).abs().amax(dim=-1) <= 1e-6)
    centred = torch.where(flat.unsqueeze(-1), torch.zeros_like(centred), centred)
    if not scale_rewards:
        return centred
    return centred / (std.unsqueeze(-1) + STD_EPS)


def zero_std_groups(rewards: torch.Tensor, atol: float = 1e-6) -> torch.Tensor:
    """Which groups have no reward spread (the signal ``frac_reward_zero_std`` counts).

    Args:
        rewards: ``(n_groups, G)`` real rewards (no virtual anchor).
        atol: spreads at or below this count as zero.

    Returns:
        ``(n_groups,)`` bool.

    >>> zero_std_groups(torch.tensor([[0.2, 0.2], [0.0, 1.0]])).tolist()
    [True, False]
    """
    return (rewards.max(dim=-1).values - rewards.min(dim=-1).values) <= atol


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Unbiased for the KL when tokens are sampled from the policy, always ``>= 0``, and exactly 0
    where the two log-probs agree.

    Args:
        logp: ``(B, T)`` policy log-probs of the sampled tokens.
        ref_logp: ``(B, T)`` reference log-probs of the same tokens.

    Returns:
        ``(B, T)`` non-negative estimates.

    >>> k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item()
    0.0
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, *, epsilon_low: float, epsilon_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped objective per token, as a loss (negated).

    Args:
        logp: ``(B, T)`` current log-probs (differentiable).
        old_logp: ``(B, T)`` log-probs of the policy that sampled the tokens (no grad).
        advantages: ``(B,)`` one advantage per completion, broadcast over its tokens.
        epsilon_low: the ratio is clipped below at ``1 - epsilon_low``.
        epsilon_high: and above at ``1 + epsilon_high`` (DAPO's clip-higher uses 0.28 > 0.2).

    Returns:
        ``(loss, low_clipped, high_clipped)``, each ``(B, T)``; the two masks mark tokens whose
        gradient the clip removed (ratio below ``1 - eps_low`` with a negative advantage, or above
        ``1 + eps_high`` with a positive one).
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + epsilon_high) * adv
    loss = -torch.min(unclipped, clipped)
    low = (ratio < 1.0 - epsilon_low) & (adv < 0)
    high = (ratio > 1.0 + epsilon_high) & (adv > 0)
    return loss, low, high


def reduce_token_loss(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: LossType,
    *,
    max_completion_length: int,
    total_sequences: int | None = None,
    total_tokens: int | None = None,
) -> torch.Tensor:
    """Turn a ``(B, T)`` per-token loss into the scalar each variant optimises.

    - ``grpo``: mean over each completion's tokens, then mean over completions (long answers get
      less weight per token; the length bias Dr. GRPO points out).
    - ``dapo``: sum over all tokens / number of tokens in the batch (token-level).
    - ``dr_grpo``: sum over all tokens / (completions x ``max_completion_length``), a constant.

    ``total_sequences`` and ``total_tokens`` let a batch be processed one group at a time with
    gradients accumulated: pass the whole batch's counts and each group's share adds up to the
    batch loss. They default to this call's own counts.

    Args:
        per_token: ``(B, T)`` loss per token.
        mask: ``(B, T)`` 1 on real completion tokens, 0 on padding.
        loss_type: one of :data:`LOSS_TYPES`.
        max_completion_length: the generation limit (``dr_grpo``'s normaliser).
        total_sequences: completions in the whole batch (``grpo``, ``dr_grpo``).
        total_tokens: real tokens in the whole batch (``dapo``).

    Returns:
        A scalar tensor.

    Raises:
        ValueError: for an unknown ``loss_type``.

    >>> pt = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    >>> m = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    >>> [round(reduce_token_loss(pt, m, t, max_completion_length=4).item(), 3) for t in LOSS_TYPES]
    [2.5, 1.6, 1.0]
    """
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    n_seq = total_sequences if total_sequences is not None else per_token.shape[0]
    if loss_type == "grpo":
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum() / n_seq
    if loss_type == "dapo":
        n_tok = total_tokens if total_tokens is not None else int(mask.sum().item())
        return masked.sum() / max(n_tok, 1)
    if loss_type == "dr_grpo":
        return masked.sum() / (n_seq * max_completion_length)
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


@dataclass(frozen=True)
class LossOutput:
    """What :func:`grpo_loss` returns. ``loss`` is differentiable; the rest are detached sums
    over real tokens so a caller can add them up across groups and ranks before dividing by
    ``n_tokens``."""

    loss: torch.Tensor
    kl_sum: float
    clip_low_sum: float
    clip_high_sum: float
    n_tokens: int


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: LossType,
    epsilon_low: float,
    epsilon_high: float,
    beta: float,
    max_completion_length: int,
    total_sequences: int | None = None,
    total_tokens: int | None = None,
) -> LossOutput:
    """Clipped policy loss plus ``beta`` times the k3 KL to the reference, reduced per ``loss_type``.

    Args:
        logp: ``(B, T)`` current log-probs (differentiable).
        old_logp: ``(B, T)`` sampling-policy log-probs; pass ``logp.detach()`` on the first
            iteration over a batch (the ratio is then 1 and nothing is clipped).
        ref_logp: ``(B, T)`` reference log-probs, or None when ``beta == 0``.
        advantages: ``(B,)``.
        mask: ``(B, T)`` 1 on real completion tokens.
        loss_type, max_completion_length, total_sequences, total_tokens: see
            :func:`reduce_token_loss`.
        epsilon_low, epsilon_high: see :func:`clipped_surrogate`.
        beta: KL coefficient (0 disables the term and ``ref_logp`` may be None).

    Returns:
        :class:`LossOutput`.

    Raises:
        ValueError: when ``beta > 0`` and no ``ref_logp`` is given.
    """
    per_token, low, high = clipped_surrogate(
        logp, old_logp, advantages, epsilon_low=epsilon_low, epsilon_high=epsilon_high
    )
    maskf = mask.to(logp.dtype)
    kl_sum = 0.0
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs (ref_logp)")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
        kl_sum = float((kl.detach() * maskf).sum())
    elif ref_logp is not None:
        kl_sum = float((k3_kl(logp.detach(), ref_logp) * maskf).sum())
    loss = reduce_token_loss(
        per_token,
        mask,
        loss_type,
        max_completion_length=max_completion_length,
        total_sequences=total_sequences,
        total_tokens=total_tokens,
    )
    return LossOutput(
        loss=loss,
        kl_sum=kl_sum,
        clip_low_sum=float((low.to(maskf.dtype) * maskf).sum()),
        clip_high_sum=float((high.to(maskf.dtype) * maskf).sum()),
        n_tokens=int(maskf.sum().item()),
    )


def plan_dynamic_sampling(zero_std: Sequence[bool], resamples_used: int, max_resamples: int) -> list[int]:
    """Which groups to redo (DAPO dynamic sampling), within what is left of the step's budget.

    Args:
        zero_std: one flag per group of the batch, True where all rewards are equal.
        resamples_used: groups already redone this step.
        max_resamples: the step's limit (``GRPOConfig.max_resamples``).

    Returns:
        Indices of the zero-std groups to redo now, first ones first, at most
        ``max_resamples - resamples_used`` of them; empty when none is zero-std or the budget is
        spent (those groups then train with advantage 0, or on the virtual anchor).

    >>> plan_dynamic_sampling([True, False, True, True], resamples_used=1, max_resamples=3)
    [0, 2]
    >>> plan_dynamic_sampling([True], resamples_used=3, max_resamples=3)
    []
    """
    left = max(max_resamples - resamples_used, 0)
    return [i for i, z in enumerate(zero_std) if z][:left]
