"""Metrics computed from events: percentiles, critical-path idle, slowdown, goodput."""

from __future__ import annotations

import math

import pytest

from agentconsole.scheduler import dag
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.metrics import SERVICE_FLOOR_S, MetricsAggregator, percentile
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program, ProgramState

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


def test_a_live_rate_is_over_its_window_not_the_servers_life() -> None:
    """A live server's throughput was finished programs over every second it had served: an
    hour of one program each 10 s, then 2 a second for a minute, read 0.13/s (the console's
    "throughput" and its history chart barely moved). With a rate window it is the window's."""
    agg = MetricsAggregator(rate_window_s=60.0)
    for i in range(360):  # programs ending at 10, 20, ..., 3600 s
        for event in _program(f"slow{i}", "t", 10.0 * i):
            agg.observe(event)
    for i in range(120):  # ending at 3600.5 ... 3660 s, one in two late
        for event in _program(f"fast{i}", "t", 3590.5 + 0.5 * i, late=i % 2 == 1):
            agg.observe(event)
    r = agg.report(3660.0)
    assert r["throughput_programs_per_s"] == pytest.approx(120 / 60)  # the last minute's
    assert r["goodput_programs_per_s"] == pytest.approx(60 / 60)
    assert agg.report(3720.0)["throughput_programs_per_s"] == pytest.approx(0.0)  # gone quiet
    whole = MetricsAggregator()  # bench's: the whole run's span
    for pid, start in [("p", 0.0), ("q", 50.0)]:
        whole.observe_all(_program(pid, "t", start))
    assert whole.report()["throughput_programs_per_s"] == pytest.approx(2 / 60)


def test_a_young_servers_rate_is_over_the_time_it_served() -> None:
    agg = MetricsAggregator(rate_window_s=60.0).observe_all(_program("p", "t", 0.0))
    assert agg.report(20.0)["throughput_programs_per_s"] == pytest.approx(1 / 20)
    with pytest.raises(ValueError, match="rate_window_s"):
        MetricsAggregator(rate_window_s=0.0)
    # a server idle for 10 s before its first program served those seconds too (the rate
    # read 5 programs in 55 s where a minute had passed)
    idle_first = MetricsAggregator(rate_window_s=60.0, served_since=-10.0)
    idle_first.observe_all(_program("p", "t", 0.0))
    assert idle_first.report(20.0)["throughput_programs_per_s"] == pytest.approx(1 / 30)


def test_with_no_success_there_is_no_figure_per_success() -> None:
    """A run whose programs all failed reported its totals as one success's."""
    events = _program("p", "t", 0.0)
    failed = [*events[:-1], Event(10.0, K.PROGRAM_FAILED, "p", "", 1, "t", {})]
    r = MetricsAggregator().observe_all(failed).report()
    assert (r["finished"], r["failed"]) == (0, 1)
    assert math.isnan(r["tokens_per_success"])
    assert math.isnan(r["gpu_s_per_success"])


def test_parallel_tools_wait_once() -> None:
    """A program's tool wait is the time a tool of it ran: two tools side by side (2 s and
    4 s from 4 s on) wait 4 s, not 6 (the sum read more tool wait than E2E on wide-fanout)."""

    def e(t: float, what: EventKind, node: str = "", **data: float | str | bool) -> Event:
        return Event(t, what, "p", node, 1, "t", data)

    events = [
        e(0, K.PROGRAM_CREATED),
        e(4, K.TOOL_FINISHED, "fast", latency_s=1.0, outcome="ok"),  # 3..4: alone
        e(6, K.TOOL_FINISHED, "t", latency_s=2.0, outcome="ok"),  # 4..6
        e(8, K.TOOL_FINISHED, "u", latency_s=4.0, outcome="ok"),  # 4..8
        e(9, K.PROGRAM_FINISHED),
    ]
    assert MetricsAggregator().observe_all(events).report()["tool_wait_mean_s"] == 5.0


def test_a_discarded_branchs_call_aborted_after_its_program_ended_is_discarded_work() -> None:
    def e(t: float, what: EventKind, node: str = "", **data: float | str | bool) -> Event:
        return Event(t, what, "p", node, 1, "t", data)

    events = [
        e(0, K.PROGRAM_CREATED),
        e(0, K.NODE_ADDED, "keep", kind="llm", parents=""),
        e(0, K.NODE_ADDED, "lost", kind="llm", parents="", branch="discarded"),
        e(2, K.CALL_FINISHED, "keep", computed_tokens=10, output_tokens=5),
        e(2, K.PROGRAM_FINISHED),
        e(3, K.CALL_ABORTED, "lost", computed_tokens=100, output_tokens=7),
    ]
    report = MetricsAggregator().observe_all(events).report()
    assert report["discarded_branch_tokens"] == 107


def test_a_call_that_produced_no_token_has_no_ttft() -> None:
    """Its TTFT of 0.0 pulled the percentiles toward 0 (a call stopped before its first
    token, or answered empty)."""

    def e(t: float, what: EventKind, node: str = "", **data: float | str | bool) -> Event:
        return Event(t, what, "p", node, 1, "t", data)

    events = [
        e(0, K.PROGRAM_CREATED),
        e(2, K.CALL_FINISHED, "a", output_tokens=5, ttft_s=1.0, computed_tokens=10),
        e(3, K.CALL_FINISHED, "b", output_tokens=0, ttft_s=0.0, computed_tokens=10),
        e(3, K.PROGRAM_FINISHED),
    ]
    assert MetricsAggregator().observe_all(events).report()["ttft_p50_s"] == 1.0


def test_percentile_interpolates_and_handles_empty() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_percentile_s_empty_case_is_the_caller_s_to_choose() -> None:
    assert percentile([], 95, empty=0.0) == 0.0
    assert percentile([1.0, 3.0], 50, empty=0.0) == 2.0  # only the empty case changes


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


def _event(t: float, what: EventKind, node: str = "", **data: float | str | bool) -> Event:
    return Event(t, what, "p", node, 1, "t", data)


def _call_done(t: float, node: str, queue_s: float, service_s: float) -> Event:
    return _event(t, K.CALL_FINISHED, node, queue_s=queue_s, service_s=service_s)


def test_a_final_tool_failure_ends_its_node_on_the_critical_path() -> None:
    """llm n0 (queue 3 s) -> tool n1 (timed out on its final attempt: the agent takes the
    error as its result) -> llm n2: the tool's 10 s and n0's queueing stay on the path."""
    events = [
        _event(0, K.PROGRAM_CREATED),
        _event(0, K.NODE_ADDED, "n0", kind="llm", parents=""),
        _call_done(5, "n0", queue_s=3.0, service_s=2.0),
        _event(5, K.NODE_ADDED, "n1", kind="tool", parents="n0"),
        _event(
            15,
            K.TOOL_FINISHED,
            "n1",
            latency_s=10.0,
            outcome="timeout",
            final=True,
            node_state="done",
        ),
        _event(15, K.NODE_ADDED, "n2", kind="llm", parents="n1"),
        _call_done(17, "n2", queue_s=0.5, service_s=1.5),
        _event(17, K.PROGRAM_FINISHED),
    ]
    r = MetricsAggregator().observe_all(events).report()
    assert r["cp_idle_tool_mean_s"] == pytest.approx(10.0)
    assert r["cp_idle_queue_mean_s"] >= 3.0
    assert r["cp_idle_queue_mean_s"] == pytest.approx(3.5)


def test_a_final_tool_failure_stored_before_node_state_still_ends_its_node() -> None:
    """Events without ``node_state`` (stored by an older server): ``final`` decides, as the
    controller did; both attempts' latency is tool idle on the path."""
    events = [
        _event(0, K.PROGRAM_CREATED),
        _event(0, K.NODE_ADDED, "n1", kind="tool", parents=""),
        _event(2, K.TOOL_FINISHED, "n1", latency_s=2.0, outcome="fail", final=False),
        _event(5, K.TOOL_FINISHED, "n1", latency_s=3.0, outcome="fail", final=True),
        _event(5, K.NODE_ADDED, "n2", kind="llm", parents="n1"),
        _call_done(6, "n2", queue_s=0.5, service_s=0.5),
        _event(6, K.PROGRAM_FINISHED),
    ]
    r = MetricsAggregator().observe_all(events).report()
    assert r["cp_idle_tool_mean_s"] == pytest.approx(5.0)


def test_a_door_wait_at_a_call_boundary_is_queue_idle_and_wait() -> None:
    """n0 ends at 5 s; n1, revealed then, waits at the door (parked at its call boundary)
    until 12 s, then 0.5 s in the engine's queue: 7.5 s of its queueing, and the program's
    and its tenant's wait."""
    events = [
        _event(0, K.PROGRAM_CREATED),
        _event(0, K.NODE_ADDED, "n0", kind="llm", parents=""),
        _event(0, K.CALL_QUEUED, "n0"),
        _call_done(5, "n0", queue_s=1.0, service_s=4.0),
        _event(5, K.NODE_ADDED, "n1", kind="llm", parents="n0"),
        _event(12, K.PROGRAM_DOOR_WAITED, door_s=7.0, at="boundary"),
        _event(12, K.CALL_QUEUED, "n1"),
        _call_done(14, "n1", queue_s=0.5, service_s=1.5),
        _event(14, K.PROGRAM_FINISHED),
    ]
    agg = MetricsAggregator().observe_all(events)
    assert agg.report()["cp_idle_queue_mean_s"] == pytest.approx(1.0 + 7.0 + 0.5)
    tenant = agg.tenants()["t"]
    assert tenant.max_queue_wait_s == pytest.approx(7.0)
    assert tenant.starvation == pytest.approx((1.0 + 7.0 + 0.5) / (4.0 + 1.5))


def test_a_door_wait_off_the_critical_path_is_not_queue_idle() -> None:
    """A fan-out: n1 was queued before the program parked; n2 waited at the door and ended
    first. The critical path runs through n1, which never waited there."""
    events = [
        _event(0, K.PROGRAM_CREATED),
        _event(0, K.NODE_ADDED, "n0", kind="llm", parents=""),
        _call_done(2, "n0", queue_s=0.0, service_s=2.0),
        _event(2, K.NODE_ADDED, "n1", kind="llm", parents="n0"),
        _event(2, K.CALL_QUEUED, "n1"),
        _event(2, K.NODE_ADDED, "n2", kind="llm", parents="n0"),
        _event(4, K.PROGRAM_DOOR_WAITED, door_s=2.0, at="boundary"),
        _event(4, K.CALL_QUEUED, "n2"),
        _call_done(6, "n2", queue_s=0.0, service_s=2.0),
        _call_done(10, "n1", queue_s=0.0, service_s=8.0),
        _event(10, K.PROGRAM_FINISHED),
    ]
    agg = MetricsAggregator().observe_all(events)
    assert agg.report()["cp_idle_queue_mean_s"] == pytest.approx(0.0)
    assert agg.tenants()["t"].max_queue_wait_s == pytest.approx(2.0)  # still its wait


def test_an_adopted_program_counts_when_it_ends() -> None:
    """A program rebuilt after a restart (no ``program.created`` for this aggregator): its
    finish, E2E from its creation and critical path count; an ended one is not adopted."""
    program = Program("p", "t", 100.0, attained_service_s=2.0, wait_s=1.0)
    done = Node("n0", "p", NodeKind.LLM, state=NodeState.DONE, finished_at=110.0, queue_s=1.0)
    dag.add_node(program, done)
    agg = MetricsAggregator()
    agg.adopt(program)
    agg.adopt(Program("q", "t", 100.0, state=ProgramState.FINISHED))
    agg.observe(_event(112, K.NODE_ADDED, "n1", kind="llm", parents="n0"))
    agg.observe(_call_done(130, "n1", queue_s=2.0, service_s=18.0))
    agg.observe(_event(130, K.PROGRAM_FINISHED))
    agg.observe(Event(131, K.PROGRAM_FINISHED, "q", tenant="t"))
    r = agg.report()
    assert (r["programs"], r["finished"]) == (0, 1)  # created before: not counted again
    assert r["e2e_p50_s"] == pytest.approx(30.0)
    assert r["cp_idle_queue_mean_s"] == pytest.approx(3.0)
    assert agg.tenants()["t"].starvation == pytest.approx(3.0 / 20.0)
