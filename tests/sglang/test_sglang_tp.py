"""Tensor parallelism with the plugin on the CPU engine: ``tp=2`` (two scheduler ranks over
gloo, one core each) orders the same requests as ``tp=1`` (the session engine) and completes
them. Both run ``max_running_requests=1``, so completion order is the order the plugin
admitted the queued calls in. One ``tp=2`` engine for the module (start-up 30-150 s on two
busy cores)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from tests.sglang.conftest import ENGINE_MAX_TOTAL_TOKENS
from tests.sglang.helpers import consume, queued, request, started, started_runtime, ticket

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

#: critical-path estimates of the queued calls, in the order they are sent
_REMAINING_CP_S = [8.0, 0.5, 16.0, 2.0, 4.0]


@pytest.fixture(scope="module")
def tp2(run: Callable[[Awaitable[Any]], Any], sgl_kernel_log: Any) -> Iterator[Any]:
    """A started ``tp=2`` ``SGLangRuntime`` with the plugin (policy ``cp-cache``)."""
    yield from started_runtime(
        run, max_total_tokens=ENGINE_MAX_TOTAL_TOKENS, max_running_requests=1, tp=2
    )


async def _admission_order(rt: Any, tag: str) -> list[str]:
    """Queue five calls behind a running blocker; the programs in completion order. The
    blocker's key is better than every queued call's, so none preempts it: all five are
    queued before the first is admitted, whatever the engine's speed."""
    blocker = ticket(f"blk-{tag}", remaining_cp_s=0.01, expected_output_tokens=200)
    first = asyncio.ensure_future(consume(rt, request(blocker, "hold the engine " * 6, 200)))
    # a cold tp=2 engine's first forward (its two ranks' gloo set-up) took over 30 s on a
    # loaded 2-core host beside the session's engine: the order is the test, not the speed
    await started(rt, blocker.call_id, timeout=180.0)
    calls = []
    for n, cp in enumerate(_REMAINING_CP_S):
        t = ticket(f"q{n}-{tag}", remaining_cp_s=cp, expected_output_tokens=6, prompt_tokens=12)
        calls.append((t, asyncio.ensure_future(consume(rt, request(t, f"call {n} of {tag}", 6)))))
    await queued(rt, {t.call_id for t, _ in calls})
    await first
    done = [(await fut, t) for t, fut in calls]
    for outcome, _ in done:
        assert outcome.result.finish_reason == "length"
        assert outcome.result.output_tokens == 6
    return [t.program_id.split("-")[0] for _, t in sorted(done, key=lambda d: d[0].finished_at)]


def test_tp2_orders_the_same_requests_as_tp1(
    rt: Any, tp2: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    one = run(_admission_order(rt, "tp1"))
    two = run(_admission_order(tp2, "tp2"))
    expected = [f"q{n}" for n, _ in sorted(enumerate(_REMAINING_CP_S), key=lambda x: x[1])]
    assert one == expected
    assert two == one
    status = tp2.read_status()
    assert status is not None
    assert status.step > 0
    assert status.late_controls == 0
    assert status.errors == 0, status.last_error


def test_a_policy_change_and_a_drain_reach_both_ranks(
    rt: Any, tp2: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    """Control at tp=2: both ranks switch at the planned pass (no hang, no late read), the new
    policy orders as at tp=1, and a drain holds a new call until resumed."""
    rt.set_policy("fcfs")
    tp2.set_policy("fcfs")
    try:
        one = run(_admission_order(rt, "fcfs1"))
        two = run(_admission_order(tp2, "fcfs2"))
    finally:
        tp2.set_policy("cp-cache")
    assert one == [f"q{n}" for n in range(len(_REMAINING_CP_S))]  # sent in this order
    assert two == one

    async def drained() -> None:
        await tp2.pause()
        t = ticket("drained", remaining_cp_s=1.0, expected_output_tokens=4)
        call = asyncio.ensure_future(consume(tp2, request(t, "wait for the resume", 4)))
        await asyncio.sleep(1.0)
        assert not call.done()
        await tp2.resume()
        outcome = await asyncio.wait_for(call, 60)
        assert outcome.result.output_tokens == 4

    run(drained())
    status = tp2.read_status()
    assert status is not None
    assert status.policy == "cp-cache"
    assert status.late_controls == 0
    assert status.errors == 0, status.last_error
