"""The service's tool port (what the gateway calls): tool nodes, tool waits and their KV
decision, what a cancel reports for running tools, and a start whose wait decision fails (the
tool runs) or is cancelled."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentconsole.scheduler.actions import KvAdvice, ToolWaitFacts
from agentconsole.scheduler.events import Event, EventKind
from agentconsole.scheduler.program import ToolSpec
from agentconsole.scheduler.runtime import CacheAction, MemoryView
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


class _BrokenAdvisor:
    """A tool-wait advisor with a bug: its decision raises, inside the driver's settle that a
    tool's start awaits (the actions after it log and swallow their own failures)."""

    def advise(self, facts: ToolWaitFacts, memory: MemoryView, now: float) -> KvAdvice:
        raise RuntimeError("the advisor's bug")


def _ran_a_call(server: LiveServer, program_id: str) -> None:
    """``program_id`` ran a call (of tenant a): its tools' waits are decided."""
    with server.client() as c:  # its own context (another program's would own the same KV)
        prompt = f"{program_id}: plan the work " + "plan the work " * 80
        body = chat_body(prompt, agentconsole={"program_id": program_id})
        assert c.post("/v1/chat/completions", json=body).status_code == 200


def _decisions(server: LiveServer, program_id: str) -> list[Event]:
    items, _ = server.live.hub.since(server.live.hub.oldest_seq() - 1, limit=10**6)
    return [e for _, e in items if e.kind is EventKind.KV_DECISION and e.program_id == program_id]


def _attempts(server: LiveServer, program_id: str, node_id: str) -> list[tuple[str, bool]]:
    node = server.live.service.controller.programs[program_id].nodes[node_id]
    return [(a.outcome, a.finished_at is not None) for a in node.attempts]


def test_a_start_whose_decision_raises_still_runs_its_tool(
    server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The tool-wait decision the start awaits raises (an advisor's bug): the failure is
    logged and the tool runs all the same, since the decision only tunes where the program's
    KV waits; its one attempt ends as the tool does."""
    service = server.live.service
    port = service.tools
    _ran_a_call(server, "tf-1")

    async def start_with_broken_advisor() -> None:
        # set and restored on the loop: no other settle meets the broken advisor
        advisor = service.driver.advisor
        service.driver.advisor = _BrokenAdvisor()
        try:
            await port.tool_started("tf-1", "t-fetch")
        finally:
            service.driver.advisor = advisor

    server.run(port.ensure_tool_node("tenant-a", "tf-1", "t-fetch", ToolSpec("fetch")))
    with caplog.at_level(logging.ERROR):
        server.run(start_with_broken_advisor())
    assert "deciding for program tf-1 failed" in caplog.text
    assert not _decisions(server, "tf-1")
    assert _attempts(server, "tf-1", "t-fetch") == [("", False)]
    assert ("tf-1", "t-fetch") not in service.orphaned_tools
    server.run(_port(server, ("tool_finished", ("tf-1", "t-fetch", "ok", 0.1))))
    assert _attempts(server, "tf-1", "t-fetch") == [("ok", True)]
    with server.client() as c:
        assert c.get("/v1/programs/tf-1/nodes/t-fetch").json()["state"] == "done"


def test_a_start_cancelled_while_its_decision_applies_runs_nothing(server: LiveServer) -> None:
    """A start cancelled while its tool wait's cache hint is applied (its caller gone, the
    server shutting down; a ``CancelledError``, no ``Exception``): its attempt is closed
    ``interrupted``, the node is left for a retry (an orphan, not a tool running), the wait
    decided for it is decided again for the tool still running, and the orphan goes with its
    program once that is forgotten."""
    service = server.live.service
    port = service.tools
    _ran_a_call(server, "tc-1")
    fetch = ToolSpec("fetch")
    server.run(
        _port(
            server,
            ("ensure_tool_node", ("tenant-a", "tc-1", "t-first", fetch)),
            ("ensure_tool_node", ("tenant-a", "tc-1", "t-second", fetch)),
            ("tool_started", ("tc-1", "t-first")),
        )
    )
    first_decided = len(_decisions(server, "tc-1"))
    assert first_decided >= 1

    async def start_cancelled_in_its_hint() -> bool:
        runtime = service.runtime
        real = runtime.cache_hint
        applying = asyncio.Event()

        async def held(program_id: str, action: CacheAction, retain_s: float) -> None:
            applying.set()
            await asyncio.Event().wait()  # until the start is cancelled

        runtime.cache_hint = held  # type: ignore[method-assign]
        try:
            # ``t-second`` is due back after ``t-first``: its wait is decided, its hint sent
            start = asyncio.ensure_future(port.tool_started("tc-1", "t-second"))
            await applying.wait()
        finally:
            runtime.cache_hint = real  # type: ignore[method-assign]
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        return start.cancelled()

    assert server.run(start_cancelled_in_its_hint())
    assert len(_decisions(server, "tc-1")) == first_decided + 1  # the one for ``t-second``
    assert _attempts(server, "tc-1", "t-second") == [("interrupted", True)]
    assert not port.starting("tc-1", "t-second")
    assert ("tc-1", "t-second") in service.orphaned_tools
    # the program waits on ``t-first`` alone: its wait is decided again at the next settle
    server.run(service.settled())
    assert len(_decisions(server, "tc-1")) == first_decided + 2
    with server.client() as c:
        finished = c.post("/v1/programs/tc-1/finish", json={"success": True})
        assert finished.status_code == 200, finished.text

    async def forget() -> None:  # what the sweeper does once the program's retention ends
        service.forget("tc-1")

    server.run(forget())
    assert not [key for key in service.orphaned_tools if key[0] == "tc-1"]
