"""Token-bucket rate limit and concurrency cap per (tenant, owner, tool), on an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentconsole.server.gateway.errors import RateLimited
from agentconsole.server.gateway.limits import ToolLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_admits_its_size_then_refuses_with_retry_after() -> None:
    clock = Clock()
    gate = ToolLimits(clock)
    for _ in range(3):
        gate.admit("t", "x", owner="", rate_per_s=0.5, burst=3, max_concurrency=None)
        gate.release("t", "x", owner="")
    with pytest.raises(RateLimited) as info:
        gate.admit("t", "x", owner="", rate_per_s=0.5, burst=3, max_concurrency=None)
    assert info.value.headers["Retry-After"] == "2"
    gate.admit("u", "x", owner="", rate_per_s=0.5, burst=3, max_concurrency=None)  # per tenant
    clock.now += 2.0
    gate.admit("t", "x", owner="", rate_per_s=0.5, burst=3, max_concurrency=None)


def test_the_concurrency_cap_counts_unreleased_calls() -> None:
    gate = ToolLimits(Clock())
    gate.admit("t", "x", owner="", rate_per_s=None, burst=None, max_concurrency=2)
    gate.admit("t", "x", owner="", rate_per_s=None, burst=None, max_concurrency=2)
    with pytest.raises(RateLimited):
        gate.admit("t", "x", owner="", rate_per_s=None, burst=None, max_concurrency=2)
    gate.release("t", "x", owner="")
    gate.admit("t", "x", owner="", rate_per_s=None, burst=None, max_concurrency=2)
    assert gate.running("t", "x", owner="") == 2


@given(
    st.floats(0.1, 50),
    st.integers(1, 20),
    st.lists(st.floats(0, 2), min_size=1, max_size=200),
)
def test_admitted_calls_never_exceed_bucket_plus_refill(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = Clock()
    gate = ToolLimits(clock)
    admitted = 0
    for gap in gaps:
        clock.now += gap
        try:
            gate.admit("t", "x", owner="", rate_per_s=rate, burst=burst, max_concurrency=None)
        except RateLimited:
            continue
        admitted += 1
        gate.release("t", "x", owner="")
    assert admitted <= burst + rate * sum(gaps) + 1e-9
