"""The browser console's routes, served in-process: page, assets, headers, no CDN anywhere."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient
from plotly.offline import get_plotlyjs

from agentconsole.cli import main
from agentconsole.ui.web.routes import CSP, PLOTLY_JS, asset, console_routes
from tests.ui.stub_server import build_app
from tests.ui.stub_world import StubWorld

CDN = re.compile(r"cdn\.|https?://|unpkg|jsdelivr|googleapis|cdnjs|cloudflare", re.I)
# XML namespaces are identifiers, never fetched.
NAMESPACES = {"http://www.w3.org/2000/svg"}
# CDN defaults inside plotly.js itself, used only by trace types the console never draws
# (geo maps, tile maps): reviewed once; a new plotly release that adds another fails here.
PLOTLY_ALLOWED = re.compile(
    r"https://cdn\.plot\.ly/un/|https://(tiles\.)?basemaps\.cartocdn\.com/\S*"
    r"|https://cdn\.jsdelivr\.net/npm/@mapbox/maki@[\d.]+/icons/\S*"
)


@pytest.fixture
def client() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=build_app(StubWorld(programs=5))) as test_client:
        yield test_client


def _assets(page: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/static/[^"]+)"', page)


def test_page_needs_no_key_and_is_locked_to_its_origin(client: TestClient[Litestar]) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert "default-src 'self'" in CSP
    assert "connect-src 'self'" in CSP
    names = {a.split("?")[0].removeprefix("/static/") for a in _assets(response.text)}
    assert names == {
        "app.css",
        "app.js",
        "views.js",
        "nodecancel.js",
        "models.js",
        "tools.js",
        "charts.js",
        "dag.js",
        PLOTLY_JS,
    }
    assert "{{asset:" not in response.text


def test_own_page_and_assets_refer_to_no_cdn(client: TestClient[Litestar]) -> None:
    page = client.get("/").text
    assert not CDN.search(page), CDN.search(page)
    for url in _assets(page):
        response = client.get(url)
        assert response.status_code == 200, url
        if url.startswith(f"/static/{PLOTLY_JS}"):
            continue
        text = response.text
        for match in CDN.finditer(text):
            url_text = text[match.start() : match.start() + 40]
            assert any(url_text.startswith(ns) for ns in NAMESPACES), (url, url_text)


def test_plotly_is_the_installed_bundle_with_only_reviewed_urls(
    client: TestClient[Litestar],
) -> None:
    response = client.get(f"/static/{PLOTLY_JS}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.text == get_plotlyjs()
    urls = set(re.findall(r"https?://[^\"'\s`)<>]+", response.text))
    cdn_urls = {u for u in urls if CDN.search(u.split("//", 1)[1])}
    unreviewed = {u for u in cdn_urls if not PLOTLY_ALLOWED.match(u)}
    assert not unreviewed


@pytest.mark.parametrize(
    "name", ["__init__.py", "%2E%2E%2Froutes.py", "..%5Croutes.py", ".hidden.js", "nope.js"]
)
def test_only_known_assets_are_served(client: TestClient[Litestar], name: str) -> None:
    assert client.get(f"/static/{name}").status_code == 404
    assert asset("__init__.py") is None
    assert asset("../routes.py") is None


@pytest.mark.parametrize("length", [300, 50_000])
def test_a_name_too_long_for_the_filesystem_is_a_quiet_404(
    client: TestClient[Litestar], caplog: pytest.LogCaptureFixture, length: int
) -> None:
    # the name once reached the filesystem: OSError (name too long), a 500 and a traceback
    # repeating the name in the log for every request
    name = "a" * length + ".js"
    with caplog.at_level(logging.DEBUG):
        response = client.get(f"/static/{name}")
    assert response.status_code == 404
    assert name not in response.text
    server_side = [r for r in caplog.records if r.name != "httpx"]  # the test client's own
    assert not [r for r in server_side if r.levelno >= logging.WARNING], caplog.text
    assert not [r for r in server_side if "a" * 300 in r.getMessage()]
    assert client.get("/static/app.js").status_code == 200
    # no cache keyed by the client's names: one per name tried grew memory without bound
    assert not hasattr(asset, "cache_info")


def test_routes_are_plain_handlers_outside_the_schema() -> None:
    handlers = console_routes()
    assert [sorted(h.paths) for h in handlers] == [["/"], ["/static/{name:str}"]]
    assert all(h.include_in_schema is False for h in handlers)
    assert all(h.opt.get("exclude_from_auth") for h in handlers)


def test_dashboard_command_passes_url_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr("agentconsole.ui.tui.app.run_dashboard", lambda u, k: calls.append((u, k)))
    runner = CliRunner()
    assert runner.invoke(main, ["dashboard", "--url", "http://h:1", "--key", "k"]).exit_code == 0
    result = runner.invoke(main, ["dashboard"], env={"AGENTCONSOLE_KEY": "sk-env"})
    assert result.exit_code == 0
    assert calls == [("http://h:1", "k"), ("http://127.0.0.1:8000", "sk-env")]
