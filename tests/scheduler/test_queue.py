"""The ready queue's O(log n) decision equals the brute-force minimum effective key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.scheduler.fairness import (
    TIER_STARVING,
    TIER_UNDERSERVED,
    FairnessConfig,
    FairnessGuard,
)
from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.queue import ReadyQueue
from agentconsole.scheduler.ticket import CallTicket
from tests.scheduler import strategies

tickets = strategies.tickets(
    program_id=st.sampled_from(["a", "b", "c", "d"]),
    service_estimate_s=st.floats(0, 5),
    restore_cost_s=st.floats(0, 2),
    cp_service_s=st.floats(0, 10),
)
#: the same with a fourth tenant, deadlines and drains (keys that fall as calls wait): the
#: queue compares their keys at the decision's time within float rounding (``key + now - now``),
#: so the plugin's equality test, exact on ties, keeps ``tickets``
fair_tickets = strategies.tickets(
    program_id=st.sampled_from(["a", "b", "c", "d"]),
    tenant=st.sampled_from(["t1", "t2", "t3", "t4"]),
    program_wait_s=st.sampled_from([0.0, 10.0]) | st.floats(0, 50),
    service_estimate_s=st.floats(0, 5),
    restore_cost_s=st.floats(0, 2),
    cp_service_s=st.floats(0, 10),
    deadline=st.none() | st.floats(0, 150),
    drain_s=st.sampled_from([0.0, 5.0, 60.0]),
)

ops = st.lists(
    st.tuples(
        st.sampled_from(["push", "push", "pop", "remove", "service", "rekey", "policy"]),
        fair_tickets,
        st.floats(0, 200),
        st.sampled_from(available()),
    ),
    max_size=60,
)


def _waits_longer(ticket: CallTicket) -> None:
    ticket.boost += 3.0
    ticket.program_wait_s += 7.0


@given(ops, st.sampled_from(available()), st.booleans(), st.sampled_from([0.0, 0.05, 1.0]))
@settings(max_examples=300, deadline=None)
def test_peek_equals_sorted_minimum(
    operations: list[tuple[str, CallTicket, float, str]], policy: str, fair: bool, refresh: float
) -> None:
    """The head's call, tier and key are the brute-force minimum effective key's, through
    removals, re-keyed programs (their starvation moved), policy switches and shares (one
    tenant weighted a million: underserved whenever it waits)."""
    config = FairnessConfig(
        enabled=fair, beta=2.0, half_life_s=20.0, refresh_s=refresh, tenant_weights={"t4": 1e6}
    )
    guard = FairnessGuard(config)
    queue = ReadyQueue(get_policy(policy), guard)
    now = 0.0
    for i, (op, ticket, dt, other_policy) in enumerate(operations):
        now += dt / 10
        if op == "push":
            ticket.call_id = f"c{i}"
            queue.push(ticket, now)
        elif op == "remove" and len(queue):
            queued = [e.ticket.call_id for e in queue]
            queue.remove(queued[i % len(queued)])
        elif op == "service":
            guard.record_service(ticket.tenant, dt, now)
        elif op == "rekey":
            queue.rekey(ticket.program_id, _waits_longer, now)
        elif op == "policy":
            queue.set_policy(get_policy(other_policy), now)
        ordered = queue.ordered(now)
        head = queue.peek(now)
        assert (head is None) == (not ordered)
        if head is not None:
            assert head.ticket.call_id == ordered[0].ticket.call_id
            underserved = guard.underserved(queue.tenants(), now)
            want = guard.effective_key(ordered[0].ticket, ordered[0].key_at(now), now, underserved)
            got = head.rank_at(now)
            assert got[0] == want[0]
            assert got[1] == pytest.approx(want[1], abs=1e-6)
        if op == "pop" and head is not None:
            assert queue.pop(now) is head.ticket
            assert head.ticket.call_id not in queue


def test_removed_calls_leave_no_heap_behind_while_nothing_starves() -> None:
    """Below saturation no call starves, so no decision pops a starving heap: removed calls
    must leave them anyway (a long-lived server queues millions of calls)."""
    guard = FairnessGuard(FairnessConfig(beta=10.0, service_floor_s=5.0))
    queue = ReadyQueue(get_policy("fcfs"), guard)
    for i in range(20_000):
        now = i * 0.01
        queue.push(CallTicket(f"c{i}", f"p{i % 7}", "n", ("a", "b")[i % 2], arrival=now), now)
        assert queue.pop(now) is not None
    queue.push(CallTicket("last", "p", "n", "a", arrival=200.0), 200.0)
    held = [queue._starving, *queue._starving_by_tenant.values(), *queue._by_tenant.values()]
    assert sum(len(heap) for heap in held) <= 2 * 1024 + 10


def test_starving_call_jumps_the_queue() -> None:
    guard = FairnessGuard(FairnessConfig(beta=2.0, service_floor_s=1.0))
    queue = ReadyQueue(get_policy("progress"), guard)
    old = CallTicket("old", "p1", "n", "t", arrival=0.0, completed_calls=0)
    queue.push(old, 0.0)
    for i in range(5):
        queue.push(CallTicket(f"new{i}", f"q{i}", "n", "t", arrival=1.0, completed_calls=9), 1.0)
    head = queue.peek(1.0)
    assert head is not None
    assert head.ticket.call_id.startswith("new")
    # after beta * floor = 2 s of waiting the old call is starving and goes first
    head = queue.peek(2.5)
    assert head is not None
    assert head.ticket.call_id == "old"


def test_underserved_tenant_goes_first() -> None:
    guard = FairnessGuard(FairnessConfig(beta=100.0))
    queue = ReadyQueue(get_policy("fcfs"), guard)
    guard.record_service("heavy", 100.0, 0.0)
    guard.record_service("light", 1.0, 0.0)
    queue.push(CallTicket("h", "p", "n", "heavy", arrival=0.0), 0.0)
    queue.push(CallTicket("l", "q", "n", "light", arrival=5.0), 5.0)
    head = queue.peek(5.0)
    assert head is not None
    assert head.ticket.call_id == "l"


def test_a_flooding_tenants_starving_calls_wait_behind_an_underserved_tenant() -> None:
    """A tenant that floods has every program starving at once: its starving calls go after an
    underserved tenant's calls (were starvation first, the whole flood would be), and before
    everything else once that tenant has its share (the aging bound holds for the flood)."""
    guard = FairnessGuard(FairnessConfig(beta=2.0, service_floor_s=1.0, half_life_s=1e9))
    queue = ReadyQueue(get_policy("fcfs"), guard)
    guard.record_service("heavy", 100.0, 0.0)
    guard.record_service("light", 1.0, 0.0)
    for i in range(3):
        queue.push(CallTicket(f"h{i}", f"p{i}", "n", "heavy", arrival=0.0), 0.0)
    queue.push(CallTicket("l", "q", "n", "light", arrival=9.0), 9.0)
    head = queue.peek(9.0)  # heavy's calls starve from 2 s on; light is below its share
    assert head is not None
    assert head.ticket.call_id == "l"
    assert head.rank_at(9.0)[0] == TIER_UNDERSERVED
    guard.record_service("light", 100.0, 9.0)  # light has its share now
    head = queue.peek(9.0 + 1.0)  # past the guard's standing share decision
    assert head is not None
    assert head.ticket.call_id == "h0"
    assert head.rank_at(10.0)[0] == TIER_STARVING
    assert [e.ticket.call_id for e in queue.ordered(10.0)] == ["h0", "h1", "h2", "l"]


def test_disabled_guard_is_pure_policy_order() -> None:
    guard = FairnessGuard(FairnessConfig(enabled=False))
    queue = ReadyQueue(get_policy("fcfs"), guard)
    guard.record_service("heavy", 100.0, 0.0)
    queue.push(CallTicket("h", "p", "n", "heavy", arrival=0.0), 0.0)
    queue.push(CallTicket("l", "q", "n", "light", arrival=5.0), 1000.0)
    head = queue.peek(1000.0)
    assert head is not None
    assert head.ticket.call_id == "h"


def test_rekey_and_set_policy() -> None:
    queue = ReadyQueue(get_policy("fcfs"), FairnessGuard(FairnessConfig(enabled=False)))
    queue.push(CallTicket("a", "pa", "n", "t", arrival=0.0, completed_calls=0), 0.0)
    queue.push(CallTicket("b", "pb", "n", "t", arrival=1.0, completed_calls=5), 1.0)
    assert [e.ticket.call_id for e in queue.ordered(2.0)] == ["a", "b"]

    def boost(t: CallTicket) -> None:
        t.boost = 1e6

    assert queue.rekey("pb", boost, 2.0) == 1
    assert [e.ticket.call_id for e in queue.ordered(2.0)] == ["b", "a"]
    queue.set_policy(get_policy("progress"), 3.0)
    head = queue.peek(3.0)
    assert head is not None
    assert head.ticket.call_id == "b"
    assert len(queue) == 2


moving_tickets = strategies.tickets(
    program_id=st.sampled_from(["a", "b", "c", "d"]),
    restore_cost_s=st.floats(0, 2),
    deadline=st.none() | st.floats(0, 150),
    drain_s=st.sampled_from([0.0, 0.0, 5.0, 20.0, 60.0]),
)
moving_ops = st.lists(
    st.tuples(st.sampled_from(["push", "push", "pop", "remove"]), moving_tickets, st.floats(0, 80)),
    max_size=60,
)


@given(moving_ops, st.sampled_from(["critical-path", "cp-cache"]))
@settings(max_examples=200, deadline=None)
def test_keys_that_fall_rank_as_if_keyed_at_every_decision(
    operations: list[tuple[str, CallTicket, float]], policy_name: str
) -> None:
    """A call keyed once, on push, is chosen as a queue re-keying every call at every decision
    would choose (the SGLang plugin re-keys each pass): a slack shrinking as the call waits
    moves it up, whether it turned urgent while waiting or was urgent already."""
    policy = get_policy(policy_name)
    guard = FairnessGuard(FairnessConfig(enabled=False))
    queue = ReadyQueue(policy, guard)
    now = 0.0
    for i, (op, ticket, dt) in enumerate(operations):
        now += dt / 10
        if op == "push":
            ticket.call_id = f"c{i}"
            queue.push(ticket, now)
        elif op == "remove" and len(queue):
            queue.remove(next(iter(queue)).ticket.call_id)
        head = queue.peek(now)
        if head is None:
            continue
        fresh = {e.ticket.call_id: policy.key(e.ticket, now) for e in queue}
        best = min(fresh.values())
        # the queue's key is the fresh one (to rounding), and no waiting call's is lower
        assert head.key_at(now) == pytest.approx(fresh[head.ticket.call_id], abs=1e-6)
        assert fresh[head.ticket.call_id] <= best + 1e-6
        if op == "pop":
            assert queue.pop(now) is head.ticket
            # a call that left the queue (it runs) goes on being ranked by its key now
            later = now + dt
            assert queue.rank_at(head, later)[1] == pytest.approx(
                policy.key(head.ticket, later), abs=1e-6
            )
