"""The client's request building and error mapping, against a mock transport."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agentconsole.client import (
    AgentConsole,
    ApiError,
    AuthenticationError,
    ConflictError,
    IdempotencyMismatchError,
    NeedsReconcileError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
    ToolFailedError,
    ValidationError,
    program_headers,
)


def _console(status: int, body: Any, seen: list[httpx.Request], **headers: str) -> AgentConsole:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json=body, headers=headers)

    http = httpx.Client(transport=httpx.MockTransport(handler))
    return AgentConsole("http://server/", "sk-x", http=http)


def _error(kind: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": "m", **extra}}


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (401, {"status_code": 401, "detail": "bad"}, AuthenticationError),
        (403, _error("forbidden"), PermissionDeniedError),
        (403, _error("quota_exceeded"), QuotaExceededError),
        (404, _error("not_found"), NotFoundError),
        (409, _error("program_not_running"), ConflictError),
        (409, _error("needs_reconcile", tool_call_id="tc_1"), NeedsReconcileError),
        (413, _error("payload_too_large"), PayloadTooLargeError),
        (422, _error("invalid_arguments", field="arguments/a"), ValidationError),
        (422, _error("idempotency_mismatch"), IdempotencyMismatchError),
        (424, _error("tool_timeout", retryable=True, tool_call_id="tc_2"), ToolFailedError),
        (429, _error("rate_limited"), RateLimitError),
        (429, _error("quota_exceeded"), QuotaExceededError),
        (500, "oops", ServerError),
        (418, {}, ApiError),
    ],
)
def test_each_error_answer_maps_to_its_exception(
    status: int, body: Any, cls: type[ApiError]
) -> None:
    with pytest.raises(cls) as info, _console(status, body, [], **{"Retry-After": "3"}) as console:
        console.call_tool("t", "p", "n", {})
    assert type(info.value) is cls
    assert info.value.status == status
    if isinstance(info.value, ToolFailedError):
        assert info.value.retryable
        assert info.value.tool_call_id == "tc_2"
    if isinstance(info.value, NeedsReconcileError):
        assert info.value.tool_call_id == "tc_1"
    if isinstance(info.value, RateLimitError):
        assert info.value.retry_after == 3.0
    if status == 422 and cls is ValidationError:
        assert info.value.field == "arguments/a"


def test_requests_carry_the_key_encoded_ids_and_no_null_fields() -> None:
    seen: list[httpx.Request] = []
    tool = {"name": "t", "parameters": {}, "executor": {"type": "agent"}, "side_effect": True}
    with _console(201, tool, seen) as console:
        registered = console.register_tool("t", {}, {"type": "agent"}, side_effect=True)
        console.call_tool("a/b", "p 1", "n?", {"x": 1}, attempt=2)
        console.tool_finished("p", "n", "timeout")
    assert registered.side_effect
    assert [r.url.raw_path.decode() for r in seen] == [
        "/v1/tools",
        "/v1/tools/a%2Fb/call",
        "/v1/programs/p/tool-calls/finish",
    ]
    assert all(r.headers["authorization"] == "Bearer sk-x" for r in seen)
    assert json.loads(seen[0].content) == tool
    assert json.loads(seen[1].content) == {
        "program_id": "p 1", "node_id": "n?", "arguments": {"x": 1}, "attempt": 2
    }  # fmt: skip
    assert json.loads(seen[2].content) == {"node_id": "n", "outcome": "timeout"}


def test_openai_helpers_name_the_program_in_headers() -> None:
    console = AgentConsole("http://h:1/", "sk-y")
    assert program_headers("p", "n", ["a", "b"]) == {
        "X-Program-Id": "p", "X-Node-Id": "n", "X-Parent-Ids": "a,b"
    }  # fmt: skip
    assert console.openai_kwargs("p") == {
        "base_url": "http://h:1/v1", "api_key": "sk-y", "default_headers": {"X-Program-Id": "p"}
    }  # fmt: skip
    console.close()
