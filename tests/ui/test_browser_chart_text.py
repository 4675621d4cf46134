"""Server strings in the browser console's charts are drawn as text, never as Plotly's markup.

Plotly reads a subset of HTML in every text it draws (axis ticks, legends, bar texts, hover
labels): ``<a href>`` becomes a link, ``<span style>`` restyles, ``<b>`` bolds, ``<br>`` breaks
the line. Tenant names are free text in the server's configuration, so a tenant named
``<a href=…>`` would put a link on every operator's dashboard. These tests give tenants,
programs, nodes and a tier such names and read the SVG Chromium drew: each name must show
literally, and no link or styled span may come of it.

The real ``agentconsole serve`` (its tenants configured through the environment, as an operator
would) where a user can choose the name; the stub server, its answers rewritten by
Playwright's routing, for ids the real server refuses (``ID_PATTERN``) and tier names it fixes:
the charts must not depend on those checks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Route

from tests.ui.browser_session import Session, open_session
from tests.ui.real_server import OPERATOR_KEY, RealServer, serve_real
from tests.ui.stub_server import RunningStub, serve_stub
from tests.ui.stub_world import StubWorld

pytestmark = pytest.mark.browser

#: a link to somewhere else, a giant label, bold, italics, a line break and an entity: each
#: rendered by Plotly if passed as is (``R&amp;D`` would show as ``R&D``)
LINK = '<a href="https://evil.example/">click</a>'
GIANT = '<span style="font-size:80px">x</span>'
BOLD = "<b>acme</b>"
ITALIC = "<i>slanted</i>"
BREAK = "two<br>lines"
ENTITY = "R&amp;D"
HOSTILE = (LINK, GIANT, BOLD, ITALIC, BREAK, ENTITY)


def _chart_text(session: Session, chart_id: str) -> str:
    """Everything Plotly drew in ``chart_id`` as text (ticks, legend, bar texts, hover)."""
    return str(session.eval(f"document.getElementById({json.dumps(chart_id)}).textContent"))


def _markup_drawn(session: Session, chart_id: str) -> dict[str, int]:
    """What Plotly makes of markup in ``chart_id``: links, and spans it styled (``<b>``,
    ``<i>``, ``<span style>``: a ``tspan`` with a ``style`` of its own)."""
    script = f"""(() => {{
      const chart = document.getElementById({json.dumps(chart_id)});
      const styled = [...chart.querySelectorAll('tspan[style]')].filter((t) =>
        /font-weight|font-style|font-size/.test(t.getAttribute('style')));
      return {{ links: chart.querySelectorAll('a').length, styled: styled.length }};
    }})()"""
    drawn = session.eval(script)
    assert isinstance(drawn, dict), drawn
    return {str(k): int(v) for k, v in drawn.items()}


def _assert_drawn_literally(session: Session, chart_id: str, names: Iterable[str]) -> None:
    """Each of ``names`` shows in ``chart_id`` as sent, and no markup in them was drawn."""
    text = _chart_text(session, chart_id)
    missing = [name for name in names if name not in text]
    assert missing == [], f"not drawn literally: {missing} in {text!r}"
    assert _markup_drawn(session, chart_id) == {"links": 0, "styled": 0}


def _hover_first_node(session: Session, chart_id: str) -> str:
    """Hover the first node's first bar in the timeline ``chart_id``; the hover label's text.
    The node is found by the chart's own first tick value, however the chart spells ids."""
    script = f"""(() => {{
      const chart = document.getElementById({json.dumps(chart_id)});
      const first = chart.layout.yaxis.tickvals[0];
      const curve = chart.data.findIndex((t) => t.y.includes(first));
      const point = chart.data[curve].y.indexOf(first);
      Plotly.Fx.hover(chart, [{{ curveNumber: curve, pointNumber: point }}]);
      return chart.querySelector('.hoverlayer').textContent;
    }})()"""
    return str(session.eval(script))


def _answer_with(transform: Callable[[Any], Any]) -> Callable[[Route], None]:
    """A route handler answering the page's read with the server's own answer, rewritten."""

    def handler(route: Route) -> None:
        response = route.fetch()
        body = transform(response.json())
        route.fulfill(response=response, body=json.dumps(body))

    return handler


# -- the real server: a tenant's configured name ----------------------------------------

HOSTILE_KEYS = {f"sk-hostile-{i}": name for i, name in enumerate(HOSTILE)}


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """The real server (no demo agents) with a tenant of each hostile name, configured in the
    environment as an operator would; each tenant has opened a program."""
    tmp: Path = tmp_path_factory.mktemp("hostile")
    with contextlib.ExitStack() as running:
        with pytest.MonkeyPatch.context() as env:  # only while it starts: the child copies it
            env.setenv("AGENTCONSOLE_AUTH__TENANT_KEYS", json.dumps(HOSTILE_KEYS))
            env.setenv("AGENTCONSOLE_AUTH__OPERATOR_KEYS", json.dumps([OPERATOR_KEY]))
            server = running.enter_context(serve_real(tmp, demo=False))
        for key in HOSTILE_KEYS:
            body = {"program_id": f"p-{key}", "labels": {"workload": "hostile"}}
            headers = {"Authorization": f"Bearer {key}"}
            opened = httpx.post(server.url + "/v1/programs", json=body, headers=headers)
            opened.raise_for_status()
        yield server


def test_a_tenant_s_name_is_drawn_literally_on_the_real_server(
    browser: Browser, hostile_server: RealServer
) -> None:
    tenants = hostile_server.get("/v1/tenants")["tenants"]
    assert isinstance(tenants, list)
    assert set(HOSTILE) <= {t["tenant"] for t in tenants}  # the server sends them as named
    for session in open_session(browser, hostile_server.url):
        session.page.goto(f"{hostile_server.url}/#/tenants")
        session.wait("document.querySelectorAll('#tenants tbody tr').length >= 6")
        # one tick per tenant drawn (the chart is first drawn empty, before the read)
        session.wait("document.querySelectorAll('#chart-tenants .xtick').length >= 6")
        _assert_drawn_literally(session, "chart-tenants", HOSTILE)
        session.check_clean()


# -- the stub: names the real server does not let through ---------------------------------


@pytest.fixture(scope="module")
def stub() -> Iterator[RunningStub]:
    with serve_stub(StubWorld(big_nodes=8)) as running:
        yield running


@pytest.fixture
def page_on_stub(browser: Browser, stub: RunningStub) -> Iterator[Session]:
    yield from open_session(browser, stub.url)


def test_program_ids_and_tier_names_are_drawn_literally(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """The KV view's placement chart (program ids on its axis) and tier chart (tier names)."""
    session, page = page_on_stub, page_on_stub.page
    hostile_tier = "<i>nvme</i>"

    def rename(kv: dict[str, Any]) -> dict[str, Any]:
        placed = list(kv["placement"].items())
        renamed = {name: spots for name, (_, spots) in zip(HOSTILE, placed, strict=False)}
        kv["placement"] = {**renamed, **dict(placed[len(HOSTILE) :])}
        kv["tiers"][hostile_tier] = {"used_tokens": 10, "capacity_tokens": 100, "used_bytes": 1}
        return kv

    assert len(stub.world.kv_json()["placement"]) >= len(HOSTILE)  # each name gets a row
    page.route("**/v1/kv", _answer_with(rename))
    page.goto(f"{stub.url}/#/kv")
    session.wait("document.querySelector('#chart-placement .main-svg') !== null")
    session.wait("document.querySelector('#chart-tiers .main-svg') !== null")
    _assert_drawn_literally(session, "chart-placement", HOSTILE)
    _assert_drawn_literally(session, "chart-tiers", [hostile_tier])
    session.check_clean()


def test_node_ids_are_drawn_literally_in_the_timeline_and_its_hover(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """The timeline's axis (node ids, the critical path's marked) and its hover template."""
    session, page = page_on_stub, page_on_stub.page
    program_id = next(p for p, prog in stub.world.programs.items() if len(prog.nodes) >= 3)
    renames = {"n0": LINK, "n1": GIANT, "n2": BOLD}

    def rename(detail: dict[str, Any]) -> dict[str, Any]:
        def new(node_id: str) -> str:
            return renames.get(node_id, node_id)

        for node in detail["nodes"]:
            node["node_id"] = new(node["node_id"])
            node["parents"] = [new(p) for p in node["parents"]]
        detail["edges"] = [[new(a), new(b)] for a, b in detail["edges"]]
        detail["critical_path"] = [new(n) for n in detail["critical_path"]]
        return detail

    page.route(f"**/v1/programs/{program_id}", _answer_with(rename))
    page.goto(f"{stub.url}/#/program/{program_id}")
    session.wait("document.querySelector('#chart-timeline .main-svg') !== null")
    _assert_drawn_literally(session, "chart-timeline", renames.values())

    hover = _hover_first_node(session, "chart-timeline")  # n0, named LINK
    assert LINK in hover, hover
    assert _markup_drawn(session, "chart-timeline") == {"links": 0, "styled": 0}
    session.check_clean()
