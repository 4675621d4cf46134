"""One simulated call in flight: its token texts, its stream and its result (for
:mod:`agentconsole.server.runtime.sim.live`), and the engine's event forwarder.

Timings in results are wall seconds: engine seconds times the runtime's ``time_scale``.
"""

from __future__ import annotations

import time

from agentconsole.scheduler.events import Event, EventKind, EventSink
from agentconsole.scheduler.runtime import GenerationResult, TokenDelta
from agentconsole.scheduler.tokenstream import TokenStream
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
    """The engine's sink: passes the engine-level events on, in wall-clock time (the engine
    builds no call lifecycle events here: the caller emits those)."""

    def __init__(self, sink: EventSink | None) -> None:
        self.sink = sink

    def emit(self, event: Event) -> None:
        if self.sink is not None and event.kind in FORWARDED:
            e = event  # restamped by hand: dataclasses.replace costs 4x as much
            t = time.time()
            self.sink.emit(Event(t, e.kind, e.program_id, e.node_id, e.attempt, e.tenant, e.data))


class SimStream(TokenStream):
    """One simulated call in flight: its engine call, its token texts, and (as a
    :class:`TokenStream`) what the caller reads of them."""

    def __init__(self, call: SimCall, pieces: list[str], *, capped: bool, submitted: float) -> None:
        super().__init__()
        self.call = call
        self.pieces = pieces
        self.capped = capped  # the answer was cut at max_tokens
        self.submitted = submitted
        self.delivered = 0  # pieces pushed to the stream
        self.first_at: float | None = None

    def deliver(self) -> None:
        """Stream the tokens the engine generated since the last delivery."""
        upto = min(self.call.generated, len(self.pieces))
        if upto > self.delivered:
            start, self.delivered = self.delivered, upto
            text = self.pieces[start] if upto == start + 1 else "".join(self.pieces[start:upto])
            self.push(TokenDelta(text, upto - start))

    def finish(self, scale: float) -> None:
        """The engine finished the call: end the stream with its result."""
        reason = "length" if self.capped else "stop"
        self.end(self._result_of(reason, "".join(self.pieces), self.call.generated, scale))

    def end_aborted(self, scale: float, waiting_s: float = 0.0) -> None:
        """The call was aborted: drop what was produced but not read, end the stream with what
        was read. ``waiting_s``: the engine seconds it had been waiting in the queue when it
        was aborted there (the engine adds a spell to ``queue_s`` only at its admission)."""
        self.drop_unread()
        call = self.call
        prefilled: int | None = None  # it ran its prefill: charged its uncached prompt
        if call.first_token_at is None:
            # its prompt's prefill never ended: it computed the chunks it had prefilled (none
            # if it was never scheduled), at most what a finished call is charged; a chunk in
            # the step it was aborted in counts no more (``SimEngine._complete_prefill``)
            uncached = max(call.prompt_tokens - call.hit_tokens, 0)
            prefilled = min(call.computed_tokens, uncached)
        text, read = self.read_text(), self.read_tokens
        self.end(self._result_of("abort", text, read, scale, waiting_s, prefilled))

    def _result_of(
        self,
        reason: str,
        text: str,
        output: int,
        scale: float,
        waiting_s: float = 0.0,
        prefilled: int | None = None,
    ) -> GenerationResult:
        call, now = self.call, time.time()
        first = self.first_at if self.first_at is not None else now
        return GenerationResult(
            finish_reason=reason,
            text=text,
            prompt_tokens=call.prompt_tokens,
            cached_tokens=call.hit_tokens,
            output_tokens=output,
            queue_s=(call.queue_s + waiting_s) * scale,
            ttft_s=first - self.submitted if output else 0.0,
            e2e_s=now - self.submitted,
            service_s=call.service_s * scale,
            restore_s=call.restore_s * scale,
            retractions=call.retractions,
            prefilled_tokens=prefilled,
        )
