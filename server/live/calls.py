"""One LLM call in flight, from ``runtime.submit`` to its end, and its abort.

A :class:`LiveCall` listens to the runtime's stream (``GenerationStream.listen``): the runtime
hands it each delta and the end in the runtime's own task, and the call forwards the delta to
the client and reports progress to the service's :class:`CallHooks` (first token, quota
checks, the end). So a call has no task of its own: on SGLang the adapter's task per call is
the only one, on the simulator the engine's single task feeds every call. The call lives
independently of the HTTP connection: a client that goes away calls :meth:`LiveCall.abort`.

Abort rules (research report, section 4.3): :meth:`abort` first stops forwarding (so no token
reaches the client after the abort was asked for, including deltas forwarded but not yet sent),
then awaits ``runtime.abort(call_id)`` (by the exact call id) exactly once per call, shielded
so that a cancelled caller cannot lose it; later callers share the same confirmation. Tokens
the runtime still produces afterwards are *ghost tokens*: the call counts them, and the larger
of that count and what the runtime's final accounting implies is reported to the hooks, which
charge them. :meth:`abort` returns once the outcome is known (the runtime's end has been
accounted), or after ``wait_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentconsole.scheduler.runtime import (
    GenerationRequest,
    GenerationResult,
    Runtime,
    TokenDelta,
    ToolCallTuple,
)
from agentconsole.scheduler.tokenstream import wake
from agentconsole.server.live.errors import ServiceError
from agentconsole.server.live.tenants import CallHold

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How a call ended: ``finish_reason`` (stop, length, tool_calls is decided later, abort,
    error), the text the client received, the runtime's accounting when it gave one, and the
    service's refusal when the call was stopped by a quota."""

    finish_reason: str
    text: str
    result: GenerationResult | None
    error: ServiceError | None = None


class CallHooks(Protocol):
    """What the service does as a call progresses (all synchronous, on the event loop)."""

    def first_token(self, call: LiveCall) -> None: ...

    def progress(self, call: LiveCall) -> None:
        """After each forwarded delta; may call :meth:`LiveCall.stop` (quota)."""
        ...

    def ended(self, call: LiveCall, result: GenerationResult | None) -> None:
        """Once, when the runtime's stream is over; ``result`` is None if it failed."""
        ...


class LiveCall:
    """A call between ``runtime.submit`` and its end; see the module docstring."""

    def __init__(
        self,
        request: GenerationRequest,
        runtime: Runtime,
        hooks: CallHooks,
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        max_tool_calls: int | None = None,
        context_tokens: int | None = None,
        prompt_field: str = "messages",
    ) -> None:
        ticket = request.ticket
        self.request = request
        self.call_id = ticket.call_id
        self.program_id = ticket.program_id
        self.node_id = ticket.node_id
        self.tenant = ticket.tenant
        #: the tools the prompt declared (the answer may call them)
        self.tools = tools
        #: the answer as the model's format reads it, (content, tool calls), once finished
        self.answer: tuple[str, list[ToolCallTuple]] | None = None
        #: the most tool calls the answer may make (``parallel_tool_calls: false``: 1), the
        #: rest dropped from the answer and never made tool nodes; None: every call
        self.max_tool_calls = max_tool_calls
        #: the context of the model that runs the call (None: unknown) and the request's
        #: field that holds its prompt: what the engine's refusal of the prompt as too long
        #: says and names (``callflow.engine_ended``)
        self.context_tokens = context_tokens
        self.prompt_field = prompt_field
        self.submitted_at = time.time()
        self.first_token_at: float | None = None
        self.received = 0  # tokens forwarded to the client
        self.ghost = 0  # tokens produced after the abort was asked for
        self.closed = False  # abort asked: nothing more is forwarded
        self.abort_reason = ""
        self.error: ServiceError | None = None
        #: prompt tokens prefilled again because the prompt inserted mid-prompt (None: no
        #: insertion); set at the end by the accounting (``insertions.py``)
        self.lost_reuse_tokens: int | None = None
        #: the most of its prompt another served model with the same tokens held when it was
        #: sent (several models served; ``modeldesk.cached_elsewhere``)
        self.cached_elsewhere = 0
        #: what the call holds of its tenant's budgets while it runs (``TenantBudgets``)
        self.hold: CallHold | None = None
        #: its prompt's uncached tokens: charged to the program at its end, counted against
        #: the program's token quota from its start (a large prompt went past it unseen)
        self.pending_prompt = 0
        self._runtime = runtime
        self._hooks = hooks
        self._forwarded: list[TokenDelta] = []  # what the client is given, in order
        self._taken: int | None = None  # deltas a streaming reader took (None: no reader)
        self._waiter: asyncio.Future[None] | None = None  # a streaming reader waiting
        self._abort: asyncio.Future[bool] | None = None
        self._done: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        runtime.submit(request).listen(self)

    @property
    def text(self) -> str:
        """The text forwarded to the client so far."""
        return "".join(d.text for d in self._forwarded)

    @property
    def finished(self) -> bool:
        """The runtime's stream is over and the outcome is known."""
        return self._done.done()

    # -- the runtime's stream (StreamListener) -------------------------------------------------
    def on_delta(self, delta: TokenDelta) -> None:
        """Forward ``delta`` to the client (a ghost token once an abort was asked)."""
        if self.closed:
            self.ghost += delta.tokens
            return
        self.received += delta.tokens
        self._forwarded.append(delta)
        self._wake()
        try:
            if self.first_token_at is None:
                self.first_token_at = time.time()
                self._hooks.first_token(self)
            self._hooks.progress(self)
        except Exception:  # the runtime's task must go on feeding the other calls
            log.exception("accounting the progress of %s failed", self.call_id)

    def _unforward(self) -> None:
        """At an abort, deltas a streaming client has not taken yet will never reach it: they
        count as ghost tokens, not as received ones (so usage equals what was delivered plus
        the ghost tokens the program caused)."""
        if self._taken is None or self._taken >= len(self._forwarded):
            return
        untaken = self._forwarded[self._taken :]
        del self._forwarded[self._taken :]
        tokens = sum(d.tokens for d in untaken)
        self.received -= tokens
        self.ghost += tokens

    def on_end(self, result: GenerationResult | None, error: BaseException | None) -> None:
        """Account the end (``result`` None: the runtime failed) and settle the outcome."""
        if error is not None:
            log.error("runtime stream of %s failed: %r", self.call_id, error)
        if result is not None and self.closed:
            self.ghost = max(self.ghost, result.generated_tokens - self.received)
        try:
            self._hooks.ended(self, result)
        except Exception:
            log.exception("accounting the end of %s failed", self.call_id)
        finally:
            reason = "error" if result is None else result.finish_reason
            if self.closed:
                reason = "length" if self.error is not None else "abort"
            self._done.set_result(CallOutcome(reason, self.text, result, self.error))
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        wake(waiter)

    # -- consumers ----------------------------------------------------------------------------
    async def deltas(self) -> AsyncIterator[TokenDelta]:
        """The deltas forwarded to the client, until the call ends or is aborted (what was
        forwarded but not yet taken from here when the abort was asked is never given)."""
        self._taken = self._taken or 0
        while not self.closed:
            if self._taken < len(self._forwarded):
                self._taken += 1
                yield self._forwarded[self._taken - 1]
            elif self._done.done():
                return
            else:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter

    async def outcome(self) -> CallOutcome:
        """Wait for the end (safe to cancel: the call goes on)."""
        if self._done.done():
            return self._done.result()
        return await asyncio.shield(self._done)

    def ending(self) -> asyncio.Future[CallOutcome]:
        """A future of the outcome, for ``asyncio.wait`` (cancelling it leaves the call
        alone)."""
        return asyncio.shield(self._done)

    # -- stopping -----------------------------------------------------------------------------
    def stop(self, error: ServiceError, *, reason: str = "quota") -> None:
        """Stop the call because of ``error`` (a quota, a shutdown): the client gets
        ``error``, forwarding ends now, the abort runs in the background."""
        if self.error is None:
            self.error = error
        self._start_abort(reason)

    async def abort(self, reason: str, *, wait_s: float = 5.0) -> bool:
        """Abort the call (idempotent). Returns True once the runtime confirmed the call gone,
        False if it had already ended. Then waits up to ``wait_s`` for the runtime's end, so
        the call's events and accounting are in place when this returns."""
        confirmed = await asyncio.shield(self._start_abort(reason))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await asyncio.shield(self._done)
        return confirmed

    def abandon(self, reason: str) -> None:
        """The client went away: abort unless the call already ended. Synchronous (usable
        where awaiting is impossible, e.g. inside a cancelled scope); the abort runs on."""
        if not self._done.done():
            self._start_abort(reason)

    def _start_abort(self, reason: str) -> asyncio.Future[bool]:
        if self._abort is None:
            self.closed = True  # not yet sent: the client must never see it
            self._unforward()
            self.abort_reason = reason
            self._wake()
            self._abort = asyncio.ensure_future(self._runtime.abort(self.call_id))
        return self._abort
