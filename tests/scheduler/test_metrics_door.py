"""Live figures count a wait at the program door while it runs (``MetricsAggregator``'s
``at_door``, fed by the driver), and once it ends, as its ``program.door_waited``, once."""

from __future__ import annotations

import pytest

from agentconsole.scheduler import dag
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.events import Event, EventKind, EventLog
from agentconsole.scheduler.metrics import SERVICE_FLOOR_S, MetricsAggregator
from agentconsole.scheduler.program import Node, NodeKind, NodeState, Program
from tests.scheduler.driver_fakes import KeepAdvisor, LinearCost


def _door_run() -> tuple[ProgramDriver, MetricsAggregator, EventLog]:
    """A driver whose door holds 100 tokens, its events folded live by an aggregator that
    asks it who waits at the door."""
    log = EventLog()
    controller = ProgramController(log, LinearCost())
    driver = ProgramDriver(controller, KeepAdvisor(), LinearCost(), budget_tokens=100)
    metrics = MetricsAggregator(at_door=driver.door_waits)
    log.subscribe(metrics.observe)
    return driver, metrics, log


def test_a_program_held_at_the_door_starves_its_tenant_while_it_waits() -> None:
    """ "first" (tenant a) fills the door at 0 s; "held" (tenant b) waits there from 1 s until
    "first" ends at 11 s. Tenant b's max wait and starvation grow with virtual time while it
    waits, then equal the recorded ``program.door_waited`` and stop growing: no second is
    counted twice, none is missed."""
    driver, metrics, log = _door_run()
    driver.controller.open_program("first", "a", 0.0)
    driver.controller.open_program("held", "b", 1.0)
    assert driver.arrive("first", 100, 0, 0.0)
    assert not driver.arrive("held", 100, 0, 1.0)  # parked: the door is full
    for now in (3.0, 6.0, 9.0):
        waited = now - 1.0
        tenant = metrics.tenants(now)["b"]
        assert tenant.max_queue_wait_s == pytest.approx(waited)
        assert tenant.starvation == pytest.approx(waited / SERVICE_FLOOR_S)
        assert metrics.report(now)["max_tenant_starvation"] == pytest.approx(
            waited / SERVICE_FLOOR_S
        )
        assert metrics.tenants(now)["a"].max_queue_wait_s == 0.0  # another tenant's wait
    driver.finish("first", 11.0)  # the door lets "held" in: its wait is recorded
    (recorded,) = [e for e in log if e.kind is EventKind.PROGRAM_DOOR_WAITED]
    assert recorded.data["door_s"] == pytest.approx(10.0)
    assert driver.door_waits() == {}
    for now in (11.0, 30.0):
        tenant = metrics.tenants(now)["b"]
        assert tenant.max_queue_wait_s == pytest.approx(10.0)
        assert tenant.starvation == pytest.approx(10.0 / SERVICE_FLOOR_S)


def test_without_a_door_source_only_ended_waits_count() -> None:
    """``bench``'s aggregator has no ``at_door``: what it reports follows the events alone."""
    metrics = MetricsAggregator()
    metrics.observe(Event(0.0, EventKind.PROGRAM_CREATED, "p", tenant="t"))
    assert metrics.tenants(50.0)["t"].max_queue_wait_s == 0.0
    metrics.observe(
        Event(4.0, EventKind.PROGRAM_DOOR_WAITED, "p", tenant="t", data={"door_s": 4.0})
    )
    assert metrics.tenants(50.0)["t"].max_queue_wait_s == pytest.approx(4.0)


def test_an_adopted_program_keeps_its_door_waits_from_before_the_restart() -> None:
    """A program rebuilt after a restart, handed over with the door waits the store recorded
    (4 s before its root's call): its wait, its tenant's max wait and, when it finishes, its
    critical path's queue idle count them as the previous server did."""
    program = Program("p", "t", 100.0, attained_service_s=2.0)
    root = Node("n0", "p", NodeKind.LLM, state=NodeState.DONE, finished_at=110.0, queue_s=1.0)
    root.started_at = 105.0
    dag.add_node(program, root)
    metrics = MetricsAggregator()
    metrics.adopt(program, [(100.0, 104.0)])
    tenant = metrics.tenants(200.0)["t"]
    assert tenant.max_queue_wait_s == pytest.approx(4.0)
    assert tenant.starvation == pytest.approx(4.0 / 2.0)
    metrics.observe(Event(111.0, EventKind.PROGRAM_FINISHED, "p", tenant="t"))
    assert metrics.report()["cp_idle_queue_mean_s"] == pytest.approx(1.0 + 4.0)


def test_a_node_declared_ahead_of_a_door_wait_counts_it_once_after_a_restart() -> None:
    """A node declared at 100, its call sent at 102, at the door until 106, queued and started
    there (``serve``), then 1 s in the engine's queue: the controller holds the engine's 1 s
    of queue time for it (its queue time counts from its ticket, not from its readiness). The
    server that saw it counted the door's 4 s and the engine's 1 s; a server that adopts it
    after a restart, with the door's stored span, counts the same (neither the door twice nor
    the agent's 2 s as queueing)."""
    log = EventLog()
    controller = ProgramController(log, LinearCost())
    before = MetricsAggregator()
    log.subscribe(before.observe)
    program = controller.open_program("p", "t", 100.0)
    controller.add_node("p", Node("plan", "p", NodeKind.LLM), 100.0)
    door = {"door_s": 4.0}
    before.observe(Event(106.0, EventKind.PROGRAM_DOOR_WAITED, "p", tenant="t", data=door))
    before.observe(Event(106.0, EventKind.CALL_QUEUED, "p", "plan", 1, "t"))
    controller.ticket("p", "plan", 106.0, prompt_tokens=10)
    controller.start_node("p", "plan", 106.0)
    usage = CallUsage(10, 0, 5, service_s=2.0, runtime_queue_s=1.0)
    controller.finish_llm("p", "plan", 110.0, usage)
    ended = {"queue_s": 1.0, "service_s": 2.0}
    before.observe(Event(110.0, EventKind.CALL_FINISHED, "p", "plan", 1, "t", ended))
    assert program.nodes["plan"].queue_s == pytest.approx(1.0)
    assert program.wait_s == pytest.approx(1.0)
    after = MetricsAggregator()
    after.adopt(program, [(102.0, 106.0)])
    for metrics in (before, after):
        tenant = metrics.tenants(111.0)["t"]
        assert tenant.starvation == pytest.approx((4.0 + 1.0) / 2.0)
        assert tenant.max_queue_wait_s == pytest.approx(4.0)
        metrics.observe(Event(111.0, EventKind.PROGRAM_FINISHED, "p", tenant="t"))
        assert metrics.report()["cp_idle_queue_mean_s"] == pytest.approx(4.0 + 1.0)
