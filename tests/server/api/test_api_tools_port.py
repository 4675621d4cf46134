"""The service's tool port (what the gateway calls): tool nodes, tool waits and their KV
decision, what a cancel reports for running tools, and a start whose actions fail."""

from __future__ import annotations

from typing import Any

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


def test_a_start_whose_actions_fail_runs_nothing_and_its_retry_runs(server: LiveServer) -> None:
    """The start's settle raises (not a cancel): the caller gets that error, the attempt it
    opened is closed ``interrupted`` (no end of it will come), nothing is left starting, and
    the retry of the start runs the tool as the node's next attempt."""
    service = server.live.service
    port = service.tools

    async def start_with_failing_settle() -> None:
        real = service.settled

        async def failing(actions: Any = None) -> None:
            raise RuntimeError("the cache hint failed")

        service.settled = failing  # type: ignore[method-assign]
        try:
            await port.tool_started("tf-1", "t-fetch")
        finally:
            service.settled = real  # type: ignore[method-assign]

    server.run(port.ensure_tool_node("tenant-a", "tf-1", "t-fetch", ToolSpec("fetch")))
    with pytest.raises(RuntimeError, match="cache hint failed"):
        server.run(start_with_failing_settle())
    node = service.controller.programs["tf-1"].nodes["t-fetch"]
    assert [(a.outcome, a.finished_at is not None) for a in node.attempts] == [
        ("interrupted", True)
    ]
    assert not port.starting("tf-1", "t-fetch")
    assert not port.executes("tf-1", "t-fetch")
    server.run(_port(server, ("tool_started", ("tf-1", "t-fetch"))))  # the retry: no 409
    assert [a.outcome for a in node.attempts] == ["interrupted", ""]
    server.run(_port(server, ("tool_finished", ("tf-1", "t-fetch", "ok", 0.1))))
    with server.client() as c:
        assert c.get("/v1/programs/tf-1/nodes/t-fetch").json()["state"] == "done"
