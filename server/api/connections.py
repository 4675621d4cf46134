"""The HTTP server's own limits: timeouts, header size, connections, and its refusals in the
API's error shape.

uvicorn alone closes a connection only when it idles after a response
(``timeout_keep_alive``): a client that connects and sends nothing, or sends its headers a
byte at a time, or never finishes its body, holds a connection (a file descriptor, a parser)
for ever; and its own refusals are plain text. :class:`GuardedProtocol` (uvicorn's httptools
protocol) adds:

* ``timeout_headers_s``: a request's head (request line and headers) must be complete this
  long after the connection opened, or after its first byte on a kept-alive connection; else
  408 ``request_timeout`` (or a silent close when nothing was sent);
* ``timeout_body_s``: its body must be complete this long after its head; else 408 (or a
  close if the answer began);
* ``max_header_bytes``: a larger head answers 431 ``headers_too_large``;
* malformed HTTP answers 400 ``invalid_http``, all as JSON: ``{"error": {"type", "message"}}``,
  then the connection is closed;
* request slots shared per tenant instead of uvicorn's ``limit_concurrency`` (which counted
  every connection, before any key was read): each request, once its head is complete, is
  attributed to its tenant (or to a pool of its own without a valid key, or on a public route)
  and admitted or refused at once, its body unread (``requestslots.py``: 429 past the tenant's
  ``per_tenant_concurrency``, 503 past ``limit_concurrency``, 401 past
  ``unauthenticated_concurrency``, 503 past ``public_concurrency``).

:func:`uvicorn_options` turns :class:`HttpLimits` (the ``server`` settings) and the key ring
into uvicorn's keyword arguments (the protocol class among them, so uvicorn never falls back
to h11); ``serve`` and the test server use it. Cost per request: two timers, two callbacks and
one key hash.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as Cycle

from agentconsole.server.api.auth import KeyRing
from agentconsole.server.api.errors import error_body
from agentconsole.server.api.requestslots import Refusal, RequestSlots, holding


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """See the module docstring and the ``server`` settings; a limit of None: no limit."""

    timeout_keep_alive: int = 5
    timeout_headers_s: float = 10.0
    timeout_body_s: float = 60.0
    #: requests with a valid key in flight, all tenants and operators together
    limit_concurrency: int | None = 1000
    #: what one tenant (all operator keys: one) may hold of them; None: half of them
    per_tenant_concurrency: int | None = None
    #: requests without a valid key in flight on routes that need one
    unauthenticated_concurrency: int = 32
    #: requests in flight on the probes, and again on the console's files and the schema
    public_concurrency: int = 64
    max_header_bytes: int = 64 * 1024

    @property
    def tenant_share(self) -> int | None:
        """``per_tenant_concurrency``, else half of ``limit_concurrency`` (rounded up)."""
        if self.per_tenant_concurrency is not None:
            return self.per_tenant_concurrency
        if self.limit_concurrency is None:
            return None
        return (self.limit_concurrency + 1) // 2

    def slots(self, keys: KeyRing | None) -> RequestSlots:
        """A fresh book of these slots for one server."""
        return RequestSlots(
            keys,
            keyed=self.limit_concurrency,
            per_tenant=self.tenant_share,
            unauthenticated=self.unauthenticated_concurrency,
            public=self.public_concurrency,
        )


def _raw_response(status: int, kind: str, message: str) -> bytes:
    body = json.dumps(error_body(kind, message)).encode()
    return b"".join(
        (
            STATUS_LINE[status],
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        )
    )


class _HeadTooLarge(Exception):
    """Raised in a parser callback: httptools turns it into a parser error."""


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of the module docstring."""

    limits: ClassVar[HttpLimits] = HttpLimits()
    #: the server's request slots (one book per server: :func:`uvicorn_options`)
    slots: ClassVar[RequestSlots] = HttpLimits().slots(None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._in_head = True  # between a request's first byte (or the connection) and its head
        self._head_started = False  # some byte of the head arrived
        self._head_bytes = 0  # target and headers so far
        self._head_too_large = False

    # -- timers and refusals --------------------------------------------------------------------
    def _arm(self, delay: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, status: int, kind: str, message: str, *, answer: bool) -> None:
        """Answer with an error when ``answer`` (no other answer under way) and close."""
        self._disarm()
        if self.transport.is_closing():
            return
        if answer and not self.pipeline:
            self.transport.write(_raw_response(status, kind, message))
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True  # the app's later sends are dropped
                cycle.message_event.set()
        self.transport.close()

    def _idle_between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _head_timeout(self) -> None:
        self._timer = None
        if not self._head_started:
            self.transport.close()  # an idle connection: nothing to answer
            return
        answer = self._idle_between_requests()
        self._refuse(408, "request_timeout", "the request head took too long", answer=answer)

    def _body_timeout(self) -> None:
        self._timer = None
        answer = self.cycle is not None and not self.cycle.response_started
        self._refuse(408, "request_timeout", "the request body took too long", answer=answer)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.limits.max_header_bytes:
            self._head_too_large = True
            raise _HeadTooLarge

    # -- uvicorn's protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.timeout_headers_s, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head and data:
            self._head_started = True
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_started, self._head_bytes = True, True, 0
        if self._timer is None:  # a kept-alive connection's next request
            self._arm(self.limits.timeout_headers_s, self._head_timeout)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head, self._head_started = False, False
        self._arm(self.limits.timeout_body_s, self._body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if self._head_too_large:
            limit = self.limits.max_header_bytes
            message = f"the request head is over {limit} bytes"
            self._refuse(431, "headers_too_large", message, answer=self._idle_between_requests())
            return
        self._refuse(400, "invalid_http", msg, answer=self._idle_between_requests())

    def _start_asgi_task(self, cycle: Cycle, app: ASGI3Application) -> None:
        # here, not in ``on_headers_complete``: a pipelined request takes its slot when it
        # starts, not while it waits behind the one before it on its connection
        if app is self.app:
            admitted = self.slots.admit(cycle.scope)
            app = admitted if isinstance(admitted, Refusal) else holding(app, admitted)
        super()._start_asgi_task(cycle, app)


def uvicorn_options(limits: HttpLimits, keys: KeyRing | None = None) -> dict[str, Any]:
    """uvicorn's keyword arguments for ``limits`` (the protocol carries the ones uvicorn
    lacks, and the request slots, which replace uvicorn's ``limit_concurrency``). ``keys``:
    the server's key ring, to attribute each request to its tenant; without one every request
    counts against ``limit_concurrency`` alone."""
    attributes = {"limits": limits, "slots": limits.slots(keys)}
    protocol = type("GuardedHttpProtocol", (GuardedProtocol,), attributes)
    return {"http": protocol, "timeout_keep_alive": limits.timeout_keep_alive}
