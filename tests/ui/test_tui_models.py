"""Several models served: the program screen's DAG shows the model each LLM node ran on, and
the node under the cursor says which and why (the API's ``model`` and ``model_choice``)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable, Static

from agentconsole.ui.client.programs import ProgramDetail
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.detail import ProgramScreen
from tests.ui.canned import CannedClient
from tests.ui.stub_world import BIG_PROGRAM, StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]
REASON = "finish-time: 0.120 s predicted"


class ModelsClient(CannedClient):
    """The stub world's program with each LLM node's model as a multi-model server gives it."""

    def program(self, program_id: str) -> ProgramDetail:
        body: Any = self.world.program_json(program_id)
        for i, node in enumerate(n for n in body["nodes"] if n["kind"] == "llm"):
            node["model"] = "big" if i % 2 else "small"
            node["model_choice"] = {"reason": REASON, "candidates": []}
        return ProgramDetail.parse(body)


def test_the_client_reads_model_and_reason() -> None:
    detail = ModelsClient(StubWorld()).program(BIG_PROGRAM)
    llm = [n for n in detail.nodes if n.kind == "llm"]
    assert [n.model for n in llm[:2]] == ["small", "big"]
    assert {n.model_reason for n in llm} == {REASON}
    assert all(n.model is None for n in detail.nodes if n.kind != "llm")


async def test_dag_and_node_line_show_the_model() -> None:
    app = DashboardApp(ModelsClient(StubWorld()), poll_s=3600)
    async with app.run_test(size=(140, 40)) as pilot:
        app.open_program(BIG_PROGRAM)
        await until(pilot, lambda: isinstance(app.screen, ProgramScreen) and app.screen.detail)
        screen = app.screen
        assert isinstance(screen, ProgramScreen)
        assert screen.detail is not None
        dag = str(screen.query_one("#dag", Static).render())
        assert "@small" in dag
        assert "@big" in dag
        first = next(i for i, n in enumerate(screen.detail.nodes) if n.kind == "llm")
        await pilot.press("t")
        table = screen.query_one("#nodes-table", DataTable)
        table.move_cursor(row=first)
        line = screen.query_one("#node-model", Static)
        node = screen.detail.nodes[first]
        await until(pilot, lambda: f"ran on {node.model}" in str(line.render()))
        assert REASON in str(line.render())
        assert line.display
