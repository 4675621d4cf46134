"""The event hub: every event of the live server passes here, once, in order.

The hub numbers events (``seq``), keeps the most recent ones in a ring for SSE clients, and
fans each one out, synchronously and in emission order, to its subscribers: the store writer,
the :class:`MetricsAggregator`, the Prometheus collector and the store projector. SSE clients
do not subscribe; they pull from the ring by ``seq`` when :meth:`changed` fires, so a burst of
events costs the hub O(1) per event whatever the number of clients.

Numbering: the hub starts at the store's highest committed ``seq`` and the store writer numbers
the events it receives in the same order, so a hub ``seq`` is the store's ``seq`` (a client may
resume from either). This holds while every event reaches the store through the hub.

The hub must be used from the event loop's thread (it resolves an asyncio future).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from agentconsole.scheduler.events import Event

TenantOf = Callable[[str], str | None]


class EventHub:
    """An ``EventSink`` with numbering, a replay ring and subscribers."""

    def __init__(self, first_seq: int = 1, ring_size: int = 65_536) -> None:
        #: this server's first ``seq`` (the store's last plus one) and a name for its life:
        #: after a crash the store keeps events up to its last commit only, and this life
        #: numbers its own from there, so a reader's cursor from an earlier life past
        #: ``first_seq - 1`` names events that no longer exist (``/v1/events`` resets it)
        self.first_seq = first_seq
        self.life = uuid.uuid4().hex[:12]
        self._next = first_seq
        self._size = ring_size
        # event ``seq`` sits at ``seq % ring_size`` (no ``(seq, event)`` pair: the ring holds
        # tens of thousands of events, each pair one more object the cyclic collector visits)
        self._ring: list[Event | None] = [None] * ring_size
        self._subscribers: list[Callable[[Event], None]] = []
        self._changed: asyncio.Future[None] | None = None
        self._tenant_of: TenantOf | None = None
        self._closed = False

    def is_closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the newest event (``first_seq - 1`` before any)."""
        return self._next - 1

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` for every later event. It must be quick and not raise."""
        self._subscribers.append(callback)

    def resolve_tenants(self, tenant_of: TenantOf) -> None:
        """Fill in the tenant of events that carry a program id but no tenant (the runtimes'
        KV events) with ``tenant_of(program_id)``, so tenant filters see them."""
        self._tenant_of = tenant_of

    def emit(self, event: Event) -> None:
        """Number ``event``, keep it in the ring, hand it to every subscriber, wake readers."""
        if not event.tenant and event.program_id and self._tenant_of is not None:
            tenant = self._tenant_of(event.program_id)
            if tenant:  # a new Event by hand: dataclasses.replace costs 4x as much
                e = event
                event = Event(e.t, e.kind, e.program_id, e.node_id, e.attempt, tenant, e.data)
        seq = self._next
        self._next += 1
        self._ring[seq % self._size] = event
        for callback in self._subscribers:
            callback(event)
        changed = self._changed
        if changed is not None and not changed.done():
            changed.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        """A future resolved by the next event (or :meth:`close`); shared by all readers."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
            if self._closed:
                self._changed.set_result(None)
        return self._changed

    def close(self) -> None:
        """Wake every reader for good (server shutdown): SSE streams then end."""
        self._closed = True
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    def oldest_seq(self) -> int:
        """The oldest ``seq`` still in the ring (never before this life's first: earlier ones
        are the store's to serve)."""
        return max(self._next - self._size, self.first_seq)

    def since(
        self, seq: int, *, tenant: str | None = None, limit: int = 500
    ) -> tuple[list[tuple[int, Event]], int]:
        """Events after ``seq`` (for ``tenant`` only, when given), at most ``limit``, from the
        ring; returns them and the ``seq`` the reader has now seen up to (which moves past
        other tenants' events too). Raises ``LookupError`` if ``seq`` fell out of the ring."""
        if seq < self.oldest_seq() - 1:
            raise LookupError(seq)
        out: list[tuple[int, Event]] = []
        cursor = seq
        ring, size, end = self._ring, self._size, self._next
        while cursor + 1 < end and len(out) < limit:
            cursor += 1
            # from the oldest seq on, a slot holds its own seq's event (None: before first_seq)
            event = ring[cursor % size]
            if event is not None and (tenant is None or event.tenant == tenant):
                out.append((cursor, event))
        return out, cursor
