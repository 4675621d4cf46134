"""Fixtures of the console tests: the stub server, deterministic apps, no cursor blink."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Input

# the browser lane's Chromium (one per test module that asks for it), the real server with
# the console page (one per module) and a fresh page on it (one per test)
from tests.ui.browser_session import browser  # noqa: F401
from tests.ui.browser_target import session, target  # noqa: F401
from tests.ui.real_server import RealServer, serve_real
from tests.ui.stub_server import RunningStub, serve_stub
from tests.ui.stub_world import StubWorld


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freeze the text cursor (the harlequin fixture) so snapshots do not depend on timing."""
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)


@pytest.fixture
def world() -> StubWorld:
    """A fresh deterministic world of 40 programs."""
    return StubWorld()


@pytest.fixture
def stub(world: StubWorld) -> Iterator[RunningStub]:
    """The stub server over ``world`` on a loopback port."""
    with serve_stub(world) as running:
        yield running


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (Textual's loop)."""
    return "asyncio"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """The real ``agentconsole serve --runtime sim --demo`` for the tests of one module."""
    with serve_real(tmp_path_factory.mktemp("serve")) as server:
        yield server


SCREENSHOTS = Path(os.environ.get("AGENTCONSOLE_SCREENSHOTS", "build/ui-screenshots"))


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """Where the browser tests save a screenshot of each view (reported at the end)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say where the screenshots went, if any were taken."""
    if SCREENSHOTS.is_dir() and any(SCREENSHOTS.glob("*.png")):
        terminalreporter.write_line(f"console screenshots: {SCREENSHOTS.resolve()}")
