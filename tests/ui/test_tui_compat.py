"""The served models' KV compatibility in the terminal dashboard: ``m`` (and the palette's
"model compatibility") opens the matrix read over HTTP from a server serving tiny local
models, a smaller one and a variant sharing the first's lower layers; the reasons follow the
cursor and the panel says sharing is off."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.views.compat import CompatScreen
from tests.server.api.harness import OPERATOR, LiveServer, make_config
from tests.server.compat_models import KEPT, ServedDirs, compat_models
from tests.ui.canned import CannedClient
from tests.ui.stub_world import StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def _open(app: DashboardApp) -> CompatScreen | None:
    """The matrix panel once it shows the matrix (a function, so mypy does not narrow)."""
    screen = app.screen
    return screen if isinstance(screen, CompatScreen) and screen.matrix is not None else None


def _text(screen: CompatScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def test_the_key_opens_the_matrix_of_the_served_models(tmp_path: Path) -> None:
    models = compat_models()
    sources = [(name, str(models[name])) for name in ("large", "small", "variant")]
    config = make_config(tmp_path / "db.duckdb")
    with LiveServer(config, extensions=[ServedDirs(sources)]) as server:
        client = HttpConsoleClient(server.url, OPERATOR)
        app = DashboardApp(client, url=server.url, feed=False, poll_s=3600)
        async with app.run_test(size=(130, 36)) as pilot:
            await pilot.press("m")
            await until(pilot, lambda: _open(app) is not None)
            screen = _open(app)
            assert screen is not None
            table = screen.query_one("#compat-pairs", DataTable)
            rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
            assert rows == [
                ["large", "small", "incompatible"],
                ["large", "variant", f"compatible: {KEPT} of 4 layers"],
                ["small", "variant", "incompatible"],
            ]
            assert "large (4 layers)" in _text(screen, "#compat-models")
            assert "cross-model KV sharing: off" in _text(screen, "#compat-sharing")
            await until(pilot, lambda: "different architecture" in _text(screen, "#compat-reasons"))
            await pilot.press("down")
            await until(pilot, lambda: "layers 2-3 differ" in _text(screen, "#compat-reasons"))
            await pilot.press("escape")
            assert _open(app) is None
        client.close()


async def test_the_palette_opens_it_too() -> None:
    canned = CannedClient(StubWorld())
    app = DashboardApp(canned, feed=False, poll_s=3600)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("colon", *"model compatibility")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: _open(app) is not None)
        screen = _open(app)
        assert screen is not None
        assert screen.matrix is not None
        assert [p.verdict for p in screen.matrix.pairs] == [
            "incompatible",
            "compatible: 2 of 4 layers",
        ]
    assert "model compatibility" in canned.calls
