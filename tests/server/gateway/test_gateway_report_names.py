"""What ``POST /v1/programs/{id}/tool-calls/start`` takes as the tool's name, over real HTTP
against the real server and store.

Agent-run tools need not be registered (docs/API.md: any name the tenant does not see is the
agent's own tool), so an unknown name, and another tenant's tool, which must answer as an
unknown name does, are accepted with no registered spec. The name is shown by both consoles,
so it is bounded: a tool name's characters and at most 64 of them, or 422 naming ``tool``;
a trailing newline (which Python's ``$`` lets through) is refused like any control character,
here and in the ids and names the gateway shares the rule with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.api.harness import OPERATOR, LiveServer, gateway_server
from tests.server.gateway.helpers import tool_body

ECHO = {"type": "builtin", "name": "echo"}
#: a registered spec differs from the default one an agent's own tool gets in these fields
REGISTERED = {"side_effect": True, "idempotent": False, "timeout_s": 7.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("names")) / "names.duckdb"
    with gateway_server(db) as live:
        with live.client("sk-b") as b:
            registered = b.post("/v1/tools", json=tool_body("b_mail", ECHO, **REGISTERED))
            assert registered.status_code == 201, registered.text
        with live.client("sk-a") as a:
            registered = a.post("/v1/tools", json=tool_body("a_echo", ECHO, **REGISTERED))
            assert registered.status_code == 201, registered.text
        yield live


def _start(a: httpx.Client, program_id: str, node_id: str, tool: str) -> httpx.Response:
    return a.post(
        f"/v1/programs/{program_id}/tool-calls/start", json={"node_id": node_id, "tool": tool}
    )


def _nodes(a: httpx.Client, program_id: str) -> dict[str, dict[str, Any]]:
    answer = a.get(f"/v1/programs/{program_id}")
    assert answer.status_code == 200, answer.text
    return {n["node_id"]: n for n in answer.json()["nodes"]}


def _spec(node: dict[str, Any]) -> dict[str, Any]:
    return {key: node[key] for key in REGISTERED}


def test_an_unknown_or_foreign_name_is_the_agents_own_tool(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": "own"}).status_code == 201
        unknown = _start(a, "own", "n-unknown", "never_registered")
        foreign = _start(a, "own", "n-foreign", "b_mail")
        registered = _start(a, "own", "n-registered", "a_echo")  # a builtin, run by the agent
        nodes = _nodes(a, "own")
    for answer in (unknown, foreign, registered):
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "running"
    # another tenant's tool answers as a name nobody registered: its spec is not lent
    assert _spec(nodes["n-foreign"]) == _spec(nodes["n-unknown"]) != REGISTERED
    assert _spec(nodes["n-registered"]) == REGISTERED
    assert nodes["n-foreign"]["tool"] == "b_mail"


@pytest.mark.parametrize(
    "tool",
    [
        "x" * 10_000,
        "y" * 65,
        "bell\x07name",
        "trailing_newline\n",
        "a_echo\n",  # a registered name made another by a newline
        "tab\tname",
        "",
        "1starts_with_a_digit",
        "spa ce",
    ],
    ids=[
        "10KB",
        "65-chars",
        "bell",
        "trailing-newline",
        "registered-name-with-newline",
        "tab",
        "empty",
        "leading-digit",
        "space",
    ],
)
def test_a_name_no_tool_may_have_is_refused_naming_the_field(server: LiveServer, tool: str) -> None:
    with server.client("sk-a") as a:
        created = a.post("/v1/programs", json={})
        assert created.status_code == 201, created.text
        program_id = created.json()["program_id"]
        refused = _start(a, program_id, "n1", tool)
        nodes = _nodes(a, program_id)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "tool"
    assert "64" in error["message"]  # says the bound, not only that it is wrong
    assert nodes == {}


def test_a_node_id_with_a_trailing_newline_is_refused(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        assert a.post("/v1/programs", json={"program_id": "ids"}).status_code == 201
        refused = _start(a, "ids", "n1\n", "search")
        call = a.post(
            "/v1/tools/a_echo/call",
            json={"program_id": "ids", "node_id": "n2\n", "arguments": {"text": "hi"}},
        )
        nodes = _nodes(a, "ids")
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "node_id"
    assert call.status_code == 422, call.text
    assert call.json()["error"]["field"] == "node_id"
    assert nodes == {}


def test_a_tool_name_with_a_trailing_newline_is_not_registered(server: LiveServer) -> None:
    with server.client("sk-a") as a:
        named = a.post("/v1/tools", json=tool_body("newline_tool\n", ECHO))
    with server.client(OPERATOR) as op:
        for_tenant = op.post(
            "/v1/tools", json=tool_body("shared_tool", ECHO, allowed_tenants=["tenant-a\n"])
        )
        names = {t["name"] for t in op.get("/v1/tools").json()["tools"]}
    assert named.status_code == 422, named.text
    assert named.json()["error"]["field"] == "name"
    assert for_tenant.status_code == 422, for_tenant.text
    assert for_tenant.json()["error"]["field"] == "allowed_tenants"
    assert "newline_tool\n" not in names
    assert "shared_tool" not in names
