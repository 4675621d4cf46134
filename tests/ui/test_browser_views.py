"""The browser console's views in Chromium: what a key change, a failed read, an open span and
an operator action's answer leave on screen.

Canned data (the stub server) where a failure or a shape must be forced, the real
``agentconsole serve --runtime sim --demo`` where the server's own answer is the point (an open
tool span, the boost default). Failures are forced with Playwright's routing (the page's
requests answered by the test), never by changing the servers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route

from tests.ui.browser_session import Session, open_session
from tests.ui.browser_target import ConsoleTarget
from tests.ui.stub_server import TENANT_KEY, RunningStub, serve_stub
from tests.ui.stub_world import BIG_PROGRAM, StubWorld

pytestmark = pytest.mark.browser

UNAVAILABLE = {"error": {"type": "unavailable", "message": "the store is closed for a test"}}


@pytest.fixture(scope="module")
def stub() -> Iterator[RunningStub]:
    with serve_stub(StubWorld(programs=40)) as running:
        yield running


@pytest.fixture
def page_on_stub(browser: Browser, stub: RunningStub) -> Iterator[Session]:
    yield from open_session(browser, stub.url)


def _answer(status: int, body: object) -> Any:
    """A route handler answering ``status`` with ``body`` as JSON."""

    def handler(route: Route) -> None:
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    return handler


def _count(session: Session, selector: str) -> int:
    return int(str(session.eval(f"document.querySelectorAll({json.dumps(selector)}).length")))


# -- 1. a key change ----------------------------------------------------------------------

#: every keyed view's drawn content: none of it may survive a change of key
KEYED = {
    "overview cards": "#cards .card",
    "program rows": "#programs tbody tr",
    "detail cards": "#detail-summary .card",
    "DAG nodes": "#dag svg g.node",
    "node rows": "#nodes tbody tr",
    "tenant rows": "#tenants tbody tr",
    "door rows": "#door tbody tr",
    "KV cards": "#kv-cards .card",
    "audit rows": "#audit tbody tr",
    "tail lines": "#tail div",
}
CHARTS = ("chart-rates", "chart-timeline", "chart-tenants", "chart-tiers")


def test_a_wrong_key_leaves_nothing_of_the_previous_key_on_screen(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """With the operator key every view is drawn; after a wrong key (refused: 401) nothing
    the operator key read is left, in any view, nor does it come back."""
    session, page = page_on_stub, page_on_stub.page
    stub.world.act("boost", BIG_PROGRAM, {"amount": 1})  # an audit row to show
    page.goto(f"{stub.url}/#/program/{BIG_PROGRAM}")
    session.wait("document.querySelectorAll('#dag svg g.node').length > 0")
    for view, drawn_by in (
        ("programs", "program rows"),
        ("tenants", "door rows"),
        ("kv", "KV cards"),
        ("audit", "audit rows"),
        ("events", "tail lines"),
        ("overview", "overview cards"),
    ):
        page.click(f"#tabs a[data-view={view}]")
        if view == "events":
            session.wait("AC.state.live")
            stub.world.tick(0.1, 2)  # events for the tail (the stub is not live)
        session.wait(f"document.querySelectorAll('{KEYED[drawn_by]}').length > 0")
    session.wait("document.getElementById('chart-rates').data?.length === 2")
    drawn = {name: _count(session, css) for name, css in KEYED.items()}
    assert all(drawn.values()), f"the test did not draw every view: {drawn}"

    session.eval("AC.setKey('sk-wrong')")
    page.locator("#banner", has_text="refused").wait_for()
    polls = session.eval("AC.state.stats.pausedPolls")  # refused: the polls read nothing
    session.wait(f"AC.state.stats.pausedPolls >= {polls} + 2")
    left = {name: n for name, css in KEYED.items() if (n := _count(session, css))}
    assert left == {}, f"still on screen after the key changed: {left}"
    charts = [c for c in CHARTS if session.eval(f"!!document.getElementById('{c}').data")]
    assert charts == [], f"charts still drawn: {charts}"
    assert page.locator("#door-section").is_hidden()
    assert page.locator("#policy").text_content() == ""
    assert session.eval("AC.state.programs.size + AC.state.history.length") == 0
    session.errors.clear()  # the refused requests were logged as resource errors, as they should


def test_a_refusal_of_the_previous_key_does_not_refuse_the_new_one(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """An audit read sent with a tenant key is held until the operator key is in use; its 403
    then lands: it must not mark the operator key as refused (the audit would stay hidden). A
    server without ``/v1/whoami``: the tenant key's role is learned from that 403 alone."""
    session, page = page_on_stub, page_on_stub.page
    stub.world.act("boost", BIG_PROGRAM, {"amount": 1})
    stub.world.publishes_whoami = False
    page.goto(f"{stub.url}/#key={TENANT_KEY}")
    session.wait("AC.state.key === 'sk-tenant-a' && AC.state.stats.polls > 0")
    # hold the audit read sent with the tenant key until it is released (the page's fetch,
    # patched: its request, headers included, is made only then)
    session.eval(
        """() => {
          const send = window.fetch;
          window.release = null;
          window.fetch = (url, opts) => {
            const held = String(url).startsWith('/v1/operator/audit') && !window.release;
            if (!held) return send(url, opts);
            return new Promise((resolve) => { window.release = () => resolve(send(url, opts)); });
          };
        }"""
    )
    page.click("#tabs a[data-view=audit]")
    session.wait("window.release !== null")
    session.eval(f"AC.setKey('{stub.key}')")
    session.eval("window.release()")  # the tenant key's read goes out now: 403
    session.wait("document.querySelectorAll('#audit tbody tr').length > 0")
    polls = session.eval("AC.state.stats.polls")
    session.wait(f"AC.state.stats.polls >= {polls} + 2")
    assert session.eval("!!AC.state.refused.audit") is False
    assert page.locator("#audit-refused").is_hidden()
    assert _count(session, "#audit tbody tr") > 0
    stub.world.publishes_whoami = True
    session.errors.clear()  # the held read's 403 was logged as a resource error


# -- 2. the detail view -------------------------------------------------------------------


def test_another_program_clears_the_detail_and_a_failed_read_says_why(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """Moving to a program that cannot be read (404) leaves nothing of the previous one: no
    cards, DAG, timeline, node rows, no enabled button; the read's error is shown instead."""
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#/program/{BIG_PROGRAM}")
    session.wait("document.querySelectorAll('#dag svg g.node').length > 0")
    session.wait("document.getElementById('chart-timeline').data?.length === 5")
    assert page.locator("#view-program button[data-action=boost]").is_enabled()

    polls = session.eval("AC.state.stats.polls")
    page.evaluate("() => { location.hash = '#/program/no-such-program'; }")
    session.wait(f"AC.state.stats.polls >= {polls} + 2")  # its read came back (a 404), twice
    assert page.text_content("#detail-title") == "no-such-program"
    left = {
        name: n
        for name, css in KEYED.items()
        if name in ("detail cards", "DAG nodes", "node rows") and (n := _count(session, css))
    }
    assert left == {}, f"the previous program is still shown: {left}"
    assert session.eval("!!document.getElementById('chart-timeline').data") is False
    for action in ("preempt", "boost", "cancel"):
        assert page.locator(f"#view-program button[data-action={action}]").is_disabled()
    page.locator("#stale", has_text="no-such-program").wait_for()
    marker = page.text_content("#stale") or ""
    assert "HTTP 404" in marker, marker
    assert "no program no-such-program" in marker, marker

    # back to a readable program: the marker goes, the detail comes back
    page.evaluate(f"() => {{ location.hash = '#/program/{BIG_PROGRAM}'; }}")
    session.wait("document.querySelectorAll('#dag svg g.node').length > 0")
    session.wait("document.getElementById('stale').hidden")
    session.errors.clear()  # the 404 was logged as a resource error


# -- 3. a failed poll ---------------------------------------------------------------------


def test_a_failed_poll_marks_the_view_stale_until_a_read_succeeds(
    page_on_stub: Session, stub: RunningStub
) -> None:
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#/programs")
    session.wait("document.querySelectorAll('#programs tbody tr').length > 0")
    rows = _count(session, "#programs tbody tr")
    assert page.locator("#stale").is_hidden()

    page.route("**/v1/programs?*", _answer(503, UNAVAILABLE))
    page.locator("#stale", has_text="the store is closed for a test").wait_for()
    marker = page.text_content("#stale") or ""
    assert "the program list" in marker, marker
    assert "HTTP 503" in marker, marker
    assert "showing the last good read" in marker
    assert _count(session, "#programs tbody tr") == rows  # the last list, marked, not dropped

    page.unroute("**/v1/programs?*")
    page.locator("#stale").wait_for(state="hidden")
    session.errors.clear()  # the 503s were logged as resource errors


def test_a_failed_door_read_keeps_the_door_marked_stale(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """Only a 403 hides the door (a tenant key); a 503 keeps the last door, marked."""
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#/tenants")
    session.wait("document.querySelectorAll('#door tbody tr').length > 0")
    page.route("**/v1/operator/door", _answer(503, UNAVAILABLE))
    page.locator("#stale", has_text="the admission door").wait_for()
    assert page.locator("#door-section").is_visible()
    assert session.eval("!!AC.state.refused.door") is False
    page.unroute("**/v1/operator/door")
    page.locator("#stale").wait_for(state="hidden")
    session.errors.clear()


# -- 4. an open span ----------------------------------------------------------------------


def test_an_open_tool_span_is_drawn_up_to_now(session: Session, target: ConsoleTarget) -> None:
    """The real server sends a running tool's span with ``end: null``: its bar reaches now
    (and grows), not a 1 ms sliver."""
    program_id = target.new_running_program()
    session.page.goto(f"{target.url}/#/program/{program_id}")
    session.wait("AC.state.detail !== null")
    opened = session.eval(
        "AC.state.detail.nodes.find((n) => n.node_id === 'n1').timeline"
        ".find((p) => p.phase === 'tool')"
    )
    assert isinstance(opened, dict), opened
    assert opened["end"] is None, opened
    bar = """(() => {
      const tool = (document.getElementById('chart-timeline').data || [])
        .find((t) => t.name === 'tool');
      const at = tool ? tool.y.indexOf('n1') : -1;
      return at < 0 ? 0 : tool.x[at];
    })()"""
    session.wait(f"{bar} >= 1.0", timeout_s=20)  # a second or more, redrawn as it runs
    length = float(str(session.eval(bar)))
    running_for = float(str(session.eval(f"Date.now() / 1000 - {opened['start']}")))
    assert length <= running_for + 0.01
    session.check_clean()


# -- 5. the actions' answers --------------------------------------------------------------


def test_boost_sends_no_amount_and_says_the_server_s(
    session: Session, target: ConsoleTarget
) -> None:
    """As the dashboard: no body (the server's default amount), and the toast says it."""
    program_id = target.new_running_program()
    page = session.page
    posted: list[str | None] = []
    page.on(
        "request",
        lambda r: posted.append(r.post_data) if r.url.endswith(f"/{program_id}/boost") else None,
    )
    page.goto(f"{target.url}/#/program/{program_id}")
    page.click("#view-program button[data-action=boost]")  # enabled once its detail is shown
    toast = page.locator(".toast", has_text=f"boosted {program_id}")
    toast.wait_for()
    assert posted == [None]
    actions = target.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    boosts = [a for a in actions if (a["action"], a["target"]) == ("boost", program_id)]
    assert len(boosts) == 1
    amount = boosts[0]["args"]["amount"]
    assert amount == 10.0  # the server's default (server/api/schemas.py BoostIn)
    assert f"boosted {program_id} by 10s" in (toast.text_content() or "")
    session.check_clean()


def test_a_cancel_names_the_side_effects_still_running_and_where_doubt_goes(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """A cancel lets side-effecting tools run on (``flagged_tools``): they finish and commit,
    and only one whose end leaves its effect in doubt waits for an operator, in the Tools
    view. The toast says that, not that every one is in doubt."""
    session, page = page_on_stub, page_on_stub.page
    program_id = next(p for p, prog in stub.world.programs.items() if prog.state == "running")
    answer = {
        "program_id": program_id,
        "state": "cancelled",
        "aborted_calls": ["c1"],
        "interrupted_tools": [],
        "flagged_tools": ["n4", "n5"],
        "running_tools": ["n6"],
    }
    page.route(f"**/v1/programs/{program_id}/cancel", _answer(200, answer))
    page.goto(f"{stub.url}/#/program/{program_id}")
    page.click("#view-program button[data-action=cancel]")
    page.click("#confirm-yes")
    toast = page.locator(".toast", has_text=f"cancelled {program_id}")
    toast.wait_for()
    text = toast.text_content() or ""
    assert "side-effecting tools still running: n4, n5" in text, text
    assert "they finish and commit" in text, text
    assert "listed under Tools to reconcile" in text, text
    assert "reconcile them" not in text, text  # nothing is in doubt yet
    assert "the agent's own tools left to it: n6" in text, text  # as a node cancel says
    assert "warn" in (toast.get_attribute("class") or "")
    session.check_clean()


# -- 6. the tenants view ------------------------------------------------------------------


def test_tenants_show_starvation_as_the_dashboard_and_stored_bytes_as_bytes(
    page_on_stub: Session, stub: RunningStub
) -> None:
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#/tenants")
    session.wait("document.querySelectorAll('#tenants tbody tr').length === 3")
    heads = page.locator("#tenants thead th").all_text_contents()
    column = next(i for i, h in enumerate(heads) if h.startswith("Starvation"))
    assert "wait/service" in heads[column]
    stored = heads.index("Stored")
    rows = page.locator("#tenants tbody tr")
    starvation = [rows.nth(i).locator("td").nth(column) for i in range(3)]
    # the stub's tenants starve 0.05, 0.16, 0.27 (tenant-a, b, c); above 0.2 flagged
    assert [c.text_content() for c in starvation] == ["0.05", "0.16", "0.27"]
    flagged = ["warn" in (c.get_attribute("class") or "") for c in starvation]
    assert flagged == [False, False, True]
    # 3,500,000 bytes stored by tenant-a: 3.3 MiB, not "3.50M" tokens
    assert rows.nth(0).locator("td").nth(stored).text_content() == "3.3MiB"
    session.check_clean()


def test_the_door_lists_kinds_with_a_peak_but_no_run(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """As the dashboard: after the learned runs (by tenant, kind), the kinds with a peak and
    no run yet, with ``-`` for their run; each row's peak is its own tenant's."""
    session, page = page_on_stub, page_on_stub.page
    door = stub.world.door_json()
    door["peaks"].append({"tenant": "tenant-b", "kind": "newcomer", "peak_private_tokens": 4200.0})
    page.route("**/v1/operator/door", _answer(200, door))
    page.goto(f"{stub.url}/#/tenants")
    session.wait("[...document.querySelectorAll('#door tbody tr')].length > 0")
    rows = page.locator("#door tbody tr")
    cells = [rows.nth(i).locator("td").all_text_contents() for i in range(rows.count())]
    assert len(cells) == len(door["runs"]) + 1
    assert cells[-1] == ["tenant-b", "newcomer", "-", "4.20K"]
    runs = [(c[0], c[1]) for c in cells[:-1]]
    assert runs == sorted(runs)
    coding = {c[0]: c[3] for c in cells if c[1] == "coding"}
    assert len(set(coding.values())) == len(coding)  # the stub gives each tenant its own
    session.check_clean()


# -- 7. the charset -----------------------------------------------------------------------


def test_counts_and_rates_never_show_in_e_notation(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """Three significant digits, as the dashboard's ``fmt``: a count that rounds up to a
    thousand of its unit is the next unit's 1 (``toPrecision`` wrote ``1.00e+3K``)."""
    page_on_stub.page.goto(f"{stub.url}/#/programs")
    page_on_stub.wait("window.AC && window.AC.views && window.AC.views.fmt")
    counts = "[950, 999.6, 12345, 999500, 999999999].map(window.AC.views.fmt.count)"
    assert page_on_stub.eval(counts) == ["950", "1000", "12.3K", "1.00M", "1.00G"]
    rates = "[0.5, 99.96, 12345].map(window.AC.views.fmt.rate)"
    assert page_on_stub.eval(rates) == ["0.500/s", "100/s", "12345/s"]


def test_the_program_list_sorts_keys_element_by_element_and_missing_first(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """As the dashboard sorts them (``priority_sort``): a policy key's numbers in order, a
    program without one first; before, only the key's first number counted and a null
    compared inconsistently (the sort's order then depended on the rows' order)."""
    page_on_stub.page.goto(f"{stub.url}/#/programs")
    page_on_stub.wait("window.AC && window.AC.views && window.AC.views.compareValues")
    keys = "[[1, 5], [1, 2], [], [0, 9], [1, 2, 0]]"
    order = f"{keys}.sort(window.AC.views.compareValues)"
    assert page_on_stub.eval(order) == [[], [0, 9], [1, 2], [1, 2, 0], [1, 5]]
    mixed = "[3, null, 1, 2].sort(window.AC.views.compareValues)"
    assert page_on_stub.eval(mixed) == [None, 1, 2, 3]


def test_page_and_assets_name_one_charset(stub: RunningStub) -> None:
    page = httpx.get(stub.url + "/")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    for name, media in (("app.js", "text/javascript"), ("app.css", "text/css")):
        asset = httpx.get(f"{stub.url}/static/{name}")
        assert asset.headers["content-type"] == f"{media}; charset=utf-8"


# -- 8. bursts of feed news ---------------------------------------------------------------

#: how long the page lets the feed's batches gather before it reads the open program again
#: (app.js ``DETAIL_RELOAD_MS``, the dashboard's ``DETAIL_RELOAD_S``)
DETAIL_RELOAD_MS = 300
#: feed batches in a burst: the stub sends one every 100 ms while there is news
BURST = 20


def _running(world: StubWorld) -> str:
    """A small running program (the big one's detail is slow to draw)."""
    return next(
        program_id
        for program_id, program in world.programs.items()
        if program.state == "running" and program_id != BIG_PROGRAM
    )


def _requests(session: Session, fragment: str) -> int:
    return sum(1 for url in session.requests if fragment in url)


def _burst(session: Session, world: StubWorld, program_id: str, *, starting: bool) -> list[str]:
    """News of ``program_id`` each moment, a batch of its own each (and a program started
    with each when ``starting``), until the page has every event; the started programs."""
    seen = int(str(session.eval("AC.state.eventsSeen")))
    started: list[str] = []
    for _ in range(BURST):
        world.touch(program_id)
        if starting:
            started.append(world.start_program())
        session.page.wait_for_timeout(120)  # the next batch (a Playwright wait: routes run)
    session.wait(f"AC.state.eventsSeen >= {seen + BURST + len(started)}")
    return started


def _pause_timers(session: Session) -> None:
    """From now on no timer of the page fires (its once-a-second poll, a deferred read) unless
    the test runs the clock: a read the page makes meanwhile is one the feed asked for."""
    now = float(str(session.eval("Date.now()")))
    session.page.clock.pause_at(now + 1)


def _on_program_with_a_clock(session: Session, url: str, program_id: str) -> Page:
    """The page on ``program_id``'s detail, live, its timers under the test's clock."""
    page = session.page
    page.clock.install()
    page.goto(f"{url}/#/program/{program_id}")
    session.wait("AC.state.live && AC.state.detail !== null")
    return page


def test_news_of_the_program_last_opened_does_not_reread_the_list(browser: Browser) -> None:
    """Back on the list after a program's detail, that program's news is no reason to read
    every page of the list again: a burst of it (and of programs starting) reads nothing
    until the list's own poll, and that poll then shows every program started."""
    world = StubWorld()
    program_id = _running(world)
    with serve_stub(world) as stub:
        for session in open_session(browser, stub.url):
            page = _on_program_with_a_clock(session, stub.url, program_id)
            page.evaluate("() => { location.hash = '#/programs'; }")
            session.wait(f"AC.state.programs.has({json.dumps(program_id)})")
            _pause_timers(session)
            lists = _requests(session, "/v1/programs?")

            started = _burst(session, world, program_id, starting=True)
            reread = _requests(session, "/v1/programs?") - lists
            assert reread <= 1, f"{reread} list reads for {BURST} batches of one program's news"

            page.clock.resume()
            shown = " && ".join(
                f"document.querySelector('#programs tbody tr[data-id={json.dumps(p)}]')"
                for p in started
            )
            session.wait(shown)
            session.check_clean()


def test_a_burst_of_news_of_the_open_program_reads_it_once(browser: Browser) -> None:
    """As the dashboard: the open program's news is read once the batches of the moment are
    in, one read for a burst of them, not one each; that read shows the program as it is."""
    world = StubWorld()
    program_id = _running(world)
    detail = f"/v1/programs/{program_id}"
    with serve_stub(world) as stub:
        for session in open_session(browser, stub.url):
            page = _on_program_with_a_clock(session, stub.url, program_id)
            assert session.eval("AC.state.detail.priority_key[0]") == 1
            _pause_timers(session)
            reads = _requests(session, detail)

            world.act("boost", program_id, {"amount": 5})  # a change only a read shows
            _burst(session, world, program_id, starting=False)
            page.clock.run_for(DETAIL_RELOAD_MS)
            session.wait("AC.state.detail.priority_key[0] === 0")  # boosted: read after it
            reread = _requests(session, detail) - reads
            assert 1 <= reread <= 2, f"{reread} reads of the program for {BURST} batches"

            page.clock.resume()
            page.locator("#detail-summary .card", has_text="priority0, ").wait_for()
            session.check_clean()


# -- 9. what a key may do ---------------------------------------------------------------


def _reads(session: Session) -> list[str]:
    """The API reads the page made so far (the feed's connection left out)."""
    return [u for u in session.requests if "/v1/" in u and "/v1/events" not in u]


def test_a_refused_key_pauses_every_read_until_the_key_changes(
    page_on_stub: Session, stub: RunningStub
) -> None:
    """A key the server does not know (401) would poll the operator's reads once a second,
    each refusal an audit row: the page stops reading until another key is entered, says
    where keys come from, and does not claim to show a last good read it cleared."""
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#key=sk-wrong")
    banner = page.locator("#banner", has_text="refused")
    banner.wait_for()
    text = banner.text_content() or ""
    assert "configured" in text, text
    assert "no keys configured" in text, text
    assert "`agentconsole serve` printed" not in text
    session.wait("AC.state.keyRefused")
    page.locator("#stale", has_text="the overview could not be read").wait_for()
    stale = page.text_content("#stale") or ""
    assert "nothing to show" in stale, stale  # the views were cleared with the old key
    assert "last good read" not in stale, stale
    page.click("#tabs a[data-view=audit]")
    reads = len(_reads(session))
    paused = int(str(session.eval("AC.state.stats.pausedPolls")))
    session.wait(f"AC.state.stats.pausedPolls >= {paused} + 3")  # three more seconds
    assert _reads(session)[reads:] == []  # the audit log not asked for, nor anything else

    page.fill("#key", stub.key)
    page.click("#keyform button[type=submit]")
    session.wait("document.querySelectorAll('#audit tbody tr').length > 0")
    assert page.locator("#banner").is_hidden()
    session.errors.clear()  # the refused requests were logged as resource errors


def test_a_tenant_key_loses_the_operator_controls_and_cancels_its_own_program(
    page_on_stub: Session, stub: RunningStub
) -> None:
    session, page = page_on_stub, page_on_stub.page
    program_id = _running(stub.world)
    refused_before = len(stub.world.refused_paths)  # the stub serves the module's tests
    page.goto(f"{stub.url}/#key={TENANT_KEY}")
    page.click("#tabs a[data-view=programs]")
    row = page.locator(f"#programs tbody tr[data-id='{program_id}']")
    row.wait_for()
    session.wait("AC.state.tenantKey")  # ``/v1/whoami`` said so: no operator route asked
    page.click("#tabs a[data-view=tenants]")  # the door is not asked for either
    page.click("#tabs a[data-view=programs]")
    assert stub.world.refused_paths[refused_before:] == []  # each would be an audit row
    for action in ("preempt", "boost"):
        assert row.locator(f"button[data-action={action}]").is_hidden()
    assert page.locator("#policyform").is_hidden()
    assert "a tenant's key" in (page.text_content("#keystate") or "")
    before = len(session.requests)
    row.locator("button[data-action=cancel]").click()
    page.click("#confirm-yes")
    page.locator(".toast", has_text=f"cancelled {program_id}").wait_for()
    assert stub.world.programs[program_id].state == "cancelled"
    sent = session.requests[before:]
    assert any(u.endswith(f"/v1/programs/{program_id}/cancel") for u in sent), sent
    assert not [u for u in sent if "/v1/operator/programs/" in u]

    page.goto(f"{stub.url}/#/program/{program_id}")
    session.wait(f"AC.state.detail && AC.state.detail.program_id === {json.dumps(program_id)}")
    for action in ("preempt", "boost"):
        assert page.locator(f"#view-program button[data-action={action}]").is_hidden()
    session.eval(f"AC.setKey('{stub.key}')")  # an operator's key: offered again
    page.locator("#view-program button[data-action=boost]").wait_for(state="visible")
    session.errors.clear()  # the door's 403 was logged as a resource error


def test_the_policy_picker_offers_the_server_s_names_and_toasts_its_answer(
    page_on_stub: Session, stub: RunningStub
) -> None:
    session, page = page_on_stub, page_on_stub.page
    page.goto(f"{stub.url}/#/overview")
    session.wait("AC.state.overview !== null && AC.state.policyChoices !== null")
    assert page.locator("#policy-name").is_hidden()  # names published: no typing
    offered = page.locator("#policy-choice option").all_text_contents()
    assert set(offered) == set(stub.world.policy_choices_json()["policies"])
    assert page.input_value("#policy-choice") == "cp-cache"  # the one in force
    try:
        page.select_option("#policy-choice", "fcfs")
        page.click("#policyform button[type=submit]")
        page.locator(".toast", has_text="policy fcfs · kv policy adaptive").wait_for()
        assert stub.world.policy == "fcfs"
        page.locator("#policy", has_text="fcfs / adaptive").wait_for()

        page.select_option("#policy-field", "kv_policy")
        kv_offered = page.locator("#policy-choice option").all_text_contents()
        assert set(kv_offered) == set(stub.world.policy_choices_json()["kv_policies"])
        assert page.input_value("#policy-choice") == "adaptive"
    finally:
        stub.world.set_policy({"policy": "cp-cache"})
