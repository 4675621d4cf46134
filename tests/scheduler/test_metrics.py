"""Metrics computed from events: percentiles, critical-path idle, slowdown, goodput."""

from __future__ import annotations

import math

import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.metrics import SERVICE_FLOOR_S, MetricsAggregator, percentile

K = EventKind


def _program(pid: str, tenant: str, start: float, *, late: bool = False) -> list[Event]:
    """llm a (queue 1 s, restore 0.5 s) -> tool t (2 s) -> llm b (queue 0.5 s); 10 s E2E."""

    def e(t: float, what: EventKind, node: str = "", **data: float | str | bool) -> Event:
        return Event(start + t, what, pid, node, 1, tenant, data)

    return [
        e(0, K.PROGRAM_CREATED, ideal_e2e_s=5.0),
        e(0, K.NODE_ADDED, "a", kind="llm", parents=""),
        e(1, K.CALL_SCHEDULED, "a", hit_tokens=100, recompute_tokens=50),
        e(2, K.CALL_FIRST_TOKEN, "a"),
        e(
            4,
            K.CALL_FINISHED,
            "a",
            queue_s=1.0,
            restore_s=0.5,
            service_s=2.0,
            output_tokens=20,
            computed_tokens=300,
            ttft_s=2.0,
            tbt_s=0.1,
        ),
        e(4, K.NODE_ADDED, "t", kind="tool", parents="a"),
        e(6, K.TOOL_FINISHED, "t", latency_s=2.0, outcome="ok"),
        e(6, K.NODE_ADDED, "b", kind="llm", parents="t"),
        e(
            10,
            K.CALL_FINISHED,
            "b",
            queue_s=0.5,
            service_s=1.0,
            output_tokens=10,
            computed_tokens=100,
            ttft_s=1.0,
            tbt_s=0.2,
        ),
        e(10, K.PROGRAM_FINISHED, deadline_met=not late),
    ]


def test_program_metrics_and_critical_path_idle() -> None:
    agg = MetricsAggregator().observe_all(_program("p", "acme", 0.0))
    r = agg.report()
    assert r["finished"] == 1
    assert r["e2e_p50_s"] == pytest.approx(10.0)
    assert r["ttfp_p50_s"] == pytest.approx(2.0)
    assert r["cp_idle_queue_mean_s"] == pytest.approx(1.5)
    assert r["cp_idle_kv_mean_s"] == pytest.approx(0.5)
    assert r["cp_idle_tool_mean_s"] == pytest.approx(2.0)
    assert r["prefix_hit_tokens"] == 100
    assert r["recompute_tokens"] == 50
    assert r["tokens_per_success"] == pytest.approx(430)
    tenant = agg.tenants()["acme"]
    assert tenant.slowdown == pytest.approx(2.0)  # 10 s against 5 s alone
    assert tenant.starvation == pytest.approx(1.5 / 3.0)  # waited 1.5 s for 3 s of service


def test_late_programs_are_not_goodput() -> None:
    events = _program("p", "t", 0.0) + _program("q", "t", 0.0, late=True)
    r = MetricsAggregator().observe_all(events).report()
    assert r["finished"] == 2
    assert r["goodput_programs_per_s"] == pytest.approx(1 / 10)


def test_percentile_interpolates_and_handles_empty() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_window_bounds_samples() -> None:
    agg = MetricsAggregator(window=3)
    for i in range(10):
        agg.observe_all(_program(f"p{i}", "t", float(i * 100)))
    assert len(agg.e2e) == 3
    assert agg.report()["finished"] == 10


def test_starvation_counts_programs_still_waiting() -> None:
    metrics = MetricsAggregator()
    metrics.observe(Event(0.0, EventKind.PROGRAM_CREATED, "p", tenant="t"))
    metrics.observe(Event(1.0, EventKind.CALL_QUEUED, "p", "n1", 1, "t"))
    # nothing ended yet, but the program has waited 9 s with no service
    assert metrics.tenants(now=10.0)["t"].starvation == 9.0 / SERVICE_FLOOR_S
    metrics.observe(Event(10.0, EventKind.CALL_SCHEDULED, "p", "n1", 1, "t"))
    assert metrics.tenants(now=20.0)["t"].starvation == 0.0  # scheduled: no longer waiting
