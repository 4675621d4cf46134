"""The dashboard's program list pages by cursor: with over one page of running programs, some
ending and others starting between two page reads of one listing, every program running the
whole time is listed, once (an offset skipped the rows that moved up, so they flickered)."""

from __future__ import annotations

import pytest

from agentconsole.ui.client.http import PAGE_SIZE, HttpConsoleClient
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.programs import ProgramsView
from tests.ui.on_screen import program_ids_shown
from tests.ui.stub_server import serve_stub
from tests.ui.stub_world import StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]

#: over one page of running programs, as on a busy server
RUNNING = PAGE_SIZE + 150
ENDED = 10
STARTED = 3


async def test_programs_ending_and_starting_between_page_reads_are_neither_lost_nor_doubled() -> (
    None
):
    world = StubWorld(programs=RUNNING, all_running=True, big_nodes=20)
    before = set(world.programs)
    ended: list[str] = []
    started: list[str] = []

    def churn(page: list[str]) -> None:
        """Once, right after the first page went out: the first rows of it end (they leave
        the running filter) and newcomers start."""
        if ended:
            return
        for program_id in page[:ENDED]:
            status, _ = world.act("cancel", program_id, {})
            assert status == 200
            ended.append(program_id)
        started.extend(world.start_program() for _ in range(STARTED))

    world.on_page = churn
    with serve_stub(world) as stub:
        client = HttpConsoleClient(stub.url, stub.key)
        app = DashboardApp(client, url=stub.url, poll_s=3600)
        try:
            async with app.run_test(size=(120, 30)) as pilot:
                await pilot.press("2")
                view = app.query_one(ProgramsView)
                await until(pilot, lambda: app.state.programs_total > 0 and ended)
                await until(pilot, lambda: view.table.row_count >= len(app.state.programs))
                listed = set(app.state.programs)
                shown = program_ids_shown(view)
        finally:
            client.close()

    throughout = before - set(ended)
    assert len(throughout) > PAGE_SIZE  # the listing needed a second page
    missing = throughout - listed
    assert not missing, f"{len(missing)} programs running all along were not listed"
    # the rows are keyed by id, so they cannot repeat one: what the listing was served can
    served = world.listings[0]
    assert len(served) == len(set(served)), "paging served a program twice in one listing"
    assert throughout <= set(shown)
