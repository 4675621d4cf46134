"""One call in flight through the SGLang engine: its token stream and its final accounting.

A :class:`LiveCall` is fed by the adapter's pump task (SGLang's streamed chunks carry the
cumulative text and ``meta_info.completion_tokens``) and read through :class:`SGLangStream`.
Once :meth:`LiveCall.begin_abort` is called, nothing more is delivered: tokens the engine
produces after that moment are dropped, and so are produced-but-unread ones, so a caller that
aborts never sees a token afterwards.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from agentconsole.scheduler.runtime import GenerationRequest, GenerationResult, TokenDelta


def _new_future() -> asyncio.Future[GenerationResult]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True, eq=False)
class LiveCall:
    request: GenerationRequest
    submitted: float = field(default_factory=time.time)
    queue: asyncio.Queue[TokenDelta | None] = field(default_factory=asyncio.Queue)
    done: asyncio.Future[GenerationResult] = field(default_factory=_new_future)
    task: asyncio.Task[None] | None = None
    first_at: float | None = None
    text: str = ""  # engine text seen so far (cumulative)
    tokens: int = 0  # engine tokens seen so far
    delivered_text: str = ""
    delivered_tokens: int = 0
    aborting: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    # telemetry (``telemetry.Telemetry``): SGLang's prompt and output ids as streamed, whether
    # ``call.scheduled`` was emitted, and the estimated time spent recomputing lost context
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    scheduled: bool = False
    restore_s: float = 0.0

    @property
    def rid(self) -> str:
        return self.request.ticket.call_id

    def feed(self, chunk: dict[str, Any]) -> None:
        """Take one streamed chunk: deliver its new text unless an abort began."""
        meta = chunk.get("meta_info") or {}
        self.meta = meta
        text = str(chunk.get("text") or "")
        tokens = int(meta.get("completion_tokens") or 0)
        if tokens > self.tokens and self.first_at is None:
            self.first_at = time.time()
        if self.aborting:
            return
        if tokens > self.tokens:
            delta = text[len(self.text) :] if text.startswith(self.text) else text
            self.queue.put_nowait(TokenDelta(delta, tokens - self.tokens))
            self.delivered_text += delta
            self.delivered_tokens = tokens
        self.text, self.tokens = text, tokens

    def begin_abort(self) -> None:
        """Stop delivery now and drop what was produced but not read."""
        self.aborting = True
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                self.delivered_text = self.delivered_text[: -len(item.text) or None]
                self.delivered_tokens -= item.tokens

    def finish(self, error: BaseException | None = None) -> None:
        """End the stream with the engine's last ``meta_info`` (or ``error``)."""
        if self.done.done():
            return
        self.queue.put_nowait(None)
        if error is not None:
            self.done.set_exception(error)
            return
        self.done.set_result(self.result())

    def result(self) -> GenerationResult:
        meta, now = self.meta, time.time()
        reason = meta.get("finish_reason")
        kind = str(reason.get("type")) if isinstance(reason, dict) else "abort"
        if self.aborting:
            kind = "abort"
        queue_s = float(meta.get("queue_time") or 0.0)
        e2e = now - self.submitted
        output = self.delivered_tokens if kind == "abort" else self.tokens
        return GenerationResult(
            finish_reason=kind if kind in ("stop", "length", "abort") else "stop",
            text=self.delivered_text if kind == "abort" else self.text,
            prompt_tokens=int(meta.get("prompt_tokens") or 0),
            cached_tokens=int(meta.get("cached_tokens") or 0),
            output_tokens=output,
            queue_s=queue_s,
            ttft_s=(self.first_at - self.submitted) if self.first_at else 0.0,
            e2e_s=e2e,
            # residency in the engine: on a batching engine this is wall time in the running
            # batch, not a share of it (SGLang reports no per-request compute share)
            service_s=max(e2e - queue_s, 0.0),
            restore_s=self.restore_s,
            retractions=int(meta.get("num_retractions") or 0),
        )


class SGLangStream:
    """The ``GenerationStream`` of one SGLang call."""

    def __init__(self, call: LiveCall) -> None:
        self._call = call

    def __aiter__(self) -> SGLangStream:
        return self

    async def __anext__(self) -> TokenDelta:
        item = await self._call.queue.get()
        if item is None:
            self._call.queue.put_nowait(None)  # stay ended for any later reader
            raise StopAsyncIteration
        return item

    async def result(self) -> GenerationResult:
        """Wait for the call to end; raises what the engine raised (e.g. prompt too long)."""
        return await asyncio.shield(self._call.done)
