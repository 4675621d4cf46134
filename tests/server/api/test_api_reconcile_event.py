"""An operator's reconcile of a tool call in doubt is on the event feed (``tool.reconciled``,
shaped as the other tool events), so every console's Tools view refreshes at once instead of
at its 5 s poll; both consoles count it among the tool events they refresh on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentconsole.scheduler.events import EventKind
from agentconsole.ui.client.toolcalls import TOOL_EVENT_KINDS
from tests.server.api.harness import OPERATOR
from tests.server.api.test_api_cancel_effects import _hub_events
from tests.server.api.test_api_gateway_doubt import SLEEP, SLEEP_PARAMS, _effect, _server

TOOLS_JS = Path(__file__).parents[3] / "ui" / "web" / "static" / "tools.js"


@pytest.mark.parametrize("action", ["commit", "retry"])
def test_a_reconcile_is_an_event_of_the_programs_tenant(tmp_path: Path, action: str) -> None:
    with _server(tmp_path / "reconcile.duckdb") as (live, _), live.client() as c:
        body = _effect("send", SLEEP, parameters=SLEEP_PARAMS, timeout_s=0.2)
        assert c.post("/v1/tools", json=body).status_code == 201
        assert c.post("/v1/programs", json={"program_id": "p"}).status_code == 201
        call = {"program_id": "p", "node_id": "t1", "arguments": {"seconds": 5}}
        assert c.post("/v1/tools/send/call", json=call).status_code == 409  # in doubt
        with live.client(OPERATOR) as op:
            (intent,) = op.get("/v1/operator/tool-calls").json()["tool_calls"]
            decision = {"action": action, **({"result": {"sent": 1}} if action == "commit" else {})}
            settled = op.post(
                f"/v1/operator/tool-calls/{intent['tool_call_id']}/reconcile", json=decision
            )
        events = [e for e in _hub_events(live) if e.kind is EventKind.TOOL_RECONCILED]
    assert settled.status_code == 200, settled.text
    (event,) = events
    assert (event.program_id, event.node_id, event.tenant) == ("p", "t1", "tenant-a")
    assert event.data["tool_call_id"] == intent["tool_call_id"]
    assert event.data["tool"] == "send"
    assert event.data["action"] == action
    assert event.data["state"] == settled.json()["state"]


def test_both_consoles_refresh_their_tools_view_on_a_reconcile() -> None:
    assert EventKind.TOOL_RECONCILED.value in TOOL_EVENT_KINDS
    match = re.search(r"TOOL_EVENTS = new Set\(\[([^\]]*)\]\)", TOOLS_JS.read_text())
    assert match is not None
    web_kinds = set(re.findall(r'"([^"]+)"', match.group(1)))
    assert web_kinds == set(TOOL_EVENT_KINDS)
