"""Tenant isolation: programs, listings, calls and the prefix cache (paired assertions)."""

from __future__ import annotations

import httpx

from tests.server.api.harness import LiveServer, chat_body

SECRET = "tenant-a confidential system prompt: " + "lorem ipsum " * 300


def _cached(client: object, text: str, pid: str) -> int:
    body = chat_body(text, agentconsole={"program_id": pid})
    response = client.post("/v1/chat/completions", json=body)  # type: ignore[attr-defined]
    assert response.status_code == 200, response.text
    return int(response.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_other_tenants_program_is_404_everywhere(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": "iso-a"}).status_code == 201
    with server.client("sk-b") as b:
        assert b.get("/v1/programs/iso-a").status_code == 404
        assert b.get("/v1/programs/iso-a/nodes/x").status_code == 404
        assert b.post("/v1/programs/iso-a/cancel").status_code == 404
        assert b.post("/v1/programs/iso-a/finish", json={}).status_code == 404
        node = {"node_id": "x", "kind": "llm"}
        assert b.post("/v1/programs/iso-a/nodes", json=node).status_code == 404
        body = chat_body(agentconsole={"program_id": "iso-a"})
        assert b.post("/v1/chat/completions", json=body).status_code == 404
        assert b.post("/v1/programs", json={"program_id": "iso-a"}).status_code == 409
        assert b.post("/v1/programs", json={"program_id": "iso-b"}).status_code == 201
        listed = b.get("/v1/programs", params={"limit": 1000}).json()["programs"]
        assert all(p["tenant"] == "tenant-b" for p in listed)
        assert b.get("/v1/programs", params={"tenant": "tenant-a"}).json()["total"] == len(
            b.get("/v1/programs", params={"limit": 1000}).json()["programs"]
        )
    with server.client("sk-operator") as op:
        assert op.get("/v1/programs/iso-a").json()["tenant"] == "tenant-a"
        everyone = op.get("/v1/programs", params={"limit": 1000}).json()["programs"]
        assert {"tenant-a", "tenant-b"} <= {p["tenant"] for p in everyone}
        only_a = op.get("/v1/programs", params={"tenant": "tenant-a", "limit": 1000}).json()
        assert only_a["total"] >= 1
        assert {p["tenant"] for p in only_a["programs"]} == {"tenant-a"}


def test_prefix_cache_is_tenant_scoped(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        assert _cached(a, SECRET, "cache-a1") == 0
        control = _cached(a, SECRET, "cache-a2")
    assert control > 0, "positive control: the same tenant must hit its own prefix"
    with server.client("sk-b") as b:
        # forged cache namespaces in the body are ignored (unknown OpenAI fields are dropped)
        forged = chat_body(
            SECRET, cache_salt="tenant-a", extra_key="tenant-a", agentconsole={"program_id": "b0"}
        )
        first = b.post("/v1/chat/completions", json=forged).json()
        probes = [_cached(b, SECRET[: 256 * k], f"cache-b{k}") for k in (2, 4)]
        again = _cached(b, SECRET, "cache-b9")
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert probes[0] > 0  # B's prefix probes hit only B's own first copy
    assert again > 0


def test_tenant_views_are_filtered(server: LiveServer) -> None:
    with server.client("sk-b") as b:
        tenants = b.get("/v1/tenants").json()["tenants"]
        runtime = b.get("/v1/runtime").json()
        kv = b.get("/v1/kv").json()
    assert all(t["tenant"] == "tenant-b" for t in tenants)
    assert all(c["tenant"] == "tenant-b" for c in runtime["queued"] + runtime["running"])
    a_programs = {"iso-a", "cache-a1", "cache-a2"}
    assert not a_programs & set(kv["placement"])


def test_parents_on_another_tenants_program_answer_as_on_an_unknown_one(
    server: LiveServer,
) -> None:
    """A chat call naming parents of a program the caller does not have is refused the same
    way whether another tenant holds the id or nobody does: no oracle of other tenants' ids."""
    with server.client("sk-a") as a:
        body = chat_body(agentconsole={"program_id": "oracle-a", "node_id": "n1"})
        assert a.post("/v1/chat/completions", json=body).status_code == 200

    def refusal(b: httpx.Client, program_id: str) -> tuple[int, str]:
        body = chat_body(agentconsole={"program_id": program_id, "parent_ids": ["n1"]})
        answer = b.post("/v1/chat/completions", json=body)
        return answer.status_code, answer.text.replace(program_id, "<id>")

    with server.client("sk-b") as b:
        foreign = refusal(b, "oracle-a")
        unknown = refusal(b, "oracle-nobody")
        assert b.get("/v1/programs/oracle-nobody").status_code == 404  # none was opened
    assert foreign == unknown
    assert foreign[0] == 404
