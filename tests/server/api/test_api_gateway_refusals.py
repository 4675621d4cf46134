"""The tool gateway against a tenant probing it over real HTTP: a flood of its refusals cannot
hide the operator's actions or grow the audit table without bound, and neither a hidden
platform tool nor another tenant's program answers otherwise than a name nobody has."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.server.api.auth import key_hash
from agentconsole.server.refusals import MAX_REFUSED_TARGET_CHARS
from tests.server.api.harness import OPERATOR, LiveServer, gateway_server
from tests.server.gateway.helpers import tool_body

CALL = {"program_id": "probe", "node_id": "n1", "arguments": {}}
ECHO = {"type": "builtin", "name": "echo"}
HIDDEN = "platform_restricted"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with gateway_server(Path(tmp_path_factory.mktemp("probe")) / "probe.duckdb") as live:
        with live.client(OPERATOR) as op:
            platform = tool_body(HIDDEN, ECHO, allowed_tenants=["tenant-a"], timeout_s=7.0)
            assert op.post("/v1/tools", json=platform).status_code == 201
        yield live


def _same_answer(mine: httpx.Response, theirs: httpx.Response, names: dict[str, str]) -> None:
    """Status and body equal, but for the names each request gave (``names``: theirs ->
    mine)."""
    assert mine.status_code == theirs.status_code
    text = theirs.text
    for their_name, my_name in names.items():
        text = text.replace(their_name, my_name)
    assert mine.json() == json.loads(text)


def _audit(op: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = op.get("/v1/operator/audit", params=params)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def test_an_operators_action_outlives_a_flood_of_gateway_refusals(tmp_path: Path) -> None:
    with gateway_server(tmp_path / "flood.duckdb") as live:
        budget = live.live.desk.refusals
        budget.per_minute = 40  # the server's one budget, the gateway's refusals within it
        with live.client(OPERATOR) as op:
            assert op.post("/v1/operator/drain", json={"enabled": True}).status_code == 200
        with live.client("sk-b") as b:
            assert b.post(f"/v1/tools/{'x' * 60_000}/call", json=CALL).status_code == 404
            for _ in range(100):
                assert b.post("/v1/tools/nope/call", json=CALL).status_code == 404
        operator_actor = f"operator-{key_hash(OPERATOR)[:8]}"
        with live.client(OPERATOR) as op:
            everything = _audit(op, limit=1000)["actions"]
            newest_of_mine = _audit(op, limit=1, actor=operator_actor)["actions"]
            walked: list[dict[str, Any]] = []
            page = _audit(op, limit=7)
            while page["next_before_id"] is not None:
                walked.extend(page["actions"])
                page = _audit(op, limit=7, before_id=page["next_before_id"])
            walked.extend(page["actions"])
    flooder = f"key-{key_hash('sk-b')[:8]}"  # a tenant key, named by its key id
    flood = [r for r in everything if r["actor"] == flooder]
    assert 0 < len(flood) <= budget.per_minute
    assert all(len(r["target"]) <= MAX_REFUSED_TARGET_CHARS for r in everything)
    # reachable by its actor whatever the tenants did since, and by paging back to it
    assert [(r["action"], r["result"]) for r in newest_of_mine] == [("drain", "ok")]
    assert walked == everything
    assert [r["id"] for r in walked] == sorted({r["id"] for r in walked}, reverse=True)


def test_a_malformed_audit_page_is_refused(server: LiveServer) -> None:
    with server.client(OPERATOR) as op:
        for params in ({"before_id": "0"}, {"before_id": "x"}, {"actor": "a" * 129}):
            assert op.get("/v1/operator/audit", params=params).status_code == 422


def test_a_hidden_platform_tool_answers_as_an_unknown_one(server: LiveServer) -> None:
    unknown = "never_registered_x"
    with server.client("sk-b") as b:
        assert HIDDEN not in [t["name"] for t in b.get("/v1/tools").json()["tools"]]
        _same_answer(
            b.post(f"/v1/tools/{HIDDEN}/call", json=CALL),
            b.post(f"/v1/tools/{unknown}/call", json=CALL),
            {unknown: HIDDEN},
        )
        assert b.post("/v1/programs", json={"program_id": "hid-b"}).status_code == 201
        hidden_start, unknown_start = (
            b.post("/v1/programs/hid-b/tool-calls/start", json={"node_id": node, "tool": tool})
            for node, tool in (("n-hidden", HIDDEN), ("n-unknown", unknown))
        )
        _same_answer(hidden_start, unknown_start, {unknown: HIDDEN, "n-unknown": "n-hidden"})
        nodes = [b.get(f"/v1/programs/hid-b/nodes/{n}").json() for n in ("n-hidden", "n-unknown")]
    spec = ("tool_kind", "side_effect", "idempotent", "timeout_s")
    # the node is the agent's own tool, as for any name: not the platform's (timeout 7 s)
    assert [nodes[0][k] for k in spec] == [nodes[1][k] for k in spec]


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("start", {"node_id": "n1", "tool": "search"}),
        ("finish", {"node_id": "n1", "outcome": "ok"}),
    ],
)
def test_a_report_on_a_program_nobody_has_answers_as_on_another_tenants(
    server: LiveServer, route: str, body: dict[str, Any]
) -> None:
    theirs, nobodys = f"a-own-{route}", f"no-one-{route}"
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": theirs}).status_code == 201
    with server.client("sk-b") as b:
        on_theirs = b.post(f"/v1/programs/{theirs}/tool-calls/{route}", json=body)
        on_nobodys = b.post(f"/v1/programs/{nobodys}/tool-calls/{route}", json=body)
        assert b.get(f"/v1/programs/{nobodys}").status_code == 404  # nothing was created
    assert on_theirs.status_code == 404
    _same_answer(on_nobodys, on_theirs, {theirs: nobodys})
