"""The engines' backlog: remaining work per program, the pace it is served at, the drain."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentconsole.scheduler.backlog import EngineBacklog, drain_batch
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
    backlog.expect("a", 4.0)
    backlog.expect("b", 0.5)
    backlog.expect("a", 3.0)  # a's later estimate replaces its earlier one
    assert backlog.total_calls == pytest.approx(3.5)
    backlog.served("a")
    assert backlog.total_calls == pytest.approx(2.5)
    backlog.served("b")  # more calls than expected: nothing below zero
    assert backlog.total_calls == pytest.approx(2.0)
    backlog.forget("a")
    backlog.forget("a")  # twice: no change
    assert backlog.total_calls == pytest.approx(0.0)


def test_the_drain_is_every_remaining_call_at_todays_latency_a_batch_at_a_time() -> None:
    backlog = EngineBacklog()
    assert backlog.drain_s(2.0, 4) == 0.0  # nothing to come
    backlog.expect("a", 6.0)
    backlog.expect("b", 2.0)
    assert backlog.drain_s(2.0, 4) == pytest.approx(8 * 2.0 / 4)
    assert backlog.drain_s(2.0, 0) == 0.0  # no batch running


def test_a_ticket_carries_the_drain_only_while_calls_wait_in_the_engines() -> None:
    """The controller keeps the backlog from its own estimates; the drain rides on a ticket
    queued while calls wait in the engines (priced at the calls' latency, queueing and
    service), and a program's end takes its calls out."""
    controller = ProgramController(EventLog(), _Cost(), mean_call_s=1.0)
    for pid in ("a", "b"):
        controller.open_program(pid, "t", 0.0)
        controller.add_node(pid, Node("n1", "", NodeKind.LLM), 0.0)
        controller.add_node(pid, Node("n2", "", NodeKind.LLM, parents=("n1",)), 0.0)
        controller.start_node(pid, "n1", 0.0)
        controller.finish_llm(pid, "n1", 1.0, _usage(1.0))
    quiet = controller.ticket("a", "n2", 2.0, prompt_tokens=10)
    assert quiet.drain_s == 0.0
    busy = controller.ticket("a", "n2", 2.0, prompt_tokens=10, queued_behind=2)
    expected = controller.backlog.drain_s(controller._mean_latency_s, 2)
    assert busy.drain_s == pytest.approx(expected)
    assert busy.drain_s > 0
    before = controller.backlog.total_calls
    controller.finish_program("a", 3.0)
    assert controller.backlog.total_calls < before
    controller.cancel_program("b", 3.0)
    assert controller.backlog.total_calls == pytest.approx(0.0)


def test_the_drain_is_priced_by_every_engines_batch_only_while_a_backlog_waits() -> None:
    def unread() -> Iterator[int]:  # a generator: nothing runs until it is read
        yield from ()
        raise AssertionError("the engines were read with no backlog")

    assert drain_batch(2, 2, iter((2, 3))) == 5  # a backlog here: every engine's batch
    assert drain_batch(9, 2, iter((2, 3))) == 5
    assert drain_batch(1, 2, unread()) == 0  # shorter than the batch: starts within a call
    assert drain_batch(0, 0, unread()) == 0  # no queue: no drain, the engines not read
