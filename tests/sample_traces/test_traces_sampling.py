"""The generator's deterministic draws: bounds, percentiles, weights, independence of streams."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.sample_traces.workloads.sampling import Draw, poisson_arrivals, tenant_names


def test_draws_are_built_on_random_random_only() -> None:
    """The stable part of ``random``: same seed, same ``random()`` sequence in every version."""
    reference = random.Random(42)
    draw = Draw(42)
    assert [draw.unit() for _ in range(5)] == [reference.random() for _ in range(5)]


@given(
    seed=st.integers(0, 2**32),
    median=st.floats(0.01, 1e4),
    sigma=st.floats(0.0, 3.0),
    lo_factor=st.floats(0.01, 1.0),
    hi_factor=st.floats(1.0, 100.0),
)
def test_lognormal_stays_in_its_bounds(
    seed: int, median: float, sigma: float, lo_factor: float, hi_factor: float
) -> None:
    draw = Draw(seed)
    lo, hi = median * lo_factor, median * hi_factor
    assert all(lo <= draw.lognormal(median, sigma, lo, hi) <= hi for _ in range(20))


def test_truncation_does_not_pile_mass_on_the_bounds() -> None:
    draw = Draw(0)
    xs = [draw.lognormal(1.0, 1.0, 0.5, 2.0) for _ in range(5_000)]
    assert sum(x in (0.5, 2.0) for x in xs) == 0
    assert statistics.median(xs) == pytest.approx(1.0, rel=0.05)


def test_spread_hits_its_percentiles() -> None:
    draw = Draw(1)
    xs = sorted(draw.spread(0.3, 1.0, 0.01, 100.0) for _ in range(20_000))
    assert math.isclose(xs[1_000], 0.3, rel_tol=0.05)
    assert math.isclose(xs[19_000], 1.0, rel_tol=0.05)


@given(seed=st.integers(0, 2**32), lo=st.integers(-5, 5), span=st.integers(0, 10))
def test_integer_is_inclusive_and_bounded(seed: int, lo: int, span: int) -> None:
    draw = Draw(seed)
    assert all(lo <= draw.integer(lo, lo + span) <= lo + span for _ in range(30))


def test_integer_reaches_both_ends() -> None:
    draw = Draw(2)
    assert {draw.integer(4, 8) for _ in range(500)} == {4, 5, 6, 7, 8}


@given(seed=st.integers(0, 2**32), weights=st.lists(st.floats(0.0, 10.0), min_size=1))
def test_pick_never_picks_a_zero_weight(seed: int, weights: list[float]) -> None:
    if not any(w > 0 for w in weights):
        return
    draw = Draw(seed)
    assert all(weights[draw.pick(weights)] > 0 for _ in range(20))


def test_pick_follows_the_weights() -> None:
    draw = Draw(3)
    counts = [0, 0, 0]
    for _ in range(30_000):
        counts[draw.pick([1.0, 2.0, 7.0])] += 1
    assert [round(c / 30_000, 1) for c in counts] == [0.1, 0.2, 0.7]


def test_geometric_and_exponential_means() -> None:
    draw = Draw(4)
    assert statistics.mean(draw.geometric(8.0) for _ in range(20_000)) == pytest.approx(
        8.0, rel=0.05
    )
    assert draw.geometric(0.5) == 1
    assert statistics.mean(draw.exponential(4.0) for _ in range(20_000)) == pytest.approx(
        0.25, rel=0.05
    )


def test_child_streams_are_independent_and_reproducible() -> None:
    a, b = Draw(5), Draw(5)
    ca, cb = a.child(), b.child()
    assert [ca.unit() for _ in range(3)] == [cb.unit() for _ in range(3)]
    assert [a.unit() for _ in range(3)] != [Draw(5).child().unit() for _ in range(3)]


def test_poisson_arrivals_start_at_zero_and_grow() -> None:
    times = poisson_arrivals(Draw(6), 1_000, 5.0)
    assert times[0] == 0.0
    assert times == sorted(times)
    assert 1_000 / times[-1] == pytest.approx(5.0, rel=0.1)
    assert poisson_arrivals(Draw(6), 0, 5.0) == []


def test_tenant_names() -> None:
    assert tenant_names(3) == ["tenant-a", "tenant-b", "tenant-c"]
    assert tenant_names(27)[-1] == "tenant-26"
