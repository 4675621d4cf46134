"""Drive the terminal dashboard like an operator, against the real ``serve --runtime sim --demo``.

Every effect is checked through the API, not through the dashboard's own state.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Select

from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.client.models import TenantRow
from agentconsole.ui.tui import fmt
from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.dialogs import ConfirmScreen, HelpScreen
from agentconsole.ui.tui.views.door import DoorPanel
from agentconsole.ui.tui.views.policy import PolicyScreen
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.on_screen import confirming
from tests.ui.real_server import RealServer
from tests.ui.recording import recorded_notes
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def _audit(server: RealServer) -> list[tuple[str, str]]:
    actions = server.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    return [(a["action"], a["target"]) for a in actions]


def _state(server: RealServer, program_id: str) -> object:
    return server.get(f"/v1/programs/{program_id}")["state"]


async def test_navigate_preempt_and_cancel_with_confirmation(real: RealServer) -> None:
    target = f"ui-pilot-{uuid.uuid4().hex[:8]}"
    real.open_program(target)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.feed_live and app.state.overview is not None)
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: target in app.state.programs and view.table.row_count > 0)
        await pilot.press("slash", *target, "enter")
        await until(pilot, lambda: view.selected() == target)
        await pilot.press("enter")
        await until(
            pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail is not None
        )
        screen = app.screen
        assert isinstance(screen, ProgramScreen)
        assert screen.detail is not None
        assert [n.node_id for n in screen.detail.nodes] == ["n0", "n1"]

        await pilot.press("p")
        await until(pilot, lambda: ("preempt", target) in _audit(real))
        assert _state(real, target) == "running"

        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("tab", "enter")  # k9s: Tab to the destructive button, then Enter
        await until(pilot, lambda: _state(real, target) == "cancelled")
        assert _audit(real)[0] == ("cancel", target)
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, ProgramScreen)
                and app.screen.detail is not None
                and app.screen.detail.summary.state == "cancelled"
            ),
        )
    client.close()


async def test_cancel_declined_changes_nothing(real: RealServer) -> None:
    target = f"ui-keep-{uuid.uuid4().hex[:8]}"
    real.open_program(target)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await select_program(pilot, app, target)
        await pilot.press("c")
        assert confirming(app)
        await pilot.press("enter")  # focus starts on "Keep"
        assert not confirming(app)
        await pilot.press("c")
        assert confirming(app)
        await pilot.press("n")
        assert not confirming(app)
        await pilot.pause(0.3)
    client.close()
    assert _state(real, target) == "running"
    assert ("cancel", target) not in _audit(real)


async def test_a_tenant_key_cancels_its_own_program(real: RealServer) -> None:
    """The operator's cancel route refuses a tenant's key (403, audited); the program's own
    route cancels a tenant's program for its key, and the operator's for any key."""
    target = f"ui-own-{uuid.uuid4().hex[:8]}"
    real.open_program(target)  # tenant-a's
    client = HttpConsoleClient(real.url, real.tenant_key)
    app = DashboardApp(client, url=real.url, feed=False, poll_s=0.5)
    async with app.run_test(size=(100, 30)) as pilot:
        await select_program(pilot, app, target)
        await pilot.press("c")
        assert confirming(app)
        await pilot.press("y")
        await until(pilot, lambda: _state(real, target) == "cancelled")
    client.close()
    actions = real.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    assert not [a for a in actions if a["target"] == target and a["result"] != "ok"]


async def test_an_operator_switches_the_policy_from_the_palette(real: RealServer) -> None:
    """The dialog offers the server's names (``GET /v1/operator/policy``), the one in force
    picked; the server's answer is the notification."""
    before = real.get("/v1/overview")
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, feed=False, poll_s=3600)
    notes = recorded_notes(app)

    def answered(count: int) -> Callable[[], bool]:
        return lambda: len([title for title, _ in notes if title == "policy"]) == count

    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
            await pilot.press("colon", *"switch policy")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, PolicyScreen))
            dialog = app.screen
            assert isinstance(dialog, PolicyScreen)
            picker: Select[str] = dialog.query_one("#policy-name", Select)
            assert dialog.choices is not None
            assert list(dialog.choices.policies) == real.get("/v1/operator/policy")["policies"]
            assert picker.value == before["policy"]
            picker.value = "fcfs"
            await pilot.click("#policy-switch")
            await until(pilot, answered(1))
        said = [text for title, text in notes if title == "policy"]
        assert said[0] == f"policy fcfs · kv policy {before['kv_policy']}"
        assert real.get("/v1/overview")["policy"] == "fcfs"
    finally:
        client.set_policy(str(before["policy"]), None)
        client.close()
    assert ("policy", "") in _audit(real)


async def test_demo_shows_without_set_up(real: RealServer) -> None:
    """``serve --demo`` and the dashboard with the development default key: data appears."""
    client = HttpConsoleClient(real.url, "sk-operator")
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and app.state.feed_live)
        await pilot.press("2", "a")  # all states: the demo's programs finish quickly
        await until(
            pilot,
            lambda: any(p.labels.get("source") == "demo" for p in app.state.programs.values()),
            timeout=30,
        )
        await until(pilot, lambda: app.state.events_seen > 0, timeout=30)
    client.close()


async def test_palette_help_and_views(real: RealServer) -> None:
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("colon", *"view tenants")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: app.active_view == "tenants" and bool(app.state.tenants))
        for key, view in (("4", "kv"), ("5", "audit"), ("6", "events"), ("1", "overview")):
            await pilot.press(key)
            assert app.active_view == view
        await until(pilot, lambda: app.state.kv is not None)
        before = _audit(real)
        await pilot.press("p")  # nothing selected on the overview: a warning, no request
        await pilot.pause(0.3)
    client.close()
    assert _audit(real) == before


def _door_refusals(server: RealServer) -> int:
    """How many reads of the door the server refused (it audits every operator route's)."""
    actions = server.get("/v1/operator/audit?limit=1000")["actions"]
    assert isinstance(actions, list)
    return sum(1 for a in actions if a["action"] == "door" and a["result"].startswith("refused"))


def _door_row(app: DashboardApp, kind: str) -> list[str] | None:
    table = app.query_one("#door-table", DataTable)
    rows = ([str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count))
    return next((row for row in rows if row[1] == kind), None)


async def test_the_tenants_view_shows_what_the_door_learned(real: RealServer) -> None:
    """A finished program teaches the door its kind's run and peak; the operator sees both on
    the tenants view, as the server reports them."""
    kind = f"ui-door-{uuid.uuid4().hex[:8]}"
    real.finish_program(f"{kind}-p", kind)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: _door_row(app, kind) is not None)
        row = _door_row(app, kind)
        assert app.query_one(DoorPanel).display
    client.close()
    door = real.get("/v1/operator/door")
    runs, peaks = door["runs"], door["peaks"]
    assert isinstance(runs, list)
    assert isinstance(peaks, list)
    run = next(r for r in runs if r["kind"] == kind)
    peak = next(p for p in peaks if p["kind"] == kind)
    assert row == [
        "tenant-a",
        kind,
        fmt.secs(run["expected_run_s"]),
        fmt.count(round(peak["peak_private_tokens"])),
    ]


async def test_a_tenant_key_asks_for_the_door_once_and_sees_none(real: RealServer) -> None:
    before = _door_refusals(real)
    client = HttpConsoleClient(real.url, real.tenant_key)
    reads = 0
    tenants = client.tenants

    def counted() -> list[TenantRow]:
        nonlocal reads
        reads += 1
        return tenants()

    client.tenants = counted  # type: ignore[method-assign]
    app = DashboardApp(client, url=real.url, feed=False, poll_s=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: "door" in app.sync.refused)
        seen = reads
        await until(pilot, lambda: reads >= seen + 3)  # three more polls of the view
        assert not app.query_one(DoorPanel).display
        assert app.state.tenants
    client.close()
    assert _door_refusals(real) == before + 1


async def test_unreachable_server_is_reported_not_raised() -> None:
    client = HttpConsoleClient("http://127.0.0.1:9", "sk-operator", timeout_s=0.5)
    app = DashboardApp(client, url="http://127.0.0.1:9", poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: "reconnecting" in app.state.feed_detail)
        await until(pilot, lambda: "overview" in app.state.failures)
        assert not app.state.feed_live
        await pilot.press("2", "3", "1")
    client.close()


async def test_data_arriving_while_the_app_shuts_down_is_dropped(real: RealServer) -> None:
    """The sync worker posts from its own thread: a message handled after shutdown began
    found no widgets (NoMatches: '#topbar') and crashed the app; now it is dropped."""
    client = HttpConsoleClient(real.url, "sk-operator")
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state.overview is not None)
        overview = app.state.overview
    assert overview is not None
    assert not app.is_running
    app._overview_loaded(m.OverviewLoaded(overview, tick=True))
    app._feed_changed(m.FeedChanged(live=False, detail="closed"))
    client.close()


async def select_program(pilot: Pilot[None], app: DashboardApp, target: str) -> None:
    """Open the programs view and select ``target`` by the filter, once the list has it."""
    await pilot.press("2")
    view = app.query_one(ProgramsView)
    await until(pilot, lambda: target in app.state.programs)
    await pilot.press("slash", *target, "enter")
    await until(pilot, lambda: view.selected() == target)
