"""What the wall-clock simulated runtime (``server/runtime/sim/live.py``) reports for a call
aborted before its prefill ended: one aborted in the engine's queue computed nothing, waited
all the time it was there and had no service; one aborted between two chunks of its prefill
computed the chunks it had prefilled."""

from __future__ import annotations

import asyncio
import time
import uuid

from agentconsole.scheduler.runtime import GenerationRequest, GenerationResult
from agentconsole.scheduler.ticket import CallTicket
from agentconsole.server.runtime.registry import RuntimeOptions, create_runtime
from agentconsole.server.runtime.sim.calls import Phase
from agentconsole.server.runtime.sim.live import SimLiveRuntime

WAIT_S = 0.3


def _request(call_id: str, prompt_tokens: int) -> GenerationRequest:
    """A call whose prompt is about ``prompt_tokens`` tokens (4 characters a token) that no
    other prompt shares."""
    pid, node, attempt = call_id.split("/")
    ticket = CallTicket(call_id, pid, node, "t", time.time(), int(attempt))
    prompt = uuid.uuid4().hex * (prompt_tokens // 8)
    return GenerationRequest(ticket, prompt, max_tokens=50, cache_namespace="t")


def _runtime(scale: float) -> SimLiveRuntime:
    runtime = create_runtime("sim", RuntimeOptions(extra={"time_scale": scale}))
    assert isinstance(runtime, SimLiveRuntime)
    return runtime


def _queued_then(stop: bool) -> tuple[GenerationResult, float]:
    """A call aborted (or ended by the runtime's stop) after ``WAIT_S`` in a paused engine's
    queue; its result and how long it was in the runtime."""

    async def scenario() -> tuple[GenerationResult, float]:
        runtime = _runtime(1.0)
        await runtime.start()
        await runtime.pause()
        submitted = time.monotonic()
        stream = runtime.submit(_request("p/n/1", 400))
        await asyncio.sleep(WAIT_S)
        if stop:
            await runtime.stop()
        else:
            assert await runtime.abort("p/n/1")
        waited = time.monotonic() - submitted
        result = await stream.result()
        if not stop:
            await runtime.stop()
        return result, waited

    return asyncio.run(scenario())


def test_a_call_aborted_in_the_queue_computed_nothing_and_waited_all_along() -> None:
    result, waited = _queued_then(stop=False)
    assert result.finish_reason == "abort"
    assert result.prompt_tokens >= 400
    assert result.prefilled_tokens == 0
    assert result.computed_tokens == 0  # it was the whole prompt
    assert WAIT_S - 0.02 <= result.queue_s <= waited + 0.02  # it was 0.0
    assert result.service_s == 0.0


def test_a_call_still_queued_at_the_stop_waited_all_along() -> None:
    result, waited = _queued_then(stop=True)
    assert result.computed_tokens == 0
    assert WAIT_S - 0.02 <= result.queue_s <= waited + 0.02


def test_a_call_aborted_mid_prefill_computed_the_chunks_it_had_prefilled() -> None:
    """A 40k-token prompt prefills in 8,192-token chunks (SGLang's default chunked prefill):
    aborted once its first chunks are done, it computed those, not its whole prompt."""

    async def scenario() -> tuple[GenerationResult, int]:
        runtime = _runtime(0.5)
        await runtime.start()
        stream = runtime.submit(_request("p/n/1", 40_000))
        call = stream.call
        while not call.computed_tokens:
            await asyncio.sleep(0.005)
        assert call.phase is Phase.PREFILL  # between two chunks
        done = call.computed_tokens  # read and aborted with no await between: exact
        assert await runtime.abort("p/n/1")
        result = await stream.result()
        await runtime.stop()
        return result, done

    result, done = asyncio.run(scenario())
    assert 0 < done < result.prompt_tokens
    assert result.prefilled_tokens == done
    assert result.computed_tokens == done  # it was the whole prompt
    assert result.output_tokens == 0
    assert result.service_s > 0.0


def test_a_call_aborted_while_decoding_computed_its_whole_prompt() -> None:
    async def scenario() -> GenerationResult:
        runtime = _runtime(0.05)
        await runtime.start()
        stream = runtime.submit(_request("p/n/1", 400))
        async for _ in stream:
            assert await runtime.abort("p/n/1")
        result = await stream.result()
        await runtime.stop()
        return result

    result = asyncio.run(scenario())
    assert result.output_tokens >= 1
    assert result.prefilled_tokens is None
    assert result.computed_tokens == result.prompt_tokens - result.cached_tokens >= 400
