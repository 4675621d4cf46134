"""With the store's writer stopped by a fatal error, every route that records state answers
503 ``unavailable`` (retryable), as a chat call does, while the read routes still answer (the
program listing from the rows committed before the death): a write answered 2xx would be lost
without a word.

One server for the module: what the tests need is set up while the store records, then the
store dies (a writer lane stopped by a fatal error does not come back), so every test sees
the same dead store whatever their order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.api.harness import LiveServer, gateway_server
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}
AGENT_RUN = {"type": "agent"}
REPORTS = "/v1/programs/ds-report/tool-calls"
#: the programs created (and their rows committed) before the store dies
COMMITTED = ("ds-kept", "ds-nodes", "ds-report", "ds-ops")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("dead-store")) / "dead.duckdb"
    with gateway_server(db) as live:
        with live.client() as c:
            for name, executor in (("echo", ECHO), ("browser", AGENT_RUN)):
                assert c.post("/v1/tools", json=tool_body(name, executor)).status_code == 201
            for program_id in COMMITTED:
                created = c.post("/v1/programs", json={"program_id": program_id})
                assert created.status_code == 201, created.text
            started = c.post(f"{REPORTS}/start", json={"node_id": "t1", "tool": "browser"})
            assert started.status_code == 200, started.text
            # a listing commits the programs' rows: what the dead store's listing reads back
            assert c.get("/v1/programs").json()["total"] == len(COMMITTED)
        # what a fatal DuckDB error (a failed fsync, an invalidated database) leaves
        live.live.store.writer._lanes[0].abort(RuntimeError("disk gone"))
        assert not live.live.service.store_alive()
        yield live


def assert_refused(response: httpx.Response) -> None:
    """The chat call's refusal: 503 ``unavailable``, retryable, naming the store."""
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "unavailable"
    assert error["code"] == "unavailable"
    assert "store cannot record" in error["message"]
    assert response.headers["x-should-retry"] == "true"


def test_program_creation_is_refused_and_reads_still_answer(server: LiveServer) -> None:
    with server.client() as c:
        assert_refused(c.post("/v1/programs", json={"program_id": "ds-lost"}))
        kept = c.get("/v1/programs/ds-kept")
        assert kept.status_code == 200, kept.text
        assert kept.json()["state"] == "running"
        assert c.get("/v1/programs/ds-lost").status_code == 404  # nothing half-made
        assert c.get("/v1/tools").status_code == 200
        assert c.get("/v1/overview").status_code == 200


def test_the_program_listing_answers_from_the_rows_committed_before_the_death(
    server: LiveServer,
) -> None:
    """The listing brings the store's rows up to date first, which a dead writer cannot: it
    reads the rows that committed before instead (a dead store takes no read down)."""
    with server.client() as c:
        listing = c.get("/v1/programs")
        assert listing.status_code == 200, listing.text
        body = listing.json()
        assert sorted(p["program_id"] for p in body["programs"]) == sorted(COMMITTED)
        assert body["total"] == len(COMMITTED)
        assert {p["state"] for p in body["programs"]} == {"running"}
        page = c.get("/v1/programs", params={"limit": 2})
        assert page.status_code == 200, page.text
        rest = c.get("/v1/programs", params={"cursor": page.json()["next_cursor"]})
        assert rest.status_code == 200, rest.text
        paged = [p["program_id"] for p in page.json()["programs"] + rest.json()["programs"]]
        assert sorted(paged) == sorted(COMMITTED)


def test_node_declaration_is_refused(server: LiveServer) -> None:
    node = {"node_id": "t1", "kind": "tool", "tool": "search"}
    with server.client() as c:
        assert_refused(c.post("/v1/programs/ds-nodes/nodes", json=node))
        program = c.get("/v1/programs/ds-nodes")
        assert program.status_code == 200, program.text
        assert program.json()["nodes"] == []


def test_tool_reports_are_refused(server: LiveServer) -> None:
    finish = {"node_id": "t1", "outcome": "ok", "latency_s": 0.5}
    with server.client() as c:
        assert_refused(c.post(f"{REPORTS}/finish", json=finish))
        assert_refused(c.post(f"{REPORTS}/start", json={"node_id": "t2", "tool": "browser"}))
        node = c.get("/v1/programs/ds-report/nodes/t1")
        assert node.status_code == 200, node.text
        assert node.json()["state"] == "running"  # a result it could not keep ended nothing


def test_gateway_tool_calls_are_refused(server: LiveServer) -> None:
    body = {"program_id": "ds-gateway", "node_id": "n1", "arguments": {"text": "hi"}}
    with server.client() as c:
        assert_refused(c.post("/v1/tools/echo/call", json=body))
        assert_refused(c.post("/v1/tools", json=tool_body("echo2", ECHO)))
        tools = c.get("/v1/tools")
        assert tools.status_code == 200, tools.text
        assert [t["name"] for t in tools.json()["tools"]] == ["browser", "echo"]


def test_program_ends_and_operator_actions_are_refused(server: LiveServer) -> None:
    with server.client() as c, server.client("sk-operator") as op:
        assert_refused(c.post("/v1/programs/ds-ops/finish", json={"success": True}))
        assert_refused(c.post("/v1/programs/ds-ops/cancel"))
        assert_refused(op.post("/v1/operator/programs/ds-ops/boost", json={"amount": 1.0}))
        assert_refused(op.post("/v1/operator/drain", json={"enabled": True}))
        assert op.get("/v1/operator/door").status_code == 200
        assert c.get("/v1/programs/ds-ops").json()["state"] == "running"


def test_a_tenant_key_on_an_operator_route_is_still_forbidden(server: LiveServer) -> None:
    """The role check answers before the store's: a tenant's operator call can only ever be
    a 403, and a retryable 503 would have clients retry it for nothing."""
    with server.client() as c:
        refused = c.post("/v1/operator/drain", json={"enabled": True})
        assert refused.status_code == 403, refused.text
        assert refused.headers.get("x-should-retry") != "true"
