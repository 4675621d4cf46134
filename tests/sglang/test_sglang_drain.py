"""The drain on the real engine (``scheduler/backlog.py``): serve reads SGLang's queue and
batch through the plugin's status, and the plugin serves first a call whose program's path
outruns the drain its ticket carries (the drain's own price is ``tests/scheduler``'s)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentconsole.server.live.enginequeue import EngineQueues
from tests.sglang.helpers import consume, queued, request, started, ticket

pytestmark = pytest.mark.sglang


async def _late_goes_first(rt: Any) -> tuple[int, int, int, dict[str, float]]:
    # boosted: on a slow host the blocker's restore cost (its tokens at the measured prefill
    # rate, in cp-cache's key) grew past the short call's key and the short call preempted it
    blocker = ticket("drain-blk", remaining_cp_s=0.5, expected_output_tokens=150, boost=100.0)
    held = asyncio.ensure_future(consume(rt, request(blocker, "hold on", 150)))
    await started(rt, blocker.call_id)
    idle_behind = EngineQueues({"m": rt}).behind("m")  # one running, none waiting yet
    calls = {
        # the shortest path first, as SRPT would have it, were it not for the drain
        "short": ticket("drain-short", remaining_cp_s=1.0, expected_output_tokens=6),
        # a long path the drain covers (it would have to wait 55 s here to fall late)
        "covered": ticket("drain-cov", remaining_cp_s=5.0, drain_s=60.0, expected_output_tokens=6),
        # its path (9 s) outruns the 8 s the engines need for the rest: it sets the end
        "late": ticket("drain-late", remaining_cp_s=9.0, drain_s=8.0, expected_output_tokens=6),
    }
    tasks = {
        name: asyncio.ensure_future(consume(rt, request(calls[name], f"question {name}", 6)))
        for name in ("short", "covered")
    }
    # two calls wait behind the blocker (neither outranks it) until its 150 tokens end: the
    # queue read now is stable. The late call comes after them; were it in the queue too, it
    # could preempt the blocker and end its 6 tokens before the read (a CI run saw that)
    await queued(rt, {calls["short"].call_id, calls["covered"].call_id})
    memory = rt.memory()
    behind = EngineQueues({"m": rt}).behind("m")
    tasks["late"] = asyncio.ensure_future(consume(rt, request(calls["late"], "question late", 6)))
    await held
    done = {name: (await task).finished_at for name, task in tasks.items()}
    return idle_behind, memory.queued_calls, behind, done


def test_serve_reads_the_queue_and_a_late_path_goes_first(
    rt: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    idle_behind, queued_calls, behind, done = run(_late_goes_first(rt))
    assert idle_behind == 0  # nothing waits: no drain is told
    assert queued_calls == 2
    assert behind == 1  # the session engine runs one call at a time
    order = sorted(done, key=done.__getitem__)
    assert order == ["late", "short", "covered"], done
