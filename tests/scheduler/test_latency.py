"""Latency distributions: log-normal parameterisations, survival, and E[min(L, tau)]."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.scheduler.latency import (
    Constant,
    LatencyDistribution,
    LogNormal,
    expected_min,
    remaining,
)


class NumericOnly:
    """Wraps a distribution without its closed form, to exercise the numeric integral."""

    def __init__(self, inner: LogNormal) -> None:
        self.inner = inner

    def mean(self) -> float:
        return self.inner.mean()

    def quantile(self, q: float) -> float:
        return self.inner.quantile(q)

    def survival(self, t: float) -> float:
        return self.inner.survival(t)


def test_parameterisations_round_trip() -> None:
    d = LogNormal.from_quantiles(median=2.0, p90=10.0)
    assert d.quantile(0.5) == pytest.approx(2.0)
    assert d.quantile(0.9) == pytest.approx(10.0)
    m = LogNormal.from_mean_cv(mean=3.0, cv=1.5)
    assert m.mean() == pytest.approx(3.0)
    assert (m.quantile(0.0), m.quantile(1.0)) == (0.0, math.inf)
    with pytest.raises(ValueError, match="p90 > median"):
        LogNormal.from_quantiles(median=2.0, p90=1.0)
    with pytest.raises(ValueError, match="sigma"):
        LogNormal(0.0, 0.0)


@given(st.floats(-3, 5), st.floats(0.05, 2.5), st.floats(0.01, 0.99))
def test_survival_is_one_minus_cdf_at_quantiles(mu: float, sigma: float, q: float) -> None:
    d: LatencyDistribution = LogNormal(mu, sigma)  # the protocol, checked statically by mypy
    assert d.survival(d.quantile(q)) == pytest.approx(1 - q, abs=1e-9)


@given(st.floats(-2, 3), st.floats(0.1, 1.5), st.floats(0.01, 0.995))
def test_closed_form_expected_min_matches_the_integral(mu: float, sigma: float, q: float) -> None:
    d = LogNormal(mu, sigma)
    tau = d.quantile(q)
    closed = expected_min(d, tau)
    numeric = expected_min(NumericOnly(d), tau, steps=2000)
    assert closed == pytest.approx(numeric, rel=1e-3, abs=1e-6)
    assert 0 <= closed <= min(tau, d.mean()) + 1e-12


def test_expected_min_limits() -> None:
    d = LogNormal.from_median(1.0, 0.5)
    assert expected_min(d, 0.0) == 0.0
    assert expected_min(d, math.inf) == pytest.approx(d.mean())
    assert expected_min(NumericOnly(d), math.inf) == pytest.approx(d.mean())


def test_constant() -> None:
    c = Constant(4.0)
    assert (c.mean(), c.quantile(0.3), c.survival(3.9), c.survival(4.0)) == (4.0, 4.0, 1.0, 0.0)
    assert expected_min(c, 10.0) == 4.0
    assert expected_min(c, 2.5) == 2.5


def test_what_is_left_of_a_constant_tool() -> None:
    left = remaining(Constant(40.0), 30.0)
    assert left.mean() == pytest.approx(10.0)
    assert (left.quantile(0.9), left.survival(9.9), left.survival(10.0)) == (10.0, 1.0, 0.0)
    assert expected_min(left, 4.0) == pytest.approx(4.0)
    assert expected_min(left, 25.0) == pytest.approx(10.0)
    assert remaining(Constant(40.0), 0.0) == Constant(40.0)  # nothing elapsed: itself
    # a tool that outlived what was learned of it is priced as a fresh wait
    assert remaining(Constant(40.0), 45.0) == Constant(40.0)


@given(st.floats(-1, 3), st.floats(0.1, 1.5), st.floats(0.05, 0.95), st.floats(0.01, 0.99))
def test_what_is_left_of_a_lognormal_is_its_conditional_distribution(
    mu: float, sigma: float, done: float, q: float
) -> None:
    d = LogNormal(mu, sigma)
    elapsed = d.quantile(done)  # the tool has run past this share of its runs
    left = remaining(d, elapsed)
    t = left.quantile(q)
    assert t >= 0
    assert left.survival(t) == pytest.approx(1 - q, abs=1e-6)
    assert left.survival(t) == pytest.approx(d.survival(elapsed + t) / d.survival(elapsed))
    numeric = expected_min(NumericOnly(d), elapsed + t, steps=4000) - expected_min(
        NumericOnly(d), elapsed, steps=4000
    )
    assert expected_min(left, t) == pytest.approx(numeric / d.survival(elapsed), rel=1e-3)
    assert left.mean() == pytest.approx((d.mean() - expected_min(d, elapsed)) / d.survival(elapsed))
