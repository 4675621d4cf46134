"""A trace's declared ``max_tokens`` reaches the driver as the call's cap on its output, as
serve's intake passes the agent's: the simulator never reads the length from what the call
will produce (``output_tokens``), only from what the agent said."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentconsole.sample_traces.format import LLMNode, TraceProgram
from agentconsole.scheduler.driver import ProgramDriver
from agentconsole.scheduler.estimators import OutputLengthEstimator
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.sim.costmodel import preset
from agentconsole.server.runtime.sim.simulation import SimConfig, Simulation


class _Recording:
    """The simulation's driver, noting each queued call's ticket."""

    def __init__(self, driver: ProgramDriver) -> None:
        self._driver = driver
        self.tickets: dict[str, CallTicket] = {}

    def queue_call(self, *args: Any, **kwargs: Any) -> CallTicket:
        ticket = self._driver.queue_call(*args, **kwargs)
        self.tickets[ticket.node_id] = ticket
        return ticket

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


def _two_steps(first: LLMNode, second: LLMNode) -> Simulation:
    """A simulation of one serial program of ``first`` then ``second`` (its parent set here)."""
    program = TraceProgram(
        id="p",
        tenant="t",
        workload="verify",
        shape="serial",
        arrival_s=0.0,
        nodes=(first, replace(second, parents=(first.id,))),
    )
    return Simulation([program], preset("H200-141GB", "llama-3.1-8b", 1), SimConfig())


def test_a_declared_max_tokens_caps_the_tickets_expectation_and_none_reads_the_output() -> None:
    sim = _two_steps(
        LLMNode(id="write", prompt_tokens=400, output_tokens=600),
        LLMNode(id="verify", prompt_tokens=50, output_tokens=3, max_tokens=8),
    )
    recording = _Recording(sim.driver)
    sim.driver = recording  # type: ignore[assignment]
    sim.run()
    write, verify = recording.tickets["write"], recording.tickets["verify"]
    assert verify.expected_output_tokens == 8  # the cap, not the 3 it produces
    # undeclared: predicted from the tenant's calls so far (none: the prior), never its own 600
    assert write.expected_output_tokens == OutputLengthEstimator().predict("t") != 600


def test_the_output_estimators_error_is_of_the_estimate_the_ticket_used() -> None:
    """Two calls capped at 50 tokens that made 50 logged an error of ~100 tokens each: the log
    compared the uncapped mean (the prior) that no policy ranked by."""
    capped = LLMNode(id="a", prompt_tokens=100, output_tokens=50, max_tokens=50)
    sim = _two_steps(capped, replace(capped, id="b"))
    sim.run()
    errors = sim.controller.prediction_log.summary()["output_tokens"]
    assert errors["count"] == 2
    assert errors["mean_abs_error"] == 0.0
    assert errors["bias"] == 0.0
