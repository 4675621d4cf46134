"""The service's tool port (what the gateway calls): tool nodes, tool waits and their KV
decision, and what a cancel reports for running tools."""

from __future__ import annotations

import pytest

from agentconsole.scheduler.events import EventKind
from agentconsole.scheduler.program import ToolSpec
from agentconsole.server.live.errors import Conflict, NotFound, QuotaError
from tests.server.api.harness import LiveServer, chat_body


async def _port(server: LiveServer, *steps: tuple[str, tuple[object, ...]]) -> None:
    port = server.live.service.tools
    for name, args in steps:
        await getattr(port, name)(*args)


def test_tool_wait_decides_kv_and_cancel_reports_tools(server: LiveServer) -> None:
    with server.client() as c:
        body = chat_body("plan the work " * 80, agentconsole={"program_id": "tw-1"})
        assert c.post("/v1/chat/completions", json=body).status_code == 200
    search = ToolSpec("search")
    mailer = ToolSpec("send_mail", side_effect=True, idempotent=False)
    server.run(
        _port(
            server,
            ("ensure_tool_node", ("tenant-a", "tw-1", "t-search", search)),
            ("ensure_tool_node", ("tenant-a", "tw-1", "t-search", search)),  # idempotent
            ("ensure_tool_node", ("tenant-a", "tw-1", "t-mail", mailer)),
            ("tool_started", ("tw-1", "t-search")),
            ("tool_started", ("tw-1", "t-mail")),
        )
    )
    items, _ = server.live.hub.since(server.live.hub.oldest_seq() - 1, limit=10**6)
    decisions = [e for _, e in items if e.kind is EventKind.KV_DECISION and e.program_id == "tw-1"]
    assert decisions
    assert decisions[0].data["action"] in ("keep", "offload", "recompute")
    assert decisions[0].tenant == "tenant-a"
    with server.client() as c:
        program = c.get("/v1/programs/tw-1").json()
        assert program["tool_calls"] == 2  # the repeated ensure counted once
        assert {n["node_id"]: n["parents"] for n in program["nodes"]}["t-mail"] == ["llm-1"]
        report = c.post("/v1/programs/tw-1/cancel").json()
    # the port started the read-only tool, but no gateway run of it was there to stop: it is
    # running (its end still to come), not interrupted
    assert report["interrupted_tools"] == []
    assert report["running_tools"] == ["t-search"]
    assert report["flagged_tools"] == ["t-mail"]
    # a side effect that commits after the cancel is reported without error
    server.run(_port(server, ("tool_finished", ("tw-1", "t-mail", "ok", 0.2))))


def test_port_refusals(server: LiveServer) -> None:
    with server.client("sk-b") as b:
        b.post("/v1/programs", json={"program_id": "tp-b", "quotas": {"tool_calls": 1}})
    with pytest.raises(NotFound):
        server.run(_port(server, ("ensure_tool_node", ("tenant-a", "tp-b", "t1", "search"))))
    with pytest.raises(NotFound):
        server.run(_port(server, ("check_program", ("tenant-a", "tp-b"))))
    server.run(_port(server, ("check_program", ("tenant-a", "never-seen-yet"))))
    server.run(_port(server, ("ensure_tool_node", ("tenant-b", "tp-b", "t1", "search"))))
    with pytest.raises(QuotaError) as quota:
        server.run(_port(server, ("ensure_tool_node", ("tenant-b", "tp-b", "t2", "search"))))
    assert quota.value.status == 429
    with pytest.raises(NotFound):
        server.run(_port(server, ("tool_started", ("tp-b", "nope"))))
    with pytest.raises(NotFound):  # a typo is refused, not taken as a finish
        server.run(_port(server, ("tool_finished", ("tp-b", "nope", "ok", None))))
    server.run(_port(server, ("tool_started", ("tp-b", "t1"))))
    with pytest.raises(Conflict):
        server.run(_port(server, ("tool_started", ("tp-b", "t1"))))
    server.run(_port(server, ("tool_finished", ("tp-b", "t1", "fail", None))))
    with server.client("sk-b") as b:
        node = b.get("/v1/programs/tp-b/nodes/t1").json()
        assert node["state"] == "done"  # the agent takes the error as the result
        assert node["tool"] == "search"
        b.post("/v1/programs/tp-b/finish", json={"success": True})
    with pytest.raises(Conflict):
        server.run(_port(server, ("check_program", ("tenant-b", "tp-b"))))
