"""The tenants view counts a wait at the program door while it runs, over real HTTP: a
program held there starves its tenant now, not only once the door lets it in; and a wait the
store recorded before a restart still counts after it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.scheduler.eventdata import number
from agentconsole.scheduler.events import EventKind
from tests.server.api.harness import LiveServer, chat_body, make_config, wait_until


def _call(client: httpx.Client, program_id: str) -> httpx.Response:
    # a task of its own: a prompt another program computed already would be shared, size 0
    task = f"hello, this is the task of {program_id}"
    body = {**chat_body(task, max_tokens=4), "agentconsole": {"program_id": program_id}}
    return client.post("/v1/chat/completions", json=body)


def _door_server(db: Path) -> LiveServer:
    """The door on, a one-token budget: a second program waits while the first runs."""
    config = make_config(
        db, program_admission=True, admission_budget_tokens=1, admission_wait_s=30.0
    )
    return LiveServer(config)


def _held(server: LiveServer) -> tuple[threading.Thread, dict[str, Any]]:
    """Tenant a's "first" started; tenant b's "held" calls on a thread of its own and waits at
    the door (asserted). Returns the thread and the dict that gets its response."""
    with server.client("sk-a") as a:
        assert _call(a, "first").status_code == 200
    result: dict[str, Any] = {}

    def call() -> None:
        with server.client("sk-b") as b:
            result["response"] = _call(b, "held")

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: server.live.service.door.waiting == 1, timeout=5)
    return thread, result


def _tenant_b(server: LiveServer) -> dict[str, Any]:
    with server.client("sk-b") as b:
        (row,) = b.get("/v1/tenants").json()["tenants"]
    assert isinstance(row, dict)
    assert row["tenant"] == "tenant-b"
    return row


def _recorded_wait(server: LiveServer) -> float:
    """The ``door_s`` of tenant b's one ``program.door_waited`` event (from the hub's ring)."""
    hub = server.live.hub
    events, _ = hub.since(hub.first_seq - 1, tenant="tenant-b", limit=10_000)
    (waited,) = [e for _, e in events if e.kind is EventKind.PROGRAM_DOOR_WAITED]
    return number(waited.data, "door_s")


def test_a_program_held_at_the_door_starves_its_tenant_before_its_wait_ends(
    tmp_path: Path,
) -> None:
    with _door_server(tmp_path / "door.duckdb") as server:
        server.wait_ready()
        waiter, result = _held(server)
        time.sleep(0.3)
        during = _tenant_b(server)
        assert "response" not in result  # still at the door
        # no service yet: its wait so far over the service floor (0.05 s)
        assert during["starvation"] > 0.25 / 0.05
        assert during["max_queue_wait_s"] >= 0.3
        time.sleep(0.2)
        assert _tenant_b(server)["max_queue_wait_s"] >= during["max_queue_wait_s"] + 0.2
        with server.client("sk-a") as a:
            assert a.post("/v1/programs/first/finish", json={}).status_code == 200
        waiter.join(10)
        assert result["response"].status_code == 200, result["response"].text
        recorded = _recorded_wait(server)
        assert recorded >= 0.5
        after = _tenant_b(server)
        assert after["max_queue_wait_s"] == pytest.approx(recorded)  # counted once
        time.sleep(0.1)
        assert _tenant_b(server)["max_queue_wait_s"] == pytest.approx(recorded)


def test_a_door_wait_recorded_before_a_restart_still_counts_after_it(tmp_path: Path) -> None:
    db = tmp_path / "restart.duckdb"
    with _door_server(db) as first:
        first.wait_ready()
        waiter, result = _held(first)
        time.sleep(0.3)
        with first.client("sk-a") as a:
            assert a.post("/v1/programs/first/finish", json={}).status_code == 200
        waiter.join(10)
        assert result["response"].status_code == 200, result["response"].text
        before = _tenant_b(first)
        assert before["max_queue_wait_s"] == pytest.approx(_recorded_wait(first))
        assert before["max_queue_wait_s"] >= 0.3
    with _door_server(db) as second:
        second.wait_ready()
        assert "held" in second.live.service.controller.programs  # rebuilt, still running
        after = _tenant_b(second)
        assert after["max_queue_wait_s"] == pytest.approx(before["max_queue_wait_s"])
        assert (
            after["starvation"]
            >= before["max_queue_wait_s"]
            / max(second.live.service.controller.programs["held"].attained_service_s, 0.05)
            - 1e-6
        )


def _declared_and_held(server: LiveServer, think_s: float) -> tuple[float, float]:
    """Tenant a's "first" started; tenant b opens "declared", declares its LLM node "plan"
    ahead, calls it ``think_s`` later and waits at the door (asserted) until "first"
    finishes. Returns the recorded door wait and the call's own engine queue time."""
    with server.client("sk-a") as a:
        assert _call(a, "first").status_code == 200
    with server.client("sk-b") as b:
        assert b.post("/v1/programs", json={"program_id": "declared"}).status_code == 201
        node = {"node_id": "plan", "kind": "llm"}
        assert b.post("/v1/programs/declared/nodes", json=node).status_code == 201
    time.sleep(think_s)  # the agent's own time: the node is ready, nothing calls it yet
    result: dict[str, Any] = {}

    def call() -> None:
        body = chat_body("hello, this is the task of declared", max_tokens=4)
        body["agentconsole"] = {"program_id": "declared", "node_id": "plan"}
        with server.client("sk-b") as b:
            result["response"] = b.post("/v1/chat/completions", json=body)

    waiter = threading.Thread(target=call)
    waiter.start()
    wait_until(lambda: server.live.service.door.waiting == 1, timeout=5)
    time.sleep(0.3)
    with server.client("sk-a") as a:
        assert a.post("/v1/programs/first/finish", json={}).status_code == 200
    waiter.join(10)
    assert result["response"].status_code == 200, result["response"].text
    hub = server.live.hub
    events, _ = hub.since(hub.first_seq - 1, tenant="tenant-b", limit=10_000)
    (finished,) = [e for _, e in events if e.kind is EventKind.CALL_FINISHED]
    return _recorded_wait(server), number(finished.data, "queue_s")


def _assert_queued_in_the_engine_alone(server: LiveServer, engine_queue_s: float) -> None:
    """The declared node "plan" and its program waited ``engine_queue_s`` (its call's own
    figure), as the node's view and the controller show it."""
    with server.client("sk-b") as b:
        node = b.get("/v1/programs/declared/nodes/plan").json()
    assert node["queue_s"] == pytest.approx(engine_queue_s, abs=1e-6)
    program = server.live.service.controller.programs["declared"]
    assert program.wait_s == pytest.approx(engine_queue_s, abs=1e-6)


def test_a_door_wait_of_a_node_declared_ahead_counts_once_after_a_restart(
    tmp_path: Path,
) -> None:
    """The node's queue time is its call's in the engine's queue alone, counted from its
    queueing: neither the agent's time before its call (0.4 s) nor the door's wait (the
    metrics count that once, from the door's events), on the server that ran it (the node's
    view, the program's wait the policies rank by) and rebuilt after a restart (which once
    counted the door's wait twice and the agent's time as queueing)."""
    db = tmp_path / "declared.duckdb"
    with _door_server(db) as first:
        first.wait_ready()
        door_s, engine_queue_s = _declared_and_held(first, think_s=0.4)
        assert door_s >= 0.3
        _assert_queued_in_the_engine_alone(first, engine_queue_s)
        before = _tenant_b(first)
    with _door_server(db) as second:
        second.wait_ready()
        assert "declared" in second.live.service.controller.programs  # rebuilt, still running
        _assert_queued_in_the_engine_alone(second, engine_queue_s)
        after = _tenant_b(second)
        assert after["max_queue_wait_s"] == pytest.approx(before["max_queue_wait_s"])
        assert after["starvation"] == pytest.approx(before["starvation"])
        with second.client("sk-b") as b:
            assert b.post("/v1/programs/declared/finish", json={}).status_code == 200
        wait_until(lambda: second.live.metrics.counts["finished"] == 1, timeout=5)
        report = second.live.metrics.report()
        # its one node's critical path: the door's wait, then the engine's queue
        # (a span rebuilt from epoch seconds loses ~1e-7 s to rounding)
        expected = door_s + engine_queue_s
        assert report["cp_idle_queue_mean_s"] == pytest.approx(expected, abs=1e-6)
        # the console's program shows the figure the overview averages: the door's wait in
        # (it showed the engine's queue alone; 9 s against 243 s in a review's overload run)
        with second.client("sk-b") as b:
            shown = b.get("/v1/programs/declared").json()["critical_path_idle_s"]
            (listed,) = b.get("/v1/programs").json()["programs"]
        assert shown == pytest.approx(expected, abs=1e-6)
        assert listed["critical_path_idle_s"] == pytest.approx(expected, abs=1e-6)
