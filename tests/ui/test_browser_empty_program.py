"""A program opened before its first node (every agent's ``POST /v1/programs`` comes first):
the browser console's program view says it has no nodes yet, and draws no DAG of negative
size (Chromium logged ``<svg> attribute height: A negative value is not valid``)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Browser

from tests.ui.browser_session import open_session
from tests.ui.real_server import RealServer

pytestmark = pytest.mark.browser


def test_a_program_with_no_nodes_yet_shows_so_without_errors(
    browser: Browser, real: RealServer
) -> None:
    headers = {"Authorization": f"Bearer {real.tenant_key}"}
    opened = httpx.post(real.url + "/v1/programs", json={"program_id": "empty-1"}, headers=headers)
    assert opened.status_code == 201
    for session in open_session(browser, real.url):
        session.page.goto(f"{real.url}/#/program/empty-1")
        session.wait("AC.state.detail !== null && AC.state.detail.program_id === 'empty-1'")
        session.wait("document.querySelector('#dag').textContent.includes('no nodes yet')")
        assert session.page.locator("#dag svg").count() == 0
        session.check_clean()
