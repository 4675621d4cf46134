"""One call's tokens on their way from a runtime to whoever reads them: :class:`TokenStream`,
the ``GenerationStream`` every runtime's ``submit`` returns.

The runtime feeds it: :meth:`~TokenStream.push` for each delta, then :meth:`~TokenStream.end`
(or :meth:`~TokenStream.fail`) once. A reader takes the deltas in one of two ways:

* ``async for delta in stream`` and then ``await stream.result()`` (tools, tests, benchmarks);
* :meth:`~TokenStream.listen`: the deltas and the end are handed to a :class:`StreamListener`
  as the runtime feeds them, in the runtime's own task. The live service reads every call this
  way, so a call costs no task and no queue of its own between the engine and the client.

A delta is *read* when it is handed over (to the listener, or out of the iterator).
:meth:`~TokenStream.drop_unread` (an abort) discards what was produced but not read, so a
reader that asked for an abort never sees a token produced before it that it had not read.
``read_tokens`` and :meth:`~TokenStream.read_text` say what was read: what an aborted call
delivered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from agentconsole.scheduler.runtime import GenerationResult, TokenDelta


def wake(waiter: asyncio.Future[None] | None) -> None:
    """Resolve ``waiter`` (a reader waiting for more), if there is one still waiting."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class StreamListener(Protocol):
    """Takes a call's deltas and its end as the runtime produces them (synchronously, in the
    runtime's task: it must be quick and must not raise)."""

    def on_delta(self, delta: TokenDelta) -> None: ...

    def on_end(self, result: GenerationResult | None, error: BaseException | None) -> None:
        """Once: the runtime's accounting, or the error the call failed with (then None)."""


class TokenStream:
    """See the module docstring. Runtimes subclass it to keep their per-call state on it."""

    def __init__(self) -> None:
        self.read_tokens = 0
        self.ended = False
        self._read: list[str] = []
        self._buffer: deque[TokenDelta] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._listener: StreamListener | None = None
        self._done: asyncio.Future[GenerationResult] | None = None
        self._result: GenerationResult | None = None
        self._error: BaseException | None = None

    # -- the runtime's side -------------------------------------------------------------------
    def push(self, delta: TokenDelta) -> None:
        """Hand ``delta`` to the listener, or keep it for the iterator (ignored once ended)."""
        if self.ended:
            return
        if self._listener is not None:
            self._hand_over(delta)
            self._listener.on_delta(delta)
            return
        self._buffer.append(delta)
        self._wake()

    def end(self, result: GenerationResult) -> None:
        """The call is over with ``result`` (later calls of :meth:`end`/:meth:`fail` do
        nothing)."""
        self._finish(result, None)

    def fail(self, error: BaseException) -> None:
        """The call failed with ``error`` (``result()`` raises it)."""
        self._finish(None, error)

    def drop_unread(self) -> None:
        """Discard the deltas produced but not yet read (an abort)."""
        self._buffer.clear()

    def read_text(self) -> str:
        """The text of the deltas read so far."""
        return "".join(self._read)

    def _finish(self, result: GenerationResult | None, error: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        self._result, self._error = result, error
        done = self._done
        if done is not None and not done.done():
            if error is not None:
                done.set_exception(error)
            elif result is not None:
                done.set_result(result)
        self._wake()
        if self._listener is not None:
            self._listener.on_end(result, error)

    def _hand_over(self, delta: TokenDelta) -> None:
        self.read_tokens += delta.tokens
        self._read.append(delta.text)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        wake(waiter)

    # -- the reader's side ------------------------------------------------------------------
    def listen(self, listener: StreamListener) -> None:
        """Hand every delta and the end to ``listener`` from now on (what was produced before
        first, at once). One listener per stream, instead of iterating."""
        self._listener = listener
        while self._buffer:
            delta = self._buffer.popleft()
            self._hand_over(delta)
            listener.on_delta(delta)
        if self.ended:
            listener.on_end(self._result, self._error)

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> TokenDelta:
        while not self._buffer:
            if self.ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        delta = self._buffer.popleft()
        self._hand_over(delta)
        return delta

    async def result(self) -> GenerationResult:
        """Wait for the end and return the runtime's accounting (raises what the call failed
        with)."""
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            if self.ended:
                if self._error is not None:
                    self._done.set_exception(self._error)
                elif self._result is not None:
                    self._done.set_result(self._result)
        return await asyncio.shield(self._done)
