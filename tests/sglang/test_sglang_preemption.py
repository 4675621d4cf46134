"""Preemption on the real engine: SGLang's priority preemption acting on the plugin's decision,
and the operator's preempt (retract + demote)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.sglang.helpers import Outcome, consume, queued, request, started, ticket

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


@dataclass(slots=True)
class _Preempted:
    victim: Outcome
    other: Outcome
    ok: bool
    #: a second preempt while the victim waits behind the other call
    again: bool
    #: seconds the victim decoded before the preempt (its first token to the preempt)
    decoded_before_s: float


async def _operator_preempt(rt: Any) -> _Preempted:
    victim = ticket("victim", remaining_cp_s=0.1, completed_calls=9, expected_output_tokens=400)
    v = asyncio.ensure_future(consume(rt, request(victim, "keep talking " * 4, 400)))
    await started(rt, victim.call_id)
    # a worse-ranked call: without the operator it would wait for the victim; long enough
    # that the victim is seen waiting behind it
    other = ticket("other", remaining_cp_s=30.0, expected_output_tokens=300)
    o = asyncio.ensure_future(consume(rt, request(other, "my turn later", 300)))
    await asyncio.sleep(0.2)
    decoded_before_s = time.time() - rt._calls[victim.call_id].first_at
    ok = await rt.preempt(victim.call_id)
    await queued(rt, {victim.call_id})
    again = await rt.preempt(victim.call_id)
    return _Preempted(await v, await o, ok, again, decoded_before_s)


def test_operator_preempt_requeues_the_call_behind_the_others(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    preempted = run(_operator_preempt(rt))
    victim, other = preempted.victim, preempted.other
    assert preempted.ok
    # requeued, it streamed before but is not running: a second preempt says so (it used to
    # retract the batch again and report the call preempted twice)
    assert not preempted.again
    assert other.finished_at < victim.finished_at
    assert victim.result.retractions >= 1
    assert victim.result.output_tokens == 400
    assert not run(rt.preempt("no/such/1"))
    # its queueing is its two waits (before its first token, then behind the other call, the
    # longest pause in its stream), not the time it decoded in between
    times = victim.token_times
    requeued_s = max(later - earlier for earlier, later in itertools.pairwise(times))
    assert requeued_s > 0.2  # the other call's 300 tokens
    assert requeued_s * 0.5 < victim.result.queue_s < victim.result.ttft_s + requeued_s + 0.05
    assert preempted.decoded_before_s > 0.2
