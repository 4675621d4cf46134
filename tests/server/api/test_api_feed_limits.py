"""The ``/v1/events`` feeds' bounds over real HTTP (``server/api/observe.py``): a tenant may
hold only so many open (the operators' counted apart), and a feed ends at its lifetime,
cleanly, with a last batch that lets a client (the consoles' reader among them) resume without
losing an event."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.api.config import ServerConfig
from agentconsole.server.api.observe import FEEDS_STATE, OpenFeeds
from agentconsole.settings import load_settings
from agentconsole.ui.client.feed import EventBatch, FeedItem, FeedStatus, read_feed
from tests.server.api.harness import OPERATOR, LiveServer, make_config, wait_until

LIFETIME_S = 0.5


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("feeds")) / "feeds.duckdb"
    with LiveServer(make_config(db, feeds_per_tenant=2, operator_feeds=1)) as live:
        live.wait_ready()
        yield live


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("lifetime")) / "lifetime.duckdb"
    with LiveServer(make_config(db, feed_lifetime_s=LIFETIME_S)) as live:
        live.wait_ready()
        yield live


@contextlib.contextmanager
def feed(server: LiveServer, key: str) -> Iterator[httpx.Response]:
    """One ``/v1/events`` request of ``key``'s, open while the block runs."""
    with server.client(key) as client, client.stream("GET", "/v1/events") as response:
        yield response


def open_feeds(server: LiveServer) -> dict[str, int]:
    feeds = server.app.state.get(FEEDS_STATE)
    return dict(feeds.open) if isinstance(feeds, OpenFeeds) else {}


def assert_feed_limit(response: httpx.Response, field: str) -> None:
    assert response.status_code == 429
    error = json.loads(response.read())["error"]
    assert (error["type"], error["field"]) == ("tenant_limit", field)
    assert response.headers["retry-after"] == "5"
    assert response.headers["x-should-retry"] == "true"


def test_a_tenant_past_its_feeds_gets_429_and_the_others_are_not_charged(
    capped: LiveServer,
) -> None:
    with contextlib.ExitStack() as stack:
        mine = [stack.enter_context(feed(capped, "sk-a")) for _ in range(2)]
        assert [response.status_code for response in mine] == [200, 200]
        with feed(capped, "sk-a") as third:
            assert_feed_limit(third, "server.feeds_per_tenant")
        with feed(capped, "sk-b") as other, feed(capped, OPERATOR) as operator:
            assert (other.status_code, operator.status_code) == (200, 200)
            with feed(capped, OPERATOR) as second_operator:
                assert_feed_limit(second_operator, "server.operator_feeds")
        assert open_feeds(capped)["tenant-a"] == 2
    # a feed whose reader left is no longer counted: the tenant may open another
    wait_until(lambda: not open_feeds(capped), 5)
    with feed(capped, "sk-a") as again:
        assert again.status_code == 200


def frames(response: httpx.Response, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """The SSE messages of ``response`` (``event``, ``id``, ``data``) until it ends or
    ``deadline`` passes, and whether it ended."""
    messages: list[dict[str, Any]] = []
    message: dict[str, Any] = {}
    for line in response.iter_lines():
        if time.monotonic() > deadline:
            return messages, False
        if not line and message:
            messages.append(message)
            message = {}
        elif line.startswith(("event: ", "id: ")):
            name, _, value = line.partition(": ")
            message[name] = value
        elif line.startswith("data: "):
            message["data"] = json.loads(line[6:])
    return messages, True


def test_a_feed_ends_at_its_lifetime_with_a_batch_to_resume_from(short_lived: LiveServer) -> None:
    start = time.monotonic()
    with feed(short_lived, "sk-a") as response:
        assert response.status_code == 200
        messages, ended = frames(response, start + 10 * LIFETIME_S)
    assert ended, "the feed outlived its lifetime"
    assert LIFETIME_S <= time.monotonic() - start < 6 * LIFETIME_S
    last = messages[-1]
    assert last["event"] == "batch"
    assert last["data"]["events"] == []
    assert last["id"] == str(last["data"]["seq"])
    assert last["data"]["life"] == short_lived.live.hub.life
    wait_until(lambda: not open_feeds(short_lived), 5)


def _emit_for_tenant_a(server: LiveServer) -> int:
    async def emit() -> int:
        hub = server.live.hub
        hub.emit(Event(time.time(), EventKind.ENGINE_STATS, tenant="tenant-a", data={}))
        return hub.last_seq

    return server.run(emit())


def test_the_consoles_reader_reconnects_after_a_lifetime_and_loses_no_event(
    short_lived: LiveServer,
) -> None:
    """The consoles' reader (``ui/client/feed.py``, the terminal console's) reconnects when
    the server ends a feed and resumes from the last batch's ``seq``: an event made while it
    was away arrives, though the ended feed had sent the tenant none."""
    stop = threading.Event()
    timer = threading.Timer(10, stop.set)  # bounds the test if the event never comes
    timer.start()
    seen: list[FeedItem] = []
    made: int | None = None
    with short_lived.client("sk-a") as client:
        for item in read_feed(client, stop, min_delay_s=0.05, max_delay_s=0.1):
            seen.append(item)
            if isinstance(item, FeedStatus) and not item.connected and made is None:
                # the reader waits for this loop before it reconnects: the event is made
                # between two feeds
                made = _emit_for_tenant_a(short_lived)
            if isinstance(item, EventBatch) and any(e.seq == made for e in item.events):
                stop.set()
    timer.cancel()
    statuses = [(i.connected, i.detail) for i in seen if isinstance(i, FeedStatus)]
    assert statuses[:3] == [
        (True, "live"),
        (False, "feed closed by the server; reconnecting"),
        (True, "live"),
    ]
    assert made is not None
    assert [e.seq for i in seen if isinstance(i, EventBatch) for e in i.events] == [made]


def test_the_feed_limits_come_from_the_server_settings() -> None:
    defaults = load_settings(None, {}).server_config()
    assert (defaults.feeds_per_tenant, defaults.operator_feeds) == (16, 16)
    assert defaults.feed_lifetime_s == 3600.0 == ServerConfig().feed_lifetime_s
    server = {"feeds_per_tenant": 3, "operator_feeds": 5, "feed_lifetime_s": 90}
    config = load_settings(None, {"server": server}).server_config()
    assert (config.feeds_per_tenant, config.operator_feeds, config.feed_lifetime_s) == (3, 5, 90)
