"""The four program quotas: tokens (429), tool calls (429), branches (429), wall time (403)."""

from __future__ import annotations

import time

from tests.server.api.harness import LiveServer, chat_body, wait_until


def _open(client: object, pid: str, **quotas: float) -> None:
    response = client.post("/v1/programs", json={"program_id": pid, "quotas": quotas})  # type: ignore[attr-defined]
    assert response.status_code == 201, response.text


def test_token_quota_stops_the_program_with_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-tokens", tokens=150)
        body = chat_body("x" * 200, max_tokens=64, ignore_eos=True)
        first = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert first.status_code == 200
        second = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert second.status_code == 429, second.text
        assert second.json()["error"]["type"] == "quota_exceeded"
        assert "tokens" in second.json()["error"]["message"]
        wait_until(lambda: c.get("/v1/programs/q-tokens").json()["state"] == "cancelled")
        program = c.get("/v1/programs/q-tokens").json()
        # overshoot is bounded by one streamed delta of the call that crossed the limit
        assert program["tokens_used"] <= 150 + 64
        again = c.post(
            "/v1/chat/completions", json={**body, "agentconsole": {"program_id": "q-tokens"}}
        )
        assert again.status_code == 429


def test_token_quota_mid_stream_ends_with_an_error_event(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-stream", tokens=40)
        body = chat_body("short", max_tokens=500, ignore_eos=True, stream=True)
        body["agentconsole"] = {"program_id": "q-stream"}
        text = c.post("/v1/chat/completions", json=body).text
    assert '"quota_exceeded"' in text
    assert text.rstrip().endswith("data: [DONE]")


def test_tool_call_quota_is_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-tools", tool_calls=1)
        node = {"node_id": "t1", "kind": "tool", "tool": "search"}
        assert c.post("/v1/programs/q-tools/nodes", json=node).status_code == 201
        node["node_id"] = "t2"
        refused = c.post("/v1/programs/q-tools/nodes", json=node)
        assert refused.status_code == 429
        assert refused.json()["error"]["field"] == "quotas.tool_calls"


def test_branch_quota_is_429(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-branch", branches=2)
        c.post("/v1/programs/q-branch/nodes", json={"node_id": "root", "kind": "llm"})
        for child in ("a", "b"):
            node = {"node_id": child, "kind": "llm", "parents": ["root"]}
            c.post("/v1/programs/q-branch/nodes", json=node)
        node = {"node_id": "c", "kind": "llm", "parents": ["root"]}
        refused = c.post("/v1/programs/q-branch/nodes", json=node)
    assert refused.status_code == 429
    assert refused.json()["error"]["field"] == "quotas.branches"


def test_wall_time_quota_cancels_within_a_second_and_403s(server: LiveServer) -> None:
    with server.client() as c:
        _open(c, "q-wall", wall_time_s=0.3)
        started = time.monotonic()
        wait_until(lambda: c.get("/v1/programs/q-wall").json()["state"] == "cancelled", 3)
        assert time.monotonic() - started < 0.3 + 1.0
        refused = c.post(
            "/v1/chat/completions", json=chat_body(agentconsole={"program_id": "q-wall"})
        )
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "quota_exceeded"
