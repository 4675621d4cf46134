"""The plugin's ordering logic without an engine: it equals the simulator's queue order, and
its extra tiers (probe, demoted, untracked) and preemption planning behave as documented."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.scheduler.fairness import (
    TIER_NORMAL,
    TIER_STARVING,
    TIER_STARVING_UNDERSERVED,
    TIER_UNDERSERVED,
    FairnessConfig,
    FairnessGuard,
)
from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.preemption import PreemptionRule
from agentconsole.scheduler.queue import ReadyQueue
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sglang.ordering import (
    TIER_DEMOTED,
    TIER_PROBE,
    TIER_UNTRACKED,
    Orderer,
    RunningView,
    ServiceMeter,
    preemption_priorities,
    preemption_victims,
    refreshed,
)
from agentconsole.server.runtime.sglang.ranked import Candidate
from agentconsole.server.runtime.sglang.wire import CallKind, WireTicket
from tests.scheduler.test_queue import tickets  # the simulator queue test's tickets


@given(
    st.lists(st.tuples(tickets, st.floats(0, 5)), min_size=1, max_size=30),
    st.lists(st.tuples(st.sampled_from(["t1", "t2", "t3"]), st.floats(0, 20)), max_size=6),
    st.sampled_from(available()),
    st.floats(0, 300),
)
@settings(max_examples=200, deadline=None)
def test_plugin_order_equals_the_simulator_queue_order(
    pushes: list[tuple[CallTicket, float]],
    services: list[tuple[str, float]],
    policy: str,
    later: float,
) -> None:
    config = FairnessConfig(beta=2.0, half_life_s=20.0)
    sim_guard, plugin_guard = FairnessGuard(config), FairnessGuard(config)
    for tenant, seconds in services:
        sim_guard.record_service(tenant, seconds, 0.0)
        plugin_guard.record_service(tenant, seconds, 0.0)
    queue = ReadyQueue(get_policy(policy), sim_guard)
    orderer = Orderer(plugin_guard, policy)
    candidates = []
    now = 0.0
    for i, (ticket, dt) in enumerate(pushes):
        now += dt
        ticket.call_id = f"c{i}"
        queue.push(replace(ticket), now)
        candidates.append(Candidate(ticket.call_id, WireTicket(ticket), now, i))
    now += later
    expected = [e.ticket.call_id for e in queue.ordered(now)]
    ranked = orderer.rank(candidates, now)
    got = [r.candidate.rid for r in sorted(ranked, key=lambda r: r.key)]
    assert got == expected


def _cand(rid: str, ticket: CallTicket | None, seen: float, **kw: object) -> Candidate:
    """A candidate first seen at ``seen``, numbered in the order of first sight (ms)."""
    wire = WireTicket(ticket) if ticket is not None else None
    return Candidate(rid, wire, seen, round(seen * 1000), **kw)  # type: ignore[arg-type]


def test_untracked_requests_wait_behind_tickets_in_arrival_order_until_they_starve() -> None:
    guard = FairnessGuard(FairnessConfig(beta=10.0, service_floor_s=5.0))
    orderer = Orderer(guard, "cp-cache")
    t = CallTicket("p/n/1", "p", "n", "t", arrival=100.0, remaining_cp_s=50.0)
    cands = [_cand("x", None, 90.0), _cand("y", None, 95.0), _cand("p/n/1", t, 100.0)]
    ranked = orderer.rank(cands, 101.0)
    order = [r.candidate.rid for r in sorted(ranked, key=lambda r: r.key)]
    assert order == ["p/n/1", "x", "y"]
    assert ranked[0].key[0] == TIER_UNTRACKED
    # 50 s (beta x floor) after it arrived, an untracked request is starving: it goes first
    ranked = orderer.rank(cands, 141.0)
    assert sorted(ranked, key=lambda r: r.key)[0].candidate.rid == "x"


def test_probe_goes_first_and_a_preempted_call_is_demoted() -> None:
    orderer = Orderer(FairnessGuard(), "cp-cache")
    good = CallTicket("g/n/1", "g", "n", "t", arrival=10.0, remaining_cp_s=1.0)
    bad = CallTicket("b/n/1", "b", "n", "t", arrival=10.0, remaining_cp_s=9.0)
    probe = CallTicket("probe/n/1", "probe", "n", "probe", arrival=10.0)
    cands = [
        Candidate("g/n/1", WireTicket(good), 10.0, 0, preempted_at=11.0),
        Candidate("b/n/1", WireTicket(bad), 10.5, 1),
        Candidate("probe/n/1", WireTicket(probe, kind=CallKind.PROBE), 12.0, 2),
    ]
    ranked = orderer.rank(cands, 12.0)
    order = [r.candidate.rid for r in sorted(ranked, key=lambda r: r.key)]
    assert order == ["probe/n/1", "b/n/1", "g/n/1"]
    assert ranked[2].key[0] == TIER_PROBE
    assert ranked[0].key[0] == TIER_DEMOTED


def test_boosts_and_ticket_overrides_rerank_without_mutating() -> None:
    orderer = Orderer(FairnessGuard(), "critical-path")
    a = CallTicket("a/n/1", "a", "n", "t", arrival=0.0, remaining_cp_s=5.0)
    b = CallTicket("b/n/1", "b", "n", "t", arrival=0.0, remaining_cp_s=9.0)
    cands = [_cand("a/n/1", a, 0.0), _cand("b/n/1", b, 1.0)]

    def first(**kw: object) -> str:
        ranked = orderer.rank(cands, 2.0, **kw)  # type: ignore[arg-type]
        return sorted(ranked, key=lambda r: r.key)[0].candidate.rid

    assert first() == "a/n/1"
    assert first(boosts={"b": 10.0}) == "b/n/1"
    assert first(tickets={"b/n/1": replace(b, remaining_cp_s=1.0)}) == "b/n/1"
    assert b.boost == 0.0
    assert b.remaining_cp_s == 9.0


def _queued(cached: int, remaining_cp_s: float = 0.0) -> CallTicket:
    return CallTicket(
        "c",
        "p",
        "n",
        "t",
        0.0,
        prompt_tokens=1000,
        cached_tokens=cached,
        service_estimate_s=0.5,
        restore_cost_s=0.1,
        remaining_cp_s=remaining_cp_s,
    )


def test_a_ticket_is_refreshed_with_what_the_device_holds_now() -> None:
    lost = refreshed(_queued(800, remaining_cp_s=2.0), 500, 1e-3)  # 300 tokens evicted meanwhile
    assert lost.cached_tokens == 500
    assert lost.restore_cost_s == 0.1 + 0.3
    assert lost.remaining_cp_s == 2.0 + 0.3
    assert lost.service_estimate_s == 0.5
    gained = refreshed(_queued(200, remaining_cp_s=2.0), 600, 1e-3)  # a sibling computed 400 more
    assert gained.cached_tokens == 600
    assert gained.restore_cost_s == 0.0  # 0.1 off the restore cost, then 0.3 off the service
    assert abs(gained.service_estimate_s - 0.2) < 1e-12
    assert abs(gained.remaining_cp_s - 1.6) < 1e-12
    same = _queued(300)
    assert refreshed(same, 300, 1e-3) is same
    assert refreshed(_queued(300), 5000, 1e-3).cached_tokens == 1000  # never past the prompt
    unpriced = _queued(800)
    assert refreshed(unpriced, 0, 0.0) is unpriced


def test_a_waiting_call_whose_context_was_evicted_falls_behind_a_resident_one() -> None:
    """Two equal calls queued with their contexts resident; one context is evicted while they
    wait: with the live match the resident one goes first (``cp-cache``: restore is priced)."""
    orderer = Orderer(FairnessGuard(FairnessConfig()), "cp-cache")
    a = replace(_queued(900, remaining_cp_s=1.0), call_id="a", program_id="pa")
    b = replace(_queued(900, remaining_cp_s=1.0), call_id="b", program_id="pb")
    stale = [_cand("a", a, 0.0), _cand("b", b, 1.0)]
    assert [r.candidate.rid for r in sorted(orderer.rank(stale, 2.0), key=lambda r: r.key)] == [
        "a",
        "b",
    ]
    live = [_cand("a", a, 0.0, resident_tokens=0), _cand("b", b, 1.0, resident_tokens=900)]
    ranked = sorted(orderer.rank(live, 2.0, recompute_s_per_token=1e-3), key=lambda r: r.key)
    assert [r.candidate.rid for r in ranked] == ["b", "a"]


def test_set_policy_keeps_the_old_one_for_an_unknown_name() -> None:
    orderer = Orderer(FairnessGuard(), "fcfs")
    assert orderer.set_policy("progress")
    assert not orderer.set_policy("nope")
    assert orderer.policy_name == "progress"


def test_victims_follow_the_simulators_rule_worst_first() -> None:
    rule = PreemptionRule(min_residency_s=0.25, cost_ratio=1.0)
    normal = TIER_NORMAL
    want = (normal, 1.0, 5)
    running = [
        RunningView("young", (normal, 9.0, 1), 0.1, 5.0, 0.1),  # not resident long enough
        RunningView("cheap", (normal, 8.0, 2), 1.0, 0.05, 0.1),  # finishing is cheaper
        RunningView("bad", (normal, 7.0, 3), 1.0, 5.0, 0.1),
        RunningView("worse", (normal, 9.5, 4), 1.0, 5.0, 0.1),
        RunningView("better", (normal, 0.5, 0), 1.0, 5.0, 0.1),  # ranked above the waiting call
        RunningView("probe", (normal, 99.0, 6), 1.0, 5.0, 0.1, protected=True),
    ]
    assert preemption_victims(want, running, rule, preemptive=True) == ["worse", "bad"]
    assert preemption_victims(want, running, rule, preemptive=False) == []


def test_a_running_starving_call_is_displaced_by_a_starving_call_only() -> None:
    """An underserved tenant's call ranks before another tenant's starving call, but does not
    take it back once it runs (nor the other way round when the share flips): only a call that
    starves too, or the health probe, displaces it."""
    rule = PreemptionRule(min_residency_s=0.25, cost_ratio=1.0)
    running = [RunningView("starving", (TIER_STARVING, 50.0, 1), 1.0, 5.0, 0.1)]
    for want in ((TIER_UNDERSERVED, 99.0, 3), (TIER_UNDERSERVED, 0.0, 0)):
        assert preemption_victims(want, running, rule, preemptive=True) == []
    for want in ((TIER_STARVING_UNDERSERVED, 60.0, 2), (TIER_STARVING, 40.0, 2)):
        assert preemption_victims(want, running, rule, preemptive=True) == ["starving"]
    assert preemption_victims((TIER_PROBE, 0.0, 9), running, rule, preemptive=True) == ["starving"]
    normal = [RunningView("normal", (TIER_NORMAL, 1.0, 1), 1.0, 5.0, 0.1)]
    assert preemption_victims((TIER_UNDERSERVED, 99.0, 3), normal, rule, preemptive=True) == [
        "normal"
    ]


@given(st.lists(st.text(min_size=1, max_size=3), unique=True, max_size=8), st.integers(0, 20))
def test_temporary_priorities_make_sglang_pick_exactly_the_victims(
    rids: list[str], threshold: int
) -> None:
    victims, others = rids[: len(rids) // 2], rids[len(rids) // 2 :]
    mine, prio = preemption_priorities(victims, others, threshold)
    for v in victims:
        assert mine - prio[v] > threshold  # SGLang's condition to preempt
    for o in others:
        assert mine - prio[o] <= threshold
    assert [prio[v] for v in victims] == sorted(prio[v] for v in victims)  # worst first


def test_meter_splits_steps_by_tokens_and_fits_prefill_cost() -> None:
    guard = FairnessGuard()
    meter = ServiceMeter(guard)
    meter.credit([("a", 30), ("b", 10), ("", 10)], 0.5, 1.0, prefill=True)
    assert abs(meter.service_s["a"] - 0.3) < 1e-9
    assert abs(meter.service_s["b"] - 0.1) < 1e-9
    assert "" not in meter.service_s
    meter = ServiceMeter(guard)
    for tokens in (10, 100, 1000, 10, 500):
        meter.credit([("a", tokens)], 0.004 + 1e-5 * tokens, 2.0, prefill=True)
    assert abs(meter.prefill_token_s - 1e-5) < 3e-6
    assert meter.restore_s(2000) < 0.1  # fixed part not mistaken for a per-token cost
    meter.credit([("a", 1)], 0.002, 3.0, prefill=False)
    assert meter.decode_step_s < 0.005
