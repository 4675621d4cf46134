"""Tool-latency distributions: what the estimators learn and the tool-wait policies price.

Owns the :class:`LatencyDistribution` protocol (``mean``, ``quantile``, ``survival``), the
helper :func:`expected_min` (``E[min(L, tau)]``, closed form when the distribution offers it,
else a numeric integral of the survival function), and two implementations: :class:`LogNormal`
(inter-turn gaps and tool latencies are close to log-normal, SAECache / llm-d) and
:class:`Constant` (deterministic tools, tests). :func:`remaining` conditions one on the time a
tool has already run (:class:`Remaining`: what is left of it, given it is still running).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Protocol

_STD_NORMAL = NormalDist()
_SQRT2 = math.sqrt(2.0)


@lru_cache(maxsize=256)
def _std_normal_quantile(q: float) -> float:
    """The standard normal's ``q`` quantile, cached: policies ask a few fixed quantiles of
    every tool-wait decision's distribution, and ``inv_cdf`` is pure Python."""
    return _STD_NORMAL.inv_cdf(q)


class LatencyDistribution(Protocol):
    """A non-negative latency in seconds. A static protocol (mypy checks it; not
    ``runtime_checkable``, which the compiled build cannot compile), so ``isinstance`` with it
    raises ``TypeError``."""

    def mean(self) -> float:
        """Expected latency."""
        ...

    def quantile(self, q: float) -> float:
        """Smallest ``t`` with ``P(L <= t) >= q``, for ``q`` in [0, 1] (``inf`` allowed at 1)."""
        ...

    def survival(self, t: float) -> float:
        """``P(L > t)``."""
        ...


def expected_min(dist: LatencyDistribution, tau: float, steps: int = 64) -> float:
    """``E[min(L, tau)] = integral of survival over [0, tau]``: expected time held under a TTL.

    Uses the distribution's closed form when it has one; otherwise Simpson's rule with
    ``steps`` intervals (``tau = inf`` gives the mean).
    """
    if tau <= 0:
        return 0.0
    if math.isinf(tau):
        return dist.mean()
    # a distribution with a closed form offers ``expected_min(tau)``; duck-typed, because
    # isinstance() on a runtime Protocol is slow on this hot path
    closed_form = getattr(dist, "expected_min", None)
    if closed_form is not None:
        return float(closed_form(tau))
    n = steps + steps % 2
    h = tau / n
    total = dist.survival(0.0) + dist.survival(tau)
    for i in range(1, n):
        total += (4 if i % 2 else 2) * dist.survival(i * h)
    return total * h / 3


@dataclass(frozen=True, slots=True)
class LogNormal:
    """``L = exp(N(mu, sigma^2))`` seconds."""

    mu: float
    sigma: float

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0, got {self.sigma}")

    @classmethod
    def from_median(cls, median: float, sigma: float) -> LogNormal:
        """Log-normal with the given median (seconds) and log-space spread."""
        return cls(math.log(median), sigma)

    @classmethod
    def from_quantiles(cls, median: float, p90: float) -> LogNormal:
        """Log-normal through a median and a 90th percentile (``p90 > median > 0``)."""
        if not p90 > median > 0:
            raise ValueError(f"need p90 > median > 0, got median={median} p90={p90}")
        return cls(math.log(median), math.log(p90 / median) / _STD_NORMAL.inv_cdf(0.9))

    @classmethod
    def from_mean_cv(cls, mean: float, cv: float) -> LogNormal:
        """Log-normal with the given mean (seconds) and coefficient of variation."""
        sigma2 = math.log1p(cv * cv)
        return cls(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))

    def mean(self) -> float:
        return math.exp(self.mu + self.sigma * self.sigma / 2)

    def quantile(self, q: float) -> float:
        if q <= 0:
            return 0.0
        if q >= 1:
            return math.inf
        return math.exp(self.mu + self.sigma * _std_normal_quantile(q))

    def survival(self, t: float) -> float:
        if t <= 0:
            return 1.0
        z = (math.log(t) - self.mu) / self.sigma
        return 0.5 * math.erfc(z / _SQRT2)

    def expected_min(self, tau: float) -> float:
        """``E[min(L, tau)] = mean * Phi((ln tau - mu - sigma^2) / sigma) + tau * S(tau)``."""
        if tau <= 0:
            return 0.0
        if math.isinf(tau):
            return self.mean()
        z = (math.log(tau) - self.mu - self.sigma * self.sigma) / self.sigma
        return self.mean() * 0.5 * math.erfc(-z / _SQRT2) + tau * self.survival(tau)


@dataclass(frozen=True, slots=True)
class Constant:
    """A tool that always takes exactly ``seconds``."""

    seconds: float

    def mean(self) -> float:
        return self.seconds

    def quantile(self, q: float) -> float:
        return self.seconds if q > 0 else 0.0

    def survival(self, t: float) -> float:
        return 1.0 if t < self.seconds else 0.0

    def expected_min(self, tau: float) -> float:
        """``min(seconds, tau)``."""
        return max(0.0, min(self.seconds, tau))


#: below this probability of still running, a tool has outlived its distribution
_OUTLIVED = 1e-9


@dataclass(frozen=True, slots=True)
class Remaining:
    """What is left of a latency ``L`` that has already run ``elapsed`` seconds: ``L -
    elapsed`` given ``L > elapsed``. Build it with :func:`remaining`.

    ``S'(t) = S(e + t) / S(e)``; ``Q'(q) = Q(1 - (1 - q) S(e)) - e``;
    ``E[min(L', tau)] = (E[min(L, e + tau)] - E[min(L, e)]) / S(e)``.
    """

    base: LatencyDistribution
    elapsed: float
    #: ``S(e)`` and ``E[min(L, e)]``, computed once: every query needs them
    still_running: float
    held: float

    def mean(self) -> float:
        return (self.base.mean() - self.held) / self.still_running

    def quantile(self, q: float) -> float:
        if q <= 0:
            return 0.0
        return max(0.0, self.base.quantile(1.0 - (1.0 - q) * self.still_running) - self.elapsed)

    def survival(self, t: float) -> float:
        if t <= 0:
            return 1.0
        return min(1.0, self.base.survival(self.elapsed + t) / self.still_running)

    def expected_min(self, tau: float) -> float:
        if tau <= 0:
            return 0.0
        if math.isinf(tau):
            return self.mean()
        total = expected_min(self.base, self.elapsed + tau)
        return max(0.0, (total - self.held) / self.still_running)


def remaining(dist: LatencyDistribution, elapsed: float) -> LatencyDistribution:
    """The rest of a tool's latency ``dist`` given it has run ``elapsed`` seconds and is still
    running (:class:`Remaining`): a tool-wait decision taken after the tool started prices the
    wait still ahead, not a wait from the start. ``dist`` itself when nothing has elapsed, and
    when the tool has outlived it (``P(L > elapsed)`` about 0: what is learned says nothing
    about the rest, so it is priced as a fresh wait rather than as one about to end)."""
    if elapsed <= 0:
        return dist
    still_running = dist.survival(elapsed)
    if still_running < _OUTLIVED:
        return dist
    return Remaining(dist, elapsed, still_running, expected_min(dist, elapsed))
