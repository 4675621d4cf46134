"""A tenant key's gateway actions are audited under the actor its core actions have
(``key-<key hash prefix>``, as ``GET /v1/whoami`` names it), over real HTTP against the real
server and store: an operator filtering ``GET /v1/operator/audit?actor=`` sees one caller, and
that caller's refusals share one allowance of the refusal budget, core and gateway together.
Two keys of one tenant are two callers, as the core has always counted them; the tenant stays
readable in the gateway rows' ``args``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.api.auth import key_hash
from tests.server.api.harness import OPERATOR, TENANT_KEYS, gateway_server

#: tenant-a holds two keys: the core tells them apart, and so must the gateway
TWO_KEYS_OF_ONE_TENANT = {**TENANT_KEYS, "sk-a2": "tenant-a"}
KEY_A = f"key-{key_hash('sk-a')[:8]}"
KEY_A2 = f"key-{key_hash('sk-a2')[:8]}"
CALL = {"program_id": "nobody", "node_id": "n1", "arguments": {}}
START = {"node_id": "n1", "tool": "search"}


def _audit(op: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    """Audit rows, newest first (the route flushes the writer first: refusals queued before
    it are read back)."""
    answer = op.get("/v1/operator/audit", params={"limit": 1000, **params})
    assert answer.status_code == 200, answer.text
    actions: list[dict[str, Any]] = answer.json()["actions"]
    return actions


def test_a_tenant_keys_gateway_and_core_refusals_name_one_actor(tmp_path: Path) -> None:
    db = tmp_path / "actors.duckdb"
    with gateway_server(db, tenant_keys=TWO_KEYS_OF_ONE_TENANT) as server:
        with server.client("sk-a") as a:
            assert a.get("/v1/whoami").json()["key_id"] == KEY_A
            assert a.get("/v1/operator/audit").status_code == 403  # the core's refusal
            assert a.post("/v1/tools/nope/call", json=CALL).status_code == 404
            assert a.post("/v1/programs/nobody/tool-calls/start", json=START).status_code == 404
            assert a.get("/v1/operator/tool-calls").status_code == 403
        with server.client("sk-a2") as a2:
            assert a2.post("/v1/tools/nope/call", json=CALL).status_code == 404
        with server.client(OPERATOR) as op:
            first_key = _audit(op, actor=KEY_A)
            second_key = _audit(op, actor=KEY_A2)
            by_tenant_name = _audit(op, actor="tenant-a")
    assert {r["action"] for r in first_key} == {
        "audit",
        "tool.call",
        "tool.report",
        "tool.list_calls",
    }
    assert all(r["result"].startswith("refused: ") for r in first_key)
    assert [(r["action"], r["target"]) for r in second_key] == [("tool.call", "tool:nope")]
    assert by_tenant_name == []
    # the tenant, which the gateway's rows used to name as their actor, is still in them
    gateway_rows = [r for r in first_key + second_key if r["action"].startswith("tool.")]
    assert {r["args"]["tenant"] for r in gateway_rows} == {"tenant-a"}


def test_a_tenant_keys_refusals_share_one_allowance_across_core_and_gateway(
    tmp_path: Path,
) -> None:
    """With an allowance of 2 a caller, a key refused once by the core and three times by the
    gateway has 2 rows in all; the tenant's other key keeps an allowance of its own."""
    db = tmp_path / "allowance.duckdb"
    with gateway_server(db, tenant_keys=TWO_KEYS_OF_ONE_TENANT) as server:
        budget = server.live.desk.refusals
        budget.per_actor = 2
        with server.client("sk-a") as a:
            assert a.get("/v1/operator/door").status_code == 403
            for _ in range(3):
                assert a.post("/v1/tools/nope/call", json=CALL).status_code == 404
        with server.client("sk-a2") as a2:
            assert a2.post("/v1/tools/nope/call", json=CALL).status_code == 404
        with server.client(OPERATOR) as op:
            first_key = _audit(op, actor=KEY_A)
            second_key = _audit(op, actor=KEY_A2)
        dropped = budget.dropped
    assert [r["action"] for r in first_key] == ["tool.call", "door"]  # newest first
    assert [r["action"] for r in second_key] == ["tool.call"]
    assert dropped == 2
