"""Who the audit names, over real HTTP: an operator key's tool gateway actions under the actor
its core actions have (``operator-<key hash prefix>``), and callers without a valid key, however
many keys they invent, within one shared allowance of the refusal budget."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from agentconsole.server.api.auth import KeyRing, key_hash
from agentconsole.server.refusals import RefusalBudget, is_keyless
from agentconsole.server.store import IntentState
from tests.server.api.harness import OPERATOR, LiveServer, gateway_server
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}
CALL = {"program_id": "probe", "node_id": "n1", "arguments": {}}
OPERATOR_ACTOR = f"operator-{key_hash(OPERATOR)[:8]}"


def _audit(op: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    answer = op.get("/v1/operator/audit", params={"limit": 1000, **params})
    assert answer.status_code == 200, answer.text
    actions: list[dict[str, Any]] = answer.json()["actions"]
    return actions


def _flag_for_reconcile(server: LiveServer, tool_call_id: str) -> None:
    """A side-effecting tool call that ended in doubt: ``needs_reconcile``, as a timeout of a
    tool without a downstream key leaves it."""
    intents = server.live.store.intents
    claim = intents.claim(
        tool_call_id, "h", "prog", "n1", "send_mail", side_effect=True, idempotent=False
    ).result(10)
    intents.flag(tool_call_id, "timed out", claim.epoch).result(10)
    (record,) = server.live.store.repo.list_intents(state=IntentState.NEEDS_RECONCILE)
    assert record.tool_call_id == tool_call_id


def test_an_operators_gateway_actions_are_audited_under_its_core_actor(tmp_path: Path) -> None:
    with gateway_server(tmp_path / "actor.duckdb") as server:
        _flag_for_reconcile(server, "tc_mail")
        with server.client(OPERATOR) as op:
            assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
            assert op.post("/v1/tools", json=tool_body("platform_echo", ECHO)).status_code == 201
            settled = op.post(
                "/v1/operator/tool-calls/tc_mail/reconcile", json={"action": "commit", "result": 1}
            )
            assert settled.status_code == 200, settled.text
            missing = op.post("/v1/operator/tool-calls/tc_none/reconcile", json={"action": "retry"})
            assert missing.status_code == 404
            mine = _audit(op, actor=OPERATOR_ACTOR)
            under_the_tenant_name = _audit(op, actor="operator")
    done = {(r["action"], r["target"], r["result"].split(":")[0]) for r in mine}
    assert {
        ("drain", "", "ok"),
        ("tool.register", "tool:platform_echo", "ok"),
        ("tool.reconcile", "tool_call:tc_mail", "ok"),
        ("tool.reconcile", "tool_call:tc_none", "refused"),
    } <= done
    assert under_the_tenant_name == []


def test_an_operators_gateway_refusals_are_audited_past_the_budget(tmp_path: Path) -> None:
    with gateway_server(tmp_path / "exempt.duckdb") as server:
        budget = server.live.desk.refusals
        budget.per_minute = budget.per_actor = 1
        with server.client("sk-b") as b:
            assert b.post("/v1/tools/nope/call", json=CALL).status_code == 404  # uses it up
        with server.client(OPERATOR) as op:
            for i in range(3):
                missing = op.post(f"/v1/operator/tool-calls/tc_{i}/reconcile", json={})
                assert missing.status_code == 422
            mine = _audit(op, actor=OPERATOR_ACTOR)
    assert [r["target"] for r in mine] == [f"tool_call:tc_{i}" for i in (2, 1, 0)]


def test_callers_with_invented_keys_share_one_allowance_of_the_refusal_budget(
    tmp_path: Path,
) -> None:
    """700 callers each with a key of no one's (rotated every request) fill, with the
    server's default budget, no more of a minute's audit rows than one caller may: a tenant's
    refusals after them, on the core's routes and the gateway's, are still audited."""
    with gateway_server(tmp_path / "invented.duckdb") as server:
        budget = server.live.desk.refusals
        with server.client(None) as anonymous:
            for _ in range(700):
                invented = {"Authorization": f"Bearer sk-{uuid.uuid4().hex}"}
                refused = anonymous.get("/v1/operator/tool-calls", headers=invented)
                assert refused.status_code == 401
        with server.client("sk-b") as b:
            assert b.get("/v1/operator/audit").status_code == 403
            assert b.post("/v1/tools/nope/call", json=CALL).status_code == 404
        with server.client(OPERATOR) as op:
            rows = _audit(op)
    invented_rows = [r for r in rows if r["actor"].startswith("unknown-")]
    assert len(invented_rows) == budget.per_actor  # each still named by its own key's hash
    assert len({r["actor"] for r in invented_rows}) == budget.per_actor
    tenant_b_key = f"key-{key_hash('sk-b')[:8]}"
    refused_b = {
        (r["actor"], r["action"]) for r in rows if r["actor"] in (tenant_b_key, "tenant-b")
    }
    # the core and the gateway name the key alike: one caller, one allowance
    assert refused_b == {(tenant_b_key, "audit"), (tenant_b_key, "tool.call")}


def test_the_key_rings_names_for_callers_without_a_valid_key_are_keyless() -> None:
    ring = KeyRing({"sk-a": "tenant-a"}, ["sk-op"])
    assert is_keyless(KeyRing.actor_of(None))
    assert is_keyless(KeyRing.actor_of("Bearer sk-nobody"))
    assert not any(is_keyless(ring.resolve(f"Bearer {key}").key_id) for key in ("sk-a", "sk-op"))


def test_keyless_callers_share_one_allowance_apart_from_any_tenants() -> None:
    budget = RefusalBudget(per_minute=10, per_actor=2)
    invented = [budget.take(0.0, f"unknown-{i:08x}", keyless=True) for i in range(5)]
    assert invented == [True, True, False, False, False]
    # an actor merely named like the keyless one (a tenant called so, as an embedded gateway
    # without keys names its callers) keeps its own share
    assert [budget.take(1.0, "anonymous") for _ in range(3)] == [True, True, False]
    assert budget.take(61.0, "unknown-new", keyless=True)  # a new minute, a new allowance
