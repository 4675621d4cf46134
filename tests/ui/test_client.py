"""The HTTP client and the feed reader, against the stub server and scripted transports."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agentconsole.httpclient import ApiError, PermissionDeniedError
from agentconsole.ui.client import http as console_http
from agentconsole.ui.client.feed import EventBatch, FeedStatus, OverviewTick, read_feed
from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.client.models import TenantRow, parse_tiers
from tests.ui.stub_server import TENANT_KEY, RunningStub
from tests.ui.stub_world import BIG_PROGRAM


def test_reads_every_view(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        assert client.overview().policy == "cp-cache"
        page = client.programs()
        assert page.total == 40
        assert len(page.programs) == 40
        running = client.programs("running")
        assert running.programs
        assert all(p.state == "running" for p in running.programs)
        assert client.program(running.programs[0].program_id).nodes
        assert [t.tenant for t in client.tenants()] == ["tenant-a", "tenant-b", "tenant-c"]
        assert client.kv().tiers
        assert client.audit()[0].action == "set_policy"
    finally:
        client.close()


def test_reads_the_door_and_joins_each_kind_with_its_peak(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        door = client.door()
    finally:
        client.close()
    assert (door.enabled, door.order, door.waiting, door.waited_total) == (
        True,
        "shortest-first",
        3,
        17,
    )
    assert (door.budget_tokens, door.predicted_tokens, door.held_tokens) == (
        1_200_000,
        950_000,
        880_000,
    )
    assert door.boundary_parks == 2
    assert door.reserved_tokens == 150_000  # the room kept for shared prefixes
    assert door.fill == pytest.approx(950 / 1200)
    rows = door.learned()
    assert [(r.tenant, r.kind) for r in rows[:2]] == [("tenant-a", "chat"), ("tenant-a", "coding")]
    assert len(rows) == 6  # three tenants, two kinds each
    coding_c = next(r for r in rows if (r.tenant, r.kind) == ("tenant-c", "coding"))
    assert coding_c.expected_run_s == pytest.approx(240.0 * 1.4)
    assert coding_c.peak_tokens == 61_500.0 * 3  # its own, not tenant-a's


def test_a_tenant_key_is_refused_the_door_but_reads_its_views(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, TENANT_KEY)
    try:
        assert client.tenants()
        with pytest.raises(PermissionDeniedError) as refused:
            client.door()
        assert refused.value.status == 403
        assert "operator key" in refused.value.message
    finally:
        client.close()


def test_paging_collects_past_one_page(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        page = client.programs(limit=7)
        assert len(page.programs) == 7
        assert page.hidden == 33
    finally:
        client.close()


def test_paging_by_offset_against_a_server_older_than_the_cursor(
    stub: RunningStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that sends no ``next_cursor`` is paged by offset, as it understands: every
    program is read, not the first page alone."""
    monkeypatch.setattr(console_http, "PAGE_SIZE", 7)
    stub.world.cursorless = True
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        page = client.programs(limit=2000)
        assert len(page.programs) == len(stub.world.programs) > 7
        assert page.hidden == 0
    finally:
        stub.world.cursorless = False
        client.close()


def test_errors_carry_status_and_server_message(stub: RunningStub) -> None:
    bad = HttpConsoleClient(stub.url, "sk-wrong")
    good = HttpConsoleClient(stub.url, stub.key)
    try:
        with pytest.raises(ApiError) as refused:
            bad.overview()
        assert refused.value.status == 401
        with pytest.raises(ApiError) as missing:
            good.program("nope")
        assert missing.value.status == 404
        assert "nope" in missing.value.message
        finished = next(p for p in good.programs().programs if p.state == "finished")
        with pytest.raises(ApiError) as conflict:
            good.act("cancel", finished.program_id)
        assert conflict.value.status == 409
    finally:
        bad.close()
        good.close()


def test_unreachable_server_is_an_api_error() -> None:
    client = HttpConsoleClient("http://127.0.0.1:9", "k", timeout_s=1)
    with pytest.raises(ApiError) as error:
        client.overview()
    assert error.value.status == 0


def test_actions_change_the_server(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        target = client.programs("running").programs[3].program_id
        assert client.act("boost", target, amount=2.0).body["boost"] == 2.0
        result = client.act("cancel", target)
        assert result.body["state"] == "cancelled"
        assert client.program(target).summary.state == "cancelled"
        assert [a.action for a in client.audit()[:2]] == ["cancel", "boost"]
        with pytest.raises(ValueError, match="unknown operator action"):
            client.act("delete", target)
    finally:
        client.close()


def test_live_feed_from_the_stub(stub: RunningStub) -> None:
    client = HttpConsoleClient(stub.url, stub.key)
    stop = threading.Event()
    timer = threading.Timer(15, stop.set)  # bounds the test if the event never comes
    timer.start()
    target = client.programs("running").programs[0].program_id
    seen: list[object] = []
    for item in client.feed(stop):
        seen.append(item)
        if isinstance(item, FeedStatus) and item.connected:
            client.act("cancel", target)
        if isinstance(item, EventBatch) and any(
            e.kind == "program.cancelled" and e.program_id == target for e in item.events
        ):
            stop.set()
    timer.cancel()
    client.close()
    cancelled = [
        e for i in seen if isinstance(i, EventBatch) for e in i.events if e.program_id == target
    ]
    assert [e.kind for e in cancelled] == ["program.cancelled"]


def _sse(*messages: tuple[str, object]) -> bytes:
    return "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in messages).encode()


def _read_until_overview(
    handler: Callable[[httpx.Request], httpx.Response], stop: threading.Event
) -> list[Any]:
    """What ``read_feed`` yields from a server answering with ``handler``, up to the first
    overview."""
    client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://test")
    items = []
    for item in read_feed(client, stop, min_delay_s=0.001, max_delay_s=0.002):
        items.append(item)
        if isinstance(item, OverviewTick):
            stop.set()
    return items


def test_reader_reconnects_and_resumes_after_the_last_seq() -> None:
    requests: list[str] = []
    stop = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(str(request.url.params.get("since")))
        if len(requests) == 1:
            events = [{"seq": 1, "kind": "a"}, {"seq": 2, "kind": "b"}]
            return httpx.Response(200, content=_sse(("batch", {"seq": 2, "events": events})))
        if len(requests) == 2:
            return httpx.Response(503, content=b"")
        events = [{"seq": 2, "kind": "b"}, {"seq": 3, "kind": "c"}]
        body = _sse(("batch", {"seq": 3, "events": events}), ("overview", {"policy": "fcfs"}))
        return httpx.Response(200, content=body)

    items = _read_until_overview(handler, stop)
    batches = [i for i in items if isinstance(i, EventBatch)]
    assert [e.kind for b in batches for e in b.events] == ["a", "b", "c"]  # no duplicate "b"
    assert requests[:3] == ["None", "2", "2"]
    statuses = [i for i in items if isinstance(i, FeedStatus)]
    assert any(not s.connected and "503" in s.detail for s in statuses)


def test_reader_resumes_from_a_reset_below_its_cursor() -> None:
    """After a crash the server's numbers restart below the reader's cursor: its ``reset``
    moves the cursor back, so the new life's events are delivered, not dropped as seen, and
    the reader names the life it resumes in."""
    asked: list[tuple[str | None, str | None]] = []
    stop = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.params.get("since"), request.url.params.get("life")))
        if len(asked) == 1:
            events = [{"seq": 40, "kind": "old"}]
            batch = {"seq": 40, "life": "before", "events": events}
            return httpx.Response(200, content=_sse(("batch", batch)))
        events = [{"seq": 11, "kind": "new-1"}, {"seq": 12, "kind": "new-2"}]
        body = _sse(
            ("reset", {"seq": 10, "life": "after"}),
            ("batch", {"seq": 12, "life": "after", "events": events}),
            ("overview", {"policy": "fcfs"}),
        )
        return httpx.Response(200, content=body)

    items = _read_until_overview(handler, stop)
    batches = [i for i in items if isinstance(i, EventBatch)]
    assert [e.kind for b in batches for e in b.events] == ["old", "new-1", "new-2"]
    assert asked[:2] == [(None, None), ("40", "before")]


def test_a_running_node_s_open_span_reads_as_open_not_as_the_epoch(stub: RunningStub) -> None:
    """The server sends ``end: null`` for a span still running (a tool, a call decoding);
    read as 0.0 it was a span that ended in 1970, and no bar drew it."""
    client = HttpConsoleClient(stub.url, stub.key)
    try:
        detail = client.program(BIG_PROGRAM)
    finally:
        client.close()
    running = [n for n in detail.nodes if n.state == "running"]
    assert running
    for node in running:
        last = node.timeline[-1]
        assert last.end is None
        assert last.is_open
        assert last.end_by(last.start + 5.0) == last.start + 5.0
        assert all(p.end is not None for p in node.timeline[:-1])
    assert detail.running_spans
    done = [n for n in detail.nodes if n.state == "done"]
    assert all(p.end is not None and p.end >= p.start for n in done for p in n.timeline)


def test_unknown_starvation_stays_unknown_and_a_tier_s_fill_is_not_capped() -> None:
    row = TenantRow.parse({"tenant": "t", "starvation": None})
    assert row.starvation is None  # not 0.0: "never waited" is a claim the server did not make
    assert TenantRow.parse({"tenant": "t", "starvation": 0.25}).starvation == 0.25
    (tier,) = parse_tiers({"hbm": {"used_tokens": 1500, "capacity_tokens": 1000}})
    assert tier.fraction == 1.5  # as reported, not 100%
