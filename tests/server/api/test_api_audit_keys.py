"""Every operator-key action is audited on any route (the tenant routes included), and so is
every refused call on an operator route: no key, an unknown key, a tenant key; core and tool
gateway routes alike. The audit table never holds a key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.api.harness import OPERATOR, LiveServer, chat_body, gateway_server, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with gateway_server(Path(tmp_path_factory.mktemp("audit")) / "audit.duckdb") as live:
        yield live


def audit(server: LiveServer) -> list[dict[str, Any]]:
    with server.client(OPERATOR) as op:
        rows: list[dict[str, Any]] = op.get("/v1/operator/audit", params={"limit": 1000}).json()[
            "actions"
        ]
    return rows


def find(server: LiveServer, **match: str) -> dict[str, Any]:
    """The newest audit row with these fields (refused calls are queued: polled)."""
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [r for r in audit(server) if all(r[k] == v for k, v in match.items())]
        return bool(found)

    wait_until(seen, timeout=5, interval=0.05)
    return found[0]


def test_an_operator_cancel_on_the_tenant_route_is_audited(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        a.post("/v1/chat/completions", json=chat_body(agentconsole={"program_id": "aud-1"}))
    with server.client(OPERATOR) as op:
        cancelled = op.post("/v1/programs/aud-1/cancel")
        again = op.post("/v1/programs/aud-1/finish")
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert again.status_code == 409
    row = find(server, action="cancel", target="aud-1")
    assert row["actor"].startswith("operator-")
    assert row["result"] == "ok"
    refused = find(server, action="finish", target="aud-1")
    assert refused["result"].startswith("refused: ")


def test_operator_key_changes_on_tenant_routes_are_audited(server: LiveServer) -> None:
    with server.client(OPERATOR) as op:
        assert op.post("/v1/programs", json={"program_id": "aud-2"}).status_code == 201
        node = {"node_id": "t1", "kind": "tool", "tool": "search"}
        assert op.post("/v1/programs/aud-2/nodes", json=node).status_code == 201
        assert op.post("/v1/programs/aud-2/finish", json={"success": True}).status_code == 200
    assert find(server, action="create", target="aud-2")["result"] == "ok"
    added = find(server, action="add_node", target="aud-2")
    assert added["args"]["node_id"] == "t1"
    assert find(server, action="finish", target="aud-2")["args"] == {"success": True}


def test_a_tenant_keys_own_changes_are_not_operator_actions(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": "aud-3"}).status_code == 201
        assert a.post("/v1/programs/aud-3/cancel").status_code == 200
    assert not [r for r in audit(server) if r["target"] == "aud-3"]


@pytest.mark.parametrize(
    ("key", "actor", "status"),
    [(None, "anonymous", 401), ("sk-wrong", "unknown-", 401), ("sk-a", "key-", 403)],
)
@pytest.mark.parametrize(
    ("method", "path", "action"),
    [
        ("POST", "/v1/operator/drain", "drain"),
        ("POST", "/v1/operator/programs/aud-9/preempt", "preempt"),
        ("GET", "/v1/operator/audit", "audit"),
        ("GET", "/v1/operator/door", "door"),
        ("GET", "/v1/operator/tool-calls", "tool.list_calls"),
        ("POST", "/v1/operator/tool-calls/tc-9/reconcile", "tool.reconcile"),
    ],
)
def test_refused_calls_on_operator_routes_are_audited(
    server: LiveServer,
    key: str | None,
    actor: str,
    status: int,
    method: str,
    path: str,
    action: str,
) -> None:
    before = {r["id"] for r in audit(server)}
    with server.client(key) as client:
        response = client.request(method, path, json={"enabled": True})
    assert response.status_code == status, response.text
    rows: list[dict[str, Any]] = []

    def recorded() -> bool:
        rows[:] = [r for r in audit(server) if r["id"] not in before and r["action"] == action]
        return bool(rows)

    wait_until(recorded, timeout=5, interval=0.05)
    row = rows[0]
    assert row["actor"].startswith(actor)  # the gateway names keys as the core does
    assert row["result"] != "ok"
    assert "sk-" not in str(row)


def test_an_operator_call_whose_body_is_refused_is_audited(server: LiveServer) -> None:
    """Litestar's own validation refusal on an operator route is audited as the handlers'
    refusals are (the operator's key id, ``refused: 422 ...``)."""
    with server.client("sk-a") as a:
        a.post("/v1/chat/completions", json=chat_body(agentconsole={"program_id": "aud-v"}))
    with server.client(OPERATOR) as op:
        bad = op.post("/v1/operator/programs/aud-v/boost", json={"amount": "x"})
        garbled = op.post(
            "/v1/operator/drain", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert bad.status_code == 422
    assert garbled.status_code == 400
    row = find(server, action="boost", target="aud-v")
    assert row["actor"].startswith("operator-")
    assert row["result"].startswith("refused: 422")
    wait_until(
        lambda: any(
            r["action"] == "drain" and r["result"].startswith("refused: 400") for r in audit(server)
        ),
        timeout=5,
    )
