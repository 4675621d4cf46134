"""What a cancel leaves running, over real HTTP with the simulated runtime and the gateway.

A side effect the gateway lets run to its commit after a cancel is recorded on its node when
it ends (committed or failed): a ``tool.finished`` event with ``after_cancel``, the node's
tool time, its end and ``outcome_after_cancel``, kept by the store across a restart; the node
and the program stay cancelled. A read-only tool the cancel interrupted records no such end. A
tool the agent runs itself is not reported as interrupted, and its finish report after the
cancel is recorded the same way (a start stays refused). Calls in flight when the wall-time
quota ends the program get the quota's 403, streamed or not.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from tests.loopback_executor import LoopbackExecutor, serving
from tests.server.api.background import call_tool_in_background
from tests.server.api.harness import LiveServer, chat_body, gateway_server, make_config, wait_until
from tests.server.gateway.helpers import tool_body

#: how long the timed loopback executor takes to answer (the other cancel tests' tools)
WRITE_S = 1.5
#: how long the gated one takes once released: the write ends well after the cancel
AFTER_RELEASE_S = 0.3


@contextmanager
def _downstream(delay_s: float = WRITE_S, status: int = 200) -> Iterator[LoopbackExecutor]:
    """A slow write downstream: answers every POST after ``delay_s`` with ``status``, one
    that commits (2xx) or fails."""
    with serving(LoopbackExecutor(lambda: time.sleep(delay_s), status=status)) as served:
        yield served


class _Gated(LoopbackExecutor):
    """A write downstream that answers every POST with ``status`` (one that commits, 2xx,
    or fails) only once :attr:`release` is set, and ``AFTER_RELEASE_S`` later: the write is
    still running when the test cancels, however slow the machine (no fixed window)."""

    def __init__(self, status: int) -> None:
        self.release = threading.Event()
        super().__init__(self._answer_when_released, status=status)

    def _answer_when_released(self) -> None:
        self.release.wait(30)
        time.sleep(AFTER_RELEASE_S)


@contextmanager
def _gated(status: int = 200) -> Iterator[_Gated]:
    with serving(_Gated(status)) as served:
        yield served


def _gateway_server(db: Path) -> LiveServer:
    """A server with the gateway, where a tenant may register a loopback ``http`` tool."""
    config = GatewayConfig(tenant_builtins=None, allow_private_executor_urls=True)
    return LiveServer(make_config(db), extensions=[GatewayExtension(config)])


def _register(c: httpx.Client, url: str, *, side_effect: bool) -> str:
    name = "slow_write" if side_effect else "slow_read"
    body = tool_body(
        name,
        {"type": "http", "url": url},
        side_effect=side_effect,
        idempotent=not side_effect,
        timeout_s=10.0,
    )
    registered = c.post("/v1/tools", json=body)
    assert registered.status_code == 201, registered.text
    return name


@contextmanager
def _served_tool(
    db: Path, downstream: LoopbackExecutor, *, side_effect: bool
) -> Iterator[tuple[LiveServer, httpx.Client, str]]:
    """A ready server with the gateway, a tenant's client of it, and the tool that tenant
    registered on ``downstream`` (see :func:`_register`)."""
    with _gateway_server(db) as server:
        server.wait_ready()
        with server.client() as c:
            yield server, c, _register(c, downstream.url, side_effect=side_effect)


def _cancel_while_running(
    server: LiveServer, c: httpx.Client, tool: str, pid: str, downstream: _Gated
) -> Any:
    """Create ``pid``, call ``tool`` for its node ``t1`` and cancel it while the tool runs
    (``downstream`` holds it until then); returns (the cancel's answer, the node right after
    it, the call's thread and answers)."""
    assert c.post("/v1/programs", json={"program_id": pid}).status_code == 201
    thread, answers = call_tool_in_background(server, tool, pid)
    node = f"/v1/programs/{pid}/nodes/t1"
    # the node runs and the gateway's call reached the tool, which holds it
    wait_until(lambda: downstream.requests == 1 and c.get(node).json()["state"] == "running")
    cancelled = c.post(f"/v1/programs/{pid}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    at_cancel = c.get(node).json()
    downstream.release.set()
    return cancelled.json(), at_cancel, thread, answers


def _tool_events(events: list[Event], pid: str) -> list[Event]:
    return [e for e in events if e.program_id == pid and e.node_id == "t1"]


def _hub_events(server: LiveServer) -> list[Event]:
    hub = server.live.hub
    items, _ = hub.since(hub.oldest_seq() - 1, limit=10**6)
    return [e for _, e in items]


@pytest.mark.parametrize(("status", "outcome"), [(200, "ok"), (500, "fail")])
def test_a_side_effect_that_ends_after_the_cancel_is_recorded_on_its_node(
    tmp_path: Path, status: int, outcome: str
) -> None:
    db = tmp_path / "late.duckdb"
    with (
        _gated(status=status) as writes,
        _served_tool(db, writes, side_effect=True) as (server, c, tool),
    ):
        cancelled, at_cancel, thread, answers = _cancel_while_running(server, c, tool, "p", writes)
        thread.join(30)
        program = c.get("/v1/programs/p").json()
        node = c.get("/v1/programs/p/nodes/t1").json()
        events = _tool_events(_hub_events(server), "p")
    assert cancelled["flagged_tools"] == ["t1"]
    assert cancelled["interrupted_tools"] == []
    assert at_cancel["state"] == "cancelled"
    assert at_cancel["outcome_after_cancel"] is None  # still running
    assert writes.requests == 1
    (answer,) = answers
    if status == 200:
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "committed"
    # the program stays cancelled, and so does the node, which now says what happened
    assert program["state"] == "cancelled"
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] == outcome
    assert node["attempts"] == 1
    assert node["tool_s"] >= AFTER_RELEASE_S * 0.9
    assert node["finished_at"] > program["finished_at"]  # it ended after the cancel
    assert node["timeline"] == [
        {"phase": "tool", "start": node["started_at"], "end": node["finished_at"]}
    ]
    assert [n for n in program["nodes"] if n["node_id"] == "t1"] == [node]
    kinds = [e.kind for e in events]
    assert kinds[-3:] == [EventKind.TOOL_STARTED, EventKind.NODE_CANCELLED, EventKind.TOOL_FINISHED]
    end = events[-1].data
    assert end["after_cancel"] is True
    assert end["outcome"] == outcome
    assert end["node_state"] == "cancelled"
    assert end["latency_s"] == pytest.approx(node["tool_s"])


def test_the_late_effect_is_still_on_its_node_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "restart.duckdb"
    with _gated() as writes:
        with _served_tool(db, writes, side_effect=True) as (first, c, tool):
            cancelled, _, thread, _ = _cancel_while_running(first, c, tool, "p", writes)
            thread.join(30)
            before = c.get("/v1/programs/p/nodes/t1").json()
        with _gateway_server(db) as second:
            second.wait_ready()
            with second.client() as c:
                stored = c.get("/v1/programs/p").json()  # served from the store's rows
                # a cancel naming it again rebuilds it in memory from the rows (changes nothing)
                again = c.post("/v1/programs/p/cancel")
                rebuilt = c.get("/v1/programs/p").json()
            events = second.live.store.repo.events_since(0, program_id="p", limit=10_000)
    assert cancelled["flagged_tools"] == ["t1"]
    assert before["outcome_after_cancel"] == "ok"
    assert again.status_code == 200, again.text
    for program in (stored, rebuilt):
        assert program["state"] == "cancelled"
        (node,) = program["nodes"]
        assert node["state"] == "cancelled"
        assert node["outcome_after_cancel"] == "ok"
        assert node["tool_s"] == pytest.approx(before["tool_s"])
        assert node["finished_at"] == pytest.approx(before["finished_at"])
    # the event log is the record: the late end is there, after the cancel
    ends = [s.event for s in events if s.event.kind is EventKind.TOOL_FINISHED]
    assert [(e.node_id, e.data["after_cancel"], e.data["outcome"]) for e in ends] == [
        ("t1", True, "ok")
    ]
    kinds = [s.event.kind for s in events]
    assert kinds.index(EventKind.PROGRAM_CANCELLED) < kinds.index(EventKind.TOOL_FINISHED)


def test_a_read_only_tool_the_cancel_interrupted_records_no_late_end(tmp_path: Path) -> None:
    db = tmp_path / "read.duckdb"
    with (
        _gated() as reads,
        _served_tool(db, reads, side_effect=False) as (server, c, tool),
    ):
        cancelled, _, thread, answers = _cancel_while_running(server, c, tool, "r", reads)
        thread.join(30)
        node = c.get("/v1/programs/r/nodes/t1").json()
        events = _tool_events(_hub_events(server), "r")
    assert cancelled["interrupted_tools"] == ["t1"]
    assert cancelled["flagged_tools"] == []
    assert answers[0].status_code == 409, answers[0].text  # interrupted: the gateway says so
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] is None
    assert node["tool_s"] == 0.0
    assert EventKind.TOOL_FINISHED not in [e.kind for e in events]


def test_an_agents_own_tool_is_not_interrupted_and_its_end_after_the_cancel_is_recorded(
    tmp_path: Path,
) -> None:
    with gateway_server(tmp_path / "agent.duckdb") as server, server.client() as c:
        for pid in ("a", "b"):
            assert c.post("/v1/programs", json={"program_id": pid}).status_code == 201
            start = {"node_id": "t1", "tool": "my_own_tool"}
            assert c.post(f"/v1/programs/{pid}/tool-calls/start", json=start).status_code == 200
            declared = {"node_id": "t2", "kind": "tool", "tool": "my_own_tool"}
            assert c.post(f"/v1/programs/{pid}/nodes", json=declared).status_code == 201
        cancelled = c.post("/v1/programs/a/cancel").json()
        report = server.run(server.live.service.cancel_program("tenant-a", "b"))
        finish = {"node_id": "t1", "outcome": "ok", "latency_s": 0.5}
        finished = c.post("/v1/programs/a/tool-calls/finish", json=finish)
        node = c.get("/v1/programs/a/nodes/t1").json()
        repeated = c.post("/v1/programs/a/tool-calls/finish", json={**finish, "latency_s": 9.0})
        after_repeat = c.get("/v1/programs/a/nodes/t1").json()
        never_ran = c.post("/v1/programs/a/tool-calls/finish", json={**finish, "node_id": "t2"})
        new_start = c.post(
            "/v1/programs/a/tool-calls/start", json={"node_id": "t3", "tool": "my_own_tool"}
        )
        program = c.get("/v1/programs/a").json()
    # nothing interrupted it: the server does not run it
    assert cancelled["interrupted_tools"] == []
    assert cancelled["flagged_tools"] == []
    assert cancelled["running_tools"] == ["t1"]  # the agent's own, its end still taken
    assert report.interrupted_tools == []
    assert report.running_tools == ["t1"]
    # its end is taken and recorded on its node; the program stays cancelled
    assert finished.status_code == 200, finished.text
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] == "ok"
    assert node["tool_s"] == pytest.approx(0.5)
    assert repeated.status_code == 200, repeated.text  # a retry of the report changes nothing
    assert after_repeat == node
    # a node that was not running at the cancel has no end to record, and nothing starts
    assert never_ran.status_code == 409, never_ran.text
    assert new_start.status_code == 409, new_start.text
    assert program["state"] == "cancelled"
    assert [n["node_id"] for n in program["nodes"]] == ["t1", "t2"]


def _wall_time_server(db: Path) -> LiveServer:
    """A slower simulated runtime: a call of 2,000 tokens runs for seconds."""
    return LiveServer(make_config(db, runtime_extra={"time_scale": 0.5}))


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_in_flight_when_the_wall_time_quota_ends_gets_the_quota_error(
    tmp_path: Path, stream: bool
) -> None:
    with _wall_time_server(tmp_path / "wall.duckdb") as server:
        server.wait_ready()
        with server.client() as c:
            body = {"program_id": "w", "quotas": {"wall_time_s": 0.5}}
            assert c.post("/v1/programs", json=body).status_code == 201
            call = chat_body("go", max_tokens=2000, ignore_eos=True, stream=stream)
            call["agentconsole"] = {"program_id": "w"}
            started = time.monotonic()
            answer = c.post("/v1/chat/completions", json=call)
            took = time.monotonic() - started
            program = c.get("/v1/programs/w").json()
        events = [e for e in _hub_events(server) if e.program_id == "w"]
    assert program["state"] == "cancelled"
    assert took < 10  # stopped by the quota, not run to its end
    # it was in flight (in the engine) when the quota's cancel aborted it
    (aborted,) = [e for e in events if e.kind is EventKind.CALL_ABORTED]
    assert aborted.data["reason"] == "quota"
    assert number(aborted.data, "output_tokens") > 0
    if stream:
        assert answer.status_code == 200
        frames = [
            json.loads(line.removeprefix("data: "))
            for line in answer.text.splitlines()
            if line.startswith("data: {")
        ]
        errors = [f["error"] for f in frames if "error" in f]
        assert [e["type"] for e in errors] == ["quota_exceeded"], answer.text
        assert errors[0]["param"] == "quotas.wall_time_s"
        assert answer.text.rstrip().endswith("data: [DONE]")
    else:
        assert answer.status_code == 403, answer.text
        error = answer.json()["error"]
        assert error["type"] == "quota_exceeded"
        assert error["field"] == "quotas.wall_time_s"
