"""The wall-clock simulated runtime (``server/runtime/sim/live.py``) on its own."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentconsole.scheduler.runtime import CacheAction, GenerationRequest, TokenDelta
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime
from agentconsole.server.runtime.sim import live as sim_live
from agentconsole.server.runtime.sim.live import SimLiveRuntime

PROMPT = "shared context " * 100


def _request(call_id: str, tenant: str, prompt: str = PROMPT, **kw: object) -> GenerationRequest:
    pid, node, attempt = call_id.split("/")
    ticket = CallTicket(call_id, pid, node, tenant, time.time(), int(attempt))
    return GenerationRequest(ticket, prompt, cache_namespace=tenant, **kw)  # type: ignore[arg-type]


def _runtime(scale: float) -> SimLiveRuntime:
    runtime = create_runtime("sim", RuntimeOptions(extra={"time_scale": scale}))
    assert isinstance(runtime, SimLiveRuntime)
    return runtime


async def _drain(stream: object) -> list[TokenDelta]:
    return [d async for d in stream]  # type: ignore[attr-defined]


def test_zero_cost_calls_stream_all_their_tokens() -> None:
    async def scenario() -> None:
        runtime = _runtime(0.0)
        await runtime.start()
        assert await runtime.healthy()
        streams = [
            runtime.submit(_request(f"p{i}/n/1", "t", max_tokens=40, forced_output_tokens=40))
            for i in range(50)
        ]
        started = time.perf_counter()
        deltas = await asyncio.gather(*(_drain(s) for s in streams))
        assert time.perf_counter() - started < 2.0  # zero cost: no simulated time passes
        for stream, got in zip(streams, deltas, strict=True):
            result = await stream.result()
            assert sum(d.tokens for d in got) == result.output_tokens == 40
            assert "".join(d.text for d in got) == result.text
            assert result.finish_reason == "length"  # forced to max_tokens
        await runtime.stop()
        assert not await runtime.healthy()

    asyncio.run(scenario())


def test_abort_is_immediate_and_final() -> None:
    async def scenario() -> None:
        runtime = _runtime(1.0)
        await runtime.start()
        stream = runtime.submit(_request("p/n/1", "t", max_tokens=5000, forced_output_tokens=5000))
        got = 0
        async for delta in stream:
            got += delta.tokens
            if got >= 5:
                assert await runtime.abort("p/n/1")
        result = await stream.result()
        assert result.finish_reason == "abort"
        assert result.output_tokens == got  # nothing produced after the abort is counted
        assert not runtime.snapshot().running
        assert not runtime.snapshot().queued
        assert not await runtime.abort("p/n/1")  # idempotent: already gone
        await runtime.stop()

    asyncio.run(scenario())


def test_prefix_hits_stay_within_the_cache_namespace() -> None:
    async def scenario() -> tuple[int, int, int]:
        runtime = _runtime(0.0)
        await runtime.start()
        results = []
        for call_id, tenant in (("a/1/1", "ta"), ("a/2/1", "ta"), ("b/1/1", "tb")):
            stream = runtime.submit(_request(call_id, tenant, max_tokens=4))
            await _drain(stream)
            results.append((await stream.result()).cached_tokens)
        await runtime.cache_hint("a", CacheAction.RECOMPUTE, 0.0)
        await runtime.stop()
        return results[0], results[1], results[2]

    first, repeat, other = asyncio.run(scenario())
    assert first == 0
    assert repeat > 0
    assert other == 0


def test_time_scale_one_takes_simulated_time() -> None:
    async def scenario() -> float:
        runtime = _runtime(1.0)
        await runtime.start()
        started = time.perf_counter()
        stream = runtime.submit(_request("p/n/1", "t", max_tokens=200, forced_output_tokens=200))
        await _drain(stream)
        result = await stream.result()
        wall_s = time.perf_counter() - started  # before stop(): its work is no part of the call
        await runtime.stop()
        assert abs(result.e2e_s - wall_s) < 0.05
        return result.e2e_s

    assert asyncio.run(scenario()) > 0.2  # 200 decode steps of an 8B model on an H200


def test_max_total_tokens_and_host_kv_tokens_size_the_simulated_pool() -> None:
    options = RuntimeOptions(max_total_tokens=20_000, extra={"host_kv_tokens": 0})
    runtime = create_runtime("sim", options)
    assert isinstance(runtime, SimLiveRuntime)
    memory = runtime.memory()
    assert memory.hbm_capacity_tokens == 20_000
    assert memory.dram_capacity_tokens == 0


def test_it_remembers_a_bounded_number_of_programs_last_contexts(monkeypatch: Any) -> None:
    # the runtime is never told a program ended: without the bound a server that runs for
    # weeks kept every program's last path (and the evicted nodes on it) forever
    monkeypatch.setattr(sim_live, "MAX_REMEMBERED_PROGRAMS", 3)

    async def scenario() -> list[bool]:
        runtime = _runtime(0.0)
        await runtime.start()
        for i in range(5):
            prompt = f"program {i} has its own context " * 40
            await _drain(runtime.submit(_request(f"p{i}/n/1", "t", prompt, max_tokens=4)))
        remembered = [runtime.context_of(f"p{i}") is not None for i in range(5)]
        await runtime.stop()
        return remembered

    assert asyncio.run(scenario()) == [False, False, True, True, True]
