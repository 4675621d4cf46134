"""Rows at any moment plus the event tail past the projector's mark rebuild each program as the
running server holds it (``live/eventtail.py``): checked in one process, without a crash, by
rebuilding from the store while the server goes on and comparing with its controller.

The rows are written only when the test says (``store_sync_s`` an hour), at a cut chosen
between the steps of a program: calls that finish, tools that start, fail and are retried,
a cancelled program, a program created after the cut.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentconsole.scheduler.program import NodeKind, NodeState, Program
from agentconsole.server.live.reopen import programs_to_restore, rebuild, rebuild_created
from tests.server.api.harness import chat_body, gateway_server

STEPS = 8


def _steps(c: Any) -> list[Any]:
    """One program's life over HTTP, step by step (each a callable)."""

    def call(program: str) -> Any:
        body = chat_body("next", max_tokens=6, agentconsole={"program_id": program})
        return lambda: c.post("/v1/chat/completions", json=body)

    def tool(program: str, node: str, verb: str, **extra: Any) -> Any:
        return lambda: c.post(
            f"/v1/programs/{program}/tool-calls/{verb}", json={"node_id": node, **extra}
        )

    quotas = {"program_id": "p", "quotas": {"tokens": 90_000}, "labels": {"team": "x"}}
    return [
        lambda: c.post("/v1/programs", json=quotas),
        call("p"),
        tool("p", "grep", "start", tool="grep"),
        tool("p", "grep", "finish", outcome="fail", latency_s=0.1),
        tool("p", "grep", "start", tool="grep"),
        tool("p", "grep", "finish", outcome="ok", latency_s=0.2),
        call("p"),
        call("q"),  # a second program, created at this step
        lambda: c.post("/v1/programs/q/cancel"),
    ][: STEPS + 1]


def _shape(program: Program) -> dict[str, Any]:
    """What a rebuild must reproduce: the DAG, states, attempts and the standing."""
    return {
        "state": program.state,
        "tenant": program.tenant,
        "labels": program.labels,
        "quotas": program.quotas,
        "tokens_used": program.tokens_used,
        "attained_service_s": round(program.attained_service_s, 9),
        "tool_calls": program.tool_calls,
        "completed_calls": program.completed_calls,
        "nodes": {
            nid: (
                n.kind,
                n.state,
                n.parents,
                n.tool.name if n.tool else None,
                [(a.number, a.outcome) for a in n.attempts],
                n.prompt_tokens,
                n.cached_tokens,
                n.output_tokens,
                round(n.service_s, 9),
                round(n.tool_s, 9),
            )
            for nid, n in program.nodes.items()
        },
    }


@pytest.mark.parametrize("cut", range(STEPS + 1))
def test_rows_at_any_cut_plus_the_tail_rebuild_the_live_programs(tmp_path: Path, cut: int) -> None:
    with gateway_server(tmp_path / "tail.duckdb", store_sync_s=3600.0) as server:
        live = server.live
        with server.client() as c:
            for n, step in enumerate(_steps(c)):
                if n == cut:  # the rows as the last periodic write left them
                    server.run(live.queries.projector.sync())
                answer = step()
                assert answer.status_code < 300, answer.text

        async def restore() -> list[Any]:
            await asyncio.wrap_future(live.store.writer.flush())  # the event tail committed
            return await asyncio.to_thread(programs_to_restore, live.store.repo)

        restored = server.run(restore())
        programs = live.service.controller.programs
        ids = {
            view.program.program_id if view else tail[0].event.program_id for view, tail in restored
        }
        assert {pid for pid, p in programs.items() if not p.state.terminal} <= ids
        for view, tail in restored:
            rebuilt = rebuild(view, 0.0, tail) if view else rebuild_created(tail, 0.0)
            assert rebuilt is not None
            assert _shape(rebuilt) == _shape(programs[rebuilt.program_id])


def test_an_llm_call_in_flight_at_the_crash_is_closed_after_the_tail() -> None:
    from agentconsole.scheduler.events import Event, EventKind
    from agentconsole.server.store.repository import StoredEvent

    created = Event(1.0, EventKind.PROGRAM_CREATED, "p", tenant="t", data={"quota.tokens": 9})
    added = Event(1.1, EventKind.NODE_ADDED, "p", "n1", data={"kind": "llm", "parents": ""})
    queued = Event(1.2, EventKind.CALL_QUEUED, "p", "n1", 1, "t")
    tail = [StoredEvent(s, e) for s, e in enumerate((created, added, queued), start=5)]
    program = rebuild_created(tail, now=9.0)
    assert program is not None
    assert program.quotas.tokens == 9
    node = program.nodes["n1"]
    assert node.kind is NodeKind.LLM
    assert node.state is NodeState.FAILED
    assert node.attempts[-1].outcome == "interrupted"
    assert rebuild_created(tail[1:], now=9.0) is None  # not a creation: nothing to make


def test_a_replayed_call_queues_from_its_queueing_not_from_its_node_readiness() -> None:
    """A node declared ahead (ready at 1.1), its call queued 2 s later and 0.5 s in the
    engine's queue: the tail rebuilds the controller's figure, the engine's 0.5 s (the
    agent's 2 s before its call were never the server's queue)."""
    from agentconsole.scheduler.events import Event, EventKind, Scalar
    from agentconsole.server.store.repository import StoredEvent

    ended: dict[str, Scalar] = {
        "outcome": "ok",
        "queue_s": 0.5,
        "service_s": 1.0,
        "prompt_tokens": 10,
    }
    events = (
        Event(1.0, EventKind.PROGRAM_CREATED, "p", tenant="t"),
        Event(1.1, EventKind.NODE_ADDED, "p", "n1", data={"kind": "llm", "parents": ""}),
        Event(1.1, EventKind.NODE_READY, "p", "n1"),
        Event(3.1, EventKind.CALL_QUEUED, "p", "n1", 1, "t"),
        Event(4.6, EventKind.CALL_FINISHED, "p", "n1", 1, "t", ended),
    )
    program = rebuild_created([StoredEvent(s, e) for s, e in enumerate(events, start=5)], 9.0)
    assert program is not None
    assert program.nodes["n1"].state is NodeState.DONE
    assert program.nodes["n1"].queue_s == pytest.approx(0.5)
    assert program.wait_s == pytest.approx(0.5)
