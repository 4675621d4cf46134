"""Engine telemetry from the real SGLang engine (CPU, tiny model, the session engine).

1. A program's repeated prompts: its ``call.scheduled`` events carry hit tokens that add up to
   the ``cached_tokens`` its calls returned; the plugin's placement sweep then shows its
   context resident, split into private and shared tokens; ``memory()`` and ``probe()`` give
   the pool's numbers and the cache a next call would hit; ``/metrics`` carries SGLang's own
   series next to ours.
2. Pool pressure (the session pool is 4096 tokens): unrelated programs overflow it, the plugin
   reports ``kv.evicted`` passes, the probe predicts the program's lost context, and its next
   call recomputes exactly that (``recompute_tokens``, ``kv.recomputed``, a restore time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.metrics import MetricsAggregator
from agentconsole.scheduler.runtime import Prompt, RuntimeSnapshot
from agentconsole.server.prometheus import PrometheusMetrics
from tests.sglang.conftest import ENGINE_MAX_TOTAL_TOKENS
from tests.sglang.helpers import consume, request, started, ticket, words

pytestmark = pytest.mark.sglang
Run = Callable[[Awaitable[Any]], Any]


def _mine(events: Any, since: int, kind: EventKind, program: str | None = None) -> list[Event]:
    return [
        e
        for e in list(events.events)[since:]
        if e.kind is kind and (program is None or e.program_id == program)
    ]


def _int(e: Event, key: str) -> int:
    value = e.data[key]
    assert isinstance(value, int)
    return value


async def _resident(rt: Any, program: str, at_least: int, after: float) -> int:
    """Wait for a placement sweep written after ``after`` that shows ``program`` with
    ``at_least`` resident tokens (``at_least=0``: any sweep); returns what it shows."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        placement = rt.read_placement()
        if placement is not None and placement.written_at > after:
            n = int(placement.programs.get(program, (0, 0))[0])
            if n >= at_least:
                return n
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no placement of {program} >= {at_least}")


def test_hits_placement_memory_probe_and_engine_metrics(rt: Any, run: Run, events: Any) -> None:
    since = len(events)
    base = words(400, rt, seed=61)

    async def scenario() -> list[Any]:
        outs = []
        for i in range(3):
            t = ticket("tel-hit", tenant="tel-a")
            outs.append((t, await consume(rt, request(t, f"{base} step {i}", 8))))
        return outs

    outs = run(scenario())
    cached = [o.result.cached_tokens for _, o in outs]
    scheduled = _mine(events, since, EventKind.CALL_SCHEDULED, "tel-hit")
    assert [e.node_id for e in scheduled] == [t.node_id for t, _ in outs]
    assert {(e.tenant, e.attempt) for e in scheduled} == {("tel-a", 1)}
    assert [e.data["hit_tokens"] for e in scheduled] == cached
    assert sum(cached) >= 2 * 390  # the second and third calls hit the shared prefix
    assert all(e.data["recompute_tokens"] == 0 for e in scheduled)  # nothing was evicted

    resident = run(_resident(rt, "tel-hit", 400, outs[-1][1].finished_at))
    assert rt.snapshot().placement["tel-hit"]["hbm"] >= 400
    ctx = rt.context_of("tel-hit")
    assert ctx is not None
    assert ctx.private_tokens + ctx.shared_tokens == resident
    assert ctx.shared_tokens >= 390  # the prefix its earlier calls continue from
    assert 0 < ctx.private_tokens < 40  # "step 2" and its output: its own suffix
    assert rt.context_of("nobody") is None

    mem = rt.memory()
    assert mem.hbm_capacity_tokens == ENGINE_MAX_TOTAL_TOKENS
    assert 0 <= mem.free_tokens <= mem.hbm_capacity_tokens
    assert mem.evictable_tokens >= resident  # idle: every cached token is unlocked
    assert (mem.queued_calls, mem.running_calls, mem.queued_tokens) == (0, 0, 0.0)
    assert mem.kv_bytes_per_token > 1

    prompt = f"{base} step 9"
    ids = tuple(rt.engine.tokenizer_manager.tokenizer.encode(prompt))
    probe = rt.probe("tel-hit", Prompt(prompt, len(ids)), "tel-a")  # tokenized by the runtime
    assert probe == rt.probe("tel-hit", Prompt(prompt, len(ids), ids), "tel-a")
    assert probe.prompt_tokens == len(ids)
    assert probe.cached_tokens >= 390
    assert probe.lost_tokens == 0
    assert rt.probe("tel-hit", Prompt(prompt, len(ids)), "another-tenant").cached_tokens == 0
    # a new program of the tenant: the prefix tel-hit's resident context holds (the door
    # subtracts it), none of it lost; another tenant's new program shares nothing
    fresh = rt.probe("nobody", Prompt(prompt, len(ids)), "tel-a")
    assert (fresh.cached_tokens, fresh.lost_tokens) == (probe.cached_tokens, 0)
    assert rt.probe("nobody", Prompt(prompt, len(ids)), "another-tenant").cached_tokens == 0
    # the ids go to SGLang as they are (``input_ids``): same tokens, same cache
    t = ticket("tel-hit", tenant="tel-a")
    out = run(consume(rt, request(t, prompt, 8, prompt_ids=ids)))
    assert out.result.prompt_tokens == len(ids)
    assert out.result.cached_tokens >= probe.cached_tokens
    (last,) = _mine(events, since, EventKind.CALL_SCHEDULED, "tel-hit")[-1:]
    assert (last.node_id, last.data["hit_tokens"]) == (t.node_id, out.result.cached_tokens)

    def snapshot() -> RuntimeSnapshot:
        return rt.snapshot()  # type: ignore[no-any-return]

    text = PrometheusMetrics(
        MetricsAggregator(), snapshot, dict, engine_metrics_dir=rt.metrics_dir
    ).render()
    found = PrometheusMetrics(MetricsAggregator(), rt.snapshot, dict).render()  # discovered
    for exposition in (text, found):
        lines = exposition.decode().splitlines()
        assert any(line.startswith("agentconsole_prefix_cache_hit_tokens_total") for line in lines)
        assert any(line.startswith("sglang:num_running_reqs") for line in lines)  # scheduler
        assert any(line.startswith("sglang:prompt_tokens_total") for line in lines)  # tokenizer


def test_pool_pressure_evicts_and_the_returning_program_recomputes(
    rt: Any, run: Run, events: Any
) -> None:
    since = len(events)
    context = words(1000, rt, seed=71)
    back = context + " and the tool said yes"

    async def scenario() -> tuple[Any, Any, Any, Any]:
        first = await consume(rt, request(ticket("tel-back", tenant="tel-b"), context, 8))
        await _resident(rt, "tel-back", 990, first.finished_at)
        warm = rt.probe("tel-back", Prompt(back, 0), "tel-b")
        last = first
        for seed in range(72, 78):  # 5400 tokens through a 4096-token pool
            t = ticket(f"tel-fill-{seed}", tenant="tel-c")
            last = await consume(rt, request(t, words(900, rt, seed=seed), 8))
        await _resident(rt, "", 0, last.finished_at)  # a sweep after the fillers
        cold = rt.probe("tel-back", Prompt(back, 0), "tel-b")
        again = await consume(rt, request(ticket("tel-back", tenant="tel-b"), back, 8))
        return warm, cold, again, last

    warm, cold, again, _ = run(scenario())
    assert warm.cached_tokens >= 990
    assert warm.lost_tokens == 0

    evicted = _mine(events, since, EventKind.KV_EVICTED)
    assert sum(_int(e, "tokens") for e in evicted) >= 1000
    assert all(e.program_id == "" for e in evicted)  # engine-level, as in the simulator
    status = rt.read_status()
    assert status is not None
    assert status.evicted_tokens >= sum(_int(e, "tokens") for e in evicted)
    assert status.busy_s > 0

    assert cold.lost_tokens >= 990  # the probe saw the context gone before the call
    assert cold.cached_tokens < 10
    assert again.result.cached_tokens < 10
    sched = _mine(events, since, EventKind.CALL_SCHEDULED, "tel-back")[-1]
    recompute = _int(sched, "recompute_tokens")
    assert recompute == cold.lost_tokens + cold.cached_tokens - again.result.cached_tokens
    (recomputed,) = _mine(events, since, EventKind.KV_RECOMPUTED, "tel-back")
    assert recomputed.data["tokens"] == recompute
    assert recomputed.node_id == sched.node_id
    assert again.result.restore_s > 0  # its share of the prefill span SGLang measured


def test_the_plugin_reports_each_calls_queueing_as_sglang_measures_it(rt: Any, run: Run) -> None:
    """SGLang reports ``queue_time`` only with its metrics on, which register once per
    process (a second engine, the benchmark's arms): the plugin reports the same measure in
    every call's ``meta_info`` (``wire.QUEUE_TIME_KEY``). One request slot: the second call
    waits for the first's decode."""
    rt.set_policy("fcfs")  # no preemption: each call enters the queue once

    async def two_calls() -> tuple[Any, Any]:
        first = rt.submit(request(ticket("qt-first", expected_output_tokens=80), "go " * 20, 80))
        await started(rt, first.rid)
        second = rt.submit(request(ticket("qt-second", expected_output_tokens=4), "then", 4))
        for stream in (first, second):
            async for _ in stream:
                pass
        return first, second

    first, second = run(two_calls())
    assert first.plugin_queue_s is not None
    assert second.plugin_queue_s is not None
    assert second.plugin_queue_s > first.plugin_queue_s
    assert second.plugin_queue_s > 0.05  # the first call's 80 decode steps, at least
    result = run(second.result())
    sglang_own = second.meta.get("queue_time")
    if sglang_own is not None:  # this engine has SGLang's metrics on: the same measure
        assert second.plugin_queue_s == pytest.approx(sglang_own, abs=1e-6)
    assert result.queue_s == pytest.approx(second.plugin_queue_s, abs=1e-6)
