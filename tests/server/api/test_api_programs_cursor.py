"""``GET /v1/programs`` pages by keyset cursor: stable while programs finish and start between
two page reads, where the deprecated ``offset`` skips rows; a bad cursor is a clear 422."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from agentconsole.client import AgentConsole
from tests.server.api.harness import LiveServer

PAGE = 5


def _page(client: httpx.Client, params: dict[str, Any]) -> dict[str, Any]:
    response = client.get("/v1/programs", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _ids(body: dict[str, Any]) -> list[str]:
    return [str(p["program_id"]) for p in body["programs"]]


def _open(client: httpx.Client, program_id: str, batch: str) -> None:
    created = client.post("/v1/programs", json={"program_id": program_id, "labels": {"b": batch}})
    assert created.status_code == 201, created.text


def test_cursor_pages_neither_skip_nor_repeat_while_programs_finish_and_start(
    server: LiveServer,
) -> None:
    """The console's case: over one page of running programs, three of the first page finish
    and one starts between the reads of page 1 and page 2. Every program running through the
    whole walk is listed exactly once by the cursor walk; the offset walk over the same
    churn loses two of them (the rows moved up into the first page's slots)."""
    with server.client("sk-b") as c:
        before = [f"cur-{i:02d}" for i in range(12)]
        for program_id in before:
            _open(c, program_id, "cursor-churn")
        query: dict[str, Any] = {"state": "running", "label": "b:cursor-churn", "limit": PAGE}
        first = _page(c, query)
        page1 = _ids(first)
        assert len(page1) == PAGE
        assert first["total"] == len(before)
        assert first["next_cursor"]

        finished = page1[:3]
        for program_id in finished:
            assert c.post(f"/v1/programs/{program_id}/finish", json={"success": True}).is_success
        _open(c, "cur-new", "cursor-churn")  # newest: it belongs to a fresh first page

        by_cursor = list(page1)
        cursor = first["next_cursor"]
        while cursor is not None:
            body = _page(c, {**query, "cursor": cursor})
            assert len(body["programs"]) <= PAGE
            by_cursor += _ids(body)
            cursor = body["next_cursor"]

        by_offset = list(page1)
        offset = PAGE
        while rows := _ids(_page(c, {**query, "offset": offset})):
            by_offset += rows
            offset += PAGE

    throughout = set(before) - set(finished)
    assert len(by_cursor) == len(set(by_cursor)), "the cursor walk repeated a program"
    assert throughout <= set(by_cursor), "the cursor walk skipped a program"
    assert "cur-new" not in by_cursor  # newer than the cursor: not slipped into page 2
    assert by_cursor == sorted(by_cursor, reverse=True)  # still newest first
    skipped = throughout - set(by_offset)
    assert len(skipped) == 2, f"offset paging should skip the two rows that moved up: {skipped}"


def test_a_new_program_shifts_offset_pages_but_not_cursor_pages(server: LiveServer) -> None:
    """Programs starting between reads: the offset walk repeats rows, the cursor walk not."""
    with server.client("sk-b") as c:
        for i in range(2 * PAGE):
            _open(c, f"arr-{i:02d}", "cursor-arrivals")
        query: dict[str, Any] = {"label": "b:cursor-arrivals", "limit": PAGE}
        first = _page(c, query)
        for i in range(2):
            _open(c, f"arr-new-{i}", "cursor-arrivals")
        by_cursor = _ids(first) + _ids(_page(c, {**query, "cursor": first["next_cursor"]}))
        by_offset = _ids(first) + _ids(_page(c, {**query, "offset": PAGE}))
    assert sorted(by_cursor) == [f"arr-{i:02d}" for i in range(2 * PAGE)]
    assert len(set(by_offset)) == len(by_offset) - 2  # two rows read twice


def test_the_last_page_has_no_cursor(server: LiveServer) -> None:
    with server.client("sk-b") as c:
        for i in range(PAGE):
            _open(c, f"last-{i}", "cursor-last")
        query: dict[str, Any] = {"label": "b:cursor-last", "limit": PAGE}
        whole = _page(c, query)
        assert len(whole["programs"]) == PAGE
        assert whole["next_cursor"] is None  # exactly one page: no empty read after it
        head = _page(c, {**query, "limit": PAGE - 1})
        tail = _page(c, {**query, "limit": PAGE - 1, "cursor": head["next_cursor"]})
        assert _ids(head) + _ids(tail) == _ids(whole)
        assert tail["next_cursor"] is None
        assert tail["total"] == PAGE  # every match, not what is left


def _forged(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not a cursor!",  # outside the cursor's alphabet
        "abc",  # not base64 of anything
        _forged({"created_at": 1.0}),  # JSON, not our shape
        _forged([2, 1.0, "p"]),  # a format this server does not write
        _forged([1, "1.0", "p"]),
        _forged([1, 1.0, ""]),
        "WzEsTmFOLCJwIl0",  # [1,NaN,"p"]
        _forged([1, 10**330, "p"]),  # an integer no float holds (was a 500)
        "",
    ],
)
def test_a_bad_cursor_is_a_clear_422(server: LiveServer, cursor: str) -> None:
    with server.client("sk-b") as c:
        response = c.get("/v1/programs", params={"cursor": cursor})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "cursor"
    assert error["type"] == "invalid_request"


def test_cursor_and_offset_together_are_refused(server: LiveServer) -> None:
    with server.client("sk-b") as c:
        for i in range(2):
            _open(c, f"both-{i}", "cursor-both")
        first = _page(c, {"label": "b:cursor-both", "limit": 1})
        both = {"label": "b:cursor-both", "cursor": first["next_cursor"], "offset": 1}
        response = c.get("/v1/programs", params=both)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "offset"
        # offset=0 is the default, so it says nothing against a cursor
        assert _page(c, {**both, "offset": 0})["programs"]


def test_the_python_client_walks_pages_by_next_cursor(server: LiveServer) -> None:
    with server.client("sk-b") as c:
        for i in range(2 * PAGE + 1):
            _open(c, f"sdk-{i:02d}", "cursor-sdk")
    walked: list[str] = []
    with AgentConsole(server.url, "sk-b") as console:
        page = console.list_programs(label="b:cursor-sdk", limit=PAGE)
        walked += [p.program_id for p in page.programs]
        while page.next_cursor is not None:
            page = console.list_programs(label="b:cursor-sdk", limit=PAGE, cursor=page.next_cursor)
            walked += [p.program_id for p in page.programs]
        whole = console.list_programs(label="b:cursor-sdk", limit=100)
    assert whole.next_cursor is None
    assert walked == [p.program_id for p in whole.programs]
    assert sorted(walked) == [f"sdk-{i:02d}" for i in range(2 * PAGE + 1)]
