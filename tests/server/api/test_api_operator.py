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
    # every refused row as documented, ``refused: <status> <reason>`` (the service's refusals
    # read ``refused: program 'missing-9' not found``, with no status to search for)
    assert any(a == "policy" and r.startswith("refused: 422 unknown policy") for a, _, r in seen)
    assert ("cancel", "missing-9", "refused: 404 program 'missing-9' not found") in seen
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


def test_prometheus_tells_refused_operator_actions_from_those_that_acted(
    server: LiveServer,
) -> None:
    """Keyless callers raised ``agentconsole_operator_actions_total`` at will: every refusal
    (401, 403, 404) counted as an operator action."""
    refused = '{action="preempt",result="refused"}'
    acted = '{action="drain",result="ok"}'
    with server.client("sk-operator") as op:
        before = _counts(op.get("/metrics").text)
        with server.client(None) as anonymous:
            for _ in range(3):
                assert anonymous.post("/v1/operator/programs/x/preempt").status_code == 401
        assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200
        assert op.post("/v1/operator/drain", json={"enabled": False}).status_code == 200
        after = _counts(op.get("/metrics").text)
    assert after[refused] - before.get(refused, 0.0) == 3
    assert after[acted] - before.get(acted, 0.0) == 2
    ok = '{action="preempt",result="ok"}'
    assert after.get(ok, 0.0) == before.get(ok, 0.0)  # the refused preempts acted on nothing


def _counts(text: str) -> dict[str, float]:
    """``agentconsole_operator_actions_total``'s value by its labels."""
    name = "agentconsole_operator_actions_total"
    rows = [line[len(name) :].rsplit(" ", 1) for line in text.splitlines()]
    return {row[0]: float(row[1]) for row in rows if row[0].startswith("{") and len(row) == 2}
