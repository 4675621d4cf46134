"""The browser console's node cancel against the real server: a node picked in the DAG is
offered a cancel only while it has not ended; the question says what it stops; the server
withdraws the node and its pending child while the program runs on; the toast says so and the
page draws the withdrawn nodes apart."""

from __future__ import annotations

import httpx
import pytest

from tests.ui.browser_session import Session
from tests.ui.browser_target import ConsoleTarget

pytestmark = pytest.mark.browser


def _declare_child(target: ConsoleTarget, program_id: str) -> None:
    """A pending LLM node ``n2`` under the program's running tool ``n1``."""
    node = {"node_id": "n2", "kind": "llm", "parents": ["n1"]}
    headers = {"Authorization": f"Bearer {target.key}"}
    url = f"{target.url}/v1/programs/{program_id}/nodes"
    httpx.post(url, json=node, headers=headers).raise_for_status()


def _node(target: ConsoleTarget, program_id: str, node_id: str) -> dict[str, object]:
    nodes = target.get(f"/v1/programs/{program_id}")["nodes"]
    assert isinstance(nodes, list)
    found: dict[str, object] = next(n for n in nodes if n["node_id"] == node_id)
    return found


def test_a_picked_node_is_cancelled_with_its_descendants_after_confirming(
    session: Session, target: ConsoleTarget
) -> None:
    program_id = target.new_running_program()  # n0 (LLM, done) -> n1 (the agent's tool)
    _declare_child(target, program_id)
    page = session.page
    page.goto(f"{target.url}/#/program/{program_id}")
    session.wait("AC.state.detail && AC.state.detail.nodes.length === 3")
    button = page.locator("#cancel-node")
    assert button.is_disabled()  # nothing picked yet

    # an ended node is not offered
    page.locator('#dag .node[data-node="n0"]').click()
    assert button.text_content() == "Cancel node n0…"
    assert button.is_disabled()

    # the running tool is; keeping sends nothing
    page.locator('#dag .node[data-node="n1"]').click()
    assert button.text_content() == "Cancel node n1…"
    assert button.is_enabled()
    assert page.locator('#nodes tr.picked[data-node="n1"]').count() == 1
    button.click()
    assert page.locator("#confirm").is_visible()
    question = page.text_content("#confirm-text") or ""
    assert f"Cancel node n1 (web_search, running) of program {program_id}" in question
    assert "and its 1 descendants not yet ended (n2)" in question
    assert "side-effecting tools run on to their commit" in question
    assert page.text_content("#confirm-yes") == "Cancel node"
    page.get_by_role("button", name="Keep", exact=True).click()
    assert not [u for u in session.requests if u.endswith("/nodes/n1/cancel")]
    assert _node(target, program_id, "n1")["state"] == "running"

    # confirming: the server withdraws n1 and n2, the program runs on
    taken = session.eval("AC.state.outcomes.length")
    button.click()
    page.click("#confirm-yes")
    session.wait(f"AC.state.outcomes.length > {taken}", timeout_s=30)
    outcome = session.eval("AC.state.outcomes[AC.state.outcomes.length - 1]")
    assert isinstance(outcome, dict)
    assert (outcome["action"], outcome["ok"]) == ("cancel node", True), outcome
    assert outcome["text"] == (
        f"cancelled n1 of {program_id} and 1 descendants: 0 calls aborted, 0 tools "
        "interrupted; the agent's own tools left to it: n1"
    )
    page.locator(".toast", has_text=f"cancelled n1 of {program_id}").wait_for()
    for node_id in ("n1", "n2"):
        node = _node(target, program_id, node_id)
        assert (node["state"], node["withdrawn"]) == ("cancelled", True), node
    assert target.get(f"/v1/programs/{program_id}")["state"] == "running"
    actions = target.get("/v1/operator/audit?limit=200")["actions"]
    assert isinstance(actions, list)
    rows = [
        a["args"] for a in actions if a["action"] == "cancel_node" and a["target"] == program_id
    ]
    assert rows == [{"node_id": "n1"}], rows

    # the page draws them withdrawn, and offers no second cancel of the ended node
    session.wait("document.querySelectorAll('#dag .node.withdrawn').length === 2")
    session.wait("document.querySelectorAll('#nodes td.withdrawn').length === 2")
    assert page.locator('#nodes tr[data-node="n1"] td.withdrawn').text_content() == "withdrawn"
    assert page.locator('#nodes tr[data-node="n0"] td.withdrawn').count() == 0
    session.wait("document.getElementById('cancel-node').disabled")
    session.check_clean()
