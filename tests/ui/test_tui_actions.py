"""Operator actions from the terminal dashboard, on injected data: what asks first, and what the
notification says the server did."""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.canned import CannedClient
from tests.ui.on_screen import confirming, painted
from tests.ui.recording import recorded_notes
from tests.ui.stub_world import BOOST_DEFAULT_S, StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


async def _palette(pilot: Pilot[None], command: str) -> None:
    await pilot.press("colon", *command)
    await pilot.pause(0.3)  # the palette searches on a worker
    await pilot.press("enter")
    await pilot.pause()


async def test_drain_on_asks_first_and_drain_off_does_not() -> None:
    world = StubWorld()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await _palette(pilot, "drain on")
        assert confirming(app)
        assert "stop admitting new calls" in str(app.screen.query_one("#confirm-question").render())
        await pilot.press("n")  # kept: nothing sent
        assert not confirming(app)
        await pilot.pause(0.2)
        assert not world.draining
        assert not any(title == "drain" for title, _ in notes)

        await _palette(pilot, "drain on")
        assert confirming(app)
        await pilot.press("y")
        await until(pilot, lambda: world.draining)

        await _palette(pilot, "drain off")  # resuming undoes nothing: no question
        assert not confirming(app)
        await until(pilot, lambda: not world.draining)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
async def test_drain_says_new_calls_are_refused_not_held(size: tuple[int, int]) -> None:
    """The server answers a drained call at once with 503 ``draining`` (Retry-After), the next
    call of a running program too: the question and the notice say so, not that calls wait."""
    world = StubWorld()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await _palette(pilot, "drain on")
        assert confirming(app)
        await pilot.pause()
        # as painted, wrapped to the dialog: one line of text per sentence's words
        question = " ".join(painted(app.screen.query_one("#confirm-question")).split())
        assert "refused (503, retry later) until the drain ends" in question
        assert "the next call of running programs included" in question
        assert "calls already admitted continue" in question
        assert "wait" not in question
        await pilot.press("y")
        await until(pilot, lambda: any(title == "drain" for title, _ in notes))
    assert ("drain", "draining: new calls refused") in notes
    assert world.draining


async def test_boost_sends_no_amount_and_says_the_one_the_server_applied() -> None:
    world = StubWorld()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.table.row_count > 0 and view.selected() is not None)
        target = view.selected()
        await pilot.press("b")
        await until(pilot, lambda: any(title == "boost" for title, _ in notes))
    text = next(text for title, text in notes if title == "boost")
    assert text.startswith(f"boosted {target} by {BOOST_DEFAULT_S:g}s of policy key")
    assert world.audit[-1]["args"] == {}  # the server's default, not one of the console's


async def test_timers_that_fire_after_the_app_closed_do_nothing() -> None:
    """A reload timer set just before the app closes fires with its screens gone: it must not
    raise (an IndexError ended a pilot test once) nor read anything."""
    client = CannedClient(StubWorld())
    app = DashboardApp(client, feed=False, poll_s=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
    assert not app.screen_stack
    reads = sum(client.reads.values())
    app.polling.reload_detail()
    app.refresh_data()
    app.polling.reload_tool_calls()
    assert sum(client.reads.values()) == reads
