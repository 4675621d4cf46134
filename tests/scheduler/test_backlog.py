"""The engines' backlog: remaining work per program, the pace it is served at, the drain."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.backlog import EngineBacklog
from agentconsole.scheduler.controller import CallUsage, ProgramController
from agentconsole.scheduler.events import EventLog
from agentconsole.scheduler.program import Node, NodeKind


class _Cost:
    def call_seconds(self, uncached_prompt_tokens: int, output_tokens: float) -> float:
        return 0.5


def _usage(service: float) -> CallUsage:
    return CallUsage(prompt_tokens=10, cached_tokens=0, output_tokens=4, service_s=service)


def test_remaining_calls_are_summed_replaced_lowered_and_forgotten() -> None:
    backlog = EngineBacklog()
    backlog.expect("a", 4.0, 0.0)
    backlog.expect("b", 0.5, 0.0)
    backlog.expect("a", 3.0, 0.0)  # a's later estimate replaces its earlier one
    assert backlog.total_calls == pytest.approx(3.5)
    backlog.served("a", 1.0)
    assert backlog.total_calls == pytest.approx(2.5)
    backlog.served("b", 1.0)  # more calls than expected: nothing below zero
    assert backlog.total_calls == pytest.approx(2.0)
    backlog.forget("a", 2.0)
    backlog.forget("a", 2.0)  # twice: no change
    assert backlog.total_calls == pytest.approx(0.0)


def _draining(backlog: EngineBacklog, programs: dict[str, float], until: float) -> None:
    """Programs added at 0; one call served a second from 1 to ``until``, round robin."""
    for pid, calls in programs.items():
        backlog.expect(pid, calls, 0.0)
    ids = list(programs)
    for second in range(1, int(until) + 1):
        backlog.served(ids[second % len(ids)], float(second))


def test_the_drain_is_every_remaining_call_at_todays_latency_a_batch_at_a_time() -> None:
    """Once the flow out outweighs the flow in, the drain is the calls left at the calls'
    latency, a batch at a time, stretched by the share of the outflow the inflow refills."""
    backlog = EngineBacklog()
    assert backlog.drain_s(2.0, 4, 0.0) == 0.0  # nothing to come
    backlog.window_s = 2.0
    _draining(backlog, {"a": 16.0, "b": 16.0}, until=20.0)
    assert backlog.total_calls == pytest.approx(12.0)
    refilled = backlog._added / backlog._left
    assert 0.0 < refilled < 0.01  # the burst's arrivals have faded
    assert backlog.drain_s(2.0, 4, 20.0) == pytest.approx(12.0 * 2.0 / 4 / (1 - refilled))
    assert backlog.drain_s(2.0, 0, 20.0) == 0.0  # no batch running


def test_calls_arriving_as_fast_as_they_leave_drain_nothing() -> None:
    """In a sustained overload every served call is replaced by a new one: the engines never
    run out of work, so no path outruns the drain (none is told); once the arrivals stop,
    the drain comes back within a few windows."""
    backlog = EngineBacklog()
    backlog.expect("a", 10.0, 0.0)
    for second in range(1, 30):  # one call out and one (a new program's) in, each second
        backlog.served("a" if second < 10 else f"new{second - 9}", float(second))
        backlog.expect(f"new{second}", 1.0, float(second))
    assert backlog.drain_s(1.0, 2, 29.0) == 0.0
    for second in range(30, 34):  # the arrivals stop; the last ones are served
        backlog.served(f"new{second - 9}", float(second))
    assert backlog.drain_s(1.0, 2, 33.0) > backlog.total_calls * 1.0 / 2


def test_a_ticket_carries_the_drain_only_while_calls_wait_in_the_engines() -> None:
    """The controller keeps the backlog from its own estimates; the drain rides on a ticket
    queued while calls wait in the engines (priced at the calls' latency, queueing and
    service), and a program's end takes its calls out."""
    controller = ProgramController(EventLog(), _Cost(), mean_call_s=1.0)
    for pid in ("a", "b", "c"):
        controller.open_program(pid, "t", 0.0)
        controller.add_node(pid, Node("n1", "", NodeKind.LLM), 0.0)
        controller.add_node(pid, Node("n2", "", NodeKind.LLM, parents=("n1",)), 0.0)
        controller.ticket(pid, "n1", 0.0, prompt_tokens=10)  # the backlog takes it in
        controller.start_node(pid, "n1", 0.0)
        controller.finish_llm(pid, "n1", 1.0, _usage(1.0))
    arriving = controller.ticket("a", "n2", 2.0, prompt_tokens=10, queued_behind=2)
    assert arriving.drain_s == 0.0  # as much came in as went out: no end in sight
    controller.cancel_program("c", 10.0)  # long after: what leaves now outweighs what came
    quiet = controller.ticket("a", "n2", 10.0, prompt_tokens=10)
    assert quiet.drain_s == 0.0
    busy = controller.ticket("a", "n2", 10.0, prompt_tokens=10, queued_behind=2)
    expected = controller.backlog.drain_s(controller._mean_latency_s, 2, 10.0)
    assert busy.drain_s == pytest.approx(expected)
    assert busy.drain_s > 0
    before = controller.backlog.total_calls
    controller.finish_program("a", 11.0)
    assert controller.backlog.total_calls < before
    controller.cancel_program("b", 11.0)
    assert controller.backlog.total_calls == pytest.approx(0.0)
