"""Hostile input over real HTTP, core routes and the tool gateway alike: ids echoed in headers,
nesting, numbers, the model's context, and one error shape for the same failure everywhere.
Each refusal happens before anything runs or is billed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.api.harness import OPERATOR, LiveServer, chat_body, gateway_server

CHAT = "/v1/chat/completions"
CALL = "/v1/tools/echo/call"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with gateway_server(Path(tmp_path_factory.mktemp("hostile")) / "hostile.duckdb") as live:
        yield live


#: the status of a request refused as invalid on OpenAI's routes (the others: 422)
_INVALID = {CHAT: 400, "/v1/completions": 400}


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error: dict[str, Any] = body["error"]
    assert isinstance(error["type"], str)
    assert isinstance(error["message"], str)
    return error


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _program(server: LiveServer, program_id: str) -> httpx.Response:
    with server.client() as client:
        return client.get(f"/v1/programs/{program_id}")


@pytest.mark.parametrize(
    "rid", ["a\r\nX-Evil: 1", "nul\x00", "caf\u00e9", "tab\there", "", "x" * 129]
)
@pytest.mark.parametrize("field", ["rid", "request_id"])
def test_a_request_id_that_is_no_header_value_is_refused_before_the_call(
    server: LiveServer, rid: str, field: str
) -> None:
    program_id = f"rid-{field}-{abs(hash(rid)) % 10**8}"
    body = chat_body(**{field: rid}, agentconsole={"program_id": program_id})
    with server.client() as client:
        error = _error(client.post(CHAT, json=body), 400)
    assert error["field"] == field
    assert _program(server, program_id).status_code == 404  # nothing was opened or billed


def test_a_valid_request_id_is_echoed(server: LiveServer) -> None:
    with server.client() as client:
        response = client.post(CHAT, json=chat_body(rid="req-1:a/b~c", max_tokens=2))
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "req-1:a/b~c"


DEEP = b"[" * 1000 + b"]" * 1000


@pytest.mark.parametrize(
    "path",
    [CHAT, "/v1/completions", "/v1/programs", "/v1/programs/x/nodes", "/v1/tools", CALL],
)
def test_json_nested_too_deep_is_400_invalid_json_on_every_route(
    server: LiveServer, path: str
) -> None:
    with server.client() as client:
        deep = _error(client.post(path, content=DEEP), 400)
        inner = json.dumps({"program_id": "p", "node_id": "n", "arguments": _nested(70)})
        inner_error = _error(client.post(path, content=inner.encode()), 400)
    # OpenAI's routes say it in ``code`` (their ``type`` is OpenAI's), the others in both
    assert deep["code"] == inner_error["code"] == "invalid_json"
    assert "nested deeper than 64" in inner_error["message"]


def test_the_depth_limit_is_64_levels(server: LiveServer) -> None:
    with server.client() as client:
        # the body is one level, ``arguments`` and its objects the others
        at_limit = {"program_id": "p", "node_id": "n", "arguments": _nested(63)}
        over = {"program_id": "p", "node_id": "n", "arguments": _nested(64)}
        assert client.post("/v1/tools/nope/call", json=at_limit).status_code == 404
        _error(client.post("/v1/tools/nope/call", json=over), 400)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (CHAT, chat_body(max_tokens="5"), "max_tokens"),
        (CHAT, chat_body(max_tokens=True), "max_tokens"),
        (CHAT, chat_body(max_tokens=2.5), "max_tokens"),
        (CHAT, chat_body(priority="1"), "priority"),
        (CHAT, chat_body(temperature=True), "temperature"),
        (CHAT, chat_body(stream="yes"), "stream"),
        (CHAT, chat_body(n=True), "n"),
        ("/v1/completions", {"model": "m", "prompt": "x", "echo": 0}, "echo"),
        ("/v1/programs", {"quotas": {"tokens": 1e30}}, "quotas.tokens"),
        ("/v1/programs", {"quotas": {"tokens": "5"}}, "quotas.tokens"),
        ("/v1/programs", {"quotas": {"tool_calls": 10**7}}, "quotas.tool_calls"),
        ("/v1/programs", {"deadline_s": True}, "deadline_s"),
    ],
)
def test_numbers_are_strict_and_bounded(
    server: LiveServer, path: str, body: dict[str, Any], field: str
) -> None:
    with server.client() as client:
        error = _error(client.post(path, json=body), _INVALID.get(path, 422))
    assert error["field"] == field


def test_an_integral_float_is_an_integer(server: LiveServer) -> None:
    with server.client() as client:
        created = client.post("/v1/programs", json={"quotas": {"tokens": 5000.0}})
    assert created.status_code == 201, created.text
    assert created.json()["quotas"]["tokens"] == 5000


def test_gateway_numbers_are_bounded(server: LiveServer) -> None:
    tool = {
        "name": "slow",
        "parameters": {"type": "object", "additionalProperties": False},
        "executor": {"type": "agent"},
        "rate_limit_per_s": 1e-300,
    }
    with server.client() as client:
        rate = _error(client.post("/v1/tools", json=tool), 422)
        huge = client.post("/v1/tools", content=b'{"name": "t", "timeout_s": 1' + b"0" * 400 + b"}")
        overflow = client.post("/v1/tools", content=b'{"name": "t", "timeout_s": 1e400}')
    assert rate["field"] == "rate_limit_per_s"
    assert _error(huge, 400)["message"] == "integer out of range (64 bits)"
    assert _error(overflow, 400)["type"] == "invalid_json"


def test_the_same_failure_has_the_same_error_on_core_and_gateway_routes(
    server: LiveServer,
) -> None:
    with server.client() as client:
        core_json = _error(client.post(CHAT, content=b"{nope"), 400)
        tool_json = _error(client.post(CALL, content=b"{nope"), 400)
        core_big = _error(client.post(CHAT, content=b" " * (4 * 1024 * 1024 + 10)), 413)
        tool_big = _error(client.post(CALL, content=b" " * (64 * 1024 + 10)), 413)
        core_bad = _error(client.post("/v1/programs", json={"nope": 1}), 422)
        tool_bad = _error(client.post(CALL, json={"program_id": "p", "nope": 1}), 422)
        no_body = _error(client.post("/v1/programs"), 422)
    # the chat route is OpenAI's: its ``type`` is OpenAI's, ours its ``code``
    assert core_json["code"] == tool_json["type"] == tool_json["code"] == "invalid_json"
    assert core_big["type"] == tool_big["type"] == "too_large"
    assert core_bad["type"] == tool_bad["type"] == "invalid_request"
    assert no_body["message"] == "a JSON body is required"


def test_a_prompt_over_the_models_context_is_400_before_anything_runs(server: LiveServer) -> None:
    # the simulated llama-3.1-8b serves 131,072 tokens; the sim counts 4 characters a token
    long = "abcd" * 131_000
    body = chat_body(long, max_tokens=200, agentconsole={"program_id": "ctx-1"})
    with server.client() as client:
        chat = _error(client.post(CHAT, json=body), 400)
        text = {"model": "m", "prompt": long * 2, "agentconsole": {"program_id": "ctx-2"}}
        completion = _error(client.post("/v1/completions", json=text), 400)
        fits = client.post(CHAT, json=chat_body(long[:40_000], max_tokens=4))
    assert chat["code"] == completion["code"] == "context_length_exceeded"
    assert chat["type"] == completion["type"] == "invalid_request_error"
    assert chat["field"] == "max_tokens"
    assert completion["field"] == "prompt"
    # both lengths, in the words frameworks match (LiteLLM: OpenAI's opening)
    assert chat["message"].startswith("This model's maximum context length is 131072 tokens")
    asked = re.search(
        r"the request asks (\d+): (\d+) prompt tokens \+ max_tokens 200", chat["message"]
    )
    assert asked is not None, chat["message"]
    assert int(asked[1]) == int(asked[2]) + 200 > 131_072
    assert fits.status_code == 200, fits.text
    # refused before a program was opened: nothing is left behind, the id stays free
    assert _program(server, "ctx-1").status_code == 404


@pytest.mark.parametrize(
    "query",
    ["/v1/programs?state=null", "/v1/programs?state=running&state=failed", "/v1/events?since=null"],
)
def test_query_parameters_are_strict(server: LiveServer, query: str) -> None:
    with server.client() as client:
        error = _error(client.get(query), 422)
    assert error["field"] in ("state", "since")


@pytest.mark.parametrize("last", [b"\xb2", b"9" * 5000, b"-1"])  # b"\xb2": latin-1 "²"
def test_a_bad_last_event_id_starts_at_the_newest_event(server: LiveServer, last: bytes) -> None:
    headers = {b"Last-Event-ID": last}
    with server.client() as client, client.stream("GET", "/v1/events", headers=headers) as feed:
        assert feed.status_code == 200
        assert next(feed.iter_lines()) == ": agentconsole events"


def test_options_lists_every_method_of_a_path(server: LiveServer) -> None:
    with server.client() as client:
        programs = client.options("/v1/programs").headers["allow"]
        tools = client.options("/v1/tools").headers["allow"]
    assert programs == "GET, OPTIONS, POST"
    assert tools == "GET, OPTIONS, POST"


def test_operator_key_bodies_are_as_strict(server: LiveServer) -> None:
    with server.client(OPERATOR) as op:
        error = _error(op.post("/v1/operator/drain", json={"enabled": "yes"}), 422)
    assert error["field"] == "enabled"
