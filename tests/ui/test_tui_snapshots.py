"""SVG snapshots of every dashboard view at a fixed size, from deterministic injected data.

The app reads a :class:`CannedClient` (the stub world in-process: no socket, no clock, no
polling timer), the cursor does not blink, and each ``run_before`` waits for the data it shows.
Update with ``pytest tests/ui/test_tui_snapshots.py --snapshot-update`` after checking the SVGs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, RichLog

from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.detail import ProgramScreen
from tests.ui.canned import CannedClient
from tests.ui.stub_world import BIG_PROGRAM, StubWorld
from tests.ui.waiting import until

pytestmark = pytest.mark.tui
SnapCompare = Callable[..., bool]


def _app() -> DashboardApp:
    # open spans (running nodes) are drawn to "now": the moment the stub's timelines reach,
    # so the render does not depend on the day the tests run
    world = StubWorld()
    return DashboardApp(
        CannedClient(world), url="http://127.0.0.1:8000", poll_s=3600, clock=world.timeline_now
    )


def _steps(
    *keys: str, ready: Callable[[DashboardApp], object] = lambda app: True
) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, DashboardApp)
        await until(pilot, lambda: app.state.feed_live and len(app.state.history) == 1)
        await until(pilot, lambda: app.state.events_seen > 0)
        for key in keys:
            await pilot.press(key)
        await until(pilot, lambda: ready(app) and not app.sync.busy)
        await until(pilot, lambda: _settled(app))
        for log in app.screen.query(RichLog):
            log.scroll_end(animate=False, immediate=True)
        await pilot.pause(0.1)

    return run_before


def _settled(app: DashboardApp) -> bool:
    """No table still owes its column widths (DataTable sizes new rows on its next idle)
    and no log still holds lines it could not lay out yet."""
    tables = not any(
        t._require_update_dimensions or t._new_rows or t._updated_cells
        for t in app.screen.query(DataTable)
    )
    logs = not any(log._deferred_renders for log in app.screen.query(RichLog))
    return tables and logs


def _detail_ready(app: DashboardApp) -> bool:
    return isinstance(app.screen, ProgramScreen) and app.screen.detail is not None


VIEWS: Sequence[tuple[str, tuple[str, ...], Callable[[DashboardApp], object]]] = (
    ("overview", (), lambda app: app.state.overview),
    ("programs", ("2",), lambda app: app.state.programs),
    ("tenants", ("3",), lambda app: app.state.tenants),
    ("kv", ("4",), lambda app: app.state.kv),
    ("audit", ("5",), lambda app: app.state.audit),
    ("events", ("6",), lambda app: app.state.events),
    ("detail_dag", ("2", "enter"), _detail_ready),
    ("detail_timeline", ("2", "enter", "t"), _detail_ready),
    ("confirm_cancel", ("2", "down", "c"), lambda app: app.state.programs),
    ("filter", ("2", "slash", *"tenant-b", "enter"), lambda app: app.state.programs),
    ("help", ("question_mark",), lambda app: True),
)


@pytest.mark.parametrize(("name", "keys", "ready"), VIEWS, ids=[v[0] for v in VIEWS])
def test_view_at_80x24(
    snap_compare: SnapCompare,
    name: str,
    keys: tuple[str, ...],
    ready: Callable[[DashboardApp], object],
) -> None:
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=_steps(*keys, ready=ready))


@pytest.mark.parametrize(
    ("name", "keys"),
    [("overview", ()), ("detail", ("2", "enter", "t")), ("zoomed", ("2", "enter", "t", "z"))],
)
def test_larger_terminal_shows_more(
    snap_compare: SnapCompare, name: str, keys: tuple[str, ...]
) -> None:
    ready = _detail_ready if keys else (lambda app: app.state.overview)
    assert snap_compare(_app(), terminal_size=(140, 40), run_before=_steps(*keys, ready=ready))


def test_big_program_detail_opens_from_the_palette(snap_compare: SnapCompare) -> None:
    keys = ("2", "colon", *f"program {BIG_PROGRAM}", "enter")
    assert snap_compare(
        _app(), terminal_size=(80, 24), run_before=_steps(*keys, ready=_detail_ready)
    )
