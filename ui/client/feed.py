"""The live feed: ``GET /v1/events`` read as typed items, reconnecting with ``since``.

A reader never raises on network trouble; it reports :class:`FeedStatus` items instead and
retries with exponential backoff, resuming after the last batch ``seq`` it delivered (and the
server life it came from), so a console that loses the server for a while shows
"reconnecting" and then catches up; when the server answers that the cursor names events of an
earlier life that no longer exist (``event: reset``, after a crash), the reader resumes from
the point the server gives.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from agentconsole.httpclient import jsonread as j
from agentconsole.httpclient.sse import SSEMessage, SSEParser
from agentconsole.ui.client.models import FeedEvent, Overview

# The server sends an overview every second, so a silent minute means the link is dead.
READ_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class EventBatch:
    """An ``event: batch`` message: events up to and including ``seq``."""

    seq: int
    events: tuple[FeedEvent, ...]
    #: the server life the ``seq`` belongs to (None: a server that names none)
    life: str | None = None


@dataclass(frozen=True, slots=True)
class FeedReset:
    """An ``event: reset`` message: resume after ``seq`` of server life ``life`` (the cursor
    sent named events of an earlier life that no longer exist)."""

    seq: int
    life: str


@dataclass(frozen=True, slots=True)
class OverviewTick:
    """An ``event: overview`` message."""

    overview: Overview


@dataclass(frozen=True, slots=True)
class FeedStatus:
    """The connection came up (``connected``) or went down (with the reason)."""

    connected: bool
    detail: str


FeedItem = EventBatch | OverviewTick | FeedStatus


def decode(message: SSEMessage) -> EventBatch | OverviewTick | FeedReset | None:
    """The typed item for one SSE message; ``None`` for unknown events or bad JSON."""
    try:
        payload = json.loads(message.data)
    except ValueError:
        return None
    if message.event == "overview":
        return OverviewTick(Overview.parse(payload))
    if message.event == "batch":
        body = j.obj(payload)
        events = tuple(FeedEvent.parse(e) for e in j.objects(body.get("events")))
        last = max((e.seq for e in events), default=0)
        life = body.get("life")
        return EventBatch(
            seq=max(j.integer(body, "seq"), last),
            events=events,
            life=life if isinstance(life, str) else None,
        )
    if message.event == "reset":
        body = j.obj(payload)
        return FeedReset(j.integer(body, "seq"), str(body.get("life") or ""))
    return None


def read_feed(
    client: httpx.Client,
    stop: threading.Event,
    *,
    since: int | None = None,
    min_delay_s: float = 0.5,
    max_delay_s: float = 5.0,
) -> Iterator[FeedItem]:
    """Yield feed items until ``stop`` is set.

    ``client`` must carry the base URL and the ``Authorization`` header. Returns (ends the
    iteration) only when ``stop`` is set; ``stop`` is checked between chunks, and the server's
    one-second overview keeps chunks coming. The reader skips batches it has already delivered
    when a reconnect overlaps.
    """
    delay = min_delay_s
    life: str | None = None
    while not stop.is_set():
        params: dict[str, int | str] = {} if since is None else {"since": since}
        if since is not None and life:
            params["life"] = life
        try:
            with client.stream(
                "GET",
                "/v1/events",
                params=params,
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(10.0, read=READ_TIMEOUT_S),
            ) as response:
                if response.status_code != 200:
                    yield FeedStatus(False, f"feed refused: HTTP {response.status_code}")
                else:
                    yield FeedStatus(True, "live")
                    delay = min_delay_s
                    parser = SSEParser()
                    for chunk in response.iter_text():
                        for message in parser.feed(chunk):
                            item = decode(message)
                            if isinstance(item, FeedReset):
                                since, life = item.seq, item.life
                                continue
                            if isinstance(item, EventBatch):
                                life = item.life or life
                                item, since = _after(item, since)
                            if item is not None:
                                yield item
                        if stop.is_set():
                            return
                    yield FeedStatus(False, "feed closed by the server; reconnecting")
        except httpx.HTTPError as error:
            yield FeedStatus(False, f"reconnecting: {type(error).__name__}")
        if stop.wait(delay):
            return
        delay = min(max_delay_s, delay * 2)


def _after(batch: EventBatch, since: int | None) -> tuple[EventBatch | None, int]:
    """``batch`` without the events at or before ``since``, and the new resume point."""
    if since is None:
        return batch, batch.seq
    fresh = tuple(e for e in batch.events if e.seq > since)
    resume = max(since, batch.seq)
    if not fresh and batch.events:
        return None, resume
    if len(fresh) == len(batch.events):
        return batch, resume
    return EventBatch(seq=batch.seq, events=fresh, life=batch.life), resume
