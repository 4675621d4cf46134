"""The browser console in Debian's headless Chromium, driven by Playwright.

Every request the page makes is recorded (and anything not on the server's loopback origin is
blocked and fails the test). A screenshot of each view is saved under the screenshot folder
printed at the end of the run (``build/ui-screenshots`` unless ``AGENTCONSOLE_SCREENSHOTS``).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from agentconsole.sample_traces import load_trace
from tests.ui.browser_session import Session, open_session
from tests.ui.browser_target import ConsoleTarget
from tests.ui.stub_server import RunningStub, serve_stub
from tests.ui.stub_world import BIG_PROGRAM, StubWorld

pytestmark = pytest.mark.browser
VIEWS = ("overview", "programs", "tenants", "kv", "audit", "events")


def _shot(session: Session, directory: Path, name: str) -> None:
    session.page.screenshot(path=str(directory / f"{name}.png"), full_page=False)


def test_views_load_offline_render_charts_and_are_screenshotted(
    session: Session, target: ConsoleTarget, screenshot_dir: Path
) -> None:
    page = session.page
    page.goto(target.url + "/")
    session.wait("window.AC && AC.state.live && AC.state.overview !== null")
    session.wait("document.getElementById('chart-rates').data?.length === 2")
    session.wait("document.querySelector('#chart-kv .main-svg') !== null")
    for view in VIEWS:
        page.click(f"#tabs a[data-view={view}]")
        ready: dict[str, str] = {
            "overview": "document.querySelectorAll('#cards .card').length >= 10",
            "programs": "document.querySelectorAll('#programs tbody tr').length > 0",
            "tenants": "document.getElementById('chart-tenants').data?.length === 2"
            " && document.querySelectorAll('#door-cards .card').length === 6",
            "kv": "document.getElementById('chart-tiers').data?.length === 1",
            "audit": "AC.state.audit !== null",
            "events": "document.querySelectorAll('#tail div').length > 0",
        }
        session.wait(ready[view])
        page.wait_for_timeout(300)
        _shot(session, screenshot_dir, f"{target.kind}-{view}")
    first = page.locator("#programs tbody tr").first
    page.click("#tabs a[data-view=programs]")
    first.click()
    session.wait("AC.state.view === 'program' && AC.state.detail !== null")
    session.wait(
        "document.querySelectorAll('#dag svg g.node').length === AC.state.detail.nodes.length"
    )
    session.wait("document.getElementById('chart-timeline').data?.length === 5")
    _shot(session, screenshot_dir, f"{target.kind}-program")
    session.check_clean()


def _program_state(target: ConsoleTarget, program_id: str) -> object:
    return target.get(f"/v1/programs/{program_id}")["state"]


def _until(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_cancel_from_the_page_cancels_the_program(session: Session, target: ConsoleTarget) -> None:
    kept, doomed = target.new_running_program(), target.new_running_program()
    page = session.page
    page.goto(target.url + "/#/programs")
    session.wait("AC.state.live")
    for program_id, answer in ((kept, "Keep"), (doomed, "Cancel program")):
        page.fill("#filter", program_id)
        row = page.locator(f'#programs tbody tr[data-id="{program_id}"]')
        row.wait_for()
        row.locator("button[data-action=cancel]").click()
        assert page.locator("#confirm").is_visible()
        assert program_id in (page.text_content("#confirm-text") or "")
        page.get_by_role("button", name=answer, exact=True).click()
    page.locator(".toast", has_text=f"cancelled {doomed}").wait_for()
    _until(lambda: _program_state(target, doomed) == "cancelled")
    assert _program_state(target, kept) == "running"
    actions = target.get("/v1/operator/audit?limit=50")["actions"]
    assert isinstance(actions, list)
    assert ("cancel", doomed) in [(a["action"], a["target"]) for a in actions]
    assert ("cancel", kept) not in [(a["action"], a["target"]) for a in actions]
    session.check_clean()


def test_preempt_and_boost_buttons_reach_the_operator_api(
    session: Session, target: ConsoleTarget
) -> None:
    """Each click is taken by the page and answered before the next: the buttons are enabled
    only once this program's detail is drawn (Playwright's click waits for that), and the
    page's outcome of each action (``AC.state.outcomes``, what its toast said) is awaited, so
    an action the page lost or the server refused fails here, by name, at once; the audit
    then holds a row per action. Two clicks fired back to back with only a wait on the audit
    could not tell a lost click from a slow server, and said neither which action was missing."""
    program_id = target.new_running_program()
    page = session.page
    page.goto(f"{target.url}/#/program/{program_id}")
    for action in ("preempt", "boost"):
        taken = session.eval("AC.state.outcomes.length")
        page.click(f"#view-program button[data-action={action}]")
        session.wait(f"AC.state.outcomes.length > {taken}", timeout_s=30)
        outcome = session.eval("AC.state.outcomes[AC.state.outcomes.length - 1]")
        assert isinstance(outcome, dict)
        assert (outcome["action"], outcome["programId"]) == (action, program_id), outcome
        assert outcome["ok"], f"{action} of {program_id} failed in the page: {outcome['text']}"

    actions = target.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    rows = [(a["action"], a["result"]) for a in actions if a["target"] == program_id]
    # the audit row is written before the answer: no waiting on it
    missing = [action for action in ("preempt", "boost") if (action, "ok") not in rows]
    assert not missing, f"no audit row of {missing} on {program_id}; its rows: {rows}"
    session.check_clean()


def test_replay_this_window_writes_the_trace_and_shows_a_copyable_command(
    session: Session, target: ConsoleTarget, screenshot_dir: Path
) -> None:
    program_id = target.new_running_program()
    page = session.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=target.url)
    page.goto(target.url + "/#/overview")
    session.wait("AC.state.live")
    assert page.locator("#replay").is_hidden()
    page.click("#replay-window")
    page.locator("#replay").wait_for(state="visible")
    command = page.input_value("#replay-command")
    argv = shlex.split(command)
    assert argv[:3] == ["agentconsole", "bench", "--trace"]
    assert argv[argv.index("--policies") + 1] == "all"
    trace = load_trace(Path(argv[3]))
    assert program_id in {p.id for p in trace}
    assert argv[argv.index("--programs") + 1] == str(len(trace))
    summary = page.text_content("#replay-summary") or ""
    assert summary.startswith(f"{len(trace)} programs of the last 5 min written to {argv[3]}")
    page.click("#replay-copy")
    page.locator(".toast", has_text="bench command copied").wait_for()
    assert session.eval("navigator.clipboard.readText()") == command
    _shot(session, screenshot_dir, f"{target.kind}-replay-window")
    actions = target.get("/v1/operator/audit?limit=50")["actions"]
    assert isinstance(actions, list)
    assert ("whatif", "ok") in [(a["action"], a["result"]) for a in actions]
    session.check_clean()


def test_a_refused_key_is_asked_for_and_kept_out_of_the_url(
    session: Session, target: ConsoleTarget
) -> None:
    page = session.page
    page.goto(target.url + "/#key=sk-wrong")
    page.locator("#banner", has_text="refused").wait_for()
    assert "sk-wrong" not in page.url
    assert session.eval("sessionStorage.getItem('agentconsole-key')") == "sk-wrong"
    page.fill("#key", target.key)
    page.click("#keyform button[type=submit]")
    session.wait("AC.state.live && AC.state.key === " + repr(target.key))
    assert page.locator("#banner").is_hidden()
    session.errors.clear()  # the refused requests were logged as resource errors, as they should
    session.check_clean()


@pytest.fixture(scope="module")
def big_stub() -> Iterator[RunningStub]:
    with serve_stub(live=True) as stub:
        yield stub


def test_a_dag_of_hundreds_of_nodes_is_drawn_without_overlaps(
    browser: Browser, big_stub: RunningStub, screenshot_dir: Path
) -> None:
    for session in open_session(browser, big_stub.url):
        session.page.goto(f"{big_stub.url}/#/program/{BIG_PROGRAM}")
        session.wait("AC.state.detail !== null && AC.state.detail.nodes.length >= 200")
        session.wait(
            "document.querySelectorAll('#dag svg g.node').length === AC.state.detail.nodes.length"
        )
        overlaps = session.eval(
            """() => {
              const boxes = [...document.querySelectorAll('#dag svg g.node rect')]
                .map((r) => r.getBoundingClientRect());
              let bad = 0;
              for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const a = boxes[i], b = boxes[j];
                const apart = a.right <= b.left || b.right <= a.left
                  || a.bottom <= b.top || b.bottom <= a.top;
                if (!apart) bad++;
              }
              return bad;
            }"""
        )
        assert overlaps == 0
        marked = int(str(session.eval("document.querySelectorAll('#dag svg g.node.cp').length")))
        assert marked == session.eval("AC.state.detail.critical_path.length")
        assert (
            session.eval("document.querySelectorAll('#dag svg path.edge.cp').length") == marked - 1
        )
        session.page.click("#dag g.node[data-node=n7]")
        assert session.page.locator("#nodes tr.picked").get_attribute("data-node") == "n7"
        _shot(session, screenshot_dir, "stub-big-program")
        session.check_clean()


def test_live_feed_updates_the_page(browser: Browser, big_stub: RunningStub) -> None:
    for session in open_session(browser, big_stub.url):
        session.page.goto(big_stub.url + "/#/events")
        session.wait("AC.state.live && AC.state.eventsSeen > 0")
        seen = session.eval("AC.state.eventsSeen")
        points = session.eval("AC.state.history.length")
        session.wait(f"AC.state.eventsSeen > {seen} && AC.state.history.length > {points}")
        session.wait("document.querySelectorAll('#tail div').length > 0")
        session.check_clean()


def test_the_tenants_view_shows_what_the_door_learned(
    session: Session, target: ConsoleTarget
) -> None:
    """A finished program teaches the door its kind's run and peak; the operator sees both
    on the tenants view, beside the door's counts."""
    target.new_finished_program("ui-door-kind")
    page = session.page
    page.goto(f"{target.url}/#/tenants")
    row = "#door tbody tr"
    rows = f"[...document.querySelectorAll('{row}')]"
    session.wait(f"{rows}.some((r) => r.textContent.includes('ui-door-kind'))")
    cells = page.locator(f"{row}:has-text('ui-door-kind') td").all_text_contents()
    assert cells[:2] == ["tenant-a", "ui-door-kind"]
    assert cells[2].endswith("s")  # its expected run
    assert cells[3] != "-"  # its peak
    cards = page.locator("#door-cards .card .label").all_text_contents()
    assert cards[0] == "door"
    session.check_clean()


def test_a_tenant_key_sees_no_door_and_never_asks_for_it(
    session: Session, target: ConsoleTarget
) -> None:
    page = session.page
    page.goto(target.url + "/#key=sk-tenant-a")
    page.click("#tabs a[data-view=tenants]")
    session.wait("AC.state.view === 'tenants' && AC.state.refused.door")
    polls = session.eval("AC.state.stats.polls")
    session.wait(f"AC.state.stats.polls >= {polls} + 2")  # two more polls of the view
    assert page.locator("#door-section").is_hidden()
    # ``/v1/whoami`` said the key is a tenant's: the door is never asked (a refusal would be
    # an audit row on the server)
    assert [u for u in session.requests if u.endswith("/v1/operator/door")] == []
    session.check_clean()


def test_a_tenant_key_is_refused_the_audit_log_without_asking(
    session: Session, target: ConsoleTarget
) -> None:
    """Each refused operator read would be one more row in the server's audit: the key's role
    comes from ``/v1/whoami``, and the view says why it stays empty."""
    page = session.page
    page.goto(target.url + "/#key=sk-tenant-a")
    page.click("#tabs a[data-view=audit]")
    session.wait("AC.state.view === 'audit' && AC.state.refused.audit")
    polls = session.eval("AC.state.stats.polls")
    session.wait(f"AC.state.stats.polls >= {polls} + 2")
    assert page.locator("#audit-refused").is_visible()
    assert [u for u in session.requests if "/v1/operator/audit" in u] == []  # never asked
    session.check_clean()


def test_the_feed_resumes_from_a_reset_after_the_server_s_numbers_restart(
    session: Session, target: ConsoleTarget
) -> None:
    """A cursor from an earlier server life (a crash: the new server numbers from the store's
    last commit) is reset by the server; the page takes the lower cursor and shows the new
    life's events instead of waiting, silent, for the numbers to pass its old one."""
    page = session.page
    page.goto(target.url + "/")
    session.wait("AC.state.live === true")
    session.eval("AC.state.lastSeq = 1e12; AC.state.feedLife = 'an-earlier-life'")
    session.eval("AC.setKey(AC.state.key)")  # reconnects with the stale cursor
    session.wait("AC.state.lastSeq < 1e12 && AC.state.feedLife !== 'an-earlier-life'")
    seen = session.eval("AC.state.eventsSeen")
    target.new_running_program()
    session.wait(f"AC.state.eventsSeen > {seen}")
    session.check_clean()


def test_another_key_starts_the_event_tail_afresh(session: Session, target: ConsoleTarget) -> None:
    """The operator's tail holds every tenant's events; switching to a tenant key must not
    leave them on screen."""
    page = session.page
    page.goto(target.url + "/")
    target.new_running_program()
    session.wait("AC.state.events.length > 0")
    emptied = session.eval("(AC.setKey('sk-tenant-a'), AC.state.events.length)")
    assert emptied == 0
    target.new_running_program()
    page.wait_for_timeout(500)
    assert session.eval("AC.state.events.every((e) => e.tenant === 'tenant-a')")
    session.check_clean()


def test_the_dag_and_the_nodes_table_show_the_model_each_call_ran_on(
    session: Session, target: ConsoleTarget
) -> None:
    """``serve --demo`` serves two models: the page names each LLM node's model, and why."""
    program_id = target.new_running_program()
    node = target.get(f"/v1/programs/{program_id}")["nodes"]
    assert isinstance(node, list)
    model, reason = node[0]["model"], node[0]["model_choice"]["reason"]
    assert model
    page = session.page
    page.goto(f"{target.url}/#/program/{program_id}")
    session.wait("document.querySelectorAll('#dag svg g.node').length > 0")
    session.wait("document.querySelector('#nodes tbody td.model') !== null")
    cell = page.locator('#nodes tbody tr[data-node="n0"] td.model')
    assert (cell.text_content() or "").endswith(f"@ {model}")
    assert cell.get_attribute("title") == reason
    assert page.locator(f'#dag svg text[data-model="{model}"]').count() == 1
    session.check_clean()


def test_the_program_list_pages_by_cursor_through_programs_ending_and_starting(
    browser: Browser,
) -> None:
    """Over one page (500) of running programs, ten of the first page end and three start
    between the page's reads of one listing: every program running the whole time is in that
    listing (an offset skipped the ten rows that moved up, so they flickered), and the second
    read carried the server's cursor."""
    world = StubWorld(programs=650, all_running=True, big_nodes=20)
    before = set(world.programs)
    ended: list[str] = []

    def churn(page: list[str]) -> None:
        if ended:
            return
        for program_id in page[:10]:
            assert world.act("cancel", program_id, {})[0] == 200
            ended.append(program_id)
        for _ in range(3):
            world.start_program()

    world.on_page = churn
    with serve_stub(world) as stub:
        for session in open_session(browser, stub.url):
            session.page.goto(stub.url + "/#/overview")
            session.wait("AC.state.overview !== null")
            # record every listing the page takes (its polls replace the list each second;
            # the first one alone ran through the churn)
            session.eval(
                """() => {
                  const state = AC.state;
                  let rows = state.programs;
                  window.listings = [];
                  Object.defineProperty(state, "programs", {
                    get: () => rows,
                    set: (value) => { rows = value; window.listings.push([...value.keys()]); },
                  });
                }"""
            )
            session.page.evaluate("() => { location.hash = '#/programs'; }")
            session.wait("window.listings.length > 0")
            first = session.eval("window.listings[0]")
            assert isinstance(first, list)
            listed = [str(program_id) for program_id in first]
            reads = [u for u in session.requests if "/v1/programs?" in u]
            session.check_clean()
    throughout = before - set(ended)
    assert len(throughout) > 500
    missing = throughout - set(listed)
    assert not missing, f"{len(missing)} programs running all along were not listed"
    # the page keys its rows by id, so they cannot repeat one: what the listing was served can
    served = world.listings[0]
    assert len(served) == len(set(served)), "paging served a program twice in one listing"
    assert "cursor=after-" in reads[1]
    assert "offset=" not in reads[1]


def test_the_program_list_pages_by_offset_against_a_server_without_cursors(
    browser: Browser,
) -> None:
    """A server older than the cursor sends no ``next_cursor``: the page goes on by offset, as
    that server understands, and lists every program, not the first page alone."""
    world = StubWorld(programs=650, all_running=True, big_nodes=20)
    world.cursorless = True
    with serve_stub(world) as stub:
        for session in open_session(browser, stub.url):
            session.page.goto(stub.url + "/#/programs")
            session.wait("AC.state.programs.size >= 650")
            reads = [u for u in session.requests if "/v1/programs?" in u]
            assert any("offset=500" in u for u in reads), reads
            assert not any("cursor=" in u for u in reads), reads
            session.check_clean()
