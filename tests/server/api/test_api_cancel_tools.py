"""A cancel, the program's or a node's, and the gateway's tools, over real HTTP (simulated
runtime, DuckDB store, a loopback ``http`` tool): what the cancel answers is what the gateway
did.

Only a read-only tool the gateway really stopped is ``interrupted``: one whose executor had
answered and whose result was committing is ``running`` and ends on its cancelled node (its
caller gets the result it committed), and one whose start the cancel overtook runs nothing,
its attempt closed as interrupted (no end is left to wait for). The gateway does not count
as stopped a run whose executor answered a moment before (its caller gets the result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from agentconsole.scheduler.events import EventKind
from agentconsole.server.gateway.runner import Runner, RunningTool
from tests.loopback_executor import LoopbackExecutor
from tests.server.api.background import (
    HeldCommits,
    call_tool_in_background,
    held_tool_start,
    served_with_runner,
)
from tests.server.api.harness import LiveServer, node_view
from tests.server.api.test_api_cancel_effects import (
    _downstream,
    _hub_events,
    _register,
)

#: each cancel of node ``t1`` of program ``p``
CANCELS = {"program": "/v1/programs/p/cancel", "node": "/v1/programs/p/nodes/t1/cancel"}


@contextmanager
def _read_tool(
    db: Path, delay_s: float = 0.1, *, side_effect: bool = False
) -> Iterator[tuple[LiveServer, httpx.Client, Runner, LoopbackExecutor, str]]:
    """A ready server, a tenant's client, the gateway's runner, a loopback tool answering after
    ``delay_s``, the tool registered on it (read-only unless ``side_effect``); program ``p``
    is created."""
    with _downstream(delay_s) as reads, served_with_runner(db) as (server, c, runner):
        tool = _register(c, reads.url, side_effect=side_effect)
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        yield server, c, runner, reads, tool


@pytest.mark.parametrize("cancel", CANCELS)
def test_a_read_only_tool_committing_at_the_cancel_ends_on_its_node(
    tmp_path: Path, cancel: str
) -> None:
    with _read_tool(tmp_path / "commit.duckdb") as (server, c, runner, reads, tool):
        held = HeldCommits(runner.intents)
        runner.intents = held  # type: ignore[assignment]
        thread, answers = call_tool_in_background(server, tool, "p")
        assert held.reached.wait(10)  # its executor answered; the result is not committed
        cancelled = c.post(CANCELS[cancel])
        held.release.set()
        thread.join(30)
        node = node_view(c, "p", "t1")
        events = [e for e in _hub_events(server) if e.node_id == "t1"]
    assert cancelled.status_code == 200, cancelled.text
    report = cancelled.json()
    assert report["interrupted_tools"] == []  # nothing was left to stop
    assert report["running_tools"] == ["t1"]  # its end is still to come, and is recorded
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "committed"
    assert reads.requests == 1
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] == "ok"  # as its caller was told
    late = [e for e in events if e.kind is EventKind.TOOL_FINISHED]
    assert [(e.data["after_cancel"], e.data["outcome"]) for e in late] == [(True, "ok")]


@pytest.mark.parametrize("side_effect", [False, True], ids=["read", "side_effect"])
@pytest.mark.parametrize(
    ("cancel", "refusal"),
    [("program", "program 'p' is cancelled"), ("node", "node 't1' of program 'p' was cancelled")],
)
def test_a_cancel_during_the_tools_start_stops_it_before_it_runs(
    tmp_path: Path, cancel: str, refusal: str, side_effect: bool
) -> None:
    db = tmp_path / "start.duckdb"
    with (
        _read_tool(db, side_effect=side_effect) as (server, c, _, reads, tool),
        held_tool_start(server) as (reached, release),
    ):
        thread, answers = call_tool_in_background(server, tool, "p")
        assert reached.wait(10)
        cancelled = c.post(CANCELS[cancel])
        release.set()
        thread.join(30)
        node = node_view(c, "p", "t1")
        attempts = server.live.service.controller.programs["p"].nodes["t1"].attempts
        executes = server.live.service.tools.executes("p", "t1")
    assert cancelled.status_code == 200, cancelled.text
    report = cancelled.json()
    # nothing of it ran: nothing to stop, to let commit or to wait for (its start is refused
    # after the cancel); a node cancel lists it among the nodes it cancelled
    tools = ("interrupted_tools", "flagged_tools", "running_tools")
    assert [report[k] for k in tools] == [[], [], []]
    if cancel == "node":
        assert report["cancelled_nodes"] == ["t1"]
    (answer,) = answers
    assert answer.status_code == 409, answer.text
    assert refusal in answer.json()["error"]["message"]
    assert reads.requests == 0  # it did not run on its cancelled node
    assert node["state"] == "cancelled"
    assert node["outcome_after_cancel"] is None
    # its attempt closed as interrupted: no end is left to come, none to wait for
    assert [(a.finished_at is not None, a.outcome) for a in attempts] == [(True, "interrupted")]
    assert not executes


@pytest.mark.parametrize("cancel", CANCELS)
def test_the_gateway_does_not_count_as_stopped_a_run_whose_executor_answered(
    tmp_path: Path, cancel: str
) -> None:
    with _read_tool(tmp_path / "answered.duckdb", 0.2) as (server, _, runner, _, tool):
        stopped: list[Sequence[RunningTool]] = []

        def stop() -> Sequence[RunningTool]:
            if cancel == "program":
                return runner.cancel_program("p").interrupted
            return runner.cancel_nodes("p", ["t1"])

        async def cancel_as_it_answers() -> None:
            while not runner._running:
                await asyncio.sleep(0.001)
            (execution,) = runner._running.values()
            # the cancel lands when the executor's task is done, before its run resumes to
            # take the result (that run's wake-up comes a loop turn after this callback)
            execution.task.add_done_callback(lambda _: stopped.append(stop()))

        thread, answers = call_tool_in_background(server, tool, "p")
        server.run(cancel_as_it_answers())
        thread.join(30)
    assert [list(s) for s in stopped] == [[]]  # it was not stopped: its result commits
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "committed"
