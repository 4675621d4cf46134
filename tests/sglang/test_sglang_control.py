"""Live control reaching calls already inside the engine: boost, re-prioritise, set-policy,
drain; and the snapshot and health probe built on the plugin's status."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.sglang.helpers import consume, queued, request, started, ticket

pytestmark = pytest.mark.sglang


async def _rerank(rt: Any) -> dict[str, float]:
    blocker = ticket("ctl-blk", remaining_cp_s=0.5, expected_output_tokens=150)
    b = asyncio.ensure_future(consume(rt, request(blocker, "hold on", 150)))
    await started(rt, blocker.call_id)
    calls = {
        name: ticket(f"ctl-{name}", remaining_cp_s=cp, expected_output_tokens=6)
        for name, cp in (("a", 10.0), ("b", 20.0), ("c", 30.0))
    }
    tasks = {
        name: asyncio.ensure_future(consume(rt, request(t, f"question {name}", 6)))
        for name, t in calls.items()
    }
    await queued(rt, {t.call_id for t in calls.values()})
    snap = rt.snapshot()
    assert [q.call_id for q in snap.queued] == [calls[n].call_id for n in "abc"]
    assert [r.call_id for r in snap.running] == [blocker.call_id]
    await rt.boost("ctl-c", 100.0)  # c: 30 - 100
    b_ticket = calls["b"]
    b_ticket.remaining_cp_s = 1.0
    assert await rt.reprioritise(b_ticket.call_id, b_ticket)  # b: 1
    # the running blocker keeps its place: re-ranked it is not (a boost's reranked_calls)
    assert not await rt.reprioritise(blocker.call_id, blocker)
    await b
    done = {name: (await task).finished_at for name, task in tasks.items()}
    return done


def test_boost_and_reprioritise_rerank_queued_calls(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    done = run(_rerank(rt))
    assert done["c"] < done["b"] < done["a"]


def test_set_policy_reaches_the_scheduler(rt: Any, run: Callable[[Awaitable[Any]], Any]) -> None:
    async def go() -> str:
        rt.set_policy("progress")
        t = ticket("ctl-pol")
        await consume(rt, request(t, "which policy", 2))
        await asyncio.sleep(0.3)
        return str(rt.read_status().policy)

    assert run(go()) == "progress"
    with pytest.raises(KeyError):
        rt.set_policy("no-such-policy")


async def _drain(rt: Any) -> dict[str, Any]:
    blocker = ticket("drain-blk", expected_output_tokens=120)
    b = asyncio.ensure_future(consume(rt, request(blocker, "finish me", 120)))
    await started(rt, blocker.call_id)
    await rt.pause()
    later = ticket("drain-new", expected_output_tokens=4)
    new = asyncio.ensure_future(consume(rt, request(later, "wait for resume", 4)))
    first = await b  # the running call is not stopped by the drain
    await asyncio.sleep(0.5)
    held = rt._calls[later.call_id].first_at is None
    snap = rt.snapshot()
    resumed_at = time.time()
    await rt.resume()
    out = await new
    return {"first": first, "held": held, "snap": snap, "out": out, "resumed_at": resumed_at}


def test_drain_lets_running_calls_finish_and_holds_new_ones(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    out = run(_drain(rt))
    assert out["first"].result.output_tokens == 120
    assert out["held"]
    assert out["snap"].paused
    assert any(q.call_id.startswith("drain-new/") for q in out["snap"].queued)
    assert out["out"].result.output_tokens == 4
    assert out["out"].token_times[0] >= out["resumed_at"]


def test_snapshot_reports_the_device_tier(rt: Any) -> None:
    tier = rt.snapshot().tiers["hbm"]
    assert tier.capacity_tokens == 4096
    assert 0 <= tier.used_tokens <= tier.capacity_tokens
    assert tier.used_bytes == tier.used_tokens * rt.read_status().kv_bytes_per_token


def test_health_probe_runs_a_real_request(rt: Any, run: Callable[[Awaitable[Any]], Any]) -> None:
    rt._last_output = 0.0  # nothing recent: healthy() must ask the engine
    rt._probe_at = 0.0
    before = time.time()
    assert run(rt.healthy())
    assert rt._last_output >= before  # the probe produced a token
