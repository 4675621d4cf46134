"""The browser console's Tools view in Chromium, against the real ``serve --runtime sim
--demo``: a side-effecting tool call left in doubt (a timeout: ``needs_reconcile``) is listed
and counted on its tab; the operator reconciles it (commit with a result, or retry; each asks
first) and reads the server's answer or refusal; a side effect still running is listed, and a
cancel's toast says it runs on; a tenant's key is offered none of it and never asks.

Every effect is checked through the API (the intent's state, the agent's retry).
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.ui import tool_doubt
from tests.ui.browser_session import Session
from tests.ui.browser_target import ConsoleTarget
from tests.ui.waiting import wait_until

pytestmark = pytest.mark.browser

RECONCILE_ROUTE = "/reconcile"


def _last_outcome(session: Session, taken: object) -> dict[str, object]:
    session.wait(f"AC.state.outcomes.length > {taken}", timeout_s=20)
    outcome = session.eval("AC.state.outcomes[AC.state.outcomes.length - 1]")
    assert isinstance(outcome, dict)
    return outcome


def _row(call: tool_doubt.SideEffect, table: str = "reconcile") -> str:
    return f'#{table} tbody tr[data-id="{call.tool_call_id}"]'


def _retried_by_another_operator(target: ConsoleTarget, call: tool_doubt.SideEffect) -> None:
    httpx.post(
        f"{target.url}/v1/operator/tool-calls/{call.tool_call_id}/reconcile",
        json={"action": "retry"},
        headers={"Authorization": f"Bearer {target.key}"},
    ).raise_for_status()


def test_an_operator_commits_a_call_in_doubt_with_its_result(
    session: Session, target: ConsoleTarget
) -> None:
    call = tool_doubt.in_doubt(target.url)
    page = session.page
    page.goto(target.url + "/#/overview")
    # counted on the Tools tab whatever the view shows
    session.wait("document.getElementById('tools-count').textContent !== ''")
    assert page.locator("#tools-count").is_visible()
    page.click("#tabs a[data-view=tools]")
    row = page.locator(_row(call))
    row.wait_for()
    cells = row.locator("td").all_text_contents()
    assert re.fullmatch(r"\d\d:\d\d:\d\d", cells[0]), cells  # since when, UTC
    assert cells[1:6] == [
        call.program_id,
        "t-mail",
        call.tool,
        "tenant-a",
        "tool_timeout: no answer within 0.3 s",
    ]
    assert "in doubt" in (page.text_content("#tools-note") or "")

    # keeping sends nothing
    dialog = page.locator("#commit-dialog")
    row.locator("button[data-action=commit]").click()
    # the page's handler opens it (a loaded machine takes a moment): waited for, or it fails
    dialog.wait_for(state="visible")
    assert "the tool does not run again" in (page.text_content("#commit-text") or "")
    dialog.get_by_role("button", name="Keep", exact=True).click()
    dialog.wait_for(state="hidden")
    assert not [u for u in session.requests if u.endswith(RECONCILE_ROUTE)]
    assert call.state() == "needs_reconcile"

    # a result that is not JSON keeps the dialog open and says why
    row.locator("button[data-action=commit]").click()
    page.fill("#commit-result", "{not json")
    page.click("#commit-yes")
    assert dialog.is_visible()
    assert "not JSON" in (page.text_content("#commit-error") or "")
    assert not [u for u in session.requests if u.endswith(RECONCILE_ROUTE)]

    taken = session.eval("AC.state.outcomes.length")
    page.fill("#commit-result", '{"sent": true, "id": "m-1"}')
    page.click("#commit-yes")
    outcome = _last_outcome(session, taken)
    assert outcome["ok"] is True, outcome
    assert outcome["text"] == (
        f"committed {call.program_id}/t-mail {call.tool}: the agent's retry gets this result; "
        "the tool does not run"
    )
    page.locator(".toast", has_text=f"committed {call.program_id}").wait_for()
    assert call.state() == "committed"
    row.wait_for(state="detached")
    retried = call.retry()  # the agent's retry reads what the operator recorded
    assert retried.status_code == 200, retried.text
    assert retried.json()["result"] == {"sent": True, "id": "m-1"}
    session.check_clean()


def test_retry_asks_first_and_a_call_settled_meanwhile_is_refused(
    session: Session, target: ConsoleTarget
) -> None:
    call = tool_doubt.in_doubt(target.url)
    other = tool_doubt.in_doubt(target.url)
    page = session.page
    page.goto(target.url + "/#/tools")
    page.locator(_row(other)).wait_for()

    page.locator(_row(call)).locator("button[data-action=retry]").click()
    page.locator("#confirm").wait_for(state="visible")
    assert "runs the tool once more" in (page.text_content("#confirm-text") or "")
    assert page.text_content("#confirm-yes") == "Retry tool call"
    page.get_by_role("button", name="Keep", exact=True).click()
    assert not [u for u in session.requests if u.endswith(RECONCILE_ROUTE)]

    taken = session.eval("AC.state.outcomes.length")
    page.locator(_row(call)).locator("button[data-action=retry]").click()
    page.click("#confirm-yes")
    outcome = _last_outcome(session, taken)
    assert outcome["ok"] is True, outcome
    assert str(outcome["text"]).startswith(f"retry allowed for {call.program_id}/t-mail")
    assert call.state() == "retryable"

    # another operator settles the second call while this page asks to commit it: the
    # feed's tool.reconciled takes its row away, and the commit asked before is refused
    taken = session.eval("AC.state.outcomes.length")
    page.locator(_row(other)).locator("button[data-action=commit]").click()
    page.locator("#commit-dialog").wait_for(state="visible")
    _retried_by_another_operator(target, other)
    page.locator(_row(other)).wait_for(state="detached")
    page.click("#commit-yes")
    outcome = _last_outcome(session, taken)
    assert outcome["ok"] is False, outcome
    assert outcome["text"] == (
        f"commit {other.program_id}/t-mail {other.tool}: "
        "only a needs_reconcile tool call can be reconciled"
    )
    page.locator(".toast.error", has_text="only a needs_reconcile").wait_for()
    assert other.state() == "retryable"  # the refused commit changed nothing
    session.errors.clear()  # the refused request (409) is logged as a resource error
    session.check_clean()


def test_a_row_keeps_its_element_while_reads_come_and_other_rows_go(
    session: Session, target: ConsoleTarget
) -> None:
    # a read that replaced an unchanged row between a press and its release dropped the click:
    # the operator's "Commit…" opened nothing (seen as a flaky browser test)
    first = tool_doubt.in_doubt(target.url)
    page = session.page
    page.goto(target.url + "/#/tools")
    page.locator(_row(first)).wait_for()
    page.eval_on_selector(_row(first), "tr => { tr.marked = true; }")

    second = tool_doubt.in_doubt(target.url)
    page.locator(_row(second)).wait_for()
    session.eval("AC.tools.read().then(() => AC.tools.read())")
    assert page.eval_on_selector(_row(first), "tr => tr.marked === true")

    # the other row leaves (another operator settles it): this one stays, the same element
    page.eval_on_selector(_row(second), "tr => { tr.marked = true; }")
    _retried_by_another_operator(target, first)
    page.locator(_row(first)).wait_for(state="detached")
    assert page.eval_on_selector(_row(second), "tr => tr.marked === true")
    assert page.locator("#reconcile tbody tr").count() >= 1
    session.check_clean()


def test_a_side_effect_still_running_is_listed_and_the_cancel_toast_says_it_runs_on(
    session: Session, target: ConsoleTarget
) -> None:
    with tool_doubt.running(target.url) as held:
        effect = held.call
        page = session.page
        page.goto(target.url + "/#/tools")
        row = page.locator(_row(effect, "running-effects"))
        row.wait_for()
        cells = row.locator("td").all_text_contents()
        assert cells[1:] == [effect.program_id, "t-mail", effect.tool, "tenant-a"]

        page.goto(f"{target.url}/#/program/{effect.program_id}")
        page.click("#view-program button[data-action=cancel]")  # enabled once its detail shows
        page.click("#confirm-yes")
        toast = page.locator(".toast", has_text=f"cancelled {effect.program_id}")
        toast.wait_for()
        text = toast.text_content() or ""
        assert "side-effecting tools still running: t-mail" in text, text
        assert "they finish and commit" in text, text
        assert "listed under Tools to reconcile" in text, text

        assert effect.state() == "in_progress"  # held by its downstream until now
        held.release()
        wait_until(lambda: effect.state() == "committed")  # ran on to its end: not in doubt
        assert held.deliveries == 1
        page.click("#tabs a[data-view=tools]")
        row.wait_for(state="detached")
        session.check_clean()


def test_a_tenant_key_is_offered_no_tool_calls_and_never_asks(
    session: Session, target: ConsoleTarget
) -> None:
    call = tool_doubt.in_doubt(target.url)  # tenant-a's own call, in doubt
    page = session.page
    page.goto(target.url + "/#key=sk-tenant-a")
    session.wait("AC.state.tenantKey && AC.state.overview !== null")
    assert page.locator("#tabs a[data-view=tools]").is_hidden()
    page.evaluate("() => { location.hash = '#/tools'; }")  # typed by hand
    session.wait("AC.state.view === 'tools' && AC.state.refused.tools")
    polls = session.eval("AC.state.stats.polls")
    session.wait(f"AC.state.stats.polls >= {polls} + 2")
    assert page.locator("#tools-refused").is_visible()
    assert page.locator("#tools-body").is_hidden()
    assert page.locator("#reconcile button").count() == 0
    assert [u for u in session.requests if "/v1/operator/tool-calls" in u] == []
    assert call.state() == "needs_reconcile"
    session.check_clean()
