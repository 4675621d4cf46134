"""A program id the store holds is never opened for a second tenant (``live/ownership.py``).

Before the fix, tenant B could name tenant A's program once it had left memory: B's new
program replaced A's stored row, B then read A's old nodes, and A got 404 for its own program.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentconsole.server.live.errors import NotFound
from agentconsole.server.live.ownership import StoredIds
from tests.server.api.harness import LiveServer, chat_body, make_config


def test_the_id_filter_never_forgets_an_id_and_rarely_claims_a_new_one() -> None:
    stored = StoredIds(lambda _: None, capacity=1000)
    ids = [f"p-{i}" for i in range(5000)]  # five times the first filter's capacity
    for pid in ids:
        stored.add(pid)
    assert all(stored.may_hold(pid) for pid in ids)
    claimed = sum(stored.may_hold(f"q-{i}") for i in range(20_000))
    assert claimed / 20_000 < 0.05
    assert stored.false_positive_bound < 0.05


def test_only_ids_the_filter_may_hold_are_looked_up() -> None:
    looked: list[str] = []

    def lookup(program_id: str) -> str | None:
        looked.append(program_id)
        return "tenant-a" if program_id == "held" else None

    stored = StoredIds(lookup, ["held"])
    assert asyncio.run(stored.owner("held")) == "tenant-a"
    fresh = [f"fresh-{i}" for i in range(200)]
    assert all(asyncio.run(stored.owner(pid)) is None for pid in fresh)
    assert looked[0] == "held"
    assert len(looked) <= 1 + 10  # the held id, and false positives (~1%) only


async def _forget(server: LiveServer, pid: str) -> None:
    server.live.service.forget(pid)


def test_a_stored_programs_id_stays_with_its_tenant(server: LiveServer) -> None:
    pid = "owned-1"
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": pid}).status_code == 201
        body = chat_body(agentconsole={"program_id": pid, "node_id": "a-node"})
        assert a.post("/v1/chat/completions", json=body).status_code == 200
        assert a.post(f"/v1/programs/{pid}/finish", json={}).status_code == 200
        a.get("/v1/programs")  # syncs the projector
    server.run(_forget(server, pid))
    with server.client("sk-b") as b:
        # the same answers as for a program in memory: 409 on create, 404 on first sight
        assert b.post("/v1/programs", json={"program_id": pid}).status_code == 409
        body = chat_body(agentconsole={"program_id": pid, "node_id": "b-node"})
        assert b.post("/v1/chat/completions", json=body).status_code == 404
        assert b.get(f"/v1/programs/{pid}").status_code == 404
    with pytest.raises(NotFound):  # the tool gateway's check
        server.run(server.live.service.tools.check_program("tenant-b", pid))
    with server.client("sk-a") as a:
        stored = a.get(f"/v1/programs/{pid}").json()
        assert stored["tenant"] == "tenant-a"
        assert [n["node_id"] for n in stored["nodes"]] == ["a-node"]
        assert a.post("/v1/programs", json={"program_id": pid}).status_code == 409
        # its owner gets what it would get in memory: the program is rebuilt from the store
        # and is finished (a running one goes on: test_api_restart.py)
        body = chat_body(agentconsole={"program_id": pid, "node_id": "a-next"})
        again = a.post("/v1/chat/completions", json=body)
        assert again.status_code == 409
        assert "finished" in again.json()["error"]["message"]


def test_stored_ids_are_known_again_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "restart.duckdb"
    with LiveServer(make_config(db)) as first:
        first.wait_ready()
        with first.client("sk-a") as a:
            assert a.post("/v1/programs", json={"program_id": "kept-1"}).status_code == 201
    with LiveServer(make_config(db)) as second:
        second.wait_ready()
        body = chat_body(agentconsole={"program_id": "kept-1"})
        with second.client("sk-b") as b:
            assert b.post("/v1/chat/completions", json=body).status_code == 404
        with second.client("sk-a") as a:
            assert a.post("/v1/chat/completions", json=body).status_code == 200
