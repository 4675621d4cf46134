"""The real-engine replay without an engine: its summary (``outcome_summary``) on hand-made
outcomes, and ``LiveReplay``'s agents on the simulated engine."""

from __future__ import annotations

import asyncio
import json
from typing import cast

import pytest

from agentconsole.sample_traces.codec import loads_trace
from agentconsole.scheduler.metrics import outcome_summary
from agentconsole.server.runtime.sglang.replay import LiveReplay, ProgramOutcome
from agentconsole.server.runtime.sglang.textbook import TextBook
from agentconsole.server.runtime.sim.simulation import CostServiceModel
from tests.replay_fakes import COST, TOOL_LATENCY_S, HintedRuntime, Letters, plan_tool_answer


def _ended(
    pid: str, e2e_s: float, *, success: bool = True, cancelled: bool = False
) -> ProgramOutcome:
    return ProgramOutcome(pid, "t", "serial", e2e_s, success, 2, 100, 40, cancelled=cancelled)


def test_the_summary_counts_the_traces_cancels_apart_from_the_finished() -> None:
    """A program the trace's own cancel ended is neither finished nor a failure of the
    serving: it is counted apart, and its E2E is in no percentile."""
    summary = outcome_summary(
        [
            _ended("a", 1.0),
            _ended("b", 3.0),
            _ended("c", 50.0, success=False, cancelled=True),
            _ended("d", 9.0, success=False),  # failed: neither finished nor cancelled
        ]
    )
    assert (summary["programs"], summary["finished"], summary["cancelled"]) == (4, 2, 1)
    assert summary["e2e_mean_s"] == pytest.approx(2.0)
    assert summary["cache_hit_rate"] == pytest.approx(0.4)


def test_the_summary_s_percentiles_interpolate_and_are_0_with_none_finished() -> None:
    summary = outcome_summary([_ended("a", 1.0), _ended("b", 3.0)])
    assert (summary["e2e_p50_s"], summary["e2e_p95_s"]) == pytest.approx((2.0, 2.9))
    nothing = outcome_summary([_ended("c", 5.0, success=False)])
    assert (nothing["e2e_p50_s"], nothing["e2e_p95_s"], nothing["e2e_mean_s"]) == (0, 0, 0)


async def _replay(runtime: HintedRuntime) -> list[ProgramOutcome]:
    trace = loads_trace(json.dumps(plan_tool_answer("p", "replay")))
    book = cast(TextBook, Letters())  # LiveReplay reads nothing of a book but its text
    await runtime.start()
    try:
        return await LiveReplay(runtime, trace, book, CostServiceModel(COST)).run()
    finally:
        await runtime.stop()


def test_the_stock_arms_agents_send_the_engine_no_kv_hints() -> None:
    """LiveReplay plays stock SGLang's agents: nothing tells stock SGLang what to keep over a
    tool wait (serve's tool-wait policy is measured through ``replay_as_served``)."""
    runtime = HintedRuntime()

    outcomes = asyncio.run(_replay(runtime))

    assert [(o.program_id, o.success, o.calls) for o in outcomes] == [("p", True, 2)]
    assert outcomes[0].e2e_s >= TOOL_LATENCY_S  # the tool's latency at least: played in wall time
    assert runtime.hints == []
