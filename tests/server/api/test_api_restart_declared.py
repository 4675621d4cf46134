"""A restart closes only the LLM calls that died with the old process: a node whose call was in
flight fails with an interrupted attempt, while a node the agent declared ahead and never
called stays ready, and its first call after the restart is a first attempt, not a retry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentconsole.scheduler.program import NodeKind, NodeState, Program
from agentconsole.server.live.eventtail import INTERRUPTED
from agentconsole.server.live.reopen import programs_to_restore, rebuild
from agentconsole.server.store.records import AttemptRecord, NodeRecord, ProgramRecord
from agentconsole.server.store.repository import ProgramView, StoredEvent
from tests.server.api.harness import LiveServer, chat_body, make_config

Restorable = list[tuple[ProgramView | None, list[StoredEvent]]]


def _crash_state(server: LiveServer) -> Restorable:
    """Program ``p``: node ``now`` with its call in the engine, node ``later`` declared ahead
    and not called. Returns what a start-up would restore had the process died right then
    (the rows written and the event tail committed: a clean stop would abort ``now``)."""
    live = server.live
    with server.client() as c:
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201

    async def call_now_and_keep_it_running() -> Restorable:
        from agentconsole.server.live.intake import ChatCall

        messages = [{"role": "user", "content": "x"}]
        chat = ChatCall(messages, 4000, program_id="p", node_id="now", ignore_eos=True)
        await live.service.start_call("tenant-a", chat)
        await live.queries.projector.sync()
        await asyncio.wrap_future(live.store.writer.flush())
        return await asyncio.to_thread(programs_to_restore, live.store.repo)

    with server.client() as c:
        declared = {"node_id": "later", "kind": "llm", "parents": []}
        assert c.post("/v1/programs/p/nodes", json=declared).status_code == 201
    restorable = server.run(call_now_and_keep_it_running())
    program = live.service.controller.programs["p"]
    assert program.nodes["now"].state is NodeState.RUNNING  # still in the engine
    assert program.nodes["later"].state is NodeState.READY
    return restorable


def _restart(server: LiveServer, restorable: Restorable) -> Program:
    """What start-up does with the restored rows and tail (``startup._reopen_running_programs``
    and the metrics' adoption), on a new server."""
    live = server.live

    async def reopen() -> Program:
        ((view, tail),) = restorable  # program p alone
        program = live.service.reopen(view, tail)
        assert program is not None
        live.metrics.adopt(program)
        return program

    return server.run(reopen())


def test_a_node_declared_ahead_survives_a_restart_and_its_first_call_is_no_retry(
    tmp_path: Path,
) -> None:
    with LiveServer(make_config(tmp_path / "before.duckdb")) as first:
        first.wait_ready()
        restorable = _crash_state(first)
    with LiveServer(make_config(tmp_path / "after.duckdb")) as second:
        second.wait_ready()
        program = _restart(second, restorable)
        cut, declared = program.nodes["now"], program.nodes["later"]
        assert cut.state is NodeState.FAILED
        assert [a.outcome for a in cut.attempts] == [INTERRUPTED]
        assert declared.state is NodeState.READY
        assert declared.attempts == []
        assert declared.finished_at is None
        with second.client() as c:
            shown = _nodes(c.get("/v1/programs/p").json())
            assert shown["later"]["state"] == "ready"
            assert shown["now"]["state"] == "failed"
            body = chat_body("go on", max_tokens=4, agentconsole={"program_id": "p"})
            body["agentconsole"]["node_id"] = "later"
            answer = c.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            assert answer.headers["X-Node-Id"] == "later"
            after = c.get("/v1/programs/p/nodes/later").json()
        assert after["state"] == "done"
        assert after["attempts"] == 1  # its first attempt: nothing of it ran before
        assert [(a.number, a.outcome) for a in declared.attempts] == [(1, "ok")]


def _nodes(program: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node_id"]: n for n in program["nodes"]}


def test_reopen_keeps_declared_nodes_and_closes_calls_in_flight() -> None:
    """From the rows alone: a running call and a preempted one (ready, its attempt open) are
    closed; a ready and a pending node with no attempt were never called and stay as they
    were."""
    main = {"branch": "main"}
    view = ProgramView(
        ProgramRecord("p", "t", "running", 1.0, 2.0, data={}),
        (
            NodeRecord("p", "running", "llm", "running", 1.0, 2.0, (), 1, main),
            NodeRecord("p", "preempted", "llm", "ready", 1.0, 2.0, (), 1, main),
            NodeRecord("p", "declared", "llm", "ready", 1.0, 2.0, (), 0, main),
            NodeRecord("p", "after", "llm", "pending", 1.0, 2.0, ("declared",), 0, main),
        ),
        (
            AttemptRecord("p", "running", 1, "running", 1.2),
            AttemptRecord("p", "preempted", 1, "running", 1.3),
        ),
    )
    program = rebuild(view, now=9.0)
    nodes = program.nodes
    for closed in ("running", "preempted"):
        assert nodes[closed].state is NodeState.FAILED
        assert nodes[closed].finished_at == 9.0
        assert nodes[closed].attempts[-1].outcome == INTERRUPTED
    assert nodes["declared"].state is NodeState.READY
    assert nodes["after"].state is NodeState.PENDING
    for kept in ("declared", "after"):
        assert nodes[kept].kind is NodeKind.LLM
        assert nodes[kept].attempts == []
        assert nodes[kept].finished_at is None
