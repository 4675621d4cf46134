"""Deterministic random draws for the generator, built only on ``random.Random.random()``.

Python guarantees that ``Random(seed).random()`` yields the same sequence in every version,
but not ``gauss``, ``choices`` or ``lognormvariate``; deriving every distribution here from
``random()`` keeps committed sample traces byte-identical across interpreters. No global state.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from functools import lru_cache
from statistics import NormalDist

_STD = NormalDist()
_TINY = 1e-12
#: z of the 95th percentile: a (p5, p95) range maps to a log-normal with sigma = ln(hi/lo)/2z.
Z95 = 1.6448536269514722


@lru_cache(maxsize=512)
def _quantile_window(median: float, sigma: float, lo: float, hi: float) -> tuple[float, float]:
    """Normal CDF at the truncation bounds: start and width of the quantile window."""
    a = _STD.cdf(math.log(lo / median) / sigma)
    return a, _STD.cdf(math.log(hi / median) / sigma) - a


class Draw:
    """A seeded source of the few distributions the workloads need."""

    __slots__ = ("_random",)

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed).random

    def unit(self) -> float:
        """Uniform on [0, 1)."""
        return self._random()

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self._random()

    def chance(self, p: float) -> bool:
        """True with probability ``p``."""
        return self._random() < p

    def integer(self, lo: int, hi: int) -> int:
        """Uniform integer in ``[lo, hi]`` (both inclusive); requires ``lo <= hi``."""
        return min(hi, lo + int(self._random() * (hi - lo + 1)))

    def exponential(self, rate: float) -> float:
        """Exponential with the given rate (mean ``1/rate``); requires ``rate > 0``."""
        return -math.log(1.0 - self._random()) / rate

    def geometric(self, mean: float) -> int:
        """Geometric on 1, 2, ... with the given mean (>= 1)."""
        if mean <= 1.0:
            return 1
        u = max(self._random(), _TINY)
        return 1 + int(math.log(u) / math.log(1.0 - 1.0 / mean))

    def lognormal(self, median: float, sigma: float, lo: float, hi: float) -> float:
        """Log-normal with ``median`` and log-sd ``sigma``, truncated (not clipped) to [lo, hi].

        Truncation samples the normal's quantile range directly, so no probability mass piles
        up at the bounds. Requires ``0 < lo <= hi``; ``sigma == 0`` returns the clamped median.
        """
        if sigma <= 0:
            return min(hi, max(lo, median))
        a, width = _quantile_window(median, sigma, lo, hi)
        u = min(max(a + width * self._random(), _TINY), 1.0 - _TINY)
        return min(hi, max(lo, median * math.exp(sigma * _STD.inv_cdf(u))))

    def spread(self, p5: float, p95: float, lo: float, hi: float) -> float:
        """Log-normal whose 5th/95th percentiles are ``p5``/``p95``, truncated to [lo, hi]."""
        sigma = math.log(p95 / p5) / (2 * Z95)
        return self.lognormal(math.sqrt(p5 * p95), sigma, lo, hi)

    def pick(self, weights: Sequence[float]) -> int:
        """An index drawn with probability proportional to ``weights`` (not all zero)."""
        target = self._random() * sum(weights)
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if target < acc:
                return i
        return max(i for i, w in enumerate(weights) if w > 0)

    def child(self) -> Draw:
        """An independent stream seeded from this one (for sub-streams like per-tenant arrivals)."""
        return Draw(int(self._random() * 2**53))


def poisson_arrivals(draw: Draw, n: int, rate: float) -> list[float]:
    """``n`` arrival offsets of a Poisson process of ``rate`` per second, the first at 0."""
    t = 0.0
    out: list[float] = []
    for i in range(n):
        if i:
            t += draw.exponential(rate)
        out.append(t)
    return out


def tenant_names(count: int) -> list[str]:
    """``tenant-a``, ``tenant-b``, ... (``tenant-26`` onwards past the alphabet).

    Raises ``ValueError`` unless ``count >= 1``.
    """
    if count < 1:
        raise ValueError(f"need at least one tenant, got {count}")
    return [f"tenant-{chr(97 + i)}" if i < 26 else f"tenant-{i}" for i in range(count)]
