"""Does the router know when it is wrong? Temperature scaling and the expected calibration error.

A router trained on generated questions is confident on everything, so its probability says
little about when to doubt a route. Two tools, both from Guo et al., "On Calibration of Modern
Neural Networks" (ICML 2017, https://arxiv.org/abs/1706.04599):

- :func:`expected_calibration_error` (ECE): confidences are put in ``n_bins`` equal-width bins;
  ECE is the bin-size-weighted mean of ``|accuracy(bin) - mean confidence(bin)|``;
- :func:`fit_temperature`: one scalar ``T`` that divides the joint logits over legal paths,
  chosen to minimise the negative log-likelihood of the gold paths on held-out questions. The
  arg-max (the route) never changes; only the probability reported with it does;
- :func:`fit_confidence_temperature`: the same scalar for choices that may not include the right
  one (a reranker's candidate routes), fitted to the log loss of the top choice's confidence.

>>> import torch
>>> expected_calibration_error(torch.tensor([0.95, 0.95, 0.95, 0.95]), torch.tensor([True, True, False, False]))
0.45
>>> logits = torch.tensor([[4.0, 0.0], [4.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
>>> round(fit_temperature(logits, torch.tensor([0, 1, 0, 1])), 2)  # 1 of 4 wrong: p(top) -> 3/4, T = 4 / ln 3
3.64
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

DEFAULT_BINS = 10


def expected_calibration_error(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = DEFAULT_BINS) -> float:
    """ECE of ``confidence`` ``(n,)`` in ``[0, 1]`` against ``correct`` ``(n,)`` bool, in ``[0, 1]``.

    Bins are ``(k/n_bins, (k+1)/n_bins]`` (the first includes 0). An empty input gives 0.

    Raises:
        ValueError: the two tensors differ in length, or ``n_bins < 1``.
    """
    if confidence.shape != correct.shape:
        raise ValueError(f"confidence has shape {tuple(confidence.shape)} but correct has {tuple(correct.shape)}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    n = confidence.numel()
    if n == 0:
        return 0.0
    conf = confidence.double().clamp(0, 1)
    ok = correct.double()
    bins = (conf * n_bins).ceil().clamp(1, n_bins).long() - 1
    ece = 0.0
    for b in range(n_bins):
        mask = bins == b
        m = int(mask.sum())
        if m:
            ece += m / n * abs(float(ok[mask].mean()) - float(conf[mask].mean()))
    return round(ece, 6)


def reliability_bins(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = DEFAULT_BINS) -> list[dict[str, float]]:
    """Per bin: ``lo``, ``hi``, ``n``, mean ``confidence`` and ``accuracy`` (for a reliability plot)."""
    conf = confidence.double().clamp(0, 1)
    ok = correct.double()
    bins = (conf * n_bins).ceil().clamp(1, n_bins).long() - 1
    out = []
    for b in range(n_bins):
        mask = bins == b
        m = int(mask.sum())
        out.append({
            "lo": b / n_bins, "hi": (b + 1) / n_bins, "n": m,
            "confidence": float(conf[mask].mean()) if m else 0.0, "accuracy": float(ok[mask].mean()) if m else 0.0,
        })  # fmt: skip
    return out


def _golden_section_min(f: Callable[[float], float], a: float, b: float, iters: int) -> float:
    """The ``x`` in ``[a, b]`` minimising a unimodal ``f`` (golden-section search, ``iters`` steps)."""
    phi = (math.sqrt(5) - 1) / 2
    c, d = b - phi * (b - a), a + phi * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + phi * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_temperature(logits: torch.Tensor, gold: torch.Tensor, lo: float = 0.05, hi: float = 20.0, iters: int = 60) -> float:
    """The temperature ``T`` in ``[lo, hi]`` minimising ``NLL(softmax(logits / T), gold)``.

    Args:
        logits: ``(n, N)`` unnormalised scores (or log-probabilities) over ``N`` choices; ``-inf``
            entries (masked choices) stay masked.
        gold: ``(n,)`` long, the right choice of each row.

    The NLL is convex in ``1/T``, so a golden-section search over ``log T`` finds the minimum.
    An empty input gives 1.0.
    """
    if logits.shape[0] == 0:
        return 1.0
    x = logits.double()
    g = gold.long().view(-1, 1)

    def nll(log_t: float) -> float:
        lp = torch.log_softmax(x / math.exp(log_t), dim=-1)
        return float(-lp.gather(1, g).mean())

    return float(math.exp(_golden_section_min(nll, math.log(lo), math.log(hi), iters)))


def fit_confidence_temperature(logits: torch.Tensor, top_correct: torch.Tensor, lo: float = 0.05, hi: float = 20.0,
                               iters: int = 60) -> float:
    """The temperature ``T`` in ``[lo, hi]`` minimising the log loss of the top choice's confidence.

    For choices that may not include the right one (a reranker's candidates): the confidence
    ``c = max softmax(logits / T)`` is scored against whether the arg-max is right,
    ``-mean(y log c + (1 - y) log(1 - c))``, so a question whose right answer is not among the
    choices still pulls the confidence down (:func:`fit_temperature` cannot use such a question).
    The arg-max never changes with ``T``.

    Args:
        logits: ``(n, N)`` unnormalised scores; ``-inf`` entries (absent choices) stay masked.
        top_correct: ``(n,)`` bool, whether each row's arg-max is right.

    Returns:
        ``T``; 1.0 for an empty input. A golden-section search over ``log T`` (the loss is
        unimodal in ``T`` when some rows are right and some wrong; otherwise the search runs to
        an end of the range).

    >>> logits = torch.tensor([[4.0, 0.0], [4.0, 0.0], [4.0, 0.0], [4.0, 0.0]])
    >>> round(fit_confidence_temperature(logits, torch.tensor([True, True, True, False])), 2)  # c -> 3/4
    3.64
    """
    if logits.shape[0] == 0:
        return 1.0
    x = logits.double()
    y = top_correct.double()

    def log_loss(log_t: float) -> float:
        c = torch.softmax(x / math.exp(log_t), dim=-1).max(dim=-1).values.clamp(1e-12, 1 - 1e-12)
        return float(-(y * c.log() + (1 - y) * (1 - c).log()).mean())

    return float(math.exp(_golden_section_min(log_loss, math.log(lo), math.log(hi), iters)))
