"""The dashboard keeps up with a server that fails and recovers, and reads only what shows.

A read that fails is reported once per outage and again after a recovery; meanwhile the view
says its data is stale and how old it is. The program screen reads its program alone, one
read for a burst of feed batches, not the list hidden under it.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from agentconsole.ui.client.models import FeedEvent
from agentconsole.ui.tui import messages as m
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.polling import DETAIL_RELOAD_S
from agentconsole.ui.tui.views.detail import ProgramScreen
from tests.ui.canned import CannedClient
from tests.ui.recording import recorded_notes
from tests.ui.stub_gen import BASE_T
from tests.ui.stub_world import BIG_PROGRAM, StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


class Clock:
    """A wall clock the test moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _failures(notes: list[tuple[str, str]], what: str) -> int:
    return sum(1 for title, _ in notes if title == f"cannot load {what}")


def _line(app: DashboardApp, selector: str) -> str:
    """The text of the stale line ``selector`` on the screen on top ("" while hidden)."""
    widget = app.screen.query_one(selector, Static)
    return str(widget.render()) if widget.display else ""


async def _poll(pilot: Pilot[None], app: DashboardApp, client: CannedClient, what: str) -> None:
    """Poll now and wait until that poll has read ``what`` and its answer is handled."""
    reads = client.reads[what]
    app.refresh_data()
    await until(pilot, lambda: client.reads[what] > reads and not app.sync.busy)
    await pilot.pause()


async def test_an_outage_is_reported_again_after_a_recovery_and_the_view_says_it_is_stale() -> None:
    client = CannedClient(StubWorld())
    clock = Clock(BASE_T + 1000.0)
    app = DashboardApp(client, feed=False, poll_s=3600, clock=clock)
    notes = recorded_notes(app)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: bool(app.state.tenants) and not app.sync.busy)
        assert _line(app, "#stale") == ""

        client.failing.add("tenants")
        clock.now += 5.0
        await _poll(pilot, app, client, "tenants")
        assert _failures(notes, "tenants") == 1
        stale = _line(app, "#stale")
        assert "stale tenants: read 5.00s ago" in stale
        assert "stub: tenants is down" in stale

        clock.now += 7.0
        await _poll(pilot, app, client, "tenants")  # the same outage: not reported again
        assert _failures(notes, "tenants") == 1
        assert "read 12.0s ago" in _line(app, "#stale")  # its age grows while it lasts

        client.failing.clear()
        await _poll(pilot, app, client, "tenants")
        assert _line(app, "#stale") == ""
        assert "tenants" not in app.state.failures

        client.failing.add("tenants")  # it comes back: a new outage, reported anew
        await _poll(pilot, app, client, "tenants")
        assert _failures(notes, "tenants") == 2
        assert "stale tenants" in _line(app, "#stale")

        await pilot.press("4")  # another view's data is fresh: no mark there
        await until(pilot, lambda: app.state.kv is not None and not app.sync.busy)
        assert _line(app, "#stale") == ""


async def test_the_program_screen_marks_its_detail_stale_until_a_read_succeeds() -> None:
    world = StubWorld()
    client = CannedClient(world)
    app = DashboardApp(client, poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=(100, 30)) as pilot:
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        await until(pilot, lambda: not app.sync.busy)
        assert _line(app, "#detail-stale") == ""
        client.failing.add("program")
        await _poll(pilot, app, client, "program")
        assert f"stale program {BIG_PROGRAM}" in _line(app, "#detail-stale")
        client.failing.clear()
        await _poll(pilot, app, client, "program")
        assert _line(app, "#detail-stale") == ""


def _touching(seq: int, program_id: str) -> FeedEvent:
    return FeedEvent(seq, BASE_T, "call.scheduled", program_id, "n1", 1, "tenant-b", "")


async def test_the_program_screen_reads_its_program_alone_once_per_burst_of_events() -> None:
    world = StubWorld()
    client = CannedClient(world)
    app = DashboardApp(client, poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.state.feed_live and app.state.events_seen > 0)
        await pilot.press("2")
        await until(pilot, lambda: bool(app.state.programs) and not app.sync.busy)
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        await until(pilot, lambda: not app.sync.busy)
        lists, details = client.reads["programs"], client.reads["program"]
        assert lists >= 1  # the list was read while it showed

        app.refresh_data()  # the periodic poll: the detail, not the list under it
        await until(pilot, lambda: client.reads["program"] > details and not app.sync.busy)
        details = client.reads["program"]

        for seq in range(20):  # a busy program: a feed batch each moment
            app.sync.buffer.push([_touching(world.seq + 1 + seq, BIG_PROGRAM)])
            app.post_message(m.FeedPending())
            await pilot.pause()
        await until(pilot, lambda: client.reads["program"] > details and not app.sync.busy)
        await pilot.pause(2 * DETAIL_RELOAD_S)
        assert client.reads["program"] - details <= 2  # one read for the burst, not 20
        assert client.reads["programs"] == lists  # the hidden list was never read again

        await pilot.press("escape")  # back on the list: it is what shows, it is read again
        app.refresh_data()
        await until(pilot, lambda: client.reads["programs"] > lists)
