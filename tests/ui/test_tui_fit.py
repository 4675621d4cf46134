"""What the console shows fits the terminal, at 80x24 and wide: long node ids, per-model KV
tiers and numbers are laid out to the room there is, never cut off at the screen's edge."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Footer
from textual.widgets._footer import FooterKey

from agentconsole.ui.tui import fmt
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.detail import ProgramScreen
from agentconsole.ui.tui.views.dialogs import HELP, HelpScreen
from agentconsole.ui.tui.views.tables import Cell
from tests.ui.canned import CannedClient
from tests.ui.on_screen import painted
from tests.ui.stub_world import (
    BIG_PROGRAM,
    DEMO_MODELS,
    StubWorld,
    demo_program_ids,
    infer_tool_ids,
)
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

SIZES = [(80, 24), (200, 50)]
#: a running program whose last step is three tool calls still running (the newest bars)
TOOL_WAIT_PROGRAM = "prog-0028"


async def _tables_measured(pilot: Pilot[None], app: DashboardApp) -> None:
    """Wait until every table of the screen has sized its columns to its rows (on idle)."""
    await until(
        pilot,
        lambda: (
            not any(
                t._require_update_dimensions or t._new_rows or t._updated_cells
                for t in app.screen.query(DataTable)
            )
        ),
    )
    await pilot.pause()


async def _open_timeline(pilot: Pilot[None], app: DashboardApp, program_id: str) -> DataTable[Cell]:
    app.open_program(program_id)
    await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
    await pilot.press("t")
    table: DataTable[Cell] = app.screen.query_one("#nodes-table", DataTable)
    table.move_cursor(row=table.row_count - 1)  # the newest nodes, the running tools
    await _tables_measured(pilot, app)
    return table


def _assert_bars_fit(app: DashboardApp, table: DataTable[Cell]) -> None:
    """The Timeline column is on screen, nothing scrolls sideways, and each running node's
    bar is painted whole, its newest end (now) included."""
    screen = app.screen
    assert isinstance(screen, ProgramScreen)
    assert screen.detail is not None
    text = painted(table)
    lines = text.splitlines()
    assert "Timeline" in lines[0], text
    assert table.max_scroll_x == 0, f"the table scrolls sideways by {table.max_scroll_x}"
    running = [n for n in screen.detail.nodes if n.state == "running"]
    assert len(running) == 3
    for node in running:
        bar = table.get_cell(node.node_id, "timeline")
        assert isinstance(bar, Text)
        assert bar.plain.endswith("▒")  # a running tool's span reaches now
        # the id's distinguishing tail is shown (its middle gives way on a narrow screen)
        line = next(line for line in lines if node.node_id[-6:] in line)
        assert bar.plain in line, f"{node.node_id}'s bar is cut:\n{text}"


def _long_id_world() -> StubWorld:
    world = StubWorld()
    infer_tool_ids(world.programs[TOOL_WAIT_PROGRAM])
    return world


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_timeline_bars_fit_the_screen_with_inferred_tool_ids(size: tuple[int, int]) -> None:
    world = _long_id_world()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=size) as pilot:
        table = await _open_timeline(pilot, app, TOOL_WAIT_PROGRAM)
        _assert_bars_fit(app, table)
        node_column = table.columns[table.ordered_columns[0].key]
        assert node_column.content_width <= 25  # the ◆ and at most 24 cells of id
        if size[0] >= 200:  # room to spare: whole states and every column
            text = painted(table)
            assert "◐ running" in text
            assert "Queue" in text.splitlines()[0]


def _running_ids(app: DashboardApp) -> list[str]:
    screen = app.screen
    assert isinstance(screen, ProgramScreen)
    assert screen.detail is not None
    return [n.node_id for n in screen.detail.nodes if n.state == "running"]


async def test_timeline_is_laid_out_again_when_the_terminal_narrows() -> None:
    world = _long_id_world()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=(200, 50)) as pilot:
        table = await _open_timeline(pilot, app, TOOL_WAIT_PROGRAM)
        wide = table.get_cell(_running_ids(app)[0], "timeline")
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: table.get_cell(_running_ids(app)[0], "timeline") != wide)
        table.move_cursor(row=table.row_count - 1)
        await _tables_measured(pilot, app)
        _assert_bars_fit(app, table)


def _footer_keys(app: DashboardApp) -> list[str]:
    """The footer's keys as painted ("? Help"), each checked to be wholly on screen."""
    footer = app.screen.query_one(Footer)
    keys = list(footer.query(FooterKey))
    for key in keys:
        assert key.virtual_region.right <= footer.size.width, f"{painted(key)!r} is cut"
    return [" ".join(painted(key).split()) for key in keys]


async def _footer_shows(pilot: Pilot[None], app: DashboardApp, expected: list[str]) -> None:
    """Wait for the footer to show ``expected`` (it is composed again after a change)."""
    try:
        await until(pilot, lambda: _footer_keys(app) == expected, timeout=5)
    except AssertionError:
        assert _footer_keys(app) == expected


#: the app's keys, after the screen's own (the palette's ``:`` is in the help)
APP_KEYS = ["p Preempt", "c Cancel", "b Boost", "? Help", "q Quit"]


async def test_the_program_screen_s_footer_shows_help_and_every_action_at_80x24() -> None:
    """A new operator on an 80x24 terminal sees ``?`` Help (and each key) on both tabs."""
    world = StubWorld()
    app = DashboardApp(CannedClient(world), feed=False, poll_s=3600, clock=world.timeline_now)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await _footer_shows(pilot, app, [": Cmd", *APP_KEYS])
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        dag = ["esc Back", "t Timeline", "n Cancel node", *APP_KEYS]
        await _footer_shows(pilot, app, dag)
        await pilot.press("t")
        timeline = ["esc Back", "t DAG", "z Zoom", "n Cancel node", *APP_KEYS]
        await _footer_shows(pilot, app, timeline)
        await pilot.press("t")
        await _footer_shows(pilot, app, dag)
        await pilot.press("escape", "2")
        await until(pilot, lambda: app.state.programs is not None and "? Help" in _footer_keys(app))
        assert _footer_keys(app)[-2:] == ["? Help", "q Quit"]


def _two_model_app(*, demo_ids: bool = False) -> tuple[DashboardApp, StubWorld]:
    """The console over what ``serve --runtime sim --demo`` reports: two models' tiers (one
    model in use, its HBM full) and, with ``demo_ids``, the demo's 31-character program ids."""
    world = StubWorld(models=DEMO_MODELS)
    if demo_ids:
        demo_program_ids(world)
    return DashboardApp(CannedClient(world), feed=False, poll_s=3600), world


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_overview_shows_each_model_s_hbm_on_one_line_and_keeps_the_charts(
    size: tuple[int, int],
) -> None:
    app, _ = _two_model_app()
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.state.overview is not None and not app.sync.busy)
        await pilot.pause()
        lines = painted(app.query_one("#ov-kv")).splitlines()
        # the sum, each model's HBM (one of them full), DRAM: a line each, never wrapped
        assert len(lines) == 4, lines
        assert lines[0].split()[:1] == ["hbm"]
        assert " 43% 913K/2.14M" in lines[0]
        saturated = next(line for line in lines if "100%" in line)
        assert "8b" in saturated.split()[0]  # which model is full, at a glance
        assert saturated.rstrip().endswith("913K/913K")
        assert any(line.split()[0].endswith("70b") and " 0% 0/1.23M" in line for line in lines)
        assert lines[3].split()[:1] == ["dram"]
        # the charts under it keep their room
        screen_height = app.screen.size.height
        for chart in ("#sp-throughput", "#sp-queue"):
            region = app.query_one(chart).region
            assert region.height >= 4, f"{chart} squeezed to {region.height} rows"
            assert region.bottom < screen_height


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_kv_view_fits_per_model_tiers_and_whole_numbers(size: tuple[int, int]) -> None:
    app, world = _two_model_app(demo_ids=True)
    async with app.run_test(size=size) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: app.state.kv is not None and not app.sync.busy)
        await _tables_measured(pilot, app)
        kv = app.state.kv
        assert kv is not None
        tiers = painted(app.query_one("#kv-tiers")).splitlines()
        # six tiers (two sums, four models' own) and the counters: one line each
        assert len(tiers) == 7, tiers
        assert [line.split()[0] for line in tiers[:6]] == [
            "hbm",
            "hbm.llama-3.1-70b",
            "hbm.llama-3.1-8b",
            "dram",
            "dram.llama-3.1-70b",
            "dram.llama-3.1-8b",
        ]
        assert "100% 913K/913K tok" in tiers[2]
        assert tiers[6].split()[0] == "migrations"
        for selector in ("#kv-retained", "#kv-placement"):
            table: DataTable[Cell] = app.query_one(selector, DataTable)
            assert table.max_scroll_x == 0, f"{selector} scrolls sideways"
            text = painted(table)
            shown = text.splitlines()[1:]
            assert len(shown) >= 8, f"{selector} shows too few rows"
            for line in shown:
                if not line.strip(" │"):
                    continue
                program_id = next(p for p in world.programs if p[-5:] in line)
                row = [str(cell) for cell in table.get_row(program_id)]
                for cell in row[1:]:  # every number whole, right where it is expected
                    assert cell in line, f"{selector}: {cell!r} cut in {line!r}"
        retained = painted(app.query_one("#kv-retained", DataTable)).splitlines()[0].split()
        if size[0] >= 200:  # room for every column and whole ids
            assert retained == ["Program", "Tenant", "Tokens", "Tier", "Until"]
            assert kv.retained[0].program_id in painted(app.query_one("#kv-retained"))
        else:
            assert retained == ["Program", "Tokens", "Tier"]


async def test_help_shows_each_line_whole_at_80_columns() -> None:
    app = DashboardApp(CannedClient(StubWorld()), feed=False, poll_s=3600)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        help_text = app.screen.query_one("#help-text")
        await until(pilot, lambda: help_text.size.height > 0)  # laid out
        shown = painted(help_text).splitlines()
        # one painted row per line of the help: none wraps onto a second row
        assert len(shown) == len(HELP.splitlines()), "\n".join(shown)
        assert any(line.rstrip().endswith("a running/all") for line in shown), shown


def test_tier_labels_give_way_to_the_meter() -> None:
    names = ["hbm", "hbm.llama-3.1-70b", "hbm.llama-3.1-8b", "dram"]
    assert fmt.tier_labels(names, 20) == {name: name for name in names}
    assert fmt.tier_labels(names, 10) == {
        "hbm": "hbm",
        "hbm.llama-3.1-70b": "hbm.70b",
        "hbm.llama-3.1-8b": "hbm.8b",
        "dram": "dram",
    }
    # no shared prefix: the middle of each model goes, its tail (the size) stays
    mixed = fmt.tier_labels(["hbm.qwen2.5-coder-32b", "hbm.llama-3.1-8b"], 12)
    assert mixed == {"hbm.qwen2.5-coder-32b": "hbm.qwen…32b", "hbm.llama-3.1-8b": "hbm.llam…-8b"}
    assert all(len(label) <= 12 for label in mixed.values())
