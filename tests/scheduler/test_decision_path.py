"""What the decision path's fast paths must keep: every ticket field, the queue's backlog and
ranks, the DAG checks a root skips, and the predictions a program's end is checked against."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentconsole.scheduler import dag
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.events import EventKind, EventLog
from agentconsole.scheduler.fairness import FairnessConfig, FairnessGuard
from agentconsole.scheduler.policies import available, get_policy
from agentconsole.scheduler.program import (
    DEFAULT_RETRY,
    Branch,
    Node,
    NodeKind,
    NodeState,
    Program,
    RetryPolicy,
)
from agentconsole.scheduler.queue import ReadyQueue
from agentconsole.scheduler.ticket import CallTicket
from tests.scheduler import strategies


class _Cost:
    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return uncached_prompt_tokens * 1e-4 + output_tokens * 1e-2


def _usage(service: float) -> CallUsage:
    return CallUsage(prompt_tokens=100, cached_tokens=0, output_tokens=40, service_s=service)


def test_every_ticket_field_by_name() -> None:
    """``ticket`` builds the ticket by position: each field must still get its own value."""
    c = ProgramController(EventLog(), _Cost())
    c.open_program("p", "acme", 0.0, deadline=90.0, labels={"workload": "w"})
    c.boost("p", 0.25)
    for nid, parents, service in [("a", (), 1.0), ("b", ("a",), 3.0)]:
        c.add_node("p", Node(nid, "", NodeKind.LLM, parents=parents), 0.0)
        c.start_node("p", nid, 2.0)  # both ready at 0 (b added once a is done): 2 s each
        c.finish_llm("p", nid, 3.0, _usage(service))
    c.add_node("p", Node("c", "", NodeKind.LLM, parents=("b",)), 3.0)
    c.add_node("p", Node("t", "", NodeKind.TOOL, parents=("c",)), 3.0)  # c unlocks t
    c.start_node("p", "c", 4.0)  # ready at 3: 1 s more
    c.requeue_node("p", "c", 5.0)  # preempted: its next ticket is attempt 2
    program = c.get("p")
    node = program.nodes["c"]
    t = c.ticket("p", "c", 6.0, prompt_tokens=5000, cached_tokens=1000, restore_cost_s=0.5)
    service = 4000 * 1e-4 + node.expected_output_tokens * 1e-2
    remaining = c.remaining_work.remaining_calls("acme", "w", 2)
    assert t.to_params() == {
        "call_id": "p/c/0002",
        "program_id": "p",
        "node_id": "c",
        "tenant": "acme",
        "arrival": 6.0,
        "attempt": 2,
        "prompt_tokens": 5000,
        "cached_tokens": 1000,
        "expected_output_tokens": node.expected_output_tokens,
        "service_estimate_s": service,
        "restore_cost_s": 0.5,
        "program_service_s": 4.0,
        "cp_service_s": 4.0,
        "program_wait_s": 5.0,
        "completed_calls": 2,
        "remaining_cp_s": service
        + 0.5
        + max(remaining - 1.0, 0.0) * (c._mean_call_s["acme"] + 1.0),
        "unlock_value": 1.0,
        "deadline": 90.0,
        "boost": 0.25,
        "drain_s": 0.0,  # not queued behind other calls
        "seq": 0,
    }
    assert t.expected_output_tokens > 0


def test_predictions_are_kept_per_ticket_in_order() -> None:
    c = ProgramController(EventLog(), _Cost())
    c.open_program("p", "t", 0.0)
    for k in range(3):
        c.add_node("p", Node(f"n{k}", "", NodeKind.LLM), 0.0)
        c.ticket("p", f"n{k}", 0.0, prompt_tokens=10)
        c.start_node("p", f"n{k}", 0.0)
        c.finish_llm("p", f"n{k}", 0.0, _usage(0.1))
    got = c._estimates["p"].predictions
    assert [k for k, _ in got] == [0, 1, 2]
    assert [r for _, r in got] == [c.remaining_work.remaining_calls("t", "", k) for k in range(3)]


def test_add_node_events_and_shared_default_retry() -> None:
    log = EventLog()
    c = ProgramController(log, _Cost())
    c.open_program("p", "t", 0.0)
    root = c.add_node("p", Node("a", "", NodeKind.LLM), 1.0)
    c.add_node("p", Node("b", "", NodeKind.LLM, parents=("a",)), 1.0)
    added = [e for e in log if e.kind is EventKind.NODE_ADDED]
    assert [dict(e.data) for e in added] == [
        {"kind": "llm", "parents": "", "branch": "main"},
        {"kind": "llm", "parents": "a", "branch": "main"},
    ]
    assert all(type(v) is str for e in added for v in e.data.values())  # not enum members
    ready = [e for e in log if e.kind is EventKind.NODE_READY]
    assert [(e.node_id, e.attempt, e.tenant) for e in ready] == [("a", 0, "t")]
    assert root.state is NodeState.READY
    assert root.ready_at == 1.0
    assert root.retry is DEFAULT_RETRY
    assert root.retry == RetryPolicy()


def test_dag_checks_for_roots_and_single_parents() -> None:
    program = Program("p", "t", 0.0)
    dag.add_node(program, Node("a", "p", NodeKind.LLM))
    with pytest.raises(dag.DagError, match="already exists"):
        dag.add_node(program, Node("a", "p", NodeKind.LLM))
    with pytest.raises(dag.DagError, match="twice"):
        dag.add_node(program, Node("x", "p", NodeKind.LLM, parents=("a", "a")))
    dag.add_node(program, Node("b", "p", NodeKind.LLM, parents=("a",)))
    assert program.branches == 1
    dag.add_node(program, Node("c", "p", NodeKind.LLM, parents=("a",)))  # a second child
    dag.add_node(program, Node("r", "p", NodeKind.LLM, branch=Branch.REPAIR))
    assert program.branches == 3
    assert program.children == {"a": ["b", "c"], "b": [], "c": [], "r": []}
    assert dag.parents_done(program, program.nodes["a"])
    assert not dag.parents_done(program, program.nodes["b"])
    assert dag.unlock_value(program, "b") == 0
    assert dag.unlock_value(program, "a") == 2


tickets = strategies.tickets(boost=st.floats(0, 1))
ops = st.lists(
    st.tuples(
        st.sampled_from(["push", "push", "pop", "remove", "service", "rekey", "policy"]),
        tickets,
        st.floats(0, 200),
    ),
    max_size=60,
)


@given(ops, st.sampled_from(available()))
@settings(max_examples=150, deadline=None)
def test_backlog_and_rank_follow_the_queue(
    operations: list[tuple[str, CallTicket, float]], policy: str
) -> None:
    """The backlog the queue keeps equals the tenants of its waiting calls, in first-queued
    order, and the rank ``peek`` leaves on its choice is that call's effective key."""
    guard = FairnessGuard(FairnessConfig(beta=2.0, half_life_s=20.0))
    queue = ReadyQueue(get_policy(policy), guard)
    first_seen: list[str] = []
    now = 0.0
    for i, (op, ticket, dt) in enumerate(operations):
        now += dt / 10
        if op == "push":
            ticket.call_id = f"c{i}"
            queue.push(ticket, now)
            if ticket.tenant not in first_seen:
                first_seen.append(ticket.tenant)
        elif op == "pop":
            queue.pop(now)
        elif op == "remove" and len(queue):
            queue.remove(next(iter(queue)).ticket.call_id)
        elif op == "service":
            guard.record_service(ticket.tenant, dt, now)
        elif op == "rekey":
            queue.rekey(ticket.program_id, lambda t: setattr(t, "boost", t.boost + 1.0), now)
        elif op == "policy":
            queue.set_policy(get_policy(available()[i % len(available())]), now)
            # a switch re-queues every waiting call in queue order: the backlog starts anew
            first_seen = list(dict.fromkeys(e.ticket.tenant for e in queue))
        waiting = {e.ticket.tenant for e in queue}
        assert queue.tenants() == [t for t in first_seen if t in waiting]
        head = queue.peek(now)
        if head is not None:
            underserved = guard.underserved(queue.tenants(), now)
            assert head.rank_at(now) == guard.effective_key(
                head.ticket, head.key_at(now), now, underserved
            )
            assert head is queue.ordered(now)[0]
