"""The consoles learn the key's role (``GET /v1/whoami``) and the policy names
(``GET /v1/operator/policy``) from the server, instead of from a 403 or a typed name."""

from __future__ import annotations

from agentconsole.kvtiers.toolwait import available_tool_wait_policies
from agentconsole.scheduler.policies import available
from agentconsole.server.api.auth import key_hash
from tests.server.api.harness import OPERATOR, LiveServer


def test_whoami_names_the_principal_and_never_the_key(server: LiveServer) -> None:
    with server.client("sk-a") as tenant, server.client(OPERATOR) as op:
        mine = tenant.get("/v1/whoami")
        theirs = op.get("/v1/whoami").json()
    assert mine.status_code == 200
    assert mine.json() == {
        "tenant": "tenant-a",
        "operator": False,
        "key_id": f"key-{key_hash('sk-a')[:8]}",
    }
    assert theirs == {
        "tenant": "operator",
        "operator": True,
        "key_id": f"operator-{key_hash(OPERATOR)[:8]}",
    }
    assert "sk-a" not in mine.text


def test_whoami_needs_a_key(server: LiveServer) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get("/v1/whoami").status_code == 401
    with server.client("sk-unknown") as stranger:
        assert stranger.get("/v1/whoami").status_code == 401


def test_the_policy_choices_are_the_names_the_switch_accepts(server: LiveServer) -> None:
    with server.client(OPERATOR) as op:
        before = op.get("/v1/operator/policy")
        assert before.status_code == 200
        choices = before.json()
        assert choices["policies"] == available()
        assert choices["kv_policies"] == available_tool_wait_policies()
        overview = op.get("/v1/overview").json()
        assert (choices["policy"], choices["kv_policy"]) == (
            overview["policy"],
            overview["kv_policy"],
        )
        # every name offered is one the switch takes; the answer then shows it in force
        policy = next(n for n in choices["policies"] if n != choices["policy"])
        kv_policy = next(n for n in choices["kv_policies"] if n != choices["kv_policy"])
        switched = op.post("/v1/operator/policy", json={"policy": policy, "kv_policy": kv_policy})
        assert switched.status_code == 200
        after = op.get("/v1/operator/policy").json()
        # the server is shared: leave the policies in force as they were
        back = {"policy": choices["policy"], "kv_policy": choices["kv_policy"]}
        assert op.post("/v1/operator/policy", json=back).status_code == 200
    assert (after["policy"], after["kv_policy"]) == (policy, kv_policy)


def test_a_tenant_key_is_refused_the_policy_choices(server: LiveServer) -> None:
    with server.client("sk-a") as tenant:
        assert tenant.get("/v1/operator/policy").status_code == 403
        assert tenant.get("/v1/whoami").json()["operator"] is False
