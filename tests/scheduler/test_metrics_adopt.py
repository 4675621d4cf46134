"""A program adopted after a restart is followed, not created again: ``programs`` (exported as
``programs_created_total``, whose ``increase()`` would count every running program once more
per restart) counts only the creations since start, while the program is one of its tenant's
programs and its end still counts."""

from __future__ import annotations

from agentconsole.scheduler import dag
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program


def _rebuilt(program_id: str) -> Program:
    """A running program as a restart rebuilds it: one call done, one cut by the crash."""
    program = Program(program_id, "t", 100.0, attained_service_s=2.0, tokens_used=500)
    dag.add_node(
        program,
        Node("a", program_id, NodeKind.LLM, state=NodeState.DONE, finished_at=104.0),
    )
    dag.add_node(program, Node("b", program_id, NodeKind.LLM, ("a",), state=NodeState.FAILED))
    return program


def test_adopting_programs_counts_no_creation_nor_anything_else() -> None:
    metrics = MetricsAggregator()
    for number in range(24):
        metrics.adopt(_rebuilt(f"p{number}"))
    report = metrics.report()
    assert report["programs"] == 0
    assert not any(metrics.counts.values())  # no count moved (calls, tokens, ends)
    tenant = metrics.tenants(200.0)["t"]
    assert (tenant.programs, tenant.finished, tenant.tokens) == (24, 0, 0)  # followed, no more
    assert list(metrics.ttfp) == []


def test_a_creation_after_the_restart_counts_once_and_adopted_ends_still_count() -> None:
    metrics = MetricsAggregator()
    metrics.adopt(_rebuilt("old"))
    metrics.observe(Event(200.0, EventKind.PROGRAM_CREATED, "new", tenant="t"))
    metrics.observe(Event(210.0, EventKind.PROGRAM_FINISHED, "old", tenant="t"))
    report = metrics.report()
    assert (report["programs"], report["finished"]) == (1, 1)
    assert metrics.tenants()["t"].programs == 2  # the one followed and the one created
