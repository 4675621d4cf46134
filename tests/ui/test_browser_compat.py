"""The served models' KV compatibility in the browser console (headless Chromium): the
overview's "Model compatibility" button reads ``/v1/models/compatibility`` from a server
serving tiny local models (a smaller one, and a variant sharing the first's lower layers) and
shows each pair's verdict and reasons, and that sharing is off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from agentconsole.serve import ConsoleExtension
from agentconsole.server.app import Extension
from agentconsole.server.gateway.config import GatewayConfig
from agentconsole.server.gateway.extension import GatewayExtension
from tests.server.api.harness import LiveServer, make_config
from tests.server.compat_models import KEPT, ServedDirs, compat_models
from tests.ui.browser_session import Session, open_session

pytestmark = pytest.mark.browser


@pytest.fixture
def page_on_models(browser: Browser, tmp_path: Path) -> Iterator[Session]:
    """A page on a server serving the three tiny models (not the demo server of ``session``)."""
    models = compat_models()
    sources = [(name, str(models[name])) for name in ("large", "small", "variant")]
    # the tool gateway as ``serve`` mounts it: the console reads its tool calls on any page
    gateway = GatewayExtension(GatewayConfig())
    extensions: list[Extension] = [gateway, ConsoleExtension(), ServedDirs(sources)]
    with LiveServer(make_config(tmp_path / "db.duckdb"), extensions=extensions) as server:
        yield from open_session(browser, server.url)


def test_the_button_shows_the_matrix(page_on_models: Session, screenshot_dir: Path) -> None:
    session = page_on_models
    page = session.page
    page.goto(session.origin + "/#/overview")
    session.wait("window.AC && AC.state.overview !== null")
    assert page.locator("#compat").is_hidden()
    page.click("#model-compat")
    page.locator("#compat").wait_for(state="visible")
    rows = page.locator("#compat-pairs tbody tr")
    assert rows.count() == 3
    cells = [rows.nth(i).locator("td").all_text_contents() for i in range(3)]
    assert [c[:3] for c in cells] == [
        ["large", "small", "incompatible"],
        ["large", "variant", f"compatible: {KEPT} of 4 layers"],
        ["small", "variant", "incompatible"],
    ]
    assert "layers 2-3 differ" in cells[1][3]
    assert cells[0][3].startswith("different architecture")
    assert "large (4 layers)" in (page.text_content("#compat-models") or "")
    assert "cross-model KV sharing: off" in (page.text_content("#compat-sharing") or "")
    page.screenshot(path=str(screenshot_dir / "model-compat.png"))
    page.click("#compat-close")
    assert page.locator("#compat").is_hidden()
    session.check_clean()
