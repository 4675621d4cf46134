"""A driver and the programs whose ends a restart learns from, shared by the scheduler's and
the store's restart tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentconsole.scheduler.actions import KvAdvice, ToolWaitFacts
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.program import Node, NodeKind
from agentconsole.scheduler.runtime import CacheAction, MemoryView, PrefixProbe
from tests.scheduler.driver_fakes import LinearCost


class KeepAdvisor:
    """Keeps every context through its tool waits (the tests here run no tool)."""

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        return KvAdvice(CacheAction.KEEP, 1.0, 1.0, {})


def new_driver() -> ProgramDriver:
    """A driver with nothing learned, its controller's events kept in an :class:`EventLog`."""
    return ProgramDriver(ProgramController(EventLog(), LinearCost()), KeepAdvisor(), LinearCost())


def run_program(
    driver: ProgramDriver,
    program_id: str,
    tenant: str,
    labels: Mapping[str, str],
    outputs: Sequence[int],
    *,
    success: bool = True,
) -> None:
    """``tenant``'s program with ``labels``: a chain of calls, each answering with the
    next of ``outputs`` tokens, then its end (finished, or failed unless ``success``)."""
    controller = driver.controller
    controller.open_program(program_id, tenant, 0.0, labels=labels)
    assert driver.arrive(program_id, 100, 0, 0.0)
    parents: tuple[str, ...] = ()
    for n, output in enumerate(outputs):
        node_id = f"n{n}"
        controller.add_node(program_id, Node(node_id, program_id, NodeKind.LLM, parents), 1.0)
        ticket = driver.queue_call(program_id, node_id, PrefixProbe(100), 1.0)
        controller.start_node(program_id, node_id, 1.0)
        usage = CallUsage(100, 0, output, 0.1)
        driver.call_ended(program_id, node_id, ticket.call_id, 2.0, usage)
        parents = (node_id,)
    driver.finish(program_id, 3.0, success=success)


def events_of(driver: ProgramDriver) -> EventLog:
    """The events ``driver``'s controller emitted (a :func:`new_driver`'s)."""
    log = driver.controller.sink
    assert isinstance(log, EventLog)
    return log
