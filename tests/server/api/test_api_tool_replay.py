"""A retry of a committed tool call over real HTTP, with the real program service behind the
gateway's port: replayed after its program ended (finished or cancelled), where the core
refuses the program with its own 409; and, when a crash lost the node's events after the
result's commit, the replay completes the node the retry recreated, so the DAG goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from agentconsole.server.gateway.outcome import encode_result
from agentconsole.server.gateway.runner import call_hash
from agentconsole.server.store import make_tool_call_id
from agentconsole.server.store.jsonutil import JSONValue
from tests.server.api.harness import LiveServer, chat_body, gateway_server, make_config
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}
ARGS: dict[str, JSONValue] = {"text": "hi"}


@pytest.mark.parametrize(
    ("end", "body", "state"),
    [("finish", {"success": True}, "finished"), ("cancel", None, "cancelled")],
)
def test_a_committed_call_is_replayed_after_its_program_ended(
    tmp_path: Path, end: str, body: dict[str, bool] | None, state: str
) -> None:
    with gateway_server(tmp_path / "ended.duckdb") as server, server.client() as c:
        assert c.post("/v1/tools", json=tool_body("echo", ECHO)).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        call = {"program_id": "p", "node_id": "t1", "arguments": ARGS}
        first = c.post("/v1/tools/echo/call", json=call)
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "committed"
        assert c.post(f"/v1/programs/p/{end}", json=body).status_code == 200
        assert c.get("/v1/programs/p").json()["state"] == state
        retry = c.post("/v1/tools/echo/call", json=call)
        new = c.post("/v1/tools/echo/call", json={**call, "node_id": "t2"})
    assert retry.status_code == 200, retry.text
    assert retry.json()["status"] == "replayed"
    assert retry.json()["tool_call_id"] == first.json()["tool_call_id"]
    assert retry.json()["result"] == first.json()["result"]
    # a new call is refused as API.md says: 409 program_not_running, nothing run
    assert new.status_code == 409, new.text
    assert new.json()["error"]["type"] == "program_not_running"
    assert new.headers["x-should-retry"] == "false"  # as every 409: OpenAI's clients would retry


def test_a_replay_completes_the_node_a_crash_lost(tmp_path: Path) -> None:
    """What ``kill -9`` right after a tool call's answer leaves: its result committed (the
    intent commits before the answer), its node's events not (the event lane's linger), so
    the restarted core has no node ``t1``. The agent's retry recreates it, and the replay of
    the stored result starts and ends it: one attempt with the stored latency, and the LLM
    node after it runs on a complete DAG."""
    extension = GatewayExtension(GatewayConfig(tenant_builtins=None))
    with LiveServer(make_config(tmp_path / "crash.duckdb"), extensions=[extension]) as server:
        server.wait_ready()
        with server.client() as c:
            assert c.post("/v1/tools", json=tool_body("echo", ECHO)).status_code == 201
            assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
            first = {"program_id": "p", "node_id": "n1"}
            assert c.post("/v1/chat/completions", json=chat_body(agentconsole=first)).is_success
        assert extension.gateway is not None
        (tool,) = extension.gateway.tools("tenant-a", operator=False)
        key = make_tool_call_id("p", "t1", 1)
        intents = server.live.store.intents
        claim = intents.claim(
            key, call_hash(tool, ARGS), "p", "t1", "echo", side_effect=False, idempotent=True
        ).result(10)
        intents.commit(key, encode_result({"arguments": ARGS}, 0.25), claim.epoch).result(10)
        assert "t1" not in server.live.service.controller.programs["p"].nodes
        with server.client() as c:
            call = {"program_id": "p", "node_id": "t1", "arguments": ARGS}
            retry = c.post("/v1/tools/echo/call", json=call)
            node = c.get("/v1/programs/p/nodes/t1").json()
            after = {"program_id": "p", "node_id": "n2", "parent_ids": ["t1"]}
            answer = c.post("/v1/chat/completions", json=chat_body(agentconsole=after))
            program = c.get("/v1/programs/p").json()
    assert retry.status_code == 200, retry.text
    assert retry.json()["status"] == "replayed"
    assert node["state"] == "done"
    assert node["attempts"] == 1
    assert node["tool_s"] == pytest.approx(0.25)
    # recreated just now, it did not start before it existed: its timeline stays in order
    assert node["created_at"] <= node["started_at"] <= node["finished_at"]
    assert answer.status_code == 200, answer.text
    assert {n["node_id"]: n["state"] for n in program["nodes"]} == dict.fromkeys(
        ("n1", "t1", "n2"), "done"
    )
    assert program["nodes_done"] == 3
