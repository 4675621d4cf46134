"""The overview's section 4 on the real engine: a nearly done program's last call arrives
while a fresh long prompt is mid-prefill. With the plugin's step composition its call joins
the next chunk (the chunk leaves it room) and decodes while the long prefill waits a bounded
streak of passes, so the program finishes before the fresh prompt's first token; with the
deferral off it decodes only once the whole prompt is prefilled. A prompt that fits one pass
is not deferred beside a single decoder: waiting would gather nothing and only delay it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from agentconsole.server.runtime.sglang.status import SchedulerStatus
from tests.sglang.helpers import (
    Outcome,
    consume,
    request,
    started,
    started_runtime,
    ticket,
    words,
)

pytestmark = pytest.mark.sglang

#: small chunks, so the fresh prompt takes dozens of passes (a 100K prompt on a GPU)
CHUNK_TOKENS = 32
FRESH_PROMPT_TOKENS = 1800  # the tiny model's window is 2048
LAST_CALL_OUTPUT = 40


@pytest.fixture(scope="module")
def chunked(run: Callable[[Awaitable[Any]], Any], sgl_kernel_log: Any) -> Iterator[Any]:
    """A started engine (plugin on, ``cp-cache``) with room for both calls at once."""
    yield from started_runtime(
        run,
        max_total_tokens=8192,
        max_running_requests=4,
        extra={"engine_args": {"chunked_prefill_size": CHUNK_TOKENS}},
    )


def _set_deferral(rt: Any, max_decode_passes: int | None) -> None:
    rt.control.state.deferral = (
        {} if max_decode_passes is None else {"max_decode_passes": max_decode_passes}
    )
    rt.control.write()


async def _section4(rt: Any, tag: str) -> tuple[Outcome, Outcome, float]:
    """(the nearly done call, the fresh prompt, when the nearly done call was sent)."""
    fresh = ticket(f"fresh-{tag}", remaining_cp_s=60.0, expected_output_tokens=4)
    prompt = words(FRESH_PROMPT_TOKENS, rt, seed=hash(tag) % 1000)
    big = asyncio.ensure_future(consume(rt, request(fresh, prompt, 4)))
    await asyncio.sleep(0.05)  # its prefill is under way
    last = ticket(
        f"nearly-{tag}",
        completed_calls=9,
        remaining_cp_s=0.05,
        expected_output_tokens=LAST_CALL_OUTPUT,
    )
    sent = asyncio.get_running_loop().time()
    nearly = await consume(rt, request(last, "verify the patch", LAST_CALL_OUTPUT))
    return nearly, await big, sent


def test_nearly_done_program_finishes_before_a_fresh_prompt_mid_prefill(
    chunked: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    _set_deferral(chunked, None)
    before = chunked.read_status().prefill_deferrals
    nearly, fresh, _ = run(_section4(chunked, "on"))
    assert nearly.result.output_tokens == LAST_CALL_OUTPUT
    assert fresh.result.output_tokens == 4
    assert nearly.finished_at < fresh.token_times[0]
    status = chunked.read_status()
    assert status.prefill_deferrals > before
    # the fresh prompt's chunk shrank for the last call, within the KV room SGLang showed
    assert status.chunk_caps > 0
    assert status.kv_room_unknown == 0
    assert status.errors == 0


def test_without_deferral_it_waits_for_the_whole_prefill(
    chunked: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    _set_deferral(chunked, 0)
    try:
        nearly, fresh, _ = run(_section4(chunked, "off"))
    finally:
        _set_deferral(chunked, None)
    assert fresh.token_times[0] < nearly.finished_at
    assert chunked.read_status().errors == 0


async def _status_after(rt: Any, moment: float) -> SchedulerStatus:
    """The scheduler's status as written after ``moment`` (the plugin writes it ten times a
    second and after control changes), so counters include every pass before then."""
    for _ in range(100):
        status: SchedulerStatus | None = rt.read_status()
        if status is not None and status.written_at > moment:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError("no scheduler status written after the scenario")


async def _one_pass_beside_a_decoder(rt: Any) -> tuple[Outcome, Outcome, int, int]:
    """(the decoder, the short newcomer, deferrals before, deferrals after)."""
    before = (await _status_after(rt, time.time())).prefill_deferrals
    better = ticket(
        "nearly-one", completed_calls=9, remaining_cp_s=0.05, expected_output_tokens=120
    )
    decoding = asyncio.ensure_future(consume(rt, request(better, "verify the patch", 120)))
    await started(rt, better.call_id)
    assert not decoding.done()  # it decodes when the newcomer arrives
    worse = ticket("fresh-short", remaining_cp_s=60.0, expected_output_tokens=4)
    short = await consume(rt, request(worse, "list the files", 4))  # well under one chunk
    decoder = await decoding
    after = (await _status_after(rt, time.time())).prefill_deferrals
    return decoder, short, before, after


def test_a_one_pass_prefill_beside_one_decoder_runs_at_once(
    chunked: Any, run: Callable[[Awaitable[Any]], Any]
) -> None:
    _set_deferral(chunked, None)
    decoder, short, before, after = run(_one_pass_beside_a_decoder(chunked))
    assert decoder.result.output_tokens == 120
    assert short.result.output_tokens == 4
    assert after == before  # the newcomer's one pass was never deferred
    assert short.finished_at < decoder.finished_at
    assert chunked.read_status().errors == 0
