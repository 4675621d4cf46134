"""A program's finish closes every tool it still had running, over real HTTP with the gateway:
an agent that reported a tool's start and finished without its end left a finished program
showing that tool running for ever (both consoles drew it)."""

from __future__ import annotations

from pathlib import Path

from tests.server.api.harness import gateway_server


def test_finish_closes_a_reported_tool_never_ended(tmp_path: Path) -> None:
    with gateway_server(tmp_path / "finish.duckdb") as server, server.client() as c:
        c.post("/v1/programs", json={"program_id": "orphan"}).raise_for_status()
        started = {"node_id": "t1", "tool": "web_search"}
        c.post("/v1/programs/orphan/tool-calls/start", json=started).raise_for_status()
        assert c.post("/v1/programs/orphan/finish", json={"success": True}).status_code == 200
        program = c.get("/v1/programs/orphan").json()
        late = c.post("/v1/programs/orphan/tool-calls/finish", json={"node_id": "t1"})
        after = c.get("/v1/programs/orphan").json()
    assert program["state"] == "finished"
    (tool,) = program["nodes"]
    assert tool["state"] == "cancelled"
    assert tool["finished_at"] is not None
    assert late.status_code < 500  # the agent's late end is no error of the server's
    assert after["nodes"][0]["state"] == "cancelled"
