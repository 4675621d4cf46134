"""A finish, a cancel and a node's declaration name programs that left memory (a restart, the
retention of ended programs) as they name live ones: the caller's stored program is rebuilt
and answered as in memory (a repeated finish or cancel is 200 with the state the first set,
a finish of a cancelled program, a cancel of a finished one and a node of an ended one 409),
while another tenant's stays 404, exactly like an unknown id. Operators act on any tenant's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from tests.server.api.harness import OPERATOR, LiveServer, make_config, wait_until

NODE = {"node_id": "late", "kind": "llm", "parents": []}
#: tenant a's programs that end before they leave memory, and the state each ended in
ENDED = {"k2": "finished", "k3": "cancelled", "k4": "failed"}


def _end_programs(c: httpx.Client) -> None:
    """Tenant a's ``k2`` finished, ``k3`` cancelled and ``k4`` failed."""
    for program_id in ENDED:
        assert c.post("/v1/programs", json={"program_id": program_id}).status_code == 201
    assert c.post("/v1/programs/k2/finish", json={"success": True}).status_code == 200
    assert c.post("/v1/programs/k3/cancel").status_code == 200
    assert c.post("/v1/programs/k4/finish", json={"success": False}).status_code == 200


def _answer(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def _not_running(response: httpx.Response) -> None:
    assert _answer(response, 409)["error"]["code"] == "program_not_running"


def _assert_answered_as_in_memory(c: httpx.Client) -> None:
    """What tenant a's ended programs answer, in memory or not. Each route is the first to
    name one of them, so each must find it out of memory itself."""
    _not_running(c.post("/v1/programs/k2/cancel"))  # finished: a cancel is 409
    _not_running(c.post("/v1/programs/k3/finish"))  # cancelled: a finish is 409
    _not_running(c.post("/v1/programs/k4/nodes", json=NODE))  # ended: no new node
    # idempotent: 200 with the state the first finish or cancel set
    assert _answer(c.post("/v1/programs/k2/finish"), 200)["state"] == "finished"
    assert _answer(c.post("/v1/programs/k4/finish"), 200)["state"] == "failed"
    cancelled = _answer(c.post("/v1/programs/k3/cancel"), 200)
    assert cancelled == {
        "program_id": "k3",
        "state": "cancelled",
        "aborted_calls": [],
        "interrupted_tools": [],
        "flagged_tools": [],
        "running_tools": [],
    }
    _not_running(c.post("/v1/programs/k4/cancel"))
    for program_id in ENDED:
        _not_running(c.post(f"/v1/programs/{program_id}/nodes", json=NODE))
    # nothing of them changed: the states the first finish and cancel set, no node added
    for program_id, state in ENDED.items():
        shown = _answer(c.get(f"/v1/programs/{program_id}"), 200)
        assert (shown["state"], shown["nodes"]) == (state, [])


def _assert_hidden_from_tenant_b(server: LiveServer) -> None:
    """Tenant b's actions on a's stored programs answer as on an unknown id, and rebuild
    nothing (a's programs stay out of memory)."""
    programs = server.live.service.controller.programs
    with server.client("sk-b") as other:
        unknown = _answer(other.post("/v1/programs/never-was/cancel"), 404)
        for program_id in ENDED:
            base = f"/v1/programs/{program_id}"
            for answer in (
                other.post(f"{base}/cancel"),
                other.post(f"{base}/finish"),
                other.post(f"{base}/nodes", json=NODE),
            ):
                body = _answer(answer, 404)
                assert body["error"]["code"] == unknown["error"]["code"] == "not_found"
            assert program_id not in programs


def test_ended_programs_answer_a_finish_cancel_or_node_after_a_restart_as_in_memory(
    tmp_path: Path,
) -> None:
    db = tmp_path / "stored-actions.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            _end_programs(c)
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        programs = second.live.service.controller.programs
        assert not programs.keys() & ENDED.keys()  # ended: read from the store
        _assert_hidden_from_tenant_b(second)
        with second.client() as c:
            _assert_answered_as_in_memory(c)
            assert _answer(c.post("/v1/programs/never-was/finish"), 404)["error"]["code"] == (
                "not_found"
            )


def test_the_operator_cancel_reaches_a_stored_program_of_any_tenant(tmp_path: Path) -> None:
    db = tmp_path / "stored-operator.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client() as c:
            _end_programs(c)
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        with second.client(OPERATOR) as op:
            cancelled = _answer(op.post("/v1/operator/programs/k3/cancel"), 200)
            assert (cancelled["program_id"], cancelled["state"]) == ("k3", "cancelled")
            refused = _answer(op.post("/v1/operator/programs/k2/cancel"), 409)
            assert refused["error"]["code"] == "program_not_running"
            # an operator key on the tenant routes: the operator cancel, and the finish
            assert _answer(op.post("/v1/programs/k3/cancel"), 200)["state"] == "cancelled"
            assert _answer(op.post("/v1/programs/k2/finish"), 200)["state"] == "finished"
            unknown = _answer(op.post("/v1/operator/programs/never-was/cancel"), 404)
            assert unknown["error"]["code"] == "not_found"
            assert _answer(op.get("/v1/programs/k3"), 200)["state"] == "cancelled"


def test_ended_programs_past_their_retention_answer_as_in_memory(tmp_path: Path) -> None:
    # retention 0: the sweep (every 0.5 s) forgets an ended program right after it ends
    config = make_config(tmp_path / "stored-retention.duckdb", retain_finished_s=0.0)
    with LiveServer(config) as server:
        server.wait_ready()
        programs = server.live.service.controller.programs
        with server.client() as c:
            _end_programs(c)
            wait_until(lambda: not programs.keys() & ENDED.keys(), 5)
            # their last rows commit after the writer's linger: read from the store by then
            for program_id, state in ENDED.items():
                path = f"/v1/programs/{program_id}"
                wait_until(lambda p=path, s=state: c.get(p).json().get("state") == s, 5)
            _assert_hidden_from_tenant_b(server)
            _assert_answered_as_in_memory(c)


def test_a_program_rebuilt_before_its_last_rows_commit_keeps_what_its_events_say(
    tmp_path: Path,
) -> None:
    """Rows are written every second, fire-and-forget: a program forgotten right after its
    cancel can leave the store with rows that still say running. Its committed events say
    otherwise, and the rebuild replays them: a finish is refused, not applied to a program
    its client was told is cancelled."""
    config = make_config(tmp_path / "stale.duckdb", retain_finished_s=0.0)
    with LiveServer(config) as server, server.client() as c:
        server.wait_ready()
        programs = server.live.service.controller.programs
        for n in range(3):
            pid = f"stale-{n}"
            assert c.post("/v1/programs", json={"program_id": pid}).status_code == 201
            time.sleep(1.2)  # its rows are written once, as running
            assert c.post(f"/v1/programs/{pid}/cancel").status_code == 200
            wait_until(lambda pid=pid: pid not in programs, timeout=5, interval=0.002)
            finish = c.post(f"/v1/programs/{pid}/finish", json={"success": True})
            assert finish.status_code == 409, finish.text
            assert c.get(f"/v1/programs/{pid}").json()["state"] == "cancelled"
