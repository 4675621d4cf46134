"""Bounds a hostile tenant would otherwise use against the others, over real HTTP: the parents
of one call (``X-Parent-Ids`` as the body's ``parent_ids``), the parent links of one program
(what its answer and the server's memory hold), the length of a ``stop`` string (re-checked on
every decode step in the engine's shared scheduler) and the depth of a tool call's
``arguments`` text (a 400, never a 500 from Python's recursion limit)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentconsole.server.api.jsonguard import MAX_JSON_DEPTH
from agentconsole.server.api.schemas import MAX_PARENT_IDS, MAX_STOP_CHARS, AgentExtras
from agentconsole.server.live.chatml import MAX_ARGUMENTS_DEPTH
from agentconsole.server.live.tenants import DEFAULT_PROGRAM_EDGES, TenantLimits
from tests.server.api.harness import LiveServer, chat_body, make_config

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
#: tenant b's programs hold at most this many parent links (tenant a has the default)
SMALL_EDGE_LIMIT = 6


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = Path(tmp_path_factory.mktemp("bounds")) / "bounds.duckdb"
    overrides = {"tenant-b": TenantLimits(program_edges=SMALL_EDGE_LIMIT)}
    with LiveServer(make_config(db, tenant_overrides=overrides)) as live:
        live.wait_ready()
        yield live


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    return error


def _completion(**extra: Any) -> dict[str, Any]:
    return {"model": "sim", "prompt": "hello", "max_tokens": 2, **extra}


# -- X-Parent-Ids ---------------------------------------------------------------------------------
def test_the_body_s_parent_ids_bound_is_the_shared_constant() -> None:
    schema = AgentExtras.model_json_schema()["properties"]["parent_ids"]["anyOf"][0]
    assert schema["maxItems"] == MAX_PARENT_IDS == 256


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_too_many_parent_ids_in_the_header_are_refused_as_in_the_body(
    server: LiveServer, path: str
) -> None:
    program_id = f"hdr-parents-{path.rsplit('/', 1)[-1]}"
    too_many = [f"n{i}" for i in range(MAX_PARENT_IDS + 1)]
    body = chat_body(max_tokens=2) if path == CHAT else _completion()
    headers = {"X-Program-Id": program_id, "X-Parent-Ids": ",".join(too_many)}
    with server.client() as client:
        from_header = _error(client.post(path, json=body, headers=headers), 400)
        extras = {"program_id": program_id, "parent_ids": too_many}
        from_body = _error(client.post(path, json={**body, "agentconsole": extras}), 400)
        # at the bound the count passes: the ids are then looked up (none exists: 404)
        at_bound = {**headers, "X-Parent-Ids": ",".join(too_many[:MAX_PARENT_IDS])}
        _error(client.post(path, json=body, headers=at_bound), 404)
        assert client.get(f"/v1/programs/{program_id}").status_code == 404  # none opened
    assert from_header["field"] == from_header["param"] == "X-Parent-Ids"
    assert from_body["field"] == "agentconsole.parent_ids"
    assert set(from_header) == set(from_body)
    assert from_header["code"] == from_body["code"] == "invalid_request"
    assert str(MAX_PARENT_IDS) in from_header["message"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_parents_without_a_program_id_are_refused_not_dropped(
    server: LiveServer, path: str
) -> None:
    """Without a program id the call continues the program its prompt chain infers: parents
    it names could be checked against none, and were dropped unread (the node made with no
    parents), where with a program id an unknown parent is a 404."""
    body = chat_body("orphan", max_tokens=2) if path == CHAT else _completion()
    with server.client() as client:
        named = {"parent_ids": ["ghost"], "node_id": "mine"}
        from_body = _error(client.post(path, json={**body, "agentconsole": named}), 400)
        from_header = _error(client.post(path, json=body, headers={"X-Parent-Ids": "a,b"}), 400)
        # no parents named, or an empty header: the inferred program as before
        assert client.post(path, json=body, headers={"X-Parent-Ids": ","}).status_code == 200
    assert from_body["field"] == "agentconsole.parent_ids"
    assert from_header["field"] == "X-Parent-Ids"
    assert "program" in from_body["message"]


def test_a_bad_parent_id_in_the_header_is_named_by_the_header_not_echoed(
    server: LiveServer,
) -> None:
    with server.client() as client:
        error = _error(client.post(CHAT, json=chat_body(), headers={"X-Parent-Ids": "ok,b/d"}), 400)
    assert error["field"] == "X-Parent-Ids"


# -- parent links per program ---------------------------------------------------------------------
def test_a_program_holds_at_most_50_000_parent_links_by_default() -> None:
    assert TenantLimits().program_edges == DEFAULT_PROGRAM_EDGES == 50_000


def _declare(client: httpx.Client, program_id: str, node_id: str, parents: list[str]) -> Any:
    node = {"node_id": node_id, "kind": "tool", "tool": "search", "parents": parents}
    return client.post(f"/v1/programs/{program_id}/nodes", json=node)


def _refused_for_edges(response: httpx.Response) -> None:
    error = _error(response, 403)
    assert error["type"] == "tenant_limit"
    assert error["field"] == "limits.program_edges"
    assert "Retry-After" not in response.headers
    assert response.headers["x-should-retry"] == "false"


def test_a_program_s_parent_links_are_bounded_on_every_route(server: LiveServer) -> None:
    pid = "edges-1"
    with server.client("sk-b") as client:
        assert client.post("/v1/programs", json={"program_id": pid}).status_code == 201
        # 0 + 1 + 2 + 3 links: the program is at its limit of 6
        for index in range(4):
            parents = [f"t{i}" for i in range(index)]
            assert _declare(client, pid, f"t{index}", parents).status_code == 201
        _refused_for_edges(_declare(client, pid, "t4", ["t0"]))
        # a chat call's node is a node too: named parents in the header, in the body, or the
        # parents it gets by default (the tool nodes since the last LLM node)
        header = {"X-Program-Id": pid, "X-Parent-Ids": "t0"}
        _refused_for_edges(client.post(CHAT, json=chat_body(max_tokens=2), headers=header))
        extras = {"program_id": pid, "parent_ids": ["t0"]}
        _refused_for_edges(client.post(CHAT, json=chat_body(max_tokens=2, agentconsole=extras)))
        _refused_for_edges(client.post(COMPLETIONS, json=_completion(agentconsole=extras)))
        defaulted = chat_body(max_tokens=2, agentconsole={"program_id": pid})
        _refused_for_edges(client.post(CHAT, json=defaulted))
        # a root adds no link: it passes
        assert _declare(client, pid, "root-2", []).status_code == 201
        detail = client.get(f"/v1/programs/{pid}").json()
        assert len(detail["edges"]) == SMALL_EDGE_LIMIT
        assert {n["node_id"] for n in detail["nodes"]} == {"t0", "t1", "t2", "t3", "root-2"}
        (row,) = client.get("/v1/tenants").json()["tenants"]
        assert row["limits"]["program_edges"] == SMALL_EDGE_LIMIT
    with server.client("sk-a") as other:  # another tenant's default is not the small one
        assert other.post("/v1/programs", json={"program_id": "edges-a"}).status_code == 201
        for index in range(5):
            parents = [f"t{i}" for i in range(index)]
            assert _declare(other, "edges-a", f"t{index}", parents).status_code == 201


# -- stop strings ---------------------------------------------------------------------------------
def test_the_stop_bound_is_generous() -> None:
    assert MAX_STOP_CHARS == 1024


@pytest.mark.parametrize(
    ("stop", "field"),
    [
        ("x" * (MAX_STOP_CHARS + 1), "stop"),
        (["a", "x" * (MAX_STOP_CHARS + 1)], "stop.1"),
        ("x" * (3 * 1024 * 1024), "stop"),
    ],
    ids=["a-string", "in-a-list", "3-MiB"],
)
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_stop_string_over_the_bound_is_refused_naming_it(
    server: LiveServer, path: str, stop: Any, field: str
) -> None:
    body = chat_body(max_tokens=2, stop=stop) if path == CHAT else _completion(stop=stop)
    with server.client() as client:
        error = _error(client.post(path, json=body), 400)
    assert error["field"] == field
    assert error["code"] == "invalid_request"


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_a_stop_string_at_the_bound_is_accepted(server: LiveServer, path: str) -> None:
    stop = ["x" * MAX_STOP_CHARS, "y" * MAX_STOP_CHARS]
    body = chat_body(max_tokens=2, stop=stop) if path == CHAT else _completion(stop=stop)
    with server.client() as client:
        response = client.post(path, json=body)
    assert response.status_code == 200, response.text


# -- tool call arguments --------------------------------------------------------------------------
def test_arguments_nest_as_deep_as_a_body() -> None:
    assert MAX_ARGUMENTS_DEPTH == MAX_JSON_DEPTH


def _with_arguments(arguments: str, program_id: str) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    return chat_body(max_tokens=2, agentconsole={"program_id": program_id}) | {"messages": messages}


@pytest.mark.parametrize("depth", [100_000, 500, MAX_ARGUMENTS_DEPTH + 1])
def test_arguments_nested_too_deep_are_400_invalid_json(server: LiveServer, depth: int) -> None:
    program_id = f"deep-args-{depth}"
    body = _with_arguments("[" * depth + "]" * depth, program_id)
    with server.client() as client:
        error = _error(client.post(CHAT, json=body), 400)
        assert client.get(f"/v1/programs/{program_id}").status_code == 404  # none opened
    assert error["code"] == "invalid_json"
    assert error["field"] == "messages.1.tool_calls.0.function.arguments"
    assert f"nested deeper than {MAX_ARGUMENTS_DEPTH}" in error["message"]


@pytest.mark.parametrize(
    "arguments",
    ["[" * MAX_ARGUMENTS_DEPTH + "]" * MAX_ARGUMENTS_DEPTH, "not json {", '{"city": "Paris"}'],
    ids=["at-the-bound", "not-json", "an-object"],
)
def test_arguments_within_the_bound_or_not_json_are_accepted(
    server: LiveServer, arguments: str
) -> None:
    with server.client() as client:
        response = client.post(CHAT, json=_with_arguments(arguments, "args-ok"))
    assert response.status_code == 200, response.text
