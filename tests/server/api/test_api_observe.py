"""Observation endpoints, Prometheus metrics and the coalescing SSE feed."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.api.observe import _batches
from agentconsole.server.live.hub import EventHub
from agentconsole.server.store.repository import StoredEvent
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until


class FeedReader:
    """Reads ``/v1/events`` in a thread; collects ``(event, data)`` frames."""

    def __init__(
        self, server: LiveServer, key: str, since: int | None = None, life: str | None = None
    ) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.connected = threading.Event()
        self._stop = False
        params: dict[str, int | str] = {} if since is None else {"since": since}
        if life is not None:
            params["life"] = life
        self._thread = threading.Thread(target=self._run, args=(server, key, params), daemon=True)
        self._thread.start()
        assert self.connected.wait(10)

    def _run(self, server: LiveServer, key: str, params: dict[str, int | str]) -> None:
        with server.client(key) as client, client.stream("GET", "/v1/events", params=params) as r:
            kind = ""
            for line in r.iter_lines():
                self.connected.set()
                if self._stop:
                    return
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    self.frames.append((kind, json.loads(line[6:])))

    def events(self) -> list[dict[str, Any]]:
        return [e for kind, data in self.frames if kind == "batch" for e in data["events"]]

    def batches(self) -> int:
        return sum(1 for kind, _ in self.frames if kind == "batch")

    def close(self) -> None:
        self._stop = True


async def _burst(server: LiveServer, n: int, tenants: tuple[str, ...]) -> int:
    hub = server.live.hub
    first = hub.last_seq + 1
    for i in range(n):
        tenant = tenants[i % len(tenants)]
        hub.emit(Event(time.time(), EventKind.ENGINE_STATS, tenant=tenant, data={"i": i}))
    return first


def test_a_burst_arrives_in_few_coalesced_batches(server: LiveServer) -> None:
    reader = FeedReader(server, "sk-operator")
    time.sleep(0.2)
    first = server.run(_burst(server, 2000, ("tenant-a", "tenant-b")))
    wait_until(lambda: len([e for e in reader.events() if e["seq"] >= first]) >= 2000, 10)
    reader.close()
    burst = [e for e in reader.events() if e["seq"] >= first]
    seqs = [e["seq"] for e in burst]
    assert seqs == list(range(first, first + 2000))  # in order, no gap, no duplicate
    batches = [d for k, d in reader.frames if k == "batch" and d["seq"] >= first]
    assert all(len(b["events"]) <= 500 for b in batches)
    assert len(batches) <= 6  # 2000 events: 4 full batches, plus timing slack
    assert any(k == "overview" for k, _ in reader.frames)


def test_tenants_receive_only_their_events(server: LiveServer) -> None:
    reader = FeedReader(server, "sk-b")
    time.sleep(0.2)
    first = server.run(_burst(server, 200, ("tenant-a", "tenant-b")))
    wait_until(lambda: len([e for e in reader.events() if e["seq"] >= first]) >= 100, 10)
    time.sleep(0.3)
    reader.close()
    mine = [e for e in reader.events() if e["seq"] >= first]
    assert len(mine) == 100
    assert {e["tenant"] for e in reader.events()} == {"tenant-b"}


def test_resume_from_since_replays_missed_events(server: LiveServer) -> None:
    first = server.run(_burst(server, 50, ("tenant-a",)))
    reader = FeedReader(server, "sk-a", since=first - 1)
    wait_until(lambda: len([e for e in reader.events() if e["seq"] >= first]) >= 50, 10)
    reader.close()
    assert [e["seq"] for e in reader.events()][:50] == list(range(first, first + 50))


def test_a_cursor_past_the_newest_seq_is_reset_to_this_life_s_start(server: LiveServer) -> None:
    """After a crash the store keeps events up to its last commit and a new server numbers its
    own from there: a console's cursor can be past every seq this server has. It used to wait,
    silent, until the numbers passed it."""
    hub = server.live.hub
    reader = FeedReader(server, "sk-a", since=hub.last_seq + 1000)
    wait_until(lambda: any(kind == "reset" for kind, _ in reader.frames), 5)
    first = server.run(_burst(server, 5, ("tenant-a",)))
    wait_until(lambda: len([e for e in reader.events() if e["seq"] >= first]) >= 5, 10)
    reader.close()
    kind, reset = reader.frames[0]
    assert kind == "reset"
    assert reset == {"seq": hub.first_seq - 1, "life": hub.life}
    batch = next(data for kind, data in reader.frames if kind == "batch")
    assert batch["life"] == hub.life


def test_a_cursor_of_another_life_is_reset_only_past_this_life_s_start(server: LiveServer) -> None:
    hub = server.live.hub
    server.run(_burst(server, 3, ("tenant-a",)))
    other = FeedReader(server, "sk-a", since=hub.last_seq, life="an-earlier-life")
    wait_until(lambda: bool(other.frames), 5)
    other.close()
    assert other.frames[0] == ("reset", {"seq": hub.first_seq - 1, "life": hub.life})
    # a cursor at or before this life's start names events the store keeps: resumed as is
    kept = FeedReader(server, "sk-a", since=hub.first_seq - 1, life="an-earlier-life")
    same = FeedReader(server, "sk-a", since=hub.last_seq, life=hub.life)
    server.run(_burst(server, 1, ("tenant-a",)))
    wait_until(lambda: bool(kept.events()) and bool(same.events()), 5)
    kept.close()
    same.close()
    assert all(kind != "reset" for kind, _ in kept.frames + same.frames)


def test_the_store_s_catch_up_stops_where_the_ring_begins() -> None:
    """A cursor that fell out of the ring is served from the store up to the ring's oldest
    event, then from the ring: every event once, in order (the store's read had no upper
    bound, so a tenant's events still in the ring came twice, the second time out of order)."""
    hub = EventHub(first_seq=1, ring_size=8)
    stored: list[StoredEvent] = []
    hub.subscribe(lambda e: stored.append(StoredEvent(len(stored) + 1, e)))
    for i in range(20):
        hub.emit(Event(float(i), EventKind.ENGINE_STATS, tenant="b", data={"i": i}))
    for i in range(3):
        hub.emit(Event(float(20 + i), EventKind.ENGINE_STATS, tenant="a", data={"i": i}))

    def events_since(
        seq: int, *, limit: int, tenant: str | None, before: int | None = None
    ) -> list[StoredEvent]:
        rows = [r for r in stored if r.seq > seq and (tenant is None or r.event.tenant == tenant)]
        return [r for r in rows if before is None or r.seq < before][:limit]

    live: Any = SimpleNamespace(
        hub=hub,
        config=SimpleNamespace(sse_batch_max=500),
        store=SimpleNamespace(repo=SimpleNamespace(events_since=events_since)),
    )

    async def read() -> list[int]:
        seqs: list[int] = []
        async for frame in _batches(live, "a", 1):
            data = json.loads(frame.decode().split("data: ", 1)[1])
            seqs += [e["seq"] for e in data["events"]]
        return seqs

    assert asyncio.run(read()) == [21, 22, 23]


def test_overview_tenants_kv_runtime_shapes(server: LiveServer) -> None:
    with server.client("sk-a") as c:
        c.post("/v1/chat/completions", json=chat_body(agentconsole={"program_id": "obs-1"}))
        c.post("/v1/programs/obs-1/finish", json={"success": True})
        # percentiles come from the aggregator's report, refreshed at most once a second
        wait_until(lambda: c.get("/v1/overview").json()["e2e_p50_s"] is not None, 3)
        overview = c.get("/v1/overview").json()
        tenants = c.get("/v1/tenants").json()["tenants"]
        kv = c.get("/v1/kv").json()
        runtime = c.get("/v1/runtime").json()
        models = c.get("/v1/models").json()
    assert overview["programs"]["finished"] >= 1
    assert overview["runtime"] == "sim"
    assert "hbm" in overview["kv"]
    assert overview["e2e_p50_s"] is not None
    assert overview["ghost_tokens"] == 0
    assert tenants[0]["tenant"] == "tenant-a"
    assert tenants[0]["programs"] >= 1
    assert set(tenants[0]["quota_use"]) == {"tokens", "tool_calls"}
    assert set(kv) == {"tiers", "retained", "migrations", "recomputes", "placement"}
    assert set(runtime) >= {"queued", "running", "tiers", "paused"}
    assert models["data"][0]["object"] == "model"


def test_metrics_are_prometheus_without_program_labels(server: LiveServer) -> None:
    with server.client("sk-a") as c:
        c.post("/v1/chat/completions", json=chat_body(agentconsole={"program_id": "met-xyz"}))
    with server.client(None) as c:
        response = c.get("/metrics")
    text = response.text
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "agentconsole_llm_calls_finished_total" in text
    assert "agentconsole_time_to_first_token_seconds_bucket" in text
    assert 'agentconsole_kv_tier_used_tokens{tier="hbm"}' in text
    assert "met-xyz" not in text
    labels = set(re.findall(r"[{,]([a-z_]+)=", text))
    assert labels <= {"tier", "state", "kind", "action", "result", "outcome", "le"}
    assert all(
        line.startswith(("#", "agentconsole_")) for line in text.splitlines() if line.strip()
    )


def test_openapi_schema_is_published(server: LiveServer) -> None:
    with server.client(None) as c:
        schema = c.get("/schema/openapi.json").json()
    assert "/v1/chat/completions" in schema["paths"]
    assert "/v1/programs/{program_id}" in schema["paths"]


def test_one_served_model_is_retrieved_by_id(server: LiveServer) -> None:
    """``client.models.retrieve`` works: the listed object by id, 404 for any other id (a
    name with ``/`` included), and the compatibility report keeps its own path."""
    with server.client() as c:
        listed = c.get("/v1/models").json()["data"][0]
        assert c.get(f"/v1/models/{listed['id']}").json() == listed
        missing = c.get("/v1/models/meta-llama/Llama-3.1-8B")
        assert missing.status_code == 404
        assert missing.json()["error"]["field"] == "model"
        assert c.get("/v1/models/compatibility").status_code == 200


def test_overview_prefix_hits_are_the_metrics_count_when_the_head_waits(tmp_path: Path) -> None:
    """On a 3,000-token pool, the second long call's prompt hits the cache but its output
    does not fit beside the first's: it waits at the head of the queue for the first to end,
    and every plan meanwhile matched its prompt again. The overview reports the hits of
    calls that ran (``call.scheduled``), the figure of /metrics, not every failed match."""
    config = make_config(tmp_path / "hits.duckdb", max_total_tokens=3_000)
    config = replace(config, runtime_extra={"time_scale": 0.05, "host_kv_tokens": 0})
    text = "the shared task of both programs " * 70  # ~600 prompt tokens
    scheduled: list[Event] = []
    with LiveServer(config) as server:
        server.wait_ready()
        server.live.hub.subscribe(
            lambda e: scheduled.append(e) if e.kind is EventKind.CALL_SCHEDULED else None
        )

        def call(program: str, tokens: int) -> None:
            extra = {"agentconsole": {"program_id": program}, "ignore_eos": True}
            body = chat_body(text, max_tokens=tokens, **extra)
            with server.client() as c:
                assert c.post("/v1/chat/completions", json=body).status_code == 200

        call("warm", 4)  # caches the prompt
        first = threading.Thread(target=call, args=("first", 1_500))
        first.start()
        wait_until(lambda: any(e.program_id == "first" for e in scheduled))
        call("second", 1_500)
        first.join(30)
        with server.client("sk-operator") as ops:
            overview = ops.get("/v1/overview").json()
        counts = server.live.metrics.counts
    by_program = {e.program_id: e for e in scheduled}
    assert float(str(by_program["second"].data["hit_tokens"])) > 500  # it found the prompt cached
    assert float(str(by_program["second"].data["queue_s"])) > 1.0  # behind the first
    assert overview["prefix_hit_tokens"] == counts["prefix_hit_tokens"]
    assert counts["prefix_hit_tokens"] == sum(float(str(e.data["hit_tokens"])) for e in scheduled)
