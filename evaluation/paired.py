"""Paired comparison of two methods on the same questions: the exact McNemar test."""

from __future__ import annotations

import math


def exact_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts ``b`` and ``c``.

    ``b`` = questions method A gets right and B wrong, ``c`` = the other way round;
    ``p = min(1, 2 * P[X <= min(b, c)])`` with ``X ~ Binomial(b + c, 1/2)`` and ``p = 1`` when
    ``b + c = 0`` (McNemar 1947; the exact form: Edwards 1948).

    Raises:
        ValueError: a negative count.

    >>> exact_mcnemar(0, 0), round(exact_mcnemar(1, 9), 4), round(exact_mcnemar(5, 5), 4)
    (1.0, 0.0215, 1.0)
    """
    if b < 0 or c < 0:
        raise ValueError(f"counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)
