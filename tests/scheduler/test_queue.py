"""The ready queue's O(log n) decision equals the brute-force minimum effective key."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.scheduler.fairness import FairnessConfig, FairnessGuard
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

ops = st.lists(
    st.tuples(st.sampled_from(["push", "pop", "remove", "service"]), tickets, st.floats(0, 200)),
    max_size=60,
)


@given(ops, st.sampled_from(available()))
@settings(max_examples=150, deadline=None)
def test_peek_equals_sorted_minimum(
    operations: list[tuple[str, CallTicket, float]], policy: str
) -> None:
    guard = FairnessGuard(FairnessConfig(beta=2.0, half_life_s=20.0))
    queue = ReadyQueue(get_policy(policy), guard)
    now = 0.0
    for i, (op, ticket, dt) in enumerate(operations):
        now += dt / 10
        if op == "push":
            ticket.call_id = f"c{i}"
            queue.push(ticket, now)
        elif op == "remove" and len(queue):
            queue.remove(next(iter(queue)).ticket.call_id)
        elif op == "service":
            guard.record_service(ticket.tenant, dt, now)
        ordered = queue.ordered(now)
        head = queue.peek(now)
        assert (head is None) == (not ordered)
        if head is not None:
            assert head.ticket.call_id == ordered[0].ticket.call_id
        if op == "pop" and head is not None:
            assert queue.pop(now) is head.ticket
            assert head.ticket.call_id not in queue


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
