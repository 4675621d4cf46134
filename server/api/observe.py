"""What the consoles read: ``/v1/overview``, ``/v1/tenants``, ``/v1/kv``, ``/v1/runtime`` and the
``/v1/events`` Server-Sent Events feed.

The feed coalesces: after the first new event a client waits ``sse_coalesce_s`` (100 ms), then
sends what accumulated as ``event: batch`` frames of at most ``sse_batch_max`` (500) events,
back to back until it has caught up; a burst of any size therefore costs a client a few frames,
never one per event. ``event: overview`` carries the overview once a second (and keeps idle
connections alive). A client resumes with ``?since=<seq>`` (or ``Last-Event-ID``) and
``life`` (each batch's, the server's life: ``EventHub.life``); events older than the hub's ring
are read from the store. A cursor from an earlier life of the server past this life's first
``seq`` (a crash lost the events past the store's last commit, and this life numbered its own
from there), or past the newest ``seq`` when no ``life`` is given, names events that no longer
exist: the feed then begins with ``event: reset`` ``{"seq", "life"}`` and sends this life's
events from its start; the client resumes from that ``seq``. Tenant keys receive their own
events only.

A feed holds one of its tenant's request slots (``requestslots.py``) for as long as it lasts,
so feeds are bounded twice: a tenant may hold ``feeds_per_tenant`` open at once (all operator
keys together ``operator_feeds``, counted apart), past it 429 ``tenant_limit``; and each lasts
``feed_lifetime_s``, then the server ends it cleanly after a last ``event: batch`` with no
events whose ``seq`` (and ``id``) is the feed's cursor: a client that resumes from it (both
consoles do, as any SSE client does with ``Last-Event-ID``) loses no event, even when the feed
sent it none.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.background_tasks import BackgroundTask
from litestar.params import QueryParameter
from litestar.response import Stream

from agentconsole.scheduler.events import Event
from agentconsole.server.api.auth import Principal
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.contract import SSE, contract
from agentconsole.server.api.deps import LiveDep, PrincipalDep
from agentconsole.server.api.openai_format import sse_data
from agentconsole.server.api.queryguard import strict_query
from agentconsole.server.live.hub import EventHub
from agentconsole.server.live.tenants import TenantLimitError

JSON = dict[str, Any]
#: the largest ``since`` (an event sequence is a 64-bit integer; ``Last-Event-ID`` has at
#: most 18 digits)
MAX_SEQ = 2**62
#: where the app keeps its :class:`OpenFeeds` (``app.state``: one per app, as the feeds are)
FEEDS_STATE = "event_feeds"
#: seconds a client refused a feed is told to wait (a feed ends when its reader leaves)
FEED_RETRY_AFTER_S = 5


class OpenFeeds:
    """The feeds open now, per owner: a tenant, or ``operator`` for every operator key (a
    name no tenant may have: ``auth.RESERVED_TENANTS``)."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()

    def take(self, principal: Principal, config: ServerConfig) -> Callable[[], None]:
        """Count a new feed of ``principal``'s and return what ends it (once, however often it
        is called); :class:`TenantLimitError` (429) past the owner's cap."""
        if principal.operator:
            cap, field = config.operator_feeds, "server.operator_feeds"
        else:
            cap, field = config.feeds_per_tenant, "server.feeds_per_tenant"
        owner = principal.tenant
        if self.open[owner] >= cap:
            raise TenantLimitError(
                f"{cap} event feeds of this key's tenant are open, its limit; close one, or"
                " retry once one has ended",
                field=field,
                headers={"Retry-After": str(FEED_RETRY_AFTER_S)},
            )
        self.open[owner] += 1
        ended = False

        def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.open[owner] -= 1
                if not self.open[owner]:
                    del self.open[owner]

        return end


def _event(seq: int, event: Event) -> JSON:
    return {"seq": seq, **event.to_json()}


def _frame(kind: str, payload: JSON, seq: int | None = None) -> bytes:
    head = f"event: {kind}\n" + (f"id: {seq}\n" if seq is not None else "")
    return head.encode() + sse_data(payload)


async def _batches(live: LiveDep, tenant: str | None, cursor: int) -> AsyncIterator[bytes]:
    """Frames of everything after ``cursor`` for ``tenant``, until caught up."""
    hub, limit = live.hub, live.config.sse_batch_max
    while cursor < hub.last_seq:
        try:
            items, cursor = hub.since(cursor, tenant=tenant, limit=limit)
        except LookupError:  # fell out of the ring: read the store, up to the ring
            oldest = hub.oldest_seq()
            stored = await asyncio.to_thread(
                live.store.repo.events_since, cursor, limit=limit, tenant=tenant, before=oldest
            )
            items = [(s.seq, s.event) for s in stored]
            cursor = items[-1][0] if len(items) == limit else oldest - 1
        if items:
            events = [_event(seq, e) for seq, e in items]
            body = {"seq": items[-1][0], "life": hub.life, "events": events}
            yield _frame("batch", body, items[-1][0])


def resume_point(hub: EventHub, since: int, life: str | None) -> int | None:
    """Where a reader asking for events after ``since`` (of server life ``life``) resumes:
    ``None`` where it asked, else this life's start (module docstring: its cursor names
    events that no longer exist)."""
    start = hub.first_seq - 1
    if life is not None and life != hub.life and since > start:
        return start
    if since > hub.last_seq:
        return start
    return None


def _last_frames(hub: EventHub, cursor: int, lifetime_s: float) -> bytes:
    """What ends a feed at its lifetime: a comment for a person reading it, and a batch of no
    events that moves the client's cursor (``since``, ``Last-Event-ID``) to the feed's."""
    note = f": this feed's lifetime ({lifetime_s:g} s) is over; reconnect to resume\n\n"
    return note.encode() + _frame("batch", {"seq": cursor, "life": hub.life, "events": []}, cursor)


async def event_feed(
    live: LiveDep,
    tenant: str | None,
    since: int,
    life: str | None = None,
    *,
    lifetime_s: float | None = None,
) -> AsyncGenerator[bytes, None]:
    """The SSE body of ``GET /v1/events`` (module docstring); it ends after ``lifetime_s``
    (None: when the hub closes)."""
    hub = live.hub
    cursor = since
    next_overview = 0.0
    lifetime = math.inf if lifetime_s is None else lifetime_s
    ends_at = time.monotonic() + lifetime
    yield b": agentconsole events\n\n"
    reset = resume_point(hub, since, life)
    if reset is not None:
        cursor = reset
        yield _frame("reset", {"seq": reset, "life": hub.life}, reset)
    while not hub.is_closed():
        now = time.monotonic()
        if now >= ends_at:
            # the cursor, not the hub's newest seq: events after it are not sent yet
            yield _last_frames(hub, cursor, lifetime)
            return
        if now >= next_overview:
            next_overview = now + 1.0
            yield _frame("overview", live.observer.overview())
        if cursor >= hub.last_seq:
            try:
                async with asyncio.timeout(min(next_overview, ends_at) - now):
                    await asyncio.shield(hub.changed())
            except TimeoutError:
                continue
            if hub.is_closed():
                return
            await asyncio.sleep(live.config.sse_coalesce_s)
        async for frame in _batches(live, tenant, cursor):
            yield frame
        cursor = max(cursor, hub.last_seq)


async def _until_ended(
    feed: AsyncGenerator[bytes, None], end: Callable[[], None]
) -> AsyncGenerator[bytes, None]:
    """``feed``, counted as open until it ends (the client left, its lifetime, shutdown)."""
    try:
        async for frame in feed:
            yield frame
    finally:
        end()
        await feed.aclose()


class ObserveController(Controller):
    path = "/v1"
    tags = ("observation",)

    @get("/overview", summary="Platform overview")
    async def overview(self, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Policies, program counts, throughput, E2E percentiles, queue, KV, hits, ghosts."""
        del principal
        return live.observer.overview()

    @get("/whoami", summary="The caller's key")
    async def whoami(self, principal: PrincipalDep) -> dict[str, str | bool]:
        """``{tenant, operator, key_id}`` of the key presented: a console asks it to decide
        whether to offer the operator's controls, rather than learn it from a 403 (which is
        audited)."""
        return principal.as_json()

    @get("/tenants", summary="Tenants")
    async def tenants(self, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Per tenant: programs, slowdown, starvation, quota use (a tenant sees itself)."""
        return live.observer.tenants(principal.scope)

    @get("/kv", summary="KV tiers")
    async def kv(self, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Tier occupancy, retained contexts, migrations, recomputes, placement."""
        return live.observer.kv(principal.scope)

    @get("/runtime", summary="Runtime snapshot")
    async def runtime(self, live: LiveDep, principal: PrincipalDep) -> JSON:
        """Queued and running calls, tiers, paused (a tenant sees its own calls)."""
        return live.observer.runtime(principal.scope)

    @get(
        "/events",
        summary="Live event feed (SSE)",
        opt=contract(429, media=(SSE,)),
        guards=[strict_query],
    )
    async def events(
        self,
        request: Request[Any, Any, Any],
        live: LiveDep,
        principal: PrincipalDep,
        since: Annotated[
            int | None, QueryParameter(ge=0, le=MAX_SEQ, description="Resume after this seq")
        ] = None,
        life: Annotated[
            str | None,
            QueryParameter(max_length=64, description="The server life `since` belongs to"),
        ] = None,
    ) -> Stream:
        """``event: batch`` frames ``{"seq", "events": [Event]}`` and ``event: overview``;
        429 past the tenant's open feeds; the feed ends after ``server.feed_lifetime_s``."""
        if since is None:
            last = request.headers.get("last-event-id", "")
            known = len(last) < 19 and last.isascii() and last.isdigit()
            since = int(last) if known else live.hub.last_seq
        feeds: OpenFeeds = request.app.state.setdefault(FEEDS_STATE, OpenFeeds())
        end = feeds.take(principal, live.config)
        lifetime_s = live.config.feed_lifetime_s
        feed = _until_ended(
            event_feed(live, principal.scope, since, life, lifetime_s=lifetime_s), end
        )

        async def close() -> None:
            # ``end`` too: a feed whose body never started runs no ``finally``
            end()
            await feed.aclose()

        return Stream(
            feed,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            background=BackgroundTask(close),
        )
