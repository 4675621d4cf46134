"""Preemption on the real engine: SGLang's priority preemption acting on the plugin's decision,
and the operator's preempt (retract + demote)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.sglang.helpers import Outcome, consume, request, started, ticket

pytestmark = pytest.mark.sglang


async def _urgent_during_long(rt: Any, tag: str) -> tuple[Outcome, Outcome]:
    long = ticket(f"long-{tag}", remaining_cp_s=60.0, expected_output_tokens=1500)
    slow = asyncio.ensure_future(consume(rt, request(long, "a long essay " * 4, 1500)))
    await started(rt, long.call_id)
    await asyncio.sleep(0.4)  # past the minimum residency (0.25 s)
    urgent = ticket(
        f"urgent-{tag}", completed_calls=9, remaining_cp_s=0.05, expected_output_tokens=4
    )
    quick = await consume(rt, request(urgent, "one more word", 4))
    return quick, await slow


def test_better_ranked_call_preempts_a_long_running_one(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    before = rt.read_status().preemptions
    quick, slow = run(_urgent_during_long(rt, "cp"))
    assert quick.finished_at < slow.finished_at
    assert slow.result.retractions >= 1
    assert slow.result.output_tokens == 1500  # resumed and completed after the preemption
    assert rt.read_status().preemptions > before


def test_fcfs_does_not_preempt(rt: Any, run: Callable[[Awaitable[Any]], Any]) -> None:
    rt.set_policy("fcfs")
    quick, slow = run(_urgent_during_long(rt, "fcfs"))
    assert slow.finished_at <= quick.finished_at
    assert slow.result.retractions == 0


async def _operator_preempt(rt: Any) -> tuple[Outcome, Outcome, bool]:
    victim = ticket("victim", remaining_cp_s=0.1, completed_calls=9, expected_output_tokens=400)
    v = asyncio.ensure_future(consume(rt, request(victim, "keep talking " * 4, 400)))
    await started(rt, victim.call_id)
    # a worse-ranked call: without the operator it would wait for the victim
    other = ticket("other", remaining_cp_s=30.0, expected_output_tokens=20)
    o = asyncio.ensure_future(consume(rt, request(other, "my turn later", 20)))
    await asyncio.sleep(0.2)
    ok = await rt.preempt(victim.call_id)
    return await v, await o, ok


def test_operator_preempt_requeues_the_call_behind_the_others(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    victim, other, ok = run(_operator_preempt(rt))
    assert ok
    assert other.finished_at < victim.finished_at
    assert victim.result.retractions >= 1
    assert victim.result.output_tokens == 400
    assert not run(rt.preempt("no/such/1"))
