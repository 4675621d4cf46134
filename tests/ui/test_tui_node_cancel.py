"""The node cancel of the terminal dashboard's program screen, on injected data (the stub
world answers as the server does): offered only for a node that has not ended, asked first
with what it stops, and the notice says what the server did; withdrawn nodes then read apart
from other cancelled ones. The HTTP route itself is checked against the stub server."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, TabbedContent

from agentconsole.httpclient import ApiError
from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.client.nodecancel import NodeCancel
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.outcome import describe_node_cancel
from agentconsole.ui.tui.views.detail import ProgramScreen
from tests.ui.canned import CannedClient
from tests.ui.on_screen import confirming, painted
from tests.ui.recording import recorded_notes
from tests.ui.stub_gen import StubNode, StubProgram
from tests.ui.stub_server import TENANT_KEY, RunningStub
from tests.ui.stub_world import BIG_PROGRAM, StubWorld
from tests.ui.waiting import until

pytestmark = pytest.mark.tui


def _with_pending_child(world: StubWorld) -> tuple[StubProgram, str, str]:
    """The big running program with a pending node under its running one: (program, the
    running node, its child)."""
    prog = world.programs[BIG_PROGRAM]
    running = next(n for n in reversed(prog.nodes) if n.state == "running")
    child = StubNode("n-next", "llm", [running.node_id], created_at=running.created_at)
    prog.nodes.append(child)
    return prog, running.node_id, child.node_id


async def _open_timeline(pilot: Pilot[None], app: DashboardApp) -> ProgramScreen:
    await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
    app.open_program(BIG_PROGRAM)
    await until(
        pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail is not None
    )
    screen = app.screen
    assert isinstance(screen, ProgramScreen)
    await pilot.press("t")
    await pilot.pause()
    return screen


async def _cursor_to(pilot: Pilot[None], screen: ProgramScreen, node_id: str) -> None:
    assert screen.detail is not None
    row = [n.node_id for n in screen.detail.nodes].index(node_id)
    screen.query_one("#nodes-table", DataTable).move_cursor(row=row, animate=False)
    await pilot.pause()


def _state_cell(screen: ProgramScreen, node_id: str) -> str:
    cell = screen.query_one("#nodes-table", DataTable).get_cell(node_id, "state")
    return cell.plain if isinstance(cell, Text) else str(cell)


@pytest.mark.anyio
async def test_a_node_is_cancelled_with_its_descendants_after_confirming() -> None:
    world = StubWorld()
    prog, running, child = _with_pending_child(world)
    client = CannedClient(world)
    app = DashboardApp(client, feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _open_timeline(pilot, app)
        await _cursor_to(pilot, screen, running)
        assert screen.check_action("cancel_node", ()) is True

        # keeping: nothing is sent
        await pilot.press("n")
        assert confirming(app)
        question = " ".join(painted(app.screen.query_one("#confirm-question")).split())
        assert f"Cancel node {running}" in question
        assert f"of program {BIG_PROGRAM}" in question
        assert f"and its 1 descendants not yet ended ({child})" in question
        assert "side-effecting tools run on to their commit" in question
        assert "The program keeps running" in question
        await pilot.press("n")
        assert not confirming(app)
        await pilot.pause(0.2)
        assert not [c for c in client.calls if c.startswith("cancel node")]

        # confirming: the node and its child are withdrawn, the program runs on
        await pilot.press("n")
        assert confirming(app)
        await pilot.press("y")
        await until(pilot, lambda: any(title == "cancel node" for title, _ in notes))
        text = next(text for title, text in notes if title == "cancel node")
        kind = next(n.kind for n in prog.nodes if n.node_id == running)
        calls, tools = (1, 0) if kind == "llm" else (0, 1)
        assert text == (
            f"cancelled {running} of {BIG_PROGRAM} and 1 descendants: {calls} calls aborted, "
            f"{tools} tools interrupted"
        )
        assert client.calls == [f"cancel node {BIG_PROGRAM} {running}"]
        assert prog.state == "running"
        assert {n.node_id for n in prog.nodes if n.withdrawn} == {running, child}
        assert world.audit[-1]["action"] == "cancel_node"
        assert world.audit[-1]["args"] == {"node_id": running}

        # the screen reads the program again: both read "withdrawn", and the ended node is no
        # longer offered a cancel
        await until(pilot, lambda: _state_cell(screen, running).endswith("withdrawn"))
        assert _state_cell(screen, child).endswith("withdrawn")
        assert "withdrawn" in painted(screen.query_one("#detail-legend"))
        await _cursor_to(pilot, screen, running)
        assert screen.check_action("cancel_node", ()) is None
        await pilot.press("n")
        assert not confirming(app)


@pytest.mark.anyio
async def test_an_ended_node_is_not_offered_a_cancel() -> None:
    world = StubWorld()
    client = CannedClient(world)
    app = DashboardApp(client, feed=False, poll_s=3600)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _open_timeline(pilot, app)
        done = next(n.node_id for n in world.programs[BIG_PROGRAM].nodes if n.state == "done")
        await _cursor_to(pilot, screen, done)
        assert screen.check_action("cancel_node", ()) is None  # dimmed in the footer
        await pilot.press("n")
        await pilot.pause(0.2)
        assert not confirming(app)
        assert not [c for c in client.calls if c.startswith("cancel node")]


@pytest.mark.anyio
async def test_on_the_dag_tab_the_key_opens_the_timeline_to_pick_a_node() -> None:
    world = StubWorld()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _open_timeline(pilot, app)
        await pilot.press("t")  # back to the DAG: no node under a cursor there
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert not confirming(app)
        assert screen.query_one("#detail-tabs", TabbedContent).active == "tab-timeline"
        assert any("pick the node to cancel" in text for _, text in notes)


def test_the_notice_names_side_effects_still_running_and_the_agent_s_tools() -> None:
    answer = NodeCancel.parse(
        {
            "program_id": "p1",
            "node_id": "n2",
            "state": "cancelled",
            "program_state": "running",
            "cancelled_nodes": ["n2", "n3", "n4"],
            "aborted_calls": ["p1/n3/0001"],
            "interrupted_tools": [],
            "flagged_tools": ["n4"],
            "running_tools": ["n2"],
        }
    )
    text = describe_node_cancel(answer)
    assert text.startswith("cancelled n2 of p1 and 2 descendants: 1 calls aborted, 0 tools")
    assert "side-effecting tools still running: n4 (they finish and commit" in text
    assert "is listed in 7 tools to reconcile" in text
    assert text.endswith("the agent's own tools left to it: n2")
    assert "waits for an operator" in describe_node_cancel(answer, operator=False)
    again = NodeCancel.parse({"program_id": "p1", "node_id": "n2", "cancelled_nodes": []})
    assert describe_node_cancel(again) == "n2 of p1 was cancelled already: nothing more to stop"


def test_the_client_cancels_a_node_on_the_program_s_own_route(
    stub: RunningStub, world: StubWorld
) -> None:
    prog, running, child = _with_pending_child(world)
    done = next(n.node_id for n in prog.nodes if n.state == "done")
    client = HttpConsoleClient(stub.url, stub.key)
    answer = client.cancel_node(BIG_PROGRAM, running)
    assert (answer.program_id, answer.node_id, answer.program_state) == (
        BIG_PROGRAM,
        running,
        "running",
    )
    assert answer.cancelled_nodes == (running, child)
    detail = client.program(BIG_PROGRAM)
    assert {n.node_id for n in detail.nodes if n.withdrawn} == {running, child}
    assert world.audit[-1]["action"] == "cancel_node"  # an operator key's: audited
    # a retry lists nothing; an ended node and an unknown one are refused, by the server's words
    assert client.cancel_node(BIG_PROGRAM, running).cancelled_nodes == ()
    with pytest.raises(ApiError) as ended:
        client.cancel_node(BIG_PROGRAM, done)
    assert ended.value.status == 409
    with pytest.raises(ApiError) as unknown:
        client.cancel_node(BIG_PROGRAM, "no-such-node")
    assert unknown.value.status == 404
    # a tenant's key cancels a node of its own program there (no operator route, no 403)
    tenant = HttpConsoleClient(stub.url, TENANT_KEY)
    other = next(
        p for p in world.programs.values() if p.state == "running" and p.program_id != BIG_PROGRAM
    )
    last = next(n for n in reversed(other.nodes) if n.state in ("running", "ready"))
    assert tenant.cancel_node(other.program_id, last.node_id).cancelled_nodes == (last.node_id,)
    assert world.refused_paths == []
