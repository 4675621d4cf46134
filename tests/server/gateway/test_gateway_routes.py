"""The HTTP layer in-process: error shapes, DI wiring, agent-run tool reports, operators."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar import Litestar
from litestar.exceptions import ImproperlyConfiguredException
from litestar.testing import TestClient

from agentconsole.server.gateway import (
    GATEWAY_CONTROLLERS,
    GatewayConfig,
    ToolGateway,
    gateway_dependencies,
)
from agentconsole.server.store import Store
from tests.server.gateway.fakes import FakePort
from tests.server.gateway.helpers import tool_body
from tests.server.gateway.mini_server import OPERATOR, TENANT_A, TENANT_B, in_process


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient[Litestar], FakePort]]:
    config = GatewayConfig(ledger_path=tmp_path / "l.jsonl")
    with in_process(tmp_path / "s.duckdb", config) as (http, _, port):
        yield http, port


def test_register_list_call_and_replay(client: tuple[TestClient[Litestar], FakePort]) -> None:
    http, _ = client
    created = http.post(
        "/v1/tools", json=tool_body("echo", {"type": "builtin", "name": "echo"}), headers=TENANT_A
    )
    assert created.status_code == 201
    assert created.json()["owner"] == "tenant-a"
    assert [t["name"] for t in http.get("/v1/tools", headers=TENANT_A).json()["tools"]] == ["echo"]
    assert http.get("/v1/tools", headers=TENANT_B).json()["tools"] == []
    body = {"program_id": "p", "node_id": "n", "arguments": {"text": "hi"}}
    first = http.post("/v1/tools/echo/call", json=body, headers=TENANT_A).json()
    second = http.post("/v1/tools/echo/call", json=body, headers=TENANT_A).json()
    assert first["status"] == "committed"
    assert second["status"] == "replayed"
    assert first["result"] == second["result"] == {"arguments": {"text": "hi"}}
    refused = http.post("/v1/tools/echo/call", json=body, headers=TENANT_B)
    assert refused.status_code == 404
    assert refused.json()["error"]["type"] == "tool_not_found"


def test_errors_have_the_api_shape(client: tuple[TestClient[Litestar], FakePort]) -> None:
    http, _ = client
    http.post(
        "/v1/tools", json=tool_body("echo", {"type": "builtin", "name": "echo"}), headers=TENANT_A
    )
    bad = http.post(
        "/v1/tools/echo/call",
        json={"program_id": "p", "node_id": "n", "arguments": {"text": 5}},
        headers=TENANT_A,
    )
    assert bad.status_code == 422
    assert bad.json() == {
        "error": {
            "type": "invalid_arguments",
            "message": "5 is not of type 'string'",
            "field": "arguments/text",
            "param": "arguments/text",  # OpenAI's keys, as every route sends them
            "code": "invalid_arguments",
        }
    }
    big = http.post("/v1/tools/echo/call", content=b"{" + b" " * 70_000 + b"}", headers=TENANT_A)
    assert big.status_code == 413
    assert big.json()["error"]["type"] == "too_large"


def test_agent_run_tools_are_reported_not_executed(
    client: tuple[TestClient[Litestar], FakePort],
) -> None:
    http, port = client
    agent_tool = tool_body("browser", {"type": "agent"})
    assert http.post("/v1/tools", json=agent_tool, headers=TENANT_A).status_code == 201
    call = http.post(
        "/v1/tools/browser/call",
        json={"program_id": "p", "node_id": "n", "arguments": {}},
        headers=TENANT_A,
    )
    assert call.status_code == 422
    port.create("tenant-a", "p")  # a report names a program the tenant has
    started = http.post(
        "/v1/programs/p/tool-calls/start",
        json={"node_id": "t1", "tool": "browser"},
        headers=TENANT_A,
    )
    assert started.status_code == 200
    finished = http.post(
        "/v1/programs/p/tool-calls/finish",
        json={"node_id": "t1", "outcome": "timeout", "latency_s": 2.5},
        headers=TENANT_A,
    )
    assert finished.json()["latency_s"] == 2.5
    assert port.events == [("started", "p", "t1", ""), ("finished", "p", "t1", "timeout")]
    theirs = http.post(
        "/v1/programs/p/tool-calls/finish",
        json={"node_id": "t1", "outcome": "ok"},
        headers=TENANT_B,
    )
    assert theirs.status_code == 404
    unknown = http.post(
        "/v1/programs/p/tool-calls/finish",
        json={"node_id": "zz", "outcome": "ok"},
        headers=TENANT_A,
    )
    assert unknown.status_code == 404
    wrong = http.post(
        "/v1/programs/p/tool-calls/finish",
        json={"node_id": "t1", "outcome": "meh"},
        headers=TENANT_A,
    )
    assert wrong.status_code == 422


def test_operator_routes_need_an_operator_key(
    client: tuple[TestClient[Litestar], FakePort],
) -> None:
    http, _ = client
    assert http.get("/v1/operator/tool-calls", headers=TENANT_A).status_code == 403
    listing = http.get(
        "/v1/operator/tool-calls", params={"state": "needs_reconcile"}, headers=OPERATOR
    )
    assert listing.json() == {"tool_calls": []}
    assert (
        http.get("/v1/operator/tool-calls", params={"state": "bogus"}, headers=OPERATOR).status_code
        == 422
    )
    missing = http.post(
        "/v1/operator/tool-calls/tc_x/reconcile", json={"action": "retry"}, headers=OPERATOR
    )
    assert missing.status_code == 404


def test_a_missing_dependency_fails_at_start_not_as_a_query_parameter(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        gateway = ToolGateway(store)
        dependencies = gateway_dependencies(gateway, FakePort())
        with pytest.raises(ImproperlyConfiguredException, match=r"principal"):
            Litestar(route_handlers=list(GATEWAY_CONTROLLERS), dependencies=dependencies)


def test_a_tenant_sees_only_the_type_of_an_executor_it_did_not_register(
    client: tuple[TestClient[Litestar], FakePort],
) -> None:
    http, _ = client
    url = "http://10.0.0.7/internal-only"
    platform = tool_body("internal", {"type": "http", "url": url})
    platform["allowed_tenants"] = ["tenant-a", "tenant-b", "a-secret-customer"]
    assert http.post("/v1/tools", json=platform, headers=OPERATOR).status_code == 201
    own = tool_body("mine", {"type": "builtin", "name": "echo"})
    assert http.post("/v1/tools", json=own, headers=TENANT_A).status_code == 201

    def executors(headers: dict[str, str]) -> dict[str, object]:
        listing = http.get("/v1/tools", headers=headers).json()["tools"]
        return {t["name"]: t["executor"] for t in listing}

    assert executors(TENANT_A) == {
        "internal": {"type": "http"},
        "mine": {"type": "builtin", "name": "echo"},
    }
    assert executors(TENANT_B) == {"internal": {"type": "http"}}
    assert executors(OPERATOR)["internal"] == {"type": "http", "url": url}
    # of the tenants allowed, a tenant sees itself only: the others' names are theirs
    (seen,) = http.get("/v1/tools", headers=TENANT_B).json()["tools"]
    assert seen["allowed_tenants"] == ["tenant-b"]
