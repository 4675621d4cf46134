"""The terminal dashboard's tools view against the real ``serve --runtime sim --demo``: a
side-effecting tool call left in doubt (a timeout: ``needs_reconcile``) is shown and counted,
the operator reconciles it (commit with a result, or retry; each asks first) and reads the
server's answer or refusal; a side effect still running is listed, and a cancel says it runs
on; a tenant's key sees none of it and is offered nothing.

Every effect is checked through the API (the intent's state, the agent's retry), not through
the dashboard's own state.
"""

from __future__ import annotations

import re

import httpx
import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, Static, TabbedContent

from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.client.toolcalls import ToolCall
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.programs import ProgramsView
from agentconsole.ui.tui.views.reconcile import ReconcileScreen
from tests.ui import tool_doubt
from tests.ui.on_screen import confirming
from tests.ui.real_server import RealServer
from tests.ui.recording import recorded_notes
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def _rows(app: DashboardApp, table_id: str) -> dict[str, list[str]]:
    """The rows of one of the tools view's tables, by tool call id, as plain text."""
    table = app.query_one(f"#{table_id}", DataTable)
    return {
        str(row.key.value): [
            str(c.plain if isinstance(c, Text) else c) for c in table.get_row(row.key)
        ]
        for row in table.ordered_rows
    }


def _topbar(app: DashboardApp) -> str:
    content = app.query_one("#topbar", Static).content
    return content.plain if isinstance(content, Text) else str(content)


def _reconciling(app: DashboardApp) -> bool:
    return isinstance(app.screen, ReconcileScreen)


async def _open_in_doubt(
    pilot: Pilot[None], app: DashboardApp, call: tool_doubt.SideEffect
) -> None:
    """Show the tools view, put the cursor on ``call`` and open its reconcile dialog."""
    await pilot.press("7")
    await until(pilot, lambda: call.tool_call_id in _rows(app, "reconcile-table"))
    table = app.query_one("#reconcile-table", DataTable)
    table.move_cursor(row=table.get_row_index(call.tool_call_id), animate=False)
    await pilot.press("enter")
    await until(pilot, lambda: _reconciling(app))


async def test_an_operator_sees_a_call_in_doubt_and_commits_it_with_its_result(
    real: RealServer,
) -> None:
    call = tool_doubt.in_doubt(real.url)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 32)) as pilot:
        # counted on the top bar whatever the view
        await until(pilot, lambda: "to reconcile (7)" in _topbar(app))
        await pilot.press("7")
        await until(pilot, lambda: call.tool_call_id in _rows(app, "reconcile-table"))
        since, program, node, tool, tenant, why = _rows(app, "reconcile-table")[call.tool_call_id]
        assert (program, node, tool, tenant) == (call.program_id, "t-mail", call.tool, "tenant-a")
        assert why == "tool_timeout: no answer within 0.3 s"
        assert re.fullmatch(r"\d\d:\d\d:\d\d", since)  # HH:MM:SS, UTC

        await _open_in_doubt(pilot, app, call)
        result = app.screen.query_one("#reconcile-result", Input)
        result.value = "{not json"
        await pilot.click("#commit")
        assert _reconciling(app)  # the dialog stays and says why
        error = app.screen.query_one("#reconcile-error", Static)
        assert error.display
        assert "not JSON" in str(error.content)
        result.value = '{"sent": true, "id": "m-1"}'
        commit = app.screen.query_one("#commit", Button)
        # a button takes no click while its press shows (its -active class, 0.2 s)
        await until(pilot, lambda: not commit.has_class("-active"))
        await pilot.click("#commit")
        await until(pilot, lambda: confirming(app))
        assert call.state() == "needs_reconcile"  # nothing sent before the confirmation
        await pilot.press("y")
        await until(pilot, lambda: call.state() == "committed")
        await until(pilot, lambda: any(title == "reconcile" for title, _ in notes))
        await until(pilot, lambda: call.tool_call_id not in _rows(app, "reconcile-table"))
    client.close()
    assert (
        "reconcile",
        f"committed {call.program_id}/t-mail {call.tool}: the agent's retry "
        "gets this result; the tool does not run",
    ) in notes
    retried = call.retry()  # the agent's retry reads what the operator recorded
    assert retried.status_code == 200, retried.text
    assert retried.json()["status"] == "replayed"
    assert retried.json()["result"] == {"sent": True, "id": "m-1"}


async def test_retry_asks_first_and_a_call_settled_meanwhile_is_refused(real: RealServer) -> None:
    call = tool_doubt.in_doubt(real.url)
    other = tool_doubt.in_doubt(real.url)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    notes = recorded_notes(app)
    async with app.run_test(size=(120, 32)) as pilot:
        await until(pilot, lambda: app.sync.role_known and app.state.tool_calls is not None)
        await _open_in_doubt(pilot, app, call)
        await pilot.click("#retry")
        await until(pilot, lambda: confirming(app))
        await pilot.press("n")  # kept: nothing sent
        assert not confirming(app)
        await pilot.pause(0.3)
        assert call.state() == "needs_reconcile"

        await _open_in_doubt(pilot, app, call)
        await pilot.click("#retry")
        await until(pilot, lambda: confirming(app))
        await pilot.press("y")
        await until(pilot, lambda: call.state() == "retryable")

        # another operator settles the second call while this dashboard still lists it
        await _open_in_doubt(pilot, app, other)
        settled = httpx.post(
            f"{real.url}/v1/operator/tool-calls/{other.tool_call_id}/reconcile",
            json={"action": "retry"},
            headers={"Authorization": f"Bearer {real.key}"},
        )
        settled.raise_for_status()
        await pilot.click("#commit")
        await until(pilot, lambda: confirming(app))
        await pilot.press("y")
        await until(pilot, lambda: len([n for n in notes if n[0] == "reconcile"]) == 2)
    client.close()
    done, refused = [text for title, text in notes if title == "reconcile"]
    assert done.startswith(f"retry allowed for {call.program_id}/t-mail")
    assert refused == (
        f"commit {other.program_id}/t-mail {other.tool}: "
        "only a needs_reconcile tool call can be reconciled"
    )
    assert other.state() == "retryable"  # the refused commit changed nothing


async def test_a_side_effect_still_running_is_listed_and_a_cancel_says_it_runs_on(
    real: RealServer,
) -> None:
    with tool_doubt.running(real.url) as held:
        effect = held.call
        client = HttpConsoleClient(real.url, real.key)
        app = DashboardApp(client, url=real.url, poll_s=0.5)
        notes = recorded_notes(app)
        async with app.run_test(size=(120, 32)) as pilot:
            await pilot.press("7")
            await until(pilot, lambda: effect.tool_call_id in _rows(app, "effects-table"))
            _, program, node, tool, tenant = _rows(app, "effects-table")[effect.tool_call_id]
            assert (program, node, tool, tenant) == (
                effect.program_id,
                "t-mail",
                effect.tool,
                "tenant-a",
            )

            await pilot.press("2")
            view = app.query_one(ProgramsView)
            await until(pilot, lambda: effect.program_id in app.state.programs)
            await pilot.press("slash", *effect.program_id, "enter")
            await until(pilot, lambda: view.selected() == effect.program_id)
            await pilot.press("c")
            assert confirming(app)
            await pilot.press("y")
            await until(pilot, lambda: any(title == "cancel" for title, _ in notes))
            text = next(text for title, text in notes if title == "cancel")
            assert "side-effecting tools still running: t-mail" in text, text
            assert "they finish and commit" in text, text
            assert "listed in 7 tools to reconcile" in text, text

            assert effect.state() == "in_progress"  # held by its downstream until now
            held.release()
            await until(pilot, lambda: effect.state() == "committed")  # ran on to its end
            assert held.deliveries == 1
            await pilot.press("7")
            await until(pilot, lambda: effect.tool_call_id not in _rows(app, "effects-table"))
        client.close()


async def test_a_tenant_key_sees_no_tool_calls_and_is_offered_no_reconcile(
    real: RealServer,
) -> None:
    call = tool_doubt.in_doubt(real.url)  # tenant-a's own call, in doubt
    client = HttpConsoleClient(real.url, real.tenant_key)
    asked: list[str] = []
    tool_calls = client.tool_calls

    def counted(state: str, limit: int = 500) -> list[ToolCall]:
        asked.append(state)
        return tool_calls(state, limit)

    client.tool_calls = counted  # type: ignore[method-assign]
    app = DashboardApp(client, url=real.url, poll_s=0.2)
    async with app.run_test(size=(120, 32)) as pilot:
        await until(pilot, lambda: app.sync.tenant_key and app.sync.role_known)
        tabs = app.query_one("#views", TabbedContent)
        await until(pilot, lambda: not tabs.get_tab("tools").display)
        await pilot.press("7")  # nothing: its view is not offered
        await pilot.pause(0.3)
        assert tabs.active != "tools"
        await pilot.press("x")
        await pilot.pause(0.3)
        assert not _reconciling(app)
        assert "reconcile" not in _topbar(app)
        app.sync.read_tool_calls()  # as the timer and the feed's tool events ask
        await pilot.pause(1.0)  # a few polls too
    client.close()
    assert asked == []  # never asked: each refusal would be an audit row
    assert app.state.tool_calls is None
    assert call.state() == "needs_reconcile"
    actions = real.get("/v1/operator/audit?limit=1000")["actions"]
    assert isinstance(actions, list)
    assert not [a for a in actions if a["action"] == "tool.list_calls"]
