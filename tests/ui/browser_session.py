"""The browser lane's harness: Debian's Chromium driven by Playwright, and a page session that
records what the page asked for and complained about (no request may leave the machine)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from tests.ui.chromium import ARGS, CHROMIUM


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), "Debian's chromium is missing: run scripts/setup.sh --test"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


class Session:
    """A page plus everything it asked for and complained about."""

    def __init__(self, page: Page, origin: str) -> None:
        self.page = page
        self.origin = origin
        self.requests: list[str] = []
        self.blocked: list[str] = []
        self.errors: list[str] = []

    def route(self, route: Route) -> None:
        url = route.request.url
        self.requests.append(url)
        if url.startswith((self.origin + "/", "data:", "blob:")) or url == self.origin:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def eval(self, script: str) -> object:
        return self.page.evaluate(script)

    def wait(self, script: str, timeout_s: float = 20.0) -> None:
        """Poll ``script`` until truthy (not ``wait_for_function``: the page's CSP forbids
        the eval it relies on, while ``evaluate`` goes through the debugger protocol)."""
        deadline = time.monotonic() + timeout_s
        while not self.page.evaluate(f"() => !!({script})"):
            assert time.monotonic() < deadline, f"not true within {timeout_s}s: {script}"
            self.page.wait_for_timeout(100)

    def check_clean(self) -> None:
        assert self.blocked == [], f"requests left the machine: {self.blocked}"
        assert all(u.startswith((self.origin, "data:", "blob:")) for u in self.requests)
        assert self.errors == [], self.errors


def open_session(browser: Browser, url: str) -> Iterator[Session]:
    context = browser.new_context(viewport={"width": 1400, "height": 950}, service_workers="block")
    page = context.new_page()
    session = Session(page, url)
    context.route("**/*", session.route)
    page.on("console", lambda m: session.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: session.errors.append(f"page error: {e}"))
    yield session
    context.close()
