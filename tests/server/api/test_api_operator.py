"""Operator actions need the operator key and every one is audited (refusals too)."""

from __future__ import annotations

from tests.server.api.harness import LiveServer, chat_body


def test_operator_actions_are_audited(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        a.post("/v1/chat/completions", json=chat_body(agentconsole={"program_id": "op-1"}))
    with server.client("sk-operator") as op:
        assert op.post("/v1/operator/programs/op-1/preempt").json()["preempted_calls"] == []
        boost = op.post("/v1/operator/programs/op-1/boost", json={"amount": 5}).json()
        assert boost["boost"] == 5
        assert op.post("/v1/operator/drain", json={"enabled": True}).json() == {"draining": True}
        assert op.get("/v1/overview").json()["draining"] is True
        assert op.get("/v1/runtime").json()["paused"] is True
        assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
        policy = op.post("/v1/operator/policy", json={"policy": "fcfs", "kv_policy": "keep"})
        assert policy.json() == {"policy": "fcfs", "kv_policy": "keep"}
        assert op.get("/v1/overview").json()["policy"] == "fcfs"
        refused = op.post("/v1/operator/policy", json={"policy": "nope"})
        assert refused.status_code == 422
        op.post("/v1/operator/policy", json={"policy": "cp-cache", "kv_policy": "adaptive"})
        cancel = op.post("/v1/operator/programs/op-1/cancel").json()
        assert cancel["state"] == "cancelled"
        assert op.post("/v1/operator/programs/missing-9/cancel").status_code == 404
        actions = op.get("/v1/operator/audit", params={"limit": 50}).json()["actions"]
    seen = [(a["action"], a["target"], a["result"]) for a in actions]
    assert ("preempt", "op-1", "ok") in seen
    assert ("boost", "op-1", "ok") in seen
    assert ("drain", "", "ok") in seen
    assert ("cancel", "op-1", "ok") in seen
    assert any(a == "policy" and r.startswith("refused") for a, _, r in seen)
    assert any(a == "cancel" and t == "missing-9" and r.startswith("refused") for a, t, r in seen)
    # (refused keys are audited too: test_api_hostile_audit.py)
    acted = [a for a in actions if not a["result"].startswith(("refused: 401", "refused: 403"))]
    assert all(a["actor"].startswith("operator-") for a in acted)
    boost_row = next(a for a in actions if a["action"] == "boost")
    assert boost_row["args"] == {"amount": 5.0}


def test_tenant_keys_cannot_act_as_operator(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        for path in ("/v1/operator/programs/op-1/preempt", "/v1/operator/programs/op-1/cancel"):
            assert a.post(path).status_code == 403
        assert a.get("/v1/operator/audit").status_code == 403
