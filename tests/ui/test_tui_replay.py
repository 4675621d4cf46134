""" "Replay this window" from the terminal dashboard, against the real ``serve --runtime sim
--demo``: the key and the palette entry write the window's trace on the server and show its
path and bench command. The file and the audit are checked, not only the screen."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path

import pytest
from textual.widgets import TextArea

from agentconsole.sample_traces import load_trace
from agentconsole.ui.client.http import HttpConsoleClient
from agentconsole.ui.tui.app import DashboardApp
from agentconsole.ui.tui.state import HISTORY
from agentconsole.ui.tui.views.replay import ReplayScreen
from tests.ui.canned import CannedClient
from tests.ui.real_server import RealServer
from tests.ui.stub_world import StubWorld
from tests.ui.waiting import until

pytestmark = [pytest.mark.tui, pytest.mark.anyio]


def _audited(server: RealServer) -> int:
    actions = server.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    return sum(1 for a in actions if (a["action"], a["result"]) == ("whatif", "ok"))


def _replaying(app: DashboardApp) -> bool:
    """Whether the replay answer is on top, its command box composed (a function, so mypy
    does not narrow): the screen is on the stack a moment before its widgets are."""
    return isinstance(app.screen, ReplayScreen) and bool(app.screen.query(TextArea))


def _check(screen: ReplayScreen, program_id: str) -> None:
    """The screen's command replays a trace file that holds the window's programs."""
    replay = screen.replay
    argv = shlex.split(screen.command)
    assert argv[:3] == ["agentconsole", "bench", "--trace"]
    assert argv[3] == replay.path
    assert argv[argv.index("--policies") + 1] == "all"
    assert argv[argv.index("--programs") + 1] == str(replay.programs)
    trace = load_trace(Path(argv[3]))
    assert len(trace) == replay.programs
    assert program_id in {p.id for p in trace}
    assert replay.since is not None
    # the sparklines' window: HISTORY one-second samples until the server's now
    assert abs(replay.until - replay.since - HISTORY) < 5


async def test_the_key_and_the_palette_replay_the_window(real: RealServer) -> None:
    program_id = f"ui-replay-{uuid.uuid4().hex[:8]}"
    real.open_program(program_id)
    before = _audited(real)
    client = HttpConsoleClient(real.url, real.key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.state.overview is not None)
        await pilot.press("w")
        await until(pilot, lambda: _replaying(app))
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        _check(screen, program_id)
        await pilot.press("ctrl+c")
        assert app.clipboard == screen.command
        await pilot.press("escape")
        assert not _replaying(app)

        await pilot.press("colon", *"replay this window")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: _replaying(app))
        second = app.screen
        assert isinstance(second, ReplayScreen)
        assert second.replay.path != screen.replay.path  # a new file each time
        _check(second, program_id)
    client.close()
    assert _audited(real) == before + 2


async def test_a_tenant_key_has_no_replay_to_start(real: RealServer) -> None:
    """``/v1/whoami`` says the key is a tenant's: the replay (an operator's action) is not
    offered, and its key does nothing."""
    client = HttpConsoleClient(real.url, real.tenant_key)
    app = DashboardApp(client, url=real.url, poll_s=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.sync.tenant_key)
        await pilot.press("w")
        await pilot.pause(0.5)
        assert not _replaying(app)
    client.close()


async def test_an_empty_window_is_a_warning_not_a_panel() -> None:
    canned = CannedClient(StubWorld())
    app = DashboardApp(canned, poll_s=3600)
    shown: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: shown.append((str(message), kw.get("severity", "")))  # type: ignore[method-assign]
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("w")
        await until(pilot, lambda: bool(shown))
        assert not _replaying(app)
    assert canned.calls == ["replay all"]
    assert shown == [("no program of the window ran: nothing to replay", "warning")]
