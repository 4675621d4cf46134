"""A call re-ranked while queued (an operator's boost hands the runtime the controller's newer
ticket) leaves the simulated engine's queued demand as it found it: the demand a call adds is
the demand it removes. A ticket whose estimates changed once drove the sum below zero, and the
model selector's predicted wait with it (a 500 on the next call of a several-model server)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from agentconsole.scheduler.runtime import GenerationRequest
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions
from agentconsole.server.runtime.sim.live import create_runtime


async def _reranked_call_leaves_no_demand() -> tuple[float, float]:
    runtime = create_runtime(RuntimeOptions(extra={"time_scale": 0.0}))
    await runtime.start()
    try:
        await runtime.pause()  # the call stays queued
        first = CallTicket(
            "p/n/1", "p", "n", "t", time.time(), prompt_tokens=120, expected_output_tokens=7.3
        )
        stream = runtime.submit(GenerationRequest(first, "hello " * 20, 8, forced_output_tokens=8))
        await asyncio.sleep(0.05)
        queued = runtime.engine.queued_demand
        newer = replace(first, cached_tokens=40, expected_output_tokens=300.1, boost=5.0)
        assert await runtime.reprioritise("p/n/1", newer)
        await runtime.resume()
        async for _ in stream:
            pass
        await stream.result()
        return queued, runtime.engine.queued_demand
    finally:
        await runtime.stop()


def test_a_reranked_call_removes_the_demand_it_added() -> None:
    queued, after = asyncio.run(_reranked_call_leaves_no_demand())
    assert queued > 0
    assert after == 0.0
