"""The consoles' typed view of the tool calls that need an operator: why each is in doubt,
the two lists in the order an operator works them, and each call's tenant read once per
program (an intent does not name it)."""

from __future__ import annotations

import json

import pytest

from agentconsole.httpclient import NotFoundError
from agentconsole.ui.client.toolcalls import (
    STOPPED_MID_CALL,
    ProgramTenants,
    ToolCall,
    parse_result,
    read_board,
)


def _intent(
    key: str, state: str, *, program: str = "p1", side_effect: bool = True, **rest: object
) -> dict[str, object]:
    return {
        "tool_call_id": key,
        "program_id": program,
        "node_id": "n1",
        "tool": "send_mail",
        "side_effect": side_effect,
        "idempotent": False,
        "state": state,
        "epoch": 1,
        "created_at": rest.get("created_at", 100.0),
        "updated_at": rest.get("updated_at", 101.0),
        "error": rest.get("error"),
    }


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (
            json.dumps(
                {"type": "tool_timeout", "message": "no answer within 0.3 s", "outcome": "timeout"}
            ),
            "tool_timeout: no answer within 0.3 s",
        ),
        (None, STOPPED_MID_CALL),  # flagged by the start-up recovery: nothing stored
        ("the downstream hung up", "the downstream hung up"),  # plain text, as it is
    ],
    ids=["stored-failure", "crash", "plain"],
)
def test_why_a_call_is_in_doubt(error: str | None, why: str) -> None:
    assert ToolCall.parse(_intent("tc_1", "needs_reconcile", error=error)).why == why


def test_the_board_lists_the_longest_waiting_first_and_only_running_side_effects() -> None:
    listed = {
        "needs_reconcile": [  # the route's order: most recently changed first
            _intent("tc_new", "needs_reconcile", updated_at=300.0),
            _intent("tc_old", "needs_reconcile", updated_at=200.0, program="p2"),
        ],
        "in_progress": [
            _intent("tc_read", "in_progress", side_effect=False),
            _intent("tc_late", "in_progress", created_at=50.0),
            _intent("tc_early", "in_progress", created_at=10.0, program="p2"),
        ],
    }
    looked_up: list[str] = []

    def lookup(program_id: str) -> str:
        looked_up.append(program_id)
        return {"p1": "tenant-a", "p2": "tenant-b"}[program_id]

    def list_calls(state: str) -> list[ToolCall]:
        return [ToolCall.parse(c) for c in listed[state]]

    tenants = ProgramTenants(lookup)
    board = read_board(list_calls, tenants)
    assert [c.tool_call_id for c in board.needs_reconcile] == ["tc_old", "tc_new"]
    assert [c.tool_call_id for c in board.running] == ["tc_early", "tc_late"]
    assert [c.tenant for c in board.needs_reconcile] == ["tenant-b", "tenant-a"]
    assert board.find("tc_new") is board.needs_reconcile[1]
    assert board.find("tc_early") is None  # running: nothing to reconcile
    read_board(list_calls, tenants)
    assert sorted(looked_up) == ["p1", "p2"]  # once a program: it never changes tenant


def test_a_tenant_that_cannot_be_read_is_unknown_and_asked_again() -> None:
    asked: list[str] = []

    def lookup(program_id: str) -> str:
        asked.append(program_id)
        raise NotFoundError(404, "not_found", "no such program")

    tenants = ProgramTenants(lookup)
    assert tenants.tenant_of("p1") is None
    assert tenants.tenant_of("p1") is None
    assert asked == ["p1", "p1"]


def test_a_commit_s_result_is_json_or_null() -> None:
    assert parse_result("") is None
    assert parse_result('  {"sent": true} ') == {"sent": True}
    with pytest.raises(ValueError, match="not JSON"):
        parse_result("{sent")
