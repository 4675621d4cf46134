"""The console's drain control against the real server: it asks before a drain starts, the
server drains and ends it, the header says so at once, and a tenant's key is not offered it.

The module's server (``target``) drains for every tenant, the demo agents included, and a
drain is remembered across a restart: each test ends it, whatever happened, before the next.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.ui.browser_session import Session
from tests.ui.browser_target import ConsoleTarget

pytestmark = pytest.mark.browser

TENANT_KEY = "sk-tenant-a"
WHAT_A_DRAIN_DOES = (
    "New calls from every tenant are refused (503, retry later) until the drain ends, "
    "the next call of running programs included; calls already admitted continue."
)


def _draining(target: ConsoleTarget) -> object:
    return target.get("/v1/overview")["draining"]


@pytest.fixture
def undrained(target: ConsoleTarget) -> Iterator[None]:
    """The server admits when the test starts and again when it ends (passed or not)."""
    assert _draining(target) is False
    yield
    headers = {"Authorization": f"Bearer {target.key}"}
    httpx.post(
        target.url + "/v1/operator/drain", json={"enabled": False}, headers=headers
    ).raise_for_status()


def _last_outcome(session: Session, taken: object) -> dict[str, object]:
    session.wait(f"AC.state.outcomes.length > {taken}", timeout_s=30)
    outcome = session.eval("AC.state.outcomes[AC.state.outcomes.length - 1]")
    assert isinstance(outcome, dict)
    return outcome


def test_the_operator_starts_a_drain_after_confirming_and_ends_it(
    session: Session, target: ConsoleTarget, undrained: None
) -> None:
    page = session.page
    page.goto(target.url + "/#/overview")
    session.wait("AC.state.overview !== null")
    button = page.locator("#drain")
    assert button.is_visible()
    assert button.text_content() == "Drain"
    assert page.locator("#draining").is_hidden()

    # keeping: nothing is sent, nothing changes
    button.click()
    assert page.locator("#confirm").is_visible()
    assert WHAT_A_DRAIN_DOES in (page.text_content("#confirm-text") or "")
    page.get_by_role("button", name="Keep", exact=True).click()
    assert page.locator("#confirm").is_hidden()
    assert not [u for u in session.requests if u.endswith("/v1/operator/drain")]
    assert _draining(target) is False
    assert button.text_content() == "Drain"

    # confirming: the server drains and the header says so without waiting for the feed
    taken = session.eval("AC.state.outcomes.length")
    button.click()
    page.click("#confirm-yes")
    outcome = _last_outcome(session, taken)
    assert (outcome["action"], outcome["ok"]) == ("drain", True), outcome
    assert outcome["text"] == "draining: new calls refused"
    assert _draining(target) is True
    page.locator("#draining").wait_for(state="visible")
    page.locator(".toast", has_text="draining: new calls refused").wait_for()
    session.wait("document.getElementById('drain').textContent === 'End drain'")

    # ending it asks nothing
    taken = session.eval("AC.state.outcomes.length")
    button.click()
    outcome = _last_outcome(session, taken)
    assert (outcome["action"], outcome["ok"], outcome["text"]) == ("drain", True, "drain ended")
    assert page.locator("#confirm").is_hidden()
    assert _draining(target) is False
    page.locator("#draining").wait_for(state="hidden")
    session.wait("document.getElementById('drain').textContent === 'Drain'")

    actions = target.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    drains = [(a["args"]["enabled"], a["result"]) for a in actions if a["action"] == "drain"]
    assert sorted(drains) == [(False, "ok"), (True, "ok")], drains
    session.check_clean()


def test_a_tenant_key_is_not_offered_the_drain_and_a_forced_one_is_refused(
    session: Session, target: ConsoleTarget, undrained: None
) -> None:
    page = session.page
    page.goto(target.url + f"/#key={TENANT_KEY}")
    session.wait("AC.state.tenantKey && AC.state.overview !== null")
    assert page.locator("#drain").is_hidden()
    assert not [u for u in session.requests if "/v1/operator/drain" in u]

    # a drain asked anyway (the control is hidden, not gone): the server refuses it (403) and
    # the page says it failed instead of claiming a drain
    taken = session.eval("AC.state.outcomes.length")
    session.eval("AC.drain(true)")
    outcome = _last_outcome(session, taken)
    assert (outcome["action"], outcome["ok"]) == ("drain", False), outcome
    toast = page.locator(".toast.error", has_text="drain:")
    toast.wait_for()
    assert _draining(target) is False
    assert page.locator("#draining").is_hidden()
    session.errors.clear()  # the refused request is logged as a resource error, as it should
    session.check_clean()
