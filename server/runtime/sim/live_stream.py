"""One simulated call in flight: its token texts, its stream and its result (for
:mod:`agentconsole.server.runtime.sim.live`), and the engine's event forwarder.

Timings in results are wall seconds: engine seconds times the runtime's ``time_scale``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.runtime import GenerationResult, TokenDelta
from agentconsole.server.runtime.sim.calls import SimCall

FORWARDED = frozenset(
    {
        EventKind.CALL_SCHEDULED,
        EventKind.CALL_PREEMPTED,
        EventKind.KV_OFFLOADED,
        EventKind.KV_RELOADED,
        EventKind.KV_DROPPED,
        EventKind.KV_EVICTED,
        EventKind.KV_RECOMPUTED,
        EventKind.ENGINE_STATS,
    }
)


class Forward:
    """The engine's sink: passes the engine-level events on, in wall-clock time."""

    def __init__(self, sink: EventSink | None) -> None:
        self.sink = sink

    def emit(self, event: Event) -> None:
        if self.sink is not None and event.kind in FORWARDED:
            self.sink.emit(replace(event, t=time.time()))


@dataclass(slots=True, eq=False)
class LiveCall:
    """One call in flight: its engine call, its token texts and its stream's queue."""

    call: SimCall
    pieces: list[str]
    capped: bool  # the answer was cut at max_tokens
    submitted: float
    queue: asyncio.Queue[TokenDelta | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Future[GenerationResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    delivered: int = 0
    consumed: int = 0
    first_at: float | None = None

    def deliver(self) -> None:
        """Stream the tokens the engine generated since the last delivery."""
        upto = min(self.call.generated, len(self.pieces))
        if upto > self.delivered:
            text = "".join(self.pieces[self.delivered : upto])
            self.queue.put_nowait(TokenDelta(text, upto - self.delivered))
            self.delivered = upto

    def finish(self, scale: float) -> None:
        """The engine finished the call: end the stream, set the result."""
        self.queue.put_nowait(None)
        reason = "length" if self.capped else "stop"
        self._settle(reason, len(self.pieces), self.call.generated, scale)

    def end_aborted(self, scale: float) -> None:
        """The call was aborted: drop what was produced but not read, end the stream."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)
        self._settle("abort", self.consumed, self.consumed, scale)

    def _settle(self, reason: str, chars_upto: int, output: int, scale: float) -> None:
        if self.done.done():
            return
        call, now = self.call, time.time()
        first = self.first_at if self.first_at is not None else now
        self.done.set_result(
            GenerationResult(
                finish_reason=reason,
                text="".join(self.pieces[:chars_upto]),
                prompt_tokens=call.prompt_tokens,
                cached_tokens=call.hit_tokens,
                output_tokens=output,
                queue_s=call.queue_s * scale,
                ttft_s=first - self.submitted if output else 0.0,
                e2e_s=now - self.submitted,
                service_s=call.service_s * scale,
                restore_s=call.restore_s * scale,
                retractions=call.retractions,
            )
        )


class SimStream:
    """The GenerationStream of one simulated call."""

    def __init__(self, live: LiveCall) -> None:
        self._live = live

    def __aiter__(self) -> SimStream:
        return self

    async def __anext__(self) -> TokenDelta:
        delta = await self._live.queue.get()
        if delta is None:
            self._live.queue.put_nowait(None)  # stay ended for any later reader
            raise StopAsyncIteration
        self._live.consumed += delta.tokens
        return delta

    async def result(self) -> GenerationResult:
        return await asyncio.shield(self._live.done)
