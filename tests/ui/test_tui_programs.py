"""The program list keeps up with a changing server (rows, order, cursor, header), and the
detail timeline zooms."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.widgets import DataTable

from agentconsole.ui.client.programs import ProgramSummary
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.selection import select
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.program_rows import GAP, LABELS, cells, header, line, styles, widths
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.canned import CannedClient
from tests.ui.on_screen import program_ids_shown
from tests.ui.stub_world import BIG_PROGRAM, StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def _expected(app: DashboardApp, view: ProgramsView) -> list[str]:
    rows = select(app.state.programs.values(), view.query_text, view.sort, view.reverse)
    return [p.program_id for p in rows]


async def test_rows_follow_polls_and_the_cursor_stays_on_its_program() -> None:
    world = StubWorld()
    app = DashboardApp(CannedClient(world), poll_s=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        view = app.query_one(ProgramsView)
        await until(pilot, lambda: view.table.row_count > 10)
        for _ in range(5):
            await pilot.press("down")
        chosen = view.selected()
        assert chosen is not None
        before = _expected(app, view)
        # programs ahead of the cursor go away, new ones arrive at the end
        for program_id in before[:3]:
            world.act("cancel", program_id, {})
        world.tick(0.5, 25)
        app.refresh_data()
        await until(pilot, lambda: program_ids_shown(view) == _expected(app, view) != before)
        assert view.selected() == chosen
        assert program_ids_shown(view)[view.table.cursor_row] == chosen
        # a sort change rebuilds in the new order and still keeps the cursor
        await pilot.press("s", "s", "s", "s", "S")
        assert view.sort == "service"
        assert view.reverse
        assert program_ids_shown(view) == _expected(app, view)
        assert view.selected() == chosen
        head = str(app.query_one("#programs-header").render())
        assert "Service ▼" in head


def test_row_layout_fits_the_room_and_aligns_numbers() -> None:
    programs = CannedClient(StubWorld()).programs().programs
    texts = [cells(p) for p in programs]
    sizes = widths(texts, 76)
    assert sum(sizes) + GAP * (len(LABELS) - 1) <= 76
    row = line(texts[0], styles(programs[0]), sizes)
    assert row.cell_len == sum(sizes) + GAP * (len(LABELS) - 1)
    assert header(sizes).plain.startswith("Program")
    long = ProgramSummary.parse({"program_id": "x" * 60, "state": "running"})
    narrow = widths([cells(long)], 76)
    assert narrow[0] < 60
    shown = line(cells(long), styles(long), narrow).plain[: narrow[0]]
    assert "…" in shown
    assert len(shown) == narrow[0]


async def test_zoom_scales_the_bars_to_the_rows_on_screen() -> None:
    world = StubWorld()
    app = DashboardApp(CannedClient(world), poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=(120, 30)) as pilot:
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        await pilot.press("t")
        table = app.screen.query_one("#nodes-table", DataTable)

        def filled(node_id: str) -> int:
            bar = table.get_cell(node_id, "timeline")
            assert isinstance(bar, Text)
            return len(bar.plain) - bar.plain.count("·")

        whole = filled("n2")
        await pilot.press("z")
        assert filled("n2") > 2 * whole  # the first page spans seconds, the run minutes
        last = f"n{len(table.rows) - 1}"
        assert filled(last) == 0  # far outside the window: not piled on an edge
        await pilot.press("z")
        assert filled("n2") == whole


async def test_a_running_node_s_bar_grows_to_now_while_the_server_answers_the_same() -> None:
    """The running node's span is open (``end: null``): drawn up to now, and redrawn as time
    passes although each read of the program returns the same detail."""
    world = StubWorld()
    clock = [world.timeline_now()]
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600, clock=lambda: clock[0])
    async with app.run_test(size=(120, 30)) as pilot:
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        await pilot.press("t")
        screen = app.screen
        assert isinstance(screen, ProgramScreen)
        assert screen.detail is not None
        running = screen.detail.nodes[-1]
        assert running.state == "running"
        assert running.timeline[-1].is_open
        table = screen.query_one("#nodes-table", DataTable)

        def bar() -> str:
            cell = table.get_cell(running.node_id, "timeline")
            assert isinstance(cell, Text)
            return cell.plain

        def filled() -> int:
            return len(bar()) - bar().count("·")

        assert bar()[-1] in "█▒"  # the run's window ends now: the open span reaches it
        assert filled() < 5  # it began a moment ago
        clock[0] += 300.0  # five minutes on, nothing new from the server
        app.refresh_data()
        await until(pilot, lambda: filled() > 20)  # now a good part of the run
        assert bar()[-1] in "█▒"  # and still up to now
