"""The seed's section-4 case, scaled down, on the real engine: a program at 9/10 with one short
call left must finish before a new program's long prefill under program-aware policies, and
not under FCFS. ``max_running_requests=1``, so admission order is completion order (up to
preemption of the blocker, which does not change who of the two finishes first)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.sglang.helpers import Outcome, consume, request, started, ticket, words

pytestmark = pytest.mark.sglang


async def _race(rt: Any, policy: str) -> tuple[Outcome, Outcome]:
    blocker = ticket(
        f"blk-{policy}", completed_calls=0, remaining_cp_s=5.0, expected_output_tokens=200
    )
    first = asyncio.ensure_future(consume(rt, request(blocker, "wait for me " * 8, 200)))
    await started(rt, blocker.call_id)
    # a new program: long prompt, ten calls to go
    new = ticket(
        f"new-{policy}",
        completed_calls=0,
        remaining_cp_s=10.0,
        expected_output_tokens=40,
        prompt_tokens=1200,
        service_estimate_s=0.5,
    )
    long_prompt = words(1200, rt, seed=sum(map(ord, policy)))
    a = asyncio.ensure_future(consume(rt, request(new, long_prompt, 40)))
    await asyncio.sleep(0.03)
    # a program at 9/10: one short call left
    nearly = ticket(
        f"nine-{policy}",
        completed_calls=9,
        remaining_cp_s=0.1,
        program_service_s=3.0,
        expected_output_tokens=8,
        prompt_tokens=30,
    )
    b = asyncio.ensure_future(consume(rt, request(nearly, "finish the report now", 8)))
    await first
    return await a, await b


@pytest.mark.parametrize("policy", ["progress", "critical-path", "cp-cache"])
def test_program_aware_policy_finishes_the_nearly_done_program_first(
    rt: Any, run: Callable[[Awaitable[Any]], Any], policy: str
) -> None:
    rt.set_policy(policy)
    new, nearly = run(_race(rt, policy))
    assert nearly.result.finish_reason == "length"
    assert new.result.finish_reason == "length"
    assert new.result.prompt_tokens >= 1200
    assert nearly.finished_at < new.finished_at
    # the two waited through the blocker's decode steps, ranked on every pass: their keys
    # were computed once (and once more at the horizon) and reused after (``keymemo``)
    status = rt.read_status()
    assert status is not None
    assert status.keys_reused > status.keys_computed > 0


def test_fcfs_serves_the_long_prefill_first(rt: Any, run: Callable[[Awaitable[Any]], Any]) -> None:
    rt.set_policy("fcfs")
    new, nearly = run(_race(rt, "fcfs"))
    assert new.finished_at < nearly.finished_at
    assert nearly.result.queue_s > new.result.queue_s
