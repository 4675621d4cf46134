"""Every bad input answers 4xx with the JSON error shape, never 5xx (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.api.harness import OPERATOR, LiveServer, chat_body

CHAT = "/v1/chat/completions"
BIG = "x" * (5 * 1024 * 1024)  # over the 4 MiB body limit

# (name, method, path, key, json body or raw bytes, extra headers, expected status): an invalid
# request is 422 but on OpenAI's routes (chat), which answer it 400 as OpenAI does
CASES: list[tuple[str, str, str, str | None, Any, dict[str, str], int]] = [
    ("no key", "POST", CHAT, None, chat_body(), {}, 401),
    ("unknown key", "POST", CHAT, "sk-nope", chat_body(), {}, 401),
    ("malformed json", "POST", CHAT, "sk-a", b"{not json", {}, 400),
    ("json array", "POST", CHAT, "sk-a", [1, 2], {}, 400),
    ("no messages", "POST", CHAT, "sk-a", {"model": "m", "messages": []}, {}, 400),
    ("no model", "POST", CHAT, "sk-a", {"messages": [{"role": "user", "content": "x"}]}, {}, 400),
    ("bad role", "POST", CHAT, "sk-a", chat_body() | {"messages": [{"role": "x"}]}, {}, 400),
    ("no content", "POST", CHAT, "sk-a", chat_body() | {"messages": [{"role": "user"}]}, {}, 400),
    ("n=2", "POST", CHAT, "sk-a", chat_body(n=2), {}, 400),
    ("max_tokens 0", "POST", CHAT, "sk-a", chat_body(max_tokens=0), {}, 400),
    ("max_tokens huge", "POST", CHAT, "sk-a", chat_body(max_tokens=10**7), {}, 400),
    ("temperature 9", "POST", CHAT, "sk-a", chat_body(temperature=9), {}, 400),
    ("stop x5", "POST", CHAT, "sk-a", chat_body(stop=["a", "b", "c", "d", "e"]), {}, 400),
    ("bad tool type", "POST", CHAT, "sk-a", chat_body(tools=[{"type": "x"}]), {}, 400),
    (
        "tool_choice unknown tool",
        "POST",
        CHAT,
        "sk-a",
        chat_body(
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice={"type": "function", "function": {"name": "g"}},
        ),
        {},
        400,
    ),
    (
        "bad program id",
        "POST",
        CHAT,
        "sk-a",
        chat_body(agentconsole={"program_id": "a/b"}),
        {},
        400,
    ),
    ("unknown extra", "POST", CHAT, "sk-a", chat_body(agentconsole={"nope": 1}), {}, 400),
    ("bad header id", "POST", CHAT, "sk-a", chat_body(), {"X-Program-Id": "a b"}, 400),
    ("bad parent ids", "POST", CHAT, "sk-a", chat_body(), {"X-Parent-Ids": "ok,b/d"}, 400),
    (
        "unknown parent",
        "POST",
        CHAT,
        "sk-a",
        chat_body(agentconsole={"program_id": "mal-1", "parent_ids": ["zz"]}),
        {},
        404,
    ),
    ("oversized body", "POST", CHAT, "sk-a", chat_body(BIG), {}, 413),
    ("priority range", "POST", CHAT, "sk-a", chat_body(priority=10**6), {}, 400),
    ("program extra field", "POST", "/v1/programs", "sk-a", {"nope": True}, {}, 422),
    ("negative quota", "POST", "/v1/programs", "sk-a", {"quotas": {"tokens": -1}}, {}, 422),
    ("bad deadline", "POST", "/v1/programs", "sk-a", {"deadline_s": "soon"}, {}, 422),
    ("labels not str", "POST", "/v1/programs", "sk-a", {"labels": {"a": 1}}, {}, 422),
    ("list limit 0", "GET", "/v1/programs?limit=0", "sk-a", None, {}, 422),
    ("list bad state", "GET", "/v1/programs?state=zombie", "sk-a", None, {}, 422),
    ("unknown program", "GET", "/v1/programs/nope-123", "sk-a", None, {}, 404),
    ("program id pattern", "GET", "/v1/programs/a%20b", "sk-a", None, {}, 422),
    ("cancel unknown", "POST", "/v1/programs/nope-123/cancel", "sk-a", None, {}, 404),
    ("node no kind", "POST", "/v1/programs/nope-1/nodes", "sk-a", {"node_id": "n"}, {}, 422),
    (
        "tool node no tool",
        "POST",
        "/v1/programs/x/nodes",
        "sk-a",
        {"node_id": "n", "kind": "tool"},
        {},
        422,
    ),
    ("operator with tenant key", "POST", "/v1/operator/drain", "sk-a", {"enabled": True}, {}, 403),
    ("operator no body", "POST", "/v1/operator/drain", "sk-operator", None, {}, 422),
    (
        "operator bad policy",
        "POST",
        "/v1/operator/policy",
        "sk-operator",
        {"policy": "nope"},
        {},
        422,
    ),
    ("audit limit", "GET", "/v1/operator/audit?limit=-1", "sk-operator", None, {}, 422),
    ("events since", "GET", "/v1/events?since=-5", "sk-a", None, {}, 422),
    ("unknown route", "GET", "/v1/nothing", "sk-a", None, {}, 404),
    ("wrong method", "DELETE", "/v1/programs", "sk-a", None, {}, 405),
]


@pytest.mark.parametrize(
    ("method", "path", "key", "body", "headers", "status"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_input_is_a_4xx_json_error(
    server: LiveServer,
    method: str,
    path: str,
    key: str | None,
    body: Any,
    headers: dict[str, str],
    status: int,
) -> None:
    with server.client(key) as client:
        if isinstance(body, bytes):
            headers = {**headers, "Content-Type": "application/json"}
            response = client.request(method, path, content=body, headers=headers)
        else:
            response = client.request(method, path, json=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["type"], str)
    assert isinstance(error["message"], str)
    assert error["message"]


def test_validation_error_names_the_field(server: LiveServer) -> None:
    with server.client() as client:
        response = client.post(CHAT, json=chat_body(max_tokens=0))
    assert response.json()["error"]["field"].startswith("max_tokens")


def test_a_refused_parameter_is_named_as_the_client_sent_it(server: LiveServer) -> None:
    """A query parameter the handler takes under another name (``state`` is reserved by
    Litestar) and an operator field are named as the request spells them."""
    with server.client() as client:
        listed = client.get("/v1/programs", params={"state": "zzz"})
    assert listed.status_code == 422
    assert listed.json()["error"]["field"] == "state"
    with server.client(OPERATOR) as op:
        unknown = op.post("/v1/operator/policy", json={"kv_policy": "zzz"})
    assert unknown.status_code == 422
    assert unknown.json()["error"]["field"] == "kv_policy"
